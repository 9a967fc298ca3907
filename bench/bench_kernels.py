"""Compiled kernels vs numpy, measured side by side in one process.

For each workload of bench/workloads.py (scheduled, optimized with the hand-coded heuristics, JIT-compiled): the
first-run time (schedule + optimize + compile + run), the steady time of its kernels (sum of per-kernel minimums),
GFLOP/s and GB/s, numpy's time for the same computation, and the ratio numpy/ours (> 1: we are faster). Then the
same for hand-built kernel ASTs (no scheduler), and the compile time of each kernel.

  .venv/bin/python bench/bench_kernels.py [--scale 1.0] [--reps 20] [--only matmul,elementwise]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workloads import WORKLOADS  # noqa: E402

from compiler.dtype import dtypes  # noqa: E402
from compiler.runtime.compiled import CompiledKernel, compile_kernel, default_threads, optimize  # noqa: E402
from compiler.runtime.llvm import get_jit  # noqa: E402
from compiler.uop import AxisType, KernelInfo, Ops, UOp  # noqa: E402


def best_of(fn, reps: int) -> float:
  fn()
  ts = []
  for _ in range(reps):
    t0 = time.perf_counter()
    fn()
    ts.append(time.perf_counter() - t0)
  return min(ts)


def run_workload(name: str, scale: float, reps: int) -> tuple[dict, list[dict]]:
  from compiler.schedule import create_schedule
  w = WORKLOADS[name](scale=scale)
  t = w.lazy()
  t0 = time.perf_counter()
  sched, _ = create_schedule([t.uop])
  kernels: list[tuple[CompiledKernel, tuple]] = []
  for si in sched:
    for b in si.bufs:
      b.ensure_allocated()
    ck = compile_kernel(optimize(si.ast))
    ck(si.bufs)
    kernels.append((ck, si.bufs))
  first = time.perf_counter() - t0
  out = sched[-1].bufs[0].np.reshape(w.expected().shape)
  ok = np.allclose(out, w.expected(), rtol=w.rtol, atol=w.rtol)
  rows = []
  steady = flops = nbytes = 0.0
  # interleaved with numpy's runs, one repetition each in turn, so both see the same machine load
  best: list[float] = [float("inf")] * len(kernels)
  np_t = float("inf")
  for _ in range(reps):
    for n, (ck, bufs) in enumerate(kernels):
      best[n] = min(best[n], ck.time(bufs, reps=1, record=False).min)
    np_t = min(np_t, best_of(lambda: w.reference(*w.inputs), 1))
  for (ck, bufs), t_min in zip(kernels, best):
    tm = ck.time(bufs, reps=1, record=False)
    steady += t_min
    flops += tm.flops
    nbytes += tm.bytes
    rows.append({"kernel": ck.name, "compile_s": ck.compile_s, "min_s": t_min, "gflops": tm.flops / t_min / 1e9,
                 "gbs": tm.bytes / t_min / 1e9})
  return ({"name": name, "ok": ok, "kernels": len(kernels), "first_s": first, "steady_s": steady,
           "gflops": flops / steady / 1e9, "gbs": nbytes / steady / 1e9, "numpy_s": np_t, "ratio": np_t / steady},
          rows)


# ---- hand-built kernels (no scheduler): the two targets

def _buf(slot: int, n: int) -> UOp:
  return UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(n), (), slot)


def hand_elementwise(n: int) -> tuple[UOp, list[np.ndarray], callable]:
  i = UOp.range(n, 0, AxisType.GLOBAL)
  a, b = _buf(1, n).index(i).load(), _buf(2, n).index(i).load()
  ast = UOp.sink(_buf(0, n).index(i).store((a * b + 1.0).maximum(0.0)), arg=KernelInfo("E_relu"))
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
  return ast, [np.zeros(n, np.float32), x, y], lambda: np.maximum(x * y + 1, 0)


def hand_matmul(n: int) -> tuple[UOp, list[np.ndarray], callable]:
  i, j, r = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(n, 1, AxisType.GLOBAL), UOp.range(n, 2, AxisType.REDUCE)
  a, b = _buf(1, n * n).index(i * n + r).load(), _buf(2, n * n).index(r * n + j).load()
  ast = UOp.sink(_buf(0, n * n).index(i * n + j).store((a * b).reduce(r)), arg=KernelInfo("r_matmul"))
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
  return ast, [np.zeros(n * n, np.float32), x.reshape(-1), y.reshape(-1)], lambda: x @ y


def run_hand(name: str, make, reps: int) -> dict:
  ast, bufs, ref = make()
  t0 = time.perf_counter()
  opt_ast = optimize(ast)
  ck = compile_kernel(opt_ast)
  ck(bufs)
  first = time.perf_counter() - t0
  ok = np.allclose(bufs[0], np.asarray(ref()).reshape(-1), rtol=1e-4, atol=1e-4)
  t_min = np_t = float("inf")
  for _ in range(reps):  # interleaved with numpy's runs
    tm = ck.time(bufs, reps=1, record=False)
    t_min = min(t_min, tm.min)
    np_t = min(np_t, best_of(ref, 1))
  opts = ", ".join(f"{o.op.name}({o.axis},{o.arg})" for o in getattr(opt_ast.arg, "opts", ()))
  return {"name": name, "ok": ok, "kernels": 1, "first_s": first, "steady_s": t_min, "gflops": tm.flops / t_min / 1e9,
          "gbs": tm.bytes / t_min / 1e9, "numpy_s": np_t, "ratio": np_t / t_min, "opts": opts}


def table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
  head = " | ".join(f"{h:>{len(h) if len(h) > 8 else 8}}" for _, h, _ in cols)
  lines = [head, "-" * len(head)]
  for r in rows:
    lines.append(" | ".join(f"{format(r[k], f):>{len(h) if len(h) > 8 else 8}}" for k, h, f in cols))
  return "\n".join(lines)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--scale", type=float, default=1.0)
  ap.add_argument("--reps", type=int, default=20)
  ap.add_argument("--only", default="")
  args = ap.parse_args()
  only = set(filter(None, args.only.split(",")))
  t0 = time.perf_counter()
  get_jit()
  print(f"JIT init {time.perf_counter() - t0:.3f} s; threads {default_threads()}; cpu {get_jit().cpu}")
  rows, krows = [], []
  for name in WORKLOADS:
    if only and name not in only:
      continue
    r, ks = run_workload(name, args.scale, args.reps)
    rows.append(r)
    krows += [{"workload": name, **k} for k in ks]
  n = max(1, int(4 * 1024 * 1024 * args.scale))
  m = max(8, int(512 * args.scale))
  for name, make in (("hand elementwise", lambda: hand_elementwise(n)), ("hand matmul", lambda: hand_matmul(m))):
    if not only or name.split()[1] in only:
      rows.append(run_hand(name, make, args.reps))
  cols = [("name", "workload", "s"), ("ok", "ok", ""), ("kernels", "kernels", "d"), ("first_s", "first run s", ".3f"),
          ("steady_s", "steady ms", ".3f"), ("gflops", "GFLOP/s", ".1f"), ("gbs", "GB/s", ".1f"),
          ("numpy_s", "numpy ms", ".3f"), ("ratio", "numpy/ours", ".2f")]
  for r in rows:
    r["steady_s"] *= 1e3
    r["numpy_s"] *= 1e3
  print(table(rows, cols))
  for r in rows:
    if r.get("opts"):
      print(f"  {r['name']} opts: {r['opts']}")
  print()
  for k in krows:
    k["min_s"] *= 1e3
  print(table(krows, [("workload", "workload", "s"), ("kernel", "kernel", "s"), ("compile_s", "compile s", ".4f"),
                      ("min_s", "min ms", ".3f"), ("gflops", "GFLOP/s", ".1f"), ("gbs", "GB/s", ".1f")]))


if __name__ == "__main__":
  main()
