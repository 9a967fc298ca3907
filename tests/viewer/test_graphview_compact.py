"""Compact graph answers (issue 18): a straight edge comes without its points, and the graph is the full one again
once the client gives such an edge its ends' centers (what static/graph.js does)."""
import pytest
from support.server_helpers import write_noisy_simplify

from viz_server.replay import Replay
from viz_server.stepgraphs import StepGraphs
from viz_server.store import TraceStore


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
  (tr,) = TraceStore().add_path(write_noisy_simplify(tmp_path_factory.mktemp("t") / "t.vztrace"))
  return tr


def _filled(g: dict) -> dict:
  """A compact graph with its straight edges' points filled in from the node centers, as the client draws them."""
  at = {n["id"]: [n["x"], n["y"]] for n in g["nodes"]}
  edges = [e if "points" in e else {**e, "points": [at[e["src"]], at[e["dst"]]]} for e in g["edges"]]
  return {**g, "edges": edges}


def test_compact_graph_is_the_full_graph_with_straight_edges_filled_in(trace):
  straight = routed = 0
  for rw in trace.rewrites.values():
    view = StepGraphs(trace, rw, Replay(trace, rw))
    for k in range(0, rw.matches + 1, 7):
      full, compact = view.graph(k), view.graph(k, compact=True)
      assert _filled(compact) == full, (rw.id, k)
      straight += sum("points" not in e for e in compact["edges"])
      routed += sum("points" in e for e in compact["edges"])
      # the removed nodes' in-edges keep their points: their ends may be ghosts the client draws from elsewhere
      assert compact["removed_edges"] == full["removed_edges"]
      assert all("points" in e for e in compact["removed_edges"])
  assert straight > routed > 0  # both kinds occur, most edges are straight


def test_compact_keeps_the_points_of_a_two_point_route_that_is_not_center_to_center(trace):
  rw = next(iter(trace.rewrites.values()))
  view = StepGraphs(trace, rw, Replay(trace, rw))
  lay = view.layout(0)
  (s, d), pts = next((e, p) for e, p in lay.edges.items() if len(p) == 2)
  lay.edges[(s, d)] = ((pts[0][0] + 5.0, pts[0][1]), pts[1])  # a bend the client could not guess
  try:
    e = next(e for e in view.graph(0, compact=True)["edges"] if (e["src"], e["dst"]) == (s, d))
    assert e["points"] == [[round(pts[0][0] + 5.0, 1), round(pts[0][1], 1)], [round(pts[1][0], 1), round(pts[1][1], 1)]]
  finally:
    lay.edges[(s, d)] = pts


def test_compact_delta_keeps_the_points_of_a_two_point_route_that_is_not_center_to_center(trace):
  # the check graph answers make (stepgraphs.straight), not just two points: the page would draw it center to center
  view, k, e = next((v, k, e) for rw in trace.rewrites.values() for v in [StepGraphs(trace, rw, Replay(trace, rw))]
                    for k in range(1, rw.matches + 1) for e in v.delta(k - 1, k, compact=True)["edges_added"]
                    if "points" not in e)
  lay = view.layout(k)
  pts = lay.edges[(e["src"], e["dst"])]
  assert len(pts) == 2
  lay.edges[(e["src"], e["dst"])] = ((pts[0][0] + 5.0, pts[0][1]), pts[1])
  try:
    got = next(x for x in view.delta(k - 1, k, compact=True)["edges_added"]
               if (x["src"], x["dst"], x["index"]) == (e["src"], e["dst"], e["index"]))
    (x0, y0), (x1, y1) = pts
    assert got["points"] == [[round(x0 + 5.0, 1), round(y0, 1)], [round(x1, 1), round(y1, 1)]]
  finally:
    lay.edges[(e["src"], e["dst"])] = pts
