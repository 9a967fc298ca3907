"""Issue 14, item 4: a graph too big to lay out whole is answered cut to the nodes around the step's change (with
`cut`), not refused; deltas between cut steps turn one shown graph into the other. The bounds are made small here
(viz_server.cut reads them at call time), so an ordinary trace's graphs are "too big"."""
from __future__ import annotations

import random

import pytest
from test_server_helpers import apply_delta, write_noisy_simplify

from viz_server import cut
from viz_server.app import create_app
from viz_server.graphview import StepGraphs
from viz_server.replay import Replay
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


def _longest(tr):
  return max(tr.rewrites.values(), key=lambda r: r.matches)


def _edge_map(g):
  return {(e["src"], e["dst"], e["index"]): e for e in g["edges"]}


def test_a_cut_graph_shows_at_most_the_cap_around_the_change(noisy, small_cap):
  _, tr = noisy
  rw = _longest(tr)
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
  rw = _longest(tr)
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
  rw = _longest(tr)
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
