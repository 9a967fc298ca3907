"""One rewrite's steps as the browser draws them (`StepGraphs`): each step's graph laid out, derived from the step
before so that what a step leaves alone never moves, and its graph and delta answers (what GET
/api/traces/<t>/rewrites/<r>/graph and /delta send, viz_server/rewrite_routes.py; docs/architecture.md, "JSON API").
It reads the graphs from viz_server.replay, lays them out with viz_server.layout and place (cut ones with
viz_server.cut), labels nodes with viz_server.labels and keeps layouts and answers in viz_server.caches."""
from __future__ import annotations

import itertools
import json
import math
import threading
from dataclasses import dataclass
from itertools import chain, compress
from operator import and_, eq, itemgetter, le, not_, sub
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from viz_server import caches, cut, gone, place
from viz_server.gate import REQUEST_GATE
from viz_server.labels import Looks, node_json, site_label
from viz_server.layout import LAYER_GAP, Layout, layout_graph, round_tenths
from viz_server.nodes import Node
from viz_server.place import MASSIVE, Bands, Rows
from viz_server.replay import FRESH_BASE, NEAR, Replay, StepInfo
from viz_server.store import Rewrite, Trace

BLOCK = 32  # every BLOCK-th step's layout is kept for good (every stride()-th of a longer rewrite), so any step is at
# most that many derivations less one away


def _px(v: float) -> float:
  """A coordinate as answers send it: to a tenth of a pixel (deltas compare coordinates so rounded)."""
  return round(v, 1)


def straight(pts: Sequence, a: object, b: object) -> bool:
  """Whether an edge's route runs straight from its source's center a to its user's center b (two points, as most
  do): a compact answer sends such an edge without points, the page draws it between the two nodes' centers, and an
  export packs it without them (viz_server/export)."""
  return len(pts) == 2 and pts[0] == a and pts[1] == b


def slim(pts: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
  """An edge's route without the points inside a vertical run (a long edge's dummies stacked at one x, one a layer, as
  the answers' tenths of a pixel tell): the views keep and send routes so. The 2,942-node graph of a GPT step's `add
  bufferize` held ~460k points (~48 MB a layout) and sent 8 MB of them; the page's curve through the points stays a
  straight line there."""
  if len(pts) < 4:
    return tuple(pts)
  # (in C, no Python frame a point: a fresh layout of a far jump's ~3,000-node graph has ~600k route points, and a
  # comprehension over them was a quarter of its layout's time)
  xs = list(map(itemgetter(0), pts))
  same = list(map(eq, xs, xs[1:]))  # same[i]: points i and i+1 at one x (as sent: to a tenth of a pixel)
  for i in compress(range(len(same)), map(not_, same)):  # (most are equal: a long edge's run is at one x exactly)
    same[i] = round(xs[i], 1) == round(xs[i + 1], 1)
  return (pts[0], *compress(pts[1:-1], map(not_, map(and_, same, same[1:]))), pts[-1])


def slimmed(lay: Layout) -> dict[tuple[int, int], tuple[tuple[float, float], ...]]:
  """A fresh layout's routes, slim."""
  return {e: slim(pts) for e, pts in lay.edges.items()}


def lay_out_slim(sizes: dict[int, tuple[float, float]], edges: list[tuple[int, int]],
                 pause: Callable[[], None] | None = None) -> Layout:
  """layout_graph with slim routes (made so, never full: slimmed(layout_graph(...)) in a fifth of the time)."""
  return layout_graph(sizes, edges, pause=pause, slim=True)


def route_json(pts: Sequence[tuple[float, float]]) -> list[list[float]]:
  """An edge's route as answers send it: to a tenth of a pixel (_px)."""
  return [[round(x, 1), round(y, 1)] for x, y in pts]


def routes_json(routes: Sequence[Sequence[tuple[float, float]]]) -> list[list[list[float]]]:
  """[route_json(pts) for pts in routes], rounded all at once in numpy (layout.round_tenths: the same numbers; a fresh
  answer of a ~3,000-node graph rounds ~80k coordinates: a Python round each was ~40 ms)."""
  vals = list(chain.from_iterable(chain.from_iterable(routes)))
  if set(map(type, vals)) - {float}:  # (an int stays an int in round's answer)
    return list(map(route_json, routes))
  pairs = round_tenths(np.array(vals, dtype=np.float64)).reshape(-1, 2).tolist()
  res, i = [], 0
  for n in map(len, routes):
    res.append(pairs[i:i + n])
    i += n
  return res


def stride(steps: int) -> int:
  """Every how many steps a rewrite of `steps` steps keeps a layout for good: BLOCK, or ceil(sqrt(steps)) past 1,024
  steps, so that its kept layouts are at most sqrt(steps) + 1 (memory O(nodes * sqrt(steps))) and a far jump costs
  at most stride - 1 derivations. (A GPT step's longest rewrite has ~900 steps of ~3,000 nodes: still BLOCK.)"""
  return max(BLOCK, math.isqrt(max(steps - 1, 0)) + 1)


def checkpoint(k: int, every: int = BLOCK) -> int:
  """The block boundary at or before step k (every `every` steps: stride()): its layout, once computed, is kept for as
  long as the view."""
  return k - k % every


@dataclass
class _Placed(Layout):
  """A layout with the row index and bands that deriving the next step's layout from it uses (built lazily)."""
  rows: Rows | None = None
  bands: Bands | None = None


@dataclass
class _Full(_Placed):
  """A full layout_graph layout."""


@dataclass
class _Derived(_Placed):
  """A layout made by viz_server.place from the step before: every node of both keeps its place and in-edges."""
  base: int = -1  # the step it was derived from
  # what it counts against caches.LAYOUTS: its positions, and of its routes only those it made. place.derive hands a
  # route the layout keeps on as the same tuple and makes only straight two-point ones, so its own points are at most
  # two per in-edge of a new node. Counted whole (weight()), the 375k route points that the ~3k-node graph of a GPT
  # step's `add bufferize` shares along its chain let the pool hold two of its layouts: stepping and its prefetch
  # pushed each other's layouts out and every step derived its chain again from the block boundary.
  own: int = 0


def dumps(obj: object) -> bytes:
  """JSON as the API's jsonify writes it (compact separators, ASCII, keys in insertion order)."""
  return json.dumps(obj, separators=(",", ":")).encode()


Shown = tuple[Layout, frozenset[int], "cut.CutLayout | None"]  # a step's layout, the nodes shown, its cut if cut
_views = itertools.count()


def _diff_runs(xs: list[int]) -> list[int]:
  """xs as its differences (each from the one before, the first from 0) in runs: a flat [difference, count, ...].
  A step's ~1,900 rebuilt ids mostly ascend by one, so ~8 KB of differences are a few dozen runs (issue 30: answers
  under 10 KB)."""
  out: list[int] = []
  for d, run in itertools.groupby(map(sub, xs, [0, *xs[:-1]])):  # (in C but for one turn a run: a few dozen)
    out += (d, len(list(run)))
  return out


def _flag_runs(flags: Iterable[bool]) -> list[int]:
  """flags as the lengths of their runs, false first (0 where the first is true): [3, 2, 1] is FFFTTF."""
  out: list[int] = []
  for f, run in itertools.groupby(flags):  # (runs alternate)
    if f and not out:
      out.append(0)
    out.append(len(list(run)))
  return out


def _own_columns(cols: dict, k: int, ns: Sequence[int], created: Sequence[int | None],
                 resite: dict[int, str | None] | None) -> None:
  """The columns of rebuilt nodes (ids ns, sent as runs) that are not their old node's: `created` (runs [value,
  count, ...]) where one was not created at k (a step back brings back nodes made before), `nosite` (_flag_runs)
  those without the call site their old node has, `resite` (runs of 0: like's or none, i + 1: `sites[i]`) those
  with another one (a step back brings back the trace's nodes, with sites, over fresh ones, without)."""
  if any(c != k for c in created):
    cols["created"] = _value_runs(created)
  if not resite or resite.keys().isdisjoint(ns):
    return
  mine = [resite.get(n, 0) for n in ns]  # (0: like's)
  if None in mine:
    cols["nosite"] = _flag_runs(x is None for x in mine)
  if any(isinstance(x, str) for x in mine):
    sites: dict[str, int] = {}
    cols["resite"] = _value_runs(sites.setdefault(x, len(sites)) + 1 if isinstance(x, str) else 0 for x in mine)
    cols["sites"] = list(sites)


def _pack_straight(out: dict, added: set[int]) -> None:
  """Move a compact=2 delta's straight in-edges (no points) of added nodes out of edges_added into `straight`: {dst,
  index}, dst as runs of differences (_diff_runs), index as runs [value, count, ...]; the page takes each edge's src
  from its node's sources (a rebuilt node moved sends every in-edge again: ~40 bytes each, ~250 a step of steps 31-73
  of `add bufferize`)."""
  edges = out["edges_added"]
  packed = [e for e in edges if "points" not in e and e["dst"] in added]
  if not packed:
    return
  out["edges_added"] = [e for e in edges if "points" in e or e["dst"] not in added]
  out["straight"] = {"dst": _diff_runs([e["dst"] for e in packed]), "index": _value_runs(e["index"] for e in packed)}


def _pack_held(out: dict, gone: set[int]) -> None:
  """Move a compact=2 step back's in-edges with points of the nodes it brings back (`gone`: those the step undone
  removed) out of edges_added into `held`: {dst, index}, both as runs of differences (_diff_runs). The page holds
  their routes (the request's `held`: static/graphghosts.js, StepMemo) and takes each edge's src and points from
  there: step 1 of a GPT step's `add bufferize` removed a node with 213 long in-edges, and the step back sent their
  6,596 points again (126 KB), steps 31 and 49 back ~80 routes the step had changed (~14 KB)."""
  edges = out["edges_added"]
  packed = [e for e in edges if "points" in e and e["dst"] in gone]
  if not packed:
    return
  out["edges_added"] = [e for e in edges if "points" not in e or e["dst"] not in gone]
  packed.sort(key=itemgetter("dst", "index"))
  out["held"] = {"dst": _diff_runs([e["dst"] for e in packed]), "index": _diff_runs([e["index"] for e in packed])}


def _by_fewer_runs(rows: list[tuple], *cols: int) -> list[tuple]:
  """rows sorted by their first field or by their second (an id and its old node's), whichever makes fewer runs of
  differences (_diff_runs) of columns `cols` together: forward a step's rebuilt ids are fresh and ascend by one in
  either order, back its old ids are, and sorted by the trace's ids the fresh ones went in ~1,000 runs (step 5 of
  `add bufferize` back: 6.7 KB). Counted in numpy, the rows sorted once (~2,000 a step)."""
  if len(rows) < 2:
    return rows
  columns = list(zip(*rows))
  if all(map(le, columns[0], columns[0][1:])) and all(map(le, columns[1], columns[1][1:])):
    return list(rows)  # (both orders are the rows' own, as forward a step's rebuilt ids and likes are: no numpy)
  table = [np.array(columns[c], dtype=np.int64) for c in cols]  # (ids past 2**40: int64 holds them)
  size = []
  for key in (0, 1):
    order = np.argsort(np.array(columns[key], dtype=np.int64), kind="stable")
    size.append(sum(int(np.count_nonzero(d[1:] != d[:-1])) for d in (np.diff(t[order], prepend=0) for t in table)))
  return sorted(rows, key=itemgetter(int(size[1] < size[0])))


_OWN = frozenset(("id", "src", "x", "y", "consts", "created", "site"))  # a whole node's fields not of its look


def _value_runs(xs: Iterable) -> list:
  """xs as runs [value, count, ...]."""
  out: list = []
  for v, run in itertools.groupby(xs):
    out += (v, len(list(run)))
  return out


def _pack_whole(out: dict) -> None:
  """Move a compact=2 delta's whole new nodes out of nodes_added into `whole`, as columns: `id` as runs of differences
  (_diff_runs), `look` (runs [index, count, ...]) into `looks` (each distinct {op, dtype, arg, label, cat, w, h, and
  `cut` where a field was cut} once), `nsrc` (runs) and `src` (each source as the node's id minus it: a node's
  sources are mostly made just before it), `xy` flat, `created` (runs), `site` (runs of an index into `sites`, 0 for
  none, i + 1 for sites[i]), `consts` flat [node's index, source id, ...]. Step 1 of `add bufferize` adds 215 nodes
  of two looks: 53 KB as dicts, ~5 KB so."""
  whole = [a for a in out["nodes_added"] if "like" not in a]
  if not whole:
    return
  out["nodes_added"] = [a for a in out["nodes_added"] if "like" in a]
  looks: dict[str, int] = {}
  sites: dict[str, int] = {}
  look_of, src, xy, consts = [], [], [], []
  for i, a in enumerate(whole):
    look = dumps({k: v for k, v in a.items() if k not in _OWN}).decode()
    look_of.append(looks.setdefault(look, len(looks)))
    src += [a["id"] - x for x in a["src"]]
    xy += (a["x"], a["y"])
    for c in a["consts"]:
      consts += (i, c)
  site_of = [0 if (x := a.get("site")) is None else sites.setdefault(x, len(sites)) + 1 for a in whole]
  out["whole"] = {"id": _diff_runs([a["id"] for a in whole]), "look": _value_runs(look_of),
                  "looks": [json.loads(x) for x in looks], "nsrc": _value_runs(len(a["src"]) for a in whole),
                  "src": src, "xy": xy, "created": _value_runs(a["created"] for a in whole),
                  "site": _value_runs(site_of), "sites": list(sites), "consts": consts}


class StepGraphs:
  """The graphs of one rewrite's steps, laid out, and the deltas between them (static/graph.js's GraphView draws
  them).

  Layouts: step 0 gets a full layout_graph; every later step's layout is made from the step before it, so the
  nodes a step leaves alone never move (the viewer's stability promise, tested on real rewrites). Usually it is
  derived by viz_server.place: nothing moves, new nodes are placed into free spots (a rebuilt node at its old
  version's place). A step that replaces a large part of the graph at once (more than MASSIVE new nodes, or a
  quarter of the graph, without an old version) keeps the nodes it kept where they were too, and lays the new ones
  out on their own, below them (_below). A layout depends only on the steps before it, never on the order steps
  are asked in.
  That is step 0's chain (anchor 0). A far jump lays its step out fresh instead, or from the layout on screen
  (jump()), an anchor, whose chain runs both ways from it (layout(k, anchor=a); docs/architecture.md, "Far jumps").
  Every stride()-th step's layout of a chain, from its anchor, is kept (the others are in the LRU caches.LAYOUTS),
  so a step asked for out of order costs at most stride() - 1 derivations once the boundary before it was computed.
  Layouts are computed outside any lock; two threads that want the same step share one computation."""

  def __init__(self, tr: Trace, rw: Rewrite, replay: Replay) -> None:
    self.tr, self.rw, self.replay = tr, rw, replay
    self.key = (next(_views),)  # unique per view: a rebuilt replay never meets an old layout
    self.lock = threading.Lock()
    # layouts are per (anchor, step): the chain from a step laid out fresh (anchor 0: the stable chain from step 0)
    self._busy: dict[tuple[int, int], threading.Event] = {}  # layouts a thread is computing
    self._busy_d: dict[tuple, threading.Event] = {}  # delta answers a thread is making (delta_json)
    self._derived: dict[tuple[int, int], bool] = {}  # whether a layout is derived from its neighbour toward its anchor
    self._kept: dict[tuple[int, int], Layout] = {}  # anchors and the block boundaries of their chains (never evicted)
    self._kept_w: dict[tuple[int, int], int] = {}  # their caches.weight (positions and route points)
    self._anchors: list[int] = []  # the anchors laid out, in order (steps laid out fresh, and jump()'s)
    # a far jump's anchor laid out from the layout on screen (jump()): its id -> (that layout, the match), until made
    self._jumps: dict[int, tuple[Layout, list[int], list[int], dict[int, int]]] = {}
    self._njumps = 0
    self._paired: tuple[int, int, int, dict[int, int]] | None = None  # the last jump's (anchor, j, j's anchor, pairs)
    self.looks = Looks(replay.node)  # labels and box sizes, made once per node
    self.stats = {"full": 0, "derived": 0}
    self.cuts = 0  # layouts of cut graphs made
    self.last_step = 0  # the step last served (views.Views.prefetch looks ahead of it in the direction of travel)
    self.anchor = 0  # the anchor of the layout chain last served (the page's: what a diff drawn as it reuses)
    # what lays a step out whole, with slim routes (an export shares layouts between views: export/layouts)
    self.lay_out = lay_out_slim

  def stride(self) -> int:
    """Every how many steps this view keeps a layout for good (stride(); a live rewrite's grows with it)."""
    return stride(self.rw.matches)

  def at(self, anchor: int) -> int:
    """The step an anchor's chain starts from: a step laid out fresh is numbered by its step; a far jump's anchor
    derived from the layout on screen (jump()) past the rewrite's steps, g * (matches + 1) + step, so that a step can
    anchor both (the re-layout key lays out fresh a step that a jump derived)."""
    return anchor % (self.rw.matches + 1)

  def knows(self, anchor: int) -> bool:
    """Whether this view can lay out `anchor`'s chain as the page was shown it: a step's fresh layout can always be
    made again, a far jump's (jump()) only while this view holds it (it depends on the layout that was on screen)."""
    at = self.at(anchor)
    return anchor == at or anchor in self._jumps or self._get(at, anchor) is not None

  def est_bytes(self) -> int:
    """About the bytes this view holds (its replay's, labels and box sizes, kept layouts), from the sizes of its tables
    when asked (it grows as steps are laid out): what views.Views budgets by. Derived layouts are caches.LAYOUTS'."""
    kept = sum(list(self._kept_w.values()))
    return self.replay.est_bytes() + self.looks.est_bytes() + 400 * kept

  def size(self, nid: int) -> tuple[float, float]:
    """A node's box size (its label's)."""
    return self.looks.size(nid)

  # ---- layout
  def _lkey(self, k: int, anchor: int) -> tuple:
    return self.key + ((k,) if anchor == 0 else ("a", anchor, k))

  def _get(self, k: int, anchor: int = 0) -> Layout | None:
    got = self._kept.get((anchor, k))
    return got if got is not None else caches.LAYOUTS.get(self._lkey(k, anchor))

  def cached(self, k: int, anchor: int = 0) -> bool:
    return self._get(k, anchor) is not None or caches.LAYOUTS.get(self.key + ("cut", k)) is not None

  def prepare(self, k: int, pause: Callable[[], None] | None = None, anchor: int = 0) -> None:
    """Compute what showing step k needs (its layout on the anchor's chain, or its cut's), for the background."""
    if self.big(k):
      self._cut(k, pause)
    else:
      self.layout(k, pause, anchor)

  def delta_kept(self, j: int, k: int, anchor: int = 0, held: bool = False) -> bool:
    """Whether the page's compact delta from step j to k is kept (prepare_delta made it, or a request did)."""
    return caches.ANSWERS.get(self._dkey(j, k, True, True, anchor, held)) is not None

  def prepare_delta(self, j: int, k: int, anchor: int = 0, held: bool = False) -> None:
    """Make the page's compact delta from step j to k (compact=2) where delta_json keeps it, for the background."""
    REQUEST_GATE.give_way()  # (a request being served may be making it: then it is kept when this goes on)
    if self.rw.ended and self.replay.computed(min(j, k)) and 0 <= j <= self.rw.matches:
      self.delta_json(j, k, compact=True, rebuilt=True, anchor=anchor, held=held)

  def anchor_for(self, k: int, anchor: int) -> int:
    """The chain step k is shown on, coming from `anchor`'s: that one where it has a layout within NEAR steps of k
    (stepping on costs a few derivations), else another chain's with the nearest such layout (a jump back to where
    the user was), else k itself, laid out fresh (a jump: O(graph), whatever the steps skipped; the page then steps on
    from it). Step 0's chain reaches the first NEAR steps."""
    if self.big(k):
      return 0
    near = range(max(0, k - NEAR), min(self.rw.matches, k + NEAR) + 1)
    if any(self._get(s, anchor) is not None for s in near):
      return anchor
    if k <= NEAR:
      return 0
    best = min(((abs(s - k), c) for c in (0, *self._anchors) for s in near if self._get(s, c) is not None),
               default=None)
    return k if best is None else best[1]

  def big(self, k: int) -> bool:
    """Whether the graph at step k is too big to lay out whole (it is shown cut, viz_server.cut)."""
    return cut.too_big(self.replay.size(k))

  def reusable(self, k: int, chain: int) -> tuple[Layout, Rows, Bands] | None:
    """Step k's layout on the chain last served (`anchor`: what the page shows) with its row index and bands
    (viz_server.diff places another graph's nodes into it), or None when more than `chain` steps' layouts would have
    to be computed first (far from every step shown so far) or the graph is cut."""
    if self.big(k):
      return None
    a = self.anchor
    if self._get(k, a) is None:
      d = 1 if k >= self.at(a) else -1
      start = k
      while start != self.at(a) and self._get(start - d, a) is None:
        start -= d
        if abs(k - start) >= chain:
          return None
    lay = self.layout(k, anchor=a)
    return (lay, *self._index(lay))

  def layout(self, k: int, pause: Callable[[], None] | None = None, anchor: int = 0) -> Layout:
    """The layout of step k, whole (for a graph that is not cut), on the chain of `anchor` (0: from step 0, forward;
    else from that step laid out fresh, both ways); pause: see layout_graph (the prefetch worker passes
    REQUEST_GATE.give_way). A chain goes on after a step that is cut with a whole layout."""
    got = self._get(k, anchor)
    if got is not None:
      return got
    at = self.at(anchor)
    d = 1 if k >= at else -1  # the way the chain runs from its anchor to k
    sizes, start = self.replay.sizes, k
    # back to the nearest layout of the chain (or a step known to be cut: asking the size of one not reached yet
    # would move the replay's cursor backward there, which the chain then moves forward again)
    while start != at and self._get(start - d, anchor) is None and not (start - d in sizes and self.big(start - d)):
      start -= d
    lay = None
    for s in range(start, k + d, d):
      if pause is not None:
        pause()
      gone.check()  # a far step's chain: stop if the request that wants it has gone (what is done stays cached)
      if s != k and self.big(s):  # (shown cut: the chain goes on after it with a whole layout, _make)
        continue
      lay = self._compute(s, pause, anchor)
    return lay  # type: ignore[return-value]

  def _compute(self, k: int, pause: Callable[[], None] | None = None, anchor: int = 0) -> Layout:
    key, mine = self._lkey(k, anchor), (anchor, k)
    got, ev = self._claim(self._busy, mine, lambda: self._get(k, anchor))
    if ev is None:
      return got
    try:
      lay = self._make(k, pause, anchor)
      self._derived[mine] = isinstance(lay, _Derived)
      if k == self.at(anchor) and anchor:
        self._anchors.append(anchor)
      if (k - self.at(anchor)) % self.stride() == 0:  # (an anchor itself, too: a view keeps those the user jumped to)
        self._kept_w[mine] = caches.weight(lay)
        self._kept[mine] = lay
      elif isinstance(lay, _Derived):
        caches.LAYOUTS.put(key, lay, derived=True, w=lay.own)
      else:
        caches.LAYOUTS.put(key, lay)
    finally:
      self._release(self._busy, mine, ev)
    return lay

  def _claim(self, busy: dict, key: Any, cached: Callable[[], Any]) -> tuple[Any, threading.Event | None]:
    """(what cached() holds, None), or (None, the claim to make it: an Event in busy, which _release sets): made
    once, a thread that asks while another makes it waits for that one (telling the background it waits), then looks
    again (what was made may have been evicted at once: then it makes it)."""
    while True:
      with self.lock:  # the check and the claim are one step: a thread that just finished it cannot slip between
        got = cached()
        if got is not None:
          return got, None
        ev = busy.get(key)
        if ev is None:
          ev = busy[key] = threading.Event()
          return None, ev
      with REQUEST_GATE.wait_for_background():
        ev.wait()

  def _release(self, busy: dict, key: Any, ev: threading.Event) -> None:
    with self.lock:
      del busy[key]
    ev.set()

  def _make(self, k: int, pause: Callable[[], None] | None, anchor: int = 0) -> Layout:
    at = self.at(anchor)
    nb = k - 1 if k > at else k + 1  # the neighbour toward the anchor, which k's layout is derived from
    if k == at and anchor in self._jumps:  # a far jump's anchor, from the layout on screen
      return self._jumped(k, *self._jumps.pop(anchor))
    if k == at or self.big(nb):  # nothing laid out whole before it
      return self._full(k, pause)
    base = self._get(nb, anchor)
    if base is None:  # layout() computed it just before, but another thread's layouts pushed it out of the LRU
      base = self.layout(nb, pause, anchor)
    lay = self._derive(base, k, back=k < at)
    if lay is not None:
      return lay
    return self._below(k, base, pause)

  def _full(self, k: int, pause: Callable[[], None] | None = None) -> Layout:
    """A fresh layout_graph of step k (step 0, or a step with nothing kept from the one before)."""
    self.stats["full"] += 1
    rp = self.replay
    sizes, edges = {}, []
    known, looks = self.looks.sizes, self.looks
    for nid in sorted(rp.members(k)):
      node = rp.node(nid)
      got = known.get(nid)
      sizes[nid] = got if got is not None else looks.look(nid, node)[1]  # type: ignore[arg-type]
      edges.extend((s, nid) for s in node[3])  # type: ignore[index]
    if pause is not None:
      pause()
    lay = self.lay_out(sizes, edges, pause=pause)
    return _Full(lay.pos, lay.layer, lay.edges, lay.width, lay.height)

  def _below(self, k: int, base: Layout, pause: Callable[[], None] | None = None) -> Layout:
    """Step k's layout when it brings too many new nodes to place one by one: the nodes it kept stay where they were
    (with their edges' routes), the new ones get a layout of their own, placed as a block below them. A kept node's
    sources are kept too (a node's id stands for its whole subgraph), so every edge still points down."""
    rp = self.replay
    members = sorted(rp.members(k))
    keep = [n for n in members if n in base.pos]
    if not keep:
      return self._full(k, pause)
    new = [n for n in members if n not in base.pos]
    self.stats["full"] += 1
    sizes = {n: self.looks.size(n) for n in new}
    sub = layout_graph(sizes, [(s, d) for d in new for s in rp.node(d)[3] if s in sizes], pause=pause)  # type: ignore[index]
    top = max(base.pos[n][1] + self.looks.size(n)[1] / 2 for n in keep) + LAYER_GAP
    xs = [base.pos[n][0] for n in keep]
    dx = max(0.0, (min(xs) + max(xs)) / 2 - sub.width / 2)  # the block centered under what was kept
    below = max(base.layer[n] for n in keep) + 1
    pos = {n: base.pos[n] for n in keep}
    layer = {n: base.layer[n] for n in keep}
    for n in new:
      x, y = sub.pos[n]
      pos[n] = (x + dx, y + top)
      layer[n] = sub.layer[n] + below
    edges: dict[tuple[int, int], tuple[tuple[float, float], ...]] = {}
    for d in members:
      for src in dict.fromkeys(rp.node(d)[3]):  # type: ignore[index]
        if d in sizes and src in sizes:
          edges[(src, d)] = tuple((x + dx, y + top) for x, y in slim(sub.edges[(src, d)]))
        else:
          edges[(src, d)] = base.edges.get((src, d)) or (pos[src], pos[d])
    width = max(max(x + self.looks.size(n)[0] / 2 for n, (x, _) in pos.items()), base.width)
    height = max(y + self.looks.size(n)[1] / 2 for n, (_, y) in pos.items())
    return _Full(pos, layer, edges, width, height)

  def shown(self, k: int, pause: Callable[[], None] | None = None, anchor: int = 0) -> Shown:
    """What step k shows: its layout on the anchor's chain and its nodes, the whole graph's, or for a graph too big
    the cut's (then also its CutLayout)."""
    if not self.big(k):
      return self.layout(k, pause, anchor), self.replay.members(k), None
    lay = self._cut(k, pause)
    return lay, lay.shown, lay

  def _cut(self, k: int, pause: Callable[[], None] | None = None) -> cut.CutLayout:
    """The layout of step k's graph cut to the nodes nearest its root and what the step added or changed. Like the
    whole graphs' layouts it is derived from the step before (nothing shown at both moves) within a block of BLOCK
    steps; at a block boundary, after a step that was not cut, or when the window moved too far, it is a full layout
    of the window, so a far step costs at most BLOCK - 1 derivations and one layout of CUT_NODES nodes."""
    got = caches.LAYOUTS.get(self.key + ("cut", k))
    if isinstance(got, cut.CutLayout):
      return got
    rp = self.replay
    base = self._cut(k - 1, pause) if k % BLOCK and self.big(k - 1) else None
    members, info = rp.members(k), rp.step(k)
    seeds = [rp.root(k)]
    if info is not None:
      seeds += [*info.changed, *info.added, *([info.by] if info.by is not None else [])]
    src = rp.src
    order, stubs = cut.window(members, seeds, src, cut.limit())
    shown = frozenset(order)
    if pause is not None:
      pause()
    lay = self._derive_cut(base, shown, info) if base is not None else None
    derived_from = k - 1 if lay is not None else -1
    if lay is None:
      lay = layout_graph({n: self.looks.size(n) for n in sorted(shown)},
                         [(s, n) for n in sorted(shown) for s in src(n) if s in shown], pause=pause)
    self.cuts += 1
    out = cut.CutLayout(lay.pos, lay.layer, slimmed(lay), lay.width, lay.height, shown=shown, total=len(members),
                        around=[n for n in dict.fromkeys(seeds) if n in shown], stubs=stubs, base=derived_from)
    caches.LAYOUTS.put(self.key + ("cut", k), out)
    return out

  def _derive_cut(self, base: cut.CutLayout, shown: frozenset[int], info: StepInfo | None) -> Layout | None:
    """The layout of window `shown` from the step before's (base), moving nothing both show (viz_server.place);
    None when too much of it is new."""
    rp = self.replay
    new = sorted(shown - base.shown)
    old_of = {n: o for o, n in (zip(info.olds, info.news) if info is not None else ()) if o in base.pos and n in shown}
    if sum(n not in old_of for n in new) > max(MASSIVE, len(base.pos) // 4):
      return None
    # a node's sources as far as they are laid out: those shown now, for a node that left, those shown before
    src = lambda n: tuple(s for s in rp.node(n)[3] if s in (shown if n in shown else base.shown))  # type: ignore[index]  # noqa: E731
    rows, bands = Rows.of(base.pos, self.looks.size), Bands.of(base)
    pos, layer, edges, width, height, _, _ = place.derive(base, rows, bands, new, sorted(base.shown - shown), old_of,
                                                          src, self.looks.size, rp.level)
    for n in shown:  # an edge from a node that came into view to one shown before: straight (nodes never get sources)
      for s in src(n):
        if (s, n) not in edges:
          edges[(s, n)] = (pos[s], pos[n])
    edges = {e: pts for e, pts in edges.items() if e[0] in shown and e[1] in shown}
    return Layout(pos, layer, edges, width, height)

  def _index(self, lay: Layout) -> tuple[Rows, Bands]:
    """The row index and bands of a layout (built once for a full layout; a derived one carries its own)."""
    if not isinstance(lay, _Placed) or lay.rows is None or lay.bands is None:
      rows, bands = Rows.of(lay.pos, self.looks.size), Bands.of(lay)
      if isinstance(lay, _Placed):
        lay.rows, lay.bands = rows, bands
      return rows, bands
    return lay.rows, lay.bands

  def _derive(self, lay: Layout, k: int, back: bool = False) -> Layout | None:
    """Step k's layout from step k-1's (lay), moving nothing; None when the step replaces too much at once. back:
    from step k+1's, by step k+1's inverse (what it removed is new at k, what it added or rebuilt goes, each of its
    rebuilt nodes' old version takes its place)."""
    rp = self.replay
    info = rp.step(k + 1 if back else k)
    if info is None:
      return None
    REQUEST_GATE.give_way()  # (the replay's step done, the derivation next: the prefetch worker lets a request run)
    if back:
      new, removed = list(info.removed), [*info.added, *info.changed]
      old_of = {o: n for o, n in zip(info.olds, info.news) if n in lay.pos}
    else:
      new, removed = [*info.added, *info.changed], info.removed
      olds = info.olds  # ({n: o for o, n in pairs if o in lay.pos}, in C: ~2,000 a step)
      old_of = dict(compress(zip(info.news, olds), map(lay.pos.__contains__, olds)))
    if len(new) - sum(map(old_of.__contains__, new)) > max(MASSIVE, len(lay.pos) // 4):  # (in C: ~2,000 a step)
      return None
    rows, bands = self._index(lay)
    new_srcs = rp.srcs(new)  # (read once: placing and the routes it makes, `own`, count them)
    pos, layer, edges, width, height, rows, bands = place.derive(
      lay, rows, bands, new, removed, old_of, rp.src, self.looks.size, rp.level, rp.node, new_srcs, rp.srcs)
    self.stats["derived"] += 1
    own = len(pos) + 2 * sum(map(len, new_srcs)) // caches.POINTS_PER_NODE
    return _Derived(pos, layer, edges, width, height, rows=rows, bands=bands, base=k + 1 if back else k - 1, own=own)

  def aliases(self, j: int, k: int) -> dict[int, int]:
    """{id at step k: id at step j} for nodes that steps between j and k rebuilt (same op, dtype and arg)."""
    orig: dict[int, int] = {}  # id at the current step -> id at step j
    steps = range(j + 1, k + 1) if j <= k else range(j, k, -1)
    first, then = (0, 1) if j <= k else (1, 0)
    for s in steps:
      info = self.replay.step(s)
      if info is None:
        continue
      cols = (info.olds, info.news)
      a = cols[first]
      # orig[b] = orig.pop(a, a), pair by pair in order, in C: update pulls each pair from the zip (a far jump's
      # steps rebuilt ~2,000 nodes each)
      orig.update(zip(cols[then], map(orig.pop, a, a)))
    out, node, fresh = {}, self.replay.node, self.replay.fresh.get
    for new, old in orig.items():
      n, o = fresh(new) or node(new), fresh(old) or node(old)  # (most are fresh: no call of node() for them)
      if n is not None and o is not None and n[0] == o[0] and n[2] == o[2] and n[1] == o[1]:  # (no slices made)
        out[new] = old
    return out

  def changes(self, j: int, k: int) -> tuple[set[int], set[int], set[int]]:
    """(added, removed, reborn) from the graph at step j to the graph at step k, from the steps between (the replay
    cursor stays where it is): reborn nodes are in both graphs, but a step between removed them and another added
    them back; they count as removed and added. A node touched is in the graph at k if the last step that touched
    it brought it, at j if the first took it away: set operations per step, not a look per node and step."""
    events: list[tuple[tuple[int, ...], bool]] = []  # (ids, brought), in the order the steps happen from j
    for s in (range(j + 1, k + 1) if j <= k else range(j, k, -1)):
      info = self.replay.step(s)
      if info is None:
        continue
      gone, new = [(info.removed, False)], [(info.added, True), (info.changed, True)]
      if j > k:
        gone, new = [(ids, False) for ids, _ in new], [(ids, True) for ids, _ in gone]
      events += gone + new
    added: set[int] = set()
    for ids, now in events:
      if now:
        added.update(ids)
      else:
        added.difference_update(ids)
    removed: set[int] = set()
    for ids, now in reversed(events):
      if now:
        removed.difference_update(ids)
      else:
        removed.update(ids)
    return added, removed, added & removed

  def is_chain(self, j: int, k: int, anchor: int = 0) -> bool:
    """Whether of every two neighbouring steps between j and k on the anchor's chain one's layout is derived from the
    other's (nothing moves between)."""
    d = self._derived
    at = self.at(anchor)
    return all(d.get((anchor, s if s > at else s - 1), False) for s in range(min(j, k) + 1, max(j, k) + 1))

  # ---- JSON
  def _match(self, k: int) -> dict | None:
    if k == 0:
      return None
    m = self.rw.step(k)
    pat = self.tr.patterns.get(m["pattern"])
    m["rule"] = None if pat is None else {"file": pat["file"], "line": pat["line"], "name": pat["name"]}
    info = self.replay.step(k)
    m["note"] = info.note if info is not None else None
    # the node of k's graph that stands for the rule's result: `after` is the trace's node, which replay rebuilds
    # under a fresh id where its sources were rebuilt (the page's automatic view centres on this one)
    m["result"] = info.by if info is not None else None
    return m

  def _marks(self, k: int, shown: frozenset[int] | None = None) -> dict:
    """The nodes step k added, changed and removed (added and changed: those shown, for a cut graph)."""
    info = self.replay.step(k)
    if info is None:
      return {"added": [], "changed": [], "removed": []}
    if shown is None:
      return {"added": list(info.added), "changed": list(info.changed), "removed": list(info.removed)}
    return {"added": [n for n in info.added if n in shown], "changed": [n for n in info.changed if n in shown],
            "removed": list(info.removed)}

  def _node(self, nid: int, lay: Layout, k: int, consts: dict[int, bool] | None = None, node: Node | None = None,
            created: Callable[[int], int | None] | None = None) -> dict:
    """A node as answers send it; created: replay.creator(k), where the caller has it (`created` null: unknown, a
    step not computed may have brought it)."""
    rp = self.replay
    if node is None:
      node = rp.node(nid)
    d = node_json(nid, node, self.looks.look(nid, node))  # type: ignore[arg-type]
    x, y = lay.pos[nid]
    d["x"], d["y"] = round(x, 1), round(y, 1)  # (_px, inlined: this runs for every node of a graph answer)
    if consts is None:
      d["consts"] = [s for s in node[3] if rp.node(s)[0] == "CONST"]  # type: ignore[index]
    else:
      d["consts"] = [s for s in node[3] if consts.get(s)]  # type: ignore[index]
    d["created"] = (created or rp.creator(k))(nid)
    site = self.tr.nodes.site(nid)
    if site is not None:  # (a replay-made node, not the trace's, has none)
      d["site"] = site_label(site)
    return d

  def _edges(self, nid: int, lay: Layout, shown: frozenset[int] | None = None, compact: bool = False,
             src: tuple[int, ...] | None = None, raw: bool = False) -> list[dict]:
    """A node's in-edges (of a cut graph: those from shown nodes; the others are its stubs); compact: a straight edge
    (two points, from its source's center to nid's) without its points, as compact deltas send it. src: nid's
    sources where the caller has them; raw: the points as the layout has them, for _round_points."""
    if src is None:
      src = self.replay.node(nid)[3]  # type: ignore[index]
    routes, pos = lay.edges, lay.pos
    out = []
    for i, s in enumerate(src):
      if shown is not None and s not in shown:
        continue
      pts = routes.get((s, nid), ())
      if compact and straight(pts, pos.get(s), pos[nid]):
        out.append({"src": s, "dst": nid, "index": i})
      else:
        out.append({"src": s, "dst": nid, "index": i, "points": pts if raw else route_json(pts)})
    return out

  @staticmethod
  def _round_points(edges: list[dict]) -> list[dict]:
    """edges from _edges(raw=True) with their points as answers send them (routes_json: all at once)."""
    has = [e for e in edges if "points" in e]
    for e, pts in zip(has, routes_json([e["points"] for e in has])):
      e["points"] = pts
    return edges

  def _is_const(self, members: frozenset[int]) -> dict[int, bool]:
    return {nid: self.replay.node(nid)[0] == "CONST" for nid in members}  # type: ignore[index]

  def fresh(self, k: int) -> Layout:
    """Step k's graph laid out from scratch (the page's re-layout key, a deep link, a far jump that jump() does not lay
    out from the layout on screen): the anchor of its own chain, which the steps around it derive from, both ways
    (after many steps placed into free spots a derived layout no longer reads top-down)."""
    return self.layout(k, anchor=k)

  def jump(self, k: int, j: int, anchor: int) -> int | None:
    """A far jump to step k from step j on `anchor`'s chain (the layout on screen): the id of a new anchor at k whose
    layout is j's with what k does not have taken out and k's other nodes placed into it (place.derive), so what the
    two steps share stays where the user saw it; None when k is better laid out fresh (an anchor k), or already was:
    j's layout is not at hand, a graph is cut, the rewrite is live (its views are rebuilt as it grows, and a jump's
    layout depends on where the user came from), or more of k is new than a step may place (_derive's bound). k's
    nodes are matched to j's top-down (_pair): a step of a GPT step's `add bufferize` rebuilds ~2,000 of its ~3,000
    nodes, so few ids survive many steps, but most nodes keep their look and their place among their users. The
    jump's answer took 55-220 ms CPU there where a fresh layout's took 375-445 (issue 30: a jump under 300 ms)."""
    # (k laid out fresh before, the re-layout key's: anchor_for found that chain; the page goes back to it)
    base = self._get(j, anchor) if self.rw.ended and k != j and self._get(k, k) is None else None
    if base is None or self.big(j) or self.big(k):  # (j's size is known once its layout is: the cursor stays)
      return None
    rp = self.replay
    mj, mk = rp.members(j), rp.members(k)
    new, removed = sorted(mk - mj), sorted(mj - mk)
    old_of = self._pair(rp.root(j), rp.root(k), mj, mk)
    if len(new) - len(old_of) > max(MASSIVE, len(base.pos) // 4):
      return None
    with self.lock:
      self._njumps += 1
      a = self._njumps * (self.rw.matches + 1) + k
      self._jumps[a] = (base, new, removed, old_of)
      self._paired = (a, j, anchor, old_of)  # (the last jump's match, for jump_delta: the page asks it at once)
    self._compute(k, anchor=a)  # (made at once: _make takes the entry, which holds the screen's layout, right away)
    return a

  def jump_delta(self, j: int, anchor: int, k: int, a: int) -> dict:
    """The compact=2 delta that turns the page's graph at step j (on `anchor`'s chain, on screen) into step k's on a
    far jump's anchor a laid out from it (jump()): what both steps have stays, with its in-edges (place.derive moves
    nothing of it); a node of k paired with one of j (_pair) is sent as rebuilt from it (`rebuilt` and `shifted` runs
    where its sources are its pair's renamed, else `like` with its own), the others whole; no ghosts (`jump`: a far
    step's graph shows none). k's marks and match are its graph's. A far jump of a GPT step's `add bufferize` sent
    its graph (~1.1 MB, ~60 ms of the server's CPU to make, as long to parse in the page); so 2-150 KB (issue 30)."""
    rp = self.replay
    lj, lk = self.layout(j, anchor=anchor), self.layout(k, anchor=a)
    mj, mk = rp.members(j), rp.members(k)
    got = self._paired
    old_of = got[3] if got is not None and got[:3] == (a, j, anchor) else self._pair(rp.root(j), rp.root(k), mj, mk)
    added_set, removed_set = mk - mj, mj - mk
    site, resite = self.tr.nodes.site, {}
    for n, o in old_of.items():  # (a pair's sites may differ: then its own, as a compact=2 step's `resite`)
      sn, so = (None if x >= FRESH_BASE else site(x) for x in (n, o))
      if sn != so:
        resite[n] = None if sn is None else site_label(sn)
    added = sorted(added_set)
    edges_added = self._edges_added(added, added_set, old_of, lj, lk, None, True)
    nodes_added, pairs, shifted = self._added(k, added, old_of, lj, lk, None, resite)
    out = {"from": j, "to": k, "nodes_added": nodes_added, "nodes_removed": sorted(removed_set), "nodes_moved": {},
           "edges_added": edges_added, "edges_removed": [], "width": _px(lk.width), "height": _px(lk.height),
           **self._marks(k), "match": self._match(k), "anchor": a, "jump": True}
    self._pack_rebuilt(out, pairs, shifted, resite, added_set)
    # the nodes both have whose `created` the page may hold otherwise: where either step's creator tells one (an
    # exact one never changes, and a page that came to j before its steps were computed holds null)
    kept = sorted(mj & mk)
    at_j, at_k = rp.creators(j)[1](kept), rp.creators(k)[1](kept)
    differ = [(n, c) for n, c, b in zip(kept, at_k, at_j) if c is not None or b is not None]
    if differ:
      out["kept_created"] = {"id": _diff_runs([n for n, _ in differ]), "value": _value_runs(c for _, c in differ)}
    return out

  def _pack_rebuilt(self, out: dict, pairs: list[tuple[int, int, int | None]],
                    shifted: list[tuple[int, int, int | None, float, float]], resite: dict,
                    added_set: set[int]) -> None:
    """A compact=2 delta's packing: rebuilt and shifted nodes as runs, straight edges and whole nodes packed; the page
    reads nodes_removed (a step's and a far jump's delta alike)."""
    del out["removed"]
    if pairs:
      self._rebuilt(out, pairs, resite)
    if shifted:
      self._shifted(out, shifted, resite)
    _pack_straight(out, added_set)
    _pack_whole(out)

  def _pair(self, rj: int, rk: int, mj: frozenset[int], mk: frozenset[int]) -> dict[int, int]:
    """{node of k: node of j it stands for} for the nodes of k that j lacks: from the roots down, a node of k not in j
    and one of j not in k with the same op, dtype and arg, reached as the same source (by index) of two nodes
    matched (or the same), pair up; each node once, the first way it is reached (depth first). Two that differ are
    looked under once (each against the other's sources): a node one step put in between (`add bufferize` puts
    BUFFERIZEs above nodes) does not end the match of what is under it. Nodes both graphs have are their own match:
    their sources are the same nodes, so only the new nodes' sources need looking at. O(edges)."""
    node = self.replay.node
    old_of: dict[int, int] = {}
    used: set[int] = set()
    todo = [(rk, rj, True)]
    while todo:
      b, a, skip = todo.pop()
      if b in mj or a in mk or b in old_of or a in used:
        continue
      nb, na = node(b), node(a)
      if nb[0] != na[0] or nb[1] != na[1] or nb[2] != na[2]:  # type: ignore[index]
        if skip:  # a node one of the steps put above (or took from above) the other: match under it, once
          todo.extend((s, a, False) for s in nb[3])  # type: ignore[index]
          todo.extend((b, s, False) for s in na[3])  # type: ignore[index]
        continue
      old_of[b] = a
      used.add(a)
      todo.extend(zip(nb[3], na[3], itertools.repeat(True)))  # type: ignore[index]
    return old_of

  def _jumped(self, k: int, base: Layout, new: list[int], removed: list[int], old_of: dict[int, int]) -> Layout:
    """The layout of a far jump's anchor at k from the layout on screen (jump()): nothing both steps have moves, each
    matched node takes its match's place where it can, the others are placed as a step's new nodes are."""
    self.stats["jumped"] = self.stats.get("jumped", 0) + 1
    rp = self.replay
    rows, bands = self._index(base)
    pos, layer, edges, width, height, rows, bands = place.derive(
      base, rows, bands, new, removed, old_of, rp.src, self.looks.size, rp.level, rp.node, srcs_of=rp.srcs)
    return _Placed(pos, layer, edges, width, height, rows=rows, bands=bands)

  def graph(self, k: int, compact: bool = False, fresh: bool = False, anchor: int = 0) -> dict:
    """The full graph after k matches, with the nodes step k removed as they were at step k-1 (and their in-edges),
    so that a view opened at step k can show what went away. A graph too big is cut (viz_server.cut): only the
    nodes shown and the edges between them are sent, `cut` says how many of how many, around what, with the stubs.
    compact: its straight edges come without points (docs: JSON API; most edges are straight: a quarter of the
    answer, less to build, send and parse); the removed nodes' edges always have theirs. anchor: the layout on that
    step's chain (`anchor` in the answer where not 0); fresh: anchor k, laid out from scratch (fresh(); a cut graph's
    window is laid out fresh anyway), then without the removed nodes (no place of theirs fits it)."""
    if fresh:
      anchor = k
    if self.big(k):
      anchor = 0
    fresh = anchor > 0 and self.at(anchor) == k  # (laid out fresh, or from the layout on screen: jump())
    lay, members, cut_lay = self.shown(k, anchor=anchor)
    shown = None if cut_lay is None else members
    order = sorted(members)
    rp = self.replay
    got: dict[int, Node] = {n: rp.node(n) for n in order}  # type: ignore[misc]  # (each node is looked up once)
    consts = {n: node[0] == "CONST" for n, node in got.items()}
    marks = self._marks(k, shown)
    gone_nodes, gone_edges = [], []
    if marks["removed"] and not fresh:
      prev, before, prev_cut = self.shown(k - 1, anchor=anchor)
      if prev_cut is not None:
        marks["removed"] = [n for n in marks["removed"] if n in before]
      at_prev = rp.creator(k - 1)
      for n in sorted(marks["removed"]):
        gone_nodes.append(self._node(n, prev, k - 1, created=at_prev))
        gone_edges.extend(self._edges(n, prev, None if prev_cut is None else before))
    at = rp.creator(k)
    edges = self._round_points([e for n in order for e in self._edges(n, lay, shown, compact, got[n][3], True)])
    out = {"rewrite": self.rw.id, "step": k, "nodes": [self._node(n, lay, k, consts, got[n], at) for n in order],
           "edges": edges,
           "width": _px(lay.width),
           "height": _px(lay.height), **marks, "match": self._match(k), "removed_nodes": gone_nodes,
           "removed_edges": gone_edges}
    if cut_lay is not None:
      out["cut"] = cut_lay.info()
    if anchor:
      out["anchor"] = anchor
    return out

  def graph_json(self, k: int, compact: bool = False, fresh: bool = False, anchor: int = 0) -> bytes:
    """graph(k, compact, fresh, anchor) encoded (dumps); kept in caches.ANSWERS once the rewrite has ended (a live
    one's view is rebuilt as it grows, but its last step's graph would change under the same key)."""
    if fresh or self.big(k):
      anchor = k if fresh and not self.big(k) else 0
    build = (lambda: self.graph(k, compact, anchor=anchor)) if anchor else (lambda: self.graph(k, compact))
    if not self.rw.ended:
      return dumps(build())
    key = self.key + ((k, compact, "a", anchor) if anchor else (k, compact))
    got = caches.ANSWERS.get(key)
    if got is None:
      got = dumps(build())
      caches.ANSWERS.put(key, got, len(got))
    return got

  def delta_json(self, j: int, k: int, compact: bool = False, rebuilt: bool = False, anchor: int = 0,
                 held: bool = False) -> bytes:
    """delta(j, k, ...) encoded (dumps); kept in caches.ANSWERS where the rewrite has ended and every step up to both
    is computed once it is made (then the answer never changes: its `created` are exact; the delta computes the
    steps between j and k first, so every step before them computed is enough). The prefetch worker makes the next
    steps' ones ahead (views.Views), so an arrow step's request only sends bytes (issue 30)."""
    if not self.rw.ended or not self.replay.computed(min(j, k)):
      return dumps(self.delta(j, k, compact, rebuilt, anchor, held))
    key = self._dkey(j, k, compact, rebuilt, anchor, held)
    got, ev = self._claim(self._busy_d, key, lambda: caches.ANSWERS.get(key))  # (made once, as _compute's layouts)
    if ev is None:
      return got
    try:
      got = dumps(self.delta(j, k, compact, rebuilt, anchor, held))
      if self.replay.computed(max(j, k)):
        caches.ANSWERS.put(key, got, len(got))
    finally:
      self._release(self._busy_d, key, ev)
    return got

  def _dkey(self, j: int, k: int, compact: bool, rebuilt: bool, anchor: int, held: bool) -> tuple:
    return self.key + ("d", j, k, compact, rebuilt, anchor, held)  # (a delta answer's in caches.ANSWERS)

  def _edges_added(self, nodes: list[int], added_set: set[int], like: dict[int, int], lj: Layout, lk: Layout,
                   shown: frozenset[int] | None, compact: bool) -> list[dict]:
    """The in-edges of `nodes` at k (layout lk) that the client does not have from j (layout lj): an added node's,
    a kept node's whose route changed, a rebuilt node's (`like`) that its old node's route at that index does not
    give; only from sources in `shown` where the graph is cut."""
    src_of, old_route, new_route, fresh = self.replay.src, lj.edges.get, lk.edges.get, self.replay.fresh.get
    out = []
    for n in nodes:  # (src() inlined for fresh nodes: most of the ~2,000 a step rebuilds, each with its old node)
      src = f[3] if (f := fresh(n)) is not None else src_of(n)
      old = like.get(n)
      old_src = (f[3] if (f := fresh(old)) is not None else src_of(old)) if old is not None else ()
      for i, s in enumerate(src):
        if shown is not None and s not in shown:
          continue
        pts = new_route((s, n), ())
        if old is not None:  # the client gives a rebuilt node the old node's in-edge routes, index by index; one
          # with more sources than the old node has nothing to inherit past the old node's last source
          if i < len(old_src) and ((got := old_route((old_src[i], old))) is pts or got == pts):
            continue
        elif n not in added_set and lj.edges.get((s, n)) == pts:
          continue
        e = {"src": s, "dst": n, "index": i}
        if not compact or not straight(pts, lk.pos.get(s), lk.pos[n]):
          e["points"] = route_json(pts)
        out.append(e)
    return out

  def _likes(self, j: int, k: int, added: set[int], removed: set[int], reborn: set[int],
             resite: dict[int, str | None] | None = None) -> dict[int, int]:
    """{node added: the removed node it is sent `like`} of a compact delta from j to k: a rebuilt node with its old
    node's call site (it takes like's fields, the site among them), and each node reborn as itself. resite (compact=2
    only): a rebuilt node whose call site is not its old node's is sent `like` it too, resite[id] its own site's label
    (None: it has none; `"site"` in a `like` entry, `nosite` and `resite` in _rebuilt's runs). A fresh node (made by
    replay) has no site: the ~700 fresh users of a trace node with one went whole with every in-edge (issue 30: step 5
    of a GPT step's `add bufferize`, 434 KB), and so did the trace's nodes a step back brings back over them."""
    site, al = self.tr.nodes.site, self.aliases(j, k)
    # (a fresh id is none of the trace's: no site, not looked up; most of the ~2,000 a step rebuilds are fresh)
    like = {n: o for n, o in al.items() if n in added and o in removed
            and (None if n >= FRESH_BASE else site(n)) == (None if o >= FRESH_BASE else site(o))}
    if resite is not None:  # (then the others: a few a step, ~700 on one)
      for n, o in al.items():
        if n not in like and n in added and o in removed:
          like[n] = o
          resite[n] = None if n >= FRESH_BASE or (got := site(n)) is None else site_label(got)
    like.update((n, n) for n in reborn)
    return like

  def delta(self, j: int, k: int, compact: bool = False, rebuilt: bool = False, anchor: int = 0,
            held: bool = False) -> dict:
    """What turns the graph at step j into the graph at step k.

    A node in both whose incarnation differs (a step between removed it and another added it back) is removed and
    added. compact (docs: JSON API): a node rebuilt from node `like` of step j is sent as {id, like, src, x, y,
    created} and its in-edges are like's unless edges_added lists them; edges of removed nodes are not listed in
    edges_removed; a straight edge (two points, center to center) comes without points. When every step between j
    and k was derived from the one before, nodes in both keep their places and in-edges, so only the nodes that
    came and went are looked at. Between graphs of which one is cut, a node is added or removed also where it comes
    into or leaves what is shown, with its edges to kept nodes; none is sent as `like` (its old in-edges could lead
    to nodes no longer shown). rebuilt (with compact: `compact=2`): without the `removed` mark (nodes_removed says
    it), rebuilt nodes as _rebuilt and _shifted send them (a site not like's, as _likes says, included), new nodes
    and straight edges as _pack_whole and _pack_straight do. anchor: both layouts on that step's chain (graph()).
    held (with rebuilt, a step back from j to j - 1, neither graph cut): the page holds the in-edges of the nodes step
    j removed as they were on step j - 1's layout of this chain (what step j's graph or the step to it removed), so
    those that come back with points are sent as _pack_held's `held`."""
    rp = self.replay
    cj, ck = (self._cut(s) if self.big(s) else None for s in (j, k))
    lj, lk = cj or self.layout(j, anchor=anchor), ck or self.layout(k, anchor=anchor)
    cutting = cj is not None or ck is not None
    chain = not cutting and self.is_chain(j, k, anchor)
    added_set, removed_set, reborn = self.changes(j, k)
    mj = mk = frozenset()  # the nodes shown at j and k, where needed (a chain delta looks only at what changed)
    if cutting or not chain:
      mj, mk = (c.shown if c is not None else rp.members(s) for c, s in ((cj, j), (ck, k)))
    if cutting:
      added_set = {n for n in mk if n not in mj or n in added_set}
      removed_set = {n for n in mj if n not in mk or n in removed_set}
    added, removed = sorted(added_set), sorted(removed_set)
    resite: dict[int, str | None] | None = {} if rebuilt else None  # rebuilt nodes' sites that are not like's
    like = self._likes(j, k, added_set, removed_set, reborn, resite) if compact and not cutting else {}
    REQUEST_GATE.give_way()  # (made by the prefetch worker: see views.Views)
    moved = {}
    kept_changed: list[int] = []  # kept nodes whose in-edges may have new routes
    consts = None
    if not chain:
      for n in mk:
        if n in added_set:
          continue
        a, b = lj.pos[n], lk.pos[n]
        if _px(a[0]) != _px(b[0]) or _px(a[1]) != _px(b[1]):
          moved[n] = [_px(b[0]), _px(b[1])]
      kept_changed = sorted(n for n in mk if n not in added_set)
      consts = self._is_const(mk)
    edges_added = self._edges_added(sorted([*added, *kept_changed]), added_set, like, lj, lk,
                                    mk if cutting else None, compact)
    REQUEST_GATE.give_way()
    nodes_added, pairs, shifted = self._added(k, added, like, lj, lk, consts, resite)
    edges_removed = []
    if not compact:
      for n in removed:
        edges_removed.extend([s, n, i] for i, s in enumerate(rp.node(n)[3])  # type: ignore[index]
                             if not cutting or s in mj)
    if cutting:  # a kept node's edges from sources no longer shown (the client drops only removed nodes' in-edges)
      for n in kept_changed:
        edges_removed.extend([s, n, i] for i, s in enumerate(rp.node(n)[3]) if s in mj and s not in mk)  # type: ignore[index]
    out = {"from": j, "to": k, "nodes_added": nodes_added, "nodes_removed": removed,
           "nodes_moved": {str(n): xy for n, xy in sorted(moved.items())}, "edges_added": edges_added,
           "edges_removed": edges_removed, "width": _px(lk.width), "height": _px(lk.height),
           **self._marks(k, mk if ck is not None else None), "match": self._match(k)}
    if ck is not None:
      out["cut"] = ck.info()
    if rebuilt:
      self._pack_rebuilt(out, pairs, shifted, resite, added_set)
      if held and k == j - 1 and not cutting and (info := rp.step(j)) is not None:
        _pack_held(out, set(info.removed))
    return out

  def _added(self, k: int, added: list[int], like: dict[int, int], lj: Layout, lk: Layout,
             consts: dict[int, bool] | None, resite: dict[int, str | None] | None
             ) -> tuple[list[dict], list[tuple[int, int, int | None]], list[tuple[int, int, int | None, float, float]]]:
    """A delta's nodes_added; resite not None (compact=2): with the rebuilt nodes the page makes from their old node
    alone left out (their sources their old node's renamed): those at their old node's place as (id, like, created)
    for _rebuilt, the others (moved: ~130 a step of steps 31-73 of `add bufferize`, sent whole with every in-edge they
    were 20-33 KB) as (id, like, created, x, y) for _shifted."""
    rp = self.replay
    nodes_added = []
    pairs: list[tuple[int, int, int | None]] = []  # (never made a dict)
    shifted: list[tuple[int, int, int | None, float, float]] = []
    rename = ({o: n for n in added if (o := like.get(n)) is not None}.get if resite is not None and like else None)
    (created_at, creations), pos_k, pos_j = rp.creators(k), lk.pos, lj.pos  # (bound once: ~2,000 nodes a step)
    # each node's like, created, sources and like's (a node without one: its own), listed at once, not asked per node
    # in the loop (~2,000 a step rebuilds)
    likes = list(map(like.get, added))
    each = zip(added, likes, creations(added), rp.srcs(added), rp.srcs(o if o is not None else n
                                                                       for n, o in zip(added, likes)))
    for n, old, created, sn, so in each:
      if old is None:
        nodes_added.append(self._node(n, lk, k, consts, created=created_at))
        continue
      xy = pos_k[n]
      if rename is not None and sn == tuple(map(rename, so, so)):  # (in C)
        # one the page can make from its old node alone
        if xy is (oxy := pos_j[old]) or (round(xy[0], 1) == round(oxy[0], 1) and round(xy[1], 1) == round(oxy[1], 1)):
          pairs.append((n, old, created))  # (a box kept: the same tuple)
        else:
          shifted.append((n, old, created, round(xy[0], 1), round(xy[1], 1)))
        continue
      a = {"id": n, "like": old, "src": list(sn), "x": round(xy[0], 1), "y": round(xy[1], 1),
           "created": created}
      if resite and n in resite:
        a["site"] = resite[n]  # (its own: like's is another; None: it has none)
      nodes_added.append(a)
    return nodes_added, pairs, shifted

  @staticmethod
  def _shifted(out: dict, shifted: list[tuple[int, int, int | None, float, float]],
               resite: dict[int, str | None] | None) -> None:
    """Rebuilt nodes the page makes from their old node alone but at a new place, as `shifted`: {id, like} as runs of
    differences (_diff_runs), their places as a flat `xy`, and `created`, `nosite`, `resite` as in _rebuilt; each
    stands for the compact entry {id, like, src: like's sources renamed, x, y, created} (with `site` where it is not
    like's) and its old node is left out of nodes_removed."""
    ns, likes, created, xs, ys = zip(*_by_fewer_runs(shifted, 0, 1))
    olds = set(likes)
    out["shifted"] = sh = {"id": _diff_runs(list(ns)), "like": _diff_runs(list(likes)),
                           "xy": list(chain.from_iterable(zip(xs, ys)))}
    _own_columns(sh, out["to"], ns, created, resite)
    out["nodes_removed"] = list(itertools.filterfalse(olds.__contains__, out["nodes_removed"]))

  def _rebuilt(self, out: dict, pairs: list[tuple[int, int, int | None]],
               resite: dict[int, str | None] | None = None) -> None:
    """Move the rebuilt nodes that the page can make from their old node alone out of a compact delta's nodes_added,
    into `rebuilt`: {id, like} as runs of differences (_diff_runs; ids and likes both mostly ascend by one). Such a
    node sits at its old node's place and its sources are its old node's, each renamed to its rebuilt node where this
    delta rebuilt it. A rewrite rebuilds every user of what it replaced: one step of a GPT
    training step's `add bufferize` rebuilt ~1,900 nodes (226 KB as {id, like, src, x, y, created}, ~8 KB as
    differences, ~0.4 KB as their runs; _own_columns: their `created` where one is not k, their call sites where not
    their old node's). `changed` then lists only what is not rebuilt, the column `unchanged` (_flag_runs) the rebuilt
    nodes that are not changed (a step back: a list of ~1,900 ids was 9.3 KB), and nodes_removed
    leaves out their old nodes (removed with them). delta finds them (pairs: (id, like)) as it lists the added nodes,
    and never makes their dicts. In the order of fewer runs (_by_fewer_runs)."""
    ns, likes, created = map(list, zip(*_by_fewer_runs(pairs, 0, 1)))  # (each once: delta lists each added node once)
    ids, olds, changed = set(ns), set(likes), set(out["changed"])
    out["rebuilt"] = r = {"id": _diff_runs(ns), "like": _diff_runs(likes)}
    _own_columns(r, out["to"], ns, created, resite)
    out["nodes_removed"] = list(itertools.filterfalse(olds.__contains__, out["nodes_removed"]))
    flags = list(map(changed.__contains__, ns))
    if not all(flags):  # (forward every rebuilt node is changed; back, as step k's marks say, most are not)
      r["unchanged"] = _flag_runs(map(not_, flags))
    out["changed"] = list(itertools.filterfalse(ids.__contains__, out["changed"]))

