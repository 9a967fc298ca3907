"""Which RANGEs a node depends on ("free" ranges: not closed by a REDUCE below it), axis kinds and loop order."""
from __future__ import annotations

from compiler.uop import AxisType, FastOps, Ops, UOp, toposort

EXPAND_AXES = (AxisType.UPCAST, AxisType.UNROLL)
REDUCE_AXES = (AxisType.REDUCE, AxisType.GROUP_REDUCE)


def axis_type(r: UOp) -> AxisType:
  return r.arg[1]


def free_ranges(root: UOp) -> dict[UOp, frozenset[UOp]]:
  """For every node under root: the RANGEs it depends on that no REDUCE (or lowered accumulator) below it closes."""
  out: dict[UOp, frozenset[UOp]] = {}
  empty: frozenset[UOp] = frozenset()
  for u in toposort(root):
    if u.op is FastOps.RANGE:
      out[u] = frozenset((u,))
      continue
    fs = empty
    for s in u.src:
      f = out[s]
      if f:
        fs = fs | f if fs else f
    if u.op is FastOps.REDUCE:
      fs = fs - frozenset(u.src[1:])
    elif u.op is FastOps.PHI:  # PHI(acc, update): the accumulator's loops end here
      fs = fs - frozenset(u.src[0].src[1:])
    elif u.op is FastOps.END:  # END(STORE, *ranges): the loops of a STAGE fill end here
      fs = fs - frozenset(u.src[1:])
    out[u] = fs
  return out


def const_size(r: UOp) -> int | None:
  """The number of iterations of a RANGE when it is a constant."""
  end = r.src[0]
  return end.arg if end.op is Ops.CONST else None


# nesting rank of loops (same rank: by axis id), as the optimizer orders axes
_RANK = {AxisType.THREAD: 0, AxisType.GLOBAL: 1, AxisType.LOOP: 1, AxisType.LOCAL: 2, AxisType.GROUP_REDUCE: 3,
         AxisType.REDUCE: 4, AxisType.UNROLL: 5, AxisType.UPCAST: 5, AxisType.BLOCK: 1}


def loop_key(r: UOp) -> tuple:
  """Nesting order of loops: THREAD outermost, then GLOBAL/LOOP, LOCAL, GROUP_REDUCE, REDUCE; by axis id within."""
  return (_RANK[axis_type(r)], r.arg[0])
