"""Linearization: the lowered kernel graph -> a block-structured list of UOps.

A RANGE in the list opens a loop and END(range) closes it; IF(gate)/ENDIF wrap a gated store, and the loops of a
gated accumulator, PHI(acc, update, gate) (lowerer's `gate_reduces`): after ENDIF its value is the accumulator's
initial one where the gate was false. Every node is
placed inside exactly the loops it depends on (its free ranges): before a loop opens, everything that does not
depend on it is emitted ("hoisted"), so loop-invariant loads and math run once. A PHI(acc, update) places its
DEFINE_ACC before the accumulator's loops, the update inside them and itself last inside; after the loops the
PHI stands for the accumulated value; accumulators over the same ranges inside the same loops share one loop nest.
The outer loops are the stores' free ranges, THREAD first, then by axis id; stores share the loops they have in
common and get their own after them (a peeled remainder's); the parallel one (the THREAD range, else the
outermost one every store depends on) gets its bounds from the kernel's (start, end) arguments. It opens first,
around the other loops, unless a STAGE fill that does not depend on it would then lie inside it: then it opens where
the loop order puts it, in every nest that has it (each bounded by (start, end): every store loops over it, so the
runtime's split still stores each iteration once). A BARRIER (a grouped reduce's, on OpenCL) is placed like any
node, inside the work-item ids it depends on and before the loop of the reduce that reads the __local buffer back."""
from __future__ import annotations

from dataclasses import dataclass

from compiler.codegen.errors import CodegenError
from compiler.codegen.ranges import axis_type, const_size, free_ranges, loop_key
from compiler.dtype import dtypes
from compiler.uop import AxisType, FastOps, Ops, UOp, toposort

# nodes the renderer spells inline or as function parameters: never placed in a block
INLINE = (Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR)


@dataclass
class Linear:
  uops: list[UOp]
  par: UOp | None  # the RANGE whose bounds are the (start, end) arguments


_SKIP_HOIST = frozenset((Ops.SINK, Ops.DEFINE_ACC, Ops.STORE))  # (SINK: the root of hoist's walk)


def _is_inline(u: UOp) -> bool:
  return u.op in INLINE or (u.op is FastOps.VECTORIZE and all(s.op is FastOps.CONST for s in u.src))


class _Linearizer:
  def __init__(self, sink: UOp, kname: str):
    self.kname = kname
    self.free = free_ranges(sink)
    self.out: list[UOp] = []
    self.depth_of: dict[UOp, int] = {}  # emitted node -> loop depth it lives at
    self.levels: list[list[UOp]] = [[]]  # nodes emitted per open depth
    self.open: list[UOp] = []
    self.n_if = 0
    nodes = toposort(sink)
    self.phis = [u for u in nodes if u.op is FastOps.PHI]
    # (asked of every node hoist walks, at every loop level, and emit: a set's lookup, not a call)
    self.inline = {u for u in nodes if _is_inline(u)}
    self._anc: dict[UOp, set[UOp]] = {}

  # ---- scopes
  def _mark(self, u: UOp) -> None:
    self.depth_of[u] = len(self.open)
    self.levels[-1].append(u)

  def open_loop(self, r: UOp) -> None:
    if r in self.depth_of:
      raise CodegenError(self.kname, "range is opened twice (used by nested reduces?)", r)
    self.out.append(r)
    self.open.append(r)
    self.levels.append([])
    self._mark(r)

  def close_loop(self) -> None:
    r = self.open.pop()
    self.out.append(UOp(Ops.END, dtypes.void, (r,)))
    for u in self.levels.pop():
      del self.depth_of[u]

  # ---- placement
  def hoist(self, roots: list[UOp]) -> None:
    """Emit every not yet placed node under roots that needs no range beyond the open ones."""
    avail = frozenset(self.open)
    # not into placed nodes: their sources are placed too, or lie inside loops closed since (an accumulator's update)
    # and wait for loops no later hoist has open; the walk was the whole graph again at every loop level (GPT step:
    # 658 walks of 69 kernels' graphs), the unplaced nodes in the same order
    for u in toposort(UOp(Ops.SINK, dtypes.void, tuple(roots)), stop=self.depth_of):
      if u.op in _SKIP_HOIST or u in self.depth_of or u in self.inline:
        continue
      if u.op is FastOps.RANGE or not self.free[u] <= avail:
        continue
      self.emit(u)

  def emit(self, root: UOp) -> None:
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
      u, ready = stack.pop()
      if u in self.depth_of or u in self.inline:
        continue
      op = u.op
      if op is FastOps.PHI:
        self.emit_reduce(u)
        continue
      if op is FastOps.END:
        self.emit_fill(u)
        continue
      if op is FastOps.RANGE:
        raise CodegenError(self.kname, "range used outside of its loop", u)
      if op is FastOps.DEFINE_ACC:
        raise CodegenError(self.kname, "accumulator used outside of its reduce", u)
      if ready:
        self.out.append(u)
        self._mark(u)
        continue
      stack.append((u, True))
      stack.extend((s, False) for s in reversed(u.src) if s not in self.depth_of)

  def emit_reduce(self, phi: UOp) -> None:
    """Emit phi together with every other ready accumulator over the same ranges: one loop nest for all of them
    (register blocking: the lanes of an upcast reduce share the loop)."""
    rset = frozenset(phi.src[0].src[1:])
    group = [phi]
    for p in self.phis:
      if p is phi or p in self.depth_of or frozenset(p.src[0].src[1:]) != rset or self.free[p] != self.free[phi] or \
          p.src[2:] != phi.src[2:]:
        continue
      if not any(g in self._ancestors(p) or p in self._ancestors(g) for g in group):
        group.append(p)
    for p in group:
      self.hoist(list(p.src[1:]))
    for p in group:
      self.out.append(p.src[0])
      self._mark(p.src[0])
    iff = None
    if len(phi.src) > 2:  # gated: the loops run inside IF(gate)
      self.emit(phi.src[2])
      iff = UOp(Ops.IF, dtypes.void, (phi.src[2],), self.n_if)
      self.n_if += 1
      self.out.append(iff)
    for r in sorted(rset, key=loop_key):
      self.open_loop(r)
    for p in group:
      self.emit(p.src[1])
    for p in group:
      self.out.append(p)
    for _ in rset:
      self.close_loop()
    if iff is not None:
      self.out.append(UOp(Ops.ENDIF, dtypes.void, (iff,)))
    for p in group:
      self._mark(p)

  def emit_fill(self, end: UOp) -> None:
    """END(STORE, *ranges) (a STAGE scratch's fill): its loops, in its order, around the store; what does not
    depend on them is hoisted before."""
    st = end.src[0]
    self.hoist([st])
    for r in end.src[1:]:
      self.open_loop(r)
    self.store(st)
    for _ in end.src[1:]:
      self.close_loop()
    self._mark(end)

  def _ancestors(self, u: UOp) -> set[UOp]:
    if u not in self._anc:
      self._anc[u] = set(toposort(u))
    return self._anc[u]

  def store(self, st: UOp) -> None:
    for s in st.src:
      self.emit(s)
    if len(st.src) > 2:  # gated: IF(gate) STORE ENDIF
      iff = UOp(Ops.IF, dtypes.void, (st.src[2],), self.n_if)
      self.n_if += 1
      self.out.extend([iff, st, UOp(Ops.ENDIF, dtypes.void, (iff,))])
    else:
      self.out.append(st)

  def run(self, sink: UOp) -> Linear:
    stores = list(sink.src)
    for st in stores:
      if st.op is not Ops.STORE:
        raise CodegenError(self.kname, "a kernel's SINK takes only STOREs", st)
    outer = sorted(frozenset().union(*(self.free[s] for s in stores)), key=loop_key)
    for r in outer:  # (a GROUP_REDUCE range left open is a work-item id: compiler.codegen.lowerer.group_reduces)
      if axis_type(r) is AxisType.REDUCE:
        raise CodegenError(self.kname, f"{axis_type(r).name} range is not closed by a REDUCE", r)
    par = self._parallel(outer, stores)
    if par is not None and self._may_go_outermost(par, sink):
      self.hoist(stores)
      self.open_loop(par)
    self.place(stores)
    while self.open:
      self.close_loop()
    return Linear(self.out, par)

  def place(self, stores: list[UOp]) -> None:
    """Emit stores inside the open loops: consecutive stores whose next loop (in loop order) is the same share
    it, the others get loops of their own after it (a peeled remainder's store is not nested in the main
    part's loops); a store with no loop left is emitted here."""
    self.hoist(stores)
    i = 0
    while i < len(stores):
      nxt = self._next_loop(stores[i])
      j = i + 1
      while j < len(stores) and self._next_loop(stores[j]) is nxt:
        j += 1
      if nxt is None:
        for st in stores[i:j]:
          self.store(st)
      else:
        self.open_loop(nxt)
        self.place(stores[i:j])
        self.close_loop()
      i = j

  def _next_loop(self, st: UOp) -> UOp | None:
    left = [r for r in self.free[st] if r not in self.depth_of]
    return min(left, key=loop_key) if left else None

  def _may_go_outermost(self, par: UOp, sink: UOp) -> bool:
    """Whether the parallel loop may open first, around every other loop: a THREAD range (each thread fills its
    own scratch), else one that no STAGE fill lies inside without depending on it (opened around a fill that does
    not, the fill would run again for each of its iterations: matmul 1000's row loop around B's strip)."""
    return axis_type(par) is AxisType.THREAD or \
        all(par in self.free[u] or not self.free[u] for u in toposort(sink) if u.op is FastOps.END)

  def _parallel(self, outer: list[UOp], stores: list[UOp]) -> UOp | None:
    thread = [r for r in outer if axis_type(r) is AxisType.THREAD]
    cands = thread or [r for r in outer if const_size(r) != 1]
    # the outermost one every store loops over (a peeled remainder's store may not loop over the first); never a
    # STAGE block axis (its iterations add into the same outputs) nor a loop inside one (opened first it would refill
    # the scratch for every iteration; split where the loop order puts it, inside the blocks, is not measured)
    for r in cands:
      if axis_type(r) is AxisType.BLOCK:
        return None
      if all(r in self.free[s] for s in stores):
        return r
    return None


def linearize(sink: UOp, kname: str) -> Linear:
  """The block-structured list of a lowered kernel (see the module doc)."""
  return _Linearizer(sink, kname).run(sink)
