"""Compiled kernels vs numpy on the five workloads, side by side: what a user's program sees.

Two tables, each from its own child process so that the thread count is fixed before anything loads:
- 1 thread (THREADS=1, numpy's BLAS limited to 1 thread with threadpoolctl), timed by CPU time (process_time), so
  that other load on the machine does not skew the ratios;
- 2 threads (THREADS=2, BLAS 2 threads), timed by wall clock, with the speed-up over 1 thread: the 1-thread table's
  kernel time over this one's, and "paired": the same compiled kernels' own run times (CompiledKernel.time, without
  the call's overhead) capped to one thread over those split across the threads, by wall clock, repetitions
  interleaved in this process, which a change in the machine's load between the two child processes does not skew.
Each row: the first run (schedule + optimize + compile + run, in that process), end to end (a later call of the same
program on fresh tensors: graph building, scheduling, caches, kernels, the copy out), the jitted call end to end
(TinyJit replaying, called with the numpy arrays: bench_jit.py's "jit arrays"), kernel only (the compiled kernels of
one schedule run back to back), numpy's time for the same computation, and the ratios numpy/ours (> 1: we are
faster) and end to end / kernel only (the repeat call's cost over its kernels: 1.0 costs nothing). Repetitions of
ours and numpy's are interleaved so that both see the same machine; OpenBLAS's idle threads are told to sleep at once
(OPENBLAS_THREAD_TIMEOUT) so a spinning BLAS thread does not steal the second core from our kernels, and the CPU time
burnt by BLAS while idle is printed as a check. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset in the children
(a machine's leftover setting would measure another BLAS kernel than numpy picks) and the BLAS kernel in use is printed.
--isa sse|avx2|avx512 measures what an older x86 machine gets, on this one: our kernels compiled and tuned for that ISA
(TARGET_ISA, compiler/host.py) against numpy held to the same ISA, OpenBLAS's kernels by OPENBLAS_CORETYPE and numpy's
own SIMD loops (exp, max, ...) by NPY_DISABLE_CPU_FEATURES (the caches stay this machine's).

  .venv/bin/python bench/bench_kernels.py [--scale 1.0] [--reps 20] [--only matmul,elementwise] [--threads 1,2]
      [--odd]  (adds the workloads of sizes the tiles do not divide: bench/workloads.py ODD_WORKLOADS) [--isa avx2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from table import format_table  # noqa: E402


def _child(scale: float, reps: int, only: set[str], threads: int) -> dict:
  """Measure every workload at this process's thread count; returns what the parent prints."""
  from threadpoolctl import threadpool_info, threadpool_limits
  from workloads import ODD_WORKLOADS, WORKLOADS

  from compiler.runtime.llvm import get_jit

  threadpool_limits(threads)
  clock = time.process_time if threads == 1 else time.perf_counter
  blas = next((f"{i['internal_api']} {i.get('version', '')} {i.get('architecture', '')}, {i['num_threads']} threads"
               for i in threadpool_info() if i["user_api"] == "blas"), "no BLAS found")
  blas += f"; numpy's loops up to {_numpy_simd()}"
  rows = []
  for name, make in {**WORKLOADS, **ODD_WORKLOADS}.items():
    if (not only and name in WORKLOADS) or name in only:
      rows.append({"name": name, **_measure(make(scale=scale), reps, clock, threads)})
  spin0, wall0 = time.process_time(), time.perf_counter()
  time.sleep(0.5)  # nothing runs: CPU time burnt now is idle threads spinning (BLAS's; our pool's for 2 ms)
  spin = (time.process_time() - spin0) / (time.perf_counter() - wall0)
  return {"threads": threads, "rows": rows, "blas": blas, "spin_ms_per_s": spin * 1e3, "cpu": get_jit().cpu}


def _numpy_simd() -> str:
  """The widest of numpy's dispatched x86 loops it uses here (NPY_DISABLE_CPU_FEATURES turns some off)."""
  from numpy._core._multiarray_umath import __cpu_features__
  return next((f for f in ("AVX512_ICL", "X86_V4", "X86_V3", "X86_V2") if __cpu_features__.get(f)), "its baseline")


def _measure(w, reps: int, clock, threads: int) -> dict:
  """One workload: its first run, then ours (kernel only, end to end, jitted end to end) and numpy's, repetitions
  interleaved; with threads > 1 also the kernels' own run times capped to one thread and split ("own1", "ownT", for
  the pair)."""
  import numpy as np
  from workloads import jitted

  from compiler.realize import get_runner
  from compiler.schedule.rangeify import create_schedule
  t0 = time.perf_counter()
  got = w.lazy().numpy()
  first = time.perf_counter() - t0
  jit, outs = jitted(w)
  outs.append(got)
  sched, _ = create_schedule([w.lazy().uop])
  kernels = []
  for si in sched:
    for b in si.bufs:
      b.ensure_allocated()
    kernels.append((get_runner(si.ast), si.bufs))

  def kernel_only():
    for run, bufs in kernels:
      run(bufs)
  def own(cap: int | None) -> float:
    return sum(run.time(bufs, reps=1, warmup=0, threads=cap, record=False).min for run, bufs in kernels)
  fns = {"kernel": kernel_only, "e2e": lambda: w.lazy().numpy(), "jit": lambda: jit(*w.inputs).numpy(),
         "numpy": lambda: w.reference(*w.inputs)}
  own_best = {"own1": float("inf"), "ownT": float("inf")}
  best = dict.fromkeys(fns, float("inf"))
  for fn in fns.values():  # warm up
    fn()
  for _ in range(reps):
    for key, fn in fns.items():
      t0 = clock()
      fn()
      best[key] = min(best[key], clock() - t0)
    if threads > 1:
      own_best["own1"] = min(own_best["own1"], own(1))
      own_best["ownT"] = min(own_best["ownT"], own(None))
  outs += [w.lazy().numpy(), jit(*w.inputs).numpy()]
  ok = all(np.allclose(o, w.expected(), rtol=w.rtol, atol=w.rtol) for o in outs)
  return {"ok": ok, "kernels": len(kernels), "first_s": first, **best, **(own_best if threads > 1 else {})}


# numpy held to each TARGET_ISA preset: OpenBLAS's kernels for the newest core of that ISA it knows (Nehalem: SSE4.2,
# no AVX), and numpy's dispatched loops above it turned off (X86_V3: AVX2 + FMA, X86_V4: AVX-512 as on Skylake-X)
OPENBLAS_CORE = {"sse": "Nehalem", "avx2": "Haswell", "avx512": "SkylakeX"}
NUMPY_OFF = {"sse": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR", "avx2": "X86_V4 AVX512_ICL AVX512_SPR",
             "avx512": "AVX512_ICL AVX512_SPR"}


def _run_child(args: argparse.Namespace, threads: int) -> dict:
  env = {k: v for k, v in os.environ.items()
         if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "VIZ", "TARGET_ISA", "NPY_DISABLE_CPU_FEATURES")}
  env.update(THREADS=str(threads), OPENBLAS_THREAD_TIMEOUT="4", PYTHONPATH=str(ROOT))
  if args.isa != "host":
    env.update(TARGET_ISA=args.isa, OPENBLAS_CORETYPE=OPENBLAS_CORE[args.isa],
               NPY_DISABLE_CPU_FEATURES=NUMPY_OFF[args.isa])
  cmd = [sys.executable, __file__, "--child", str(threads), "--scale", str(args.scale), "--reps", str(args.reps),
         "--only", args.only]
  p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
  if p.returncode != 0:
    raise SystemExit(f"the {threads}-thread run failed:\n{p.stderr}")
  return json.loads(p.stdout.strip().splitlines()[-1])


def _print(res: dict, one: dict | None) -> None:
  t = res["threads"]
  clock = "CPU time" if t == 1 else "wall clock"
  print(f"\n{t} thread{'s' if t > 1 else ''} ({clock}); BLAS: {res['blas']}; idle threads burnt "
        f"{res['spin_ms_per_s']:.1f} ms CPU/s (BLAS's, and our pool's 2 ms spin after the last kernel)")
  cols = [("workload", "<12"), ("ok", "<4"), ("kernels", ">7"), ("first s", ">8.3f"), ("e2e ms", ">9.3f"),
          ("jit e2e ms", ">11.3f"), ("kernel ms", ">10.3f"), ("numpy ms", ">9.3f"), ("numpy/e2e", ">10.2f"),
          ("numpy/kernel", ">13.2f"), ("e2e/kernel", ">11.2f"), ("jit e2e/kernel", ">15.2f")]
  if one is not None:
    cols += [("vs 1 thread (kernel)", ">21.2f"), ("paired", ">7.2f")]
  base = {r["name"]: r for r in one["rows"]} if one is not None else {}
  rows = []
  for r in res["rows"]:
    row = [r["name"], "yes" if r["ok"] else "NO", r["kernels"], r["first_s"], r["e2e"] * 1e3, r["jit"] * 1e3,
           r["kernel"] * 1e3, r["numpy"] * 1e3, r["numpy"] / r["e2e"], r["numpy"] / r["kernel"],
           r["e2e"] / r["kernel"], r["jit"] / r["kernel"]]
    if one is not None:
      row.append(base[r["name"]]["kernel"] / r["kernel"] if r["name"] in base else float("nan"))
      row.append(r["own1"] / r["ownT"] if "own1" in r else float("nan"))
    rows.append(row)
  print(format_table(cols, rows))


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--scale", type=float, default=1.0)
  ap.add_argument("--reps", type=int, default=20)
  ap.add_argument("--only", default="")
  ap.add_argument("--threads", default="1,2", help="the thread counts to measure, one child process each")
  ap.add_argument("--odd", action="store_true", help="also the sizes tiles do not divide (matmul 500/499/1000, "
                  "conv2d 33x33 with 30 channels)")
  ap.add_argument("--isa", default="host", choices=["host", *OPENBLAS_CORE],
                  help="compile for an older x86 ISA than this machine's, against OpenBLAS's kernels for it")
  ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
  args = ap.parse_args()
  only = set(filter(None, args.only.split(",")))
  if args.odd:
    from workloads import ODD_WORKLOADS, WORKLOADS
    args.only = ",".join(sorted(only or set(WORKLOADS)) + sorted(ODD_WORKLOADS))
    only = set(args.only.split(","))
  if args.child is not None:
    print(json.dumps(_child(args.scale, args.reps, only, args.child)))
    return
  results = [_run_child(args, int(t)) for t in args.threads.split(",")]
  print(f"cpu {results[0]['cpu']} (TARGET_ISA={args.isa}); min of {args.reps} interleaved repetitions; "
        f"scale {args.scale}")
  one = next((r for r in results if r["threads"] == 1), None)
  for res in results:
    _print(res, one if res["threads"] != 1 else None)


if __name__ == "__main__":
  main()
