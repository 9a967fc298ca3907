"""Issue 14, item 4: every request on a small hostile file does bounded work and sends a bounded answer. Work is
counted in units (steps replayed, layouts made, nodes laid out), never in seconds."""
from __future__ import annotations

import pytest
from support import hostile_traces as H

from viz_server import api, cut, diff, request_args
from viz_server import store as store_mod
from viz_server.app import create_app


def _app(path):
  app = create_app([path], follow=False)
  return app, app.test_client(), app.extensions["tinyviz"]["views"]


def test_far_steps_of_a_rewrite_with_300k_matches_cost_at_most_max_steps(tmp_path, monkeypatch):
  monkeypatch.setattr(request_args, "MAX_STEPS", 300)
  monkeypatch.setattr(store_mod, "INDEX_FLOOR", 400_000)  # index all its matches (a small file: 1 record a byte)
  path = H.many_matches(tmp_path / "m.vztrace", 300_000)
  assert path.stat().st_size < 64 << 10
  app, c, views = _app(path)
  tr = app.extensions["tinyviz"]["store"].get(0)
  rw = tr.rewrites[0]
  assert c.get("/api/traces/0/rewrites/0/graph?step=299999").status_code == 413
  assert c.get("/api/traces/0/rewrites/0/delta?from=0&to=1000").status_code == 413
  view = views.get(tr, rw)
  assert len(view.replay.roots) == 1 and view.stats == {"full": 0, "derived": 0}  # refused before any work
  end = c.get("/api/traces/0/rewrites/0/graph?step=end")
  assert end.status_code == 200 and end.get_json()["step"] == 300
  assert len(view.replay.roots) - 1 <= 300 and view.stats["full"] + view.stats["derived"] <= 301
  info = c.get("/api/traces/0/rewrites/0")
  assert info.status_code == 200 and len(info.get_json()["steps"]) == 300 and info.get_json()["steps_total"] == 300_000
  assert len(info.data) < 300 * 200


def test_a_100k_node_chain_is_sent_cut_without_laying_it_out_whole(tmp_path):
  path = H.chain(tmp_path / "c.vztrace", 100_000)
  assert path.stat().st_size < 600 << 10
  app, c, views = _app(path)
  res = c.get("/api/traces/0/rewrites/0/graph?step=0")
  assert res.status_code == 200
  g = res.get_json()
  assert g["cut"]["shown"] == len(g["nodes"]) == cut.CUT_NODES and g["cut"]["total"] == 100_000
  first = 100_000 - cut.CUT_NODES
  assert g["cut"]["around"] == [99_999] and {n["id"] for n in g["nodes"]} == set(range(first, 100_000))
  assert g["cut"]["stubs"] == {str(first): [1, 0]}  # the chain goes on below the last one shown
  assert len(res.data) < 600 * cut.CUT_NODES  # bounded by the cut, not by the graph
  tr = app.extensions["tinyviz"]["store"].get(0)
  view = views.get(tr, tr.rewrites[0])
  assert view.stats == {"full": 0, "derived": 0} and view.cuts == 1  # one layout of the cut, none of the whole
  d = c.get("/api/diff?a=0:0:0&b=0:0:end")  # (no match: both are the whole chain) summarized, not refused
  assert d.status_code == 200 and d.get_json()["lines"] == [] and d.get_json()["graph"]["both"] == 100_000
  assert d.get_json()["summary"]["a"] == {"nodes": 100_000, "only": 0, "shown": 0}
  assert c.get("/api/traces/0/nodes/99999").status_code == 200


def test_a_diff_of_a_100k_node_graph_shows_what_changed_and_counts_the_rest(tmp_path):
  path = H.chain_under_sink(tmp_path / "s.vztrace", 100_000)
  assert path.stat().st_size < 600 << 10
  _, c, _ = _app(path)
  for q in ("a=0:0:0&b=0:0:1", "a=0:0:0&b=0:0:end&draw=1"):
    res = c.get(f"/api/diff?{q}")
    assert res.status_code == 200
    d = res.get_json()
    assert d["summary"]["a"] == d["summary"]["b"] == {"nodes": 100_002, "only": 2, "shown": 2}
    assert d["graph"]["both"] == 100_000
    assert sorted(n["op"] for n in d["graph"]["only_a"]) == ["CONST", "SINK"]
    assert [n["arg"] for n in d["graph"]["only_b"] if n["op"] == "CONST"] == ["3"]
    # the two changed nodes and their sources (the chain's top, in both), not the chain
    assert sum(ln["kind"] == "-" for ln in d["lines"]) == 2 and len(d["lines"]) < 10
    assert len(res.data) < 16 << 10
  drawn = d["graph"]["drawn"]
  assert sorted(n["side"] for n in drawn["nodes"]) == ["a", "a", "b", "b", "both"]


def test_a_diff_of_two_big_graphs_that_share_nothing_is_cut_to_the_summary(tmp_path):
  a = H.chain_under_sink(tmp_path / "a.vztrace", 25_000)
  b = H.chain_under_sink(tmp_path / "b.vztrace", 25_000, arg="7")  # every node differs but the CONST 2
  c = create_app([a, b], follow=False).test_client()
  res = c.get("/api/diff?a=0:0:0&b=1:0:0&draw=1")
  assert res.status_code == 200
  d = res.get_json()
  shown = diff.SUMMARY_NODES
  assert d["summary"]["a"] == d["summary"]["b"] == {"nodes": 25_002, "only": 25_001, "shown": shown}
  assert len(d["graph"]["only_a"]) == len(d["graph"]["only_b"]) == shown and d["graph"]["both"] == 1
  assert sum(ln["kind"] != "@" for ln in d["lines"]) == 2 * shown + 1  # and the CONST 2, their context
  assert d["graph"]["drawn"] is None  # more than diff.MAX_DRAW_NODES to draw
  assert len(res.data) < 400 * shown


@pytest.mark.parametrize("sources,size", [(8, 2 << 20), (3000, 1 << 10)])
def test_a_kernel_answer_is_cut_to_a_bounded_size(tmp_path, sources, size):
  path = H.big_kernel(tmp_path / "k.vztrace", sources, size)
  _, c, _ = _app(path)
  res = c.get("/api/traces/0/contexts/0/kernel")
  assert res.status_code == 200
  body = res.get_json()
  assert sum(len(s["text"]) for s in body["sources"]) <= api.MAX_KERNEL_CHARS
  assert all(len(s["text"]) <= api.MAX_SOURCE_CHARS and s["chars"] == size for s in body["sources"])
  assert any(s["truncated"] for s in body["sources"])
  assert len(res.data) < 40 * api.MAX_KERNEL_CHARS  # text + its highlighted html, not sources * size


def test_work_stops_when_the_client_goes(tmp_path, monkeypatch):
  """A far step asked for and the connection closed at once: the replay stops soon after, not at step 300,000."""
  import socket
  import threading

  from viz_server import gone
  from viz_server.__main__ import bind
  from viz_server.gate import REQUEST_GATE
  at_work, checks, check = threading.Event(), [], gone.check

  def counted_check() -> None:  # the request's replay asks between two steps: 100 asks, 100 steps replayed
    checks.append(1)
    if len(checks) >= 100:
      at_work.set()
    check()
  monkeypatch.setattr(gone, "check", counted_check)
  monkeypatch.setattr(request_args, "MAX_STEPS", 10 ** 6)
  monkeypatch.setattr(store_mod, "INDEX_FLOOR", 400_000)
  app, _, views = _app(H.many_matches(tmp_path / "m.vztrace", 300_000))
  srv = bind(app, "127.0.0.1", 0)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  try:
    tr = app.extensions["tinyviz"]["store"].get(0)
    with REQUEST_GATE.cv:  # (the gate counts the process's requests: an earlier test's server may still serve one)
      before = REQUEST_GATE.serving
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
      s.sendall(f"GET /api/traces/0/rewrites/0/graph?step=299999 HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n\r\n"
                .encode())
      assert at_work.wait(120), "the request never got to work"
    # the request ends (it would take minutes to finish its 300,000 steps)
    with REQUEST_GATE.cv:
      assert REQUEST_GATE.cv.wait_for(lambda: REQUEST_GATE.serving <= before, 120), \
        "the request went on without its client"
    assert len(views.get(tr, tr.rewrites[0]).replay.roots) < 100_000
  finally:
    srv.shutdown()
    srv.server_close()
