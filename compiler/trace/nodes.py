"""Trace ids for UOps.

A UOp gets its id the first time a record names it (its sources first) and keeps it: an equal UOp made later must
get the same id, or the viewer would show two nodes where the compiler had one. The table keeps most nodes alive, so
hash-consing hands back the very object later and its id is found by identity.

Not a node that owns memory, a BUFFER (its Buffer lives as long as the UOp, see compiler.runtime.buffer), nor any node
above one: keeping those alive would keep every buffer a traced program ever made, input data and all, until the
trace ends. These "transient" nodes carry their id in their `_tid` attribute while they live; an equal one made
after they died finds it by structure: (op, dtype, source ids, arg), the key hash-consing uses, with ids for sources.
"""
from __future__ import annotations

import functools
import itertools
from typing import Callable

from compiler.trace.native import SPEEDUPS
from compiler.uop import Ops, UOp, cons_key

_OWNS_MEMORY = Ops.BUFFER


def _visit(x: UOp, ids: dict, add: Callable[[UOp], None], new_id: Callable[[], int], token: object,
           keys: dict) -> bool:
  """Give x and the nodes below it without an id an id, sources first, and add them; True if x is transient.
  Recursion: about twice as fast as an explicit stack, and this runs for every new node (a module function, not a
  closure: a closure that calls itself is a reference cycle, which would keep the ids, and so every UOp, alive until
  the next full GC)."""
  transient = x.op is _OWNS_MEMORY
  for s in x.src:
    if s not in ids:
      t = s._tid
      if (t is None or t[0] is not token) and not _visit(s, ids, add, new_id, token, keys):
        continue
      transient = True
  if transient:
    _give_transient(x, ids, add, new_id, token, keys)
    return True
  ids[x] = new_id()
  add(x)
  return False


def _give_transient(x: UOp, ids: dict, add: Callable[[UOp], None], new_id: Callable[[], int], token: object,
                    keys: dict) -> None:
  """An id for a transient node whose sources have theirs: an equal node's that died, or a new one."""
  src = tuple([i if (i := ids.get(s)) is not None else s._tid[1] for s in x.src])
  key = cons_key(x.op, x.dtype, src, x.arg)
  tid = keys.get(key)
  if tid is None:
    tid = keys[key] = new_id()
    object.__setattr__(x, "_tid", (token, tid))  # before add: a flush may read it as soon as a user of x is added
    add(x)
  else:
    object.__setattr__(x, "_tid", (token, tid))


class NodeTable:
  """The trace ids of one recording; `add` receives each node given a new id, in id order."""

  def __init__(self, add: Callable[[UOp], None], native: bool = True) -> None:
    """native=False: walk in Python even where the C walk (compiler.trace.native) is built."""
    self.ids: dict[UOp, int] = {}  # kept nodes
    self.keys: dict[tuple, int] = {}  # transient nodes, by structure
    self.token = object()  # marks this table's ids in `_tid` attributes (an earlier trace's mean nothing here)
    self.add = add
    self.new_id = itertools.count().__next__
    # the C walk's arguments but the node (a partial, not a method: no reference cycle through the table)
    self._walk = None if SPEEDUPS is None or not native else functools.partial(
      SPEEDUPS.visit, self.ids, add, self.new_id, self.token,
      functools.partial(_give_transient, ids=self.ids, add=add, new_id=self.new_id, token=self.token, keys=self.keys))

  def get(self, u: UOp) -> int | None:
    """u's id if it has one."""
    nid = self.ids.get(u)
    if nid is None:
      t = u._tid
      if t is not None and t[0] is self.token:
        return t[1]
    return nid

  def id_of(self, u: UOp) -> int:
    """The id of u, giving u and every node below it without one an id (sources first)."""
    ids, token, keys = self.ids, self.token, self.keys
    nid = ids.get(u)
    if nid is not None:
      return nid
    t = u._tid
    if t is not None and t[0] is token:
      return t[1]
    try:
      if self._walk is not None:
        self._walk(u)
      else:
        _visit(u, ids, self.add, self.new_id, token, keys)
    except RecursionError:  # a deep graph: what was visited has ids (sources first); finish with a stack
      stack = [u]
      while stack:
        x = stack[-1]
        pending = [s for s in x.src if self.get(s) is None]
        if pending:
          stack.extend(reversed(pending))
        else:
          stack.pop()
          if self.get(x) is None:  # reached twice through a diamond
            if x.op is _OWNS_MEMORY or any(s not in ids for s in x.src):
              _give_transient(x, ids, self.add, self.new_id, token, keys)
            else:
              ids[x] = self.new_id()
              self.add(x)
    nid = ids.get(u)
    return nid if nid is not None else u._tid[1]  # type: ignore[index]
