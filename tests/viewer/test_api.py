"""The JSON API over real recorder traces (Flask test client): shapes, deltas, diffs, kernels, errors, security."""
import html
import io
import json
import math
import random
import re

import pytest
from support.server_helpers import XSS, apply_delta, mini, rand_expr, recording, write_kernel_trace, write_rewrites

from compiler import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from compiler.trace import recorder
from viz_server.app import REPO_ROOT, create_app, package_dir
from vztrace.writer import TraceWriter


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
  d = tmp_path_factory.mktemp("traces")
  write_kernel_trace(d / "k.vztrace")
  write_kernel_trace(d / "evil.vztrace", evil=True)
  rng = random.Random(3)
  write_rewrites(d / "r.vztrace", [rand_expr(rng, 70, width=6) for _ in range(4)])
  return d


@pytest.fixture(scope="module")
def client(traces):
  app = create_app([traces / "k.vztrace", traces / "evil.vztrace", traces / "r.vztrace"], follow=False)
  return app.test_client()


def _get(client, url, status=200):
  r = client.get(url)
  assert r.status_code == status, (url, r.status_code, r.data[:300])
  assert r.mimetype == "application/json"
  return r.get_json()


def _biggest_rewrite(client, t=2):
  ctxs = _get(client, f"/api/traces/{t}/contexts")
  return max((rw for c in ctxs for rw in c["rewrites"]), key=lambda rw: rw["matches"])


def test_traces_and_contexts(client):
  ts = _get(client, "/api/traces")
  assert [t["name"] for t in ts] == ["k.vztrace", "evil.vztrace", "r.vztrace"]
  k = ts[0]
  assert k["status"] == "ended" and k["damage"] is None and k["counts"]["kernels"] == 1 and k["counts"]["runs"] == 2
  assert k["meta"]["argv"] and k["counts"]["matches"] > 0
  ctxs = _get(client, "/api/traces/0/contexts")
  assert [c["name"] for c in ctxs] == ["default", "schedule 1", "r_4_4"]
  assert [c["parent"] for c in ctxs] == [None, 0, 0] and all(c["ended"] for c in ctxs)
  kern = ctxs[2]
  assert kern["kind"] == "kernel" and kern["shape_colors"][0] == ["4", "blue"] and ctxs[1]["shape_colors"] is None
  (rw,) = kern["rewrites"]
  assert rw["name"] == "simplify" and rw["matches"] >= 3 and rw["changed"] is True and rw["dt"] > 0
  assert rw["file"].endswith("server_helpers.py") and isinstance(rw["line"], int)


def test_rewrite_steps_and_graph_at_each_step(client):
  rw = _biggest_rewrite(client)
  info = _get(client, f"/api/traces/2/rewrites/{rw['id']}")
  assert len(info["steps"]) == rw["matches"] and [s["k"] for s in info["steps"]] == list(range(1, rw["matches"] + 1))
  prev, prev_g = None, None
  born: dict[int, int] = {}  # node -> the step that last brought it into the graph
  for k in range(rw["matches"] + 1):
    g = _get(client, f"/api/traces/2/rewrites/{rw['id']}/graph?step={k}")
    ids = {n["id"] for n in g["nodes"]}
    for n in ids - (prev or set()):
      born[n] = k
    assert {n["id"]: n["created"] for n in g["nodes"]} == {n: born[n] for n in ids}
    assert g["step"] == k and len(ids) == len(g["nodes"]) > 0
    for n in g["nodes"]:  # the layout placed every node, inside the drawing
      assert all(math.isfinite(n[c]) for c in ("x", "y", "w", "h"))
      assert 0 <= n["x"] - n["w"] / 2 + 0.2 and n["x"] + n["w"] / 2 <= g["width"] + 0.2
      assert n["label"].startswith(n["op"]) and n["cat"] in ("const", "alu", "sink", "other")
      assert set(n["consts"]) <= set(n["src"])
    assert len({(n["x"], n["y"]) for n in g["nodes"]}) == len(ids)
    assert {(e["src"], e["dst"], e["index"]) for e in g["edges"]} == {
      (s, n["id"], i) for n in g["nodes"] for i, s in enumerate(n["src"])}
    assert all(len(e["points"]) >= 2 for e in g["edges"])
    if k == 0:
      assert g["match"] is None and g["added"] == g["removed"] == g["removed_nodes"] == g["removed_edges"] == []
    else:
      m = g["match"]
      assert m["k"] == k and m["rule"]["file"].endswith("server_helpers.py") and m["before"] >= 0
      assert set(g["removed"]) == prev - ids and set(g["added"]) | set(g["changed"]) == ids - prev
      # what the step removed, as it was drawn at step k-1 (so a view opened at step k can fade it out)
      gone = set(g["removed"])
      assert prev_g is not None and g["removed_nodes"] == [n for n in prev_g["nodes"] if n["id"] in gone]
      assert sorted(g["removed_edges"], key=lambda e: (e["dst"], e["index"])) == sorted(
        (e for e in prev_g["edges"] if e["dst"] in gone), key=lambda e: (e["dst"], e["index"]))
    prev, prev_g = ids, g
  end = _get(client, f"/api/traces/2/rewrites/{rw['id']}/graph?step=end")
  assert end["step"] == rw["matches"]


@pytest.mark.parametrize("compact", [False, True])
def test_delta_turns_one_step_into_another(client, compact):
  rw = _biggest_rewrite(client)
  base = f"/api/traces/2/rewrites/{rw['id']}"
  n = rw["matches"]
  pairs = [(k - 1, k) for k in range(1, n + 1)] + [(n, 0), (0, n), (n // 2, 1), (3, 3)]
  full_bytes, delta_bytes = [], []
  for j, k in pairs:
    gj = _get(client, f"{base}/graph?step={j}")
    gk = _get(client, f"{base}/graph?step={k}")
    d = _get(client, f"{base}/delta?from={j}&to={k}&compact={int(compact)}")
    nodes, edges = apply_delta(gj, d)
    assert nodes == {x["id"]: x for x in gk["nodes"]}
    assert edges == {(e["src"], e["dst"], e["index"]): e for e in gk["edges"]}
    assert (d["width"], d["height"], d["added"], d["match"]) == (gk["width"], gk["height"], gk["added"], gk["match"])
    if k == j + 1:
      full_bytes.append(len(client.get(f"{base}/graph?step={k}").data))
      delta_bytes.append(len(client.get(f"{base}/delta?from={j}&to={k}&compact={int(compact)}").data))
  if compact:  # this rewrite rebuilds most of its (deep) graph at every step: compact deltas still pay off
    assert sum(delta_bytes) < sum(full_bytes) / 2


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
  """A real compile: the scheduler's and codegen's passes rebuild nodes with more sources than they had."""
  import numpy as np

  from compiler.tensor import Tensor
  path = tmp_path_factory.mktemp("compiled") / "c.vztrace"
  with recording(path):
    x = Tensor(np.arange(256, dtype=np.float32).reshape(16, 16))
    ((x * 2 + 1).sum(axis=1).softmax()).numpy()
  return create_app([path], follow=False).test_client()


@pytest.mark.parametrize("compact", [False, True])
def test_every_step_of_a_real_compile_has_a_delta_that_gives_the_next_graph(compiled, compact):
  n = 0
  for ctx in _get(compiled, "/api/traces/0/contexts"):
    for rw in ctx["rewrites"]:
      base = f"/api/traces/0/rewrites/{rw['id']}"
      for k in range(1, rw["matches"] + 1):
        d = _get(compiled, f"{base}/delta?from={k - 1}&to={k}&compact={int(compact)}")
        gk = _get(compiled, f"{base}/graph?step={k}")
        nodes, edges = apply_delta(_get(compiled, f"{base}/graph?step={k - 1}"), d)
        assert nodes == {x["id"]: x for x in gk["nodes"]}, (rw["name"], k)
        assert edges == {(e["src"], e["dst"], e["index"]): e for e in gk["edges"]}, (rw["name"], k)
        n += 1
  assert n > 50


def test_patterns_and_nodes(client):
  rw = _biggest_rewrite(client)
  step = _get(client, f"/api/traces/2/rewrites/{rw['id']}")["steps"][0]
  p = _get(client, f"/api/traces/2/patterns/{step['pattern']}")
  assert "UPat" in p["src"] and p["file"].endswith("server_helpers.py") and p["name"]
  assert '<span class="' in p["html"] and "UPat" in p["html"]
  node = _get(client, f"/api/traces/2/nodes/{step['before']}")
  assert node["id"] == step["before"] and node["op"] in ("ADD", "MUL") and len(node["src"]) == 2
  assert node["label"].startswith(node["op"])


def test_diff_between_steps_kernels_and_traces(client):
  rw = _biggest_rewrite(client)
  d = _get(client, f"/api/diff?a=2:{rw['id']}:0&b=2:{rw['id']}:end")
  kinds = {ln["kind"] for ln in d["lines"]}
  assert {"+", "-", "@"} <= kinds and d["text"].startswith("---")
  assert d["graph"]["only_a"] and d["graph"]["both"] > 0
  assert all({"id", "op", "dtype", "arg", "hash"} <= set(n) for n in d["graph"]["only_a"])
  same = _get(client, f"/api/diff?a=2:{rw['id']}:end&b=2:{rw['id']}:{rw['matches']}")
  assert same["text"] == "" and same["graph"]["only_a"] == same["graph"]["only_b"] == []
  # the same kernel recorded in two traces: identical structure except the hostile variable name
  kd = _get(client, "/api/diff?a=0:2&b=1:2")
  assert kd["graph"]["both"] == 3 and [n["op"] for n in kd["graph"]["only_b"]] == ["DEFINE_VAR", "ADD"]
  assert [ln["kind"] for ln in kd["lines"]] == ["@", "-", "+", " ", " ", " ", "-", "+"]
  assert XSS[1] in kd["lines"][2]["text"]
  one = _get(client, f"/api/diff?a=2:{rw['id']}:0&b=2:{rw['id']}:1")
  step1 = _get(client, f"/api/traces/2/rewrites/{rw['id']}/graph?step=1")
  assert len(one["graph"]["only_a"]) == len(step1["removed"])
  assert len(one["graph"]["only_b"]) == len(step1["added"]) + len(step1["changed"])
  for kind, side in (("-", "only_a"), ("+", "only_b")):  # every node only on one side is a line on that side
    assert {n["hash"] for n in one["graph"][side]} <= {ln["text"][:8] for ln in one["lines"] if ln["kind"] == kind}


@pytest.mark.parametrize("a,b", [("2:{r}:0", "2:{r}:end"), ("2:{r}:end", "2:{r}:1"), ("0:2", "1:2"),
                                 ("1:2", "2:{r}:3")])
def test_diff_drawn_union(client, a, b):
  rw = _biggest_rewrite(client)
  a, b = a.format(r=rw["id"]), b.format(r=rw["id"])
  assert "drawn" not in _get(client, f"/api/diff?a={a}&b={b}")["graph"]
  g = _get(client, f"/api/diff?a={a}&b={b}&draw=1")["graph"]
  drawn = g["drawn"]
  ids = [n["id"] for n in drawn["nodes"]]
  assert len(ids) == len(set(ids)) and drawn["width"] > 0 and drawn["height"] > 0
  side = {s: [n for n in drawn["nodes"] if n["side"] == s] for s in ("a", "b", "both")}
  assert len(side["a"]) + len(side["b"]) + len(side["both"]) == len(ids)
  # the drawn sides are the API's sets: only_a / only_b by node and hash, both by hash
  assert [n["node"] for n in side["a"]] == [n["id"] for n in g["only_a"]]
  assert [(n["node"], n["hash"]) for n in side["b"]] == [(n["id"], n["hash"]) for n in g["only_b"]]
  assert len({n["hash"] for n in side["both"]}) == g["both"]
  assert all(n["node"] == n["id"] for n in side["b"] + side["both"])
  if b.count(":") == 2:  # B's nodes are exactly the graph of that step
    t, r, k = b.split(":")
    want = {n["id"] for n in _get(client, f"/api/traces/{t}/rewrites/{r}/graph?step={k}")["nodes"]}
    assert {n["node"] for n in side["b"] + side["both"]} == want
  by_id = {n["id"]: n for n in drawn["nodes"]}
  for e in drawn["edges"]:
    assert by_id[e["dst"]]["src"][e["index"]] == e["src"] and e["src"] in by_id and len(e["points"]) >= 2
    assert by_id[e["src"]]["y"] < by_id[e["dst"]]["y"]  # sources above users, A-only nodes included
  assert sum(len(n["src"]) for n in drawn["nodes"]) == len(drawn["edges"])


@pytest.mark.parametrize("query,status", [("a=0:9:0&b=0:0:0", 404), ("a=0:0&b=0:99", 404), ("a=x&b=0:0:0", 400),
                                          ("a=0:0:0", 400), ("a=0:0:0&b=0:0:999", 404), ("a=7:0:0&b=0:0:0", 404),
                                          ("a=0:1:2:3&b=0:0:0", 400)])
def test_diff_errors(client, query, status):
  err = _get(client, f"/api/diff?{query}", status)
  assert isinstance(err["error"], str) and err["error"]


def test_kernels_and_runs(client):
  (k,) = _get(client, "/api/traces/0/kernels")
  assert k["name"] == "r_4_4" and [o["op"] for o in k["opts"]] == ["UPCAST", "LOCAL"] and k["n_beam"] == 1
  assert k["sources"] == ["llvm_ir", "asm"] and k["run"]["kname"] == "r_4_4"
  detail = _get(client, f"/api/traces/0/contexts/{k['ctx']}/kernel")
  assert detail["opts"][1] == {"op": "LOCAL", "axis": 1, "arg": 8, "ok": False, "reason": "axis too small",
                               "shape": [4, 4], "colors": ["blue", "yellow"], "kname": "r_4_4"}
  assert detail["beam"] == [{"round": 0, "opts": [["UPCAST", 0, 4]], "time": 1.5e-5, "error": None, "chosen": True}]
  llvm = detail["sources"][0]
  assert llvm["kind"] == "llvm_ir" and "define" in llvm["text"] and '<span class="k">define</span>' in llvm["html"]
  # ?html=0 (the export, which shows plain text): the same answer without the highlighting
  plain = _get(client, f"/api/traces/0/contexts/{k['ctx']}/kernel?html=0")
  assert plain == {**detail, "sources": [{**src, "html": None} for src in detail["sources"]]}
  (run,) = _get(client, "/api/traces/0/runs")
  assert run["times"] == [1e-5, 2e-5] and run["gflops"] == 3.2 and run["ctx"] == k["ctx"]


def test_hostile_strings_are_plain_in_json_and_escaped_in_html(client):
  (k,) = _get(client, "/api/traces/1/kernels")
  assert k["name"] == XSS[0] and k["run"]["kname"] == XSS[0]
  detail = _get(client, f"/api/traces/1/contexts/{k['ctx']}/kernel")
  assert detail["sources"][0]["text"] == XSS[2] + "\n" + XSS[0]
  for src in detail["sources"]:
    # the only markup is the highlighter's spans; the text between them is the source, escaped
    tags = set(re.findall(r"<[^>]*>", src["html"]))
    assert tags <= {"</span>"} | set(re.findall(r'<span class="[\w ]+">', src["html"]))
    assert html.unescape(re.sub(r"<[^>]*>", "", src["html"])).rstrip("\n") == src["text"]
  p = _get(client, "/api/traces/1/patterns/0")
  assert html.unescape(re.sub(r"<[^>]*>", "", p["html"])).rstrip("\n") == p["src"]
  ctxs = _get(client, "/api/traces/1/contexts")
  rw = ctxs[2]["rewrites"][0]
  g = _get(client, f"/api/traces/1/rewrites/{rw['id']}/graph")
  var = [n for n in g["nodes"] if n["op"] == "DEFINE_VAR"][0]
  assert XSS[1] in var["arg"] and XSS[1] in var["label"]
  raw = client.get(f"/api/traces/1/rewrites/{rw['id']}/graph").data.decode()
  assert json.loads(raw) == g  # plain JSON strings, nothing rewritten


@pytest.mark.parametrize("url,status", [
  ("/api/traces/9/contexts", 404), ("/api/traces/0/rewrites/999", 404),
  ("/api/traces/0/rewrites/0/graph?step=999", 404),
  ("/api/traces/0/rewrites/0/graph?step=x", 400), ("/api/traces/0/rewrites/0/graph?step=-1", 400),
  ("/api/traces/0/rewrites/0/delta?from=0", 400), ("/api/traces/0/patterns/999", 404),
  ("/api/traces/0/nodes/99999", 404), ("/api/traces/0/contexts/99/kernel", 404), ("/api/nope", 404),
  ("/api/traces/-1/contexts", 404), ("/api/traces/0/../../etc/passwd", 404)])
def test_errors_are_json_with_a_message(client, url, status):
  err = _get(client, url, status)
  assert isinstance(err["error"], str) and err["error"]


def test_wrong_method_is_json(client):
  r = client.delete("/api/traces")
  assert r.status_code == 405 and r.get_json()["error"]


def test_upload(traces, tmp_path):
  app = create_app([], follow=False, max_upload=4096)
  c = app.test_client()
  data = (traces / "k.vztrace").read_bytes()
  big = len(data) > 4096
  r = c.post("/api/traces", data={"file": (io.BytesIO(data), "mine.vztrace")}, content_type="multipart/form-data")
  if big:
    assert r.status_code == 413
    app = create_app([], follow=False)
    c = app.test_client()
    r = c.post("/api/traces", data={"file": (io.BytesIO(data), "mine.vztrace")}, content_type="multipart/form-data")
  assert r.status_code == 201 and r.get_json()["name"] == "mine.vztrace" and r.get_json()["status"] == "ended"
  assert [t["name"] for t in c.get("/api/traces").get_json()] == ["mine.vztrace"]
  r = c.post("/api/traces", data={"file": (io.BytesIO(b"GIF89a..."), "x.vztrace")}, content_type="multipart/form-data")
  assert r.status_code == 400 and "not a trace" in r.get_json()["error"]
  r = c.post("/api/traces", data={"other": (io.BytesIO(data), "x")}, content_type="multipart/form-data")
  assert r.status_code == 400
  r = c.post("/api/traces", data={"file": (io.BytesIO(data), "x")}, content_type="multipart/form-data",
             headers={"Origin": "https://evil.example"})
  assert r.status_code == 403
  small = create_app([], follow=False, max_upload=1000).test_client()
  r = small.post("/api/traces", data={"file": (io.BytesIO(b"\0" * 5000), "x")}, content_type="multipart/form-data")
  assert r.status_code == 413 and "too large" in r.get_json()["error"]


def test_follow_is_for_local_json_requests_naming_trace_files(traces, tmp_path):
  app = create_app([], follow=False)
  c = app.test_client()
  path = str(traces / "r.vztrace")
  # a server not started by the CLI has no control token: it takes no control requests at all
  assert c.post("/api/traces/follow", json={"path": path}).status_code == 404
  app.extensions["tinyviz"]["control_token"] = "s3cret-token"
  tok = {"X-Tinyviz-Token": "s3cret-token"}
  for bad in ({}, {"X-Tinyviz-Token": "wrong"}, {"X-Tinyviz-Token": ""}):  # another local user knows no token
    r = c.post("/api/traces/follow", json={"path": path}, headers=bad)
    assert r.status_code == 403 and "token" in r.get_json()["error"]
  assert c.get("/api/traces").get_json() == []
  ok = c.post("/api/traces/follow", json={"path": path}, headers=tok)
  assert ok.status_code == 200 and ok.get_json()["name"] == "r.vztrace"
  again = c.post("/api/traces/follow", json={"path": path}, headers=tok)
  assert again.get_json()["id"] == ok.get_json()["id"]  # the same file is served once
  assert c.post("/api/traces/follow", data=json.dumps({"path": path}), content_type="text/plain",
                headers=tok).status_code == 400
  assert c.post("/api/traces/follow", json={"path": path}, headers=tok,
                environ_overrides={"REMOTE_ADDR": "10.1.2.3"}).status_code == 403
  assert c.post("/api/traces/follow", json={"path": path},
                headers={**tok, "Origin": "http://evil.example"}).status_code == 403
  assert c.post("/api/traces/follow", json={"path": "r.vztrace"}, headers=tok).status_code == 400
  assert c.post("/api/traces/follow", json={"path": str(tmp_path / "none.vztrace")}, headers=tok).status_code == 404
  notes = tmp_path / "notes.txt"
  notes.write_text("secret")
  r = c.post("/api/traces/follow", json={"path": str(notes)}, headers=tok)
  assert r.status_code == 400 and "secret" not in r.get_data(as_text=True)
  assert len(c.get("/api/traces").get_json()) == 1
  assert c.post("/api/shutdown", json={}, headers=tok).status_code == 404  # not started by the CLI: nothing to stop


def test_foreign_host_header_is_refused(client):
  r = client.get("/api/traces", headers={"Host": "attacker.example:8000"})
  assert r.status_code == 403
  assert client.get("/api/traces", headers={"Host": "localhost:8000"}).status_code == 200
  assert client.get("/api/traces", headers={"Host": "127.0.0.1:8000"}).status_code == 200


def test_page_static_and_vendor_files(client):
  page = package_dir("templates") / "index.html"
  r = client.get("/")
  assert r.status_code == (200 if page.is_file() else 404)
  vendor = REPO_ROOT / "node_modules" / "socket.io-client" / "dist" / "socket.io.esm.min.js"
  if page.is_file():
    csp = dict(d.strip().split(" ", 1) for d in r.headers["Content-Security-Policy"].split(";"))
    assert r.mimetype == "text/html" and csp["style-src"] == csp["connect-src"] == "'self'"
    # scripts: the page's own files, and boot.js inline by its hash (tests/viewer/test_page_modules.py)
    assert re.fullmatch(r"'self' 'sha256-[A-Za-z0-9+/]{43}='", csp["script-src"])
    assert "unsafe" not in r.headers["Content-Security-Policy"] and csp["frame-ancestors"] == "'none'"
    # the page learns whether the socket.io client is served before it would ask for it
    root = re.search(r"<html [^>]*>", r.get_data(as_text=True)).group(0)
    assert f'data-socketio="{"yes" if vendor.is_file() else "no"}"' in root
  js = sorted(package_dir("static").glob("*.js"))
  if js:
    assert client.get(f"/static/{js[0].name}").status_code == 200
  assert client.get("/static/../pyproject.toml").status_code == 404
  assert client.get("/vendor/socket.io.esm.min.js").status_code == (200 if vendor.is_file() else 404)
  css = client.get("/highlight.css")
  assert css.status_code == 200 and css.mimetype == "text/css" and ".hl" in css.get_data(as_text=True)
  assert client.get("/api/traces").headers["X-Content-Type-Options"] == "nosniff"


def test_page_without_the_socketio_client(traces, tmp_path):
  app = create_app([traces / "k.vztrace"], follow=False, socketio_client=tmp_path / "missing.js")
  c = app.test_client()
  if package_dir("templates").joinpath("index.html").is_file():
    assert '<html lang="en" data-socketio="no">' in c.get("/").get_data(as_text=True)
  assert c.get("/vendor/socket.io.esm.min.js").status_code == 404


def test_live_rewrite_grows_while_served(tmp_path):
  path = tmp_path / "live.vztrace"
  app = create_app([], follow=False)
  st = app.extensions["tinyviz"]["store"]
  c = app.test_client()
  with recording(path) as p:
    x = UOp.variable("x", 0, 10)
    graph_rewrite(((x + 0) * 1) + 0, mini, name="first")
    from compiler.trace import recorder
    recorder.RECORDER.writer.flush()
    st.follow(p)
    (t,) = c.get("/api/traces").get_json()
    assert t["status"] == "live"
    first = c.get(f"/api/traces/{t['id']}/rewrites/0/graph?step=end").get_json()
    graph_rewrite(((x * 1) + 0) * 1, mini, name="second")
  st.poll_once()
  (t,) = c.get("/api/traces").get_json()
  assert t["status"] == "ended" and t["counts"]["rewrites"] == 2
  assert [n["op"] for n in first["nodes"]] == ["DEFINE_VAR"]
  second = c.get(f"/api/traces/{t['id']}/rewrites/1/graph?step=end").get_json()
  assert [n["op"] for n in second["nodes"]] == ["DEFINE_VAR"]


def test_damaged_trace_is_served_and_marked(tmp_path):
  path = tmp_path / "d.vztrace"
  with TraceWriter(path) as w:
    w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 1.0})
    w.flush()
    good = w.bytes
    w.write({"t": "ctx_begin", "id": 1, "parent": 0, "name": "lost", "kind": "default", "ts": 1.0})
  data = bytearray(path.read_bytes())
  data[good + 4] ^= 0x55  # payload length of the second frame
  path.write_bytes(bytes(data))
  c = create_app([path], follow=False).test_client()
  (t,) = c.get("/api/traces").get_json()
  assert t["status"] == "damaged" and t["damage"]["offset"] == good and t["damage"]["reason"]
  assert [ctx["name"] for ctx in c.get("/api/traces/0/contexts").get_json()] == ["default"]


def test_node_origin_names_the_pass_and_step_that_made_it(tmp_path):
  # pass 1 turns x*2+0 into x*2 (step 1) and folds 3+4 (step 2); pass 2 (another context) starts from pass 1's result
  x = UOp.variable("x", 0, 10)
  fold = PatternMatcher([(UPat.var("a") + 0, lambda a: a),
                         (UPat(Ops.ADD, src=(UPat.cvar("c"), UPat.cvar("d"))), lambda c, d: UOp.const(c.dtype, 7))],
                        name="fold")
  mul1 = PatternMatcher([(UPat.var("a") * 1, lambda a: a)], name="mul1")
  path = tmp_path / "o.vztrace"
  with recording(path):
    with recorder.trace_context("first"):
      out = graph_rewrite(UOp.sink(x * 2 + 0, UOp.const(dtypes.int32, 3) + 4), fold, name="pass 1")
    with recorder.trace_context("second"):
      graph_rewrite(UOp.sink(out.src[0] * 1, out.src[1]), mul1, name="pass 2")
  app = create_app([path], follow=False)
  c = app.test_client()
  rws = {r["name"]: {**r, "ctx": ctx["id"]} for ctx in c.get("/api/traces/0/contexts").get_json()
         for r in ctx["rewrites"]}
  p1, p2 = rws["pass 1"], rws["pass 2"]
  g2 = c.get(f"/api/traces/0/rewrites/{p2['id']}/graph?step=0").get_json()
  seven = next(n for n in g2["nodes"] if n["op"] == "CONST" and n["arg"] == "7")
  assert seven["created"] == 0  # in pass 2's input graph
  got = c.get(f"/api/traces/0/nodes/{seven['id']}/origin?before={p2['id']}").get_json()
  steps = c.get(f"/api/traces/0/rewrites/{p1['id']}").get_json()["steps"]
  assert got["rewrite"] == p1["id"] and got["name"] == "pass 1" and got["ctx"] == p1["ctx"]
  assert steps[got["step"] - 1]["after"] == seven["id"] and got["rule"] == "fold: ADD(CONST, CONST)"  # (a lambda)
  # a node that no rewrite made (the program built it) has no origin; unknown nodes are 404
  xid = next(n["id"] for n in g2["nodes"] if n["op"] == "DEFINE_VAR")
  assert c.get(f"/api/traces/0/nodes/{xid}/origin?before={p2['id']}").get_json()["rewrite"] is None
  assert c.get(f"/api/traces/0/nodes/{seven['id']}/origin?before={p1['id']}").get_json()["rewrite"] is None
  assert c.get(f"/api/traces/0/nodes/999999/origin?before={p2['id']}").status_code == 404
  # the search replays rewrites without caching views of them (it must not push the viewed ones out)
  assert list(app.extensions["tinyviz"]["views"]._views) == [(0, p2["id"])]


def _separately(client, t, ctx, rw, step, landing=False):
  """What the page's first view gathers with one request per endpoint, for the view (t, ctx, rw, step); landing (the
  link names no context or rewrite): the summary panel's answer too."""
  return {"traces": _get(client, "/api/traces"), "trace": t, "contexts": _get(client, f"/api/traces/{t}/contexts"),
          "ctx": ctx, "rw": rw, "rewrite": _get(client, f"/api/traces/{t}/rewrites/{rw}"), "step": step,
          "graph": _get(client, f"/api/traces/{t}/rewrites/{rw}/graph?step={step}"),
          "metrics": _get(client, "/api/metrics"),
          "summary": _get(client, f"/api/traces/{t}/summary") if landing else None}


@pytest.fixture(scope="module")
def boot_client(tmp_path_factory):
  """A trace whose first context has no rewrite, whose second starts with a rewrite that changed nothing."""
  d = tmp_path_factory.mktemp("boot")
  x = UOp.variable("x", 0, 10)
  with recording(d / "b.vztrace"):
    with recorder.trace_context("empty", kind="schedule"):
      pass
    with recorder.trace_context("passes", kind="schedule"):
      graph_rewrite(x * 2, mini, name="nothing")
      graph_rewrite(((x + 0) * 1) + 0, mini, name="something")
  write_rewrites(d / "r.vztrace", [((x + 0) * 1) + 0, (x * 1) * 1])
  return create_app([d / "r.vztrace", d / "b.vztrace"], follow=False).test_client()


def test_boot_resolves_the_default_view_as_the_page_does(boot_client):
  b = _get(boot_client, "/api/boot")
  ctxs = _get(boot_client, "/api/traces/1/contexts")
  assert [c["name"] for c in ctxs][1:] == ["empty", "passes"]
  passes = ctxs[2]
  assert [r["changed"] for r in passes["rewrites"]] == [False, True]
  # the last trace, its first context with rewrites, that context's first rewrite that changed something, step 0
  assert b == _separately(boot_client, 1, passes["id"], passes["rewrites"][1]["id"], 0, landing=True)
  assert _get(boot_client, "/api/boot?t=1")["summary"] == b["summary"] is not None


def test_boot_answers_a_deep_link_like_the_separate_endpoints(client):
  rw = _biggest_rewrite(client)
  ctx = _get(client, f"/api/traces/2/rewrites/{rw['id']}")["ctx"]
  b = _get(client, f"/api/boot?t=2&ctx={ctx}&rw={rw['id']}&step=2")
  assert b == _separately(client, 2, ctx, rw["id"], 2)
  # a step past the end is the last step; a rewrite not in the context is the context's default one
  far = _get(client, f"/api/boot?t=2&ctx={ctx}&rw={rw['id']}&step=9999")
  end = _get(client, f"/api/traces/2/rewrites/{rw['id']}/graph?step=end")
  assert far["step"] == rw["matches"] and far["graph"] == end
  k = _get(client, "/api/traces/0/contexts")[2]
  other = _get(client, f"/api/boot?t=0&ctx={k['id']}&rw={rw['id']}")
  assert other["rw"] == k["rewrites"][0]["id"] and other["rewrite"]["ctx"] == k["id"]


def test_boot_for_a_trace_not_served_gives_the_default_view(client):
  b = _get(client, "/api/boot?t=99&ctx=2&rw=1&step=3")
  assert b == _get(client, "/api/boot")
  assert b["trace"] == 2 and b["step"] == 0


def test_boot_without_traces(tmp_path):
  c = create_app([], follow=False).test_client()
  assert _get(c, "/api/boot?t=0") == {"traces": [], "trace": None, "contexts": None, "ctx": None, "rw": None,
                                      "rewrite": None, "step": None, "graph": None,
                                      "metrics": _get(c, "/api/metrics"), "summary": None}
