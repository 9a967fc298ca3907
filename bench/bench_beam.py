"""BEAM search vs the hand-coded heuristics, measured side by side in one process.

For each kernel: the time BEAM=2 takes to search (no disk cache), and the steady kernel time of the unoptimized,
hand-coded and BEAM kernels, with numpy's time for the same computation. Usage: python bench/bench_beam.py [--amt N]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compiler.dtype import dtypes  # noqa: E402
from compiler.opt import Kernel, hand_coded_optimizations  # noqa: E402
from compiler.opt.search import beam_search, shutdown_pool  # noqa: E402
from compiler.opt.timing import beam_buffers, load_candidate, prepare_candidate  # noqa: E402
from compiler.uop import AxisType, KernelInfo, Ops, UOp  # noqa: E402


def _buf(slot: int, n: int) -> UOp:
  return UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(n), arg=slot)


def matmul(n: int) -> UOp:
  """C = A @ B for n x n float32, as the scheduler writes it."""
  i, j, k = UOp.range(n, 0, AxisType.LOOP), UOp.range(n, 1, AxisType.LOOP), UOp.range(n, 2, AxisType.REDUCE)
  a, b = _buf(1, n * n).index(i * n + k).load(), _buf(2, n * n).index(k * n + j).load()
  return UOp.sink(_buf(0, n * n).index(i * n + j).store((a * b).reduce(k)), arg=KernelInfo(f"r_{n}_{n}_{n}"))


def row_sum(n: int) -> UOp:
  """out[i] = sum_j x[i, j] for an n x n float32 x."""
  i, j = UOp.range(n, 0, AxisType.LOOP), UOp.range(n, 1, AxisType.REDUCE)
  x = _buf(1, n * n).index(i * n + j).load()
  return UOp.sink(_buf(0, n).index(i).store(x.reduce(j)), arg=KernelInfo(f"r_{n}_{n}"))


def compiled(k: Kernel):
  return load_candidate(prepare_candidate(k.get_optimized_ast()))


def interleaved_min(fns: list, bufs: list[np.ndarray], rounds: int) -> list[float]:
  """The best time of each fn(bufs), running them in turn `rounds` times (a busy moment hits all of them alike)."""
  best = [float("inf")] * len(fns)
  for fn in fns:
    fn(bufs)  # warm up
  for _ in range(rounds):
    for i, fn in enumerate(fns):
      t0 = time.perf_counter()
      fn(bufs)
      best[i] = min(best[i], time.perf_counter() - t0)
  return best


def cell(t: float, flops: int) -> str:
  return f"{t * 1e3:7.3f} ({flops / t / 1e9:5.1f})"


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--amt", type=int, default=2, help="beam width (default 2)")
  ap.add_argument("--size", type=int, default=512, help="matrix size (default 512)")
  args = ap.parse_args()
  n = args.size
  cases = [("matmul", matmul(n), 2 * n ** 3, lambda b: np.matmul(b[1].reshape(n, n), b[2].reshape(n, n))),
           ("row sum", row_sum(2 * n), (2 * n) ** 2, lambda b: b[1].reshape(2 * n, 2 * n).sum(1))]
  rows = []
  for name, ast, flops, np_fn in cases:
    bufs = beam_buffers(Kernel(ast), None)
    heur = hand_coded_optimizations(Kernel(ast))
    t0 = time.perf_counter()
    beam = beam_search(Kernel(ast), amt=args.amt, use_cache=False)
    search_s = time.perf_counter() - t0
    plain_ck, heur_ck, beam_ck = compiled(Kernel(ast)), compiled(heur), compiled(beam)
    t_plain = interleaved_min([plain_ck], bufs, 3)[0]
    times = interleaved_min([heur_ck, beam_ck], bufs, 20)
    # numpy alone: OpenBLAS threads spin after a call and would slow the kernels run next to them (and back)
    times.append(interleaved_min([np_fn], bufs, 20)[0])
    rows.append((name, search_s, t_plain, *times, flops, heur, beam))
  shutdown_pool()
  print(f"\nBEAM={args.amt}, size {n}; best of interleaved runs; GFLOP/s in parentheses")
  print(f"{'kernel':10s} {'search s':>9s} {'plain ms':>16s} {'heuristic ms':>16s} {'beam ms':>16s} {'numpy ms':>16s}"
        f" {'beam/heur':>10s} {'beam/numpy':>10s}")
  for name, search_s, tp, th, tb, tn, fl, _, _ in rows:
    print(f"{name:10s} {search_s:9.2f} {cell(tp, fl):>16s} {cell(th, fl):>16s} {cell(tb, fl):>16s} {cell(tn, fl):>16s}"
          f" {th / tb:9.2f}x {tn / tb:9.2f}x")
  for name, *_, heur, beam in rows:
    print(f"{name}: heuristic {heur.name} {heur.applied_opts}\n{' ' * len(name)}  beam      {beam.name} "
          f"{beam.applied_opts}")


if __name__ == "__main__":
  main()
