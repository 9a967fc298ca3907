"""Checks that a kernel AST follows the contract (docs/architecture.md, "IR") before codegen touches it."""
from __future__ import annotations

from compiler.codegen.errors import CodegenError, kernel_name
from compiler.dtype import PtrDType, dtypes
from compiler.uop import AxisType, FastOps, GroupOp, Ops, UOp, toposort

_ALLOWED = GroupOp.ALU | {Ops.SINK, Ops.STORE, Ops.INDEX, Ops.LOAD, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.RANGE,
                          Ops.CONST, Ops.REDUCE, Ops.CAST, Ops.BITCAST, Ops.VECTORIZE,
                          Ops.DEFINE_LOCAL, Ops.AFTER, Ops.END,  # a STAGE scratch and its fill
                          Ops.BARRIER,  # a grouped reduce's __local buffer, read once the work-group has written it
                          Ops.WMMA, Ops.GEP, Ops.UNROLL}  # a tensor core's fragment: each C element a GEP of it
_SUPPORTED = set(dtypes.all) | {dtypes.void}


def verify_ast(ast: UOp) -> None:
  """Raise CodegenError naming the kernel and the first node that breaks the contract."""
  kname = kernel_name(ast)
  if ast.op is not FastOps.SINK:
    raise CodegenError(kname, "a kernel AST is a SINK of STOREs", ast)
  if not ast.src:
    raise CodegenError(kname, "kernel stores nothing", ast)
  slots: dict[int, UOp] = {}
  for u in toposort(ast):
    if u.op not in _ALLOWED:
      raise CodegenError(kname, f"unsupported op {u.op.name} in a kernel", u)
    base = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
    if base.scalar() not in _SUPPORTED:
      raise CodegenError(kname, f"unsupported dtype {u.dtype}", u)
    if u.op is FastOps.SINK and u is not ast:
      raise CodegenError(kname, "SINK inside a kernel", u)
    if u.op is FastOps.STORE and (len(u.src) != 2 or u.src[0].op is not FastOps.INDEX):
      raise CodegenError(kname, "STORE must be STORE(INDEX(...), value)", u)
    if u.op is FastOps.LOAD and (len(u.src) != 1 or u.src[0].op is not FastOps.INDEX):
      raise CodegenError(kname, "LOAD must be LOAD(INDEX(...))", u)
    if u.op is FastOps.INDEX:
      _check_index(kname, u)
    if u.op in (FastOps.END, FastOps.AFTER, FastOps.BARRIER):
      _check_stage(kname, u)
    if u.op is FastOps.DEFINE_GLOBAL:
      if not isinstance(u.dtype, PtrDType) or not isinstance(u.arg, int) or u.arg < 0:
        raise CodegenError(kname, "DEFINE_GLOBAL needs a pointer dtype and a slot number >= 0", u)
      if slots.setdefault(u.arg, u) is not u:
        raise CodegenError(kname, f"buffer slot {u.arg} is defined twice with different dtypes", u)
    if u.op is FastOps.RANGE:
      if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], AxisType)):
        raise CodegenError(kname, "RANGE arg must be (axis_id, AxisType)", u)
      if not dtypes.is_int(u.src[0].dtype):
        raise CodegenError(kname, "RANGE size must be an int expression", u)
    if u.op is FastOps.REDUCE:
      if u.arg not in (FastOps.ADD, FastOps.MUL, FastOps.MAX):
        raise CodegenError(kname, f"unsupported reduce op {u.arg}", u)
      if any(r.op is not FastOps.RANGE for r in u.src[1:]):
        raise CodegenError(kname, "REDUCE sources after the value must be RANGEs", u)
    if u.op is FastOps.DEFINE_VAR and not (isinstance(u.arg, tuple) and len(u.arg) == 3):
      raise CodegenError(kname, "DEFINE_VAR arg must be (name, min, max)", u)
  for st in ast.src:
    if st.op is not FastOps.STORE:
      raise CodegenError(kname, "a kernel's SINK takes only STOREs", st)


def _check_stage(kname: str, u: UOp) -> None:
  """A scratch is read as INDEX(AFTER(DEFINE_LOCAL, END(STORE(...), *ranges)), idx): the fill loops, then the reads;
  a grouped reduce's buffer as INDEX(AFTER(DEFINE_LOCAL, BARRIER(STORE(...))), idx): every work-item's store, then
  the reads (compiler.codegen.lowerer.group_reduces)."""
  if u.op is Ops.END and (not u.src or u.src[0].op is not Ops.STORE or any(r.op is not Ops.RANGE for r in u.src[1:])):
    raise CodegenError(kname, "END must be END(STORE, *RANGEs)", u)
  if u.op is Ops.BARRIER and (len(u.src) != 1 or u.src[0].op is not Ops.STORE):
    raise CodegenError(kname, "BARRIER must be BARRIER(STORE)", u)
  if u.op in (Ops.END, Ops.BARRIER) and u.src[0].src[0].src[0].op is Ops.DEFINE_GLOBAL:
    # (a global buffer's stores are the SINK's: expansion makes their lanes there, compiler/codegen/expander.py)
    raise CodegenError(kname, f"{u.op.name} of a STORE to a global buffer (a kernel's outputs are its SINK's)", u)
  if u.op is Ops.AFTER and (len(u.src) != 2 or u.src[0].op is not Ops.DEFINE_LOCAL or
                            u.src[1].op not in (Ops.END, Ops.BARRIER)):
    raise CodegenError(kname, "AFTER must be AFTER(DEFINE_LOCAL, END or BARRIER)", u)


_BUFFERS = (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.AFTER)


def _check_index(kname: str, u: UOp) -> None:
  if len(u.src) not in (2, 3) or u.src[0].op not in _BUFFERS:
    raise CodegenError(kname, "INDEX must be INDEX(DEFINE_GLOBAL, idx[, valid])", u)
  if not dtypes.is_int(u.src[1].dtype) or u.src[1].dtype.count != 1:
    raise CodegenError(kname, "index must be a scalar int expression", u)
  if len(u.src) == 3 and u.src[2].dtype != dtypes.bool:
    raise CodegenError(kname, "valid must be a scalar bool", u)
  size, idt = u.src[0].dtype.size, u.src[1].dtype
  if size > dtypes.max(idt) + 1:  # the index would wrap before reaching the end: refuse rather than touch memory
    raise CodegenError(kname, f"buffer of {size} elements indexed with {idt.name} (needs a wider index dtype)", u)
