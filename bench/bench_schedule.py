"""Scheduling the five workloads: kernel count and scheduling time, with tracing off and on, side by side.

Columns: kernels (and their names), tensor-graph nodes, median create_schedule time with VIZ off and with a trace
being recorded (and their ratio), the numpy reference's time for the whole computation, and schedule/numpy.
Each schedule starts from a freshly built lazy graph (new input buffers), so no cache makes it cheaper.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.table import format_table  # noqa: E402
from bench.workloads import WORKLOADS, Workload  # noqa: E402
from compiler.schedule.rangeify import create_schedule  # noqa: E402
from compiler.trace import recorder  # noqa: E402
from compiler.uop import toposort  # noqa: E402


def _time_schedule(w: Workload, reps: int) -> tuple[float, list]:
  times, sched = [], []
  for _ in range(reps):
    out = w.lazy()
    gc.collect()
    t0 = time.perf_counter()
    sched, _ = create_schedule([out.uop])
    times.append(time.perf_counter() - t0)
  return statistics.median(times), sched


def _time_numpy(w: Workload, reps: int) -> float:
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    w.expected()
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--reps", type=int, default=9)
  ap.add_argument("--scale", type=float, default=1.0, help="shrink the workloads (1.0: benchmark sizes)")
  ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="run only these workloads")
  args = ap.parse_args(argv)
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for name, make in WORKLOADS.items():
      if args.only and name not in args.only:
        continue
      w = make(args.scale)
      nodes = len(toposort(w.lazy().uop))
      _time_schedule(w, 1)  # warm up: first-use imports and caches
      off, sched = _time_schedule(w, args.reps)
      recorder.enable(Path(tmp) / f"{name}.vztrace", announce=False)
      try:
        on, _ = _time_schedule(w, args.reps)
      finally:
        recorder.disable()
      ref = _time_numpy(w, args.reps)
      rows.append((name, len(sched), " ".join(si.name for si in sched), nodes, off * 1e3, on * 1e3, on / off,
                   ref * 1e3, off / ref))
  cols = [("workload", "<12"), ("kernels", ">7"), ("names", ""), ("nodes", ">6"), ("sched ms", ">9.2f"),
          ("traced ms", ">10.2f"), ("traced/off", ">10.2f"), ("numpy ms", ">9.2f"), ("sched/numpy", ">11.2f")]
  order = [0, 1, 3, 4, 5, 6, 7, 8, 2]  # the kernel names, long, last
  print(format_table([cols[i] for i in order], [[r[i] for i in order] for r in rows]))


if __name__ == "__main__":
  main()
