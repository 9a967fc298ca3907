"""What recording costs a whole program, as a user sees it: `VIZ=-1 python examples/demo.py` (record the trace, no
viewer) against the same command without VIZ, each run a fresh process, the two alternating (off/on, then on/off),
the ratio taken per pair, for wall time, the CPU time of all the process's threads, and the main thread's CPU time
(the demo is started through a two-line launcher that writes `time.thread_time()` at the very end of the process,
after the trace is closed; both sides run through it). Next to it, the old bench's in-process ratios
(bench/bench_trace_overhead.py, run as a subprocess), and what the last recorded trace holds (sources per kind, runs),
so a faster trace is not a thinner one.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.table import format_table  # noqa: E402
from vztrace.reader import TraceReader  # noqa: E402

DEMO = ROOT / "examples" / "demo.py"
# what changes what the program does: left out of both runs' environments, so the pair differs only in VIZ
UNSET = ("VIZ", "VIZ_TRACE", "DEBUG", "NOOPT", "BEAM")
# runs the script named by argv[1] as __main__; its first exit hook (so the last to run: after the recorder's) writes
# the main thread's CPU seconds to the file named by $BENCH_THREAD_TIME
LAUNCHER = ("import atexit, os, runpy, sys, time\n"
            "atexit.register(lambda: open(os.environ['BENCH_THREAD_TIME'], 'w').write(repr(time.thread_time())))\n"
            "sys.argv = sys.argv[1:]\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def _children_cpu() -> float:
  ru = resource.getrusage(resource.RUSAGE_CHILDREN)
  return ru.ru_utime + ru.ru_stime


def run_demo(args: list[str], trace: Path | None, tmp: Path) -> tuple[float, float, float]:
  """(wall, CPU of all threads, CPU of the main thread) seconds of one fresh `python examples/demo.py args`,
  recording to `trace` when given."""
  env = {k: v for k, v in os.environ.items() if k not in UNSET}
  env["PYTHONPATH"] = str(ROOT)
  main_cpu = tmp / "thread_time"
  env["BENCH_THREAD_TIME"] = str(main_cpu)
  if trace is not None:
    env.update(VIZ="-1", VIZ_TRACE=str(trace))
  c0, t0 = _children_cpu(), time.perf_counter()
  p = subprocess.run([sys.executable, "-c", LAUNCHER, str(DEMO), *args], env=env, cwd=ROOT, capture_output=True,
                     text=True)
  dt, cpu = time.perf_counter() - t0, _children_cpu() - c0
  if p.returncode != 0:
    raise SystemExit(f"demo failed ({'VIZ=-1' if trace else 'VIZ off'}):\n{p.stdout}\n{p.stderr}")
  return dt, cpu, float(main_cpu.read_text())


def trace_contents(path: Path) -> dict[str, int]:
  """Counts of what a trace holds: kernel contexts, source records per kind, runs, matches."""
  c: Counter[str] = Counter()
  for r in TraceReader(path):
    t = r["t"]
    if t == "source":
      c["source " + r["kind"]] += 1
    elif t == "ctx_begin" and r.get("kind") == "kernel":
      c["kernel contexts"] += 1
    elif t in ("run", "match", "rw_begin"):
      c[t] += 1
  return dict(sorted(c.items()))


def whole_program(pairs: int, demo_args: list[str], tmp: Path) -> dict:
  """`pairs` alternating (off, on) pairs of fresh runs; ratios on/off per pair."""
  off: list[tuple[float, float, float]] = []
  on: list[tuple[float, float, float]] = []
  run_demo(demo_args, None, tmp)  # warm the file cache (bytecode, llvmlite's library) for both sides
  trace = tmp / "demo.vztrace"
  for i in range(pairs):
    if i % 2 == 0:
      off.append(run_demo(demo_args, None, tmp))
      on.append(run_demo(demo_args, trace, tmp))
    else:
      on.append(run_demo(demo_args, trace, tmp))
      off.append(run_demo(demo_args, None, tmp))
  ratios = [[b[k] / a[k] for a, b in zip(off, on)] for k in range(3)]
  return {"off": off, "on": on, "ratios": ratios[0], "cpu": ratios[1], "main": ratios[2],
          "trace": trace_contents(trace)}


def old_bench(quick: bool) -> str:
  """bench/bench_trace_overhead.py's table, run as a subprocess."""
  cmd = [sys.executable, str(ROOT / "bench" / "bench_trace_overhead.py")] + (["--quick"] if quick else [])
  env = {k: v for k, v in os.environ.items() if k not in UNSET}
  p = subprocess.run(cmd, env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True, text=True)
  if p.returncode != 0:
    return f"bench_trace_overhead.py failed:\n{p.stderr}"
  return p.stdout.rstrip()


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--pairs", type=int, default=7, help="alternating (VIZ off, VIZ=-1) pairs of fresh processes")
  ap.add_argument("--scale", type=float, default=1.0, help="the demo's --scale")
  ap.add_argument("--quick", action="store_true", help="3 pairs")
  ap.add_argument("--old-full", action="store_true", help="the old bench's full rounds (about 2 minutes), not --quick")
  ap.add_argument("--no-old", action="store_true", help="skip bench_trace_overhead.py")
  args = ap.parse_args()
  pairs = 3 if args.quick else args.pairs
  demo_args = ["--scale", str(args.scale)]
  load0 = os.getloadavg()
  with tempfile.TemporaryDirectory() as d:
    r = whole_program(pairs, demo_args, Path(d))
  load1 = os.getloadavg()
  ratios = sorted(r["ratios"])
  q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
  cols = [("measure", "<44"), ("VIZ off s", ">10.3f"), ("VIZ=-1 s", ">10.3f"), ("ratio", ">8"), ("spread", ">12"),
          ("best", ">7"), ("CPU ratio", ">10"), ("main CPU", ">9"), ("off CPU s", ">10.3f"), ("off main s", ">11.3f")]
  best = min(x[0] for x in r["on"]) / min(x[0] for x in r["off"])
  rows = [(f"examples/demo.py --scale {args.scale}, {pairs} pairs", statistics.median(x[0] for x in r["off"]),
           statistics.median(x[0] for x in r["on"]), f"{statistics.median(ratios):.3f}x",
           f"{ratios[0]:.2f}-{ratios[-1]:.2f}x", f"{best:.3f}x", f"{statistics.median(r['cpu']):.3f}x",
           f"{statistics.median(r['main']):.3f}x", statistics.median(x[1] for x in r["off"]),
           statistics.median(x[2] for x in r["off"]))]
  print(format_table(cols, rows))
  print(f"ratio: median of the per-pair wall-time ratios (VIZ=-1 / off, fresh processes, alternating order); spread: "
        f"min-max, quartiles {q[0]:.3f}x-{q[2]:.3f}x; best: fastest VIZ=-1 run / fastest VIZ off run (the runs a "
        f"loaded machine disturbed least); CPU ratio: the median per-pair ratio of the processes' CPU time (all "
        f"threads); main CPU: of the main thread's")
  for what in ("ratios", "cpu", "main"):
    print(f"per pair ({what}): " + " ".join(f"{x:.3f}" for x in r[what]))
  print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in load0)} before, "
        f"{' '.join(f'{x:.2f}' for x in load1)} after ({os.cpu_count()} CPUs)")
  print("last trace: " + ", ".join(f"{k} {v}" for k, v in r["trace"].items()))
  if not args.no_old:
    print("\nbench/bench_trace_overhead.py" + ("" if args.old_full else " --quick") + ":")
    print(old_bench(not args.old_full))


if __name__ == "__main__":
  main()
