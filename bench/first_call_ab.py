"""First calls of bench_real's programs in two source trees, alternated (issue 29): this tree against another
checkout (the code before a change), cold (an empty compile cache) and warm (a second fresh process on the cache the
first left), each a fresh child process (THREADS=1), rounds alternating which tree goes first (A B, B A: a change in
the machine's load reaches both). Prints the median and the spread of each first call's CPU time, and whether the
two trees' first outputs are equal bit for bit. Both the first call's CPU time and its wall time (what the user waits:
compile-ahead overlaps LLVM's compiles with the Python of the next kernels, on a second core) are shown, and the
calling thread's own CPU time and its idle time (blocked on the compile worker, from /proc's schedstat, which a loaded
machine does not inflate as it does the wall time): their sum is the wall time with a core free for each thread.

  PYTHONPATH=. .venv/bin/python bench/first_call_ab.py --old /work/main [--only gpt_step,mnist] [--rounds 3]
      [--threads 1] [--old-env COMPILE_AHEAD=0]   (--old-env: the old side's environment also has these)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import real_models as rm  # noqa: E402
from bench.table import format_table  # noqa: E402

# the child: build the program (not timed), then its first call's CPU time and a hash of its output
# (and the calling thread's idle time: neither running nor waiting for a core, from /proc's schedstat, 0 where there
# is none: what it waited for the compile worker, which a loaded machine does not add to as it does to the wall time)
CHILD = """
import hashlib, json, sys, threading, time
sys.path.insert(0, sys.argv[2])
import numpy as np
from bench import real_models as rm
def sched():
  try:
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
      return sum(int(x) for x in f.read().split()[:2]) / 1e9
  except OSError:
    return None
run = rm.build(sys.argv[1], rm.tinyviz(), rm.QUICK if sys.argv[3] == "quick" else rm.FULL, jit=True)
c0, w0, m0, s0 = time.process_time(), time.perf_counter(), time.thread_time(), sched()
out = run().numpy()
cpu, wall, main, s1 = time.process_time() - c0, time.perf_counter() - w0, time.thread_time() - m0, sched()
print(json.dumps({"cpu": cpu, "wall": wall, "main": main, "idle": 0.0 if s0 is None else max(0.0, wall - (s1 - s0)),
                  "out": hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()}))
"""


def first_call(tree: Path, prog: str, cache: str, quick: bool, threads: str = "1",
               extra: dict[str, str] | None = None) -> dict:
  """The first call of `prog` with `tree`'s compiler in a fresh process on the compile cache folder `cache`."""
  env = {**os.environ, "THREADS": threads, "OMP_NUM_THREADS": "1", "TINYVIZ_COMPILE_CACHE": cache,
         "PYTHONPATH": str(tree), **(extra or {})}
  proc = subprocess.run([sys.executable, "-c", CHILD, prog, str(tree), "quick" if quick else "full"], env=env,
                        capture_output=True, text=True, cwd=tree)
  if proc.returncode:
    raise RuntimeError(f"{tree}: {prog} failed:\n{proc.stderr[-4000:]}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--old", required=True, help="the other source tree (e.g. a checkout of the commit before)")
  ap.add_argument("--only", default="", help=f"comma-separated programs of {','.join(rm.PROGRAMS)}")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--quick", action="store_true", help="smaller shapes")
  ap.add_argument("--threads", default="1", help="THREADS of the children (kernel threads)")
  ap.add_argument("--old-env", action="append", default=[], help="KEY=VALUE also set for the old side's children")
  args = ap.parse_args(argv)
  old_env = dict(kv.split("=", 1) for kv in args.old_env)
  trees = {"old": Path(args.old).resolve(), "new": ROOT}
  progs = [p for p in args.only.split(",") if p] or list(rm.PROGRAMS)
  rows, same = [], True
  for prog in progs:
    got: dict[tuple[str, str], list[float]] = {}
    outs: dict[str, set[str]] = {"old": set(), "new": set()}
    for rnd in range(args.rounds):
      order = ("old", "new") if rnd % 2 == 0 else ("new", "old")
      caches = {side: tempfile.mkdtemp(prefix=f"fcab_{side}_") for side in order}
      for state in ("cold", "warm"):  # (warm: a second process on the cache the cold one left)
        for side in order:
          r = first_call(trees[side], prog, caches[side], args.quick, args.threads,
                         old_env if side == "old" else None)
          for m in ("cpu", "wall", "main", "idle"):
            got.setdefault((side, state, m), []).append(r[m])
          outs[side].add(r["out"])
    equal = outs["old"] == outs["new"] and len(outs["old"]) == 1
    same &= equal
    for state in ("cold", "warm"):
      row = [rm.PROGRAMS[prog], state]
      for m in ("cpu", "wall"):
        o, n = got[("old", state, m)], got[("new", state, m)]
        row += [f"{statistics.median(o):.2f} ({min(o):.2f}-{max(o):.2f})",
                f"{statistics.median(n):.2f} ({min(n):.2f}-{max(n):.2f})",
                f"{statistics.median(n) / statistics.median(o):.2f}"]
      rows.append((*row, "yes" if equal else "NO"))
    print(format_table([("program", "<22"), ("cache", "<5"), ("old CPU s", ">16"), ("new CPU s", ">16"),
                        ("new/old", ">7"), ("old wall s", ">16"), ("new wall s", ">16"), ("new/old", ">7"),
                        ("same out", ">8")], rows), flush=True)
    main = {side: statistics.median(got[(side, "cold", "main")]) for side in ("old", "new")}
    idle = {side: statistics.median(got[(side, "cold", "idle")]) for side in ("old", "new")}
    print(f"(load average {os.getloadavg()[0]:.1f}; cold, the calling thread's own CPU s: old {main['old']:.2f}, new "
          f"{main['new']:.2f}; its idle s (waiting for the compile worker, not for a core): old {idle['old']:.2f}, "
          f"new {idle['new']:.2f}; own + idle, the wall time with a core free for each thread: old "
          f"{main['old'] + idle['old']:.2f}, new {main['new'] + idle['new']:.2f})", flush=True)
  return 0 if same else 1


if __name__ == "__main__":
  sys.exit(main())
