"""Trace ids (compiler.trace.nodes): a trace keeps the nodes it named alive, except buffers and the nodes above them,
so recording never keeps a program's data; an equal node made again gets its old id either way."""
import gc
import weakref

import numpy as np

from compiler import Ops, UOp, dtypes
from compiler.rewrite import track_graph
from compiler.runtime.buffer import buffer_of, new_buffer_uop
from compiler.tensor import Tensor
from compiler.trace import recorder
from vztrace.reader import TraceReader


def _nodes(path) -> list[dict]:
  return [r for r in TraceReader(path) if r["t"] == "node"]


def _roots(path) -> list[int]:
  return [r["root"] for r in TraceReader(path) if r["t"] == "rw_begin"]


def test_recording_keeps_no_buffer_and_no_node_above_one_alive(trace):
  data = np.arange(1 << 16, dtype=np.float32)
  t = (Tensor(data) * 2 + 1).sum()
  t.schedule()  # the scheduler's rewrites name the buffer and everything above it
  leaf = t.uop
  while leaf.src:
    leaf = leaf.src[0]
  assert leaf.op is Ops.BUFFER
  buf = weakref.ref(buffer_of(leaf))
  top, const = weakref.ref(t.uop), UOp.const(dtypes.float32, 2.0)
  assert recorder.RECORDER.nodes.get(t.uop) is not None and recorder.RECORDER.nodes.get(leaf) is not None
  del t, leaf
  recorder.RECORDER.writer.flush()  # the flush lets go of the nodes it wrote
  gc.disable()
  try:
    assert buf() is None and top() is None  # freed by reference counting: nothing in the trace holds them
  finally:
    gc.enable()
  assert const in recorder.RECORDER.node_ids  # a node without a buffer below it stays (its id by identity)
  recorder.disable()
  ops = [n["op"] for n in _nodes(trace)]
  assert "BUFFER" in ops and "REDUCE_AXIS" in ops


def test_a_transient_node_made_again_after_it_died_gets_its_old_id(trace):
  b = new_buffer_uop(dtypes.float32, 16)
  x = UOp(Ops.RESHAPE, dtypes.float32, (b,), (4, 4))
  track_graph(x, "first")
  first = recorder.RECORDER.node_id(x)
  gone = weakref.ref(x)
  del x
  recorder.RECORDER.writer.flush()
  assert gone() is None  # dead: the next one is another object
  y = UOp(Ops.RESHAPE, dtypes.float32, (b,), (4, 4))
  track_graph(y, "again")
  z = UOp(Ops.RESHAPE, dtypes.float32, (b,), (2, 8))
  track_graph(z, "other")
  assert recorder.RECORDER.node_id(y) == first and recorder.RECORDER.node_id(z) != first
  recorder.disable()
  nodes = _nodes(trace)
  assert [n["op"] for n in nodes] == ["BUFFER", "RESHAPE", "RESHAPE"]  # written once each
  assert _roots(trace) == [first, first, nodes[2]["id"]]


def test_floats_that_hash_consing_tells_apart_stay_apart(trace):
  b = new_buffer_uop(dtypes.float32, 1)
  for v in (0.0, -0.0, 0.0, -0.0):  # (a made-up float arg on a node above a buffer; each dies before the next)
    track_graph(UOp(Ops.MUL, dtypes.float32, (b,), v), "mul")
    recorder.RECORDER.writer.flush()
  recorder.disable()
  roots = _roots(trace)
  assert roots[0] == roots[2] != roots[1] == roots[3]


def test_a_deep_graph_over_a_buffer_is_numbered_sources_first(trace):
  x = new_buffer_uop(dtypes.int32, 1)
  chain = [x]
  for i in range(5000):  # deeper than the recursion limit: the stack fallback
    x = UOp(Ops.ADD, dtypes.int32, (x, UOp.const(dtypes.int32, i)))
    chain.append(x)
  track_graph(x, "deep")
  ids = [recorder.RECORDER.node_id(u) for u in chain]
  assert ids == sorted(ids) and len(set(ids)) == len(ids)
  assert not any(u in recorder.RECORDER.node_ids for u in chain)  # all above a buffer: none kept
  recorder.disable()
  nodes = {n["id"]: n for n in _nodes(trace)}
  assert all(s < n["id"] for n in nodes.values() for s in n["src"])
  assert nodes[ids[-1]]["src"][0] == ids[-2]


def test_a_new_trace_does_not_take_ids_left_on_nodes_by_an_earlier_one(tmp_path):
  b = new_buffer_uop(dtypes.float32, 4)
  x = UOp(Ops.RESHAPE, dtypes.float32, (b,), (2, 2))
  for name in ("a", "b"):
    recorder.enable(tmp_path / f"{name}.vztrace", announce=False)
    track_graph(x, name)
    recorder.disable()
  assert _nodes(tmp_path / "a.vztrace") == _nodes(tmp_path / "b.vztrace")
  assert len(_nodes(tmp_path / "b.vztrace")) == 2
