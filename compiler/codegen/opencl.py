"""Rendering a linearized kernel to OpenCL C: the same UOps the LLVM renderer takes (compiler/codegen/llvmir.py), with
the same values.

The kernel's outermost loops of GLOBAL/LOOP/THREAD/LOCAL axes that enclose its whole body (at most 3) become
`get_global_id`, the innermost of them dimension 0, a LOCAL or GROUP_REDUCE one `get_local_id` of a dimension whose
work-group is its whole extent (so the work-items of a work-group are the LOCAL and GROUP axes'); every other RANGE
stays a `for` loop. A grouped reduce (compiler.codegen.lowerer.group_reduces) is a `__local` array declared at the
kernel's scope, each work-item's partial stored to it, `barrier(CLK_LOCAL_MEM_FENCE)`, and the array reduced again.
Signature: `__kernel void name(__global T0* data0, ..., int var_<name>...)`, buffer slots 0..max (an unused one as
uchar*), DEFINE_VARs sorted by name (`cl_program` / `ClProgram`).

Values mean what they mean in llvmir.py: no fast math (`#pragma OPENCL FP_CONTRACT OFF`, one statement an op, built
with -cl-fp32-correctly-rounded-divide-sqrt by compiler/runtime/opencl.py), so nan, inf and -0.0 come out as there;
MAX on floats is IEEE 754-2019 maximum (`maximum_*`: NaN propagates, +0.0 above -0.0), not fmax; float -> int casts
saturate (convert_T_sat: NaN -> 0); signed ints wrap (computed unsigned: C leaves signed overflow undefined);
division by zero gives 0, INT_MIN / -1 wraps and shifts by the width or more give 0 (or the sign), as the LLVM
backend guards them. Without cl_khr_fp16 (pocl on a CPU) half is a storage type (vload_half / vstore_half_rte): a
half value is held in a float and every op of halves rounded to half once (`rh`), as llvmir.py computes a half op
(the correctly rounded half result for + - * / sqrt, the float32 transcendental rounded once for the others). With
it (`fp16`: the device's cl_khr_fp16 and half rounding to nearest, with denormals, inf and nan) half values are
`half`/`halfN` under `#pragma OPENCL EXTENSION cl_khr_fp16 : enable`: loads and stores plain, + - * / computed in
half (correctly rounded there: the same value), a MULACC a half product then a half sum, compares, max, neg and
trunc exact, and everything else (sqrt, the transcendentals, casts in) in float, `convert_half_rte`'d once. The
transcendentals are OpenCL's builtins (exp2, log2, sin, pow), checked against float64 numpy within the LLVM
backend's error (tests/compiler/test_opencl_values.py).

Vectors (upcasts): OpenCL's vector types (floatN, intN; N of 2, 3, 4, 8, 16, a count in between padded to the next
with zero lanes), bool vectors as ucharN of 0/1; loads and stores of them are vloadN / vstoreN. Float + - * / and
fma, and bitwise ops, are vector expressions; the other ops are rendered lane by lane from their scalar form."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from compiler.codegen.errors import CodegenError
from compiler.codegen.linearizer import Linear
from compiler.codegen.llvmir import symbol
from compiler.codegen.lowerer import group_reduces
from compiler.codegen.program import collector_paused, eval_int, flops_terms, linear_kernel
from compiler.codegen.ranges import axis_type
from compiler.dtype import DType, dtypes
from compiler.uop import AxisType, GroupOp, Ops, UOp, toposort

# the scalar type a dtype is held in (half: a float holding a half value; bool: `bool`, in memory and vectors uchar)
_CTYPE = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
          dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
          dtypes.uint64: "ulong", dtypes.float16: "float", dtypes.float32: "float", dtypes.float64: "double"}
_UNSIGNED = {"char": "uchar", "short": "ushort", "int": "uint", "long": "ulong"}
_WIDTHS = (2, 3, 4, 8, 16)
# the axes one work-item may take (a BLOCK axis's iterations add into the same outputs: never in parallel)
GLOBAL_AXES = (AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD, AxisType.LOCAL, AxisType.GROUP_REDUCE)
# what may come between a BARRIER and its rendering: the other lanes' stores to the __local buffer and their indices
_BEFORE_BARRIER = GroupOp.ALU | {Ops.STORE, Ops.INDEX, Ops.BARRIER, Ops.AFTER, Ops.CONST}
# the axes whose work-items share a work-group (get_local_id)
WORK_GROUP_AXES = (AxisType.LOCAL, AxisType.GROUP_REDUCE)
MAX_GLOBAL_DIMS = 3

# helpers the kernel defines when it uses them (name -> OpenCL C); `{t}` is float or double
_HELPERS = {
  # IEEE 754-2019 maximum: NaN if either is NaN, +0.0 above -0.0 in either order (fmax drops a NaN, keeps either 0)
  "maximum": "{t} maximum_{t}({t} a, {t} b) {{ return (a != a || b != b) ? a + b : a > b ? a : b > a ? b : "
             "(signbit(a) ? b : a); }}",
  # a float rounded to the nearest half (ties to even), as a float: a half op's one rounding
  "rh": "float rh(float x) { ushort t; vstore_half_rte(x, 0, (__private half*)&t); "
        "return vload_half(0, (__private const half*)&t); }",
  "rhd": "float rhd(double x) { ushort t; vstore_half_rte(x, 0, (__private half*)&t); "
         "return vload_half(0, (__private const half*)&t); }",
  "half_bits": "ushort half_bits(float x) { ushort t; vstore_half_rte(x, 0, (__private half*)&t); return t; }",
  "half_of_bits": "float half_of_bits(ushort b) { return vload_half(0, (__private const half*)&b); }",
}


def pad_width(n: int) -> int:
  """The OpenCL vector width a vector of n lanes is held in."""
  for w in _WIDTHS:
    if n <= w:
      return w
  raise ValueError(f"OpenCL has no vector of {n} lanes (at most 16)")


def ctype(dt: DType, fp16: bool = False) -> str:
  """The OpenCL C type a value of dt is held in (a vector's lanes padded to OpenCL's widths); a half's is `half`
  with fp16 (cl_khr_fp16's arithmetic), else float."""
  s = dt.scalar()
  if s not in _CTYPE:
    raise TypeError(f"dtype {dt} has no OpenCL type")
  t = "half" if fp16 and s == dtypes.float16 else _CTYPE[s]
  if dt.count == 1:
    return t
  return f"{'uchar' if s == dtypes.bool else t}{pad_width(dt.count)}"


def mem_ctype(dt: DType) -> str:
  """The element type of a buffer of dt in memory."""
  s = dt.scalar()
  return {dtypes.bool: "uchar", dtypes.float16: "half"}.get(s) or _CTYPE[s]


def const_text(v, dt: DType) -> str:
  """A scalar constant as OpenCL C spells it (floats exactly, in hex)."""
  s = dt.scalar()
  if s == dtypes.bool:
    return "1" if v else "0"
  if dtypes.is_int(s):
    v, bits = int(v), 8 * s.itemsize
    v = (v & ((1 << bits) - 1)) - ((1 << bits) if not dtypes.is_unsigned(s) and v & (1 << (bits - 1)) else 0)
    suffix = ("u" if dtypes.is_unsigned(s) else "") + ("L" if bits == 64 else "")
    if v == dtypes.min(s) and v < 0:  # (-2147483648 is the negation of a literal too big for int)
      return f"({v + 1}{suffix}-1)"
    return f"(({_CTYPE[s]}){v}{suffix})" if bits < 32 else f"{v}{suffix}"
  v = float(v)
  if s == dtypes.float16:
    v = float(np.float16(v))
  elif s == dtypes.float32 and math.isfinite(v):
    v = float(np.float32(v))
  suffix = "" if s == dtypes.float64 else "f"
  if math.isnan(v):
    return "NAN" if suffix else "(double)NAN"
  if math.isinf(v):
    return ("-" if v < 0 else "") + ("INFINITY" if suffix else "(double)INFINITY")
  return f"{'-' if math.copysign(1.0, v) < 0 else ''}{abs(v).hex()}{suffix}"


@dataclass(frozen=True)
class ClProgram:
  """One kernel rendered to OpenCL C, with what launching it needs."""
  name: str
  fname: str
  src: str
  nbufs: int
  buf_dtypes: tuple[DType | None, ...]
  outs: tuple[int, ...]
  vars: tuple[UOp, ...]
  global_size: tuple[UOp, ...]  # per dimension (0 first) the extent of the range it stands for
  local_size: tuple[UOp, ...] | None  # None: the driver picks the work-groups
  flops_terms: tuple[tuple[int, tuple[UOp, ...]], ...]  # (program.flops_terms of the linearized kernel)
  ins: tuple[int, ...] = ()  # the slots it loads from
  uops: tuple[UOp, ...] = ()  # the linearized kernel (a trace's "uops" source)
  lines: tuple[tuple[int, ...], ...] = ()  # per line of src, the positions in uops of the UOps it came from

  @property
  def var_names(self) -> tuple[str, ...]:
    return tuple(v.arg[0] for v in self.vars)

  def flops(self, var_vals: Mapping[str, int] | None = None) -> int:
    """ALU operations of one run (value math only), as the LLVM Program counts them."""
    vv = dict(var_vals or {})
    return sum(n * math.prod(eval_int(e, vv) for e in ends) for n, ends in self.flops_terms)

  def global_dims(self, var_vals: Mapping[str, int] | None = None) -> list[int]:
    """The global work size (at least one work-item: a kernel of no global axis runs once)."""
    return [eval_int(e, dict(var_vals or {})) for e in self.global_size] or [1]

  def local_dims(self, var_vals: Mapping[str, int] | None = None) -> list[int] | None:
    return None if self.local_size is None else [eval_int(e, dict(var_vals or {})) for e in self.local_size]


def global_ranges(lin: Linear) -> list[UOp]:
  """The RANGEs that become get_global_id, outermost first: leading loops of GLOBAL_AXES each closed last, with no
  store, other loop or branch before them, whose extents are expressions of constants and variables."""
  uops, out = lin.uops, []
  for u in uops:
    if is_group_buffer(u):  # (declared at the kernel's scope, before its work-item ids)
      continue
    if len(out) == MAX_GLOBAL_DIMS or u.op in (Ops.STORE, Ops.IF, Ops.END, Ops.PHI, Ops.DEFINE_ACC, Ops.DEFINE_LOCAL):
      break
    if u.op is not Ops.RANGE:
      continue
    end = uops[len(uops) - 1 - len(out)]
    if axis_type(u) not in GLOBAL_AXES or end.op is not Ops.END or end.src[0] is not u or \
       any(x.op not in (Ops.CONST, Ops.DEFINE_VAR) and x.op not in GroupOp.ALU for x in toposort(u.src[0])):
      break
    out.append(u)
  return out


def is_group_buffer(u: UOp) -> bool:
  """A grouped reduce's __local buffer (a STAGE scratch, arg 0, is the work-item's own array)."""
  return u.op is Ops.DEFINE_LOCAL and isinstance(u.arg, str)


class _ClRenderer:
  def __init__(self, kname: str, fname: str, lin: Linear, bufs: dict[int, UOp], nbufs: int, vars_: list[UOp],
               fp16: bool = False):
    self.kname, self.fname, self.lin, self.bufs, self.nbufs, self.vars = kname, fname, lin, bufs, nbufs, vars_
    self.names: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.line_uops: list[int] = []  # per line of self.lines, the position of the UOp being rendered (-1: none)
    self.cur = -1
    self.depth = 1
    self.helpers: dict[str, str] = {}
    self.nvars = 0
    self.fp64 = any(u.dtype.scalar() == dtypes.float64 for u in lin.uops) or \
        any(b.dtype.base.scalar() == dtypes.float64 for b in bufs.values())
    # half values held in `half` and + - * / MULACC computed in it (cl_khr_fp16), only where the kernel has halves:
    # without the extension, or without halves, the source is the storage-only one
    self.half = fp16 and (any(u.dtype.scalar() == dtypes.float16 for u in lin.uops) or
                          any(b.dtype.base.scalar() == dtypes.float16 for b in bufs.values()))
    self.globals = global_ranges(lin)
    self.barrier: int | None = None  # the position of a BARRIER not rendered yet (see _flush_barrier)
    self.scope: list[str] = []  # __local arrays of helpers (a WMMA's fragment), declared at the kernel's scope

  # ---- helpers
  def err(self, reason: str, u: UOp) -> CodegenError:
    return CodegenError(self.kname, reason, u)

  def emit(self, line: str) -> None:
    self.lines.append("  " * self.depth + line)
    self.line_uops.append(self.cur)

  def helper(self, key: str, t: str = "float") -> str:
    """Define a helper of _HELPERS once; its name."""
    name = f"maximum_{t}" if key == "maximum" else key
    if name not in self.helpers:
      self.helpers[name] = _HELPERS[key].format(t=t) if key == "maximum" else _HELPERS[key]
    return name

  def ct(self, dt: DType) -> str:
    """ctype of dt in this kernel (half a `half` where it is computed in half)."""
    return ctype(dt, self.half)

  def const(self, v, dt: DType) -> str:
    """const_text, a half one typed `half` where halves are computed in half (else `x + 1.0f` would be float's)."""
    text = const_text(v, dt)
    return f"((half){text})" if self.half and dt.scalar() == dtypes.float16 else text

  def val(self, u: UOp) -> str:
    """The text of u's value: a literal, a parameter, or the variable it got."""
    if u.op is Ops.CONST:
      return self.const(u.arg, u.dtype)
    if u.op is Ops.VECTORIZE and all(s.op is Ops.CONST for s in u.src):
      if all(s is u.src[0] for s in u.src):  # a splat
        return f"({self.ct(u.dtype)})({self.const(u.src[0].arg, u.dtype)})"
      return self.vec_of([self.const(s.arg, s.dtype) for s in u.src], u.dtype)
    if u.op is Ops.DEFINE_GLOBAL:
      return f"data{u.arg}"
    if u.op is Ops.DEFINE_VAR:
      return f"var_{symbol(str(u.arg[0]))}"
    if u.op is Ops.PHI:
      return self.val(u.src[0])
    try:
      return self.names[u]
    except KeyError:
      raise self.err("node used before it is defined (linearizer bug)", u) from None

  def lane(self, u: UOp, k: int) -> str:
    return self.val(u) if u.dtype.count == 1 else f"{self.val(u)}.s{k:x}"

  def vec_of(self, lanes: list[str], dt: DType) -> str:
    """A vector of dt from its lanes' texts (padding lanes 0)."""
    et = "uchar" if dt.scalar() == dtypes.bool else self.ct(dt.scalar())
    parts = [f"({et})({x})" for x in lanes] + ["0"] * (pad_width(dt.count) - len(lanes))
    return f"({self.ct(dt)})({', '.join(parts)})"

  def define(self, u: UOp, expr: str) -> str:
    name = f"v{self.nvars}"  # (numbered apart from the UOps: a node placed again in a second loop is a new variable)
    self.nvars += 1
    self.emit(f"{self.ct(u.dtype)} {name} = {expr};")
    return name

  def lanewise(self, u: UOp, fn: Callable[[list[str]], str]) -> str:
    """u's value from the scalar form fn of its op, lane by lane for a vector."""
    if u.dtype.count == 1:
      return fn([self.val(s) for s in u.src])
    return self.vec_of([fn([self.lane(s, k) for s in u.src]) for k in range(u.dtype.count)], u.dtype)

  # ---- the kernel
  def render(self) -> str:
    for i, u in enumerate(self.lin.uops):
      if self.barrier is not None and u.op not in _BEFORE_BARRIER:
        self._flush_barrier()
      self.cur = i
      self.names[u] = self._uop(u, i) or self.names.get(u, "")
    self._flush_barrier()
    self.cur = -1
    self.lines[:0], self.line_uops[:0] = ["  " + x for x in self.scope], [-1] * len(self.scope)
    params = [f"__global {mem_ctype(self.bufs[i].dtype.base) if i in self.bufs else 'uchar'}* data{i}"
              for i in range(self.nbufs)] + [f"int var_{symbol(str(v.arg[0]))}" for v in self.vars]
    head = ["#pragma OPENCL FP_CONTRACT OFF"]
    if self.fp64:
      head.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if self.half:
      head.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    body = "\n".join(self.lines)
    return "\n".join(head + list(self.helpers.values())) + \
        f"\n__kernel void {self.fname}({', '.join(params)}) {{\n{body}\n}}\n"

  def line_map(self, src: str) -> tuple[tuple[int, ...], ...]:
    """Per line of the rendered `src`, the positions of the UOps it came from (none for the pragmas, helpers,
    signature and closing brace): a body line is its UOp's statement."""
    body = [(i,) if i >= 0 else () for x, i in zip(self.lines, self.line_uops) for _ in range(x.count("\n") + 1)]
    head = src.count("\n") + 1 - len(body) - 2  # ("}" and the empty line after the final newline)
    return ((),) * head + tuple(body) + ((), ())

  def _uop(self, u: UOp, i: int) -> str | None:
    """Emit u's statement; the name of its value, None for none."""
    op = u.op
    if op is Ops.RANGE:
      name, t = f"ridx{i}", ctype(u.dtype)
      if u in self.globals:  # a LOCAL or GROUP axis is the work-group's own dimension (see cl_program)
        dim = len(self.globals) - 1 - self.globals.index(u)
        fn = "get_local_id" if axis_type(u) in WORK_GROUP_AXES else "get_global_id"
        self.emit(f"{t} {name} = ({t}){fn}({dim});  /* {axis_type(u).name} */")
      elif axis_type(u) is AxisType.GROUP_REDUCE:
        raise self.err(f"a GROUP axis must be a work-item id, but the kernel has more than {MAX_GLOBAL_DIMS} "
                       "work-item dimensions before it", u)
      else:
        self.emit(f"for ({t} {name} = 0; {name} < {self.val(u.src[0])}; {name}++) {{")
        self.depth += 1
      return name
    if op in (Ops.END, Ops.ENDIF):
      if op is Ops.ENDIF or u.src[0] not in self.globals:
        self.depth -= 1
        self.emit("}")
      return None
    if op is Ops.IF:
      self.emit(f"if ({self.val(u.src[0])}) {{")
      self.depth += 1
      return None
    if op is Ops.DEFINE_ACC:
      name = f"acc{u.arg}"
      self.emit(f"{self.ct(u.dtype)} {name} = {self.val(u.src[0])};")
      return name
    if op is Ops.PHI:
      self.emit(f"{self.val(u.src[0])} = {self.val(u.src[1])};")
      return None
    if op is Ops.STORE:
      self._store(u)
      return None
    if op is Ops.INDEX:
      if len(u.src) > 2:
        raise self.err("INDEX with a valid left after lowering", u)
      return None  # (loads and stores spell their address)
    if op is Ops.DEFINE_LOCAL:
      return self._group_buffer(u) if is_group_buffer(u) else self._scratch(u, i)
    if op is Ops.BARRIER:
      self.barrier = i
      return None
    if op is Ops.AFTER:
      return self.val(u.src[0])
    return self.define(u, self._value(u))

  def _flush_barrier(self) -> None:
    """Every work-item of the work-group has stored its partial before any reads them: one barrier for the stores
    in a row an upcast's lanes make (each lane's BARRIER is held until something other than a store or index math
    comes, which is still outside every loop and branch, as a barrier must be)."""
    if self.barrier is not None:
      self.cur, self.barrier = self.barrier, None
      self.emit("barrier(CLK_LOCAL_MEM_FENCE);")

  def _group_buffer(self, u: UOp) -> str:
    """A grouped reduce's buffer, shared by the work-group: `__local`, at the kernel's scope as OpenCL requires."""
    if self.depth != 1:
      raise self.err("a __local buffer must be declared at the kernel's scope, not inside a loop", u)
    base, name = u.dtype.base.scalar(), str(u.arg)
    if base == dtypes.float16:
      self.emit(f"__local ushort {name}_mem[{u.dtype.size}];")
      self.emit(f"__local half* {name} = (__local half*){name}_mem;")
    else:
      self.emit(f"__local {mem_ctype(base)} {name}[{u.dtype.size}];")
    return name

  def _scratch(self, u: UOp, i: int) -> str:
    """A STAGE scratch: the work-item's own array (a half one held as ushort: half is only a pointer's type)."""
    base, name = u.dtype.base.scalar(), f"scratch{i}"
    if base == dtypes.float16:
      self.emit(f"ushort {name}_mem[{u.dtype.size}];")
      self.emit(f"__private half* {name} = (__private half*){name}_mem;")
    else:
      self.emit(f"{mem_ctype(base)} {name}[{u.dtype.size}];")
    return name

  # ---- memory
  def _addr(self, ix: UOp) -> tuple[str, str]:
    if ix.op is not Ops.INDEX:
      raise self.err("LOAD/STORE needs an INDEX", ix)
    buf, idx = ix.src[0], ix.src[1]
    if buf.op not in (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.AFTER):
      raise self.err("INDEX of something other than a buffer", ix)
    if idx.dtype.count != 1 or not dtypes.is_int(idx.dtype):
      raise self.err("index must be a scalar int", ix)
    return self.val(buf), self.val(idx)

  def _load(self, u: UOp) -> str:
    p, idx = self._addr(u.src[0])
    s, n = u.dtype.scalar(), u.dtype.count
    if self.half and s == dtypes.float16:  # (a half pointer's elements are values: plain loads)
      s = dtypes.float32
    if len(u.src) > 1:  # a masked vector load: each lane read only where its mask is set (C's ?: reads one side)
      one = "vload_half({i}, {p})" if s == dtypes.float16 else "{p}[{i}]"
      return self.vec_of([f"({self.lane(u.src[1], k)} ? {one.format(p=p, i=f'{idx} + {k}')} : 0)" for k in range(n)],
                         u.dtype)
    if n == 1:
      return f"vload_half({idx}, {p})" if s == dtypes.float16 else f"({p}[{idx}] != 0)" if s == dtypes.bool \
          else f"{p}[{idx}]"
    if n == pad_width(n) and s != dtypes.bool:
      return f"vload{'_half' if s == dtypes.float16 else ''}{n}(0, {p} + {idx})"
    one = "vload_half({i}, {p})" if s == dtypes.float16 else "{p}[{i}]"
    return self.vec_of([one.format(p=p, i=f"{idx} + {k}") for k in range(n)], u.dtype)

  def _store(self, st: UOp) -> None:
    p, idx = self._addr(st.src[0])
    v = st.src[1]
    s, n, x = v.dtype.scalar(), v.dtype.count, self.val(v)
    if self.half and s == dtypes.float16:  # (stored as it is: already a half)
      s = dtypes.float32
    if n == 1:
      self.emit(f"vstore_half_rte({x}, {idx}, {p});" if s == dtypes.float16 else
                f"{p}[{idx}] = {'(uchar)' if s == dtypes.bool else ''}{x};")
    elif n == pad_width(n) and s != dtypes.bool:
      self.emit(f"vstore{'_half' if s == dtypes.float16 else ''}{n}{'_rte' if s == dtypes.float16 else ''}"
                f"({x}, 0, {p} + {idx});")
    else:
      for k in range(n):
        self.emit(f"vstore_half_rte({x}.s{k:x}, {idx} + {k}, {p});" if s == dtypes.float16 else
                  f"{p}[{idx} + {k}] = {x}.s{k:x};")

  # ---- values
  def _value(self, u: UOp) -> str:
    op = u.op
    if op is Ops.LOAD:
      return self._load(u)
    if op is Ops.VECTORIZE:
      s0 = u.src[0]
      if all(s is s0 for s in u.src):
        return f"({self.ct(u.dtype)})(({'uchar' if s0.dtype == dtypes.bool else self.ct(s0.dtype)}){self.val(s0)})"
      return self.vec_of([self.val(s) for s in u.src], u.dtype)
    if op is Ops.GEP:
      lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,)
      if len(lanes) == 1:
        return self.lane(u.src[0], lanes[0])
      return self.vec_of([self.lane(u.src[0], k) for k in lanes], u.dtype)
    if op is Ops.CAST:
      if (u.src[0].dtype.scalar(), u.dtype.scalar()) == (dtypes.float16, dtypes.float32) and not self.half:
        return self.val(u.src[0])  # (a half is held in a float)
      return self.lanewise(u, lambda a: self._cast(u, u.src[0].dtype.scalar(), u.dtype.scalar(), a[0]))
    if op is Ops.BITCAST:
      return self._bitcast(u)
    if op in GroupOp.ALU:
      return self._alu(u)
    if op is Ops.WMMA:
      return self._wmma(u)
    raise self.err(f"unsupported op {op.name}", u)

  def _wmma(self, u: UOp) -> str:
    """A tensor core's fragment multiply-add (compiler/opt/tc.py), emulated by a helper with the tensor core's own
    element layout: each lane writes its A and B elements to their places in a __local copy of the fragment, a
    barrier, each lane sums its C elements' rows times columns, a barrier. The warp must be the work-group."""
    name, (n, m, k), threads, (ea, eb, ec), _din, _dout, pa, pb, pc = u.arg
    lane = u.src[3]
    group = [r for r in self.globals if axis_type(r) in WORK_GROUP_AXES]
    if group != [lane] or lane.src[0].op is not Ops.CONST or lane.src[0].arg != threads:
      raise self.err(f"a WMMA's {threads} lanes must be the whole work-group (its work-item ids)", u)
    fn = f"wmma_{symbol(name)}"
    if fn not in self.helpers:
      self.helpers[fn] = _wmma_helper(fn, (n, m, k), (ea, eb, ec), (pa, pb, pc))
      self.scope += [f"__local float {fn}_a[{m * k}];", f"__local float {fn}_b[{k * n}];"]
    a, b, c = (self._as_float(s) for s in u.src[:3])  # (the helper's fragments are float's)
    out = f"{fn}({a}, {b}, {c}, {self.val(lane)}, {fn}_a, {fn}_b)"
    return f"convert_half{pad_width(u.dtype.count)}_rte({out})" if self.half and u.dtype.scalar() == dtypes.float16 \
        else out

  def _as_float(self, u: UOp) -> str:
    """u's value as float (a half vector of cl_khr_fp16 converted: OpenCL converts no vector implicitly)."""
    if self.half and u.dtype.scalar() == dtypes.float16:
      return f"convert_float{pad_width(u.dtype.count) if u.dtype.count > 1 else ''}({self.val(u)})"
    return self.val(u)

  def _cast(self, u: UOp, fs: DType, ts: DType, a: str) -> str:
    """The scalar cast of a from fs to ts, as llvmir.py casts (C conversions, saturating float -> int)."""
    if fs == ts:
      return a
    if ts == dtypes.bool:
      return f"({a} != 0)"
    if dtypes.is_int(ts):
      # a float -> int cast saturates, NaN -> 0 (LLVM's fpto[su]i.sat); int -> int truncates or extends
      return f"convert_{_CTYPE[ts]}_sat({a})" if dtypes.is_float(fs) else f"({_CTYPE[ts]})({a})"
    if not dtypes.is_float(ts):
      raise self.err(f"can't cast {fs} to {ts}", u)
    if ts == dtypes.float16 and self.half:  # once rounded to nearest (a cast would take the device's half rounding)
      return f"convert_half_rte({a if fs in (dtypes.float32, dtypes.float64) else f'(float)({a})'})"
    if ts == dtypes.float16:  # once rounded to half (from a double directly: no double rounding through float)
      if fs == dtypes.float64:
        return f"{self.helper('rhd')}({a})"
      return f"{self.helper('rh')}({a if fs == dtypes.float32 else f'(float)({a})'})"
    return f"({_CTYPE[ts]})({a})"

  def _bitcast(self, u: UOp) -> str:
    x = u.src[0]
    fs, ts = x.dtype.scalar(), u.dtype.scalar()
    if fs.itemsize != ts.itemsize or x.dtype.count != u.dtype.count or dtypes.bool in (fs, ts):
      raise self.err("BITCAST between types of different size", u)
    if dtypes.float16 not in (fs, ts) or self.half:
      return f"as_{self.ct(u.dtype)}({self.val(x)})"

    def one(a: list[str]) -> str:
      if fs == dtypes.float16:
        return f"({_CTYPE[ts]}){self.helper('half_bits')}({a[0]})"
      return f"{self.helper('half_of_bits')}((ushort)({a[0]}))"
    return self.lanewise(u, one)

  def _alu(self, u: UOp) -> str:
    op = u.op
    sdt = u.src[0].dtype if op in GroupOp.Comparison else u.dtype
    if op is Ops.WHERE:
      sdt = u.src[1].dtype
    s = sdt.scalar()
    if op is Ops.WHERE:
      return self.lanewise(u, lambda a: f"({a[0]} ? {a[1]} : {a[2]})")
    if op in GroupOp.Comparison:
      sym = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}[op]
      return self.lanewise(u, lambda a: f"({a[0]} {sym} {a[1]})")
    if dtypes.is_float(s):
      return self._falu(u, s)
    if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.FDIV, Ops.POW):
      raise self.err(f"{op.name} needs a float dtype", u)
    if s == dtypes.bool:
      return self._balu(u)
    return self._ialu(u, s)

  def _falu(self, u: UOp, s: DType) -> str:
    op, t = u.op, self.ct(s)
    half = s == dtypes.float16
    one = "1.0" if s == dtypes.float64 else "1.0f"
    forms: dict[Ops, Callable[[list[str]], str]] = {
      Ops.ADD: lambda a: f"{a[0]} + {a[1]}", Ops.SUB: lambda a: f"{a[0]} - {a[1]}",
      Ops.MUL: lambda a: f"{a[0]} * {a[1]}", Ops.FDIV: lambda a: f"{a[0]} / {a[1]}",
      Ops.RECIP: lambda a: f"{one} / {a[0]}", Ops.SQRT: lambda a: f"sqrt({a[0]})",
      Ops.EXP2: lambda a: f"exp2({a[0]})", Ops.LOG2: lambda a: f"log2({a[0]})", Ops.SIN: lambda a: f"sin({a[0]})",
      Ops.POW: lambda a: f"pow({a[0]}, {a[1]})",
      # a half MULACC is a product and a sum, each rounded (the interpreter's a * b + c); a float one one fma
      Ops.MULACC: (lambda a: f"{self.helper('rh')}({a[0]} * {a[1]}) + {a[2]}") if half else
      (lambda a: f"fma({a[0]}, {a[1]}, {a[2]})"),
    }
    if op is Ops.NEG:
      return self.lanewise(u, lambda a: f"-{a[0]}")
    if op is Ops.TRUNC:  # (exact: no rounding for half)
      return self.lanewise(u, lambda a: f"trunc({a[0]})")
    if op is Ops.MAX:  # one of the operands: exact for half too
      fn = self.helper("maximum", t)
      return self.lanewise(u, lambda a: f"{fn}({a[0]}, {a[1]})")
    if op not in forms:
      raise self.err(f"{op.name} is not defined on floats", u)
    form = forms[op]
    if half and self.half:
      return self._native_half(u, form)
    if half:
      rh = self.helper("rh")
      return self.lanewise(u, lambda a: f"{rh}({form(a)})")
    if u.dtype.count > 1 and op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC):  # lane by lane, as vectors
      return form([self.val(x) for x in u.src])
    return self.lanewise(u, form)

  def _native_half(self, u: UOp, form: Callable[[list[str]], str]) -> str:
    """A half op with cl_khr_fp16: + - * / in half (correctly rounded there, so the LLVM backend's value), a MULACC
    a half product and a half sum (FP_CONTRACT OFF: two roundings, as llvmir.py); the others in float, rounded to
    half once (to nearest: the device's half rounding may be toward zero)."""
    if u.op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC):
      native = (lambda a: f"{a[0]} * {a[1]} + {a[2]}") if u.op is Ops.MULACC else form
      return native([self.val(x) for x in u.src]) if u.dtype.count > 1 else self.lanewise(u, native)
    return self.lanewise(u, lambda a: f"convert_half_rte({form([f'(float)({x})' for x in a])})")

  def _balu(self, u: UOp) -> str:
    op = u.op
    if op is Ops.NEG:
      return self.lanewise(u, lambda a: f"!{a[0]}")
    if op is Ops.TRUNC:
      return self.val(u.src[0])
    sym = {Ops.ADD: "|", Ops.MUL: "&", Ops.MAX: "|", Ops.SUB: "^", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}.get(op)
    if sym is None:
      raise self.err(f"{op.name} is not defined on bool", u)
    return self.lanewise(u, lambda a: f"({a[0]} {sym} {a[1]})")

  def _ialu(self, u: UOp, s: DType) -> str:
    op, t = u.op, _CTYPE[s]
    ut = _UNSIGNED.get(t, t)  # signed + - * computed unsigned: they wrap instead of being undefined
    bits = 8 * s.itemsize
    if op in (Ops.AND, Ops.OR, Ops.XOR):
      sym = {Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}[op]
      if u.dtype.count > 1:
        return f"{self.val(u.src[0])} {sym} {self.val(u.src[1])}"
      return self.lanewise(u, lambda a: f"({t})({a[0]} {sym} {a[1]})")
    arith = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*"}
    if op in arith and u.dtype.count == 1 and (u.vmin, u.vmax) != (dtypes.min(s), dtypes.max(s)):
      # bounds that prove no overflow (llvmir's `nsw`): plain C (index math mostly)
      return f"{self.val(u.src[0])} {arith[op]} {self.val(u.src[1])}"
    if op in arith:
      return self.lanewise(u, lambda a: f"({t})(({ut}){a[0]} {arith[op]} ({ut}){a[1]})")
    if op is Ops.NEG:
      return self.lanewise(u, lambda a: f"({t})(-({ut}){a[0]})")
    if op is Ops.TRUNC:
      return self.val(u.src[0])
    if op is Ops.MAX:
      return self.lanewise(u, lambda a: f"max({a[0]}, {a[1]})")
    if op is Ops.MULACC:
      return self.lanewise(u, lambda a: f"({t})(({ut}){a[0]} * ({ut}){a[1]} + ({ut}){a[2]})")
    if op in (Ops.IDIV, Ops.MOD):
      return self.lanewise(u, lambda a: self._divmod(op, s, t, ut, a))
    if op in (Ops.SHL, Ops.SHR):
      return self.lanewise(u, lambda a: self._shift(op, s, t, ut, bits, a))
    raise self.err(f"unsupported int op {op.name}", u)

  @staticmethod
  def _divmod(op: Ops, s: DType, t: str, ut: str, a: list[str]) -> str:
    """C's / and % (truncating), guarded: by 0 gives 0, INT_MIN / -1 wraps and INT_MIN % -1 is 0 (no trap)."""
    sym = "/" if op is Ops.IDIV else "%"
    if dtypes.is_unsigned(s):
      return f"({a[1]} == 0 ? ({t})0 : ({t})({a[0]} {sym} {a[1]}))"
    by_m1 = f"({t})(-({ut}){a[0]})" if op is Ops.IDIV else f"({t})0"
    return f"({a[1]} == 0 ? ({t})0 : {a[1]} == -1 ? {by_m1} : ({t})({a[0]} {sym} {a[1]}))"

  @staticmethod
  def _shift(op: Ops, s: DType, t: str, ut: str, bits: int, a: list[str]) -> str:
    """Shifts by the width or more give 0 (the sign for a signed >>), as the LLVM backend's."""
    big = f"({ut}){a[1]} >= {bits}u"
    if op is Ops.SHL:
      return f"({big} ? ({t})0 : ({t})(({ut}){a[0]} << {a[1]}))"
    over = f"({t})({a[0]} >> {bits - 1})" if not dtypes.is_unsigned(s) else f"({t})0"
    return f"({big} ? {over} : ({t})({a[0]} >> {a[1]}))"


def _wmma_helper(fn: str, dims: tuple[int, int, int], per: tuple[int, int, int],
                 places: tuple[tuple[int, ...], ...]) -> str:
  """The OpenCL C of an emulated WMMA: its layout tables (lane * elements + element -> row * cols + col) and the
  function (a half is held in a float; the products and sums are float's)."""
  n, m, k = dims
  ea, eb, ec = per
  out = [f"__constant ushort {fn}_p{x}[{len(p)}] = {{{', '.join(map(str, p))}}};" for x, p in zip("abc", places)]
  out.append(f"float{pad_width(ec)} {fn}(float{pad_width(ea)} a, float{pad_width(eb)} b, float{pad_width(ec)} c, "
             f"int lane, __local float* fa, __local float* fb) {{")
  out += [f"  f{x}[{fn}_p{x}[lane * {per_} + {e}]] = {x}.s{e:x};" for x, per_ in (("a", ea), ("b", eb))
          for e in range(per_)]
  out.append("  barrier(CLK_LOCAL_MEM_FENCE);")
  for e in range(ec):
    out += [f"  {{ int p = {fn}_pc[lane * {ec} + {e}], row = p / {n}, col = p % {n}; float s = 0.0f;",
            f"    for (int i = 0; i < {k}; i++) s += fa[row * {k} + i] * fb[i * {n} + col];",
            f"    c.s{e:x} += s; }}"]
  out += ["  barrier(CLK_LOCAL_MEM_FENCE);", "  return c;", "}"]
  return "\n".join(out)


def render_opencl(kname: str, fname: str, lin: Linear, bufs: dict[int, UOp], nbufs: int, vars_: list[UOp],
                  fp16: bool = False) -> str:
  """OpenCL C of one kernel (see the module doc); bufs: the kernel's DEFINE_GLOBALs by slot; fp16: the device has
  IEEE half arithmetic (cl_khr_fp16, rounding to nearest)."""
  return _render(kname, fname, lin, bufs, nbufs, vars_, fp16)[0]


def _render(kname: str, fname: str, lin: Linear, bufs: dict[int, UOp], nbufs: int,
            vars_: list[UOp], fp16: bool = False) -> tuple[str, tuple[tuple[int, ...], ...]]:
  """render_opencl's text and its line map (_ClRenderer.line_map)."""
  for u in lin.uops:
    if u.op not in (Ops.INDEX, Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.AFTER) and u.dtype != dtypes.void:
      try:
        ctype(u.dtype)
      except (TypeError, ValueError) as e:
        raise CodegenError(kname, str(e), u) from None
  r = _ClRenderer(kname, fname, lin, bufs, nbufs, vars_, fp16)
  src = r.render()
  return src, r.line_map(src)


def cl_program(ast: UOp, fp16: bool = False) -> ClProgram:
  """A kernel AST (optimized or not) lowered by the LLVM pipeline's passes (program.lower_ast), linearized and
  rendered to OpenCL C (fp16: for a device with IEEE half arithmetic, `DeviceLimits.fp16`)."""
  with collector_paused():
    lk = linear_kernel(group_reduces(ast))
    kname, fname, lin, bufs, vars_, nbufs = lk.kname, lk.fname, lk.lin, lk.bufs, lk.vars, lk.nbufs
    src, lines = _render(kname, fname, lin, bufs, nbufs, list(vars_), fp16)
  outs, ins = ({u.src[0].src[0].arg for u in lin.uops if u.op is op and u.src[0].src[0].op is Ops.DEFINE_GLOBAL}
               for op in (Ops.STORE, Ops.LOAD))
  glob = global_ranges(lin)[::-1]  # (dimension 0 first)
  # a LOCAL or GROUP axis of n gets a dimension of n work-items in one work-group of n, a global one work-groups of
  # 1: the work-group is the LOCAL and GROUP axes' work-items
  one = UOp.const(dtypes.int32, 1)
  local = tuple(r.src[0] if axis_type(r) in WORK_GROUP_AXES else one for r in glob)
  return ClProgram(kname, fname, src, nbufs, tuple(bufs[i].dtype.base if i in bufs else None for i in range(nbufs)),
                   tuple(sorted(outs)), vars_, tuple(r.src[0] for r in glob),
                   local if any(axis_type(r) in WORK_GROUP_AXES for r in glob) else None, flops_terms(lin),
                   tuple(sorted(ins)), tuple(lin.uops), lines)
