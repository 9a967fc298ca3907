"""Issue 30, a far jump's fresh layout: slim routes made directly (layout_graph(slim=True)) and answer points rounded
all at once (routes_json) give exactly what slimming the full routes and rounding each point gave."""
from __future__ import annotations

import json
import random

import numpy as np

from viz_server import layout
from viz_server.layout import layout_graph
from viz_server.stepgraphs import route_json, routes_json, slimmed


def _snapped(f):
  def snapped(*a):
    x = f(*a)
    return np.round(x / 300) * 300 + np.arange(len(x)) % 3 * 0.02
  return snapped


def test_slim_layout_is_the_full_layout_slimmed(monkeypatch):
  # a spine with every node also fed by the first (long edges past the dummy budget: channels), side chains
  # (dummy runs), a cycle (reversed edges) and a self-loop
  rng = random.Random(3)
  spine = list(range(40))
  edges = [(a, a + 1) for a in spine[:-1]] + [(0, d) for d in spine[2:]]
  edges += [(rng.choice(spine[:20]), 100 + i) for i in range(30)]
  edges += [(100 + i, rng.choice(spine[20:])) for i in range(30)]
  edges += [(39, 200), (200, 201), (201, 39), (7, 7)]
  sizes = {v: (float(rng.randint(20, 90)), 20.0) for e in edges for v in e}
  for snap in (False, True):
    if snap:  # nodes and channels on a coarse grid, two in three off it by less than a tenth: runs at one x,
      # exact or as sent, and (the spine alone) channels that start at their source's x as sent
      monkeypatch.setattr(layout, "_x_coords", _snapped(layout._x_coords))
      monkeypatch.setattr(layout, "_place_channels", _snapped(layout._place_channels))
    for es in (edges, edges[:77]):
      sz = {v: sizes[v] for e in es for v in e}
      full, slim = layout_graph(sz, es), layout_graph(sz, es, slim=True)
      assert (slim.pos, slim.layer, slim.width, slim.height) == (full.pos, full.layer, full.width, full.height)
      assert list(slim.edges.items()) == list(slimmed(full).items())
      assert sum(map(len, slim.edges.values())) < sum(map(len, full.edges.values()))  # (vertical runs left out)


def test_routes_json_rounds_as_round_does():
  vals = [k / 20 for k in range(-400, 400)] + [k / 100 + 0.005 for k in range(-300, 300)] + [2.675, -0.04, 1e12 + 0.05]
  random.Random(1).shuffle(vals)
  routes = [tuple(zip(vals[i:i + 8:2], vals[i + 1:i + 8:2])) for i in range(0, len(vals) - 8, 8)]
  assert json.dumps(routes_json(routes)) == json.dumps(list(map(route_json, routes)))
  assert routes_json([((1, 2.0), (3.0, 4))]) == [[[1, 2.0], [3.0, 4]]]  # (ints stay ints)
