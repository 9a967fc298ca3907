"""Trace ids for UOps, given by structure.

A UOp gets its id the first time a record names it (its sources first), and an equal UOp made later must get the
same one, or the viewer would show two nodes where the compiler had one. "Equal" is what hash-consing means by it:
the key `cons_key(op, dtype, src, arg)`, here with the sources' trace ids for the sources. `keys` maps each such key
to its id for the whole recording, so a node made again after the first one died finds its id there, and the trace
keeps no UOp alive (nor, through a BUFFER node, a Buffer).

Finding a key needs the sources' ids, so a node named before is found by identity instead, in O(1): `live` maps
id(u) to a weak reference that carries u's trace id, and the reference's callback drops the entry when u dies (before
its memory, and so its id(), can be reused)."""
from __future__ import annotations

import itertools
import weakref
from _weakref import _remove_dead_weakref  # delete a key only if its value is a dead reference (in C, atomically)
from typing import Callable

from compiler.uop import UOp, cons_key


class _Named(weakref.ref):
  """A weak reference to a named UOp, with its trace id and its id() (the key of its entry in TraceIds.live)."""
  __slots__ = ("tid", "uid")


class TraceIds:
  """The trace ids of one recording; `add` receives the key of each node given a new id, in id order (sources
  first): the key is all a record of the node needs, (op, dtype, source ids, arg, ...) as cons_key orders it."""

  def __init__(self, add: Callable[[tuple], None]) -> None:
    self.keys: dict[tuple, int] = {}  # every node named so far, by structure
    self.live: dict[int, _Named] = {}  # the named nodes still alive, by identity
    self.add = add
    self.new_id = itertools.count().__next__
    live = self.live
    # (a closure over the dict, not a method: what it holds is this dict only; close() clears it, which ends the
    # cycle dict -> reference -> callback -> dict)
    self._forget: Callable[[_Named], None] = lambda ref: _remove_dead_weakref(live, ref.uid)

  def get(self, u: UOp) -> int | None:
    """u's id if u was named (and, being alive, is the node that was)."""
    ref = self.live.get(id(u))
    return None if ref is None else ref.tid

  def id_of(self, u: UOp) -> int:
    """The id of u, giving u and every node below it without one an id (sources first)."""
    live = self.live
    ref = live.get(id(u))
    if ref is not None:
      return ref.tid
    try:  # the usual case: a node made by a rewrite, over nodes it named already
      src = tuple([live[id(s)].tid for s in u.src])
    except KeyError:
      return self._name_below(u)
    return self._name(u, src)

  def _name(self, u: UOp, src: tuple) -> int:
    """The id of u, whose sources have the ids src: an equal node's, or a new one."""
    key = cons_key(u.op, u.dtype, src, u.arg)
    tid = self.keys.get(key)
    if tid is None:
      tid = self.keys[key] = self.new_id()
      self.add(key)
    ref = _Named(u, self._forget)
    ref.tid, ref.uid = tid, id(u)
    self.live[ref.uid] = ref
    return tid

  def _name_below(self, root: UOp) -> int:
    """Name root and the nodes below it without an id in the order of a depth-first walk over sources in order,
    each after its sources, with a stack (a graph may be far deeper than the recursion limit)."""
    live, stack = self.live, [root]
    while stack:
      x = stack[-1]
      unnamed = [s for s in x.src if id(s) not in live]
      if unnamed:
        stack.extend(reversed(unnamed))
        continue
      stack.pop()
      if id(x) not in live:  # (a node reached twice, through a diamond, is named at its first visit)
        self._name(x, tuple([live[id(s)].tid for s in x.src]))
    return live[id(root)].tid

  def close(self) -> None:
    """Drop the identity cache (recording ended): what it holds then is garbage for reference counting alone."""
    self.live.clear()
