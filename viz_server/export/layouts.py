"""Step-0 layouts shared between an export's rewrites (issue 30): a rewrite's input graph is often laid out already
under other ids (the same kernel's passes on each schedule's copy, a training step's layers). layout_graph depends
only on the boxes' sizes in id order and the edges between their indices, so a graph equal to one laid out before up
to an order-preserving renaming of its ids gets that layout renamed: the same positions and routes the viewer
computes, without the crossing reduction. The routes come slim (layout_graph's slim=True, as the views keep them:
StepGraphs._full slimmed full ones before, making and dropping every route's inner points)."""
from __future__ import annotations

import hashlib
from typing import Callable

from viz_server.layout import Layout, layout_graph
from viz_server.lru import LRU

# node positions the memo keeps (~1 KB each with their routes in a training step's graphs): the graphs that repeat are
# small ones (gpt_step tiny: 442 of its 1,290 step-0 graphs, 8% of their nodes), so this keeps nearly every repeat
# (434 of the 442; with no bound 442) for ~25 MB
MEMO_NODES = 25_000


class SharedLayouts:
  """layout_graph(sizes, edges, slim=True) remembered by the graph's shape (an LRU bounded by the node positions it
  holds); `laid` counts the layouts computed, `shared` those renamed from one remembered."""

  def __init__(self, budget: int = MEMO_NODES) -> None:
    self.laid = self.shared = 0
    self._memo = LRU(budget, budget)  # shape's digest -> (ids, layout), weighed by its nodes

  @property
  def used(self) -> int:
    return self._memo.used

  def __call__(self, sizes: dict[int, tuple[float, float]], edges: list[tuple[int, int]],
               pause: Callable[[], None] | None = None) -> Layout:
    ids = sorted(sizes)
    index = {v: i for i, v in enumerate(ids)}
    if any(s not in index or d not in index for s, d in edges):  # (a step's graph holds its nodes' sources)
      self.laid += 1
      return layout_graph(sizes, edges, pause=pause, slim=True)
    shape = (tuple(sizes[v] for v in ids), tuple((index[s], index[d]) for s, d in edges))
    key = hashlib.blake2b(repr(shape).encode(), digest_size=16).digest()  # (held, not the shape: a tenth the bytes)
    got = self._memo.get(key)
    if got is None:
      lay = layout_graph(sizes, edges, pause=pause, slim=True)
      self.laid += 1
      self._memo.put(key, (ids, lay), len(ids))
      return lay
    self.shared += 1
    return _renamed(*got, ids)


def _renamed(old: list[int], lay: Layout, ids: list[int]) -> Layout:
  """lay (of the graph with ids old) for the graph with ids `ids`, old[i] renamed ids[i] (the order kept, so the
  maps keep their order too)."""
  to = dict(zip(old, ids))
  return Layout({to[v]: p for v, p in lay.pos.items()}, {to[v]: ly for v, ly in lay.layer.items()},
                {(to[s], to[d]): pts for (s, d), pts in lay.edges.items()}, lay.width, lay.height)
