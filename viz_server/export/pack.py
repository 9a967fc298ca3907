"""The single-file export's data in a form that deflates small: columns instead of rows, ids and coordinates as
differences, and what one step repeats of the step before left out. The page's decoder (unpack.js) rebuilds
what collect.py made (tests/support/export_unpack.py is the same decoder in Python, for the tests).

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
longer embedded (the page computes them: hash.js)."""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Mapping

from viz_server.replay import FRESH_BASE  # (the ids of nodes a rewrite's replay made: their meaning is per rewrite)

# a graph node's fields fixed by its id; `site` (a trace node's call site, null where it has none) is the last: a
# replay-made node never has one
FIELDS = ("op", "dtype", "arg", "label", "cat", "w", "h", "src", "consts", "site")
NUMERIC = ("w", "h")
_SRC = FIELDS.index("src")


def enc_id(i: int) -> int:
  return i if i < FRESH_BASE else -(i - FRESH_BASE) - 1


def _diffs(xs: list[int]) -> list[int]:
  return [b - a for a, b in itertools.pairwise([0, *xs])]


def ids_col(ids: list[int]) -> list[int]:
  return _diffs([enc_id(i) for i in ids])


def num_col(xs: list) -> dict:
  """Numbers as differences of tenths when every one is a whole number of tenths, else as they are."""
  # (whole-column passes, not one loop with a check per value: 10% of the packing)
  if not all(type(x) is float or type(x) is int for x in xs):  # (bool is not a number here, nor a string)
    return {"r": xs}
  tenths = [round(x * 10) for x in xs]
  if any(abs(n) >= 2 ** 53 for n in tenths) or not all(n / 10 == x for n, x in zip(tenths, xs)):
    return {"r": xs}
  return {"t": _diffs(tenths)}


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


def nodes_col(nodes: list[list]) -> dict:
  """Packed graph nodes [id, x, y, created] as columns."""
  return {"id": ids_col([n[0] for n in nodes]), "x": num_col([n[1] for n in nodes]),
          "y": num_col([n[2] for n in nodes]), "c": num_col([n[3] for n in nodes])}


class Bends:
  """A graph's bent edges [[edge index, route], ...] as [index differences, route numbers]: a route number is its
  distance below one past the highest route named so far (routes are numbered in order of first use, so a new one is
  0), counted over every graph in the order they are packed and unpacked: the step-0 graphs, then the steps
  (unpack.js's `bends` reads them back)."""

  def __init__(self) -> None:
    self.top = -1

  def pack(self, bent: list[list[int]]) -> list[list[int]]:
    rel = []
    for b in bent:
      rel.append(self.top + 1 - b[1])
      self.top = max(self.top, b[1])
    full = [j for j, b in enumerate(bent) if len(b) > 2]  # (graphs.leave_out_derived_edges: [k, r, 1])
    return [_diffs([b[0] for b in bent]), rel, *([full] if full else [])]


class _Deltas:
  """The columns of every rewrite's steps, written in rewrite order."""

  def __init__(self) -> None:
    self.na: list[int] = []
    self.nr: list[int] = []
    # removed and added ids as ids_col makes them, as they come (each the difference from the one before, encoded):
    # small ints, where the ids themselves were ~40 bytes each (a training step's 1.9M each: ~150 MB of the export)
    self.rid: list[int] = []
    self.aid: list[int] = []
    self._rid_last = self._aid_last = 0
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
    return {"na": self.na, "nr": self.nr, "rid": self.rid, "aid": self.aid, "ref": self.ref,
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


def derived(fixed: Any, rid: int, sub: dict[int, int]) -> list | None:
  """The fixed fields of a replay-made node made at the place of node rid: rid's own, its sources with this step's
  swaps, and no call site."""
  f = fixed(rid)
  if f is None:
    return None
  return [*f[:_SRC], [sub.get(s, s) for s in f[_SRC]], *f[_SRC + 1:-1], None]


def _pack_step(out: _Deltas, k: int, d: dict, pos: dict, fresh: Mapping[int, list], defined: set,
               static: Callable[[int], list | None]) -> None:
  fixed = (lambda i: fresh.get(i) if i >= FRESH_BASE else static(i))
  removed = d["nodes_removed"]
  at = [pos.get(i) for i in removed]
  for i in removed:
    pos.pop(i, None)
  added = d["nodes_added"]
  refs = []
  sub: dict[int, int] = {}
  first: dict[tuple, int] = {}  # a removed node's place -> its first position in `removed` (a scan: quadratic)
  for j, p in enumerate(at):
    if p is not None:
      first.setdefault(p, j)
  for n in added:
    j = first.get((n[1], n[2]), -1)
    refs.append(j + 1)
    if j >= 0:
      sub[removed[j]] = n[0]
  for n, ref in zip(added, refs):
    if n[3] != k:
      out.cr.append([len(out.aid), n[3]])
    e = enc_id(n[0])
    out.aid.append(e - out._aid_last)
    out._aid_last = e
    out.ref.append(ref)
    if not ref:
      out.ax.append(n[1])
      out.ay.append(n[2])
    pos[n[0]] = (n[1], n[2])
    if n[0] >= FRESH_BASE and n[0] not in defined:
      defined.add(n[0])
      ok = ref and derived(fixed, removed[ref - 1], sub) == fresh[n[0]]
      out.fd.append(1 if ok else 0)
      if not ok:
        out.fx.append(fresh[n[0]])
  for nid, xy in d["nodes_moved"].items():
    pos[int(nid)] = tuple(xy)
  out.na.append(len(added))
  out.nr.append(len(removed))
  last = out._rid_last
  for i in removed:
    e = enc_id(i)
    out.rid.append(e - last)
    last = e
  out._rid_last = last
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


class Packer:
  """collect()'s data packed a rewrite at a time: the export packs each rewrite's steps into the columns as it collects
  them, so it holds the columns, never every step's graph (static: a trace node's fixed fields by id, as packed).
  The step-0 graphs' bent edges and the steps' count their routes apart (each rewrite says where its steps' count
  starts, `at`), so step-0 graphs and rewrites can come interleaved."""

  def __init__(self, static: Callable[[int], list | None]) -> None:
    self.static = static
    self.out = _Deltas()
    self.g0_bends = Bends()
    self.g0s: list[dict] = []
    self.graphs: list[dict] = []

  def g0(self, g: dict) -> None:
    """The next step-0 graph (its index is the count before it)."""
    p = {**{k: v for k, v in g.items() if k != "nodes"}, "nodes": nodes_col(g["nodes"])}
    if "bent" in p:
      p["bent"] = self.g0_bends.pack(p["bent"])
    self.g0s.append(p)

  def rewrite(self, r: str, index: int, steps: Iterable[dict], fresh: Mapping[int, list], g0: dict) -> None:
    """Rewrite r's graphs: its step-0 graph's index, its steps (GraphPacker.stream's, edges left out or not), packed
    as they come, and the fixed fields of its replay-made ids (filled as its steps come); g0: its step-0 graph."""
    out = self.out
    pos = {n[0]: (n[1], n[2]) for n in g0["nodes"]}
    defined = {n[0] for n in g0["nodes"] if n[0] >= FRESH_BASE}
    in_g0 = set(defined)
    start = [len(out.na), len(out.rid), len(out.aid), len(out.ax), len(out.fd), len(out.fx), out.bends.top]
    n = 0
    for n, d in enumerate(steps, 1):
      _pack_step(out, n, d, pos, fresh, defined, self.static)
    early = [i for i in fresh if i in in_g0]
    late = [i for i in fresh if i not in defined]  # (fresh nodes no graph holds: none are made, kept as they are)
    self.graphs.append({"r": r, "g0": index, "n": n, "at": start, "f0": ids_col(early + late),
                        "f0x": fields_cols([fresh[i] for i in early + late], None)})

  def finish(self, data: dict, statics: dict[int, list], routes: list | None) -> dict:
    """The packed data: data's other fields (answers, nodes...) as they are, the node table statics, and routes."""
    ids = list(statics)
    packed = {**{k: v for k, v in data.items() if k not in ("statics", "graphs", "g0", "routes")}, "format": 2,
              "statics": {"id": _diffs(ids), **fields_cols([statics[i] for i in ids], ids)}, "g0": self.g0s}
    if routes is not None:  # (None: the edges are as the API drew them, graphs.leave_out_derived_edges not applied)
      packed["routes"] = {"n": [len(r) for r in routes], "x": num_col([p[0] for r in routes for p in r]),
                          "y": num_col([p[1] for r in routes for p in r])}
    return {**packed, "graphs": self.graphs, "deltas": self.out.cols()}


def pack(data: dict) -> dict:
  """collect()'s data (with its edges left out) in the packed form."""
  statics = {int(i): f for i, f in data["statics"].items()}
  packer = Packer(statics.get)
  for g in data["g0"]:
    packer.g0(g)
  for r, g in data["graphs"].items():
    packer.rewrite(r, g["g0"], g["deltas"], {int(i): f for i, f in g["fresh"].items()}, data["g0"][g["g0"]])
  return packer.finish(data, statics, data.get("routes"))
