"""Where a real program's call spends its kernel time (issue 29): every kernel of bench/real_models.py's program,
by CPU time of the thread that ran it (1 thread: a loaded machine skews it least), summed per kernel name over a
call, the min over --reps calls; with its GFLOP/s, its share of the call and a rough class (matmul-like reduce,
reduce, elementwise).

  PYTHONPATH=. .venv/bin/python bench/profile_real.py [--prog gpt_step] [--reps 5] [--top 30] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("THREADS", "1")  # (read when a kernel compiles: none has yet)

from bench import real_models as rm  # noqa: E402
from compiler import debug  # noqa: E402


def profile(prog: str, reps: int, size: rm.Size = rm.FULL) -> dict[str, dict[str, Any]]:
  """{kernel name: {"s": min over calls of its summed thread CPU seconds a call, "n": runs a call, "flops": a call,
  "opts": its opts}} over `reps` TinyJit calls after the warm-up ones."""
  calls: list[dict[str, list]] = []

  def run_kernel(name: str, runner: Any, bufs: list, compile_s: float | None = None) -> None:
    t0 = time.thread_time()
    runner(bufs)
    dt = time.thread_time() - t0
    prg = getattr(runner, "program", None)
    rec = calls[-1].setdefault(name, [0.0, 0, 0, [(getattr(o.op, "name", o.op), o.axis, o.arg)
                                                  for o in getattr(runner, "opts", ())]])
    rec[0] += dt
    rec[1] += 1
    rec[2] += prg.flops() if prg is not None and not prg.vars else 0

  run = rm.build(prog, rm.tinyviz(), size, jit=True)
  for _ in range(3):  # compile, capture
    calls.append({})
    run()
  os.environ["DEBUG"] = "2"  # the TinyJit replays kernel by kernel through debug.run_kernel
  debug.run_kernel = run_kernel
  calls.clear()
  try:
    for _ in range(reps):
      calls.append({})
      run()
  finally:
    os.environ.pop("DEBUG")
  out = {}
  for name in calls[0]:
    recs = [c[name] for c in calls if name in c]
    out[name] = {"s": min(r[0] for r in recs), "n": recs[0][1], "flops": recs[0][2], "opts": recs[0][3]}
  return out


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--prog", default="gpt_step", choices=list(rm.PROGRAMS))
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--top", type=int, default=30)
  ap.add_argument("--json", help="write the table as JSON here")
  args = ap.parse_args(argv)
  prof = profile(args.prog, args.reps)
  total = sum(r["s"] for r in prof.values())
  print(f"{args.prog}: {len(prof)} kernels, {total * 1e3:.1f} ms of kernel CPU time a call (min of {args.reps})")
  print(f"{'kernel':<40} {'ms':>7} {'%':>5} {'runs':>4} {'GFLOP/s':>8}  opts")
  for name, r in sorted(prof.items(), key=lambda kv: -kv[1]["s"])[:args.top]:
    rate = f"{r['flops'] / r['s'] / 1e9:.1f}" if r["s"] > 0 and r["flops"] else "-"
    print(f"{name:<40} {r['s'] * 1e3:7.2f} {100 * r['s'] / total:5.1f} {r['n']:4d} {rate:>8}  {r['opts']}")
  if args.json:
    Path(args.json).write_text(json.dumps(prof, default=str))


if __name__ == "__main__":
  main()
