"""What the browser draws for a step of a rewrite: nodes with labels, colors and positions, edges with routes, and
the delta between two steps. Layouts are cached per (rewrite, step) and derived deterministically (see GraphView)."""
from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass

from viz_server.layout import Layout, layout_graph
from viz_server.replay import Replay
from viz_server.store import Rewrite, Trace

CHAR_W, LINE_H, PAD_W, PAD_H = 6.6, 13.0, 16.0, 10.0  # label metrics, matched to static/graph.js
MAX_ARG_CHARS = 40
LAYOUT_CACHE_NODES = 600_000  # node positions kept in cached layouts (~270 bytes each with edge routes)
BLOCK = 32  # steps between full layouts of a rewrite; steps inside a block move only what changed (see _derive)
NODE_GAP = 24.0  # horizontal gap kept around a node placed by _derive

_CATEGORY: dict[str, str] = {}
for _cat, _ops in {
  "const": "CONST VCONST DEFINE_VAR",
  "buffer": "BUFFER DEFINE_GLOBAL DEFINE_LOCAL DEFINE_REG DEFINE_ACC BUFFERIZE",
  "alu": "EXP2 LOG2 SIN SQRT RECIP NEG TRUNC ADD SUB MUL IDIV MOD FDIV MAX CMPLT CMPNE CMPEQ AND OR XOR SHL SHR POW "
         "WHERE MULACC",
  "load": "LOAD", "store": "STORE ASSIGN", "range": "RANGE END SPECIAL", "reduce": "REDUCE REDUCE_AXIS",
  "movement": "RESHAPE PERMUTE EXPAND PAD SHRINK FLIP", "sink": "SINK", "cast": "CAST BITCAST",
  "index": "INDEX GEP VECTORIZE",
}.items():
  for _op in _ops.split():
    _CATEGORY[_op] = _cat


def category(op: str) -> str:
  """The color class of an op (by name, so ops added later fall into `other`)."""
  return _CATEGORY.get(op, "other")


def short_arg(arg: str) -> str:
  return arg if len(arg) <= MAX_ARG_CHARS else arg[:MAX_ARG_CHARS - 1] + "…"


def label(op: str, dtype: str, arg: str) -> str:
  """Display text: the op, then dtype and short arg (plain text: the UI puts it in text nodes)."""
  second = " ".join(x for x in ((dtype if dtype != "void" else ""), (short_arg(arg) if arg != "None" else "")) if x)
  return f"{op}\n{second}" if second else op


def node_size(text: str) -> tuple[float, float]:
  lines = text.split("\n")
  return (round(max(len(s) for s in lines) * CHAR_W + PAD_W, 1), round(len(lines) * LINE_H + PAD_H, 1))


def node_json(nid: int, node: tuple[str, str, str, tuple[int, ...]]) -> dict:
  op, dtype, arg, src = node
  lab = label(op, dtype, arg)
  w, h = node_size(lab)
  return {"id": nid, "op": op, "dtype": dtype, "arg": arg, "label": lab, "cat": category(op), "w": w, "h": h,
          "src": list(src)}


def _r(v: float) -> float:
  return round(v, 1)


def _free_spot(row: list[tuple[float, float]], target: float, w: float) -> float:
  """The x nearest to target where a box of width w fits in a row of boxes [(left, right)] with NODE_GAP around."""
  cands = [target] + [r + NODE_GAP + w / 2 for _, r in row] + [left - NODE_GAP - w / 2 for left, _ in row]
  for x in sorted(cands, key=lambda c: abs(c - target)):
    if x - w / 2 < 0:
      continue
    if all(x + w / 2 + NODE_GAP <= left or x - w / 2 - NODE_GAP >= r for left, r in row):
      return x
  return max((r for _, r in row), default=0.0) + NODE_GAP + w / 2  # right of everything: always free


def anchor(k: int) -> int:
  """The step whose layout step k's layout is derived from: k-1 inside a block of BLOCK steps; at a block boundary
  the boundary with its lowest set bit (in blocks) cleared. So any step's layout is a chain of at most
  log2(k / BLOCK) full layouts plus BLOCK - 1 derivations away from step 0, whatever order steps are asked in, and
  the result never depends on that order (layouts are deterministic, evicting one is harmless)."""
  if k % BLOCK:
    return k - 1
  m = k // BLOCK
  return (m & (m - 1)) * BLOCK


@dataclass
class _Derived(Layout):
  """A layout made by GraphView._derive: also knows which nodes it put between two layers."""
  half: frozenset = frozenset()
  base: int = -1  # the step it was derived from: every node of both keeps its place and in-edges


class _LayoutCache:
  """Layouts keyed by (view, step): two LRUs, each bounded by the number of node positions it holds, so the
  expensive full layouts are not pushed out by the cheap derived ones (which are rebuilt from them in ms)."""

  def __init__(self, budget: int) -> None:
    self.budget = budget // 2
    self.used = [0, 0]  # full, derived
    self.pools: tuple[OrderedDict[tuple, Layout], OrderedDict[tuple, Layout]] = (OrderedDict(), OrderedDict())
    self.lock = threading.Lock()

  def get(self, key: tuple) -> Layout | None:
    with self.lock:
      for pool in self.pools:
        lay = pool.get(key)
        if lay is not None:
          pool.move_to_end(key)
          return lay
      return None

  def put(self, key: tuple, lay: Layout) -> None:
    i = int(isinstance(lay, _Derived))
    with self.lock:
      pool = self.pools[i]
      if key in pool:
        return
      pool[key] = lay
      self.used[i] += len(lay.pos)
      while self.used[i] > self.budget and len(pool) > 1:
        _, old = pool.popitem(last=False)
        self.used[i] -= len(old.pos)

  def drop(self, prefix: tuple) -> None:
    with self.lock:
      for i, pool in enumerate(self.pools):
        for key in [k for k in pool if k[:len(prefix)] == prefix]:
          self.used[i] -= len(pool.pop(key).pos)


LAYOUTS = _LayoutCache(LAYOUT_CACHE_NODES)
_views = itertools.count()


class GraphView:
  """Graphs and deltas of one rewrite.

  Layouts (see anchor()): step 0 and block boundaries get a full layout_graph, seeded (prev) with their anchor's
  layout in which the nodes rebuilt since are renamed to their new ids, so a rebuilt node starts where its old
  version was. A step inside a block is derived from the step before it: nodes keep their places, a rebuilt node
  takes its old version's place and a few new nodes are put into free spots between their sources and users; when
  that cannot be done without overlaps or upward edges, it gets a full layout seeded the same way."""

  def __init__(self, tr: Trace, rw: Rewrite, replay: Replay) -> None:
    self.tr, self.rw, self.replay = tr, rw, replay
    self.key = (next(_views),)  # unique per view: a rebuilt replay never meets an old layout
    self.lock = threading.RLock()
    self._sizes: dict[int, tuple[float, float]] = {}
    self.stats = {"full": 0, "derived": 0}

  def size(self, nid: int) -> tuple[float, float]:
    got = self._sizes.get(nid)
    if got is None:
      node = self.replay.node(nid)
      got = self._sizes[nid] = node_size(label(node[0], node[1], node[2]))  # type: ignore[index]
    return got

  # ---- layout
  def layout(self, k: int) -> Layout:
    got = LAYOUTS.get(self.key + (k,))
    if got is not None:
      return got
    chain = [k]
    while chain[-1] > 0 and LAYOUTS.get(self.key + (anchor(chain[-1]),)) is None:
      chain.append(anchor(chain[-1]))
    lay = None
    for s in reversed(chain):
      lay = self._compute(s)
    return lay  # type: ignore[return-value]

  def _compute(self, k: int) -> Layout:
    with self.lock:
      got = LAYOUTS.get(self.key + (k,))
      if got is not None:
        return got
      lay = None
      prev = None
      if k > 0:
        a = anchor(k)
        base = LAYOUTS.get(self.key + (a,)) or self._compute(a)
        if k % BLOCK:
          lay = self._derive(base, k)
        if lay is None:
          prev = self._renamed(base, a, k)
      if lay is None:
        lay = self._full(k, prev)
      LAYOUTS.put(self.key + (k,), lay)
      return lay

  def _full(self, k: int, prev: Layout | None) -> Layout:
    self.stats["full"] += 1
    rp = self.replay
    sizes, edges = {}, []
    for nid in sorted(rp.members(k)):
      sizes[nid] = self.size(nid)
      edges.extend((s, nid) for s in rp.node(nid)[3])  # type: ignore[index]
    return layout_graph(sizes, edges, prev)

  def _derive(self, lay: Layout, k: int) -> Layout | None:
    """Step k's layout from step k-1's (lay) if the change fits in without moving anything; else None.
    Costs work for the changed nodes only (plus one pass over the nodes when new nodes need a free spot)."""
    rp = self.replay
    info = rp.step(k)
    if info is None:
      return None
    was_half = lay.half if isinstance(lay, _Derived) else frozenset()
    old_of = {new: old for old, new in info.pairs if old in lay.pos}
    pos, layer, half = dict(lay.pos), dict(lay.layer), set(was_half)
    for r in info.removed:
      pos.pop(r, None)
      layer.pop(r, None)
      half.discard(r)
    missing = []
    for n in (*info.added, *info.changed):
      o = old_of.get(n)
      if o is None:
        missing.append(n)
        continue
      pos[n], layer[n] = lay.pos[o], lay.layer[o]
      if o in was_half:
        half.add(n)
    if len(missing) > 8:
      return None
    width = lay.width
    if missing:
      missing.sort(key=rp.level)
      vlayer = {n: ly - 0.5 if n in half else float(ly) for n, ly in layer.items()}
      if not self._place(missing, rp.members(k), pos, layer, vlayer):
        return None
      half.update(n for n in missing if vlayer[n] != layer[n])
      width = max(width, max(pos[n][0] + self.size(n)[0] / 2 for n in missing))
    edges = dict(lay.edges)
    for r in info.removed:
      for s in rp.node(r)[3]:  # type: ignore[index]
        edges.pop((s, r), None)
    for d in (*info.added, *info.changed):  # kept nodes keep their sources: only new nodes have new in-edges
      vd = layer[d] - 0.5 if d in half else layer[d]
      od = old_of.get(d, d)
      for s in rp.node(d)[3]:  # type: ignore[index]
        if (layer[s] - 0.5 if s in half else layer[s]) >= vd:
          return None
        pts = lay.edges.get((old_of.get(s, s), od))
        edges[(s, d)] = pts if pts is not None and pts[0] == pos[s] and pts[-1] == pos[d] else [pos[s], pos[d]]
    self.stats["derived"] += 1
    return _Derived(pos, layer, edges, width, lay.height, frozenset(half), k - 1)

  def aliases(self, j: int, k: int) -> dict[int, int]:
    """{id at step k: id at step j} for nodes that steps between j and k rebuilt (same op, dtype and arg)."""
    orig: dict[int, int] = {}  # id at the current step -> id at step j
    steps = range(j + 1, k + 1) if j <= k else range(j, k, -1)
    for s in steps:
      info = self.replay.step(s)
      if info is None:
        continue
      for old, new in info.pairs:
        a, b = (old, new) if j <= k else (new, old)
        orig[b] = orig.pop(a, a)
    out = {}
    for new, old in orig.items():
      n, o = self.replay.node(new), self.replay.node(old)
      if n is not None and o is not None and n[:3] == o[:3]:
        out[new] = old
    return out

  def _place(self, missing: list[int], members: frozenset[int], pos: dict, layer: dict, vlayer: dict) -> bool:
    """Put new nodes (sources first) in a free spot of the lowest layer above their users, or when their sources
    and users are on adjacent layers, in the gap between those two; False if neither fits."""
    rp = self.replay
    users: dict[int, list[int]] = {}
    for n in members:
      for s in rp.node(n)[3]:  # type: ignore[index]
        users.setdefault(s, []).append(n)
    band: dict[int, float] = {}
    half: dict[int, float] = {}  # half the height of a layer's band
    rows: dict[float, list[tuple[float, float]]] = {}
    for n, v in vlayer.items():
      w, h = self.size(n)
      if v == layer[n]:
        band[layer[n]] = pos[n][1]
        half[layer[n]] = max(half.get(layer[n], 0.0), h / 2)
      rows.setdefault(v, []).append((pos[n][0] - w / 2, pos[n][0] + w / 2))
    for n in missing:
      srcs = rp.node(n)[3]  # type: ignore[index]
      lo = max((vlayer[s] for s in srcs), default=-1.0)
      placed = [u for u in users.get(n, ()) if u in vlayer]
      hi = min((vlayer[u] for u in placed), default=lo + 2)
      w, h = self.size(n)
      slots = [ly for ly in range(int(lo) + 1, int(-(-hi // 1))) if lo < ly < hi and ly in band]
      if slots:
        ly = slots[-1]
        y, v = band[ly], float(ly)
      else:  # adjacent layers: the gap between them, if it is tall enough
        a, b = int(lo), int(hi)
        if hi != lo + 1 or a not in band or b not in band or lo != a:
          return False
        top, bottom = band[a] + half[a], band[b] - half[b]
        if bottom - top < h + 4:
          return False
        ly, y, v = b, (top + bottom) / 2, a + 0.5
      near = placed or list(srcs)
      target = sum(pos[x][0] for x in near) / len(near) if near else w / 2
      x = _free_spot(rows.setdefault(v, []), target, w)
      pos[n], layer[n], vlayer[n] = (x, y), ly, v
      rows[v].append((x - w / 2, x + w / 2))
    return True

  def _renamed(self, lay: Layout, j: int, k: int) -> Layout:
    """lay (the layout of step j) with every node that steps j+1..k rebuilt also known under its new id."""
    extra = {new: old for new, old in self.aliases(j, k).items() if old in lay.pos and new not in lay.pos}
    if not extra:
      return lay
    pos, layer = dict(lay.pos), dict(lay.layer)
    for new, old in extra.items():
      pos[new] = lay.pos[old]
      layer[new] = lay.layer[old]
    ren = {old: new for new, old in extra.items()}
    edges = dict(lay.edges)
    for (s, d), pts in lay.edges.items():
      if s in ren or d in ren:
        edges[(ren.get(s, s), ren.get(d, d))] = pts
    return Layout(pos, layer, edges, lay.width, lay.height)

  # ---- JSON
  def _match(self, k: int) -> dict | None:
    if k == 0:
      return None
    m = self.rw.step(k)
    pat = self.tr.patterns.get(m["pattern"])
    m["rule"] = None if pat is None else {"file": pat["file"], "line": pat["line"], "name": pat["name"]}
    info = self.replay.step(k)
    m["note"] = info.note if info is not None else None
    return m

  def _marks(self, k: int) -> dict:
    info = self.replay.step(k)
    if info is None:
      return {"added": [], "changed": [], "removed": []}
    return {"added": list(info.added), "changed": list(info.changed), "removed": list(info.removed)}

  def _node(self, nid: int, lay: Layout, consts: dict[int, bool] | None) -> dict:
    node = self.replay.node(nid)
    d = node_json(nid, node)  # type: ignore[arg-type]
    x, y = lay.pos[nid]
    d["x"], d["y"] = _r(x), _r(y)
    if consts is None:
      d["consts"] = [s for s in node[3] if self.replay.node(s)[0] == "CONST"]  # type: ignore[index]
    else:
      d["consts"] = [s for s in node[3] if consts.get(s)]  # type: ignore[index]
    return d

  def _edges(self, nid: int, lay: Layout) -> list[dict]:
    src = self.replay.node(nid)[3]  # type: ignore[index]
    return [{"src": s, "dst": nid, "index": i, "points": [[_r(x), _r(y)] for x, y in lay.edges.get((s, nid), ())]}
            for i, s in enumerate(src)]

  def _is_const(self, members: frozenset[int]) -> dict[int, bool]:
    return {nid: self.replay.node(nid)[0] == "CONST" for nid in members}  # type: ignore[index]

  def graph(self, k: int) -> dict:
    """The full graph after k matches."""
    members = self.replay.members(k)
    lay = self.layout(k)
    consts = self._is_const(members)
    order = sorted(members)
    return {"rewrite": self.rw.id, "step": k, "nodes": [self._node(n, lay, consts) for n in order],
            "edges": [e for n in order for e in self._edges(n, lay)], "width": _r(lay.width),
            "height": _r(lay.height), **self._marks(k), "match": self._match(k)}

  def delta(self, j: int, k: int, compact: bool = False) -> dict:
    """What turns the graph at step j into the graph at step k.

    compact (docs: JSON API): a node rebuilt from node `like` of step j is sent as {id, like, src, x, y} and its
    in-edges are like's unless edges_added lists them; edges of removed nodes are not listed in edges_removed; a
    straight edge (two points, center to center) comes without points."""
    rp = self.replay
    lj, lk = self.layout(j), self.layout(k)
    if isinstance(lk, _Derived) and lk.base == j:
      info = rp.step(k)
      return self._delta(j, k, lj, lk, set(info.added) | set(info.changed), set(info.removed), compact)  # type: ignore[union-attr]
    if isinstance(lj, _Derived) and lj.base == k:
      info = rp.step(j)
      return self._delta(j, k, lj, lk, set(info.removed), set(info.added) | set(info.changed), compact)  # type: ignore[union-attr]
    mj, mk = rp.members(j), rp.members(k)
    consts = self._is_const(mk)
    added = sorted(mk - mj)
    removed = sorted(mj - mk)
    added_set, removed_set = set(added), set(removed)
    like = {n: o for n, o in self.aliases(j, k).items() if n in added_set and o in removed_set} if compact else {}
    moved = {}
    for n in mk & mj:
      a, b = lj.pos[n], lk.pos[n]
      if _r(a[0]) != _r(b[0]) or _r(a[1]) != _r(b[1]):
        moved[n] = [_r(b[0]), _r(b[1])]
    edges_added = []
    for n in sorted(mk):
      src = rp.node(n)[3]  # type: ignore[index]
      old = like.get(n)
      old_src = rp.node(old)[3] if old is not None else ()  # type: ignore[index]
      for i, s in enumerate(src):
        pts = lk.edges.get((s, n), ())
        if old is not None:
          if lj.edges.get((old_src[i], old)) == pts:
            continue
        elif n not in added_set and lj.edges.get((s, n)) == pts:
          continue
        e = {"src": s, "dst": n, "index": i}
        if not compact or len(pts) != 2:
          e["points"] = [[_r(x), _r(y)] for x, y in pts]
        edges_added.append(e)
    nodes_added = []
    for n in added:
      old = like.get(n)
      if old is not None:
        x, y = lk.pos[n]
        nodes_added.append({"id": n, "like": old, "src": list(rp.node(n)[3]), "x": _r(x), "y": _r(y)})
      else:
        nodes_added.append(self._node(n, lk, consts))
    edges_removed = []
    if not compact:
      for n in removed:
        edges_removed.extend([s, n, i] for i, s in enumerate(rp.node(n)[3]))  # type: ignore[index]
    return {"from": j, "to": k, "nodes_added": nodes_added, "nodes_removed": removed,
            "nodes_moved": {str(n): xy for n, xy in sorted(moved.items())}, "edges_added": edges_added,
            "edges_removed": edges_removed, "width": _r(lk.width), "height": _r(lk.height), **self._marks(k),
            "match": self._match(k)}

  def _delta(self, j: int, k: int, lj: Layout, lk: Layout, new: set[int], gone: set[int], compact: bool) -> dict:
    """delta() when one step's layout was derived from the other's: nodes in both keep places and in-edges, so
    only the nodes that came and went (and their in-edges) are looked at."""
    rp = self.replay
    like = {n: o for n, o in self.aliases(j, k).items() if n in new and o in gone} if compact else {}
    nodes_added, edges_added = [], []
    for n in sorted(new):
      src = rp.node(n)[3]  # type: ignore[index]
      old = like.get(n)
      x, y = lk.pos[n]
      if old is None:
        nodes_added.append(self._node(n, lk, None))
      else:
        nodes_added.append({"id": n, "like": old, "src": list(src), "x": _r(x), "y": _r(y)})
      old_src = rp.node(old)[3] if old is not None else ()  # type: ignore[index]
      for i, s in enumerate(src):
        pts = lk.edges.get((s, n), ())
        if old is not None and lj.edges.get((old_src[i], old)) == pts:
          continue
        e = {"src": s, "dst": n, "index": i}
        if not compact or len(pts) != 2:
          e["points"] = [[_r(px), _r(py)] for px, py in pts]
        edges_added.append(e)
    edges_removed = []
    if not compact:
      for n in sorted(gone):
        edges_removed.extend([s, n, i] for i, s in enumerate(rp.node(n)[3]))  # type: ignore[index]
    return {"from": j, "to": k, "nodes_added": nodes_added, "nodes_removed": sorted(gone), "nodes_moved": {},
            "edges_added": edges_added, "edges_removed": edges_removed, "width": _r(lk.width),
            "height": _r(lk.height), **self._marks(k), "match": self._match(k)}
