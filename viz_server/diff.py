"""Diffs between two graphs from traces: a unified text diff of their printed forms and a structural node diff.

A graph is printed one line per node, sources before users, in depth-first order from the root:

  3f2a9c01 ADD            int32      (a1b2c3d4, 0e9f8a7b)  arg

Each node is labelled by a short structural hash (of op, dtype, arg and its sources' hashes) instead of a running
number, so inserting or removing a node changes only the lines of that node and of the nodes above it, and the same
subgraph prints the same in any trace, rewrite or kernel.
"""
from __future__ import annotations

import difflib
import hashlib
import threading
from collections import OrderedDict
from typing import Callable, Hashable

from viz_server import place
from viz_server.graphview import MASSIVE, MAX_FIELD_CHARS, clip_fields, node_json, short_arg
from viz_server.layout import Layout, layout_graph
from viz_server.nodes import Node
from viz_server.place import Bands, Rows

NodeGetter = Callable[[int], "Node | None"]
# the main view's layout of B's graph with its row index and bands (StepGraphs.reusable), or None; asked only when
# a drawing is needed and not cached
BaseGetter = Callable[[], "tuple[Layout, Rows, Bands] | None"]
HASH_CHARS = 8
MAX_DIFF_NODES = 20_000  # the nodes of one graph compared (api.MAX_GRAPH_NODES: the same bound)
MAX_DRAW_NODES = 3_000  # a fallback full layout of the union takes seconds past ~2,000 nodes: past this, lists only
DRAWN_CACHE_NODES = 15_000  # drawn nodes kept by a DrawnCache (~2 KB each as dicts, with their edges)


class DiffError(ValueError):
  """A graph that cannot be diffed (too big, or it names nodes the trace does not define)."""


class DrawnCache:
  """Drawn diffs (draw_diff answers) by a key naming both points, LRU-bounded by the number of nodes held. Only
  answers that cannot change go in (points of ended traces): the caller decides by passing a key or not."""

  def __init__(self, budget: int = DRAWN_CACHE_NODES) -> None:
    self.budget = budget
    self.used = 0
    self.hits = self.misses = 0
    self._items: OrderedDict[Hashable, dict] = OrderedDict()
    self._lock = threading.Lock()

  def get(self, key: Hashable) -> dict | None:
    with self._lock:
      got = self._items.get(key)
      if got is None:
        self.misses += 1
        return None
      self.hits += 1
      self._items.move_to_end(key)
      return got

  def put(self, key: Hashable, drawn: dict) -> None:
    with self._lock:
      if key in self._items:
        return
      self._items[key] = drawn
      self.used += len(drawn["nodes"])
      while self.used > self.budget and len(self._items) > 1:
        _, old = self._items.popitem(last=False)
        self.used -= len(old["nodes"])

  def clear(self) -> None:
    with self._lock:
      self._items.clear()
      self.used = 0


def toposort(root: int, get: NodeGetter) -> list[int]:
  """Ids reachable from root, sources first (iterative depth-first, sources in order)."""
  out: list[int] = []
  done: set[int] = set()
  stack: list[tuple[int, bool]] = [(root, False)]
  while stack:
    x, expanded = stack.pop()
    if x in done:
      continue
    if expanded:
      done.add(x)
      out.append(x)
      if len(out) > MAX_DIFF_NODES:
        raise DiffError(f"graph has more than {MAX_DIFF_NODES} nodes")
      continue
    node = get(x)
    if node is None:
      raise DiffError(f"node {x} is not defined in the trace")
    stack.append((x, True))
    stack.extend((s, False) for s in reversed(node[3]) if s not in done)
  return out


def structural_hashes(order: list[int], get: NodeGetter) -> dict[int, str]:
  """A hex digest per node that depends only on its structure (not on ids)."""
  out: dict[int, str] = {}
  for x in order:
    op, dtype, arg, src = get(x)  # type: ignore[misc]
    h = hashlib.blake2b(digest_size=16)
    for part in (op, dtype, arg):
      b = part.encode("utf-8", "surrogatepass")
      h.update(len(b).to_bytes(8, "little"))
      h.update(b)
    for s in src:
      h.update(bytes.fromhex(out[s]))
    out[x] = h.hexdigest()
  return out


def print_graph(order: list[int], get: NodeGetter, hashes: dict[int, str]) -> list[str]:
  lines = []
  for x in order:
    op, dtype, arg, src = get(x)  # type: ignore[misc]
    srcs = ", ".join(hashes[s][:HASH_CHARS] for s in src)
    tail = "" if arg == "None" else "  " + short_arg(arg, MAX_FIELD_CHARS).replace("\n", "\\n")
    op, dtype = short_arg(op, MAX_FIELD_CHARS), short_arg(dtype, MAX_FIELD_CHARS)
    lines.append(f"{hashes[x][:HASH_CHARS]} {op:<14s} {dtype:<10s} ({srcs}){tail}")
  return lines


def draw_diff(oa: list[int], ga: NodeGetter, ha: dict[int, str], ob: list[int], gb: NodeGetter,
              hb: dict[int, str], base: tuple[Layout, Rows, Bands] | None = None) -> dict:
  """The union of two graphs drawn as one: B's nodes (side "b" or "both") and A's nodes not in B (side "a"), the
  latter attached to the B nodes of equal structure they use. Node ids are B's ids; an A-only node keeps its A id
  unless B uses it (different traces or replays share id ranges), then it gets a free one. `node` is the id in its
  own graph.

  base: the main view's layout of B's graph (with its row index and bands). B's nodes and edges keep it exactly and
  the A-only nodes are placed into it by viz_server.place as a step's new nodes are (below their sources, in free
  spots, nothing moves). Without one whose nodes are B's, or with more A-only nodes than graphview.MASSIVE's rule
  lets a step place one by one, the union gets a full layout_graph (not seeded with base: that takes ~2.5x as long
  on sort-trace graphs of 3,000 nodes)."""
  b_ids, set_a = set(ob), set(ha.values())
  by_hash: dict[str, int] = {}
  for x in ob:
    by_hash.setdefault(hb[x], x)
  draw_id: dict[str, int] = dict(by_hash)  # hash -> drawn id
  used = set(b_ids)
  fresh = max([*ob, *oa], default=0) + 1
  nodes: dict[int, dict] = {}
  sides: dict[int, tuple[str, int, str]] = {}
  edges: list[tuple[int, int]] = []
  only_a: list[int] = []  # drawn ids of the A-only nodes, sources first
  for x in ob:
    node = gb(x)
    nodes[x] = node_json(x, node)  # type: ignore[arg-type]
    sides[x] = ("both" if hb[x] in set_a else "b", x, hb[x])
    edges.extend((s, x) for s in node[3])  # type: ignore[index]
  for x in oa:
    if ha[x] in draw_id:
      continue
    if x in used:
      while fresh in used:
        fresh += 1
      d = fresh
    else:
      d = x
    used.add(d)
    draw_id[ha[x]] = d
    op, dtype, arg, src = ga(x)  # type: ignore[misc]
    dsrc = tuple(draw_id[ha[s]] for s in src)
    nodes[d] = node_json(d, (op, dtype, arg, dsrc))
    sides[d] = ("a", x, ha[x])
    edges.extend((s, d) for s in dsrc)
    only_a.append(d)
  lay = _place_a(base, nodes, only_a, ob) if base is not None else None
  if lay is None:
    lay = layout_graph({d: (n["w"], n["h"]) for d, n in nodes.items()}, edges)
  out_nodes, out_edges = [], []
  for d, n in nodes.items():
    x, y = lay.pos[d]
    side, own, hsh = sides[d]
    out_nodes.append({**n, "x": round(x, 1), "y": round(y, 1), "side": side, "node": own, "hash": hsh[:HASH_CHARS]})
    out_edges.extend({"src": s, "dst": d, "index": i, "points": [[round(px, 1), round(py, 1)] for px, py in
                                                                  lay.edges.get((s, d), ())]}
                     for i, s in enumerate(n["src"]))
  return {"nodes": out_nodes, "edges": out_edges, "width": round(lay.width, 1), "height": round(lay.height, 1)}


def _place_a(base: tuple[Layout, Rows, Bands], nodes: dict[int, dict], only_a: list[int],
             ob: list[int]) -> Layout | None:
  """B's layout with the A-only nodes placed into it, or None when base is not a layout of B's nodes or there are
  too many A-only nodes to place one by one (graphview.MASSIVE's rule for a step's new nodes)."""
  lay, rows, bands = base
  if len(lay.pos) != len(ob) or any(x not in lay.pos for x in ob):
    return None
  if len(only_a) > max(MASSIVE, len(ob) // 4):
    return None
  level = {d: i for i, d in enumerate(only_a)}  # sources first: place.derive places in this order
  pos, layer, edges, width, height, _, _ = place.derive(
    lay, rows, bands, only_a, (), {}, lambda d: tuple(nodes[d]["src"]), lambda d: (nodes[d]["w"], nodes[d]["h"]),
    level.__getitem__)
  return Layout(pos, layer, edges, width, height)


def diff_graphs(a: tuple[int, NodeGetter, str], b: tuple[int, NodeGetter, str], context: int = 3,
                draw: bool = False, base: BaseGetter | None = None,
                cache: tuple[DrawnCache, Hashable] | None = None) -> dict:
  """{text, lines, graph} for two graphs given as (root, node getter, label); with draw, graph.drawn is the union
  drawn (draw_diff, into the layout base returns when given), or null when it has more than MAX_DRAW_NODES nodes.
  cache: (cache, key) to keep and reuse the drawing under key (only for points whose graphs cannot change)."""
  (ra, ga, la), (rb, gb, lb) = a, b
  oa, ob = toposort(ra, ga), toposort(rb, gb)
  ha, hb = structural_hashes(oa, ga), structural_hashes(ob, gb)
  pa, pb = print_graph(oa, ga, ha), print_graph(ob, gb, hb)
  udiff = list(difflib.unified_diff(pa, pb, fromfile=la, tofile=lb, lineterm="", n=context))
  lines = []
  for i, line in enumerate(udiff):
    if i < 2 and (line.startswith("---") or line.startswith("+++")):
      continue
    kind = line[:1] if line[:1] in ("+", "-", "@") else " "
    lines.append({"kind": kind, "text": line if kind == "@" else line[1:]})
  set_a, set_b = set(ha.values()), set(hb.values())

  def nodes(order: list[int], get: NodeGetter, hashes: dict[int, str], other: set[str]) -> list[dict]:
    out = []
    for x in order:
      if hashes[x] not in other:
        op, dtype, arg, _ = get(x)  # type: ignore[misc]
        out.append({"id": x, **clip_fields(op, dtype, arg), "hash": hashes[x][:HASH_CHARS]})
    return out

  graph = {"only_a": nodes(oa, ga, ha, set_b), "only_b": nodes(ob, gb, hb, set_a), "both": len(set_a & set_b)}
  if draw:
    drawn = None
    if len(ob) + len(graph["only_a"]) <= MAX_DRAW_NODES:
      drawn = cache[0].get(cache[1]) if cache is not None else None
      if drawn is None:
        drawn = draw_diff(oa, ga, ha, ob, gb, hb, base() if base is not None else None)
        if cache is not None:
          cache[0].put(cache[1], drawn)
    graph["drawn"] = drawn
  return {"text": "\n".join(udiff), "lines": lines, "graph": graph}
