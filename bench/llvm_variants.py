"""LLVM's share of a first call (issue 29), kernel by kernel: each kernel's IR (from bench_first_call.py --dump)
parsed, optimized and made object code under the JIT's pipeline and under variants of it, interleaved kernel by
kernel, with each variant's CPU time and the kernels whose code (.text and constant sections) it changes; a variant
that changes no kernel's code changes no number and no run time.

  PYTHONPATH=. .venv/bin/python bench/bench_first_call.py --dump /tmp/ir
  PYTHONPATH=. .venv/bin/python bench/llvm_variants.py /tmp/ir/gpt_step-cold.ll /tmp/ir/mnist-cold.ll
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.table import format_table  # noqa: E402
from compiler.runtime.llvm import OPT_LEVEL, get_jit  # noqa: E402

# name -> (pipeline tuning: speed level, loop vectorize, SLP, unroll), code generation's opt level, line tables kept
VARIANTS: dict[str, tuple[tuple[int, bool, bool, bool], int, bool]] = {
  "JIT's (O3)": ((3, True, True, True), 3, True),
  "O2": ((2, True, True, True), 3, True),
  "no loop unrolling": ((3, True, True, False), 3, True),
  "no SLP": ((3, True, False, True), 3, True),
  "no loop vectorizer": ((3, False, True, True), 3, True),
  "code generation at 2": ((3, True, True, True), 2, True),
  "no line tables": ((3, True, True, True), 3, False),
}
SIZES = ((10_000, "IR < 10 KB"), (50_000, "IR 10-50 KB"), (None, "IR > 50 KB"))


def kernels(path: Path) -> list[tuple[str, str]]:
  """(function name, IR) of each kernel of a --dump file (entries "name\\nIR" joined by blank lines)."""
  out = []
  for part in re.split(r"\n\n(?=[A-Za-z_0-9]+\n; kernel )", path.read_text()):
    fname, _, src = part.partition("\n")
    if src:
      out.append((fname, src))
  return out


def without_line_tables(src: str) -> str:
  src = re.sub(r",? !dbg !\d+", "", src)
  return "\n".join(ln for ln in src.splitlines() if not ln.startswith(("!llvm.dbg.cu", "!llvm.module.flags"))
                   and not re.match(r"!\d+ = .*(!DI|Debug Info Version)", ln))


def code_of(obj: bytes) -> bytes:
  """The object's code and constants (what runs), not its debug sections or symbol names."""
  keep = (b".text", b".ltext", b".rodata", b".lrodata")
  return b"|".join((s.name() or b"") + b":" + s.data() for s in llvm.ObjectFileRef.from_data(obj).sections()
                   if (s.name() or b"").startswith(keep))


def compile_with(jit: Any, tms: dict[int, Any], fname: str, src: str, variant: tuple) -> tuple[float, bytes]:
  """(CPU s, code) of one kernel under one variant: parse, verify, optimize, object code."""
  (speed, lv, slp, unroll), cg, lines = variant
  t0 = time.process_time()
  mod = llvm.parse_assembly(src if lines else without_line_tables(src))
  mod.verify()
  mod.triple, mod.data_layout = jit.tm.triple, str(jit.tm.target_data)
  pto = llvm.create_pipeline_tuning_options(speed_level=speed)
  pto.loop_vectorization, pto.slp_vectorization, pto.loop_unrolling = lv, slp, unroll
  pb = llvm.create_pass_builder(tms[cg], pto)
  pb.getModulePassManager().run(mod, pb)
  obj = tms[cg].emit_object(mod)
  return time.process_time() - t0, code_of(obj)


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("dumps", nargs="+", type=Path, help="bench_first_call.py --dump files (PROG-cold.ll)")
  args = ap.parse_args(argv)
  jit = get_jit()
  tms = {3: jit.tm, 2: jit.target.create_target_machine(cpu=jit.cpu, features=jit.features, opt=2, reloc="default",
                                                        codemodel="jitdefault", jit=True)}
  ks = [k for p in args.dumps for k in kernels(p)]
  cpu: dict[str, Counter[str]] = {v: Counter() for v in VARIANTS}
  changed: Counter[str] = Counter()
  for fname, src in ks:
    size = next(label for limit, label in SIZES if limit is None or len(src) < limit)
    base = None
    for name, variant in VARIANTS.items():  # (interleaved kernel by kernel: the machine's load falls on all alike)
      dt, code = compile_with(jit, tms, fname, src, variant)
      cpu[name][size] += dt
      cpu[name]["all"] += dt
      base = code if base is None else base
      changed[name] += code != base
  base_s = cpu["JIT's (O3)"]["all"]
  rows = [(name, f"{c['all']:.2f}", f"{c['all'] / base_s:.2f}", *(f"{c[label]:.2f}" for _, label in SIZES),
           f"{changed[name]}/{len(ks)}") for name, c in cpu.items()]
  print(f"{len(ks)} kernels, LLVM_OPT={OPT_LEVEL}: CPU s of parse + optimize + object code, by IR size")
  print(format_table([("variant", "<22"), ("CPU s", ">6"), ("x JIT's", ">7"),
                      *((label, ">11") for _, label in SIZES), ("code changed", ">12")], rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
