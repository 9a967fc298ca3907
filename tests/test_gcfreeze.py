"""The recorder and Python's cycle collector: a growing trace freezes the heap (so full collections stop rescanning
the nodes it keeps alive), garbage cycles frozen meanwhile are still collected, and a process's own use of the
collector is left alone."""
import gc
import weakref

import pytest

from compiler import UOp, dtypes
from compiler.trace import gcfreeze, recorder
from vztrace.reader import TraceReader


class Cycle:
  """An object in a reference cycle: only the cycle collector frees it."""

  def __init__(self) -> None:
    self.me = self


@pytest.fixture(autouse=True)
def clean_heap():
  recorder.disable()
  gc.unfreeze()
  assert gc.isenabled()
  yield
  recorder.disable()
  gc.unfreeze()
  gc.enable()


_fresh = iter(range(10**9))


def grow(n: int) -> UOp:
  """Record n nodes no other test made (the variable's name is new), with a flush."""
  x = UOp.variable(f"g{next(_fresh)}", 0, 100)
  for i in range(n - 1):
    x = x + UOp.const(dtypes.int32, 1000 + i) if i % 2 else x * 3
  rec = recorder.RECORDER
  rec.node_id(x)
  rec.writer.flush()
  return x


def test_a_growing_trace_freezes_the_heap_and_its_end_thaws_it(tmp_path):
  # (frozen objects that die leave the count, so without a freeze it can only drop)
  rec = recorder.enable(tmp_path / "t.vztrace", announce=False)
  at_start = gc.get_freeze_count()
  assert at_start > 1000  # the program (modules, functions, ...)
  root = grow(recorder.FREEZE_NODES // 2)
  assert gc.get_freeze_count() <= at_start  # a few nodes: no freeze yet
  before = gc.get_freeze_count()
  root = grow(recorder.FREEZE_NODES)
  # the nodes, with their hash-consing keys and weak references
  assert gc.get_freeze_count() > before + 2 * recorder.FREEZE_NODES
  before = gc.get_freeze_count()
  rec.writer.flush()  # nothing new: the heap of an idle trace is not frozen again
  assert gc.get_freeze_count() <= before
  recorder.disable()
  assert gc.get_freeze_count() == 0
  assert sum(1 for r in TraceReader(tmp_path / "t.vztrace") if r["t"] == "node") >= 3 * recorder.FREEZE_NODES // 2
  del root


def test_records_freeze_the_heap_between_flushes(tmp_path):
  # a long run of passes between two flushes (every 100 ms) would let the collector rescan the new kept nodes
  rec = recorder.enable(tmp_path / "t.vztrace", announce=False)
  rec.writer._stop.set()  # no background flushes: only records can freeze now
  rec.writer._thread.join()
  x = UOp.variable(f"r{next(_fresh)}", 0, 100)
  before = gc.get_freeze_count()
  for i in range(2 * recorder.FREEZE_NODES):
    x = x * 3 + UOp.const(dtypes.int32, 5000 + i)
  rec.node_id(x)  # queued, not flushed
  assert gc.get_freeze_count() <= before
  rec.record("error", text="any record")  # a record after the growth freezes
  assert gc.get_freeze_count() > before + 2 * recorder.FREEZE_NODES
  assert rec._heap.nodes >= 2 * recorder.FREEZE_NODES and rec._buf.next_id == 0  # nothing was flushed


def test_a_garbage_cycle_frozen_while_recording_is_collected_when_the_trace_doubles(tmp_path, monkeypatch):
  monkeypatch.setattr(gcfreeze, "THAW_NODES", 4 * recorder.FREEZE_NODES)
  recorder.enable(tmp_path / "t.vztrace", announce=False)
  obj = Cycle()
  gone = weakref.ref(obj)
  grow(2 * recorder.FREEZE_NODES)  # frozen while alive
  del obj
  gc.collect()
  assert gone() is not None  # garbage now, but frozen: a normal collection does not see it
  grow(2 * recorder.FREEZE_NODES)  # the trace reaches THAW_NODES: thawed, collected, frozen again
  assert gone() is None
  assert recorder.RECORDER._heap.thaws == 1
  obj = Cycle()
  gone = weakref.ref(obj)
  grow(recorder.FREEZE_NODES)
  del obj
  recorder.disable()  # the end of recording gives it back to the collector
  gc.collect()
  assert gone() is None


def test_a_process_that_froze_its_heap_or_turned_the_collector_off_is_left_alone(tmp_path):
  gc.freeze()
  theirs = gc.get_freeze_count()
  recorder.enable(tmp_path / "a.vztrace", announce=False)
  grow(2 * recorder.FREEZE_NODES)
  # (frozen objects that die leave the count: it can only drop)
  assert theirs - 1000 < gc.get_freeze_count() <= theirs  # the trace's 2,048 nodes (8,000 objects) were not frozen
  recorder.disable()
  assert theirs - 1000 < gc.get_freeze_count() <= theirs  # recording's end did not unfreeze what the process froze
  gc.unfreeze()
  gc.disable()
  recorder.enable(tmp_path / "b.vztrace", announce=False)
  grow(2 * recorder.FREEZE_NODES)
  assert gc.get_freeze_count() == 0
  recorder.disable()


def test_the_nodes_of_an_ended_trace_are_freed_without_the_collector(tmp_path):
  recorder.enable(tmp_path / "t.vztrace", announce=False)
  gone = weakref.ref(grow(2 * recorder.FREEZE_NODES))
  assert gone() is not None  # the trace keeps its nodes alive
  gc.disable()  # a reference cycle through the recorder would keep them until a collection
  recorder.disable()
  assert gone() is None
