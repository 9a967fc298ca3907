"""Half through cl_khr_fp16 (compiler/codegen/opencl.py): on a device with IEEE half arithmetic the OpenCL C computes
+ - * / and MULACC in `half` (correctly rounded there, so the LLVM backend's values: tests/compiler/
test_half_semantics.py), compares, max, neg and trunc exactly, and the rest in float rounded once to nearest; pocl
(no cl_khr_fp16) keeps the storage-only source (vload_half, `rh`). Checked at the source level: no device here
has the extension, and no fake runtime runs it."""
from __future__ import annotations

import re

from support.codegen_helpers import UP, G, alu_kernel, buf, sink, split

from compiler.codegen.opencl import cl_program
from compiler.dtype import dtypes
from compiler.runtime.opencl import cl_kernel, get_device, ieee_half
from compiler.uop import Ops, UOp

PRAGMA = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable"
STORAGE_ONLY = ("vload_half", "vstore_half", "rh(")
NATIVE = {Ops.ADD: "v0 + v1", Ops.SUB: "v0 - v1", Ops.MUL: "v0 * v1", Ops.FDIV: "v0 / v1", Ops.MULACC: "v0 * v1 + v2",
          Ops.CMPLT: "(v0 < v1)", Ops.CMPNE: "(v0 != v1)", Ops.NEG: "-v0", Ops.TRUNC: "trunc(v0)",
          Ops.MAX: "maximum_half(v0, v1)"}
IN_FLOAT = {Ops.SQRT: "sqrt((float)(v0))", Ops.RECIP: "1.0f / (float)(v0)", Ops.EXP2: "exp2((float)(v0))",
            Ops.LOG2: "log2((float)(v0))", Ops.SIN: "sin((float)(v0))", Ops.POW: "pow((float)(v0), (float)(v1))"}
ARITY = {Ops.MULACC: 3, Ops.NEG: 1, Ops.TRUNC: 1, Ops.SQRT: 1, Ops.RECIP: 1, Ops.EXP2: 1, Ops.LOG2: 1, Ops.SIN: 1}


def _op_line(src: str) -> str:
  """The kernel's one computed value: the statement after its loads."""
  (line,) = [x.strip() for x in src.splitlines() if re.match(r"\s+(half|bool) v\d+ = ", x) and "data" not in x]
  return line


def test_fp16_device_computes_half_ops_in_half_and_the_rest_in_float_rounded_once():
  for op, want in {**NATIVE, **IN_FLOAT}.items():
    src = cl_program(alu_kernel(op, dtypes.float16, ARITY.get(op, 2)), fp16=True).src
    assert PRAGMA in src and not any(s in src for s in STORAGE_ONLY), (op, src)
    assert "half v0 = data1[ridx0];" in src and re.search(r"data0\[ridx0\] = (\(uchar\))?v\d+;", src), src
    expr = want if op in NATIVE else f"convert_half_rte({want})"
    assert _op_line(src).endswith(f" = {expr};"), (op, src)
  vec = cl_program(split(alu_kernel(Ops.FDIV, dtypes.float16, 2), 0, 4, UP), fp16=True).src
  assert "half4 v1 = vload4(0, data1 + v0);" in vec and "half4 v3 = v1 / v2;" in vec
  assert "vstore4(v3, 0, data0 + v0);" in vec
  i = UOp.range(64, 0, G)
  x = buf(1, 64, dtypes.float32).index(i).load()
  down = cl_program(sink(buf(0, 64, dtypes.float16).index(i).store(x.cast(dtypes.float16)), name="E_to_half"), True)
  assert "half v1 = convert_half_rte(v0);" in down.src  # (to nearest: a plain cast takes the device's half rounding)
  h = buf(1, 64, dtypes.float16).index(i).load()
  up = cl_program(sink(buf(0, 64, dtypes.float32).index(i).store(h.cast(dtypes.float32) * 2.0), name="E_up"), True)
  assert "float v1 = (float)(v0);" in up.src and "float v2 = v1 * 0x1.0000000000000p+1f;" in up.src
  plus = cl_program(sink(buf(0, 64, dtypes.float16).index(i).store(h + 1.5), name="E_plus"), True).src
  assert "half v1 = v0 + ((half)0x1.8000000000000p+0f);" in plus  # (a float literal would make it a float +)


def test_without_ieee_half_the_source_stays_storage_only_byte_for_byte():
  dev = get_device()
  assert not dev.limits.fp16  # (pocl 3.1: no cl_khr_fp16)
  assert ieee_half(["cl_khr_fp16"], 0x7) and not ieee_half(["cl_khr_fp64"], 0x7)
  assert not ieee_half(["cl_khr_fp16"], 0x3)  # rounds toward zero only: its half + would differ
  assert not ieee_half(["cl_khr_fp16"], 0x6)  # flushes denormals
  half = alu_kernel(Ops.MUL, dtypes.float16, 2)
  built = cl_kernel(half).program.src  # (what the device builds: the renderer told it has no IEEE half)
  assert built == cl_program(half).src == cl_program(half, fp16=False).src
  assert PRAGMA not in built and "vload_half(ridx0, data1)" in built and "rh(v0 * v1)" in built
  floats = alu_kernel(Ops.MUL, dtypes.float32, 2)  # no halves: the extension changes nothing
  assert cl_program(floats, fp16=True).src == cl_program(floats).src
