"""The simplifier on random index expressions: how many nodes it removes and how long it takes, top-down (what
`UOp.simplify` runs) vs bottom-up, side by side in one process. `random_index_exprs(n, seed)` is the workload other
benches reuse."""
from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compiler.rewrite import graph_rewrite  # noqa: E402
from compiler.symbolic import symbolic  # noqa: E402
from compiler.uop import AxisType, Ops, UOp, toposort  # noqa: E402


def _leaves(rng: random.Random) -> list[UOp]:
  """A kernel's worth of index variables: loop ranges (non-negative) and symbolic variables (any sign)."""
  out = [UOp.range(rng.choice([2, 3, 4, 8, 16, 32]), axis, rng.choice([AxisType.LOOP, AxisType.REDUCE]))
         for axis in range(rng.randint(1, 4))]
  for i in range(rng.randint(0, 2)):
    lo = rng.randint(-16, 16)
    out.append(UOp.variable(f"v{i}", lo, lo + rng.randint(0, 64)))
  return out


def _expr(rng: random.Random, leaves: list[UOp], depth: int) -> UOp:
  if depth == 0 or rng.random() < 0.15:
    return rng.choice(leaves) if rng.random() < 0.85 else UOp.const(leaves[0].dtype, rng.randint(-8, 8))
  a = _expr(rng, leaves, depth - 1)
  r = rng.random()
  if r < 0.25:  # the shape movement ops leave behind: x*stride + y
    return a * rng.choice([1, 2, 3, 4, 8, 16]) + _expr(rng, leaves, depth - 1)
  if r < 0.4:
    return a + _expr(rng, leaves, depth - 1)
  if r < 0.5:
    return a - _expr(rng, leaves, depth - 1)
  if r < 0.6:
    return a // rng.choice([2, 3, 4, 8, 16, -2, -4])
  if r < 0.72:
    return a % rng.choice([2, 3, 4, 8, 16, -4])
  if r < 0.78:
    return a * _expr(rng, leaves, depth - 1)
  if r < 0.84:
    return a.maximum(_expr(rng, leaves, depth - 1))
  if r < 0.88:
    return -a
  if r < 0.94:
    return (a < _expr(rng, leaves, depth - 1)).where(_expr(rng, leaves, depth - 1), a)
  return a + rng.randint(-8, 8)


def random_index_exprs(n: int, seed: int = 0, depth: int = 6) -> list[UOp]:
  """n random int32 index expressions over RANGEs and bounded DEFINE_VARs (deterministic for a seed)."""
  rng = random.Random(seed)
  out = []
  while len(out) < n:
    e = _expr(rng, _leaves(rng), depth)
    if e.op is not Ops.CONST and e.op not in (Ops.RANGE, Ops.DEFINE_VAR):
      out.append(e)
  return out


def _nodes(exprs: list[UOp]) -> int:
  return sum(len(toposort(e)) for e in exprs)


def _run(n: int, seed: int, bottom_up: bool) -> tuple[int, int, float, list[str]]:
  """Build the expressions, simplify them; nodes before, after, seconds and the rendered results."""
  exprs = random_index_exprs(n, seed)
  before = _nodes(exprs)
  t0 = time.perf_counter()
  out = [graph_rewrite(e, symbolic, bottom_up=bottom_up) for e in exprs]
  dt = time.perf_counter() - t0
  return before, _nodes(out), dt, [e.render() for e in out]


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--quick", action="store_true", help="a small run (for `make bench`)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--repeat", type=int, default=3, help="alternating runs per mode; the table shows the fastest")
  args = ap.parse_args()
  sizes = [50, 200] if args.quick else [100, 1000, 3000]
  _run(20, args.seed + 1, False)  # imports and first-call costs
  print(f"{'exprs':>6} {'mode':>9} {'nodes before':>13} {'nodes after':>12} {'ratio':>6} {'time (s)':>9} "
        f"{'us/node':>8} {'vs top-down':>12}")
  for n in sizes:
    best: dict[str, tuple[int, int, float, list[str]]] = {}
    for _ in range(2 if args.quick else args.repeat):
      for mode, bottom_up in (("top-down", False), ("bottom-up", True)):
        gc.collect()  # the nodes of the last run die, so every run starts with cold bounds and caches
        r = _run(n, args.seed, bottom_up)
        if mode not in best or r[2] < best[mode][2]:
          best[mode] = r
    base = best["top-down"][2]
    for mode, (before, after, dt, _) in best.items():
      print(f"{n:6d} {mode:>9} {before:13d} {after:12d} {after / before:6.2f} {dt:9.3f} {1e6 * dt / before:8.1f} "
            f"{dt / base:11.2f}x")
    same = sum(a == b for a, b in zip(best["top-down"][3], best["bottom-up"][3]))
    print(f"{'':6} same result top-down vs bottom-up: {same}/{n}")


if __name__ == "__main__":
  main()
