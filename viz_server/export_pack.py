"""The single-file export's data in a form that deflates small: columns instead of rows, ids and coordinates as
differences, and what one step repeats of the step before left out. The page's decoder (viz_server/export_unpack.js)
rebuilds what viz_server/export.py's collect made; `unpack` here is the same decoder, for the tests.

- A node id: itself, or -(k + 1) for replay's k-th fresh id of a rewrite (FRESH_BASE + k); an id column holds the
  differences of consecutive ids (replay numbers its nodes in order).
- A coordinate column: the differences of 10x its values when each value is a whole number of tenths (the layout's
  precision), else the values as they are.
- A step's added node at the place of a node the same step removed (a rewritten node's new version, most of them)
  names that node (`ref`, its 1-based position in `nodes_removed`) instead of its x and y; a replay-made node whose
  fixed fields are the removed node's, its sources those sources with this step's replacements, is `derived`.
- A step's `from`, `to`, `match.k` and added nodes' `created` are the step's number; its `added` and `changed` are
  flags on its added nodes (in their order: the views use them as sets).
- Each rewrite says where its steps start in every column (`at`), so the page decodes a rewrite when it is first
  shown: decoding all of the demo's steps at once took the page 0.4-0.6 s.
The demo's page went from 7.9x to under 3x its trace (bench/bench_export_size.py), with the structural hashes no
longer embedded (the page computes them: viz_server/export_hash.js)."""
from __future__ import annotations

import itertools
from typing import Any

from viz_server.replay import FRESH_BASE  # (the ids of nodes a rewrite's replay made: their meaning is per rewrite)

FIELDS = ("op", "dtype", "arg", "label", "cat", "w", "h", "src", "consts")  # a graph node's fields fixed by its id
NUMERIC = ("w", "h")
_SRC = FIELDS.index("src")


def enc_id(i: int) -> int:
  return i if i < FRESH_BASE else -(i - FRESH_BASE) - 1


def dec_id(e: int) -> int:
  return e if e >= 0 else FRESH_BASE - e - 1


def _diffs(xs: list[int]) -> list[int]:
  return [b - a for a, b in itertools.pairwise([0, *xs])]


def _sums(ds: list[int]) -> list[int]:
  return list(itertools.accumulate(ds))


def ids_col(ids: list[int]) -> list[int]:
  return _diffs([enc_id(i) for i in ids])


def ids_of(col: list[int]) -> list[int]:
  return [dec_id(e) for e in _sums(col)]


def num_col(xs: list) -> dict:
  """Numbers as differences of tenths when every one is a whole number of tenths, else as they are."""
  tenths = []
  for x in xs:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
      return {"r": xs}
    n = round(x * 10)
    if abs(n) >= 2 ** 53 or n / 10 != x:
      return {"r": xs}
    tenths.append(n)
  return {"t": _diffs(tenths)}


def nums_of(col: dict) -> list:
  return [n / 10 for n in _sums(col["t"])] if "t" in col else list(col["r"])


def fields_cols(rows: list[list], ids: list[int] | None) -> dict:
  """Fixed-field rows as columns; with ids, a source as its distance below its user (trace nodes' sources are near)."""
  cols: dict[str, Any] = {k: [r[i] for r in rows] for i, k in enumerate(FIELDS)}
  for k in NUMERIC:
    cols[k] = num_col(cols[k])
  if ids is None:
    cols["src"] = [[enc_id(s) for s in r[_SRC]] for r in rows]
  else:
    cols["src"] = [[i - s for s in r[_SRC]] for i, r in zip(ids, rows)]
  return cols


def fields_rows(cols: dict, ids: list[int] | None) -> list[list]:
  num = {k: nums_of(cols[k]) for k in NUMERIC}
  n = len(cols["op"])
  src = ([[dec_id(s) for s in r] for r in cols["src"]] if ids is None
         else [[i - s for s in r] for i, r in zip(ids, cols["src"])])
  return [[num[k][j] if k in num else src[j] if k == "src" else cols[k][j] for k in FIELDS] for j in range(n)]


def nodes_col(nodes: list[list]) -> dict:
  """Packed graph nodes [id, x, y, created] as columns."""
  return {"id": ids_col([n[0] for n in nodes]), "x": num_col([n[1] for n in nodes]),
          "y": num_col([n[2] for n in nodes]), "c": num_col([n[3] for n in nodes])}


def nodes_of(col: dict) -> list[list]:
  cols = [ids_of(col["id"]), nums_of(col["x"]), nums_of(col["y"]), nums_of(col["c"])]
  return [[i, x, y, int(c) if isinstance(c, float) and c.is_integer() else c] for i, x, y, c in zip(*cols)]


class Bends:
  """A graph's bent edges [[edge index, route], ...] as [index differences, route numbers]: a route number is its
  distance below one past the highest route named so far (routes are numbered in order of first use, so a new one is
  0), counted over every graph in the order they are packed and unpacked: the step-0 graphs, then the steps."""

  def __init__(self) -> None:
    self.top = -1

  def pack(self, bent: list[list[int]]) -> list[list[int]]:
    rel = []
    for b in bent:
      rel.append(self.top + 1 - b[1])
      self.top = max(self.top, b[1])
    full = [j for j, b in enumerate(bent) if len(b) > 2]  # (export.leave_out_derived_edges: [k, r, 1])
    return [_diffs([b[0] for b in bent]), rel, *([full] if full else [])]

  def unpack(self, packed: list[list[int]]) -> list[list[int]]:
    out = []
    for k, rel in zip(_sums(packed[0]), packed[1]):
      r = self.top + 1 - rel
      self.top = max(self.top, r)
      out.append([k, r])
    for j in packed[2] if len(packed) > 2 else []:
      out[j].append(1)
    return out


class _Deltas:
  """The columns of every rewrite's steps, written in rewrite order."""

  def __init__(self) -> None:
    self.na: list[int] = []
    self.nr: list[int] = []
    self.rid: list[int] = []
    self.aid: list[int] = []
    self.ref: list[int] = []
    self.ax: list = []
    self.ay: list = []
    self.cr: list[list[int]] = []  # [index among all added nodes, created] where created is not the step
    self.fl: list[int] = []
    self.fd: list[int] = []  # per fresh node defined at a step: 1 derived from the node it replaces, 0 in fx
    self.fx: list[list] = []
    self.rest: list[dict] = []
    self.bends = Bends()

  def cols(self) -> dict:
    fx = fields_cols(self.fx, None)
    return {"na": self.na, "nr": self.nr, "rid": ids_col(self.rid), "aid": ids_col(self.aid), "ref": self.ref,
            "ax": num_col(self.ax), "ay": num_col(self.ay), "cr": self.cr, "fl": self.fl, "fd": self.fd, "fx": fx,
            "rest": self.rest}


def _flags(d: dict) -> list[int] | None:
  """1 for an added node in `added`, 2 in `changed`, else 0; None when the lists are not such a partition."""
  ids = [n[0] for n in d["nodes_added"]]
  added, changed = d.get("added"), d.get("changed")
  if not isinstance(added, list) or not isinstance(changed, list):
    return None
  a, c = set(added), set(changed)
  if len(a) != len(added) or len(c) != len(changed) or a & c or not (a | c) <= set(ids) or len(set(ids)) != len(ids):
    return None
  return [1 if i in a else 2 if i in c else 0 for i in ids]


def _derived(fixed: Any, rid: int, sub: dict[int, int]) -> list | None:
  """The fixed fields of a node made at the place of node rid: rid's own, its sources with this step's swaps."""
  f = fixed(rid)
  if f is None:
    return None
  return [*f[:_SRC], [sub.get(s, s) for s in f[_SRC]], *f[_SRC + 1:]]


def _pack_step(out: _Deltas, k: int, d: dict, pos: dict, fresh: dict, defined: set, statics: dict) -> None:
  fixed = (lambda i: fresh.get(i) if i >= FRESH_BASE else statics.get(i))
  removed = d["nodes_removed"]
  at = [pos.get(i) for i in removed]
  for i in removed:
    pos.pop(i, None)
  added = d["nodes_added"]
  refs = []
  sub: dict[int, int] = {}
  for n in added:
    xy = (n[1], n[2])
    j = next((j for j, p in enumerate(at) if p == xy), -1)
    refs.append(j + 1)
    if j >= 0:
      sub[removed[j]] = n[0]
  for n, ref in zip(added, refs):
    if n[3] != k:
      out.cr.append([len(out.aid), n[3]])
    out.aid.append(n[0])
    out.ref.append(ref)
    if not ref:
      out.ax.append(n[1])
      out.ay.append(n[2])
    pos[n[0]] = (n[1], n[2])
    if n[0] >= FRESH_BASE and n[0] not in defined:
      defined.add(n[0])
      ok = ref and _derived(fixed, removed[ref - 1], sub) == fresh[n[0]]
      out.fd.append(1 if ok else 0)
      if not ok:
        out.fx.append(fresh[n[0]])
  for nid, xy in d["nodes_moved"].items():
    pos[int(nid)] = tuple(xy)
  out.na.append(len(added))
  out.nr.append(len(removed))
  out.rid += removed
  flags = _flags(d)
  out.fl += flags or [0] * len(added)
  rest = {key: v for key, v in d.items() if key not in ("nodes_added", "nodes_removed")}
  if rest.get("from") == k - 1 and rest.get("to") == k:
    del rest["from"], rest["to"]
  if flags is not None:
    del rest["added"], rest["changed"]
  if "bent" in rest:
    rest["bent"] = out.bends.pack(rest["bent"])
  m = rest.get("match")
  if isinstance(m, dict) and m.get("k") == k:
    rest["match"] = {key: v for key, v in m.items() if key != "k"}
  out.rest.append(rest)


def pack(data: dict) -> dict:
  """collect()'s data (with its edges left out) in the packed form."""
  statics = {int(i): f for i, f in data["statics"].items()}
  ids = list(statics)
  out = _Deltas()
  g0s = [{**{k: v for k, v in g.items() if k != "nodes"}, "nodes": nodes_col(g["nodes"])} for g in data["g0"]]
  for g in g0s:
    if "bent" in g:
      g["bent"] = out.bends.pack(g["bent"])
  graphs = []
  for r, g in data["graphs"].items():
    fresh = {int(i): f for i, f in g["fresh"].items()}
    g0 = data["g0"][g["g0"]]
    pos = {n[0]: (n[1], n[2]) for n in g0["nodes"]}
    defined = {n[0] for n in g0["nodes"] if n[0] >= FRESH_BASE}
    early = [i for i in fresh if i in defined]
    start = [len(out.na), len(out.rid), len(out.aid), len(out.ax), len(out.fd), len(out.fx), out.bends.top]
    for k, d in enumerate(g["deltas"], 1):
      _pack_step(out, k, d, pos, fresh, defined, statics)
    late = [i for i in fresh if i not in defined]  # (fresh nodes no graph holds: none are made, kept as they are)
    extra = {key: v for key, v in g.items() if key not in ("g0", "deltas", "fresh")}
    graphs.append({"r": r, "g0": g["g0"], "n": len(g["deltas"]), "at": start, "f0": ids_col(early + late),
                   "f0x": fields_cols([fresh[i] for i in early + late], None), **extra})
  packed = {**{k: v for k, v in data.items() if k not in ("statics", "graphs", "g0", "routes")}, "format": 2,
            "statics": {"id": _diffs(ids), **fields_cols([statics[i] for i in ids], ids)}, "g0": g0s}
  if "routes" in data:  # (without: the edges are as the API drew them, export.leave_out_derived_edges not applied)
    routes = data["routes"]
    packed["routes"] = {"n": [len(r) for r in routes], "x": num_col([p[0] for r in routes for p in r]),
                        "y": num_col([p[1] for r in routes for p in r])}
  return {**packed, "graphs": graphs, "deltas": out.cols()}


def _rest_of(rest: dict, k: int, flags: list[int], ids: list[int], bends: Bends) -> dict:
  d = dict(rest)
  if "bent" in d:
    d["bent"] = bends.unpack(d["bent"])
  if "from" not in d:
    d["from"], d["to"] = k - 1, k
  if "added" not in d:
    d["added"] = [i for i, f in zip(ids, flags) if f == 1]
    d["changed"] = [i for i, f in zip(ids, flags) if f == 2]
  m = d.get("match")
  if isinstance(m, dict) and "k" not in m:
    d["match"] = {"k": k, **m}
  return d


def unpack(packed: dict) -> dict:
  """The packed form back as collect() made it (JSON's way: string keys, added/changed in node order)."""
  statics_ids = _sums(packed["statics"]["id"])
  statics = dict(zip(statics_ids, fields_rows(packed["statics"], statics_ids)))
  g0s = [{**{k: v for k, v in g.items() if k != "nodes"}, "nodes": nodes_of(g["nodes"])} for g in packed["g0"]]
  bends = Bends()
  for g in g0s:
    if "bent" in g:
      g["bent"] = bends.unpack(g["bent"])
  D = packed["deltas"]
  rid, aid, ax, ay = ids_of(D["rid"]), ids_of(D["aid"]), nums_of(D["ax"]), nums_of(D["ay"])
  fx = fields_rows(D["fx"], None)
  created = {i: c for i, c in D["cr"]}
  graphs = {}
  for g in packed["graphs"]:
    cur = dict(zip(("d", "r", "a", "xy", "fd", "fx"), g["at"]))  # (each rewrite can be read alone: the page's way)
    bends.top = g["at"][6]
    fresh = dict(zip(ids_of(g["f0"]), fields_rows(g["f0x"], None)))
    fixed = (lambda i, fresh=fresh: fresh.get(i) if i >= FRESH_BASE else statics.get(i))
    pos = {n[0]: (n[1], n[2]) for n in g0s[g["g0"]]["nodes"]}
    deltas = []
    for k in range(1, g["n"] + 1):
      s = cur["d"]
      removed = rid[cur["r"]:cur["r"] + D["nr"][s]]
      cur["r"] += D["nr"][s]
      at = [pos.get(i) for i in removed]
      for i in removed:
        pos.pop(i, None)
      added, sub, flags = [], {}, []
      for _ in range(D["na"][s]):
        a, ref = cur["a"], D["ref"][cur["a"]]
        if ref:
          x, y = at[ref - 1]
          sub[removed[ref - 1]] = aid[a]
        else:
          x, y = ax[cur["xy"]], ay[cur["xy"]]
          cur["xy"] += 1
        added.append([aid[a], x, y, created.get(a, k)])
        flags.append(D["fl"][a])
        cur["a"] += 1
      for n, a in zip(added, range(cur["a"] - len(added), cur["a"])):
        pos[n[0]] = (n[1], n[2])
        if n[0] >= FRESH_BASE and n[0] not in fresh:
          ref = D["ref"][a]
          if D["fd"][cur["fd"]]:
            fresh[n[0]] = _derived(fixed, removed[ref - 1], sub)
          else:
            fresh[n[0]] = fx[cur["fx"]]
            cur["fx"] += 1
          cur["fd"] += 1
      d = _rest_of(D["rest"][s], k, flags, [n[0] for n in added], bends)
      for nid, xy in d["nodes_moved"].items():
        pos[int(nid)] = tuple(xy)
      deltas.append({**d, "nodes_added": added, "nodes_removed": removed})
      cur["d"] += 1
    extra = {k: v for k, v in g.items() if k not in ("r", "g0", "n", "at", "f0", "f0x")}
    graphs[str(g["r"])] = {"g0": g["g0"], "deltas": deltas, "fresh": {str(i): f for i, f in fresh.items()}, **extra}
  if "routes" in packed:
    routes, flat_x, flat_y, j = [], nums_of(packed["routes"]["x"]), nums_of(packed["routes"]["y"]), 0
    for n in packed["routes"]["n"]:
      routes.append([[flat_x[i], flat_y[i]] for i in range(j, j + n)])
      j += n
    graphs_routes = {"routes": routes}
  else:
    graphs_routes = {}
  rest = {k: v for k, v in packed.items() if k not in ("statics", "graphs", "g0", "routes", "deltas")}
  return {**rest, "format": 1, "statics": {str(i): f for i, f in statics.items()}, "g0": g0s, "graphs": graphs,
          **graphs_routes}
