"""The trace recorder's C extension (compiler.trace.native) against its Python reference: the node walk gives the same
ids (compiler.trace.nodes), the flush's node columns the same bytes (compiler.trace.columns); both fail the same way,
and the extension leaks nothing."""
import gc
import math
import os
import struct
import subprocess
import sys
import types
import weakref
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_helpers import promised_order

from compiler import Ops, UOp, dtypes
from compiler.trace import columns, native, recorder
from compiler.trace.nodes import NodeTable
from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[1]

IMPLS = [pytest.param(columns.node_columns_py, id="python"), pytest.param(columns.node_columns_c, id="c")]


def test_the_c_extension_is_built_and_used():
  # `make test` installs the project, which builds it: a missing compiler or a broken build must show up here
  assert columns.node_columns_c is not None, "compiler.trace._speedups was not built"
  assert columns.node_columns is columns.node_columns_c and native.IMPLEMENTATION == "C"


class _Codes:
  """A code table as the recorder keeps one: an object's code is the index of its text among the texts seen."""

  def __init__(self) -> None:
    self.texts: list[str] = []
    self.by_id: dict[int, int] = {}
    self.calls = 0

  def __call__(self, obj) -> int:
    self.calls += 1
    text = repr(obj)
    if text not in self.texts:
      self.texts.append(text)
    return self.texts.index(text)


def _run(impl, nodes, ids):
  dt, ar = _Codes(), _Codes()
  cols = impl(list(nodes), ids, dt.by_id, ar.by_id, dt, ar)
  return cols, (dt.texts, dt.calls, dict(dt.by_id)), (ar.texts, ar.calls, dict(ar.by_id))


def _u32(raw: bytes) -> list[int]:
  return list(struct.unpack(f"<{len(raw) // 4}I", raw))


def _table(*roots: UOp) -> tuple[list[UOp], dict]:
  rows: list[UOp] = []
  table = NodeTable(rows.append)
  for r in roots:
    table.id_of(r)
  return rows, table.ids


def test_columns_spell_out_each_node():
  a = UOp.variable("a", 0, 9)
  x = (a * 4 + 3) // 4
  rows, ids = _table(x)
  (op, dt, arg, nsrc, src), (dtexts, _, _), (atexts, _, _) = _run(columns.node_columns, rows, ids)
  assert _u32(op) == [int(u.op) for u in rows]
  assert [dtexts[c] for c in _u32(dt)] == [repr(u.dtype) for u in rows]
  assert [atexts[c] for c in _u32(arg)] == [repr(u.arg) for u in rows]
  assert _u32(nsrc) == [len(u.src) for u in rows]
  assert _u32(src) == [ids[s] for u in rows for s in u.src]


_args = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([0.0, -0.0, 1.5, math.inf, math.nan]),
                  st.text(max_size=3), st.tuples(st.integers(0, 2), st.integers(0, 2)), st.booleans())
_dtypes = st.sampled_from([dtypes.int32, dtypes.float32, dtypes.bool, dtypes.float32.vec(4), dtypes.index])


@st.composite
def _graphs(draw) -> list[UOp]:
  """A random DAG of UOps: each node over up to three earlier ones."""
  made: list[UOp] = []
  for _ in range(draw(st.integers(1, 25))):
    srcs = tuple(draw(st.lists(st.sampled_from(made), max_size=3))) if made else ()
    op = draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.CONST, Ops.SINK, Ops.WHERE]))
    made.append(UOp(op, draw(_dtypes), srcs, draw(_args)))
  return made


@settings(max_examples=300, deadline=None)
@given(_graphs())
def test_c_and_python_give_the_same_bytes_and_the_same_code_tables(made):
  rows, ids = _table(*made)
  assert _run(columns.node_columns_c, rows, ids) == _run(columns.node_columns_py, rows, ids)


def test_the_code_of_an_object_seen_before_is_looked_up_not_made_again():
  x = UOp.variable("a", 0, 9) + 1
  rows, ids = _table(x)
  dt, ar = _Codes(), _Codes()
  for impl in (columns.node_columns_c, columns.node_columns_py):
    impl(rows, ids, dt.by_id, ar.by_id, dt, ar)
  assert dt.calls == len({id(u.dtype) for u in rows}) and ar.calls == len({id(u.arg) for u in rows})


@pytest.mark.parametrize("impl", IMPLS)
def test_a_transient_source_gives_the_id_it_carries(impl, trace):
  from compiler.runtime.buffer import new_buffer_uop
  b = new_buffer_uop(dtypes.float32, 16)
  x = UOp(Ops.RESHAPE, dtypes.float32, (b,), (4, 4))
  table = recorder.RECORDER.nodes
  xid = table.id_of(x)
  assert x not in table.ids and b not in table.ids  # both transient: their ids live on the nodes
  (_, _, _, nsrc, src), _, _ = _run(impl, [b, x], table.ids)
  assert _u32(nsrc) == [0, 1] and _u32(src) == [table.get(b)] and xid == table.get(x)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_source_without_an_id_is_an_error(impl):
  a = UOp.variable("zz_no_id", 0, 3)
  with pytest.raises(ValueError, match="no trace id"):
    _run(impl, [a + 1], {})


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bad", [1 << 32, -1])
def test_an_id_outside_u32_is_an_overflow(impl, bad):
  a = UOp.variable("a", 0, 3)
  x = a + 1
  with pytest.raises(OverflowError):
    _run(impl, [x], dict.fromkeys(x.src, bad))


@pytest.mark.parametrize("impl", IMPLS)
def test_an_error_in_a_code_callback_propagates(impl):
  def boom(obj):
    raise RuntimeError("no code for you")
  a = UOp.variable("a", 0, 3)
  with pytest.raises(RuntimeError, match="no code for you"):
    impl([a], {}, {}, {}, boom, boom)


@pytest.mark.parametrize("impl", IMPLS)
def test_nodes_of_another_type_are_read_by_attribute(impl):
  n = types.SimpleNamespace(op=Ops.ADD, dtype=dtypes.int32, src=(), arg=7)
  (op, _, _, nsrc, src), (dtexts, _, _), (atexts, _, _) = _run(impl, [n], {})
  assert _u32(op) == [int(Ops.ADD)] and dtexts == [repr(dtypes.int32)] and atexts == ["7"] and _u32(nsrc) == [0]


def test_the_extension_leaks_no_node_and_no_code_object():
  class Arg:  # a hashable arg that can be weakly referenced (an int or a str cannot)
    def __repr__(self) -> str:
      return "Arg"
  arg = Arg()
  made = [UOp(Ops.CONST, dtypes.int32, (), arg)]
  for i in range(50):
    made.append(UOp(Ops.ADD, dtypes.int32, (made[-1], made[0]), i))
  rows, ids = _table(made[-1])
  refs = [weakref.ref(u) for u in rows] + [weakref.ref(arg)]
  for _ in range(3):
    _run(columns.node_columns_c, rows, ids)
  with pytest.raises(OverflowError):  # the error path lets go of what it held too
    columns.node_columns_c(rows, {**ids, made[0]: 1 << 40}, {}, {}, _Codes(), _Codes())
  handed: list[int] = []  # the codes it is given: held by the by-id tables, and by nothing else once they are gone

  def code(obj) -> int:
    handed.append(10**9 + len(handed))  # a new int object each
    return handed[-1]
  dtype_ids: dict = {}
  arg_ids: dict = {}
  columns.node_columns_c(rows, ids, dtype_ids, arg_ids, code, code)
  assert len(dtype_ids) + len(arg_ids) == len(handed) > 10
  del made, rows, ids, arg, dtype_ids, arg_ids
  gc.collect()
  assert [r for r in refs if r() is not None] == []
  assert {sys.getrefcount(v) for v in handed} == {3}  # the list, the loop variable and getrefcount's argument


_RECORD = """
import sys
from bench.bench_symbolic import random_index_exprs
from compiler.rewrite import graph_rewrite
from compiler.symbolic import symbolic
from compiler.trace import native, recorder
recorder.enable(sys.argv[1], announce=False)
for e in random_index_exprs(30, seed=3):
  graph_rewrite(e, symbolic, name="simplify")
import numpy as np
from compiler.tensor import Tensor
x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8))  # buffers: transient nodes, and kernels' passes
print(((x * 2 + 1).sum(axis=1).softmax()).numpy().round(3).tolist(), file=sys.stderr)
recorder.disable()
print(native.IMPLEMENTATION)
"""


KEPT = ("node", "match", "rw_begin", "rw_end", "pattern", "opt")


def test_a_trace_reads_the_same_with_either_implementation(tmp_path):
  read = []
  for env in ({}, {"VIZ_NATIVE": "0"}):  # VIZ_NATIVE=0: the Python versions, though the extension is built
    path = tmp_path / f"{len(read)}.vztrace"
    p = subprocess.run([sys.executable, "-c", _RECORD, str(path)], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env={**os.environ, "VIZ": "0", **env})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["Python" if env else "C"]
    # compared in the order the format keeps: where the writer's timed flushes fell changes how nodes and matches
    # interleave, in two runs of either implementation alike
    read.append([r for r in promised_order(TraceReader(path)) if r["t"] in KEPT])
  assert read[0] == read[1] and sum(r["t"] == "node" for r in read[0]) > 100
  assert any(r["t"] == "node" and r["op"] == "BUFFER" for r in read[0])


# ---- the node walk

def _walk_all(native: bool, roots: list[UOp]) -> tuple[list[UOp], list[int], dict, list[int]]:
  """Ids for roots in order, from a fresh table: (nodes in id order, the roots' ids, kept ids, transient ids)."""
  rows: list[UOp] = []
  table = NodeTable(rows.append, native=native)
  assert (table._walk is not None) == native
  got = [table.id_of(r) for r in roots]
  # read now: a second table over the same nodes puts its own ids on the transient ones
  return rows, got, dict(table.ids), [table.get(u) for u in rows]


@st.composite
def _graphs_with_buffers(draw) -> list[UOp]:
  """A random DAG where some leaves are BUFFER nodes (transient, with everything above them)."""
  made: list[UOp] = []
  for _ in range(draw(st.integers(1, 30))):
    if not made or draw(st.integers(0, 5)) == 0:
      leaf = draw(st.sampled_from([Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR]))
      made.append(UOp(leaf, dtypes.int32, (), draw(st.integers(0, 4))))
      continue
    srcs = tuple(draw(st.lists(st.sampled_from(made), min_size=1, max_size=3)))
    made.append(UOp(draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.SINK])), dtypes.int32, srcs, draw(_args)))
  return made


@settings(max_examples=300, deadline=None)
@given(_graphs_with_buffers(), st.randoms(use_true_random=False))
def test_c_and_python_walks_give_the_same_ids(made, rnd):
  roots = made[:]
  rnd.shuffle(roots)  # walks from anywhere: some nodes have ids already, some do not
  c, py = _walk_all(True, roots), _walk_all(False, roots)
  assert c == py
  rows, _, kept, transient = c
  assert sorted(transient) == list(range(len(rows)))  # every node once, ids dense
  assert all((u.op is Ops.BUFFER or any(s not in kept for s in u.src)) == (u not in kept) for u in rows)


@pytest.mark.parametrize("native", [True, False])
def test_a_deep_graph_finishes_on_a_stack(native):
  x = UOp.variable("deep", 0, 3)
  for i in range(3 * sys.getrecursionlimit()):
    x = x + i
  rows, (xid,), kept, _ = _walk_all(native, [x])
  assert xid == len(rows) - 1 and rows[-1] is x and kept[x] == xid


def test_the_c_walk_stops_at_its_own_depth_limit_whatever_the_recursion_limit():
  x = UOp.variable("deeper", 0, 3)
  for i in range(30000):
    x = x + i
  old = sys.getrecursionlimit()
  sys.setrecursionlimit(1 << 20)  # no RecursionError from Python: the C stack must still be safe
  try:
    rows, (xid,), _, _ = _walk_all(True, [x])
  finally:
    sys.setrecursionlimit(old)
  assert xid == len(rows) - 1 == 30000 + 30000  # the variable, 30000 constants and 30000 additions


def test_the_c_walk_leaks_nothing():
  made = [UOp(Ops.BUFFER, dtypes.int32, (), 99), UOp.variable("leak", 0, 3)]
  for i in range(40):
    made.append(UOp(Ops.ADD, dtypes.int32, (made[-1], made[i % 2]), i))
  refs = [weakref.ref(u) for u in made]
  for _ in range(3):
    _walk_all(True, made[::-1])
  handed: list[int] = []  # the ids it is given: held by the ids dict, and by nothing else once that is gone

  def new_id() -> int:
    handed.append(10**9 + len(handed))  # a new int object each
    return handed[-1]
  ids: dict = {}
  plain = made[1]  # the variable: no buffer below, so every node of the product gets its id from new_id
  for i in range(20):
    plain = plain * (i + 2)
  native.SPEEDUPS.visit(ids, [].append, new_id, object(), lambda u: None, plain)
  assert len(ids) == len(handed) > 10
  del made, ids, plain
  gc.collect()
  assert [r for r in refs if r() is not None] == []
  assert {sys.getrefcount(v) for v in handed} == {3}  # the list, the loop variable and getrefcount's argument
