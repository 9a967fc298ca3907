"""`gpu_optimizations`: the reference's hand-coded heuristics for a target with locals (an OpenCL device): a matvec
as GROUP + LOCAL + UPCAST, GROUPTOP for a long reduce into few outputs, masked small axes upcast, float vectors and
register rows, the reduce unrolled, then LOCAL work-groups. Every size comes from the Target: the float vector width,
the work-group size, the local memory (the opts check it) and the work-item dimensions."""
from __future__ import annotations

import itertools
import math

from compiler.opt.kernel import MAX_UPCAST, Kernel, KernelOptError, Opt, OptOps, access_strides, masked_axes
from compiler.trace.recorder import untraced
from compiler.uop import AxisType, Ops

# a matvec: rows of a work-group, work-items sharing one row's dot product (GROUP), rows each work-item keeps
MV_BLOCKSIZE, MV_THREADS_PER_ROW, MV_ROWS_PER_THREAD = 4, 8, 4
# a reduce into at most this many outputs is split across a work-group of GROUPTOP_AMT work-items
GROUPTOP_MAX_OUTPUTS, GROUPTOP_AMT = 2048, 16
# the upcast block (accumulators a work-item holds) is grown up to this many float vectors of the target
UPCAST_VECTORS = 8
# a work-group is at most this many work-items (or the target's limit, if smaller)
LOCAL_MAX = 128


def gpu_optimizations(k: Kernel) -> Kernel:
  """The reference's GPU heuristics, applied to k (a target with locals): the first of matvec and GROUPTOP that
  applies ends them; else upcasts, a reduce unroll and LOCAL axes."""
  if _matvec(k) or _group_top(k):
    return k
  _upcast_masked(k)
  _upcast_outputs(k)
  _unroll_reduce(k)
  if k.upcasted == 0 and k.first_reduce > 0:  # a float vector where nothing else was upcast
    axis = k.first_reduce - 1
    amt = next((a for a in (k.target.vector_floats, 4) if _divides(k, axis, a)), None)
    if amt is not None:
      k.apply_opt(Opt(OptOps.UPCAST, axis, amt))
  if not k.dont_use_locals:
    _local_axes(k)
  return k


def _divides(k: Kernel, axis: int, amt: int) -> bool:
  s = k.full_shape[axis]
  return isinstance(s, int) and s % amt == 0 and s >= amt


def reduces_span_outputs(k: Kernel) -> bool:
  """Every REDUCE depends on every output axis. A row reduction joined to its reader (softmax's max and sum in the
  division's kernel) does not: codegen hoists it out of the column loop, computed once per row. A GROUP or a LOCAL
  axis would put it inside that loop (LOCAL axes come after the global ones), once per output: measured on pocl,
  softmax (256x4096) 10 ms plain, 6.8 s with GROUPTOP 16, 0.8 s with LOCAL 16 of its rows. On a CPU a register tile
  over such outputs reuses nothing (tiling a layernorm's rows, along which a bias is broadcast, made it 0.9x)."""
  return all(r in red.ranges for red in k.reduceops for r in k.rngs[:k.first_reduce])


def _matvec(k: Kernel) -> bool:
  """A sum of products of two loads where one operand's axes are all the other's (a vector times a matrix, either
  way round): each row's dot product split across MV_THREADS_PER_ROW work-items (GROUP), MV_BLOCKSIZE rows a
  work-group (LOCAL), MV_ROWS_PER_THREAD rows a work-item (UPCAST). Whether it applied (else k is unchanged)."""
  red = k.reduceop
  if red is None or red.arg is not Ops.ADD or len(k.reduceops) != 1 or not k.target.has_shared or \
      k.first_reduce >= k.first_upcast or len(k.full_shape) < 2:
    return False
  mul = red.src[0]
  if mul.op is not Ops.MUL or any(s.op is not Ops.LOAD for s in mul.src):
    return False
  idx = [s.src[0] for s in mul.src]
  first = k.rngs[k.first_reduce]
  if not any(set(a.ranges) <= set(b.ranges) for a, b in itertools.permutations(idx)) or \
      not all(first in i.ranges for i in idx) or not _divides(k, k.first_reduce, MV_THREADS_PER_ROW):
    return False
  for axis in range(k.global_dims):
    if not _divides(k, axis, MV_BLOCKSIZE * MV_ROWS_PER_THREAD):
      continue
    rid, k2 = k.rngs[axis].arg[0], k.copy()
    try:
      with untraced():  # (a trial: k gets the opts that all apply, traced)
        k2.apply_opt(Opt(OptOps.GROUP, 0, MV_THREADS_PER_ROW))
        k2.apply_opt(Opt(OptOps.LOCAL, _axis_of(k2, rid), MV_BLOCKSIZE))
        k2.apply_opt(Opt(OptOps.UPCAST, _axis_of(k2, rid), MV_ROWS_PER_THREAD))
    except KernelOptError:
      continue
    k.apply_opts(k2.applied_opts)
    return True
  return False


def _axis_of(k: Kernel, rid: int) -> int:
  """The position of the axis with id rid (a split keeps the id on its outer part)."""
  return next(i for i, r in enumerate(k.rngs) if r.arg[0] == rid)


def _group_top(k: Kernel) -> bool:
  """A reduce into few outputs (at most GROUPTOP_MAX_OUTPUTS) split across a work-group (GROUPTOP: each work-item
  a contiguous block, the partials combined through local memory): the first reduce axis it applies to. Only where
  every reduce spans the outputs (see reduces_span_outputs)."""
  out = math.prod(s for s in k.full_shape[:k.first_reduce] if isinstance(s, int))
  if not k.reduceops or out > GROUPTOP_MAX_OUTPUTS or not reduces_span_outputs(k) or k.dont_use_locals:
    return False
  amt = min(GROUPTOP_AMT, k.target.local_max or GROUPTOP_AMT)
  for axis in range(3):
    try:
      k.apply_opt(Opt(OptOps.GROUPTOP, axis, amt))
      return True
    except KernelOptError:
      continue
  return False


def _upcast_masked(k: Kernel) -> None:
  """Small axes (at most 7) that a load's valid or a WHERE depends on (pads, stacks) upcast whole, up to 7x7
  together: their masks become constants per lane."""
  masked, to_upcast = masked_axes(k), []
  for axis in range(k.first_reduce):
    s = k.full_shape[axis]
    if isinstance(s, int) and s <= 7 and axis in masked and math.prod(k.full_shape[j] for j in to_upcast) * s <= 49:
      to_upcast.append(axis)
  for axis in reversed(to_upcast):
    k.apply_opt(Opt(OptOps.UPCAST, axis, 0))


def _upcast_outputs(k: Kernel) -> None:
  """While the outputs are many (1024) and the upcast block is under UPCAST_VECTORS float vectors: upcast the output
  axis that reuses the most, as the reference does: one some access does not depend on (its loads are shared across
  the axis' lanes) while it depends on every axis upcast so far; fewest accesses moving along it first, then the
  smallest strides. The axis the store walks with stride 1 by a float vector of the target (float4 on a GPU), others
  by 4 or 3."""
  vec = k.target.vector_floats
  most = UPCAST_VECTORS * vec
  done: set[int] = set()  # axis ids
  while math.prod(s for s in k.full_shape[:k.first_reduce] if isinstance(s, int)) >= 1024 and k.upcast_size() < most:
    upcast_rngs = k.rngs[k.first_upcast:]
    stores = {st.src[0] for st in k.stores}
    choices = []
    for axis in range(k.first_reduce):
      r = k.rngs[axis]
      if r.arg[0] in done or r.arg[1] not in (AxisType.GLOBAL, AxisType.LOOP):
        continue
      if not any(r not in a.ranges and all(u in a.ranges for u in upcast_rngs) for a in k.accesses):
        continue
      strides = [access_strides(k, a)[axis] for a in k.accesses]
      unit = all(access_strides(k, st)[axis] == 1 for st in stores) and all(s in (0, 1) for s in strides)
      amts = [a for a in ((vec,) if unit else ()) + (4, 3) if a <= MAX_UPCAST and _divides(k, axis, a) and
              k.upcast_size() * a <= most]
      if amts:
        moving = sum(1 for s in strides if s != 0)
        total = sum(abs(s) if s is not None else 1 << 30 for s in strides)
        choices.append((moving, total, axis, -amts[0]))
    if not choices:
      return
    _, _, axis, amt = min(choices)
    done.add(k.rngs[axis].arg[0])
    k.apply_opt(Opt(OptOps.UPCAST, axis, -amt))


def _unroll_reduce(k: Kernel) -> None:
  """The innermost reduce unrolled: whole when it is at most 32 long (and a second one of at most 3 after a first of
  at most 3), else by a float vector where every load walks it with stride 1 (a row's sum), else by 4; not where the
  upcast block is already 64."""
  if k.first_reduce >= k.first_upcast or k.upcast_size() >= 64:
    return
  if k.upcast_size() > 4 and any(t is AxisType.UNROLL for t in k.axis_types):
    return
  last = k.first_upcast - 1
  if k.axis_types[last] is not AxisType.REDUCE:
    return
  s = k.full_shape[last]
  try:
    if isinstance(s, int) and s <= 32:
      k.apply_opt(Opt(OptOps.UNROLL, last - k.first_reduce, 0))
      last = k.first_upcast - 1
      if s <= 3 and last >= k.first_reduce and k.axis_types[last] is AxisType.REDUCE and \
          isinstance(s2 := k.full_shape[last], int) and s2 <= 3:
        k.apply_opt(Opt(OptOps.UNROLL, last - k.first_reduce, 0))
      return
    stores = {st.src[0] for st in k.stores}
    walks = [w for a in k.accesses if a not in stores and (w := access_strides(k, a)[last]) != 0]
    amt = k.target.vector_floats if walks and all(w == 1 for w in walks) else 4
    amt = next((a for a in (amt, 4) if _divides(k, last, a)), 0)
    if amt:
      k.apply_opt(Opt(OptOps.UNROLL, last - k.first_reduce, amt))
  except KernelOptError:  # (a multireduce whose axes differ)
    pass


def _local_axes(k: Kernel) -> None:
  """LOCAL work-groups, as the reference ranks them: axes some access does not depend on (its loads shared by the
  work-group) first, then the innermost; 32 for the first axis, else 16, 8, 4, 3 or 2, while the work-group stays
  within LOCAL_MAX and the target's work-group size. Only as many as the target's work-item dimensions leave after
  the global axes (one more would be a loop, not a work-group), and none where a reduce is hoisted out of an output
  loop (see reduces_span_outputs)."""
  if k.reduceops and not reduces_span_outputs(k):
    return
  tgt = k.target
  cap = min(LOCAL_MAX, tgt.local_max or LOCAL_MAX)
  dims = tgt.work_dims or 3
  globals_ = [a for a in range(k.first_reduce) if k.axis_types[a] in (AxisType.GLOBAL, AxisType.LOOP)]
  ranked = sorted(((any(k.rngs[a] not in acc.ranges for acc in k.accesses), a) for a in globals_
                   if isinstance(k.full_shape[a], int)), key=lambda x: (-x[0], -x[1]))
  to_local: list[tuple[int, int]] = []  # (axis id, amount)
  ids = len(globals_)  # the work-item dimensions the kernel needs
  for _, axis in ranked:
    size = k.full_shape[axis]
    group = math.prod(amt for _, amt in to_local)
    amt = next((x for x in ([32] * (axis == 0) + [16, 8, 4, 3, 2]) if size % x == 0 and group * x <= cap), None)
    if amt is None or ids + (amt < size) > dims:
      continue
    ids += amt < size
    to_local.append((k.rngs[axis].arg[0], amt))
  for rid, amt in sorted(to_local[:3], key=lambda t: _axis_of(k, t[0])):
    try:
      k.apply_opt(Opt(OptOps.LOCAL, _axis_of(k, rid), amt))
    except KernelOptError:  # (a work-group or local memory limit of the target)
      continue
