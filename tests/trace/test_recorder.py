"""The recorder: what graph_rewrite and contexts write into a trace, and that VIZ off records nothing."""
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from support.trace_helpers import RUN_TO_RUN, promised_order

from compiler import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from compiler.rewrite import track_graph
from compiler.trace import recorder
from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[2]

fold_add0 = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), lambda x: x)], name="add0")
mul1 = PatternMatcher([(UPat(Ops.MUL, src=[UPat.var("x"), UPat.const(None, 1)]), lambda x: x)], name="mul1")


def _records(path: Path) -> list[dict]:
  r = TraceReader(path)
  recs = list(r)
  assert not r.damaged, r.reason
  return recs


def _expr(n: int) -> UOp:
  x = UOp.variable("x", 0, 10)
  for i in range(n):
    x = (x + 0) * 1 if i % 2 else x + 0
  return x


def test_disabled_records_nothing_and_calls_no_hook(monkeypatch, tmp_path):
  assert recorder.RECORDER is None
  def boom(*a, **k):
    raise AssertionError("recorder called with VIZ off")
  for name in ("match", "rewrite_begin", "rewrite_end", "node_id", "pattern_id"):
    monkeypatch.setattr(recorder.Recorder, name, boom)
  out = graph_rewrite(_expr(20), fold_add0 + mul1)
  assert out is UOp.variable("x", 0, 10)
  with recorder.trace_context("k", kind="kernel") as cid:
    assert cid is None
  recorder.record("run", kname="k", times=[1.0])  # silently ignored
  assert list(tmp_path.iterdir()) == []


def test_rewrite_records_every_match_with_nodes_and_rules(trace):
  root = _expr(6)
  with recorder.trace_context("schedule 1", kind="schedule"):
    out = graph_rewrite(root, fold_add0 + mul1, name="cleanup"); line = sys._getframe().f_lineno  # noqa: E702
  recorder.disable()
  recs = _records(trace)
  assert recs[0]["t"] == "meta" and recs[-1]["t"] == "end"
  nodes = {r["id"]: r for r in recs if r["t"] == "node"}
  # every node is written once, after its sources
  order = [r["id"] for r in recs if r["t"] == "node"]
  assert len(order) == len(set(order))
  for r in nodes.values():
    assert all(order.index(s) < order.index(r["id"]) for s in r["src"])
  ctx = next(r for r in recs if r["t"] == "ctx_begin" and r["name"] == "schedule 1")
  assert ctx["kind"] == "schedule" and ctx["parent"] == 0
  begin = next(r for r in recs if r["t"] == "rw_begin")
  assert (begin["name"], begin["ctx"], begin["line"]) == ("cleanup", ctx["id"], line)
  assert begin["file"] == __file__
  matches = [r for r in recs if r["t"] == "match"]
  assert len(matches) == 9  # six x+0 and three *1 in the chain
  patterns = {r["id"]: r for r in recs if r["t"] == "pattern"}
  assert len(patterns) == 2  # each rule written once
  assert {"lambda x: x" in p["src"] for p in patterns.values()} == {True}
  for m in matches:
    before, after = nodes[m["before"]], nodes[m["after"]]
    assert before["op"] in ("ADD", "MUL") and m["after"] in before["src"] or after["op"] != before["op"]
    assert m["dt"] >= 0 and m["pat"] in patterns
  end = next(r for r in recs if r["t"] == "rw_end")
  assert end["matches"] == 9 and nodes[end["root"]]["op"] == "DEFINE_VAR"
  assert out.op is Ops.DEFINE_VAR


def test_recording_tries_each_pattern_as_often_as_not_recording(monkeypatch, tmp_path):
  """Recording adds the clock and the records to a rewrite, not matching: a pattern of an op and dtype alone
  (Rule.node_cap: "MUL m") is not matched, recorded or not, so patterns are tried as often either way."""
  pm = PatternMatcher([(UPat(Ops.MUL, name="m"), lambda m: None, "looks at MULs")]) + fold_add0 + mul1
  assert any(r.node_cap == "m" for r in pm.rules)
  tried: list[UPat] = []
  match = UPat.match
  monkeypatch.setattr(UPat, "match", lambda self, u, store: tried.append(self) or match(self, u, store))
  counts = []
  for record in (False, True):
    if record:
      recorder.enable(tmp_path / "t.vztrace", announce=False)
    try:
      assert graph_rewrite(_expr(20), pm) is UOp.variable("x", 0, 10)
    finally:
      recorder.disable()
    counts.append(len(tried))
    tried.clear()
  assert counts[0] == counts[1] > 0


def test_a_flush_lets_go_of_the_records_it_wrote(trace):
  """The queue keeps no record a flush wrote (a source record holds a kernel's texts and line maps), only its slot
  until the recording thread compacts the queue."""
  with recorder.trace_context("k", kind="kernel"):
    graph_rewrite(_expr(6), fold_add0 + mul1)
  q = recorder.RECORDER._queue
  recorder.RECORDER.writer.flush()
  assert q.r_done >= 4 and q.recs[:q.r_done] == [None] * q.r_done


def test_replaying_matches_rebuilds_the_output(trace):
  # substituting before->after in order from the root gives the rewrite's output (the viewer's replay contract)
  a, b = UOp.variable("a", 0, 5), UOp.variable("b", 0, 5)
  root = UOp.sink(((a + 0) * (b * 1)) + 0, (a * 1) + (b + 0))
  out = graph_rewrite(root, fold_add0 + mul1, name="replay me", bottom_up=True)
  recorder.disable()
  recs = _records(trace)
  built: dict[int, UOp] = {}
  for r in recs:
    if r["t"] == "node":
      op = Ops[r["op"]]
      arg = None if r["arg"] == "None" else (int(r["arg"]) if op is Ops.CONST else (r["arg"].split("'")[1], 0, 5))
      built[r["id"]] = UOp(op, dtypes.by_name(r["dtype"]) if r["dtype"] != "void" else dtypes.void,
                           tuple(built[s] for s in r["src"]), arg)
  begin = next(r for r in recs if r["t"] == "rw_begin")
  g = built[begin["root"]]
  for m in (r for r in recs if r["t"] == "match"):
    g = g.substitute({built[m["before"]]: built[m["after"]]})
  assert g is out


def test_raising_rule_is_recorded_and_propagates(trace):
  def bad(x):
    raise ZeroDivisionError("rule blew up")
  pm = PatternMatcher([(UPat(Ops.ADD, name="x"), bad)])
  with pytest.raises(ZeroDivisionError):
    graph_rewrite(_expr(1), pm, name="explodes")
  recorder.disable()
  recs = _records(trace)
  m = next(r for r in recs if r["t"] == "match")
  assert m["after"] is None and "rule blew up" in m["error"]
  end = next(r for r in recs if r["t"] == "rw_end")
  assert "ZeroDivisionError" in end["error"] and end["root"] is None


def test_contexts_nest_and_errors_close_them(trace):
  with recorder.trace_context("outer", kind="schedule"):
    with pytest.raises(ValueError):
      with recorder.trace_context("inner", kind="kernel"):
        recorder.record("run", kname="inner", times=[0.1], min=0.1, median=0.1, flops=1, bytes=4, gflops=0.0,
                        gbs=0.0)
        raise ValueError("kernel failed")
    track_graph(_expr(2), "View Base AST")
  recorder.disable()
  recs = _records(trace)
  begins = {r["name"]: r for r in recs if r["t"] == "ctx_begin"}
  assert begins["inner"]["parent"] == begins["outer"]["id"]
  ends = {r["id"]: r for r in recs if r["t"] == "ctx_end"}
  assert "kernel failed" in ends[begins["inner"]["id"]]["error"]
  run = next(r for r in recs if r["t"] == "run")
  assert run["ctx"] == begins["inner"]["id"]
  snap = next(r for r in recs if r["t"] == "rw_begin")
  assert snap["name"] == "View Base AST" and snap["ctx"] == begins["outer"]["id"]


SCRIPT = textwrap.dedent("""
  import json, sys
  from compiler import Ops, PatternMatcher, UOp, UPat, graph_rewrite
  from compiler.trace import trace_context
  pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), lambda x: x)])
  matches = rewrites = 0
  for k in range(5):
    with trace_context(f"kernel {k}", kind="kernel"):
      x = UOp.variable(f"v{k}", 0, 9)
      for _ in range(k + 1):
        x = x + 0
      graph_rewrite(x, pm, name="fold")
      rewrites += 1; matches += k + 1
  print(json.dumps({"matches": matches, "rewrites": rewrites, "contexts": 5}))  # (the empty root is not counted)
""")


@pytest.mark.parametrize("viz", ["-1"])
def test_script_with_viz_writes_trace_that_info_counts(tmp_path, viz):
  path = tmp_path / "run.vztrace"
  env = {**os.environ, "VIZ": viz, "VIZ_TRACE": str(path), "PYTHONPATH": str(ROOT)}
  p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr
  expected = json.loads(p.stdout)
  assert p.stderr.count(str(path)) == 1  # the path is announced once
  info = subprocess.run([sys.executable, "-m", "compiler.trace", "info", "--json", str(path)], env=env,
                        capture_output=True, text=True, timeout=120)
  assert info.returncode == 0, info.stderr
  got = json.loads(info.stdout)
  assert got["matches"] == expected["matches"]
  assert got["rewrites"] == expected["rewrites"]
  assert got["contexts"] == expected["contexts"]
  assert got["bytes"] == path.stat().st_size
  assert got["nodes"] > 0


def test_import_alone_writes_no_trace(tmp_path):
  env = {**os.environ, "VIZ": "-1", "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
  p = subprocess.run([sys.executable, "-c", "import compiler"], env=env, capture_output=True, text=True, timeout=60)
  assert p.returncode == 0 and p.stderr == "", p.stderr
  assert list(tmp_path.rglob("*.vztrace")) == []


def test_default_trace_path_is_per_user_cache(tmp_path):
  env = {**os.environ, "VIZ": "-1", "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
  env.pop("VIZ_TRACE", None)
  script = "import compiler.rewrite as r\nr.track_graph(r.UOp.variable('a', 0, 1), 'snapshot')"
  p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
  assert p.returncode == 0, p.stderr
  files = list((tmp_path / "cache" / "tinyviz" / "traces").glob("trace-*.vztrace"))
  assert len(files) == 1 and str(files[0]) in p.stderr
  assert _records(files[0])[-1]["t"] == "end"


def _normalized(path: Path) -> list[dict]:
  """The records without what differs run to run (times, process), in the order the format keeps (the background
  flush may fall anywhere)."""
  return promised_order(_records(path))


def _big_rewrite(tag: str) -> UOp:
  xs = [UOp.variable(f"{tag}{i}", 0, 10) for i in range(40)]
  out = graph_rewrite(UOp.sink(*[(x + 0) * 1 + 0 for x in xs]), fold_add0 + mul1, name="many")
  with recorder.trace_context("k", kind="kernel"):
    recorder.record("run", kname="k", times=[1.0], min=1.0, median=1.0, flops=1, bytes=4, gflops=0.0, gbs=0.0)
  return graph_rewrite(out, fold_add0, name="again")


def test_node_texts_keep_their_spelling(trace):
  consts = [UOp(Ops.CONST, dtypes.int, (), 1), UOp(Ops.CONST, dtypes.float, (), 1.0),
            UOp(Ops.CONST, dtypes.bool, (), True), UOp(Ops.CONST, dtypes.float, (), -0.0),
            UOp(Ops.CONST, dtypes.float, (), 0.0), UOp(Ops.CONST, dtypes.float, (), float("nan"))]
  red = UOp(Ops.REDUCE, dtypes.float, (consts[1],), Ops.ADD)  # an op as an arg: "Ops.ADD", while its op is "REDUCE"
  tup = [UOp(Ops.DEFINE_VAR, dtypes.int, (), ("a", 1, 2)), UOp(Ops.DEFINE_VAR, dtypes.float, (), ("a", 1.0, 2))]
  track_graph(UOp.sink(*consts, red, *tup), "snapshot")
  recorder.disable()
  nodes = [r for r in _records(trace) if r["t"] == "node"]
  args = [n["arg"] for n in nodes if n["op"] in ("CONST", "DEFINE_VAR")]
  assert args == ["1", "1.0", "True", "-0.0", "0.0", "nan", "('a', 1, 2)", "('a', 1.0, 2)"]
  assert [(n["op"], n["dtype"], n["arg"]) for n in nodes if n["op"] == "REDUCE"] == [("REDUCE", "float32", "Ops.ADD")]


def test_deep_graph_is_recorded_sources_first(trace):
  x = UOp.variable("x", 0, 10)
  for i in range(3 * sys.getrecursionlimit()):  # deeper than recursion goes
    x = UOp(Ops.ADD, dtypes.int, (x, UOp.const(dtypes.int, i % 7)))
  track_graph(x, "deep")
  recorder.disable()
  recs = _records(trace)
  seen: set[int] = set()
  for r in (r for r in recs if r["t"] == "node"):
    assert set(r["src"]) <= seen and r["id"] == len(seen)
    seen.add(r["id"])
  assert len(seen) == 1 + 7 + 3 * sys.getrecursionlimit()
  assert next(r for r in recs if r["t"] == "rw_end")["root"] == len(seen) - 1


def test_small_batches_and_compaction_write_the_same_trace(tmp_path, monkeypatch):
  paths = []
  for name, batch_nodes, compact_at in (("big", recorder.BATCH_ROWS, recorder.COMPACT_AT), ("small", 3, 2)):
    monkeypatch.setattr(recorder, "BATCH_ROWS", batch_nodes)
    monkeypatch.setattr(recorder, "COMPACT_AT", compact_at)
    paths.append(tmp_path / f"{name}.vztrace")
    recorder.enable(paths[-1], announce=False)
    _big_rewrite("a")
    recorder.RECORDER.writer.flush()  # a flush between records: the small run compacts its drained rows
    _big_rewrite("b")
    _big_rewrite("a")
    recorder.disable()
  sizes: list[tuple[int, int]] = []
  expand = TraceReader._expand

  def spy(self, batch):
    out = expand(self, batch)
    sizes.append((sum(r["t"] == "node" for r in out), sum(r["t"] == "match" for r in out)))
    return out

  monkeypatch.setattr(TraceReader, "_expand", spy)
  big, small = (_normalized(p) for p in paths)
  assert big == small and sum(r["t"] == "node" for r in big) > 100
  assert max(max(n, m) for n, m in sizes[-len(sizes) // 2:]) <= 3  # the small run's batches (read last)
  frames = [TraceReader(p) for p in paths]
  for r in frames:
    list(r)
  assert frames[1].frames >= frames[0].frames


def test_flush_inside_a_rewrite_keeps_nodes_before_their_users(tmp_path):
  flushed: list[list[dict]] = []

  def flush_and_fold(x):
    recorder.RECORDER.writer.flush()  # what the background thread may do at any moment
    flushed.append(live.poll())
    return x

  pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), flush_and_fold)])
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  live = TraceReader(path)
  out = graph_rewrite(_expr(12), pm, name="flushy")
  recorder.disable()
  recs = _records(path)
  assert [r for batch in flushed for r in batch] == recs[:sum(map(len, flushed))]  # polls read a prefix
  assert len([b for b in flushed if any(r["t"] == "match" for r in b)]) > 1  # matches arrived in several flushes
  seen: set[int] = set()
  for r in recs:
    if r["t"] == "node":
      seen.add(r["id"])
    elif r["t"] == "match":
      assert {r["before"], r["after"]} <= seen
  nodes = {r["id"]: r for r in recs if r["t"] == "node"}
  root = nodes[next(r for r in recs if r["t"] == "rw_end")["root"]]
  assert (root["op"], out.op) == ("MUL", Ops.MUL) and nodes[root["src"][0]]["op"] == "MUL"  # x*1*1... once folded


def test_rule_returning_a_non_uop_is_a_type_error_while_tracing(trace):
  pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: 5)], name="bad")
  with pytest.raises(TypeError, match="returned int, not a UOp"):
    graph_rewrite(_expr(1), pm)
  recorder.disable()
  end = next(r for r in _records(trace) if r["t"] == "rw_end")
  assert "TypeError" in end["error"]


def test_odd_values_in_records_are_coerced_one_record_at_a_time(trace):
  np = pytest.importorskip("numpy")
  recorder.record("run", kname="k", times=[float("inf"), 1.0], min=np.float32(0.5), median=float("nan"), flops=1,
                  bytes=np.int64(4), gflops=0.0, gbs=0.0)
  track_graph(_expr(2), "snapshot")
  recorder.disable()
  recs = _records(trace)
  run = next(r for r in recs if r["t"] == "run")
  assert (run["times"], run["min"], run["median"], run["bytes"]) == ([None, 1.0], 0.5, None, 4)
  assert [r["t"] for r in recs if r["t"] in ("rw_begin", "rw_end")] == ["rw_begin", "rw_end"]


@pytest.mark.parametrize("flush_at", [8, 1 << 40])
def test_recording_thread_flushes_when_the_background_thread_does_not(tmp_path, monkeypatch, flush_at):
  from vztrace import writer
  monkeypatch.setattr(writer.TraceWriter, "_run", lambda self: None)  # no background flushes (a forked child)
  monkeypatch.setattr(recorder, "FLUSH_AT", flush_at)
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  live = TraceReader(path)
  _big_rewrite("c")
  got = live.poll()
  recorder.disable()
  assert (len(got) > 0) == (flush_at == 8)
  assert got == _records(path)[:len(got)]


def test_where_a_flush_falls_changes_only_what_the_format_leaves_open(tmp_path):
  # the comparison the recorder tests use (promised_order) must see two recordings of one program as equal however
  # their flushes fell, and the raw record order must not be: otherwise those tests would depend on flush timing
  flushing = [False]

  def fold(x):
    if flushing[0]:
      recorder.RECORDER.writer.flush()  # what the background thread may do at any moment
    return x

  pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), fold)], name="fold")
  runs = []
  for flushing[0] in (False, True):
    path = tmp_path / f"{flushing[0]}.vztrace"
    recorder.enable(path, announce=False)
    recorder.RECORDER.writer.flush_interval = 3600.0  # no timed flush: the only ones are the rule's
    graph_rewrite(_expr(12), pm, name="fold")
    recorder.disable()
    runs.append(_records(path))
  raw = [[{k: v for k, v in r.items() if k not in RUN_TO_RUN} for r in rs] for rs in runs]
  assert raw[0] != raw[1]  # the rule's flushes moved nodes past matches
  assert promised_order(runs[0]) == promised_order(runs[1])


def test_a_rules_texts_are_read_by_the_flush_not_by_the_rewrite(trace, monkeypatch):
  # reading a rule's source (inspect, tokenize) was a third of what recording cost the compiling thread; the
  # pattern record is queued without its texts and the flush (the writer's thread, or a flush() call) fills them in
  from compiler.rewrite import Rule
  monkeypatch.setattr(recorder, "_RULE_INFO", {})
  reads, rewriting = [], [False]
  real = Rule.source
  monkeypatch.setattr(Rule, "source", property(lambda r: reads.append((threading.get_ident(), rewriting[0])) or
                                               real.fget(r)))
  pm = fold_add0 + mul1
  for n in (4, 5):  # the second rewrite meets both rules again
    rewriting[0] = True
    graph_rewrite(_expr(n), pm, name=f"rewrite {n}")
    rewriting[0] = False
    recorder.RECORDER.writer.flush()
  recorder.disable()
  assert (threading.get_ident(), True) not in reads  # not by the recording thread while it rewrote
  assert len(reads) == 2  # once per rule
  patterns = {r["src"]: r for r in _records(trace) if r["t"] == "pattern"}
  assert len(patterns) == 2
  for rule in pm.rules:
    p = patterns[real.fget(rule)]
    assert p == {"t": "pattern", "id": p["id"], "file": rule.location[0], "line": rule.location[1], "src": p["src"],
                 "pat": repr(rule.pat), "name": rule.name}


def test_a_rule_whose_texts_fail_is_written_saying_so(trace, monkeypatch):
  from compiler.rewrite import Rule
  monkeypatch.setattr(recorder, "_RULE_INFO", {})
  monkeypatch.setattr(Rule, "source", property(lambda r: 1 / 0))
  graph_rewrite(_expr(2), fold_add0, name="no source")
  recorder.disable()
  recs = _records(trace)
  (p,) = [r for r in recs if r["t"] == "pattern"]
  assert p["src"].startswith("# source not available: ZeroDivisionError") and p["pat"] == repr(fold_add0.rules[0].pat)
  assert recs[-1]["t"] == "end"  # the flush went on
