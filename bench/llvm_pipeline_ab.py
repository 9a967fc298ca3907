"""An LLVM pipeline variant's cost at run time (issue 29), kernel by kernel: the first call of one of bench_real's
programs, where each kernel, at its first run, is also compiled under the variant (into a scratch engine) and both
codes run on the kernel's own buffers: once each from the same inputs (their outputs compared bit for bit), then
--reps runs each, interleaved (A B A B: a change in the machine's load reaches both), the inputs restored after.
Prints the sums over kernels of each code's fastest and median run, both pipelines' compile CPU time, the kernels
whose outputs differ, and the kernels the variant slows most; llvm_variants.py gives the code each variant changes.

  PYTHONPATH=. .venv/bin/python bench/llvm_pipeline_ab.py mnist [--variant 1,0,0,0,1] [--reps 7] [--max-ir N]

--variant: speed level, loop vectorizer, SLP, loop unrolling (1/0), code generation's opt level, and optionally the
loop vectorizer's interleaving (1/0, default 1); the JIT's at LLVM_OPT=3 is 3,1,1,1,3, LLVM_OPT=1's is 1,0,0,0,1.
--max-ir N: only the kernels of fewer than N characters of IR. THREADS=1 (both codes on one core).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import real_models as rm  # noqa: E402
from bench.table import format_table  # noqa: E402

JITS = (3, 1, 1, 1, 3)  # the JIT's pipeline at LLVM_OPT=3, as a variant


def variant_object(jit: Any, tm: Any, src: str, fname: str, symbol: str, variant: tuple[int, ...]) -> bytes:
  """Object code of `fname` (renamed `symbol`) under the variant's pipeline and code generation."""
  import llvmlite.binding as llvm
  speed, lv, slp, unroll, _, *interleave = variant
  mod = llvm.parse_assembly(src)
  mod.get_function(fname).name = symbol
  mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
  pto = llvm.create_pipeline_tuning_options(speed_level=speed)
  pto.loop_vectorization, pto.slp_vectorization, pto.loop_unrolling = bool(lv), bool(slp), bool(unroll)
  pto.loop_interleaving = bool(interleave[0]) if interleave else True
  pb = llvm.create_pass_builder(tm, pto)
  pb.getModulePassManager().run(mod, pb)
  return tm.emit_object(mod)


def _one_run(ck: Any, arrs: list, var_vals: Any) -> float:
  plan = ck._plan(arrs, ck._vars(var_vals), var_vals, 1)
  t0 = time.perf_counter()
  ck._run_plan(plan)
  return time.perf_counter() - t0


Row = tuple[str, float, float, float, float, bool]  # kernel, min and median run s (JIT's, variant's), outputs equal


def measure(program: str, size: rm.Size, variant: tuple[int, ...], reps: int, max_ir: int = 0
            ) -> tuple[list[Row], tuple[float, float]]:
  """One first call of `program` (THREADS=1), each kernel's first run A/B'd against `variant`: a row per kernel, and
  the compile CPU s (JIT's pipeline, variant's) of the kernels compared."""
  os.environ["THREADS"] = "1"
  from compiler.runtime import compiled
  from compiler.runtime.llvm import ScratchJit, get_jit
  jit = get_jit()
  tm = jit.target.create_target_machine(cpu=jit.cpu, features=jit.features, opt=variant[4], reloc="default",
                                        codemodel="jitdefault", jit=True)
  scratch = ScratchJit(tm)
  seen: set[int] = set()
  compile_s = [0.0, 0.0]
  rows: list[Row] = []
  call = compiled.CompiledKernel.__call__

  def ab(self: Any, bufs: Any, var_vals: Any = None, threads: Any = None) -> None:
    prg = self.program
    if id(self) not in seen and self.engine is None and (not max_ir or len(prg.src) < max_ir):
      seen.add(id(self))
      symbol = f"{prg.fname}_ab{len(seen)}"
      c0 = time.process_time()
      variant_object(jit, jit.tm, prg.src, prg.fname, symbol + "j", JITS)
      c1 = time.process_time()
      obj = variant_object(jit, tm, prg.src, prg.fname, symbol, variant)
      compile_s[0] += c1 - c0
      compile_s[1] += time.process_time() - c1
      rows.append(_ab_runs(self, compiled.CompiledKernel(prg, scratch.add_object(obj, symbol), 0.0, None, scratch),
                           self._arrays(bufs), var_vals, reps))
    call(self, bufs, var_vals, threads)
  compiled.CompiledKernel.__call__ = ab
  try:
    rm.build(program, rm.tinyviz(), size, jit=True)().numpy()
  finally:
    compiled.CompiledKernel.__call__ = call
    scratch.close()
  return rows, (compile_s[0], compile_s[1])


def _ab_runs(ck: Any, alt: Any, arrs: list, var_vals: Any, reps: int) -> Row:
  """ck and alt from the same inputs (outputs compared), then `reps` runs each interleaved; the inputs restored."""
  keep = [a.copy() for a in arrs]
  outs = []
  for k in (ck, alt):
    _one_run(k, arrs, var_vals)
    outs.append([arrs[i].tobytes() for i in ck.program.outs])
    for a, kept in zip(arrs, keep):
      a[...] = kept
  ta, tb = [], []
  for _ in range(reps):
    ta.append(_one_run(ck, arrs, var_vals))
    tb.append(_one_run(alt, arrs, var_vals))
  for a, kept in zip(arrs, keep):
    a[...] = kept
  return (ck.program.name, min(ta), min(tb), statistics.median(ta), statistics.median(tb), outs[0] == outs[1])


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("program", choices=list(rm.PROGRAMS))
  ap.add_argument("--variant", default="1,0,0,0,1", help="speed,LV,SLP,unroll,codegen level[,interleave]")
  ap.add_argument("--reps", type=int, default=7)
  ap.add_argument("--quick", action="store_true", help="smaller shapes")
  ap.add_argument("--top", type=int, default=8, help="kernels listed, slowest variant first")
  ap.add_argument("--max-ir", type=int, default=0, help="only kernels of fewer characters of IR (0: all)")
  args = ap.parse_args(argv)
  variant = tuple(int(x) for x in args.variant.split(","))
  rows, (ca, cb) = measure(args.program, rm.QUICK if args.quick else rm.FULL, variant, args.reps, args.max_ir)
  ma, mb = sum(r[1] for r in rows), sum(r[2] for r in rows)
  da, db = sum(r[3] for r in rows), sum(r[4] for r in rows)
  differ = [r[0] for r in rows if not r[5]]
  print(f"{rm.PROGRAMS[args.program]}: {len(rows)} kernels, variant {variant} vs the JIT's pipeline, "
        f"{args.reps} runs each interleaved, THREADS=1; outputs differ in {len(differ)}: {', '.join(differ) or '-'}")
  print(format_table([("", "<16"), ("JIT's", ">9"), ("variant", ">9"), ("ratio", ">6")],
                     [("run min ms", f"{ma * 1e3:.2f}", f"{mb * 1e3:.2f}", f"{mb / ma:.3f}"),
                      ("run median ms", f"{da * 1e3:.2f}", f"{db * 1e3:.2f}", f"{db / da:.3f}"),
                      ("compile CPU s", f"{ca:.3f}", f"{cb:.3f}", f"{cb / ca:.3f}")]))
  worst = sorted(rows, key=lambda r: r[1] - r[2])[:args.top]
  print(format_table([("kernel (variant slowest)", "<32"), ("JIT's ms", ">9"), ("variant ms", ">10")],
                     [(r[0], f"{r[1] * 1e3:.3f}", f"{r[2] * 1e3:.3f}") for r in worst]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
