"""A rewrite's graphs as the export holds them: its step-0 graph and one compact delta per step, nodes with their
fixed fields once per id and edges without what the page derives (GraphPacker, leave_out_derived_edges). The page's
graphs.js rebuilds GET /rewrites/<r>/graph and /delta (viz_server/stepgraphs.py) from this form."""
from __future__ import annotations

import hashlib
import json
import operator
from itertools import chain
from typing import Any, Iterable, Iterator, Mapping

from viz_server.export import ExportError
from viz_server.export.pack import FIELDS as STATIC
from viz_server.export.pack import FRESH_BASE
from viz_server.stepgraphs import straight

_SRC = STATIC.index("src")
_FIXED = operator.itemgetter(*STATIC[:-1])  # (a node's fixed fields but its site: one C call, not a generator)


class GraphPacker:
  """A graph node as [id, x, y, created] with its fixed fields once per id (per rewrite for replay-made ids), an edge
  as [src, dst, index] when it runs straight from center to center, else [src, dst, index, points]."""

  def __init__(self, nodes: Any) -> None:
    self.nodes = nodes  # the trace's node getter (sources of graph nodes are graph nodes: asked only as a fallback)
    self.statics: dict[int, list] = {}
    self.graphs: list[dict] = []  # distinct step-0 graphs
    self.last: list[list] = []  # the packed nodes of the step-0 graph stream made last
    self._graph_ids: dict[bytes, int] = {}

  def _node(self, n: dict, fresh: dict[int, list]) -> list:
    return self._keep(n, [*_FIXED(n), n.get("site")], fresh)  # (no `site`: none sent)

  def _keep(self, n: dict, fixed: list, fresh: dict[int, list]) -> list:
    """Node n packed as [id, x, y, created], its fixed fields kept once per id (an id seen in two forms: an error)."""
    table = fresh if n["id"] >= FRESH_BASE else self.statics
    if table.setdefault(n["id"], fixed) != fixed:
      raise ExportError(f"node {n['id']} has two different forms in the API's graphs")
    return [n["id"], n["x"], n["y"], n["created"]]

  @staticmethod
  def _edge(e: dict, pos: dict[int, list]) -> list:
    pts = e.get("points")  # (none: a compact answer's straight edge)
    if pts is None or straight(pts, pos.get(e["src"]), pos.get(e["dst"])):
      return [e["src"], e["dst"], e["index"]]
    return [e["src"], e["dst"], e["index"], pts]

  def _fixed(self, nid: int, fresh: dict[int, list]) -> list | None:
    return (fresh if nid >= FRESH_BASE else self.statics).get(nid)

  def _like(self, n: dict, fresh: dict[int, list], ops: dict[int, str]) -> list:
    """A compact delta's rebuilt node {id, like, src, x, y, created} packed: its fixed fields like's (the same op,
    dtype, arg and call site) with its own sources and the consts among them (ops: the op of each node the same step
    added, which the tables do not hold yet). The full answer's dict is never made: a gradient's steps rebuild
    hundreds of nodes each (a training step's export: 300k)."""
    fixed = self._fixed(n["like"], fresh)
    if fixed is None:
      raise ExportError(f"node {n['id']} is rebuilt from node {n['like']}, which no graph of the rewrite holds")
    fx = self._fixed
    consts = [s for s in n["src"] if (ops[s] if s in ops else (fx(s, fresh) or ("",))[0]) == "CONST"]
    return self._keep(n, [*fixed[:_SRC], list(n["src"]), consts, fixed[-1]], fresh)

  def rewrite(self, g0: dict, deltas: Iterable[dict], rules: dict[int, dict]) -> dict:
    """A rewrite's graphs held whole: {g0, deltas, fresh} (stream's, every step in a list)."""
    index, fresh, steps = self.stream(g0, deltas, rules)
    return {"g0": index, "deltas": list(steps), "fresh": fresh}

  def stream(self, g0: dict, deltas: Iterable[dict], rules: dict[int, dict]
             ) -> tuple[int, dict[int, list], Iterator[dict]]:
    """A rewrite's graphs: its step-0 graph (an index into self.graphs: equal graphs are stored once) and its deltas,
    without what the shim derives: the in-edges of removed nodes, `removed` when it names the removed nodes, and a
    match's rule when it is its pattern's (rules: pattern id -> {file, line, name}). A delta may be compact (the
    API's `compact=1`): a rebuilt node's in-edges it does not list are its old node's (`like`), made here from the
    packed edges of the step before, so the cost of a step is what it changed, not the routes it kept (issue 30: a
    gradient's every step rebuilt ~200 nodes whose long routes were sent, rounded and packed again: 1 MB a step).
    Returns (the step-0 graph's index, the fixed fields of replay-made ids, filled as steps are packed, the packed
    steps: an iterator, one step held at a time)."""
    fresh: dict[int, list] = {}
    pos = {n["id"]: [n["x"], n["y"]] for n in g0["nodes"]}
    graph = {**g0, "nodes": [self._node(n, fresh) for n in g0["nodes"]],
             "edges": [self._edge(e, pos) for e in g0["edges"]]}
    del graph["rewrite"]
    ins: dict[int, dict[int, list]] = {}  # node -> its packed in-edges by index, at the step packed last
    for e in graph["edges"]:
      ins.setdefault(e[1], {})[e[2]] = e
    key = hashlib.blake2b(json.dumps(graph, sort_keys=True).encode(), digest_size=16).digest()  # (not the text)
    index = self._graph_ids.setdefault(key, len(self.graphs))
    if index == len(self.graphs):
      self.graphs.append(graph)
    self.last = graph["nodes"]
    return index, fresh, self._steps(deltas, rules, fresh, pos, ins)

  def _steps(self, deltas: Iterable[dict], rules: dict[int, dict], fresh: dict[int, list], pos: dict,
             ins: dict[int, dict[int, list]]) -> Iterator[dict]:
    for d in deltas:
      gone = set(d["nodes_removed"])
      before = {nid: pos.get(nid) for nid in (*gone, *map(int, d["nodes_moved"]))}  # (where the old routes ran)
      for nid in gone:
        pos.pop(nid, None)
      pos.update((n["id"], [n["x"], n["y"]]) for n in d["nodes_added"])
      pos.update((int(nid), xy) for nid, xy in d["nodes_moved"].items())
      ops = {n["id"]: n["op"] if "like" not in n else (self._fixed(n["like"], fresh) or ("",))[0]
             for n in d["nodes_added"]}
      listed = {(e["dst"], e["index"]): self._edge(e, pos) for e in d["edges_added"]}
      for n in d["nodes_added"]:
        if "like" in n:
          self._inherit(n, ins.get(n["like"], {}), listed, pos, before)
      for nid in gone:
        ins.pop(nid, None)
      edges = [listed[k] for k in sorted(listed)]  # (the full answer's order: by node, then index)
      for e in edges:
        ins.setdefault(e[1], {})[e[2]] = e
      nodes = [self._like(n, fresh, ops) if "like" in n else self._node(n, fresh) for n in d["nodes_added"]]
      packed = {**d, "nodes_added": nodes, "edges_added": edges,
                "edges_removed": [e for e in d["edges_removed"] if e[1] not in gone]}
      if set(d["removed"]) == gone and len(d["removed"]) == len(gone):
        packed["removed"] = None
      m = d["match"]
      if m is not None and m.get("rule") == rules.get(m.get("pattern")):
        packed["match"] = {k: v for k, v in m.items() if k != "rule"}
      yield packed

  @staticmethod
  def _inherit(n: dict, old: dict[int, list], listed: dict, pos: dict, before: dict) -> None:
    """The in-edges of rebuilt node n that a compact delta leaves out: the route of its old node's edge at the same
    index (from that edge's source's center to the old node's, when it ran straight)."""
    nid, like = n["id"], n["like"]
    get = pos.get
    at, was = get(nid), before.get(like)  # (its center now, its old node's: the same for each in-edge)
    for i, s in enumerate(n["src"]):  # (~10 sources a rebuilt node in the demo's index folds: kept tight)
      key = (nid, i)
      if key in listed:
        continue
      e = old.get(i)
      if e is None:  # (the API lists every in-edge the old node cannot give)
        raise ExportError(f"node {nid}'s in-edge {i} is in neither the delta nor its old node {like}")
      if len(e) > 3:
        listed[key] = [s, nid, i] if straight(e[3], get(s), at) else [s, nid, i, e[3]]
      else:  # (straight() without making its two points' list)
        a = before[e[0]] if e[0] in before else get(e[0])
        listed[key] = [s, nid, i] if was == at and a == get(s) else [s, nid, i, [a, was]]


class EdgeStrip:
  """Leaves a graph's edges out where they are exactly the in-edges of its nodes (a step-0 graph's, or those a step
  added), source by source, as they always are: the shim makes them from the nodes' `src`, and `bent` keeps those
  that do not run straight, by position: [k, r], their points between the two nodes' centers `routes[r]` (one route
  is often drawn again in later steps and rewrites, further apart than deflate's 32 KB window reaches). The edges were
  about half the graphs' compressed bytes: the demo's page went from 13.4 to 7.9 times its trace
  (bench/bench_export_size.py). One graph at a time (the export strips each rewrite as it is packed); statics: the
  fixed fields of trace nodes by id (GraphPacker.statics)."""

  def __init__(self, statics: dict) -> None:
    self.statics = statics
    # a route's points as one flat tuple x0, y0, x1, y1... -> its number (numbered in order, so the keys are the
    # routes: no second copy of their points is held; flat, not a tuple per point: a training step's 77k routes took
    # 132 MB so, half of it the points' tuples)
    self._routes: dict[tuple, int] = {}

  @property
  def routes(self) -> list[list]:
    """The routes named so far, in order."""
    return [[[key[i], key[i + 1]] for i in range(0, len(key), 2)] for key in self._routes]

  def _route(self, points: list) -> int:
    key = tuple(chain.from_iterable(points))  # (a tuple, not the JSON text: 10% of a training step's export)
    if len(key) != 2 * len(points):  # (a point is [x, y]: what a route holds of it)
      key = tuple(chain.from_iterable((p[0], p[1]) for p in points))
    got = self._routes.get(key)
    if got is None:
      got = self._routes[key] = len(self._routes)
    return got

  def _bend(self, k: int, e: list, pos: dict) -> list[int]:
    """[k, r]: edge k's points are its source's center, routes[r], its user's center, as they nearly always are;
    else [k, r, 1]: its points are routes[r]."""
    pts = e[3]
    if len(pts) >= 2 and pts[0] == pos.get(e[0]) and pts[-1] == pos.get(e[1]):
      return [k, self._route(pts[1:-1])]
    return [k, self._route(pts), 1]

  def _strip(self, holder: dict, key: str, fresh: Mapping[int, list], pos: dict) -> None:
    edges, nodes = holder[key], holder["nodes" if key == "edges" else "nodes_added"]
    k, m = 0, len(edges)
    for n in nodes:  # the edges must be the nodes' in-edges, source by source, in order (compared as they come)
      nid = n[0]
      fixed = (fresh if nid >= FRESH_BASE else self.statics).get(nid)
      if fixed is None:
        return
      for i, s in enumerate(fixed[_SRC]):
        if k == m:
          return
        e = edges[k]
        if e[0] != s or e[1] != nid or e[2] != i:
          return
        k += 1
    if k == m:
      del holder[key]
      holder["bent"] = [self._bend(k, e, pos) for k, e in enumerate(edges) if len(e) > 3]

  def g0(self, g: dict) -> None:
    """A step-0 graph, in place (it holds trace nodes only: replay makes the others at later steps)."""
    self._strip(g, "edges", {}, {n[0]: [n[1], n[2]] for n in g["nodes"]})

  def steps(self, deltas: Iterable[dict], fresh: Mapping[int, list], g0: dict) -> Iterator[dict]:
    """A rewrite's deltas (GraphPacker.stream's), each stripped in place as it comes; fresh: the fixed fields of its
    replay-made ids (filled as its steps are made); g0: its step-0 graph."""
    pos = {n[0]: [n[1], n[2]] for n in g0["nodes"]}
    for d in deltas:  # (the places at the step, as GraphPacker.rewrite tracks them)
      for nid in d["nodes_removed"]:
        pos.pop(nid, None)
      pos.update((n[0], [n[1], n[2]]) for n in d["nodes_added"])
      pos.update((int(nid), list(xy)) for nid, xy in d["nodes_moved"].items())
      self._strip(d, "edges_added", fresh, pos)
      yield d


def leave_out_derived_edges(data: dict) -> dict:
  """collect()'s data with its graphs' edges left out where the page derives them (EdgeStrip), and `routes`."""
  strip = EdgeStrip(data["statics"])
  for g in data["g0"]:
    strip.g0(g)
  for r in data["graphs"].values():
    for _ in strip.steps(r["deltas"], r["fresh"], data["g0"][r["g0"]]):
      pass
  data["routes"] = strip.routes
  return data
