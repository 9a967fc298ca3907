"""What compile-ahead (compiler.realize._Ahead) gives a first call on a machine with a core free for its compile worker,
from CPU times, which a loaded machine hardly changes (its wall times there measure the load): one cold first call of
a bench_real program in this process (THREADS=1, an empty compile cache), the calling thread's CPU time at each
compile it hands the worker and at each wait for one, and the worker's CPU time per compile; then the pipeline
replayed on two free cores (the worker runs its compiles in order, each as long as its CPU time, from when it was
handed over; the calling thread waits where its compile is not done). Prints the whole CPU time (what the old code's
wall time is on such a machine, compiling in line), the calling thread's, the worker's, and the replay's wall time.

  PYTHONPATH=. .venv/bin/python bench/first_call_overlap.py gpt_step [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import real_models as rm  # noqa: E402


def instrument(events: list[tuple[str, int, float]]) -> None:
  """Note ("submit", k, calling thread's CPU s), ("wait", k, same) and ("work", k, the worker's CPU s of compile k)."""
  from compiler import realize
  submit = realize._Ahead._submit

  def noted(self: Any, job: Callable[[], Any]) -> Callable[[], Any]:
    k = sum(1 for e in events if e[0] == "submit")

    def timed() -> Any:
      c0 = time.thread_time()
      try:
        return job()
      finally:
        events.append(("work", k, time.thread_time() - c0))
    events.append(("submit", k, time.thread_time()))
    got = submit(self, timed)

    def wait() -> Any:
      events.append(("wait", k, time.thread_time()))
      return got()
    return wait
  realize._Ahead._submit = noted


def replay(events: list[tuple[str, int, float]], main_cpu: float, c0: float) -> float:
  """The first call's wall time on two free cores: the calling thread's CPU time plus its waits for the worker."""
  work = {k: dt for kind, k, dt in events if kind == "work"}
  waited, free, done = 0.0, 0.0, {}
  for kind, k, t in events:
    if kind == "submit":  # the worker starts it when it is handed over and the one before is done
      free = max(free, t - c0 + waited) + work[k]
      done[k] = free
    elif kind == "wait":
      waited += max(0.0, done[k] - (t - c0 + waited))
  return main_cpu + waited


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("program", choices=list(rm.PROGRAMS))
  ap.add_argument("--quick", action="store_true", help="smaller shapes")
  args = ap.parse_args(argv)
  os.environ["THREADS"] = "1"
  with tempfile.TemporaryDirectory() as fresh:
    os.environ["TINYVIZ_COMPILE_CACHE"] = fresh
    run = rm.build(args.program, rm.tinyviz(), rm.QUICK if args.quick else rm.FULL, jit=True)
    events: list[tuple[str, int, float]] = []
    instrument(events)
    c0, p0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
    run().numpy()
    main_cpu, cpu, wall = time.thread_time() - c0, time.process_time() - p0, time.perf_counter() - w0
  worker = sum(dt for kind, _, dt in events if kind == "work")
  print(f"{rm.PROGRAMS[args.program]}: CPU {cpu:.2f} s (calling thread {main_cpu:.2f}, compile worker {worker:.2f}, "
        f"{sum(1 for e in events if e[0] == 'work')} compiles); on two free cores {replay(events, main_cpu, c0):.2f} s "
        f"(here, load {os.getloadavg()[0]:.1f}: {wall:.2f} s)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
