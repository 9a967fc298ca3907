"""What `python -m compiler.trace export TRACE` costs (issue 30's targets: the demo under 2 s; a GPT-2-shaped training
step under 10 s and 1 GB, its page at most 3x its trace), old code against new, run alternately in fresh processes
so the shared machine's load falls on both alike: wall and CPU seconds (the command's and its workers', os.wait4)
and peak RSS (the largest process: a forked worker's is its own), the page against the trace.

  python bench/bench_export_cost.py TRACE [TRACE ...] [--before ROOT] [--rounds N] [--jobs J]

--before ROOT: also ROOT's code (a checkout before a change), alternated with this one's; --jobs: the command's -j.

Issue 30, workers.plan + pickled messages + a byte budget per worker's queue, and the exporting process's memory
(the shared 2-core machine under load 3.6-5.5; default -j 2; the demo's medians of 3, the GPT step's one run each):
  trace                  code      trace B  wall s   CPU s  peak MB  ratio
  demo                   before     240576    5.68    5.84       89   2.22
  demo                   now        240576    4.98    5.12       85   2.22
  gpt_new.vztrace        before    1830486  168.70  158.28     1086   2.87
  gpt_new.vztrace        now       1830486  113.10  140.73      776   2.87
(two earlier GPT pairs under load 5-16: CPU 176.6 -> 159.8 and 163.7 -> 153.9 s, peak 1067 -> 786 and 1050 -> 778
MB; their wall times followed the load.)
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.table import format_table  # noqa: E402


def cost(trace: Path, root: Path, jobs: int | None) -> tuple[float, float, float, int]:
  """(wall s, CPU s, peak RSS MB, page bytes) of root's `export trace` in a child process."""
  with tempfile.TemporaryDirectory() as d:
    out = Path(d) / "x.html"
    cmd = [sys.executable, "-m", "compiler.trace", "export", str(trace), "-o", str(out)]
    cmd += ["-j", str(jobs)] if jobs is not None else []
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.DEVNULL)
    _, status, use = os.wait4(proc.pid, 0)  # (its reaped workers' time is counted in its own)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
      raise SystemExit(f"export of {trace} failed under {root}")
    return wall, use.ru_utime + use.ru_stime, use.ru_maxrss / 1024, out.stat().st_size


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("traces", nargs="+", type=Path)
  ap.add_argument("--before", type=Path, metavar="ROOT")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--jobs", type=int)
  args = ap.parse_args()
  codes = [("before", args.before)] * bool(args.before) + [("now", ROOT)]
  rows = []
  for t in args.traces:
    got: dict[str, list] = {label: [] for label, _ in codes}
    for _ in range(args.rounds):
      for label, root in codes:
        got[label].append(cost(t.resolve(), root, args.jobs))
    for label, _ in codes:
      runs = got[label]
      med = [statistics.median(r[i] for r in runs) for i in range(3)]
      rows.append((t.name, label, t.stat().st_size, *med, runs[0][3] / t.stat().st_size))
  print(format_table([("trace", "<22"), ("code", "<7"), ("trace B", ">9"), ("wall s", ">7.2f"), ("CPU s", ">7.2f"),
                      ("peak MB", ">8.0f"), ("ratio", ">6.2f")], rows))
  print(f"(medians of {args.rounds}, alternated; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
  main()
