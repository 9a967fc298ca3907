"""Trace ids for UOps, given by structure.

A UOp gets its id the first time a record names it (its sources first), and an equal UOp made later must get the
same one, or the viewer would show two nodes where the compiler had one. "Equal" is what hash-consing means by it:
the key `cons_key(op, dtype, src, arg)`, here with the sources' trace ids for the sources. `keys` maps each such key
to its id for the whole recording, so a node made again after the first one died finds its id there, and the trace
keeps no UOp alive (nor, through a BUFFER node, a Buffer). In a key the op is a plain int and the dtype the number of
its first appearance (`dtypes`), so that a key of plain values is one the cycle collector stops tracking: the keys
live as long as the recording, and a key of objects would be scanned again at every full collection.

Finding a key needs the sources' ids, so a node named before is found by identity instead, in O(1): `live` maps id(u)
to a weak reference to u that carries u's trace id, and the reference's callback drops the entry when u dies, before
its memory, and so its id(), can be reused. (Keyed by id(), a lookup makes no object but an int; an entry of a dead
node must not stay, or a new node at its address would find it.)"""
from __future__ import annotations

from _weakref import _remove_dead_weakref  # delete a key only if its value is a dead reference (in C, atomically)
from typing import Callable
from weakref import ref

from compiler.dtype import DType
from compiler.uop import UOp, cons_key


class _Named(ref):
  """A weak reference to a named UOp that carries its trace id, and its id() for the callback."""
  __slots__ = ("tid", "uid")


class TraceIds:
  """The trace ids of one recording; `add` receives the key of each node given a new id, in id order (sources
  first): the key is all a record of the node needs: (op, dtype number, source ids, arg[, what cons_key adds])."""

  def __init__(self, add: Callable[[tuple], None]) -> None:
    self.keys: dict[tuple, int] = {}  # every node named so far, by structure
    self.dtypes: list[DType] = []  # a key's dtype number -> the dtype
    self._dtype_numbers: dict[DType, int] = {}  # by equality (a dtype hashes in Python: asked once per object)
    self._dtype_by_id: dict[int, int] = {}  # by identity (every dtype object seen is kept alive in `_seen`)
    self._seen: list[DType] = []
    self.live: dict[int, _Named] = {}  # the named nodes still alive, by id()
    live = self.live
    # (a cycle dict -> reference -> callback -> dict, which close() ends)
    self._forget: Callable[[_Named], None] = lambda r: _remove_dead_weakref(live, r.uid)
    self.add = add

  def get(self, u: UOp) -> int | None:
    """u's id if u was named (and, being alive, is the node that was)."""
    r = self.live.get(id(u))
    return None if r is None else r.tid

  def id_of(self, u: UOp) -> int:
    """The id of u, giving u and every node below it without one an id (sources first)."""
    live = self.live
    r = live.get(id(u))
    if r is not None:
      return r.tid
    try:  # the usual case: a node made by a rewrite, over nodes it named already
      src = tuple([live[id(s)].tid for s in u.src])
    except KeyError:
      return self._name_below(u)
    return self._name(u, src)

  def _name(self, u: UOp, src: tuple) -> int:
    """The id of u, whose sources have the ids src: an equal node's, or a new one."""
    dtype = u.dtype
    d = self._dtype_by_id.get(id(dtype))
    if d is None:
      d = self._dtype_number(dtype)
    arg = u.arg
    t = type(arg)  # cons_key, inlined for the args it leaves as they are
    key = (int(u.op), d, src, arg) if arg is None or t is int or t is tuple else \
      (int(u.op), d, src, *cons_key(u.op, dtype, src, arg)[3:])
    keys = self.keys
    new = len(keys)  # ids are dense: the next one is the number of keys
    tid = keys.setdefault(key, new)
    if tid == new:
      self.add(key)
    r = _Named(u, self._forget)
    r.tid = tid
    r.uid = uid = id(u)
    self.live[uid] = r
    return tid

  def _dtype_number(self, dtype: DType) -> int:
    d = self._dtype_numbers.setdefault(dtype, len(self.dtypes))
    if d == len(self.dtypes):
      self.dtypes.append(dtype)
    self._seen.append(dtype)
    self._dtype_by_id[id(dtype)] = d
    return d

  def _name_below(self, root: UOp) -> int:
    """Name root and the nodes below it without an id, each after its sources, in the order of a depth-first walk
    over sources in order; with a stack of (node, its sources still to look at, the ids of those looked at), since a
    graph may be far deeper than the recursion limit. (A node is never on the stack twice: that would be a cycle.)"""
    live = self.live
    stack = [(root, iter(root.src), [])]
    while True:
      x, todo, src = stack[-1]
      for s in todo:
        r = live.get(id(s))
        if r is None:
          stack.append((s, iter(s.src), []))
          break
        src.append(r.tid)
      else:
        stack.pop()
        tid = self._name(x, tuple(src))
        if not stack:
          return tid
        stack[-1][2].append(tid)

  def close(self) -> None:
    """Drop the identity table (recording ended), which ends its cycle: what it held is freed by reference counting."""
    self.live.clear()
