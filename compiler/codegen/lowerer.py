"""Lowering to what the linearizer places in blocks: masked loads that never read out of bounds, gated stores,
and REDUCE as an accumulator (DEFINE_ACC) updated by a PHI inside the loops over its reduce ranges; an unrolled
REDUCE(CONTRACT(v0..vn)) gets one accumulator per value when registers allow, combined after the loop. A float
vector max accumulates with compare-and-select next to a mask of the lanes that saw a NaN and the AND of the values'
bits, which give the IEEE maximum after the loop (`_max_with_nan_flag`)."""
from __future__ import annotations

import operator
from typing import Callable

from compiler.codegen.expander import chain, max_or_nan, select_max, signed_bits
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
  groups = [[x] for x in vals] if split else [vals]
  if red.arg is Ops.MAX and dtypes.is_float(red.dtype) and red.dtype.count > 1:
    return _max_with_nan_flag(ctx, red, groups)
  phis = []
  for group in groups:
    acc = _define_acc(ctx, red, identity(red.arg, red.dtype))
    phis.append(UOp(Ops.PHI, red.dtype, (acc, chain(red.arg, [acc, *group]))))
  return chain(red.arg, phis)


def _define_acc(ctx: dict, red: UOp, init: UOp) -> UOp:
  acc = UOp(Ops.DEFINE_ACC, init.dtype, (init, *red.src[1:]), ctx["acc"])
  ctx["acc"] += 1
  return acc


def _max_with_nan_flag(ctx: dict, red: UOp, groups: list[list[UOp]]) -> UOp:
  """A float vector max accumulator (one per group of values) as three: `acc < x ? x : acc` (select_max, which drops
  a NaN x and keeps acc on a tie of zeros), a mask of the lanes that have seen a NaN (`x != x`, or-ed) and the AND of
  the values' bits (signed_bits: its sign bit clear once a +0.0 was seen); after the loop a flagged lane is NaN and a
  zero lane takes the sign of the bits (max_or_nan). So the IEEE maximum, as the MAX op: a NaN anywhere gives NaN,
  and +0.0 and -0.0 give +0.0 in either order, for one AND a vector more (half of one with AVX-512's vpternlogd,
  which ands two values into the accumulator) than a max that ignores the sign; LLVM's vector maximum took 6
  instructions a vector (opt/heuristic.py's `_unroll_vectors`)."""
  tops, flags, bits = [], [], []
  for vals in groups:
    # the group's values combined pairwise first, then into the accumulator: one select a value on the loop's
    # dependency chain, and no long select-of-compare chain (LLVM's instcombine took minutes on 256 of them)
    acc = _define_acc(ctx, red, identity(Ops.MAX, red.dtype))
    tops.append(UOp(Ops.PHI, red.dtype, (acc, select_max(acc, pairwise(select_max, vals)))))
    flag = _define_acc(ctx, red, UOp.const(dtypes.bool.vec(red.dtype.count), False))
    flags.append(UOp(Ops.PHI, flag.dtype, (flag, flag | pairwise(operator.or_, [x.ne(x) for x in vals]))))
    vbits = [signed_bits(x) for x in vals]
    sign = _define_acc(ctx, red, UOp.const(vbits[0].dtype, -1))  # all bits set: the AND's identity
    bits.append(UOp(Ops.PHI, sign.dtype, (sign, sign & pairwise(operator.and_, vbits))))
  return max_or_nan(pairwise, tops, flags, bits)


def pairwise(combine: Callable[[UOp, UOp], UOp], vals: list[UOp]) -> UOp:
  """vals combined as a balanced tree, neighbours first (separate values: expander's `halves` folds one vector's
  lanes)."""
  while len(vals) > 1:
    vals = [combine(vals[i], vals[i + 1]) if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
  return vals[0]


def lower_ctx(sink: UOp, kname: str) -> dict:
  return {"acc": 0, "kname": kname, "n_reduce": sum(1 for u in toposort(sink) if u.op is Ops.REDUCE)}


pm_lower = PatternMatcher([
  (UPat(Ops.LOAD, name="ld"), masked_load),
  (UPat(Ops.STORE, name="st"), gated_store),
  (UPat(Ops.REDUCE, name="red"), lower_reduce),
], name="lower")
