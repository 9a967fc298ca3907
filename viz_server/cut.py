"""The part of a graph too big to lay out whole that the viewer shows (issue 14): the nodes nearest what a step did.

A graph of more than MAX_GRAPH_NODES nodes is not laid out whole (a layout of 20,000 nodes takes seconds); the
viewer shows the CUT_NODES nodes nearest the step's change instead: breadth-first over sources and users from the
graph's root and the nodes the step added or changed, so the answer is bounded in nodes, bytes and work whatever the
graph's size. Edges to nodes left out are counted per shown node (its stubs). Both bounds are read at call time."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable

from viz_server.layout import Layout

MAX_GRAPH_NODES = 20_000  # a graph of more nodes is cut (~250 bytes each as JSON; laid out whole up to this)
CUT_NODES = 2_000  # nodes of a cut graph (its full layout takes about a second)


def too_big(n: int) -> bool:
  return n > MAX_GRAPH_NODES


def limit() -> int:
  """The nodes a cut graph shows (never more than a graph may have uncut)."""
  return min(CUT_NODES, MAX_GRAPH_NODES)


@dataclass
class CutLayout(Layout):
  """The layout of a cut graph's shown nodes, with what the answers say about the cut."""
  shown: frozenset[int] = frozenset()
  total: int = 0  # the nodes of the whole graph
  around: list[int] = field(default_factory=list)  # the nodes the window grew from (root, then the step's nodes)
  stubs: dict[int, tuple[int, int]] = field(default_factory=dict)  # shown node -> (sources, users) left out
  base: int = -1  # the step it was derived from (-1: a layout of its own)

  def info(self) -> dict:
    """The `cut` entry of graph and delta answers."""
    return {"shown": len(self.shown), "total": self.total, "around": self.around,
            "stubs": {str(n): list(s) for n, s in sorted(self.stubs.items())}}


def window(members: frozenset[int], seeds: Iterable[int], src: Callable[[int], tuple[int, ...]],
           size: int) -> tuple[list[int], dict[int, tuple[int, int]]]:
  """Up to `size` nodes of the graph `members`, nearest the seeds first (breadth-first over sources, then users, in
  id order: the same graph and seeds give the same window), and the stubs of the chosen nodes: (sources, users)
  left out, counted per edge."""
  users: dict[int, list[int]] = {}
  for n in sorted(members):
    for s in src(n):
      users.setdefault(s, []).append(n)
  chosen: dict[int, None] = {}
  queue = deque(s for s in dict.fromkeys(seeds) if s in members)
  while queue and len(chosen) < size:
    x = queue.popleft()
    if x in chosen:
      continue
    chosen[x] = None
    queue.extend(s for s in src(x) if s not in chosen)
    queue.extend(u for u in users.get(x, ()) if u not in chosen)
  stubs = {}
  for n in chosen:
    outside = (sum(s not in chosen for s in src(n)), sum(u not in chosen for u in users.get(n, ())))
    if outside != (0, 0):
      stubs[n] = outside
  return list(chosen), stubs
