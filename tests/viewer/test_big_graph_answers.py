"""Answers sized by what a step did (issue 30): a step that rebuilds every user of what it replaced sends those nodes
as runs of ids (`compact=2`), which unpack to the compact delta; a re-layout's graph is a fresh layout that the chain
of stable layouts never sees; long edges' vertical runs are not sent point by point."""
from __future__ import annotations

import itertools

import pytest
from support.export_helpers import moving_chains
from support.server_helpers import apply_delta, recording, write_noisy_simplify

from compiler import PatternMatcher, UOp, UPat, graph_rewrite
from viz_server.app import create_app
from viz_server.layout import layout_graph
from viz_server.replay import FRESH_BASE, Replay
from viz_server.stepgraphs import StepGraphs, dumps, slim
from viz_server.store import TraceStore

CHAIN = 240  # x * 1 + 1 + 2 + ...: each `* 1` dropped rebuilds every ADD above it


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
  path = tmp_path_factory.mktemp("t") / "t.vztrace"
  e = UOp.variable("x", 0, 10) * 1
  for i in range(CHAIN):
    e = (e + (i + 1)) * 1 if i % 60 == 59 else e + (i + 1)
  with recording(path):
    graph_rewrite(e, PatternMatcher([(UPat.var("x") * 1, lambda x: x)]), name="drop *1")
  (tr,) = TraceStore().add_path(path)
  rw = next(r for r in tr.rewrites.values() if r.matches)
  return tr, rw


def sums(runs: list[int]) -> list[int]:
  """[difference, count, ...] runs (stepgraphs._diff_runs) -> the values."""
  diffs = [d for i in range(0, len(runs), 2) for d in [runs[i]] * runs[i + 1]]
  return [sum(diffs[:i + 1]) for i in range(len(diffs))]


def flags(runs: list[int]) -> list[bool]:
  """Run lengths, false first (stepgraphs._flag_runs) -> the flags."""
  return [i % 2 == 1 for i, n in enumerate(runs) for _ in range(n)]


def own(cols: dict, n: int, to: int) -> list[dict]:
  """The fields of n rebuilt nodes sent as runs that are not their old node's (stepgraphs._own_columns): created,
  and site where theirs is another."""
  runs = lambda xs: [v for i in range(0, len(xs), 2) for v in [xs[i]] * xs[i + 1]]  # noqa: E731
  created = runs(cols["created"]) if "created" in cols else [to] * n
  drop, mine = flags(cols.get("nosite", [])), runs(cols.get("resite", []))
  drop, mine = drop + [False] * (n - len(drop)), mine + [0] * (n - len(mine))
  return [{"created": c, **({"site": cols["sites"][m - 1]} if m else {"site": None} if x else {})}
          for c, x, m in zip(created, drop, mine)]


def unpack(d: dict, before: dict, held: dict | None = None) -> dict:
  """What a compact=2 delta stands for (the level-1 entries of its `rebuilt` runs, `shifted` nodes, `straight` edges,
  `whole` nodes and `held` edges), given the graph it applies to and, for `held`, the in-edges the page holds ({(dst,
  index): edge}); static/graph.js renames the rebuilt nodes' entries in place (_renameRebuilt) and unpacks the others
  (_unpack). A level-1 entry with `"site"` has that one instead of like's (None: none)."""
  if not {"rebuilt", "shifted", "straight", "whole", "held"} & set(d):
    return d
  w = d.get("whole", {"id": [], "look": [], "nsrc": [], "created": [], "site": [], "src": [], "xy": [], "consts": []})
  runs = lambda xs: [v for i in range(0, len(xs), 2) for v in [xs[i]] * xs[i + 1]]  # noqa: E731
  starts = list(itertools.accumulate(runs(w["nsrc"]), initial=0))
  whole = [{"id": n, **w["looks"][lk], "src": [n - s for s in w["src"][a:b]], "x": w["xy"][2 * i],
            "y": w["xy"][2 * i + 1], "consts": [c for j, c in zip(w["consts"][::2], w["consts"][1::2]) if j == i],
            "created": c, **({"site": w["sites"][st - 1]} if st else {})}
           for i, (n, lk, a, b, c, st) in enumerate(zip(sums(w["id"]), runs(w["look"]), starts, starts[1:],
                                                         runs(w["created"]), runs(w["site"])))]
  d = {**d, "nodes_added": d["nodes_added"] + whole}
  r, sh = d.get("rebuilt", {"id": [], "like": []}), d.get("shifted", {"id": [], "like": [], "xy": []})
  ids, likes, sids, slikes = sums(r["id"]), sums(r["like"]), sums(sh["id"]), sums(sh["like"])
  nodes = {n["id"]: n for n in before["nodes"]}
  renamed = {a["like"]: a["id"] for a in d["nodes_added"] if "like" in a} | dict(zip(likes, ids)) | \
    dict(zip(slikes, sids))
  at = [(nodes[o]["x"], nodes[o]["y"]) for o in likes] + list(zip(sh["xy"][::2], sh["xy"][1::2]))
  more = [{"id": n, "like": o, "src": [renamed.get(s, s) for s in nodes[o]["src"]], "x": x, "y": y, **mine}
          for n, o, (x, y), mine in zip(ids + sids, likes + slikes, at, own(r, len(ids), d["to"]) +
                                        own(sh, len(sids), d["to"]))]
  added = d["nodes_added"] + more
  src_of = {a["id"]: a["src"] for a in added}
  st = d.get("straight", {"dst": [], "index": []})
  index = runs(st["index"])
  straight = [{"src": src_of[n][i], "dst": n, "index": i} for n, i in zip(sums(st["dst"]), index)]
  same = flags(r.get("unchanged", []))
  changed = [n for i, n in enumerate(ids) if not (i < len(same) and same[i])] + d["changed"]
  hd = d.get("held", {"dst": [], "index": []})
  kept = [held[n, i] for n, i in zip(sums(hd["dst"]), sums(hd["index"]))]  # (a KeyError: one the page lacks)
  out = {k: v for k, v in d.items() if k not in ("rebuilt", "shifted", "straight", "whole", "held")}
  return {**out, "nodes_added": added, "nodes_removed": d["nodes_removed"] + likes + slikes,
          "edges_added": d["edges_added"] + straight + kept, "changed": changed}


def test_rebuilt_runs_unpack_to_the_next_graph_and_are_small(chain):
  tr, rw = chain
  view = StepGraphs(tr, rw, Replay(tr, rw))
  assert rw.matches == CHAIN // 60 + 1
  most = 0
  for k in range(rw.matches):
    g, want = view.graph(k), view.graph(k + 1)
    d2, d1 = view.delta(k, k + 1, compact=True, rebuilt=True), view.delta(k, k + 1, compact=True)
    rebuilt = sum("like" in a for a in d1["nodes_added"])  # (the first match, the outermost `* 1`: none)
    # every rebuilt node but the replaced node's user (its source is another node, not a renamed one)
    runs = d2.get("rebuilt", {"id": []})["id"]
    assert sum(runs[1::2]) == max(0, rebuilt - 1)
    assert rebuilt < 60 or len(runs) <= 8  # [difference, count] runs: the chain's ids ascend by equal steps
    most = max(most, rebuilt)
    nodes, edges = apply_delta(g, unpack(d2, g))
    assert nodes == {n["id"]: n for n in apply_delta(g, d1)[0].values()}
    assert {n: (v["x"], v["y"], v["src"]) for n, v in nodes.items()} == \
      {n["id"]: (n["x"], n["y"], n["src"]) for n in want["nodes"]}
    assert set(edges) == {(e["src"], e["dst"], e["index"]) for e in want["edges"]}
    assert sorted(unpack(d2, g)["changed"]) == sorted(d1["changed"])
    assert sorted(unpack(d2, g)["nodes_removed"]) == d1["nodes_removed"]
    # counted: the rebuilt nodes cost a few runs, against ~60 bytes each as {id, like, src, x, y}
    assert rebuilt < 60 or (len(dumps(d2)) < len(dumps(d1)) / 4 and len(dumps(d2)) < 1_000 + 2 * rebuilt)
  assert most >= 200


def test_a_fresh_layout_is_the_steps_own_and_leaves_the_chain_alone(chain):
  tr, rw = chain
  view, other = (StepGraphs(tr, rw, Replay(tr, rw)) for _ in range(2))
  for v in (view, other):  # (both replays reach the steps in one order: they number the nodes they make alike)
    v.replay.ensure(rw.matches)
  k = rw.matches - 1
  fresh = view.graph(k, fresh=True)
  assert fresh["anchor"] == k
  members = sorted(view.replay.members(k))
  lay = layout_graph({n: view.size(n) for n in members}, [(s, n) for n in members for s in view.replay.node(n)[3]])
  assert {n["id"]: (n["x"], n["y"]) for n in fresh["nodes"]} == \
    {n: (round(x, 1), round(y, 1)) for n, (x, y) in lay.pos.items()}
  assert fresh["removed_nodes"] == []  # (their places are the stable layout's)
  assert view.delta(k, k + 1) == other.delta(k, k + 1)  # step 0's chain: as if there were no re-layout
  assert view.graph(k) == other.graph(k)


def test_routes_are_kept_and_sent_without_their_vertical_runs(chain):
  pts = [(0.0, 0.0), (5.04, 10.0), (5.0, 20.0), (5.0, 30.0), (5.0, 40.0), (9.0, 50.0)]
  assert slim(pts) == ((0.0, 0.0), (5.04, 10.0), (5.0, 40.0), (9.0, 50.0))
  assert slim(pts[:3]) == tuple(pts[:3])
  tr, rw = chain
  view = StepGraphs(tr, rw, Replay(tr, rw))
  g = view.graph(0)
  lay = layout_graph({n: view.size(n) for n in view.replay.members(0)},
                     [(s, n) for n in view.replay.members(0) for s in view.replay.node(n)[3]])
  assert sum(map(len, lay.edges.values())) > 2 * len(lay.edges)  # (the constants' long edges)
  assert {(e["src"], e["dst"]): e["points"] for e in g["edges"]} == \
    {e: [[round(x, 1), round(y, 1)] for x, y in slim(pts)] for e, pts in lay.edges.items()}


def test_a_delta_asks_no_call_site_of_a_fresh_node(chain, monkeypatch):
  """A step rebuilds every user of what it replaced as fresh nodes (ids replay made up), which have no call site: a
  delta compares the sites of a rebuilt node and its old node without asking the trace about the fresh one (~2,000 a
  GPT step's `add bufferize` step; counted, not clocked), and sends what asking gives."""
  tr, rw = chain
  ref = StepGraphs(tr, rw, Replay(tr, rw))  # (one view for every step: fresh ids are numbered as replay makes them)
  want = [dumps(ref.delta(k, k + 1, compact=True, rebuilt=True)) for k in range(rw.matches)]
  asked: list[int] = []
  site = tr.nodes.site
  monkeypatch.setattr(tr.nodes, "site", lambda n: (asked.append(n), site(n))[1])
  view = StepGraphs(tr, rw, Replay(tr, rw))
  got = [dumps(view.delta(k, k + 1, compact=True, rebuilt=True)) for k in range(rw.matches)]
  assert got == want
  assert view.replay.fresh and asked and not [n for n in asked if n >= FRESH_BASE]


def test_rebuilt_nodes_that_drop_a_call_site_or_move_are_sent_as_runs(tmp_path):
  """A rebuilt node without a call site whose old node has one (every fresh node over a trace node of the user's
  program) and a rebuilt node at a new place come as runs too (`nosite`, `shifted`), the straight in-edges a moved
  node sends again as `straight` runs and new nodes as columns (`whole`; issue 30: such nodes went whole, 21-434 KB
  answers); a step back, the trace's nodes made before over fresh ones, as runs with their `created` and sites
  (`resite`); unpacked, each delta makes the graph it leads to, call sites and routes included."""
  (tr,) = TraceStore().add_path(moving_chains(tmp_path / "m.vztrace", depth=12, steps=8))
  rw = next(r for r in tr.rewrites.values() if r.matches)
  view = StepGraphs(tr, rw, Replay(tr, rw))
  seen = set()
  for k in range(rw.matches):
    g, want = view.graph(k), view.graph(k + 1)
    d2 = view.delta(k, k + 1, compact=True, rebuilt=True)
    seen |= {f for f in ("shifted", "straight", "whole") if f in d2} | {"nosite" for f in ("rebuilt", "shifted")
                                                             if "nosite" in d2.get(f, {})}
    # all of them as runs but the replaced node's user (its source is another node, not a renamed one)
    assert len([a for a in d2["nodes_added"] if "like" in a]) <= 1, k
    nodes, edges = apply_delta(g, unpack(d2, g))
    for n in nodes.values():
      if n.get("site", 0) is None:
        del n["site"]
    assert nodes == {n["id"]: n for n in want["nodes"]}, k
    assert edges == {(e["src"], e["dst"], e["index"]): e for e in want["edges"]}, k
    assert len(dumps(d2)) < 1_000 + 200 * len(d2.get("shifted", {"xy": []})["xy"]), k
  assert seen == {"shifted", "straight", "whole", "nosite"}
  for k in range(rw.matches, 0, -1):  # and back: the trace's nodes, with sites and made before, over fresh ones
    g, want = view.graph(k), view.graph(k - 1)
    d2 = view.delta(k, k - 1, compact=True, rebuilt=True)
    seen |= {f for f in ("created", "resite") if f in d2.get("rebuilt", {}) or f in d2.get("shifted", {})}
    assert len([a for a in d2["nodes_added"] if "like" in a]) <= 1, k
    nodes, edges = apply_delta(g, unpack(d2, g))
    for n in nodes.values():
      if n.get("site", 0) is None:
        del n["site"]
    want_nodes = {n["id"]: n for n in want["nodes"]}
    assert nodes == want_nodes, [(n, v, want_nodes.get(n)) for n, v in nodes.items() if v != want_nodes.get(n)][:2]
    assert edges == {(e["src"], e["dst"], e["index"]): e for e in want["edges"]}, k
  assert {"created", "resite"} <= seen


def test_a_step_back_leaves_out_the_routes_the_page_holds(chain):
  """A step back from k brings back the nodes step k removed, with their in-edges' routes on step k - 1's layout. The
  page holds those (what step k's graph sent as removed_edges, or the step to k took away: static/graphghosts.js,
  StepMemo) and says so (`held`): they come as `held` runs of (dst, index) only, and unpacked with the page's routes
  each step back makes the graph it leads to (issue 30: step 1 -> 0 of a GPT step's `add bufferize` resent 6,596
  points, 126 KB). Without `held` the answer is the same as before; the rebuilt nodes' `unchanged` marks are runs."""
  tr, rw = chain
  view = StepGraphs(tr, rw, Replay(tr, rw))
  for k in range(1, rw.matches + 1):
    view.delta(k - 1, k, compact=True, rebuilt=True)
  saved = 0
  for k in range(rw.matches, 0, -1):
    g, want = view.graph(k), view.graph(k - 1)
    memo = {(e["dst"], e["index"]): e for e in g["removed_edges"]}  # (what the page holds of step k)
    plain = view.delta(k, k - 1, compact=True, rebuilt=True)
    d2 = view.delta(k, k - 1, compact=True, rebuilt=True, held=True)
    assert "held" not in plain and "rebuilt_unchanged" not in d2
    assert {**d2, "held": None, "edges_added": None} == {**plain, "held": None, "edges_added": None}, k
    nodes, edges = apply_delta(g, unpack(d2, g, memo))
    assert {n: (v["x"], v["y"], v["src"]) for n, v in nodes.items()} == \
      {n["id"]: (n["x"], n["y"], n["src"]) for n in want["nodes"]}, k
    assert edges == {(e["src"], e["dst"], e["index"]): e for e in want["edges"]}, k
    assert sorted(unpack(d2, g, memo)["changed"]) == sorted(view.delta(k, k - 1, compact=True)["changed"]), k
    assert not [e for e in d2["edges_added"] if "points" in e and e["dst"] in set(view.replay.step(k).removed)], k
    saved += len(dumps(plain)) - len(dumps(d2))
    # held only where asked of the step next to the one it leaves (a jump's page holds no such routes)
    assert k < 2 or "held" not in view.delta(k, k - 2, compact=True, rebuilt=True, held=True)
  assert saved > 5_000  # (the constant 1's long edge into each `* 1`: ~1-3 KB each step)


def test_a_far_jump_asked_as_a_delta_unpacks_to_the_jumps_graph(tmp_path):
  """/graph?step=k&from=j&delta=2 (the page's far jump, issue 30): where step k is laid out from the layout of step j
  on screen (StepGraphs.jump), the compact=2 delta from j (`jump`, with k's new anchor; `kept_created`: the `created`
  of the nodes both have as k's graph says them) instead of k's graph; applied to j's graph it gives k's graph on that
  anchor (nodes, places, sources, created, edges and routes), in a quarter of the bytes or less."""
  c = create_app([write_noisy_simplify(tmp_path / "t.vztrace")], follow=False).test_client()
  rw = max((r for x in c.get("/api/traces/0/contexts").get_json() for r in x["rewrites"]), key=lambda r: r["matches"])
  n, base = rw["matches"], f"/api/traces/0/rewrites/{rw['id']}"
  shown = c.get(f"{base}/graph?step=3").get_json()
  d = c.get(f"{base}/graph?step={n - 1}&compact=1&from=3&delta=2").get_json()
  a = d["anchor"]
  assert d["jump"] and (d["from"], d["to"]) == (3, n - 1) and a > n and a % (n + 1) == n - 1
  want = c.get(f"{base}/graph?step={n - 1}&anchor={a}").get_json()
  nodes, edges = apply_delta(shown, unpack(d, shown))
  kept = d.get("kept_created", {"id": [], "value": []})
  for nid, created in zip(sums(kept["id"]), [v for i in range(0, len(kept["value"]), 2)
                                             for v in [kept["value"][i]] * kept["value"][i + 1]]):
    nodes[nid]["created"] = created
  fields = ("x", "y", "src", "created", "op", "dtype", "arg", "label")
  assert {i: tuple(v.get(f) for f in fields) for i, v in nodes.items()} == \
    {v["id"]: tuple(v.get(f) for f in fields) for v in want["nodes"]}
  assert {key: e["points"] for key, e in edges.items()} == {(e["src"], e["dst"], e["index"]): e["points"]
                                                            for e in want["edges"]}
  assert d["added"] == want["added"] and sorted(unpack(d, shown)["changed"]) == sorted(want["changed"])
  assert len(dumps(d)) < len(dumps(want)) / 4
  # a step that is not laid out from the screen's (near a chain laid out before: the one it is on) is its graph
  again = c.get(f"{base}/graph?step={n - 2}&compact=1&anchor={a}&from={n - 1}&delta=2").get_json()
  assert "jump" not in again and again["anchor"] == a and again["step"] == n - 2
