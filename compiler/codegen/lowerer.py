"""Lowering to what the linearizer places in blocks: masked loads that never read out of bounds, gated stores,
and REDUCE as an accumulator (DEFINE_ACC) updated by a PHI inside the loops over its reduce ranges; an unrolled
REDUCE(CONTRACT(v0..vn)) gets one accumulator per value when registers allow, combined after the loop."""
from __future__ import annotations

from compiler.codegen.expander import chain
from compiler.dtype import DType, dtypes
from compiler.rewrite import PatternMatcher, UPat
from compiler.uop import Ops, UOp, toposort


def identity(op: Ops, dt: DType) -> UOp:
  """The neutral element of a reduce op (vector dtypes give a vector constant)."""
  if op is Ops.ADD:
    v = 0
  elif op is Ops.MUL:
    v = 1
  elif op is Ops.MAX:
    v = dtypes.min(dt)
  else:
    raise ValueError(f"no identity for reduce op {op}")
  return UOp.const(dt, v)


def masked_load(ld: UOp) -> UOp | None:
  """LOAD(INDEX(buf, idx, valid)) reads 0 where not valid, from index 0 so the address is always in bounds."""
  ix = ld.src[0]
  if len(ix.src) < 3:
    return None
  buf, idx, valid = ix.src[:3]
  safe = UOp(Ops.INDEX, ix.dtype, (buf, valid.where(idx, UOp.const(idx.dtype, 0))))
  return valid.where(UOp(Ops.LOAD, ld.dtype, (safe,)), UOp.const(ld.dtype, 0))


def gated_store(st: UOp) -> UOp | None:
  ix = st.src[0]
  if len(ix.src) < 3:
    return None
  return UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, ix.dtype, ix.src[:2]), st.src[1], ix.src[2]))


# an unrolled reduce keeps one accumulator per unrolled value (independent chains hide the add/fma latency) while
# the kernel's accumulators stay within this many registers in all
ACC_REGISTERS = 16


def lower_reduce(ctx: dict, red: UOp) -> UOp:
  v = red.src[0]
  vals = list(v.src) if v.op is Ops.CONTRACT else [v]
  split = len(vals) > 1 and ctx["n_reduce"] * len(vals) <= ACC_REGISTERS
  phis = []
  for group in ([[x] for x in vals] if split else [vals]):
    acc = UOp(Ops.DEFINE_ACC, red.dtype, (identity(red.arg, red.dtype), *red.src[1:]), ctx["acc"])
    ctx["acc"] += 1
    phis.append(UOp(Ops.PHI, red.dtype, (acc, chain(red.arg, [acc, *group]))))
  return chain(red.arg, phis)


def lower_ctx(sink: UOp, kname: str) -> dict:
  return {"acc": 0, "kname": kname, "n_reduce": sum(1 for u in toposort(sink) if u.op is Ops.REDUCE)}


pm_lower = PatternMatcher([
  (UPat(Ops.LOAD, name="ld"), masked_load),
  (UPat(Ops.STORE, name="st"), gated_store),
  (UPat(Ops.REDUCE, name="red"), lower_reduce),
], name="lower")
