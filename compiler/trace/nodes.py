"""Trace ids for UOps, given by structure.

A UOp gets its id the first time a record names it (its sources first), and an equal UOp made later must get the
same one, or the viewer would show two nodes where the compiler had one. "Equal" is what hash-consing means by it:
the key `cons_key(op, dtype, src, arg)`, here with the sources' trace ids for the sources. `keys` maps each such key
to its id for the whole recording, so a node made again after the first one died finds its id there, and the trace
keeps no UOp alive (nor, through a BUFFER node, a Buffer).

Finding a key needs the sources' ids, so a node named before is found by identity instead, in O(1): `live` maps a weak
reference to u to u's trace id. A live reference hashes and compares as its object, a dead one only equals itself, so
an entry never answers for another object; and it is u's plain reference (no callback), which `weakref.ref(u)` hands
back instead of making one, so a lookup allocates nothing. Entries of dead nodes are swept out when the dict has
doubled since the last sweep."""
from __future__ import annotations

from typing import Callable
from weakref import ref

from compiler.uop import UOp, cons_key


class TraceIds:
  """The trace ids of one recording; `add` receives the key of each node given a new id, in id order (sources
  first): the key is all a record of the node needs, (op, dtype, source ids, arg, ...) as cons_key orders it."""

  def __init__(self, add: Callable[[tuple], None]) -> None:
    self.keys: dict[tuple, int] = {}  # every node named so far, by structure
    self.live: dict[ref, int] = {}  # the named nodes, by identity (and dead ones until the next sweep)
    self.sweep_at = SWEEP_AT
    self.add = add

  def get(self, u: UOp) -> int | None:
    """u's id if u was named (and, being alive, is the node that was)."""
    return self.live.get(ref(u))

  def id_of(self, u: UOp) -> int:
    """The id of u, giving u and every node below it without one an id (sources first)."""
    live = self.live
    tid = live.get(ref(u))
    if tid is not None:
      return tid
    try:  # the usual case: a node made by a rewrite, over nodes it named already
      src = tuple([live[ref(s)] for s in u.src])
    except KeyError:
      return self._name_below(u)
    return self._name(u, src)

  def _name(self, u: UOp, src: tuple) -> int:
    """The id of u, whose sources have the ids src: an equal node's, or a new one."""
    arg = u.arg
    t = type(arg)  # cons_key, inlined for the args it leaves as they are
    key = (u.op, u.dtype, src, arg) if arg is None or t is int or t is tuple else cons_key(u.op, u.dtype, src, arg)
    keys = self.keys
    new = len(keys)  # ids are dense: the next one is the number of keys
    tid = keys.setdefault(key, new)
    if tid == new:
      self.add(key)
    live = self.live
    live[ref(u)] = tid
    if len(live) >= self.sweep_at:
      self._sweep()
    return tid

  def _sweep(self) -> None:
    """Drop the entries of nodes that died (O(entries), once the dict doubled: O(1) a node)."""
    live = self.live
    for r in [r for r in live if r() is None]:
      del live[r]
    self.sweep_at = max(SWEEP_AT, 2 * len(live))

  def _name_below(self, root: UOp) -> int:
    """Name root and the nodes below it without an id, each after its sources, in the order of a depth-first walk
    over sources in order; with a stack of (node, its sources still to look at, the ids of those looked at), since a
    graph may be far deeper than the recursion limit. (A node is never on the stack twice: that would be a cycle.)"""
    live = self.live
    stack = [(root, iter(root.src), [])]
    while True:
      x, todo, src = stack[-1]
      for s in todo:
        tid = live.get(ref(s))
        if tid is None:
          stack.append((s, iter(s.src), []))
          break
        src.append(tid)
      else:
        stack.pop()
        tid = self._name(x, tuple(src))
        if not stack:
          return tid
        stack[-1][2].append(tid)


SWEEP_AT = 1 << 12  # entries before the first sweep of dead ones
