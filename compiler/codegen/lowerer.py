"""Lowering to what the linearizer places in blocks: masked loads that never read out of bounds, gated stores, and
REDUCE as an accumulator (DEFINE_ACC) updated by a PHI inside the loops over its reduce ranges; an unrolled
REDUCE(CONTRACT(v0..vn)) gets one accumulator per value when registers allow, combined after the loop. A float vector
max accumulates with compare-and-select next to a mask of the lanes that saw a NaN and the AND of the values' bits,
which give the IEEE maximum after the loop (`_max_with_nan_flag`). On OpenCL a REDUCE over GROUP_REDUCE axes is split
first (`group_reduces`): partials through a __local buffer and a BARRIER, reduced again. An accumulator whose value
is only read under a WHERE's condition (a nested reduction read through a pad) gets that condition as a gate,
PHI(acc, update, gate), so its loop runs inside IF(gate) (`gate_reduces`, "gate reduce")."""
from __future__ import annotations

import functools
import operator
from functools import reduce
from typing import Callable

from compiler.codegen.expander import chain, max_or_nan, select_max, signed_bits
from compiler.codegen.ranges import const_size, free_ranges, loop_key
from compiler.dtype import DType, dtypes
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.uop import AxisType, FastOps, Ops, UOp, substitute, toposort


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
  """LOAD(INDEX(buf, idx, valid)) reads 0 where not valid, from index 0 so the address is always in bounds; a vector
  load whose lanes have masks of their own becomes LOAD(INDEX(buf, idx), mask), a masked vector load."""
  ix = ld.src[0]
  if len(ix.src) < 3:
    return None
  buf, idx, valid = ix.src[:3]
  if valid.dtype.count > 1:  # a mask a lane: LOAD(INDEX(buf, idx), mask) reads only the valid lanes, 0 in the others
    return UOp(Ops.LOAD, ld.dtype, (UOp(Ops.INDEX, ix.dtype, (buf, idx)), valid))
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
  return {"acc": 0, "kname": kname, "n_reduce": sum(1 for u in toposort(sink) if u.op is FastOps.REDUCE)}


pm_lower = PatternMatcher([
  (UPat(Ops.LOAD, name="ld"), masked_load),
  (UPat(Ops.STORE, name="st"), gated_store),
  (UPat(Ops.REDUCE, name="red"), lower_reduce),
], name="lower")


# ---- GROUP: a reduce split across a work-group, through local memory (targets with __local memory and barriers)

def _group_gate(sink: UOp) -> UOp | None:
  """A store of a grouped reduce's result is done by the work-items of group index 0 alone: every work-item of the
  work-group computes the same value, one writes it (a STORE whose INDEX holds a group range already is not one)."""
  new = []
  for st in sink.src:
    ix = st.src[0]
    groups = [r for r in st.ranges if r.arg[1] is AxisType.GROUP_REDUCE and r not in ix.ranges]
    if groups:
      gate = functools.reduce(operator.and_, [g.eq(0) for g in groups])
      ix = ix.replace(src=(ix.src[0], ix.src[1], ix.src[2] & gate if len(ix.src) > 2 else gate))
    new.append(st.replace(src=(ix, *st.src[1:])) if ix is not st.src[0] else st)
  return None if all(a is b for a, b in zip(new, sink.src)) else sink.replace(src=tuple(new))


def _flat(rngs: list[UOp]) -> tuple[UOp | None, int]:
  """The row-major flat index of rngs (last fastest) and the number of elements it spans."""
  idx, n = None, 1
  for r in rngs:
    size = const_size(r)
    assert size is not None, "a work-group axis has a constant size (Kernel.apply_opt)"
    idx = r if idx is None else idx * size + r
    n *= size
  return idx, n


def _group_reduce(ctx: dict, red: UOp) -> UOp | None:
  """REDUCE over GROUP_REDUCE ranges (each a work-item id of the work-group): every work-item reduces its part over
  the other ranges, stores it in a __local buffer (DEFINE_LOCAL) at [locals, groups, upcasts], BARRIER, then reads
  the buffer back over fresh REDUCE ranges in place of the group ranges and reduces again."""
  groups = [r for r in red.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE]
  if not groups:
    return None
  rest = [r for r in red.src[1:] if r not in groups]
  part = UOp(Ops.REDUCE, red.dtype, (red.src[0], *rest), red.arg) if rest else red.src[0]
  outer = free_ranges(red)[red]
  # one slot per work-item of the work-group and per lane of an upcast: what differs between values reduced apart
  lanes = sorted((r for r in outer if r.arg[1] in (AxisType.LOCAL, AxisType.UPCAST)), key=loop_key)
  ids = sorted((r for r in lanes if r.arg[1] is AxisType.LOCAL), key=loop_key) + groups + \
      [r for r in lanes if r.arg[1] is AxisType.UPCAST]
  idx, n = _flat(ids)
  local = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(n), (), f"temp{ctx['locals']}")
  ctx["locals"] += 1
  bar = UOp(Ops.BARRIER, dtypes.void, (local.index(idx).store(part),))
  fresh = {g: UOp.range(const_size(g), ctx["next_axis"] + i, AxisType.REDUCE, g.dtype) for i, g in enumerate(groups)}
  ctx["next_axis"] += len(groups)
  back = UOp(Ops.AFTER, local.dtype, (local, bar)).index(substitute(idx, fresh)).load()
  return UOp(Ops.REDUCE, red.dtype, (back, *fresh.values()), red.arg)


pm_group_reduce = PatternMatcher([
  (UPat(Ops.SINK, name="sink"), _group_gate),
  (UPat(Ops.REDUCE, name="red"), _group_reduce),
], name="group reduce")


def group_reduces(ast: UOp) -> UOp:
  """The kernel AST with its GROUP_REDUCE axes split across the work-group through local memory (the OpenCL target;
  the LLVM and interpreter backends reduce a GROUP_REDUCE range as a loop like any other); a no-op without them."""
  rngs = [u for u in toposort(ast) if u.op is Ops.RANGE]
  if not any(r.arg[1] is AxisType.GROUP_REDUCE for r in rngs):
    return ast
  ctx = {"locals": 0, "next_axis": max(r.arg[0] for r in rngs) + 1}
  return graph_rewrite(ast, pm_group_reduce, ctx=ctx)


# ---- gated accumulators

def gate_reduces(sink: UOp) -> dict[int, UOp]:
  """Gates by accumulator (DEFINE_ACC arg): the AND of the WHERE conditions that every read of its PHI's value lies
  under as the true side. A pad's WHERE computes both sides, so without a gate a nested reduction read through a pad
  runs its whole loop at the padded positions too (conv's input gradient: half of them). Only conditions computable
  before the loop count (ranges the PHI's value depends on anyway); a vector condition gates the loop when any lane
  holds (the WHERE drops the other lanes' values)."""
  nodes = toposort(sink)
  if not any(u.op is FastOps.WHERE for u in nodes):
    return {}  # (no condition to gate on: most kernels, spared the ranges and the sets of every node)
  free = free_ranges(sink)
  order = {u: i for i, u in enumerate(nodes)}
  # under[u]: the conditions every path from the sink to u passes as a WHERE's true side
  under: dict[UOp, frozenset[UOp]] = {sink: frozenset()}
  for c in reversed(nodes):
    for i, s in enumerate(c.src):
      got = under[c] | {c.src[0]} if c.op is FastOps.WHERE and i == 1 and s is not c.src[0] and s is not c.src[2] \
          else under[c]
      under[s] = under[s] & got if s in under else got
  gates: dict[int, UOp] = {}
  for u in nodes:
    if u.op is not FastOps.PHI or len(u.src) != 2 or len(u.src[0].src) < 2:  # (no loop: nothing to skip)
      continue
    conds = sorted((g for g in under[u] if free[g] <= free[u]), key=order.__getitem__)
    if conds:
      gates[u.src[0].arg] = reduce(operator.and_, [_any_lane(g) for g in conds])
  return gates


def _any_lane(g: UOp) -> UOp:
  """A scalar bool that holds when any lane of g does."""
  if g.dtype.count == 1:
    return g
  return reduce(operator.or_, [UOp(Ops.GEP, g.dtype.scalar(), (g,), i) for i in range(g.dtype.count)])


def gate_phi(ctx: dict[int, UOp], p: UOp) -> UOp | None:
  gate = ctx.get(p.src[0].arg) if len(p.src) == 2 and p.src[0].op is Ops.DEFINE_ACC else None
  return None if gate is None else p.replace(src=(*p.src, gate))


pm_gate_reduce = PatternMatcher([
  (UPat(Ops.PHI, name="p"), gate_phi, "PHI(acc, update) under WHERE(gate, ..) -> PHI(acc, update, gate)"),
], name="gate reduce")
