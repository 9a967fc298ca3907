"""What `python -m compiler.trace export TRACE` costs (issue 30's targets: the demo under 2 s; a GPT-2-shaped training
step under 10 s and 1 GB, its page at most 3x its trace), old code against new, run alternately in fresh processes
so the shared machine's load falls on both alike: wall and CPU seconds (the command's and its workers', os.wait4)
and peak RSS (the largest process: a forked worker's is its own), the page against the trace.

  python bench/bench_export_cost.py TRACE [TRACE ...] [--before ROOT] [--rounds N] [--jobs J] [--context NAME ...]

--before ROOT: also ROOT's code (a checkout before a change), alternated with this one's; --jobs: the command's -j;
--context: the command's (a slice of a big trace). Each code's bytecode is cached apart (PYTHONPYCACHEPREFIX under the
temporary folder, written even where PYTHONDONTWRITEBYTECODE is set, as it is on the shared machine): otherwise every
run compiled the project's modules from source (~0.1 s of CPU for viz_server's alone), or old and new shared a cache.

Issue 30, workers.plan + pickled messages + a byte budget per worker's queue, and the exporting process's memory
(the shared 2-core machine under load 3.6-5.5; default -j 2; the demo's medians of 3, the GPT step's one run each):
  trace                  code      trace B  wall s   CPU s  peak MB  ratio
  demo                   before     240576    5.68    5.84       89   2.22
  demo                   now        240576    4.98    5.12       85   2.22
  gpt_new.vztrace        before    1830486  168.70  158.28     1086   2.87
  gpt_new.vztrace        now       1830486  113.10  140.73      776   2.87
(two earlier GPT pairs under load 5-16: CPU 176.6 -> 159.8 and 163.7 -> 153.9 s, peak 1067 -> 786 and 1050 -> 778
MB; their wall times followed the load.)
The serial start and end (the tool exec'd, no teardown, page.b85, the UI part made by a helper), load 5.2-9.4: the
demo's CPU 6.06 -> 5.46 s at -j 1 (medians of 5), 6.30 -> 6.28 s at -j 2 (of 7); its `--context "schedule 0"` 1.67
-> 1.34 s at -j 1, 1.70 -> 1.45 s at -j 2 (of 8); docs/architecture.md, "Trace tools".
The tool exec'd by compiler/__init__.py before the compiler is imported (medians): the demo's CPU 5.23 -> 5.27 s (of
5, load 3.6-6.1: noise), 5.00 -> 4.74 s (of 5, load 3.3-3.8), 5.04 -> 4.66 s (of 7, load 3.5-4.5); `export --help`
0.319 -> 0.111 s (of 10), `--context "schedule 0"` 1.129 -> 0.886 s at -j 1, 1.005 -> 0.816 s at -j 2 (of 8).
The page's deflate at zlib's level 7, not 9 (page.DEFLATE_LEVEL), the demo (265,579 B), medians of 8 (load 1.8-2.3):
  trace                  code      trace B  wall s   CPU s  peak MB  ratio
  export_demo.vztrace    before     265579    3.56    5.91      101   2.63
  export_demo.vztrace    now        265579    3.36    5.78      101   2.66
(again, load 0.9-2.4: wall 4.96 -> 3.55 s, CPU 6.49 -> 5.75 s; a GPT step, gpt_step tiny, 1,478,803 B, one run each,
load 2.5-2.8: wall 41.5 -> 36.5 s, CPU 51.2 -> 48.2 s, peak 350 -> 351 MB, 2.39x -> 2.44x; docs/architecture.md,
"Trace tools").
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


def cost(trace: Path, root: Path, jobs: int | None, names: list[str], cache: Path) -> tuple[float, float, float, int]:
  """(wall s, CPU s, peak RSS MB, page bytes) of root's `export trace` in a child process; cache: its bytecode's."""
  with tempfile.TemporaryDirectory() as d:
    out = Path(d) / "x.html"
    cmd = [sys.executable, "-m", "compiler.trace", "export", str(trace), "-o", str(out)]
    cmd += ["-j", str(jobs)] if jobs is not None else []
    cmd += [a for n in names for a in ("--context", n)]
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONPYCACHEPREFIX": str(cache), "PYTHONDONTWRITEBYTECODE": ""}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL)
    _, status, use = os.wait4(proc.pid, 0)  # (its reaped workers' time is counted in its own)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
      raise SystemExit(f"export of {trace} failed under {root}")
    return wall, use.ru_utime + use.ru_stime, use.ru_maxrss / 1024, out.stat().st_size


def warm(root: Path, cache: Path) -> None:
  """root's bytecode written to cache before the timed runs (the modules the command imports: its workers fork)."""
  env = {**os.environ, "PYTHONPATH": str(root), "PYTHONPYCACHEPREFIX": str(cache), "PYTHONDONTWRITEBYTECODE": ""}
  subprocess.run([sys.executable, "-c", "import compiler.trace.cli, viz_server.tools, viz_server.export.command"],
                 cwd=root, env=env, check=True)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("traces", nargs="+", type=Path)
  ap.add_argument("--before", type=Path, metavar="ROOT")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--jobs", type=int)
  ap.add_argument("--context", action="append", default=[], metavar="NAME")
  args = ap.parse_args()
  codes = [("before", args.before)] * bool(args.before) + [("now", ROOT)]
  rows = []
  loads = []
  caches = tempfile.TemporaryDirectory()
  for label, root in codes:
    warm(root, Path(caches.name) / label)
  for t in args.traces:
    got: dict[str, list] = {label: [] for label, _ in codes}
    for _ in range(args.rounds):
      for label, root in codes:
        loads.append(os.getloadavg()[0])
        got[label].append(cost(t.resolve(), root, args.jobs, args.context, Path(caches.name) / label))
    for label, _ in codes:
      runs = got[label]
      med = [statistics.median(r[i] for r in runs) for i in range(3)]
      rows.append((t.name, label, t.stat().st_size, *med, runs[0][3] / t.stat().st_size))
  print(format_table([("trace", "<22"), ("code", "<7"), ("trace B", ">9"), ("wall s", ">7.2f"), ("CPU s", ">7.2f"),
                      ("peak MB", ">8.0f"), ("ratio", ">6.2f")], rows))
  print(f"(medians of {args.rounds}, alternated; load {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores)")
  caches.cleanup()


if __name__ == "__main__":
  main()
