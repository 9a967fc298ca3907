"""Encoded graph answers kept by the server (viz_server.caches.ANSWERS, issue 18): an ended rewrite's graph is built
and encoded once, a live one's every time, and the answers the routes send are the graphs as built."""
import json

import pytest
from support.server_helpers import write_noisy_simplify

from viz_server import caches, rewrite_routes
from viz_server.app import create_app
from viz_server.lru import LRU
from viz_server.replay import Replay
from viz_server.stepgraphs import StepGraphs
from viz_server.store import TraceStore
from viz_server.views import Views


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
  return write_noisy_simplify(tmp_path_factory.mktemp("t") / "t.vztrace")


@pytest.fixture
def answers(monkeypatch):
  """A fresh answer cache, and a count of the graphs built."""
  monkeypatch.setattr(caches, "ANSWERS", caches.answer_cache())
  built = []
  real = StepGraphs.graph

  def counted(self, k, compact=False):
    built.append((self.rw.id, k, compact))
    return real(self, k, compact)
  monkeypatch.setattr(StepGraphs, "graph", counted)
  return built


def test_an_ended_rewrites_graph_is_encoded_once(trace_path, answers):
  (tr,) = TraceStore().add_path(trace_path)
  rw = max(tr.rewrites.values(), key=lambda r: r.matches)
  view = StepGraphs(tr, rw, Replay(tr, rw))
  first = view.graph_json(3, compact=True)
  assert view.graph_json(3, compact=True) is first  # kept, not built again
  assert answers == [(rw.id, 3, True)]
  assert json.loads(first) == StepGraphs.graph(view, 3, compact=True)
  # compact and full answers are kept apart
  assert json.loads(view.graph_json(3)) == StepGraphs.graph(view, 3)
  caches.forget_view(view.key)  # a view that goes takes its answers along
  view.graph_json(3, compact=True)
  assert answers.count((rw.id, 3, True)) == 3  # (two built above by the checks' direct calls)


def test_a_live_rewrites_graph_is_built_every_time(trace_path, answers):
  (tr,) = TraceStore().add_path(trace_path)
  rw = next(iter(tr.rewrites.values()))
  rw.ended = False  # as a rewrite still being recorded: its last step grows under the same key
  view = StepGraphs(tr, rw, Replay(tr, rw))
  assert view.graph_json(0) == view.graph_json(0)
  assert answers == [(rw.id, 0, False), (rw.id, 0, False)]
  assert not caches.ANSWERS.items


def test_the_cache_is_bounded_by_bytes():
  c = LRU(400, 100)  # (as caches.answer_cache: at most a quarter of the budget an answer)
  for i in range(8):
    c.put((i,), b"x" * 90, 90)
  assert c.used <= 400 and c.get((7,)) is not None and c.get((0,)) is None
  c.put(("huge",), b"x" * 101, 101)  # over a quarter of the budget: not kept, nothing pushed out
  assert c.get(("huge",)) is None and c.used == 360
  c.get((4,))  # the least recent goes first: (4,) is now the most recent
  c.put(("new",), b"y" * 90, 90)
  assert c.get((4,)) is not None and c.get((5,)) is None and c.used == 360
  c.drop((4,))
  assert c.get((4,)) is None and c.used == 270 and len(c) == 3


def test_the_routes_send_the_kept_answer(trace_path, answers):
  c = create_app([trace_path], follow=False).test_client()
  ctx = next(x for x in c.get("/api/traces/0/contexts").get_json() if x["rewrites"])
  rw = ctx["rewrites"][0]["id"]
  url = f"/api/traces/0/rewrites/{rw}/graph?step=1&compact=1"
  one, two = c.get(url), c.get(url)
  assert one.mimetype == "application/json" and one.data == two.data
  boot = c.get(f"/api/boot?t=0&ctx={ctx['id']}&rw={rw}&step=1&compact=1").get_json()
  assert boot["graph"] == one.get_json() and boot["rw"] == rw and boot["step"] == 1
  assert answers == [(rw, 1, True)]  # built once for the three answers


def test_a_far_jump_asked_from_the_step_on_screen_keeps_its_nodes_in_place(trace_path):
  """/graph?from=j (the step on screen, on the chain `anchor` names) of a far step k: an anchor numbered past the
  steps (StepGraphs.jump), which the deltas on its chain accept; the nodes both steps show stay where they were."""
  c = create_app([trace_path], follow=False).test_client()
  rws = [r for x in c.get("/api/traces/0/contexts").get_json() for r in x["rewrites"]]
  rw = max(rws, key=lambda r: r["matches"])
  n, base = rw["matches"], f"/api/traces/0/rewrites/{rw['id']}"
  shown = c.get(f"{base}/graph?step=3&compact=1").get_json()
  g = c.get(f"{base}/graph?step={n - 1}&compact=1&from=3").get_json()
  a = g["anchor"]
  assert a > n and a % (n + 1) == n - 1
  before = {d["id"]: (d["x"], d["y"]) for d in shown["nodes"]}
  after = {d["id"]: (d["x"], d["y"]) for d in g["nodes"]}
  assert before.keys() & after.keys() and all(before[i] == after[i] for i in before.keys() & after.keys())
  d = c.get(f"{base}/delta?from={n - 1}&to={n - 2}&compact=2&anchor={a}")
  assert d.status_code == 200 and d.get_json()["to"] == n - 2
  assert c.get(f"{base}/graph?step={n - 1}&compact=1&from={n + 1}").status_code == 404
  c.application.extensions["tinyviz"]["views"].drop(0, rw["id"])  # (evicted: the jump's layout went with its view)
  d = c.get(f"{base}/delta?from={n - 1}&to={n - 2}&compact=2&anchor={a}")
  assert d.status_code == 409 and "gone" in d.get_json()["error"]  # (laid out anew it would not be what the page has)
  again = c.get(f"{base}/graph?step={n - 2}&compact=1&anchor={a}&from={n - 1}").get_json()
  assert again["anchor"] == n - 2  # (the page's fallback: the step laid out fresh, a chain of its own)


def test_a_rewrites_routes_are_served_from_rewrite_routes():
  """A rewrite's steps, graph and delta are answered by their own blueprint, above the views and the StepGraphs that
  make them (issue 28: a request reads top-down, never back up); their errors are JSON too
  (tests/viewer/test_api.py)."""
  app = create_app([], follow=False)
  by_rule = {r.rule: r.endpoint for r in app.url_map.iter_rules()}
  for tail in ("", "/graph", "/delta"):
    endpoint = by_rule["/api/traces/<int:t>/rewrites/<int:r>" + tail]
    assert endpoint.partition(".")[0] == rewrite_routes.bp.name == "rewrite_routes"
    assert app.view_functions[endpoint].__module__ == "viz_server.rewrite_routes"


def test_views_drop_lets_a_view_and_its_answers_go(trace_path, answers):
  store = TraceStore()
  (tr,) = store.add_path(trace_path)
  rw = max(tr.rewrites.values(), key=lambda r: r.matches)
  views = Views(store, prefetch=0)
  view = views.get(tr, rw)
  first = view.graph_json(3, compact=True)
  assert views.get(tr, rw) is view and len(views) == 1
  views.drop(tr.id, rw.id)
  assert len(views) == 0
  again = views.get(tr, rw)
  assert again is not view and again.graph_json(3, compact=True) == first
  assert answers.count((rw.id, 3, True)) == 2  # built again: the dropped view's answer went with it
  views.drop(tr.id, rw.id + 10_000)  # an unknown rewrite: nothing to let go
  assert len(views) == 1


def test_a_steps_result_is_the_node_of_its_graph_that_stands_for_the_rules_result(tmp_path):
  """`match.result` is the node of step k's graph the rule's result is, which the page's automatic view centres on;
  `after` is the trace's node, which replay rebuilds under a fresh id where its sources were rebuilt (a matmul's
  rangeify: step 18's result is not in its graph under the trace's id; a GPT step's `add bufferize`: 38 of its first
  60 steps), so a view that followed `after` showed the whole graph at those steps instead of the change."""
  from support.browser import record_matmul_relu_fresh

  from viz_server.offline import OfflineApi
  path = tmp_path / "mr.vztrace"
  record_matmul_relu_fresh(path)
  rebuilt_after, steps = 0, 0
  with OfflineApi(path) as api:
    for c in api.trace_get("contexts"):
      for r in c["rewrites"]:
        for k in range(1, r["matches"] + 1):
          g = api.trace_get(f"rewrites/{r['id']}/graph?step={k}")
          m, ids = g["match"], {n["id"] for n in g["nodes"]}
          if m["result"] is None:  # (nothing replaced: the note says why)
            assert m["note"], (r["name"], k)
            continue
          steps += 1
          assert m["result"] in ids, (r["name"], k)
          rebuilt_after += m["after"] not in ids
          d = api.trace_get(f"rewrites/{r['id']}/delta?from={k - 1}&to={k}&compact=2")
          assert d["match"]["result"] == m["result"]
  assert steps > 50 and rebuilt_after >= 1
