"""The five workloads end to end jitted (TinyJit replays) vs not vs kernel only, and numpy, in one process.

1 thread (THREADS=1, numpy's BLAS limited to 1 thread with threadpoolctl), timed by CPU time (process_time) so that
other load on the machine does not skew the ratios. Per round: bench_kernels' measurement (first run, end to end,
kernel only and numpy, interleaved), then the jitted call `jit(*fresh input tensors).numpy()` (what end to end does,
on a TinyJit of the workload's function), the replay alone (`jit(*the same tensors)`: no copy in or out) and numpy
again, interleaved; each the minimum of `--reps`. The table has the median over `--rounds` rounds; "replay/kernel" is
what a replay costs over the kernels alone (1.0: nothing), "numpy/jit" > 1: the jitted call beats numpy.

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

from bench.bench_kernels import _measure  # noqa: E402
from bench.table import format_table  # noqa: E402
from bench.workloads import WORKLOADS, Workload  # noqa: E402
from compiler import TinyJit  # noqa: E402


def measure_jit(w: Workload, reps: int, clock) -> dict:
  """The jitted end to end call and numpy's, interleaved (min of reps each), after its plain and capture calls."""
  jitted = TinyJit(w.build)
  for _ in range(3):  # plain, capture, first replay
    got = jitted(*w.tensors()).numpy()
  ts = w.tensors()
  fns = {"jit": lambda: jitted(*w.tensors()).numpy(), "replay": lambda: jitted(*ts),
         "numpy": lambda: w.reference(*w.inputs)}
  best = dict.fromkeys(fns, float("inf"))
  for _ in range(reps):
    for key, fn in fns.items():
      t0 = clock()
      fn()
      best[key] = min(best[key], clock() - t0)
  ok = bool(np.allclose(got, w.expected(), rtol=w.rtol, atol=w.rtol))
  return {"jit_ok": ok, "jit_kernels": len(jitted.captured.calls), "jit": best["jit"], "replay": best["replay"],
          "numpy_jit": best["numpy"]}


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
      rounds[n].append({**_measure(w, args.reps, clock), **measure_jit(w, args.reps, clock)})
  print(f"1 thread, CPU time; median of {args.rounds} rounds of min of {args.reps}; scale {args.scale}; "
        f"load {os.getloadavg()[0]:.1f}")
  cols = [("workload", "<12"), ("ok", "<4"), ("kernels", ">7"), ("e2e ms", ">9.3f"), ("jit ms", ">9.3f"),
          ("replay ms", ">10.3f"), ("kernel ms", ">10.3f"), ("numpy ms", ">9.3f"), ("e2e/jit", ">8.2f"),
          ("replay/kernel", ">14.2f"), ("numpy/jit", ">10.2f")]
  rows = []
  for n in names:
    keys = ("e2e", "jit", "replay", "kernel", "numpy", "numpy_jit")
    med = {k: statistics.median(r[k] for r in rounds[n]) for k in keys}
    ok = all(r["ok"] and r["jit_ok"] for r in rounds[n])
    rows.append((n, "yes" if ok else "NO", rounds[n][0]["jit_kernels"], med["e2e"] * 1e3, med["jit"] * 1e3,
                 med["replay"] * 1e3, med["kernel"] * 1e3, med["numpy"] * 1e3, med["e2e"] / med["jit"],
                 med["replay"] / med["kernel"], med["numpy_jit"] / med["jit"]))
  print(format_table(cols, rows))


if __name__ == "__main__":
  main()
