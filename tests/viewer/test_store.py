"""The trace store: index of real recorder traces, damaged and hostile files, live files and watched directories."""
import gc
import os
import socket
import subprocess
import sys
import time
from array import array

import pytest
from support.proc_helpers import Events
from support.server_helpers import mini, recording, write_kernel_trace

from compiler import UOp, graph_rewrite
from viz_server import store as store_mod
from viz_server.store import TraceStore, context_entry, shape_colors
from vztrace.format import TraceFormatError, pack_column
from vztrace.writer import TraceWriter


def _meta(pid=None):
  return {"t": "meta", "version": "1.0", "argv": ["x"], "host": socket.gethostname(), "pid": pid or os.getpid(),
          "python": "3", "started": time.time(), "cwd": "/"}


def test_index_of_a_recorded_kernel_trace(tmp_path):
  path = tmp_path / "k.vztrace"
  write_kernel_trace(path)
  st = TraceStore()
  (tr,) = st.add_path(path)
  assert tr.status == "ended" and tr.damage is None and tr.meta["pid"] == os.getpid()
  names = {c.name: c for c in tr.contexts.values()}
  assert set(names) == {"default", "schedule 1", "r_4_4"}
  assert names["schedule 1"].parent == 0 and names["r_4_4"].kind == "kernel" and all(c.ended for c in names.values())
  kern = names["r_4_4"]
  (rw,) = [tr.rewrites[r] for r in kern.rewrites]
  assert rw.name == "simplify" and rw.ended and rw.matches == len(rw.after) >= 3
  assert isinstance(rw.before, array)  # matches are kept as flat arrays, not graphs
  entry = context_entry(tr, kern)
  assert entry["rewrites"][0]["matches"] == rw.matches and entry["rewrites"][0]["changed"] is True
  assert list(tr.kernels) == [kern.id]
  assert [o["op"] for o in kern.opts] == ["UPCAST", "LOCAL"] and len(kern.beam) == 1
  assert [s["kind"] for s in kern.sources] == ["llvm_ir", "asm"] and tr.runs[0]["kname"] == "r_4_4"
  # the last applied opt's shape, colored by axis type
  assert shape_colors(kern) == [["4", "blue"], ["4", "yellow"]]
  counts = tr.entry()["counts"]
  # (vztrace.counts: the empty root context is not counted, and the run record's two times are two runs)
  assert counts == {"contexts": 2, "rewrites": 2, "matches": tr.match_count, "nodes": len(tr.nodes), "kernels": 1,
                    "runs": 2}


def _two_frame_trace(path):
  with TraceWriter(path) as w:
    w.write(_meta())
    w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 1.0})
    w.write({"t": "ctx_begin", "id": 1, "parent": 0, "name": "first", "kind": "schedule", "ts": 1.0})
    w.flush()
    first_end = w.bytes
    w.write({"t": "ctx_begin", "id": 2, "parent": 0, "name": "second", "kind": "schedule", "ts": 2.0})
    w.write({"t": "end", "ts": 3.0})
  return first_end


def test_truncated_trace_loads_what_is_intact_and_says_it_is_damaged(tmp_path):
  path = tmp_path / "t.vztrace"
  first_end = _two_frame_trace(path)
  data = path.read_bytes()
  path.write_bytes(data[:first_end + 10])  # half of the second frame
  st = TraceStore()
  (tr,) = st.add_path(path)
  # a followed file might still be growing: the cut frame is "not yet"; an upload is final, so it is damage
  assert tr.status == "live" and [c.name for c in tr.contexts.values()] == ["default", "first"]
  with open(path, "rb") as f:
    up = st.add_upload(f, "t.vztrace")
  assert up.status == "damaged" and up.damage["offset"] == first_end and "truncated" in up.damage["reason"]
  assert [c.name for c in up.contexts.values()] == ["default", "first"]


def test_an_upload_directory_the_store_made_goes_with_the_store(tmp_path):
  # stopped, or never stopped (an app made for a script or a test) and collected: the directory and its uploads go
  # (the suite left a tinyviz-uploads-* directory in the temporary folder for each such app)
  path = tmp_path / "t.vztrace"
  _two_frame_trace(path)
  made = []
  for stop in (True, False):
    st = TraceStore()
    with open(path, "rb") as f:
      up = st.add_upload(f, "t.vztrace")
    made.append(up.path.parent)
    assert made[-1].is_dir() and made[-1].name.startswith("tinyviz-uploads-") and made[-1] != tmp_path
    if stop:
      st.stop()
    del st, up
    gc.collect()
    assert not made[-1].exists(), f"{made[-1]} outlived its store (stopped: {stop})"
  kept = tmp_path / "uploads"
  kept.mkdir()
  st = TraceStore(upload_dir=str(kept))  # (a directory the caller gave is the caller's)
  with open(path, "rb") as f:
    st.add_upload(f, "t.vztrace")
  st.stop()
  del st
  gc.collect()
  assert kept.is_dir() and any(kept.iterdir())


def test_corrupt_frame_is_damage_even_while_following(tmp_path):
  path = tmp_path / "t.vztrace"
  first_end = _two_frame_trace(path)
  data = bytearray(path.read_bytes())
  data[first_end + 20] ^= 0xFF  # inside the second frame's payload: checksum mismatch
  path.write_bytes(bytes(data))
  (tr,) = TraceStore().add_path(path)
  assert tr.status == "damaged" and "checksum" in tr.damage["reason"] and tr.damage["offset"] == first_end
  assert len(tr.contexts) == 2 and tr.entry()["status"] == "damaged"


def test_not_a_trace_is_refused(tmp_path):
  bad = tmp_path / "bad.vztrace"
  bad.write_bytes(b"<html>not a trace</html>")
  with pytest.raises(TraceFormatError):
    TraceStore().add_path(bad)
  with pytest.raises(FileNotFoundError):
    TraceStore().add_path(tmp_path / "missing.vztrace")


def test_hostile_records_are_kept_out_of_the_index(tmp_path):
  path = tmp_path / "h.vztrace"
  with TraceWriter(path) as w:
    w.write(_meta())
    w.write({"t": "node", "id": 0, "op": "CONST", "dtype": "int32", "arg": "1", "src": []})
    w.write({"t": "node", "id": 1, "op": "ADD", "dtype": "int32", "arg": "None", "src": [0, 7]})  # 7 undefined
    w.write({"t": "node", "id": 0, "op": "CONST", "dtype": "int32", "arg": "2", "src": []})  # duplicate
    w.write({"t": "node", "id": 5, "op": "NEG", "dtype": "int32", "arg": "None", "src": [5]})  # self loop
    w.write({"t": "match", "rw": 9, "pat": 0, "before": 0, "after": 0, "dt": 1})  # unknown rewrite
    w.write({"t": "rw_begin", "id": 0, "ctx": 42, "name": "r", "file": None, "line": None, "bottom_up": False,
             "root": 0, "ts": 1.0})  # unknown context
    w.write({"t": "end", "ts": 2.0})
  (tr,) = TraceStore().add_path(path)
  assert len(tr.nodes) == 1 and tr.nodes.get(0) == ("CONST", "int32", "1", ())
  assert 1 not in tr.nodes and 5 not in tr.nodes
  assert len(tr.anomalies) == 5 and tr.status == "ended"
  assert tr.contexts[42].kind == "unknown" and tr.contexts[42].rewrites == [0]


def test_live_file_is_followed_and_events_come_in_record_order(tmp_path):
  path = tmp_path / "live.vztrace"
  w = TraceWriter(path)
  w.write(_meta())
  w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 1.0})
  w.flush()
  st = TraceStore()
  events = []
  st.listeners.append(lambda ev, data: events.append((ev, data)))
  (tr,) = st.add_path(path)
  assert tr.status == "live" and [e for e, _ in events] == ["trace", "context"]
  events.clear()
  for i in range(1, 4):
    w.write({"t": "ctx_begin", "id": i, "parent": 0, "name": f"c{i}", "kind": "schedule", "ts": 1.0})
    w.write({"t": "ctx_end", "id": i, "ts": 2.0})
  w.flush()
  st.poll_once()
  ctx_events = [d["context"] for e, d in events if e == "context"]
  assert [(c["name"], c["ended"]) for c in ctx_events] == [("c1", False), ("c1", True), ("c2", False),
                                                           ("c2", True), ("c3", False), ("c3", True)]
  assert events[-1][0] == "trace" and events[-1][1]["counts"]["contexts"] == 3  # (the empty root is not counted)
  w.write({"t": "end", "ts": 3.0})
  w.close()
  st.poll_once()
  assert tr.status == "ended" and events[-1] == ("trace", tr.entry())


def test_follow_thread_sees_new_records_quickly(tmp_path):
  path = tmp_path / "live.vztrace"
  w = TraceWriter(path)
  w.write(_meta())
  w.flush()
  st = TraceStore(poll_interval=0.02)
  (tr,) = st.add_path(path)
  events = Events()  # what the store tells its listeners (the socket.io feed) once it has read records
  st.listeners.append(lambda name, data: events.add(name))
  st.start()
  try:
    w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 1.0})
    w.flush()
    events.wait_for(lambda _: tr.contexts, "the store to read the new record")
    assert 0 in tr.contexts
  finally:
    st.stop()
    w.close()


def test_directory_picks_up_new_traces_and_rewritten_files(tmp_path):
  d = tmp_path / "traces"
  d.mkdir()
  (d / "junk.vztrace").write_bytes(b"junk that is not a trace")
  (d / "notes.txt").write_text("ignored")
  st = TraceStore(scan_interval=0)
  assert st.add_path(d) == []
  with recording(d / "a.vztrace"):
    graph_rewrite(UOp.variable("x", 0, 3) + 0, mini, name="r")
  st.poll_once()
  assert [t.name for t in st.traces.values()] == ["a.vztrace"]
  with recording(d / "a.vztrace"):  # a second run writing the same path: a new file (inode), a new trace
    graph_rewrite(UOp.variable("y", 0, 3) + 0, mini, name="r")
  st.poll_once()
  assert len(st.traces) == 2 and all(t.status == "ended" for t in st.traces.values())
  first, second = st.traces.values()
  assert "'x'" in first.nodes.get(0)[2] and "'y'" in second.nodes.get(0)[2]
  st.poll_once()
  assert len(st.traces) == 2


def test_writer_that_died_without_end_is_reported(tmp_path, monkeypatch):
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
  path = tmp_path / "crashed.vztrace"
  w = TraceWriter(path)
  w.write(_meta(pid=int(dead.stdout)))
  w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 1.0})
  w.flush()
  w._f.close()  # no end record, as after a crash  # noqa: SLF001
  st = TraceStore()
  (tr,) = st.add_path(path)
  assert tr.status == "live"
  monkeypatch.setattr(store_mod, "WRITER_CHECK_S", 0.0)
  st.poll_once()
  assert tr.status == "damaged" and "without finishing" in tr.damage["reason"] and 0 in tr.contexts


def test_huge_trace_is_indexed_in_bounded_batches_without_graphs(tmp_path, monkeypatch):
  # 100k matches over 200 rewrites of a 600-node chain: the store keeps arrays, never a graph per step, and reads
  # the file a window at a time (so it never holds all decoded records at once)
  path = tmp_path / "huge.vztrace"
  n_nodes, n_rw, per_rw = 600, 200, 500
  with TraceWriter(path) as w:
    w.write(_meta())
    w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 1.0})
    w.write({"t": "pattern", "id": 0, "file": "f.py", "line": 1, "src": "x", "pat": "UPat()", "name": "f"})
    for i in range(n_nodes):
      w.write({"t": "node", "id": i, "op": "NEG" if i else "CONST", "dtype": "int32", "arg": "None" if i else "0",
               "src": [i - 1] if i else []})
    for r in range(n_rw):
      w.write({"t": "rw_begin", "id": r, "ctx": 0, "name": "big", "file": "f.py", "line": 1, "bottom_up": False,
               "root": n_nodes - 1, "ts": 1.0})
      for k in range(per_rw):
        w.write({"t": "match", "rw": r, "pat": 0, "before": (k % (n_nodes - 1)) + 1, "after": 0, "dt": 10})
      w.write({"t": "rw_end", "id": r, "root": 0, "dt": 5000, "matches": per_rw})
    w.write({"t": "end", "ts": 2.0})
  sizes = []
  real_apply = store_mod.Trace.apply

  def spy(self, recs, events):
    sizes.append(len(recs))
    return real_apply(self, recs, events)
  monkeypatch.setattr(store_mod.Trace, "apply", spy)
  st = TraceStore()
  (tr,) = st.add_path(path)
  assert tr.match_count == n_rw * per_rw == 100_000 and len(tr.nodes) == n_nodes
  assert len(sizes) > 3 and max(sizes) < sum(sizes) // 3
  rw = tr.rewrites[n_rw - 1]
  assert all(isinstance(a, array) for a in (rw.pat, rw.before, rw.after, rw.mdt))
  assert not any(hasattr(rw, a) for a in ("graph", "graphs", "nodes"))
  assert tr.nodes.nbytes() < 64 * n_nodes  # a few machine words per node


def test_shape_colors_are_the_last_applied_opts_shape():
  # the kernel's name stays its context's (the scheduler's); the shape is the last opt that applied, refusals skipped
  from viz_server.store import Context
  c = Context(3, 0, "r_4_4n29", "kernel", 1.0)
  assert shape_colors(c) is None
  c.opts.append({"ok": True, "shape": [4, 4], "colors": ["blue", "red"], "kname": "r_4_4n29"})
  c.opts.append({"ok": False, "shape": [2, 2, 4], "colors": ["blue", "blue", "red"]})
  assert shape_colors(c) == [["4", "blue"], ["4", "red"]]
  assert shape_colors(Context(4, 0, "schedule 1", "schedule", 1.0)) is None


# ---- a batch's nodes and matches taken as the reader's columns
def _index_of(path, columns, monkeypatch):
  """What the store keeps of a trace, read with or without the reader's columns, and whether columns came in."""
  runs = []
  real_apply = store_mod.Trace.apply

  def spy(self, recs, events):
    runs.extend(type(r).__name__ for r in recs if type(r) is not dict)
    return real_apply(self, recs, events)
  monkeypatch.setattr(store_mod.Trace, "apply", spy)
  monkeypatch.setattr(store_mod.Trace, "columns", columns)
  (tr,) = TraceStore().add_path(path)
  nodes = [(nid, tr.nodes.get(nid)) for nid in tr.nodes.ids()]
  rws = {r: (rw.pat.tolist(), rw.before.tolist(), rw.after.tolist(), rw.mdt.tolist(), rw.merr, rw.nodes_at_end)
         for r, rw in tr.rewrites.items()}
  return (nodes, rws, tr.match_count, tr.anomalies, tr.indexed, tr.damage), set(runs)


def test_columns_index_what_the_records_do(tmp_path, monkeypatch):
  path = tmp_path / "k.vztrace"
  with recording(path):
    x = UOp.variable("x", 0, 9)
    for i in range(40):  # several flushes' worth of batches, with strings new in later ones
      graph_rewrite(((x + i) * 1 + 0) * (UOp.const(x.dtype, i) + 2), mini, name=f"rw{i}")
  by_columns, runs = _index_of(path, True, monkeypatch)
  by_records, no_runs = _index_of(path, False, monkeypatch)
  assert runs == {"BatchNodes", "BatchMatches"} and not no_runs
  assert by_columns == by_records and len(by_columns[0]) > 100 and by_columns[2] > 40


def test_columns_of_a_hostile_batch_get_the_records_checks(tmp_path, monkeypatch):
  from support.trace_samples import SAMPLES, batch
  path = tmp_path / "h.vztrace"
  rw0 = {**SAMPLES["rw_begin"], "id": 0, "ctx": 0, "root": 0}
  with TraceWriter(path) as w:
    w.write(_meta())
    w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 1.0})
    w.write({"t": "node", "id": 0, "op": "CONST", "dtype": "int", "arg": "1", "src": []})  # the store's codes first
    w.write(rw0)
    # string codes of the batches, not the store's; matches of an unknown rewrite among those of rewrite 0; node 4
    # names node 5 (never defined), node 1 comes twice
    w.write(batch(1, ["ADD", "None", "int"], [(0, 2, 1, [0, 0]), (0, 2, 1, [1, 0])],
                  [(0, 0, 1, 2, 5), (7, 0, 1, 1, 5)], []))
    w.write(batch(3, ["1", "CONST"], [(4, 2, 3, []), (0, 2, 1, [5])], [(0, 0, 0, 1, 9)], []))
    w.write(batch(1, [], [(4, 2, 3, [])], [], []))
    w.write({"t": "end", "ts": 2.0})
  by_columns, runs = _index_of(path, True, monkeypatch)
  by_records, _ = _index_of(path, False, monkeypatch)
  assert runs == {"BatchNodes", "BatchMatches"} and by_columns == by_records
  nodes, rws, matches, anomalies = by_columns[:4]
  add, const = ("ADD", "int", "None"), ("CONST", "int", "1")
  assert nodes == [(0, (*const, ())), (1, (*add, (0, 0))), (2, (*add, (1, 0))), (3, (*const, ()))]
  assert rws[0][:3] == ([0, 0], [1, 0], [2, 1]) and matches == 2
  assert anomalies == ["match for unknown rewrite 7", "node 4 uses node 5 before it is defined",
                       "node 1 is defined twice"]


def test_call_sites_by_columns_and_by_records(tmp_path, monkeypatch):
  """Trace 2.7's node call sites reach the store by either path (the recorder's numbering in columns, other ids
  node by node); a node record's malformed site is an anomaly that loses the site, not the node."""
  from support.trace_samples import batch
  path = tmp_path / "s.vztrace"
  a, b = {"file": "/u/m.py", "line": 3, "function": "f"}, {"file": "/u/m.py", "line": 4, "function": "<module>"}
  with TraceWriter(path) as w:
    w.write(_meta())
    w.write({**batch(0, ["CONST", "int", "1"], [(0, 1, 2, []), (0, 1, 2, [0])], [], []), "sites": [a],
             "site": pack_column([1, 0]).decode()})
    w.write({**batch(7, [], [(0, 1, 2, [1])], [], []), "sites": [b], "site": pack_column([2]).decode()})  # (id 7)
    w.write({"t": "node", "id": 8, "op": "CONST", "dtype": "int", "arg": "1", "src": [7], "site": a})
    w.write({"t": "node", "id": 9, "op": "CONST", "dtype": "int", "arg": "1", "src": [], "site": {"file": "x"}})
    w.write({"t": "end", "ts": 2.0})
  for columns in (True, False):
    monkeypatch.setattr(store_mod.Trace, "columns", columns)
    (tr,) = TraceStore().add_path(path)
    assert [tr.nodes.site(i) for i in (0, 1, 7, 8, 9)] == [("/u/m.py", 3, "f"), None, ("/u/m.py", 4, "<module>"),
                                                           ("/u/m.py", 3, "f"), None]
    assert len(tr.nodes) == 5 and any("node 9: 'node.site' record lacks field 'line'" in x for x in tr.anomalies)


def test_columns_stop_where_the_index_is_full(tmp_path, monkeypatch):
  path = tmp_path / "k.vztrace"
  with recording(path):
    graph_rewrite(UOp.sink(*[UOp.variable("x", 0, 9) * i + 0 for i in range(300)]), mini, name="big")
  monkeypatch.setattr(store_mod, "INDEX_FLOOR", 250)  # a cut inside a run of nodes
  monkeypatch.setattr(store_mod, "RECORDS_PER_BYTE", 0)
  by_columns, _ = _index_of(path, True, monkeypatch)
  by_records, _ = _index_of(path, False, monkeypatch)
  assert by_columns == by_records and by_columns[4] == 250 and "too big" in by_columns[5]["reason"]
