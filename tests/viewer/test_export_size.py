"""The export's size: it leaves out the graph edges its page derives from the nodes' sources
(viz_server/export/graphs.py, leave_out_derived_edges; the page's rebuilt graphs are compared with the API's in
tests/browser/test_ui_export.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.trace_tools_helpers import record_small

from viz_server.export.collect import collect
from viz_server.export.command import export
from viz_server.export.graphs import leave_out_derived_edges
from viz_server.export.pack import FRESH_BASE
from viz_server.export.page import render
from viz_server.offline import OfflineApi

ROOT = Path(__file__).resolve().parents[2]

FRESH = FRESH_BASE


def _fixed(src: list[int]) -> list:
  return ["ADD", "int", "None", "ADD\nint", "alu", 40.0, 30.0, src, []]


def _data(g0_edges: list, delta_edges: list) -> dict:
  statics = {1: _fixed([]), 2: _fixed([]), 3: _fixed([1, 2])}
  g0 = {"nodes": [[1, 0, 0, 0], [2, 50, 0, 0], [3, 25, 80, 0]], "edges": g0_edges}
  delta = {"nodes_added": [[FRESH, 25, 160, 1]], "nodes_removed": [], "nodes_moved": {}, "edges_added": delta_edges}
  rewrite = {"g0": 0, "deltas": [delta], "fresh": {FRESH: _fixed([3, 1])}}
  return {"statics": statics, "g0": [g0], "graphs": {"0": rewrite}}


def test_in_edges_in_source_order_are_left_out_with_the_bent_ones_points():
  bend = [[0, 0], [10, 40], [25, 80]]
  data = leave_out_derived_edges(_data([[1, 3, 0, bend], [2, 3, 1]], [[3, FRESH, 0], [1, FRESH, 1, bend]]))
  g0, d = data["g0"][0], data["graphs"]["0"]["deltas"][0]
  # a route between its nodes' centers keeps the points between them; one that is not (here: its user is elsewhere at
  # the step) keeps them all, marked
  assert "edges" not in g0 and g0["bent"] == [[0, 0]] and data["routes"] == [bend[1:-1], bend]
  assert "edges_added" not in d and d["bent"] == [[1, 1, 1]]  # (a replay-made node's sources from its rewrite's)


@pytest.mark.parametrize("g0_edges", [[[2, 3, 1], [1, 3, 0]], [[1, 3, 0]], [[1, 3, 0], [2, 3, 1], [1, 2, 0]]],
                         ids=["other order", "one missing", "one more"])
def test_edges_in_any_other_form_are_kept_as_they_are(g0_edges):
  data = leave_out_derived_edges(_data([list(e) for e in g0_edges], []))
  assert data["g0"][0]["edges"] == g0_edges and "bent" not in data["g0"][0]


def test_a_real_exports_graphs_carry_no_derivable_edge_and_the_page_is_smaller(trace):
  path = record_small(trace)
  with OfflineApi(path) as api:
    data = collect(api, derive_edges=False)
  full = len(render(data, "x"))
  kept = sum(len(g["edges"]) for g in data["g0"]) + sum(len(d["edges_added"]) for r in data["graphs"].values()
                                                         for d in r["deltas"])
  assert kept > 20
  lean = leave_out_derived_edges(data)
  assert not any("edges" in g for g in lean["g0"])
  assert not any("edges_added" in d for r in lean["graphs"].values() for d in r["deltas"])
  assert len(render(lean, "x")) < full


@pytest.mark.slow
def test_the_full_demos_page_is_at_most_3x_its_trace(tmp_path):
  """Issue 17's size goal, on the trace it names: examples/demo.py as `make demo` runs it."""
  trace = tmp_path / "demo.vztrace"
  env = {**os.environ, "VIZ": "-1", "VIZ_TRACE": str(trace), "PYTHONPATH": str(ROOT)}
  subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], env=env, cwd=ROOT, check=True,
                 capture_output=True, timeout=240)
  got = export(trace, tmp_path / "demo.html")
  assert got["trace_bytes"] > 100_000  # (the whole demo: the page's scripts alone are about 190 KB)
  assert got["bytes"] <= 3 * got["trace_bytes"], got
