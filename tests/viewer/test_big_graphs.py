"""Issue 14, item 4: a graph too big to lay out whole is answered cut to the nodes around the step's change (with
`cut`), not refused; deltas between cut steps turn one shown graph into the other. The bounds are made small here
(viz_server.cut reads them at call time), so an ordinary trace's graphs are "too big"."""
from __future__ import annotations

import random

import pytest
from support.server_helpers import apply_delta, longest_rewrite, write_noisy_simplify

from viz_server import cut, diff, gone
from viz_server.app import create_app
from viz_server.replay import Replay
from viz_server.stepgraphs import StepGraphs
from viz_server.store import TraceStore

CAP = 200  # the graphs of the rewrite used go from 290 nodes down to about 110: cut first, then whole
SHOWN = 60


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
  path = write_noisy_simplify(tmp_path_factory.mktemp("t") / "t.vztrace")
  (tr,) = TraceStore().add_path(path)
  return path, tr


@pytest.fixture
def small_cap(monkeypatch):
  monkeypatch.setattr(cut, "MAX_GRAPH_NODES", CAP)
  monkeypatch.setattr(cut, "CUT_NODES", SHOWN)


def _edge_map(g):
  return {(e["src"], e["dst"], e["index"]): e for e in g["edges"]}


def test_a_cut_graph_shows_at_most_the_cap_around_the_change(noisy, small_cap):
  _, tr = noisy
  rw = longest_rewrite(tr)
  view = StepGraphs(tr, rw, Replay(tr, rw))
  cut_steps = 0
  for k in range(rw.matches + 1):
    g, total = view.graph(k), view.replay.size(k)
    ids = {n["id"] for n in g["nodes"]}
    if total <= CAP:
      assert "cut" not in g and len(ids) == total
      continue
    cut_steps += 1
    assert g["cut"]["shown"] == len(ids) == SHOWN and g["cut"]["total"] == total
    assert view.replay.root(k) in ids and set(g["cut"]["around"]) <= ids
    info = view.replay.step(k)
    if info is not None and len(info.added) + len(info.changed) < SHOWN:
      assert set(info.added) | set(info.changed) <= ids, k  # what the step did is shown
    assert all(e["src"] in ids and e["dst"] in ids for e in g["edges"])
    members = view.replay.members(k)
    # every edge of the whole graph with an end shown is drawn, or counted in its shown end's stubs
    stubs = {int(n): s for n, s in g["cut"]["stubs"].items()}
    hidden_src = {n: 0 for n in ids}
    hidden_users = {n: 0 for n in ids}
    for n in members:
      for s in view.replay.node(n)[3]:
        if n in ids and s not in ids:
          hidden_src[n] += 1
        elif s in ids and n not in ids:
          hidden_users[s] += 1
    assert stubs == {n: [hidden_src[n], hidden_users[n]] for n in ids if hidden_src[n] or hidden_users[n]}
    assert g["added"] == [n for n in info.added if n in ids] if info is not None else g["added"] == []
  assert cut_steps > 10


@pytest.mark.parametrize("compact", [False, True])
def test_deltas_between_cut_steps_give_the_cut_graphs(noisy, small_cap, compact):
  _, tr = noisy
  rw = longest_rewrite(tr)
  view = StepGraphs(tr, rw, Replay(tr, rw))
  n = rw.matches
  rng = random.Random(7)
  pairs = [(k - 1, k) for k in range(1, n + 1)] + [(k, k - 1) for k in range(n, 0, -1)]
  pairs += [(rng.randint(0, n), rng.randint(0, n)) for _ in range(30)] + [(0, n), (n, 0)]
  graphs = {k: view.graph(k) for k in range(n + 1)}
  assert sum("cut" in g for g in graphs.values()) > 10 and sum("cut" not in g for g in graphs.values()) > 0
  for j, k in pairs:
    d = view.delta(j, k, compact=compact)
    nodes, edges = apply_delta(graphs[j], d)
    assert nodes == {x["id"]: x for x in graphs[k]["nodes"]}, (j, k)
    assert edges == _edge_map(graphs[k]), (j, k)
    assert (d["width"], d["height"], d["added"], d.get("cut")) == (graphs[k]["width"], graphs[k]["height"],
                                                                    graphs[k]["added"], graphs[k].get("cut"))


def test_cut_steps_derived_from_the_step_before_move_nothing_both_show(noisy, small_cap):
  _, tr = noisy
  rw = longest_rewrite(tr)
  view = StepGraphs(tr, rw, Replay(tr, rw))
  derived = 0
  for k in range(1, rw.matches + 1):
    if not view.big(k):
      continue
    lay, prev = view._cut(k), view.shown(k - 1)[0]
    assert set(lay.pos) == lay.shown and set(lay.edges) <= {(s, n) for n in lay.shown for s in view.replay.node(n)[3]}
    if lay.base == k - 1:
      derived += 1
      assert all(lay.pos[n] == prev.pos[n] for n in lay.shown & prev.pos.keys()), k
  assert derived > 10


def test_the_api_answers_a_big_graph_cut(noisy, small_cap):
  path, _ = noisy
  c = create_app([path], follow=False).test_client()
  tr = c.get("/api/traces/0/contexts").get_json()
  rws = [r for x in tr for r in x["rewrites"]]
  rw = max(rws, key=lambda r: r["matches"])
  base = f"/api/traces/0/rewrites/{rw['id']}"
  g = c.get(f"{base}/graph?step=3")
  assert g.status_code == 200 and g.get_json()["cut"]["shown"] == SHOWN
  d = c.get(f"{base}/delta?from=3&to=4&compact=1")
  assert d.status_code == 200 and d.get_json()["cut"]["total"] > CAP
  boot = c.get(f"/api/boot?t=0&rw={rw['id']}&step=2").get_json()
  assert boot["graph"]["cut"]["shown"] == SHOWN


# ---- diffs of graphs too big to diff whole: summarized around the roots (viz_server.diff)

DIFF_CAP, DIFF_SHOWN = 150, 12


@pytest.fixture
def small_diff_cap(monkeypatch):
  monkeypatch.setattr(diff, "MAX_DIFF_NODES", DIFF_CAP)
  monkeypatch.setattr(diff, "SUMMARY_NODES", DIFF_SHOWN)


def _point(rp, k, name):
  return rp.root(k), rp.node, name


def test_a_diff_of_graphs_over_the_cap_is_summarized_around_the_roots(noisy, monkeypatch):
  _, tr = noisy
  rw = longest_rewrite(tr)
  rp = Replay(tr, rw)
  n = rw.matches
  rng = random.Random(5)
  pairs = [(0, n), (n, 0), (0, 1), (n - 1, n)] + [(rng.randint(0, n), rng.randint(0, n)) for _ in range(12)]
  whole = {p: diff.diff_graphs(_point(rp, p[0], "A"), _point(rp, p[1], "B"), draw=True) for p in pairs}
  monkeypatch.setattr(diff, "MAX_DIFF_NODES", DIFF_CAP)
  monkeypatch.setattr(diff, "SUMMARY_NODES", DIFF_SHOWN)
  summarized = 0
  for (j, k), full in whole.items():
    got = diff.diff_graphs(_point(rp, j, "A"), _point(rp, k, "B"), draw=True)
    assert full["summary"] is None
    if max(rp.size(j), rp.size(k)) <= DIFF_CAP:
      assert got == full
      continue
    summarized += 1
    s, g = got["summary"], got["graph"]
    assert g["both"] == full["graph"]["both"]
    for side, order_k in (("a", j), ("b", k)):
      only = full["graph"][f"only_{side}"]
      shown = g[f"only_{side}"]
      assert s[side] == {"nodes": rp.size(order_k), "only": len(only), "shown": min(len(only), DIFF_SHOWN)}
      assert len(shown) == s[side]["shown"] and all(x in only for x in shown)
      # nearest the root: the root (if it differs), then only nodes that a node shown uses
      ids = {x["id"] for x in shown}
      root = rp.root(order_k)
      assert not ids or root in ids
      assert all(x == root or any(x in rp.node(u)[3] for u in ids) for x in ids)
    for mark, side in (("-", "only_a"), ("+", "only_b")):
      marked = {ln["text"][:diff.HASH_CHARS] for ln in got["lines"] if ln["kind"] == mark}
      listed = {x["hash"] for x in g[side]}
      assert listed <= marked  # each node shown is a line of the text diff
      assert all(h in listed or h not in {x["hash"] for x in full["graph"][side]} for h in marked)  # no other
    assert sum(ln["kind"] != "@" for ln in got["lines"]) <= 4 * DIFF_SHOWN  # shown nodes and their sources
  assert summarized >= 8


def test_a_summarized_diff_draws_the_nodes_shown_with_their_sources(noisy, small_diff_cap):
  _, tr = noisy
  rw = longest_rewrite(tr)
  rp = Replay(tr, rw)
  got = diff.diff_graphs(_point(rp, 0, "A"), _point(rp, rw.matches, "B"), draw=True)
  drawn = got["graph"]["drawn"]
  assert got["summary"] is not None and drawn is not None
  side = {s: {x["node"] for x in drawn["nodes"] if x["side"] == s} for s in ("a", "b", "both")}
  assert side["a"] == {x["id"] for x in got["graph"]["only_a"]}
  assert side["b"] == {x["id"] for x in got["graph"]["only_b"]}
  assert len(side["both"]) <= DIFF_SHOWN  # the context: sources of the nodes shown
  ids = {x["id"] for x in drawn["nodes"]}
  assert all(e["src"] in ids and e["dst"] in ids for e in drawn["edges"])
  assert {(e["src"], e["dst"]) for e in drawn["edges"]} == {(s, x["id"]) for x in drawn["nodes"] for s in x["src"]}


def test_the_api_answers_a_big_diff_summarized_and_refuses_one_past_the_walk_bound(noisy, small_diff_cap,
                                                                                    monkeypatch):
  path, tr = noisy
  rw = longest_rewrite(tr)
  c = create_app([path], follow=False).test_client()
  q = f"/api/diff?a=0:{rw.id}:0&b=0:{rw.id}:end"
  for url in (q, q + "&draw=1"):
    res = c.get(url)
    assert res.status_code == 200
    body = res.get_json()
    assert body["summary"]["limit"] == DIFF_SHOWN and len(body["graph"]["only_a"]) <= DIFF_SHOWN
  monkeypatch.setattr(diff, "MAX_WALK_NODES", 50)
  res = c.get(q)
  assert res.status_code == 413 and "more than 50 nodes" in res.get_json()["error"]


def test_a_big_diff_stops_when_the_client_goes(noisy, small_diff_cap, monkeypatch):
  import socket

  _, tr = noisy
  rw = longest_rewrite(tr)
  rp = Replay(tr, rw)
  rp.ensure(rw.matches)
  monkeypatch.setattr(gone, "EVERY_S", 0.0)
  monkeypatch.setattr(diff, "CHECK_EVERY", 16)
  ours, theirs = socket.socketpair()
  theirs.close()  # the client went
  gone.start(ours)
  try:
    with pytest.raises(gone.ClientGone):
      diff.diff_graphs(_point(rp, 0, "A"), _point(rp, rw.matches, "B"))
  finally:
    gone.stop()
    ours.close()
