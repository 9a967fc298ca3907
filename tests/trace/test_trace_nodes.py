"""Trace ids (compiler.trace.recorder.TraceIds): a node's id follows its structure, so an equal node made after the
first one died gets the first one's id, and the trace keeps no UOp alive (nor a Buffer, nor a program's input data);
ids are dense and sources-first, however deep the graph."""
import gc
import itertools
import math
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import Ops, UOp, dtypes
from compiler.rewrite import track_graph
from compiler.runtime.buffer import buffer_of, new_buffer_uop
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.trace.recorder import TraceIds, key_fields
from compiler.uop import cons_key
from vztrace.reader import TraceReader

_fresh = itertools.count()


def _nodes(path) -> list[dict]:
  return [r for r in TraceReader(path) if r["t"] == "node"]


def _roots(path) -> list[int]:
  return [r["root"] for r in TraceReader(path) if r["t"] == "rw_begin"]


# ---- TraceIds on random graphs

_args = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([0.0, -0.0, 1.5, math.inf, math.nan]),
                  st.text(max_size=3), st.tuples(st.integers(0, 2), st.integers(0, 2)), st.booleans())
_dtypes = st.sampled_from([dtypes.int32, dtypes.float32, dtypes.bool, dtypes.float32.vec(4), dtypes.index])


@st.composite
def _specs(draw) -> list[tuple]:
  """A random DAG as (op, dtype, arg, source positions) per node; node 0 is a variable named by the test (one no
  other example uses, so that the nodes over it die when the test drops them)."""
  specs: list[tuple] = [(Ops.DEFINE_VAR, dtypes.int32, None, ())]
  for _ in range(draw(st.integers(1, 30))):
    if draw(st.integers(0, 5)) == 0:
      specs.append((draw(st.sampled_from([Ops.BUFFER, Ops.CONST])), draw(_dtypes), draw(st.integers(0, 4)), ()))
    else:
      srcs = tuple(draw(st.lists(st.integers(0, len(specs) - 1), min_size=1, max_size=3)))
      specs.append((draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.SINK, Ops.WHERE])), draw(_dtypes), draw(_args), srcs))
  return specs


def _build(specs: list[tuple], var: str) -> list[UOp]:
  made: list[UOp] = []
  for op, dtype, arg, srcs in specs:
    made.append(UOp(op, dtype, tuple(made[i] for i in srcs), (var, 0, 9) if op is Ops.DEFINE_VAR else arg))
  return made


def _name(ids: TraceIds, specs: list[tuple], var: str, order: list[int]) -> tuple[dict[int, int], weakref.ref]:
  """Build the graph, name its nodes in `order`; the nodes die on return (a weak reference to the variable shows)."""
  made = _build(specs, var)
  return {i: ids.id_of(made[i]) for i in order}, weakref.ref(made[0])


@pytest.fixture(scope="module")
def frozen_heap():
  """The heap as it was before these examples, left out of their collections (it cannot hold their objects): late in
  a suite worker a full collection of everything took seconds, and each of the 300 examples makes three."""
  gc.freeze()
  yield
  gc.unfreeze()


@pytest.mark.usefixtures("frozen_heap")
@settings(max_examples=300, deadline=None)
@given(_specs(), st.randoms(use_true_random=False))
def test_ids_follow_structure_whether_or_not_the_first_node_still_lives(specs, rnd):
  rows: list[bytes] = []
  args: list = []
  ids = TraceIds(rows.append, add_arg=args.append)
  var = f"v{next(_fresh)}"
  some = rnd.sample(range(len(specs)), rnd.randint(1, len(specs)))
  first, gone = _name(ids, specs, var, some)
  gc.collect()
  assert gone() is None  # the table kept no node alive
  made = _build(specs, var)
  order = list(range(len(specs)))
  rnd.shuffle(order)
  again = {i: ids.id_of(made[i]) for i in order}
  assert all(again[i] == t for i, t in first.items())  # rebuilt after they died: the same ids
  # one id per distinct node (hash-consing: a distinct structure is a distinct object), dense, in the order of rows
  assert len(set(again.values())) == len({id(u) for u in made}) == len(rows)
  arg_of: dict[int, object] = {}  # an arg number -> the arg it was given for: one number, args cons_key calls equal
  for i, u in enumerate(made):
    want = cons_key(u.op, u.dtype, tuple(ids.get(s) for s in u.src), u.arg)
    op, d, a, *src = key_fields(rows[again[i]])
    arg = arg_of.setdefault(a, args[again[i]])
    assert (Ops(op), ids.dtypes[d], tuple(src)) == want[:3] and cons_key(u.op, u.dtype, (), arg)[3:] == want[3:]
    assert all(s < again[i] for s in src)  # sources first
  # bytes and ints: no key is an object the collector tracks, nor is the table (what a table of tuples cost: ~0.5 s
  # of collections on issue 30's GPT step)
  assert not gc.is_tracked(ids.keys) and not any(map(gc.is_tracked, rows))


def test_a_walk_numbers_depth_first_with_sources_in_order():
  a, b = UOp.variable(f"a{next(_fresh)}", 0, 3), UOp.variable(f"b{next(_fresh)}", 0, 3)
  left, right = a * 2, b + a
  top = UOp.sink(right, left, right * left)
  rows: list[bytes] = []
  ids = TraceIds(rows.append)
  want = [b, a, right, UOp.const(dtypes.index, 2), left, right * left, top]
  assert ids.id_of(top) == len(want) - 1
  assert [ids.get(u) for u in want] == list(range(len(want)))


def test_a_100k_deep_chain_is_named_without_recursion():
  x = UOp.variable(f"deep{next(_fresh)}", 0, 3)
  one = UOp.const(dtypes.index, 1)
  for _ in range(100_000):
    x = x + one
  rows: list[bytes] = []
  ids = TraceIds(rows.append)
  assert ids.id_of(x) == 100_001 and len(rows) == 100_002
  assert all(max(key_fields(k)[3:], default=-1) < i for i, k in enumerate(rows))  # (a key's source ids: from its 4th)


# ---- what a recording keeps

def test_recording_keeps_no_uop_no_buffer_and_no_input_data_alive(trace):
  data = np.arange(1 << 16, dtype=np.float32)
  t = (Tensor(data) * 2 + 1).sum()
  t.schedule()  # the scheduler's rewrites name the buffer and everything above it
  leaf = t.uop
  while leaf.src:
    leaf = leaf.src[0]
  assert leaf.op is Ops.BUFFER
  plain = UOp.variable(f"kept{next(_fresh)}", 0, 9) * 3  # no buffer below it
  track_graph(plain, "plain")
  refs = [weakref.ref(x) for x in (data, buffer_of(leaf), t.uop, leaf, plain, plain.src[0])]
  assert recorder.RECORDER.ids.get(t.uop) is not None and recorder.RECORDER.ids.get(plain) is not None
  del data, t, leaf, plain
  gc.disable()  # not flushed yet, and freed by reference counting alone: nothing in the recorder holds them
  try:
    assert [r for r in refs if r() is not None] == []
  finally:
    gc.enable()
  recorder.disable()
  ops = [n["op"] for n in _nodes(trace)]
  assert "BUFFER" in ops and "REDUCE_AXIS" in ops and "DEFINE_VAR" in ops


def test_equal_nodes_made_after_the_first_died_get_its_id(trace):
  b = new_buffer_uop(dtypes.float32, 16)
  var = f"again{next(_fresh)}"
  roots = []
  for _ in range(2):  # a node over a buffer, and one over a variable; each dies before the next is made
    x = UOp(Ops.RESHAPE, dtypes.float32, (b,), (4, 4))
    y = UOp.variable(var, 0, 9) * 5
    track_graph(x, "reshape")
    track_graph(y, "product")
    roots.append((weakref.ref(x), weakref.ref(y)))
    del x, y
    assert [r() for r in roots[-1]] == [None, None]
  track_graph(UOp(Ops.RESHAPE, dtypes.float32, (b,), (2, 8)), "other")
  recorder.disable()
  nodes = _nodes(trace)
  assert [n["op"] for n in nodes] == ["BUFFER", "RESHAPE", "DEFINE_VAR", "CONST", "MUL", "RESHAPE"]  # each once
  assert _roots(trace) == [1, 4, 1, 4, 5]


def test_args_that_hash_consing_tells_apart_stay_apart(trace):
  b = new_buffer_uop(dtypes.float32, 1)
  for v in (0.0, -0.0, 0.0, -0.0, 1, True, 1, True):  # (each node dies before the next)
    track_graph(UOp(Ops.MUL, dtypes.float32, (b,), v), "mul")
  recorder.disable()
  roots = _roots(trace)
  assert roots[0] == roots[2] != roots[1] == roots[3] and roots[4] == roots[6] != roots[5] == roots[7]
  assert len(set(roots)) == 4


def test_a_deep_graph_over_a_buffer_is_recorded_sources_first(trace):
  x = new_buffer_uop(dtypes.int32, 1)
  for i in range(5000):  # deeper than the recursion limit
    x = UOp(Ops.ADD, dtypes.int32, (x, UOp.const(dtypes.int32, i)))
  track_graph(x, "deep")
  recorder.disable()
  nodes = _nodes(trace)
  assert [n["id"] for n in nodes] == list(range(len(nodes))) == list(range(1 + 2 * 5000))
  assert all(s < n["id"] for n in nodes for s in n["src"]) and _roots(trace) == [len(nodes) - 1]


def test_a_new_trace_does_not_take_ids_from_an_earlier_one(tmp_path):
  b = new_buffer_uop(dtypes.float32, 4)
  x = UOp(Ops.RESHAPE, dtypes.float32, (b,), (2, 2))
  for name in ("a", "b"):
    recorder.enable(tmp_path / f"{name}.vztrace", announce=False)
    track_graph(x, name)
    recorder.disable()
  assert _nodes(tmp_path / "a.vztrace") == _nodes(tmp_path / "b.vztrace")
  assert len(_nodes(tmp_path / "b.vztrace")) == 2


def test_the_identity_table_drops_each_node_as_it_dies():
  rows: list[bytes] = []
  ids = TraceIds(rows.append)
  var = f"dropped{next(_fresh)}"
  for i in range(3000):
    ids.id_of(UOp.variable(var, 0, 9) + (10**9 + i))  # three nodes no other test makes, which die at once
  assert len(rows) == 1 + 2 * 3000  # (the variable made again is the variable named first)
  x = UOp.variable(var, 0, 9) + 7
  ids.id_of(x)
  gone = weakref.ref(x)
  del x
  assert gone() is None  # naming kept no node alive (no collection needed: nothing of the table refers to it)


def test_a_walk_an_error_stopped_leaves_nothing_for_the_next_one():
  # (one stack serves a recording's walks: what an interrupted walk left on it must not be named by the next)
  rows: list[bytes] = []
  stop = [True]

  def add(key: bytes) -> None:
    if stop.pop() if stop else False:
      raise KeyboardInterrupt
    rows.append(key)
  ids = TraceIds(add)
  tag = f"stopped{next(_fresh)}"
  a, b = UOp.variable(tag + "a", 0, 9), UOp.variable(tag + "b", 0, 9)
  x = a * b
  with pytest.raises(KeyboardInterrupt):
    ids.id_of(x)  # stopped at its first node, with x and b still to walk
  c = UOp.variable(tag + "c", 0, 9)
  ids.id_of(c)
  assert len(rows) == 1 and ids.get(b) is None and ids.get(x) is None


def test_an_ended_trace_lets_go_of_its_table():
  rows: list[bytes] = []
  ids = TraceIds(rows.append)
  x = UOp.variable(f"end{next(_fresh)}", 0, 9) + 1
  ids.id_of(x)
  ids.close()
  table = weakref.ref(ids)
  del ids
  gc.disable()  # freed by reference counting: the table is in no cycle
  try:
    assert table() is None
  finally:
    gc.enable()


def test_a_named_node_keeps_its_id_in_a_slot_and_two_recordings_keep_their_own():
  a = UOp.variable(f"slot{next(_fresh)}", 0, 9)
  x = (a + 3) * a
  nodes = x.toposort()
  def dicts() -> list[bool]:  # which nodes have a __dict__ (a shared node, the constant, may have one from elsewhere)
    return [dict in map(type, gc.get_referents(u)) for u in nodes]
  had = dicts()
  assert not all(had)
  rows1: list[bytes] = []
  first = TraceIds(rows1.append)
  assert first.id_of(x) == len(nodes) - 1
  # no per-node object holds the id: a __dict__ made for it was one more allocation and object per named node
  assert dicts() == had
  want = [first.get(u) for u in nodes]
  second = TraceIds([].append)
  second.id_of(next(u for u in nodes if u.op is Ops.CONST))  # named first here: the slots now hold other ids
  second.id_of(x)
  assert sorted(second.get(u) for u in nodes) == sorted(want) and [second.get(u) for u in nodes] != want
  assert [first.get(u) for u in nodes] == [None] * len(nodes)  # another recording's id is not the first's
  assert [first.id_of(u) for u in nodes] == want and len(rows1) == len(nodes)  # found again by structure
