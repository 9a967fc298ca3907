"""Index math in int64 for the LLVM backend ("widen index"): loop counters and the int32 math over them, as LLVM widens
them anyway for addressing.

The scheduler gives a kernel's RANGEs and index math int32 where their bounds allow. x86 addresses in 64 bits, so
LLVM's IndVarSimplify widens every int32 loop counter and its index math to int64 (sign extensions proven away
through the `nsw` flags), and Loop Strength Reduction and IV Users walk those again: a fifth of LLVM's time on a
first call (MNIST's training step: IndVarSimplify, IV Users and LSR 0.78 of 3.6 CPU s; issue 29). Rendered in int64
from the start, that work is not there to do: 22% (GPT step) to 31% (MNIST) less LLVM time, the outputs bit for bit
the same and the kernels as fast (docs/architecture.md, "LLVM is the largest part of a cold first call").

Every value stays what it was: a node is made int64 only where its bounds in int64 (vmin/vmax, which claim nothing
where a value may overflow) lie within int32's, so the int32 node computed the same value without wrapping; where
they do not, the node stays int32 over its sources cast back (exact: each fits int32). A consumer that needs int32
(a store of an int32 value, a vector of lanes, a cast) reads a widened value through a CAST back to int32. Scalar
int32 only: vectors of indices, other int types and RANGEs of a symbolic size (the parallel loop's size is an int
expression the runtime evaluates) are left as they are. OpenCL keeps int32 (its renderer does not run this pass)."""
from __future__ import annotations

from compiler.dtype import dtypes
from compiler.rewrite import PatternMatcher, UPat
from compiler.uop import FastOps, GroupOp, Ops, UOp

_I32, _I64 = dtypes.int32, dtypes.int64
_LO, _HI = -(1 << 31), (1 << 31) - 1
# ALU ops whose int64 result is the int32 one wherever both are exact (div and mod truncate alike in both widths)
# (not the shifts: the renderer defines a shift by the type's width or more, which differs between the widths)
_WIDEN = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR, Ops.WHERE}
# consumers that take a widened source as it is: an INDEX's address and a loop's references to its RANGE (END; a
# DEFINE_ACC's sources after its initial value)
_TAKES_WIDE = {Ops.INDEX, Ops.END, Ops.DEFINE_ACC}


def _to64(ctx: set[UOp], u: UOp) -> UOp:
  """u as an int64 operand: itself where widened, a constant re-typed, else sign-extended (exact)."""
  if u in ctx:
    return u
  if u.op is Ops.CONST:
    return UOp.const(_I64, u.arg)
  return UOp(Ops.CAST, _I64, (u,))


def _to32(ctx: set[UOp], u: UOp) -> UOp:
  """A widened value back as int32 (exact: its bounds lie within int32's)."""
  return UOp(Ops.CAST, _I32, (u,)) if u in ctx else u


def _fits(u: UOp) -> bool:
  lo, hi = u.vmin, u.vmax
  return _LO <= lo and hi <= _HI


def widen_range(ctx: set[UOp], r: UOp) -> UOp | None:
  """An int32 loop of a constant size: its counter in int64."""
  if r.dtype is not _I32 or r.src[0].op is not Ops.CONST:
    return None
  out = UOp(Ops.RANGE, _I64, (UOp.const(_I64, r.src[0].arg), *r.src[1:]), r.arg)
  ctx.add(out)
  return out


def widen_alu(ctx: set[UOp], x: UOp) -> UOp | None:
  """An int32 ALU node over a widened source: in int64 where that is exact, else int32 over its sources cast back.
  A comparison reads both sides in int64."""
  if x in ctx or not any(s in ctx for s in x.src):
    return None
  if x.op in GroupOp.Comparison:
    if all(s.dtype is _I64 for s in x.src):
      return None
    return UOp(x.op, x.dtype, tuple(_to64(ctx, s) for s in x.src), x.arg)
  if x.dtype is _I32 and x.op in _WIDEN:
    keep = 1 if x.op is FastOps.WHERE else 0  # (a WHERE's condition stays bool)
    srcs = x.src[:keep] + tuple(_to64(ctx, s) for s in x.src[keep:])
    out = UOp(x.op, _I64, srcs, x.arg)
    if _fits(out):
      ctx.add(out)
      return out
  return _narrow_srcs(ctx, x)


def _narrow_srcs(ctx: set[UOp], x: UOp) -> UOp:
  return UOp(x.op, x.dtype, tuple(_to32(ctx, s) for s in x.src), x.arg)


def narrow_use(ctx: set[UOp], x: UOp) -> UOp | None:
  """Any other consumer of a widened value reads it as the int32 it was (an INDEX's address and a loop's references
  to its RANGE take it as it is)."""
  if x.op in _TAKES_WIDE or x.op in GroupOp.ALU or not any(s in ctx for s in x.src):
    return None
  if x.op is Ops.CAST and x.dtype is _I32:
    return None  # (the narrowing itself)
  return _narrow_srcs(ctx, x)


def _acc_narrow(ctx: set[UOp], x: UOp) -> UOp | None:
  """A DEFINE_ACC's initial value as int32 (its other sources are loops)."""
  if x.src[0] not in ctx:
    return None
  return x.replace(src=(_to32(ctx, x.src[0]), *x.src[1:]))


def _index_narrow(ctx: set[UOp], x: UOp) -> UOp | None:
  """An INDEX takes a widened address, but a widened value elsewhere in it (a gate) as int32."""
  if not any(s in ctx for s in x.src[2:]):
    return None
  return UOp(x.op, x.dtype, x.src[:2] + tuple(_to32(ctx, s) for s in x.src[2:]), x.arg)


pm_widen_index = PatternMatcher([
  (UPat(Ops.RANGE, name="r"), widen_range),
  # (by dtype: the float math, most of a kernel, is not asked)
  (UPat(tuple(GroupOp.ALU - GroupOp.Comparison), dtype=_I32, name="x"), widen_alu),
  (UPat(tuple(GroupOp.Comparison), dtype=dtypes.bool, name="x"), widen_alu),
  (UPat(Ops.INDEX, name="x"), _index_narrow),
  (UPat(Ops.DEFINE_ACC, name="x"), _acc_narrow),
  (UPat(name="x"), narrow_use),
], name="widen index")
