"""The drawn graph diff (GET /api/diff?draw=1): B's nodes exactly where the main view draws that step, A's extra
nodes placed into it without overlaps, the same sides as a full layout of the union, and the cache of ended traces."""

import pytest
from support.server_helpers import _boxes_overlap, write_noisy_simplify

from viz_server import api, diff
from viz_server.app import create_app
from viz_server.diff import drawn_cache
from viz_server.place import MASSIVE


@pytest.fixture(scope="module")
def path(tmp_path_factory):
  """One kernel context with two big `symbolic` rewrites (top-down, then bottom-up) of a SINK of index math."""
  return write_noisy_simplify(tmp_path_factory.mktemp("t") / "t.vztrace", kernel="k")


def _app(path):
  app = create_app([path], follow=False)
  app.extensions["tinyviz"]["views"].prefetch_steps = 0
  return app


@pytest.fixture
def client(path):
  return _app(path).test_client()


def _get(client, url):
  r = client.get(url)
  assert r.status_code == 200, (url, r.data[:300])
  return r.get_json()


def _rewrites(client):
  ctxs = _get(client, "/api/traces/0/contexts")
  return [rw for c in ctxs for rw in c["rewrites"]]


def _drawn(client, a, b):
  g = _get(client, f"/api/diff?a={a}&b={b}&draw=1")["graph"]
  assert g["drawn"] is not None
  return g, g["drawn"]


class _Sizes:
  """What _boxes_overlap asks of a view: the box size of a node."""

  def __init__(self, drawn):
    self.wh = {n["id"]: (n["w"], n["h"]) for n in drawn["nodes"]}

  def size(self, n):
    return self.wh[n]


class _Lay:
  def __init__(self, drawn):
    self.pos = {n["id"]: (n["x"], n["y"]) for n in drawn["nodes"]}


def _check_sides_and_drawing(g, drawn):
  """The sides are the API's lists (as test_api checks them), no two boxes overlap, every edge points down."""
  side = {s: [n for n in drawn["nodes"] if n["side"] == s] for s in ("a", "b", "both")}
  assert [n["node"] for n in side["a"]] == [n["id"] for n in g["only_a"]]
  assert [(n["node"], n["hash"]) for n in side["b"]] == [(n["id"], n["hash"]) for n in g["only_b"]]
  assert len({n["hash"] for n in side["both"]}) == g["both"]
  ids = [n["id"] for n in drawn["nodes"]]
  assert len(ids) == len(set(ids))
  assert _boxes_overlap(_Sizes(drawn), _Lay(drawn), ids) is None
  by_id = {n["id"]: n for n in drawn["nodes"]}
  for e in drawn["edges"]:
    assert by_id[e["dst"]]["src"][e["index"]] == e["src"]
    assert by_id[e["src"]]["y"] < by_id[e["dst"]]["y"]
    assert e["points"][0] == [by_id[e["src"]]["x"], by_id[e["src"]]["y"]]
    assert e["points"][-1] == [by_id[e["dst"]]["x"], by_id[e["dst"]]["y"]]
  for n in drawn["nodes"]:
    assert n["x"] - n["w"] / 2 >= -0.1 and n["x"] + n["w"] / 2 <= drawn["width"] + 0.1
    assert n["y"] + n["h"] / 2 <= drawn["height"] + 0.1
  return side


def _assert_b_as_main_view(drawn, graph):
  """B's nodes and edges exactly as the main view's graph of that step draws them."""
  main = {n["id"]: n for n in graph["nodes"]}
  b_nodes = [n for n in drawn["nodes"] if n["side"] != "a"]
  assert {n["id"] for n in b_nodes} == set(main)
  for n in b_nodes:
    assert (n["x"], n["y"], n["w"], n["h"]) == (main[n["id"]]["x"], main[n["id"]]["y"], main[n["id"]]["w"],
                                                main[n["id"]]["h"])
  routes = {(e["src"], e["dst"], e["index"]): e["points"] for e in graph["edges"]}
  b_edges = [e for e in drawn["edges"] if e["dst"] in main]
  assert len(b_edges) == len(routes)
  for e in b_edges:
    assert e["points"] == routes[(e["src"], e["dst"], e["index"])]
  assert drawn["width"] >= graph["width"] and drawn["height"] >= graph["height"]


@pytest.mark.parametrize("back", [1, 3, 6])
def test_b_is_drawn_as_the_main_view_and_a_only_nodes_fit_in(client, back):
  for rw in _rewrites(client):
    k = rw["matches"]
    assert k > back
    for b in (str(k), "end"):
      graph = _get(client, f"/api/traces/0/rewrites/{rw['id']}/graph?step={b}")
      g, drawn = _drawn(client, f"0:{rw['id']}:{k - back}", f"0:{rw['id']}:{b}")
      side = _check_sides_and_drawing(g, drawn)
      assert 0 < len(side["a"]) <= max(MASSIVE, len(graph["nodes"]) // 4)  # the placing path, not the fallback
      _assert_b_as_main_view(drawn, graph)


def test_b_as_main_view_in_the_middle_of_a_rewrite_and_for_the_previous_step(client):
  rw = max(_rewrites(client), key=lambda r: r["matches"])
  for j, k in ((5, 9), (9, 5), (20, 21), (21, 20)):  # also backwards: B before A
    graph = _get(client, f"/api/traces/0/rewrites/{rw['id']}/graph?step={k}")
    g, drawn = _drawn(client, f"0:{rw['id']}:{j}", f"0:{rw['id']}:{k}")
    _check_sides_and_drawing(g, drawn)
    _assert_b_as_main_view(drawn, graph)


def test_a_kernel_point_is_drawn_as_its_last_rewrite_s_last_step(client):
  """`t:c` is the end of the context's last finished rewrite: drawn with that rewrite's layout of its last step."""
  ctx = next(c for c in _get(client, "/api/traces/0/contexts") if c["kind"] == "kernel")
  last = ctx["rewrites"][-1]
  graph = _get(client, f"/api/traces/0/rewrites/{last['id']}/graph?step=end")
  g, drawn = _drawn(client, f"0:{last['id']}:{last['matches'] - 2}", f"0:{ctx['id']}")
  side = _check_sides_and_drawing(g, drawn)
  assert side["a"]
  _assert_b_as_main_view(drawn, graph)


def test_same_nodes_sides_and_edges_as_a_full_layout_of_the_union(client, path, monkeypatch):
  """Placing into B's layout changes positions only: ids, sides, hashes and edges are those of the full layout."""
  rw = max(_rewrites(client), key=lambda r: r["matches"])
  a, b = f"0:{rw['id']}:{rw['matches'] - 4}", f"0:{rw['id']}:{rw['matches']}"
  _get(client, f"/api/traces/0/rewrites/{rw['id']}/graph?step={rw['matches']}")  # the main view shows step B
  g, placed = _drawn(client, a, b)
  monkeypatch.setattr(api, "_base", lambda tr, rw, k: lambda: None)  # no main-view layout: the full layout path
  other = _app(path).test_client()  # a fresh app: its own cache
  # (the same requests in the same order: replay numbers the nodes it makes in the order it reaches steps)
  _get(other, f"/api/traces/0/rewrites/{rw['id']}/graph?step={rw['matches']}")
  g2, full = _drawn(other, a, b)
  _check_sides_and_drawing(g2, full)
  assert g2 == {**g, "drawn": full}

  def shape(d):
    return ([{k: v for k, v in n.items() if k not in ("x", "y")} for n in d["nodes"]],
            sorted((e["src"], e["dst"], e["index"]) for e in d["edges"]))
  assert shape(placed) == shape(full)
  assert [(n["x"], n["y"]) for n in placed["nodes"]] != [(n["x"], n["y"]) for n in full["nodes"]]


def test_many_a_only_nodes_or_no_reusable_layout_get_a_full_layout(path, monkeypatch):
  calls = []
  real = diff.layout_graph
  monkeypatch.setattr(diff, "layout_graph", lambda *a, **k: calls.append(len(a[0])) or real(*a, **k))
  client = _app(path).test_client()
  rw = max(_rewrites(client), key=lambda r: r["matches"])
  assert rw["matches"] > api.DIFF_CHAIN
  _get(client, f"/api/traces/0/rewrites/{rw['id']}/graph?step={rw['matches']}")  # the main view shows step B
  g, drawn = _drawn(client, f"0:{rw['id']}:{rw['matches'] - 2}", f"0:{rw['id']}:{rw['matches']}")
  assert calls == []  # placed into the main view's layout
  b_nodes = len(_get(client, f"/api/traces/0/rewrites/{rw['id']}/graph?step=0")["nodes"])
  g, drawn = _drawn(client, f"0:{rw['id']}:end", f"0:{rw['id']}:0")  # the simplifier removed most of step 0
  assert len(g["only_a"]) > max(MASSIVE, b_nodes // 4)
  assert calls == [len(drawn["nodes"])]
  _check_sides_and_drawing(g, drawn)
  # a step far from every step the main view computed (more than api.DIFF_CHAIN layouts away): not computed for it
  fresh = _app(path)
  g, drawn = _drawn(fresh.test_client(), f"0:{rw['id']}:{rw['matches'] - 1}", f"0:{rw['id']}:{rw['matches']}")
  assert calls[1:] == [len(drawn["nodes"])]
  _check_sides_and_drawing(g, drawn)
  view = next(iter(fresh.extensions["tinyviz"]["views"]._views.values()))
  assert view.stats == {"full": 0, "derived": 0}


def test_drawn_diffs_of_ended_traces_are_cached(client, monkeypatch):
  rw = max(_rewrites(client), key=lambda r: r["matches"])
  views = client.application.extensions["tinyviz"]["views"]
  made = []
  real = diff.draw_diff
  monkeypatch.setattr(diff, "draw_diff", lambda *a, **k: made.append(1) or real(*a, **k))
  url = f"/api/diff?a=0:{rw['id']}:3&b=0:{rw['id']}:end&draw=1"
  first = _get(client, url)
  hits = views.drawn.hits
  again = _get(client, url)
  assert again == first and len(made) == 1 and views.drawn.hits == hits + 1
  _get(client, f"/api/diff?a=0:{rw['id']}:4&b=0:{rw['id']}:end&draw=1")  # another pair: drawn again
  assert len(made) == 2
  assert "drawn" not in _get(client, f"/api/diff?a=0:{rw['id']}:3&b=0:{rw['id']}:end")["graph"]
  assert len(made) == 2


def test_live_traces_are_not_cached(client, monkeypatch):
  rw = max(_rewrites(client), key=lambda r: r["matches"])
  views = client.application.extensions["tinyviz"]["views"]
  views.store.traces[0].ended = False  # as if the trace were still being written
  made = []
  real = diff.draw_diff
  monkeypatch.setattr(diff, "draw_diff", lambda *a, **k: made.append(1) or real(*a, **k))
  url = f"/api/diff?a=0:{rw['id']}:3&b=0:{rw['id']}:{rw['matches']}&draw=1"
  assert _get(client, url) == _get(client, url)
  assert len(made) == 2 and views.drawn.hits == 0 and views.drawn.used == 0


def test_drawn_cache_is_bounded_by_nodes():
  cache = drawn_cache(budget=10)
  cache.put("a", {"nodes": [0] * 4}, 4)
  cache.put("b", {"nodes": [0] * 4}, 4)
  assert cache.get("a") is not None  # a is now the most recent
  cache.put("c", {"nodes": [0] * 4}, 4)  # 12 > 10: the least recent (b) goes
  assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
  assert cache.used == 8 and (cache.hits, cache.misses) == (3, 1)
  cache.put("huge", {"nodes": [0] * 50}, 50)  # alone over the budget: kept as the only entry
  assert cache.used == 50 and cache.get("huge") is not None and cache.get("a") is None
