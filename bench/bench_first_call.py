"""First calls of bench_real's programs (issue 29): schedule + optimize + compile + run in a fresh process, with the
compile cache cold (an empty folder) and warm (a second fresh process on what the first left there).

Each measurement is a child process of its own (THREADS=1): the model is built (not timed), then the first call's
CPU time (process_time) and wall time are taken, then AGAIN more calls' (the fastest: what a call costs without its
first call's work; cold+ and warm+ are the first call's CPU time beyond it, and warm sys the system time in the warm
first call, the page faults of memory the process touches first). The kernel counts are the first call's.
--profile N prints the top N functions of a cProfile of each first call (cumulative time, then own time); --dump DIR
writes every kernel's LLVM IR as it ran, per program and cache state (DIR/<prog>-<cold|warm>.ll, in the order the
kernels were first called), to compare codegen before and after a change (the same IR, the same kernel).

  PYTHONPATH=. .venv/bin/python bench/bench_first_call.py [--only gpt_fwd,mnist] [--quick] [--profile 25] [--dump D]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import real_models as rm  # noqa: E402
from bench.table import format_table  # noqa: E402

AGAIN = 2  # calls after the first: the fastest is what a call costs without its first-call work


def _child(prog: str, size: rm.Size, profile: int) -> dict[str, Any]:
  """In this (fresh) process: the first call of `prog`, timed, profiled when asked, its kernels' IR dumped."""
  from compiler import engine
  from compiler.runtime import diskcache
  sources: dict[str, str] = {}
  compile_runner = engine.compile_runner

  def recording(ast: Any) -> Any:
    ck = compile_runner(ast)
    sources.setdefault(ck.program.fname + "\n" + ck.program.src, "")
    return ck
  from compiler import realize
  realize._factories["llvm"] = recording  # (the backend's factory, as realize loads it: compile_runner)
  run = rm.build(prog, rm.tinyviz(), size, jit=True)
  prof = cProfile.Profile() if profile else None
  c0, w0, s0 = time.process_time(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
  if prof is not None:
    prof.enable()
  run().numpy()
  if prof is not None:
    prof.disable()
  c1, w1, s1 = time.process_time(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
  # (a TinyJit's capture, on the second call, may schedule differently)
  first = {"sources": list(sources), "compiled": engine.COUNTS["compile"], "disk": engine.COUNTS["disk"]}
  again = []
  for _ in range(AGAIN):  # (a TinyJit captures on its second call, replays from its third)
    c2 = time.process_time()
    run().numpy()
    again.append(time.process_time() - c2)
  text = ""
  if prof is not None:
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(profile)
    stats.sort_stats("tottime").print_stats(profile)
    text = out.getvalue()
  return {"cpu": c1 - c0, "wall": w1 - w0, "sys": s1 - s0, "again": min(again), "profile": text, **first,
          "ignored": diskcache.STATS.ignored}


def _run_child(args: list[str], cache: str) -> dict[str, Any]:
  with tempfile.TemporaryDirectory() as d:
    out = Path(d) / "out.json"
    env = {**os.environ, "THREADS": "1", "OMP_NUM_THREADS": "1", "TINYVIZ_COMPILE_CACHE": cache}
    proc = subprocess.run([sys.executable, __file__, *args, "--out", str(out)], env=env, capture_output=True,
                          text=True)
    if proc.returncode:
      raise RuntimeError(f"child {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--only", default="", help=f"comma-separated programs of {','.join(rm.PROGRAMS)}")
  ap.add_argument("--quick", action="store_true", help="smaller shapes")
  ap.add_argument("--profile", type=int, default=0, help="print the top N functions of each first call's profile")
  ap.add_argument("--dump", help="a folder for each first call's kernels' LLVM IR")
  ap.add_argument("--child", help=argparse.SUPPRESS)
  ap.add_argument("--out", help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  size = rm.QUICK if args.quick else rm.FULL
  if args.child:
    res = _child(args.child, size, args.profile)
    Path(args.out).write_text(json.dumps(res))
    return 0
  progs = [p for p in args.only.split(",") if p] or list(rm.PROGRAMS)
  extra = [*(["--quick"] if args.quick else []), "--profile", str(args.profile)]
  rows = []
  with tempfile.TemporaryDirectory() as caches:
    for p in progs:
      cache = str(Path(caches) / p)
      got = {state: _run_child(["--child", p, *extra], cache) for state in ("cold", "warm")}
      for state, res in got.items():
        if args.profile:
          print(f"==== {p} {state}\n{res['profile']}")
        if args.dump:
          Path(args.dump).mkdir(parents=True, exist_ok=True)
          (Path(args.dump) / f"{p}-{state}.ll").write_text("\n\n".join(res["sources"]))
      again = min(got[s]["again"] for s in got)
      rows.append((rm.PROGRAMS[p], *(f"{got[s][k]:.2f}" for s in ("cold", "warm") for k in ("cpu", "wall")),
                   f"{again:.2f}", *(f"{got[s]['cpu'] - again:.2f}" for s in ("cold", "warm")),
                   f"{got['warm']['sys']:.2f}",
                   len(got["cold"]["sources"]), got["cold"]["compiled"], got["warm"]["disk"],
                   got["warm"]["compiled"]))
  cols = [("program", "<21"), ("cold s", ">7"), ("cold wall", ">9"), ("warm s", ">7"), ("warm wall", ">9"),
          ("again s", ">7"), ("cold+", ">6"), ("warm+", ">6"), ("warm sys", ">8"),
          ("kernels", ">7"), ("compiled", ">8"), ("warm disk", ">9"), ("warm compiled", ">13")]
  print("first call in a fresh process, THREADS=1: CPU s (process_time) and wall s; cold: empty compile cache, warm: "
        f"a second process on it; again: the CPU s of a later call (the fastest of {AGAIN}); cold+, warm+: the first "
        "call's CPU s beyond that; warm sys: the system CPU s in the warm first call (fresh memory's page faults)")
  print(format_table(cols, rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
