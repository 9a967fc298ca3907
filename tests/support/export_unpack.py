"""The decoder of the export's packed data in Python (viz_server/export/pack.py's pack, the other way): the same
decoding as the page's viz_server/export/unpack.js, which tests/viewer/test_export_pack.py holds to it; only the tests
decode in Python."""
from __future__ import annotations

import itertools

from viz_server.export.pack import FIELDS, NUMERIC, derived
from viz_server.replay import FRESH_BASE

_SRC = FIELDS.index("src")


def dec_id(e: int) -> int:
  return e if e >= 0 else FRESH_BASE - e - 1


def _sums(ds: list[int]) -> list[int]:
  return list(itertools.accumulate(ds))


def ids_of(col: list[int]) -> list[int]:
  return [dec_id(e) for e in _sums(col)]


def nums_of(col: dict) -> list:
  return [n / 10 for n in _sums(col["t"])] if "t" in col else list(col["r"])


def fields_rows(cols: dict, ids: list[int] | None) -> list[list]:
  num = {k: nums_of(cols[k]) for k in NUMERIC}
  n = len(cols["op"])
  src = ([[dec_id(s) for s in r] for r in cols["src"]] if ids is None
         else [[i - s for s in r] for i, r in zip(ids, cols["src"])])
  return [[num[k][j] if k in num else src[j] if k == "src" else cols[k][j] for k in FIELDS] for j in range(n)]


def nodes_of(col: dict) -> list[list]:
  cols = [ids_of(col["id"]), nums_of(col["x"]), nums_of(col["y"]), nums_of(col["c"])]
  return [[i, x, y, int(c) if isinstance(c, float) and c.is_integer() else c] for i, x, y, c in zip(*cols)]


class Unbends:
  """Bent edges back from pack.Bends's form: route numbers counted over every graph in packing order (top: the highest
  route named before)."""

  def __init__(self) -> None:
    self.top = -1

  def unpack(self, packed: list[list[int]]) -> list[list[int]]:
    out = []
    for k, rel in zip(_sums(packed[0]), packed[1]):
      r = self.top + 1 - rel
      self.top = max(self.top, r)
      out.append([k, r])
    for j in packed[2] if len(packed) > 2 else []:
      out[j].append(1)
    return out


def _rest_of(rest: dict, k: int, flags: list[int], ids: list[int], bends: Unbends) -> dict:
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
  bends = Unbends()
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
            fresh[n[0]] = derived(fixed, removed[ref - 1], sub)
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
