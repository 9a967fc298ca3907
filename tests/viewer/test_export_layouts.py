"""The export lays a graph out once for every graph of its shape (viz_server/export/layouts.py): a graph equal to one
laid out before under other ids gets exactly the layout layout_graph would give it, and the memo is bounded."""
from __future__ import annotations

import random

from support.export_helpers import rebuilding_rewrites

from viz_server.export import workers
from viz_server.export.collect import Work, collect
from viz_server.export.layouts import SharedLayouts
from viz_server.layout import layout_graph
from viz_server.offline import OfflineApi


def _dag(seed: int, n: int = 40) -> tuple[dict[int, tuple[float, float]], list[tuple[int, int]]]:
  """A random DAG with boxes of a few sizes (ids 0..n-1, each node's sources below it), edges in user order."""
  rnd = random.Random(seed)
  sizes = {i: (rnd.choice((40.0, 64.0, 90.0)), rnd.choice((20.0, 34.0))) for i in range(n)}
  edges = [(s, d) for d in range(1, n) for s in sorted(rnd.sample(range(d), min(d, rnd.randint(1, 3))))]
  return sizes, edges


def _slim(sizes: dict, edges: list):
  """The layout the views keep (slim routes), which the memo gives."""
  return layout_graph(sizes, edges, slim=True)


def _renamed(sizes: dict, edges: list, to: dict[int, int]) -> tuple[dict, list]:
  return {to[v]: wh for v, wh in sizes.items()}, [(to[s], to[d]) for s, d in edges]


def test_an_equal_graph_under_other_ids_gets_its_own_layout_renamed():
  sizes, edges = _dag(1)
  memo = SharedLayouts()
  assert memo(sizes, edges) == _slim(sizes, edges)
  ids = sorted(random.Random(2).sample(range(10_000), len(sizes)))  # other ids, in the same order
  other = _renamed(sizes, edges, dict(zip(sorted(sizes), ids)))
  got, want = memo(*other), _slim(*other)
  assert got == want and list(got.pos) == list(want.pos) and list(got.edges) == list(want.edges)
  assert (memo.laid, memo.shared) == (1, 1)
  # a box of another size, an edge less, or the ids in another order: another graph, laid out
  bigger = {**sizes, 5: (200.0, 20.0)}
  swapped = _renamed(sizes, edges, {**{v: v for v in sizes}, 3: 4, 4: 3})
  for g in ((bigger, edges), (sizes, edges[:-1]), swapped):
    assert memo(*g) == _slim(*g)
  assert (memo.laid, memo.shared) == (4, 1)


def test_its_layouts_are_made_slim_not_slimmed():
  """The step-0 layouts come with slim routes, as the views lay out (not full ones StepGraphs._full slims after), and
  the view's step-0 graph is the one it lays out alone."""
  n = 30  # (a chain and an edge from its top to each node: past the dummy budget, the longest edges are channels,
  # vertical runs whose inner points slim routes leave out)
  sizes = {i: (60.0, 20.0) for i in range(n)}
  edges = [(i, i + 1) for i in range(n - 1)] + [(0, i) for i in range(2, n)]
  got, slim, full = SharedLayouts()(sizes, edges), _slim(sizes, edges), layout_graph(sizes, edges)
  assert got == slim and got.edges != full.edges


def test_the_memo_holds_at_most_its_budget_of_nodes():
  memo = SharedLayouts(budget=100)
  graphs = [_dag(seed) for seed in range(4)]  # 40 nodes each
  for g in graphs:
    memo(*g)
    assert memo.used <= 100
  memo(*graphs[3])  # kept (the latest)
  memo(*graphs[0])  # pushed out by the third: laid out again
  assert (memo.laid, memo.shared, memo.used) == (5, 1, 80)


def test_the_export_with_shared_layouts_is_the_export_without(tmp_path, monkeypatch):
  """Each rewrite's step-0 graph is a chain of the same shape under its own ids: laid out once, the export the
  same."""
  path = rebuilding_rewrites(tmp_path / "r.vztrace", depth=12, steps=4, rewrites=3)
  work = Work()
  with OfflineApi(path) as api:
    got = collect(api, work=work)
  assert (work.graphs, work.shared) == (3, 2)
  monkeypatch.setattr(workers, "SharedLayouts", lambda: SharedLayouts(budget=0))  # (remembers nothing)
  alone = Work()
  with OfflineApi(path) as api:
    assert collect(api, work=alone) == got
  assert (alone.graphs, alone.shared) == (3, 0)
