"""Where a training step's time goes: cProfile over bench_train's step (the MLP, batch 64, SGD or Adam), per step.

Prints the top functions by own time and by cumulative time, in ms per step, after warm-up steps (compiling) that
are not profiled. The phases (graph, gradient rewrite, schedule, run) are timed without the profiler too.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_train import LR, _labels  # noqa: E402
from bench.workloads import mlp  # noqa: E402
from compiler import Tensor, nn  # noqa: E402


def _setup(opt: str = "SGD") -> tuple:
  wl = mlp()
  x_np, w1_np, w2_np = wl.inputs
  x, y = Tensor(x_np), Tensor(_labels(len(x_np)))
  w1, w2 = Tensor(w1_np.copy(), requires_grad=True), Tensor(w2_np.copy(), requires_grad=True)
  return x, y, w1, w2, (nn.optim.SGD if opt == "SGD" else nn.optim.Adam)([w1, w2], lr=LR)


def _step(x: Tensor, y: Tensor, w1: Tensor, w2: Tensor, opt: nn.optim.Optimizer) -> list[float]:
  """One step; returns the times of its phases (forward graph, backward, update graph, realize) in seconds."""
  t0 = time.perf_counter()
  opt.zero_grad()
  loss = (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y)
  t1 = time.perf_counter()
  loss.backward()
  t2 = time.perf_counter()
  outs = [loss, *opt.schedule_step()]
  t3 = time.perf_counter()
  Tensor.realize(*outs)
  t4 = time.perf_counter()
  return [t1 - t0, t2 - t1, t3 - t2, t4 - t3]


def _print_stats(prof: cProfile.Profile, steps: int, key: str, top: int) -> None:
  st = pstats.Stats(prof)
  rows = sorted(st.stats.items(), key=lambda kv: kv[1][2 if key == "tottime" else 3], reverse=True)[:top]
  print(f"\ntop {top} by {key} (ms/step, calls/step):")
  print(f"{'tottime':>8} {'cumtime':>8} {'calls':>8}  function")
  for (file, line, fn), (_cc, nc, tt, ct, _callers) in rows:
    where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
    print(f"{tt / steps * 1e3:8.3f} {ct / steps * 1e3:8.3f} {nc / steps:8.1f}  {fn} ({where})")


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=30)
  ap.add_argument("--warmup", type=int, default=3)
  ap.add_argument("--top", type=int, default=25)
  ap.add_argument("--opt", default="SGD", choices=("SGD", "Adam"))
  ap.add_argument("--threads", type=int, default=1, help="kernel threads (THREADS), as bench_train's default")
  args = ap.parse_args(argv)
  os.environ["THREADS"] = str(args.threads)  # (read when a kernel is compiled: none is yet)
  model = _setup(args.opt)
  for _ in range(args.warmup):
    _step(*model)
  phases = [_step(*model) for _ in range(args.steps)]
  names = ("forward graph", "backward", "update graph", "schedule+run")
  print("phase medians without the profiler (ms/step): " +
        ", ".join(f"{n} {statistics.median(p[i] for p in phases) * 1e3:.3f}" for i, n in enumerate(names)))
  prof = cProfile.Profile()
  prof.enable()
  for _ in range(args.steps):
    _step(*model)
  prof.disable()
  _print_stats(prof, args.steps, "tottime", args.top)
  _print_stats(prof, args.steps, "cumtime", args.top)


if __name__ == "__main__":
  main()
