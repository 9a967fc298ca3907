"""Keeps Python's cycle collector from rescanning what a trace keeps alive.

A recorder keeps every UOp it gave an id alive (and with it the hash-consing key and weak reference of each: about
four tracked objects a node). Python's collector scans each of them again at every full collection, and it runs one
each time the old generation has grown by a quarter: a trace that only grows makes it run again and again, over
objects that can never be garbage while the trace holds them. That was the largest single cost of recording (a tenth
of the compile time of small workloads went to one full collection).

So when recording starts, and each time the trace has grown by FREEZE_NODES nodes (checked at every record and
after every flush), the recorder freezes the heap (`gc.freeze`: the objects alive now are left out of collections).
What else was alive then is left out too, and a cycle among those objects that becomes garbage later is collected
late: each time the trace has doubled since the last time, the heap is thawed, collected in full and frozen again,
and recording's end thaws it for good. A process that froze objects itself, or runs with the collector off, is left
alone."""
from __future__ import annotations

import gc

THAW_NODES = 1 << 16  # trace nodes before the first thaw-and-collect


class HeapFreezer:
  """Freezes the heap while one recorder's trace grows, until release()."""

  def __init__(self) -> None:
    # a process that froze objects itself (before a fork, say) manages its heap: unfreezing at the end would undo that
    self.active = gc.isenabled() and gc.get_freeze_count() == 0
    self.nodes = 0  # trace nodes at the last freeze
    self.thawed_at = 0  # trace nodes at the last thaw-and-collect
    self.thaws = 0
    if self.active:  # the heap alive now (the program, its imports) too: a full collection early in the recording
      gc.freeze()  # would scan it all, and one is due soon after a previous recording's end thawed a frozen heap

  def freeze(self, nodes: int) -> None:
    """Leave what is alive now out of collections; `nodes`: how many the trace has now (its growth paces the thaws,
    since counting the frozen objects would walk them all)."""
    self.nodes = nodes
    if not self.active:
      return
    if nodes >= max(2 * self.thawed_at, THAW_NODES):
      gc.unfreeze()  # garbage cycles among the objects frozen so far get collected now
      gc.collect()
      self.thaws += 1
      self.thawed_at = nodes
    gc.freeze()

  def release(self) -> None:
    """Give every frozen object back to the collector (recording ended)."""
    if self.active:
      self.active = False
      gc.unfreeze()
