"""The five workloads end to end, plain and jitted (TinyJit replays), vs kernel only and numpy, in one process.

1 thread (THREADS=1, numpy's BLAS limited to 1 thread with threadpoolctl), timed by CPU time (process_time) so that
other load on the machine does not skew the ratios. Per round and workload, interleaved, each the minimum of `--reps`
timed calls (each after an untimed call of the same way, so that each is timed warm): kernel only (the compiled
kernels of one schedule run back to back), end to end plain (`build(*[Tensor(a) ...]).numpy()`: graph, schedule cache,
copy in, kernels; .numpy() is a view), the same with `Tensor.from_numpy` inputs (no copy in: "shared"), the jitted
call `jit(*[Tensor(a) ...]).numpy()`, with shared inputs, and with the numpy arrays themselves as arguments
(`jit(*arrays).numpy()`: no Tensor made), the replay alone (`jit(*the same tensors)`) and numpy. The table has the
median over `--rounds` rounds of each ratio to kernel only (1.0: the call costs nothing over its kernels); "numpy/jit"
> 1: the jitted call beats numpy.

  .venv/bin/python bench/bench_jit.py [--scale 1.0] [--reps 10] [--rounds 3] [--only matmul,mlp]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["THREADS"] = "1"  # (read when a kernel is compiled)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # (read when numpy loads its BLAS)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from bench.table import format_table  # noqa: E402
from bench.workloads import WORKLOADS, Workload, jitted  # noqa: E402
from compiler import Tensor, realize  # noqa: E402


def _kernel_only(w: Workload):
  """The kernels one realize of the workload ran (its compiled runners on its buffers), run back to back."""
  runs: list = []
  realize.capturing = runs  # (what TinyJit listens to: every kernel run_schedule runs)
  try:
    w.lazy().realize()
  finally:
    realize.capturing = None
  kernels = [(r[1], r[2]) for r in runs]

  def run() -> None:
    for fn, bufs in kernels:
      fn(bufs)
  return run


def measure(w: Workload, reps: int, clock) -> dict:
  """Every way of calling the workload, interleaved (min of reps each), after its first calls; and whether each
  result is numpy's."""
  shared = lambda: [Tensor.from_numpy(a) for a in w.inputs]  # noqa: E731
  outs = [w.lazy().numpy()]
  jit, first = jitted(w)  # (plain, capture, first replay)
  outs += first
  ts = w.tensors()
  fns = {"kernel": _kernel_only(w), "e2e": lambda: w.lazy().numpy(), "plain_shared": lambda: w.build(*shared()).numpy(),
         "jit": lambda: jit(*w.tensors()).numpy(), "shared": lambda: jit(*shared()).numpy(),
         "arrays": lambda: jit(*w.inputs).numpy(),
         "replay": lambda: jit(*ts), "numpy": lambda: w.reference(*w.inputs)}
  best = dict.fromkeys(fns, float("inf"))
  for fn in fns.values():  # warm up
    fn()
  for _ in range(reps):
    for key, fn in fns.items():
      fn()  # (each timed call follows one of its own: every way is timed with its data in the caches, not the
      t0 = clock()  # caches the way before it left; kernel only after numpy's reference measured 10-25% slower)
      fn()
      best[key] = min(best[key], clock() - t0)
  outs += [w.build(*shared()).numpy(), jit(*shared()).numpy(), jit(*w.inputs).numpy()]
  ok = all(np.allclose(o, w.expected(), rtol=w.rtol, atol=w.rtol) for o in outs)
  return {"ok": ok, "jit_kernels": len(jit.captured.calls), **best}


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--scale", type=float, default=1.0)
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--only", default="")
  args = ap.parse_args(argv)
  threadpool_limits(1)
  clock = time.process_time
  only = set(filter(None, args.only.split(",")))
  names = [n for n in WORKLOADS if not only or n in only]
  rounds: dict[str, list[dict]] = {n: [] for n in names}
  for _ in range(args.rounds):
    for n in names:
      w = WORKLOADS[n](scale=args.scale)
      rounds[n].append(measure(w, args.reps, clock))
  print(f"1 thread, CPU time; median of {args.rounds} rounds of min of {args.reps}; scale {args.scale}; "
        f"load {os.getloadavg()[0]:.1f}")
  cols = [("workload", "<12"), ("ok", "<4"), ("kernels", ">7"), ("kernel ms", ">10.3f"), ("numpy ms", ">9.3f"),
          ("e2e/kernel", ">11.2f"), ("e2e shared/kernel", ">18.2f"), ("jit/kernel", ">11.2f"),
          ("jit shared/kernel", ">18.2f"), ("jit arrays/kernel", ">18.2f"), ("replay/kernel", ">14.2f"),
          ("numpy/jit", ">10.2f"), ("numpy/jit arrays", ">17.2f")]
  rows = []
  for n in names:
    rs = rounds[n]

    def med(key: str, base: str = "kernel", rs: list[dict] = rs) -> float:
      return statistics.median(r[key] / r[base] for r in rs)
    rows.append((n, "yes" if all(r["ok"] for r in rs) else "NO", rs[0]["jit_kernels"],
                 statistics.median(r["kernel"] for r in rs) * 1e3, statistics.median(r["numpy"] for r in rs) * 1e3,
                 med("e2e"), med("plain_shared"), med("jit"), med("shared"), med("arrays"), med("replay"),
                 1 / med("jit", "numpy"), 1 / med("arrays", "numpy")))
  print(format_table(cols, rows))


if __name__ == "__main__":
  main()
