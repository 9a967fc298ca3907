"""Diffs between two graphs from traces: a unified text diff of their printed forms and a structural node diff.

A graph is printed one line per node, sources before users, in depth-first order from the root:

  3f2a9c01 ADD            int32      (a1b2c3d4, 0e9f8a7b)  arg

Each node is labelled by a short structural hash (of op, dtype, arg and its sources' hashes) instead of a running
number, so inserting or removing a node changes only the lines of that node and of the nodes above it, and the same
subgraph prints the same in any trace, rewrite or kernel.

A graph of more than MAX_DIFF_NODES nodes is diffed summarized (like viz_server.cut for /graph): both graphs are
walked and hashed whole (linear: two 100,000-node graphs in ~0.8 s of CPU on a loaded 2-core machine, where the whole
diff took 1.4 s and answered up to 39 MB), but what is printed, listed and drawn is each side's SUMMARY_NODES
nodes not in the other graph nearest its root (what differs is always a part around the root: a node above one that
differs differs too), with their sources as context, and the answer says how many of how many.
"""
from __future__ import annotations

import difflib
import hashlib
from collections import deque
from typing import Callable, Container, Hashable, Iterable

from viz_server import gone, place
from viz_server.labels import MAX_FIELD_CHARS, clip_fields, node_json, short_arg
from viz_server.layout import Layout, layout_graph
from viz_server.lru import LRU
from viz_server.nodes import Node
from viz_server.place import MASSIVE, Bands, Rows

NodeGetter = Callable[[int], "Node | None"]
# the main view's layout of B's graph with its row index and bands (StepGraphs.reusable), or None; asked only when
# a drawing is needed and not cached
BaseGetter = Callable[[], "tuple[Layout, Rows, Bands] | None"]
HASH_CHARS = 8
MAX_DIFF_NODES = 20_000  # graphs up to this many nodes are diffed whole (cut.MAX_GRAPH_NODES: the same bound)
SUMMARY_NODES = 2_000  # past it, the nodes only in one graph printed, listed and drawn per side (cut.CUT_NODES)
MAX_WALK_NODES = 2_000_000  # nodes of one graph walked and hashed (store.MAX_INDEX_RECORDS: no index holds more)
MAX_LINE_CHARS = 16 << 10  # of one printed line (op, dtype and arg are cut to MAX_FIELD_CHARS; a node's sources not)
CHECK_EVERY = 4096  # nodes walked or hashed between two looks at whether the request's client has gone
MAX_DRAW_NODES = 3_000  # a fallback full layout of the union takes seconds past ~2,000 nodes: past this, lists only
DRAWN_CACHE_NODES = 15_000  # drawn nodes kept by a drawn_cache (~2 KB each as dicts, with their edges)


class DiffError(ValueError):
  """A graph that cannot be diffed (too big, or it names nodes the trace does not define)."""


class DiffTooBig(DiffError):
  """A graph of more than MAX_WALK_NODES nodes."""


def drawn_cache(budget: int = DRAWN_CACHE_NODES) -> LRU:
  """Drawn diffs (draw_diff answers) by a key naming both points, bounded by the number of nodes held (put weighs a
  drawing by its nodes). Only answers that cannot change go in (points of ended traces): the caller decides by
  passing a key or not."""
  return LRU(budget)


def walk(root: int, get: NodeGetter) -> tuple[list[int], dict[int, Node]]:
  """Ids reachable from root, sources first (iterative depth-first, sources in order), with their nodes (each looked
  up once). Raises DiffTooBig past MAX_WALK_NODES nodes, ClientGone once the request's client has gone."""
  out: list[int] = []
  nodes: dict[int, Node] = {}
  done: set[int] = set()
  stack: list[tuple[int, bool]] = [(root, False)]
  limit, tick = MAX_WALK_NODES, 0
  while stack:
    x, expanded = stack.pop()
    if x in done:
      continue
    if expanded:
      done.add(x)
      out.append(x)
      continue
    if x in nodes:  # met again while its sources are still being walked: a cycle, which a trace cannot mean
      continue
    node = get(x)
    if node is None:
      raise DiffError(f"node {x} is not defined in the trace")
    nodes[x] = node
    if len(nodes) > limit:
      raise DiffTooBig(f"graph has more than {limit:,} nodes")
    tick += 1
    if tick % CHECK_EVERY == 0:
      gone.check()
    stack.append((x, True))
    stack.extend((s, False) for s in reversed(node[3]) if s not in done)
  return out, nodes


def toposort(root: int, get: NodeGetter) -> list[int]:
  """Ids reachable from root, sources first (see walk)."""
  return walk(root, get)[0]


def _digests(order: list[int], nodes: dict[int, Node]) -> dict[int, bytes]:
  """Each node's structural hash (of op, dtype, arg, each length-prefixed, then its sources' hashes), as bytes."""
  out: dict[int, bytes] = {}
  enc: dict[str, bytes] = {}  # op and dtype texts repeat: encode each once
  for i, x in enumerate(order):
    op, dtype, arg, src = nodes[x]
    parts = []
    for text in (op, dtype, arg):
      b = enc.get(text)
      if b is None:
        raw = text.encode("utf-8", "surrogatepass")
        b = enc[text] = len(raw).to_bytes(8, "little") + raw
      parts.append(b)
    parts.extend(out[s] for s in src)
    out[x] = hashlib.blake2b(b"".join(parts), digest_size=16).digest()
    if i % CHECK_EVERY == CHECK_EVERY - 1:
      gone.check()
  return out


class _Hex(dict):
  """Hex digests by node, made from the bytes ones when first asked for (a summarized diff prints few nodes)."""

  def __init__(self, digests: dict[int, bytes]) -> None:
    super().__init__()
    self.digests = digests

  def __missing__(self, x: int) -> str:
    h = self[x] = self.digests[x].hex()
    return h


def structural_hashes(order: list[int], get: NodeGetter) -> dict[int, str]:
  """A hex digest per node that depends only on its structure (not on ids)."""
  nodes = {x: get(x) for x in order}
  return {x: d.hex() for x, d in _digests(order, nodes).items()}  # type: ignore[arg-type]


def print_graph(order: list[int], get: NodeGetter, hashes: dict[int, str]) -> list[str]:
  lines = []
  for x in order:
    op, dtype, arg, src = get(x)  # type: ignore[misc]
    srcs = ", ".join(hashes[s][:HASH_CHARS] for s in src)
    tail = "" if arg == "None" else "  " + short_arg(arg, MAX_FIELD_CHARS).replace("\n", "\\n")
    op, dtype = short_arg(op, MAX_FIELD_CHARS), short_arg(dtype, MAX_FIELD_CHARS)
    lines.append(short_arg(f"{hashes[x][:HASH_CHARS]} {op:<14s} {dtype:<10s} ({srcs}){tail}", MAX_LINE_CHARS))
  return lines


def draw_diff(oa: list[int], ga: NodeGetter, ha: dict[int, str], ob: list[int], gb: NodeGetter,
              hb: dict[int, str], base: tuple[Layout, Rows, Bands] | None = None,
              in_a: set[str] | None = None) -> dict:
  """The union of two graphs drawn as one: B's nodes (side "b" or "both") and A's nodes not in B (side "a"), the
  latter attached to the B nodes of equal structure they use. Node ids are B's ids; an A-only node keeps its A id
  unless B uses it (different traces or replays share id ranges), then it gets a free one. `node` is the id in its
  own graph.

  base: the main view's layout of B's graph (with its row index and bands). B's nodes and edges keep it exactly and
  the A-only nodes are placed into it by viz_server.place as a step's new nodes are (below their sources, in free
  spots, nothing moves). Without one whose nodes are B's, or with more A-only nodes than place.MASSIVE's rule
  lets a step place one by one, the union gets a full layout_graph (not seeded with base: that takes ~2.5x as long
  on sort-trace graphs of 3,000 nodes). in_a: the hashes A has, where oa is not all of A (a summarized diff)."""
  b_ids, set_a = set(ob), set(ha.values()) if in_a is None else in_a
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
  too many A-only nodes to place one by one (place.MASSIVE's rule for a step's new nodes)."""
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


class _Side:
  """One graph of a diff: its nodes in walk order (sources first), their structural hashes, and the set of them."""

  def __init__(self, root: int, get: NodeGetter, label: str) -> None:
    self.root, self.label = root, label
    self.order, self.nodes = walk(root, get)
    self.digests = _digests(self.order, self.nodes)
    self.hex = _Hex(self.digests)
    self.has = set(self.digests.values())

  def only(self, other: "_Side") -> list[int]:
    """Its nodes whose structure the other graph does not have, in its order."""
    return [x for x in self.order if self.digests[x] not in other.has]

  def in_order(self, ids: Iterable[int], context: Container[bytes] = (), most: int = 0) -> list[int]:
    """ids in its order, and at most `most` other nodes whose hashes are in `context`."""
    keep, out = set(ids), []
    for x in self.order:
      if x in keep or (most and self.digests[x] in context):
        out.append(x)
        if x not in keep:
          most -= 1
    return out

  def nearest_only(self, other: "_Side", limit: int) -> list[int]:
    """At most `limit` of its nodes that the other graph lacks, nearest its root (breadth-first over sources), in its
    order. A node over one the other lacks is lacked too, so they all hang from the root through such nodes."""
    chosen: dict[int, None] = {}
    queue = deque([self.root] if self.digests[self.root] not in other.has else [])
    while queue and len(chosen) < limit:
      x = queue.popleft()
      if x not in chosen:
        chosen[x] = None
        queue.extend(s for s in self.nodes[x][3] if s not in chosen and self.digests[s] not in other.has)
    return self.in_order(chosen)

  def context(self, shown: list[int], other: "_Side", limit: int) -> set[bytes]:
    """The hashes of the sources of the nodes shown that both graphs have (at most `limit`): a summarized diff
    prints those nodes on both sides, around what differs."""
    out: set[bytes] = set()
    for x in shown:
      for s in self.nodes[x][3]:
        d = self.digests[s]
        if d in other.has:
          out.add(d)
          if len(out) >= limit:
            return out
    return out

  def listed(self, ids: list[int]) -> list[dict]:
    """The answer's only_a / only_b entries."""
    return [{"id": x, **clip_fields(*self.nodes[x][:3]), "hash": self.hex[x][:HASH_CHARS]} for x in ids]

  def cut_to(self, ids: Iterable[int], keep: Callable[[int], bool]) -> NodeGetter:
    """A getter of the nodes `ids` whose sources are only those `keep` takes (a summarized diff draws a part)."""
    nodes = self.nodes
    cut = {x: (*nodes[x][:3], tuple(s for s in nodes[x][3] if keep(s))) for x in ids}
    return cut.get  # type: ignore[return-value]


def _unified(pa: list[str], pb: list[str], la: str, lb: str, context: int) -> tuple[list[str], list[dict]]:
  udiff = list(difflib.unified_diff(pa, pb, fromfile=la, tofile=lb, lineterm="", n=context))
  lines = []
  for i, line in enumerate(udiff):
    if i < 2 and (line.startswith("---") or line.startswith("+++")):
      continue
    kind = line[:1] if line[:1] in ("+", "-", "@") else " "
    lines.append({"kind": kind, "text": line if kind == "@" else line[1:]})
  return udiff, lines


def diff_graphs(a: tuple[int, NodeGetter, str], b: tuple[int, NodeGetter, str], context: int = 3,
                draw: bool = False, base: BaseGetter | None = None,
                cache: tuple[LRU, Hashable] | None = None) -> dict:
  """{text, lines, graph, summary} for two graphs given as (root, node getter, label); with draw, graph.drawn is the
  union drawn (draw_diff, into the layout base returns when given), or null when it has more than MAX_DRAW_NODES
  nodes. A graph of more than MAX_DIFF_NODES nodes makes the diff summarized (module docstring): `summary` says, per
  side, its nodes, those the other graph lacks and how many of them are shown (else it is null).
  cache: (cache, key) to keep and reuse the drawing under key (only for points whose graphs cannot change)."""
  A, B = _Side(*a), _Side(*b)
  summary = None
  if len(A.order) > MAX_DIFF_NODES or len(B.order) > MAX_DIFF_NODES:
    limit = SUMMARY_NODES
    shown_a, shown_b = A.nearest_only(B, limit), B.nearest_only(A, limit)
    around = A.context(shown_a, B, limit) | B.context(shown_b, A, limit)
    print_a, print_b = A.in_order(shown_a, around, 2 * limit), B.in_order(shown_b, around, 2 * limit)
    summary = {side: {"nodes": len(g.order), "only": len(g.only(h)), "shown": len(shown)}
               for side, g, h, shown in (("a", A, B, shown_a), ("b", B, A, shown_b))}
    summary["limit"] = limit
    base = None  # B is not drawn whole, so not as the main view draws it
  else:
    shown_a, shown_b, print_a, print_b = A.only(B), B.only(A), A.order, B.order
  udiff, lines = _unified(print_graph(print_a, A.nodes.get, A.hex), print_graph(print_b, B.nodes.get, B.hex),
                          A.label, B.label, context)
  graph = {"only_a": A.listed(shown_a), "only_b": B.listed(shown_b), "both": len(A.has & B.has)}
  if draw:
    drawn = None
    if len(print_b) + len(shown_a) <= MAX_DRAW_NODES:
      drawn = cache[0].get(cache[1]) if cache is not None else None
      if drawn is None:
        drawn = _draw(A, B, shown_a, print_b, summary is not None, base)
        if cache is not None:
          cache[0].put(cache[1], drawn, len(drawn["nodes"]))
    graph["drawn"] = drawn
  return {"text": "\n".join(udiff), "lines": lines, "graph": graph, "summary": summary}


def _draw(A: _Side, B: _Side, only_a: list[int], drawn_b: list[int], part: bool, base: BaseGetter | None) -> dict:
  """draw_diff of B's nodes drawn_b and A's only_a; part: those are not whole graphs, so each node keeps only the
  sources drawn too."""
  in_a = {B.hex[x] for x in drawn_b if B.digests[x] in A.has}
  if not part:
    return draw_diff(A.order, A.nodes.get, A.hex, B.order, B.nodes.get, B.hex, base() if base is not None else None,
                     in_a=in_a)
  keep_b = set(drawn_b)
  drawn = {B.digests[x] for x in drawn_b} | {A.digests[x] for x in only_a}
  ga = A.cut_to(only_a, lambda s: A.digests[s] in drawn)
  gb = B.cut_to(drawn_b, keep_b.__contains__)
  return draw_diff(only_a, ga, A.hex, drawn_b, gb, B.hex, None, in_a=in_a)
