"""Real programs side by side (issue 29): tinyviz plain and TinyJit vs PyTorch eager and tinygrad TinyJit.

The four programs of bench/real_models.py, written once in tinygrad's API: GPT forward and train step (GPT-2 shape,
4 layers, d 256, 4 heads, seq 128, batch 4, Adam), 3 ResNet basic blocks (64 channels, 32x32, batch 16) forward +
backward, beautiful_mnist's CNN train step (batch 512, Adam). Each on a fixed random batch of the real shape.

Columns, per thread count (THREADS for ours, numpy's BLAS by threadpoolctl, torch.set_num_threads), each measured in
a child process of its own so that the count is fixed before anything loads:
- ms: the median CPU time (process_time: the threads are ours) of a call, and wall: its median wall time, over
  --reps repetitions interleaved program by program and side by side (A B A B, so a change in the machine's load
  reaches all alike), after 3 warm-up calls each (compiling; a TinyJit's capture);
- jit/torch: tinyviz TinyJit's time over PyTorch's (CPU time at 1 thread, wall otherwise);
- first s: the first call's CPU time (schedule + compile + run, with the compiler processes it starts; the model's
  construction excluded) in a fresh process per program and side, with an empty compile cache (XDG_CACHE_HOME of its
  own), and warm s: ours in a second fresh process on the cache the first left; MB: the first process's peak memory
  after 3 calls (ru_maxrss, the interpreter's own included); buf MB: of that, the most bytes tinyviz's buffers held
  at once (`memory_peak`: the memory planner's arenas, weights, gradients, optimizer state, the data).
PyTorch and tinygrad are optional (`pip install -e .[bench]` brings tinygrad; torch's CPU wheel is the user's to
install): a side that is not installed is said so, with "-" in its columns.
Checked while measuring (a failed check exits 1 after the table): plain and TinyJit give the same losses (outputs)
call by call, and PyTorch's first output from the same weights is tinyviz's.

  .venv/bin/python bench/bench_real.py [--quick] [--only gpt_fwd,mnist] [--reps 9] [--threads 1,2]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import real_models as rm  # noqa: E402
from bench.table import format_table  # noqa: E402

SIDES = ("plain", "jit", "torch", "tinygrad")
LIBS = ("tinyviz", "torch", "tinygrad")  # the sides of the first-call processes (tinyviz's first call is plain)
WARMUP = 3  # calls before timing: the first compiles, a TinyJit captures on its second
FIRST_CALLS = 3  # calls of a first-call process before its peak memory is read (a TinyJit's capture included)


def installed(lib: str) -> bool:
  return lib == "tinyviz" or importlib.util.find_spec(lib) is not None


def _limit_threads(threads: int, torch: bool) -> None:
  """Every side on `threads` cores: ours by THREADS (read when a kernel compiles), BLAS, torch's intra-op pool."""
  from threadpoolctl import threadpool_limits
  os.environ["THREADS"] = str(threads)
  threadpool_limits(threads)
  if torch:
    import torch
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)


def _value(out: Any) -> np.ndarray:
  """A call's loss (or output) as a float64 array, copied out of whichever library made it."""
  return np.array(out.numpy(), dtype=np.float64)


def _agree(got: np.ndarray, ref: np.ndarray, rtol: float) -> bool:
  scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
  return got.shape == ref.shape and bool(np.all(np.abs(got - ref) <= rtol * scale))


def measure(progs: list[str], size: rm.Size, reps: int, threads: int) -> dict:
  """The interleaved timings of every program on every installed side at this process's thread count, and the
  checks' outcomes: {"times": {prog: {side: [[cpu s, wall s], ...]}}, "checks": [str], "failed": [str]}."""
  _limit_threads(threads, installed("torch"))
  lib = rm.tinyviz()
  tg = rm.tinygrad() if installed("tinygrad") else None
  runners: dict[str, dict[str, rm.Program]] = {}
  for p in progs:
    runners[p] = {"plain": rm.build(p, lib, size), "jit": rm.build(p, lib, size, jit=True)}
    if installed("torch"):  # the same weights as ours, before any step
      runners[p]["torch"] = rm.torch_program(p, size, rm.numpy_state(runners[p]["plain"].model, lib))
    if tg is not None:
      runners[p]["tinygrad"] = rm.build(p, tg, size, jit=True)
  times = {p: {s: [] for s in r} for p, r in runners.items()}
  firsts: dict[str, dict[str, np.ndarray]] = {p: {} for p in progs}
  losses: dict[str, list[float]] = {p: [] for p in progs}
  failed: list[str] = []
  for i in range(WARMUP + reps):
    for p in progs:
      vals = {}
      for side, run in runners[p].items():
        c0, w0 = time.process_time(), time.perf_counter()
        out = run()
        c1, w1 = time.process_time(), time.perf_counter()
        vals[side] = _value(out)
        if i >= WARMUP:
          times[p][side].append([c1 - c0, w1 - w0])
        firsts[p].setdefault(side, vals[side])
      # plain and TinyJit run the same kernels on the same weights: the same numbers, call by call
      if not _agree(vals["jit"], vals["plain"], 1e-5) and not any(f.startswith(f"{p}: TinyJit") for f in failed):
        failed.append(f"{p}: TinyJit's call {i + 1} differs from plain's (max |diff| "
                      f"{np.abs(vals['jit'] - vals['plain']).max():.3g})")
      losses[p].append(float(vals["plain"].ravel()[0]))
  checks = []
  for p in progs:
    what, one = ("outputs", "output") if p == "gpt_fwd" else ("losses", "loss")
    checks.append(f"{p}: plain and TinyJit {what} agree over {len(losses[p])} calls: {losses[p][0]:.4g} -> "
                  f"{losses[p][-1]:.4g}")
    if "torch" in firsts[p]:
      ref, got = firsts[p]["torch"], firsts[p]["plain"]
      diff = float(np.abs(got - ref).max()) if got.shape == ref.shape else float("inf")
      # float32 through other orders of the same math: ~1e-6 relative, 1e-4 leaves room for 4 layers of it
      (checks if _agree(got, ref, 1e-4) else failed).append(
        f"{p}: PyTorch's first {one} from the same weights {'is ours' if _agree(got, ref, 1e-4) else 'DIFFERS'}"
        f" (max |diff| {diff:.2g})")
  return {"times": times, "checks": checks, "failed": failed}


def _cpu() -> float:
  """CPU seconds of this process and of its children it waited for (tinygrad compiles in clang processes)."""
  own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def first_call(prog: str, lib_name: str, size: rm.Size, threads: int) -> dict:
  """In a fresh process: the first call's CPU and wall seconds, and the peak RSS (MB) after FIRST_CALLS calls."""
  _limit_threads(threads, lib_name == "torch")
  base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  if lib_name == "torch":  # (torch's own initial weights: tinyviz's would bring the compiler into this process)
    run = rm.torch_program(prog, size, None)
  else:
    run = rm.build(prog, rm.tinyviz() if lib_name == "tinyviz" else rm.tinygrad(), size, jit=True)
  c0, w0 = _cpu(), time.perf_counter()
  _value(run())
  c1, w1 = _cpu(), time.perf_counter()
  for _ in range(FIRST_CALLS - 1):
    _value(run())
  buf_mb = None
  if lib_name == "tinyviz":
    from compiler.runtime.buffer import memory_peak
    buf_mb = memory_peak() / 2 ** 20
  return {"cpu": c1 - c0, "wall": w1 - w0, "base_mb": base, "buf_mb": buf_mb,
          "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _child(args: list[str], threads: int, cache: str | None = None) -> Any:
  """Run this script with args in a fresh process at `threads` (cache: its XDG_CACHE_HOME, where tinyviz's and
  tinygrad's compile caches live); its JSON answer."""
  with tempfile.TemporaryDirectory() as d:
    out = Path(d) / "out.json"
    env = {**os.environ, "THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    if cache is not None:
      env["XDG_CACHE_HOME"] = cache
    proc = subprocess.run([sys.executable, __file__, *args, "--threads", str(threads), "--out", str(out)], env=env,
                          capture_output=True, text=True)
    if proc.returncode:
      raise RuntimeError(f"bench_real child {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def _ms(samples: list | None, k: int) -> str:
  """The median of column k (0 CPU, 1 wall) in ms; '-' without samples."""
  if not samples:
    return "-"
  v = statistics.median(s[k] for s in samples) * 1e3
  return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def table(progs: list[str], results: dict[int, dict], firsts: dict) -> str:
  cols = [("program", "<21"), ("thr", ">3"), ("plain ms", ">8"), ("jit ms", ">8"), ("torch ms", ">8"),
          ("tg ms", ">8"), ("plain wall", ">10"), ("jit wall", ">8"), ("torch wall", ">10"), ("tg wall", ">8"),
          ("jit/torch", ">9"), ("first s", ">7"), ("warm s", ">6"), ("torch 1st", ">9"), ("tg 1st", ">6"), ("MB", ">5"),
          ("buf MB", ">6"), ("torch MB", ">8"), ("tg MB", ">6")]
  rows = []
  for p in progs:
    for threads, res in results.items():
      t = res["times"][p]
      k = 0 if threads == 1 else 1
      ratio = "-"
      if t.get("torch"):
        ratio = f"{statistics.median(s[k] for s in t['jit']) / statistics.median(s[k] for s in t['torch']):.2f}"
      f = {lib: firsts.get((p, lib, threads)) for lib in (*LIBS, "warm")}
      first = [f"{f[lib]['cpu']:.2f}" if f[lib] else "-" for lib in ("tinyviz", "warm", "torch", "tinygrad")]
      peak = [f"{f[lib]['peak_mb']:.0f}" if f[lib] else "-" for lib in LIBS]
      peak.insert(1, f"{f['tinyviz']['buf_mb']:.0f}" if f["tinyviz"] else "-")
      rows.append((rm.PROGRAMS[p], threads, *[_ms(t.get(s), 0) for s in SIDES], *[_ms(t.get(s), 1) for s in SIDES],
                   ratio, *first, *peak))
  return format_table(cols, rows)


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="smaller shapes (a smoke run)")
  ap.add_argument("--only", default="", help=f"comma-separated programs of {','.join(rm.PROGRAMS)}")
  ap.add_argument("--reps", type=int, default=9)
  ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
  ap.add_argument("--child", choices=("measure", "first"), help=argparse.SUPPRESS)
  ap.add_argument("--lib", help=argparse.SUPPRESS)
  ap.add_argument("--out", help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  progs = [p for p in args.only.split(",") if p] or list(rm.PROGRAMS)
  unknown = [p for p in progs if p not in rm.PROGRAMS]
  if unknown:
    ap.error(f"no program {', '.join(unknown)}: one of {', '.join(rm.PROGRAMS)}")
  if args.reps < 1:
    ap.error("--reps must be at least 1")
  size = rm.QUICK if args.quick else rm.FULL
  threads = [int(t) for t in args.threads.split(",")]
  if args.child:  # a child process: one thread count, its answer as JSON in --out
    res = (measure(progs, size, args.reps, threads[0]) if args.child == "measure" else
           first_call(progs[0], args.lib, size, threads[0]))
    Path(args.out).write_text(json.dumps(res))
    return 0
  common = [*(["--quick"] if args.quick else []), "--only", ",".join(progs)]
  libs = [lib for lib in LIBS if installed(lib)]
  print(f"{'quick shapes' if args.quick else 'issue 29 shapes'}, median of {args.reps} interleaved reps; "
        f"tinyviz plain / TinyJit, " + ", ".join(
          f"{lib} {'TinyJit' if lib == 'tinygrad' else 'eager'}" + ("" if installed(lib) else ": not installed")
          for lib in ("torch", "tinygrad")))
  results = {t: _child(["--child", "measure", *common, "--reps", str(args.reps)], t) for t in threads}
  firsts = {}
  with tempfile.TemporaryDirectory() as caches:
    for t in threads:
      for p in progs:
        for lib in libs:
          # cold: an empty compile cache; warm (ours): a second fresh process on what the first left there
          cache = str(Path(caches) / f"{lib}-{p}-{t}")
          first = ["--child", "first", "--lib", lib, *(["--quick"] if args.quick else []), "--only", p]
          firsts[p, lib, t] = _child(first, t, cache)
          if lib == "tinyviz":
            firsts[p, "warm", t] = _child(first, t, cache)
  for t, res in results.items():
    for line in res["checks"]:
      print(f"  {t} thr: {line}")
  base = min(f["base_mb"] for f in firsts.values())
  print(f"ms: CPU time, wall: wall time, per call; first s: CPU time of the first call in a fresh process, compile "
        f"cache empty (warm s: a second process on that cache); MB: its peak RSS after {FIRST_CALLS} calls (the bare "
        f"process: {base:.0f} MB); tg: tinygrad TinyJit; jit/torch by CPU time at 1 thread, wall otherwise")
  print(table(progs, results, firsts))
  failed = [f"{t} thr: {line}" for t, res in results.items() for line in res["failed"]]
  for line in failed:
    print(f"FAILED {line}")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
