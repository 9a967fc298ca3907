"""Incremental layout: the layout of a rewrite step from the layout of the step before, without moving any node the
two steps share. Work is proportional to the nodes the step changed (plus a shallow copy of the position maps), and
only those that move are placed one by one (the rebuilt nodes that keep their old boxes get them at once, _stayers).

The step's new nodes (its match result, what that built, and the parents rebuilt over them) are placed sources
first. A rebuilt node takes its old version's place when that lies below all its sources and is free, or, when its
sources were pushed down past it, the spot just below them in its old column if that is free (what hangs under a
node pushed down follows it in its arrangement); a rebuilt node that can have neither (its box grew, or the spot is
taken) goes to the free spot nearest its old place on the rows nearest its old row (pushed: the row just below its
sources); every other new node goes to a free spot on a band (a layer's row of the full layout the chain started
from) or in the gap between two bands, below all its sources and, where there is room, above its users' places, next
to its neighbours. Only new nodes use new nodes (a kept node's sources are fixed by its id), so a node pushed further
down only pushes its (new) users down after it: placement always succeeds. Boxes never overlap: a spot is free when
no box is closer than NODE_GAP horizontally and VPAD vertically.
"""
from __future__ import annotations

import bisect
import heapq
from collections import deque
from functools import partial
from itertools import chain, filterfalse, repeat
from typing import Callable, Iterable

from viz_server.gate import REQUEST_GATE
from viz_server.layout import LAYER_GAP, Layout
from viz_server.nodes import Node

NODE_GAP = 24.0  # horizontal clearance around a placed box (as between two boxes of a full layout's row)
VPAD = 4.0  # vertical clearance between a placed box and boxes of other rows
BAND_STEP = 23.0 + LAYER_GAP  # distance of the bands added below the last one (one-line boxes)
GAP_PENALTY = 30.0  # a gap between two bands counts as this much farther from the neighbours than a band
RANK_PENALTY = 40.0  # per candidate row away from the preferred one
MAX_PLACES = 8  # held places a node is placed next to (bounded: through shared users they would multiply)
MASSIVE = 64  # a step with more new nodes than this (and than a quarter of the graph) without an old version to
# take the place of is not placed here: placing so many one by one would look arbitrary (its caller lays them out on
# their own)

Box = tuple[float, float, float]  # (left, right, half height), rows sorted by left. No id: a rebuilt node that keeps
# its old box keeps it as it is (~2,000 a step of a GPT step's `add bufferize`), and two boxes alike are alike to
# every search (only a held place lies on another box, the same box: _hold_old_places)


class Rows:
  """The boxes of a layout grouped by center y, each row sorted by left edge, copy-on-write: a derived layout shares
  its unchanged rows with its base."""
  __slots__ = ("ys", "rows", "hh", "wmax", "_own")

  def __init__(self, ys: list[float], rows: dict[float, list[Box]], hh: float, wmax: float) -> None:
    self.ys, self.rows = ys, rows  # sorted row ys, y -> boxes
    self.hh, self.wmax = hh, wmax  # the largest half height and width of a box
    self._own: set[float] = set()

  @classmethod
  def of(cls, pos: dict[int, tuple[float, float]], size: Callable[[int], tuple[float, float]]) -> Rows:
    rows: dict[float, list[Box]] = {}
    hh = wmax = 0.0
    for n, (x, y) in pos.items():
      w, h = size(n)
      rows.setdefault(y, []).append((x - w / 2, x + w / 2, h / 2))
      hh, wmax = max(hh, h / 2), max(wmax, w)
    for row in rows.values():
      row.sort()
    return cls(sorted(rows), rows, hh, wmax)

  def copy(self) -> Rows:
    return Rows(list(self.ys), dict(self.rows), self.hh, self.wmax)

  def _row(self, y: float) -> list[Box]:
    if y not in self._own:
      self._own.add(y)
      got = self.rows.get(y)
      if got is None:
        bisect.insort(self.ys, y)
      self.rows[y] = list(got) if got is not None else []
    return self.rows[y]

  def add(self, x: float, y: float, w: float, h: float) -> None:
    bisect.insort(self._row(y), (x - w / 2, x + w / 2, h / 2))
    self.hh, self.wmax = max(self.hh, h / 2), max(self.wmax, w)

  def remove(self, x: float, y: float, w: float) -> None:
    """Remove a w-wide box centered at (x, y) (as add() made it; none there: nothing)."""
    row = self._row(y)
    left, right = x - w / 2, x + w / 2
    i = bisect.bisect_left(row, (left, right))
    if i < len(row) and row[i][0] == left and row[i][1] == right:
      del row[i]
    if not row:
      del self.rows[y]
      self.ys.pop(bisect.bisect_left(self.ys, y))
      self._own.discard(y)

  def blockers(self, x: float, y: float, w: float, h: float) -> list[Box]:
    """Boxes closer than NODE_GAP horizontally and VPAD vertically to a w x h box centered at (x, y)."""
    reach, ys = h / 2 + self.hh + VPAD, self.ys
    x0, x1 = x - w / 2 - NODE_GAP + 1e-9, x + w / 2 + NODE_GAP - 1e-9  # a box must end after x0, start before x1
    out = []
    for i in range(bisect.bisect_right(ys, y - reach), bisect.bisect_left(ys, y + reach)):
      ry = ys[i]
      dy = abs(ry - y) - h / 2 - VPAD
      row = self.rows[ry]
      for j in range(bisect.bisect_left(row, (x0 - self.wmax,)), bisect.bisect_left(row, (x1,))):
        box = row[j]
        if box[1] > x0 and dy < box[2]:
          out.append(box)
    return out

  def is_free(self, x: float, y: float, w: float, h: float) -> bool:
    return x >= w / 2 - 1e-9 and not self.blockers(x, y, w, h)

  def free_x(self, y: float, w: float, h: float, target: float) -> float:
    """The x nearest to target (and >= w/2) where a w x h box at y keeps its clearances (ties: the right one)."""
    lo = w / 2
    start = max(target, lo)
    # the boxes that can block a box on this row, by left edge: a center x is blocked by (l, r) when
    # l - pad < x < r + pad; walking over them in order from start is linear, not a search per box in the way (and
    # it is the test whether start is free: the walk right leaves start as it is only then, so no blockers() first)
    pad = NODE_GAP + w / 2 - 1e-9
    reach, ys = h / 2 + self.hh + VPAD, self.ys
    near = []
    for i in range(bisect.bisect_right(ys, y - reach), bisect.bisect_left(ys, y + reach)):
      ry = ys[i]
      dy = abs(ry - y) - h / 2 - VPAD
      near.append((dy, self.rows[ry]))
    wmax = self.wmax
    if len(near) == 1:  # the common case (one row within reach): one walk over its list
      dy, row = near[0]
      # (a box that starts left of start - pad - wmax ends before start's blocked span)
      right = _right_in(row, bisect.bisect_left(row, (start - pad - wmax,)), dy, pad, start)
    else:
      right = _right_rows(near, pad, wmax, start)
    if target < lo or right == start:
      return right
    if len(near) == 1:
      left = _left_in(row, bisect.bisect_left(row, (target + pad,)), dy, pad, wmax, target, lo, right)
    else:
      left = _left_rows(near, pad, wmax, target, lo, right)
    return left if left >= lo and target - left < right - target else right


def _right_rows(near: list[tuple[float, list[Box]]], pad: float, wmax: float, right: float) -> float:
  """The first free center x from right on over several rows: each row's boxes walked (as _right_in) from where its
  walk last stopped, the rows in turn until none moves x (the least x >= right free in every row, as a walk over the
  rows' merged boxes finds; a box passed never blocks again, x only grows). A heapq.merge of the rows' boxes sliced
  the rest of every row: free_x took 46 ms of End's derive on a GPT step's `add bufferize`, now 30."""
  at = [bisect.bisect_left(row, (right - pad - wmax,)) for _, row in near]
  moved = True
  while moved:
    moved = False
    for k, (dy, row) in enumerate(near):
      j, end = at[k], len(row)
      while j < end:
        b = row[j]
        if dy < b[2]:
          if b[0] - pad >= right:
            break
          if b[1] + pad > right:
            right, moved = b[1] + pad + 1e-9, True
        j += 1
      at[k] = j
  return right


def _left_rows(near: list[tuple[float, list[Box]]], pad: float, wmax: float, target: float, lo: float,
               right: float) -> float:
  """The first free center x from target leftwards over several rows (_right_rows' mirror, each turn from the row's
  boxes that start left of x + pad: a box passed for ending left of x may block once another row moved x further
  left; a value below lo or no nearer than right is returned as soon as it is reached: the caller rejects it)."""
  left, moved = target, True
  while moved:
    moved = False
    for dy, row in near:
      j = bisect.bisect_left(row, (left + pad,)) - 1
      while j >= 0:
        b = row[j]
        if dy < b[2]:
          if b[0] + wmax + pad <= left:
            break
          if b[1] + pad > left and b[0] - pad < left:
            left, moved = b[0] - pad - 1e-9, True
            if left < lo or target - left >= right - target:
              return left
        j -= 1
  return left


def _right_in(row: list[Box], i: int, dy: float, pad: float, right: float) -> float:
  """The first free center x from right on, over one row's boxes from i on (ordered by left edge) that reach a box dy
  away (the loop inlined: it is the hot one)."""
  for j in range(i, len(row)):
    b = row[j]
    if dy < b[2]:
      if b[0] - pad >= right:
        break
      if b[1] + pad > right:
        right = b[1] + pad + 1e-9
  return right


def _left_in(row: list[Box], i: int, dy: float, pad: float, wmax: float, left: float, lo: float,
             right: float) -> float:
  """The first free center x from left leftwards, over one row's boxes before i that reach a box dy away, right to
  left; stops early (returning a value the caller rejects) once that x is below lo or no nearer than right."""
  target = left
  for j in range(i - 1, -1, -1):
    b = row[j]
    if dy < b[2]:
      if b[0] + wmax + pad <= left:
        break
      if b[1] + pad > left and b[0] - pad < left:
        left = b[0] - pad - 1e-9
        if left < lo or target - left >= right - target:
          return left
  return left


class Bands:
  """The rows of a full layout's layers (y and layer number, top to bottom), extended downwards on demand."""
  __slots__ = ("ys", "layers")

  def __init__(self, ys: list[float], layers: list[int]) -> None:
    self.ys, self.layers = ys, layers

  @classmethod
  def of(cls, lay: Layout) -> Bands:
    by_layer: dict[int, float] = {}
    for n, ly in lay.layer.items():
      by_layer.setdefault(ly, lay.pos[n][1])
    keys = sorted(by_layer, key=lambda ly: (by_layer[ly], ly))
    ys, layers = [], []
    for ly in keys:
      if not ys or by_layer[ly] > ys[-1]:
        ys.append(by_layer[ly])
        layers.append(ly)
    return cls(ys, layers)

  def copy(self) -> Bands:
    return Bands(list(self.ys), list(self.layers))

  def extend_below(self, y: float) -> None:
    while not self.ys or self.ys[-1] <= y:
      self.ys.append(self.ys[-1] + BAND_STEP if self.ys else y + BAND_STEP)
      self.layers.append(self.layers[-1] + 1 if self.layers else 0)

  def layer_at(self, y: float) -> int:
    """The layer of the band at y, or of the band below y (the gap above a band belongs to it)."""
    self.extend_below(y)
    return self.layers[bisect.bisect_left(self.ys, y - 1e-6)]


class _Candidates:
  """The band and gap rows below y `above`, top to bottom, as (y, is_gap), read by index without being listed (a
  graph of ~1,000 layers has ~2,000 of them; a node looks at a few): a gap above the first band below `above` if its
  middle is below it, then each band and the gap after it (none after the last). Bands are added below the last as
  needed."""
  __slots__ = ("ys", "i", "off", "n")

  def __init__(self, bands: Bands, above: float) -> None:
    bands.extend_below(above + BAND_STEP / 2)
    self.ys = ys = bands.ys
    self.i = i = bisect.bisect_right(ys, above)
    self.off = 1 if i > 0 and (ys[i - 1] + ys[i]) / 2 > above else 0
    self.n = self.off + 2 * (len(ys) - i) - 1

  def __getitem__(self, t: int) -> tuple[float, bool]:
    ys = self.ys
    if t < self.off:
      return (ys[self.i - 1] + ys[self.i]) / 2, True
    u = t - self.off
    j = self.i + u // 2
    return (ys[j], False) if u % 2 == 0 else ((ys[j] + ys[j + 1]) / 2, True)

  def below(self, lim: float) -> int:
    """How many of the rows lie above y lim (a prefix: they are ordered by y). One bisect of the bands: the rows
    above lim are those up to the last band above it and the gap after that band if its middle is (a gap lies between
    its bands: (a + b) / 2 is within [a, b] in floats too); a binary search reading rows one by one was ~15% of a far
    jump's derive."""
    ys, i, off = self.ys, self.i, self.off
    b = bisect.bisect_left(ys, lim)  # the bands above lim: ys[:b]
    if b <= i:
      return 1 if off and (ys[i - 1] + ys[i]) / 2 < lim else 0
    t = off + 2 * (b - 1 - i) + 1  # the rows up to band b - 1
    return min(self.n, t + 1 if b < len(ys) and (ys[b - 1] + ys[b]) / 2 < lim else t)  # (bands added since: not rows)


def derive(base: Layout, rows: Rows, bands: Bands, new: list[int], removed: Iterable[int],
           old_of: dict[int, int], src: Callable[[int], tuple[int, ...]], size: Callable[[int], tuple[float, float]],
           level: Callable[[int], int], look: Callable[[int], Node | None] | None = None,
           new_srcs: list[tuple[int, ...]] | None = None,
           srcs_of: Callable[[Iterable[int]], list[tuple[int, ...]]] | None = None
           ) -> tuple[dict, dict, dict, float, float, Rows, Bands]:
  """Place the new nodes of a step into a copy of base (see the module docstring).

  new: ids in the step's graph that base lacks; removed: ids of base the step dropped; old_of: new id -> the id in
  base it rebuilds (same look, it takes that one's place if it can). look: node id -> (op, dtype, arg, src), where
  `size` is a function of (op, dtype, arg) (a view's Looks): two nodes of the same look have the same box without
  asking size. new_srcs: src() of each of new, in order, where the caller has them; srcs_of: src() of many ids at
  once (Replay.srcs: a step places ~2,000 rebuilt nodes and drops as many, a call of src() each was ~0.2 ms a
  thousand). Returns pos, layer, edges, width, height, rows and bands of the new layout."""
  pos, layer, edges = dict(base.pos), dict(base.layer), dict(base.edges)
  rows, bands = rows.copy(), bands.copy()
  removed = set(removed)
  if srcs_of is None:
    srcs_of = partial(map, src)
  # (asked once per new node: _stayers and _route_new both read them)
  srcs = dict(zip(new, new_srcs if new_srcs is not None else srcs_of(new)))
  give_way = REQUEST_GATE.give_way  # (between the parts, ~3 ms each: the prefetch worker lets a request run alone)
  give_way()
  stay, users = _stayers(new, removed, old_of, base.pos, srcs, size, look)
  give_way()
  _drop_removed(removed, pos, layer, edges, rows, srcs_of, size, stay)
  give_way()
  order = sorted(sorted(filterfalse(stay.__contains__, new)), key=level)  # by (level, id), the key built once per node
  reserved = _hold_old_places(order, old_of, base, rows, size)
  # every held place, as _goals reads them (in C, map and zip: ~2,000 stayers a step)
  held = {**dict(zip(stay.keys(), map(base.pos.__getitem__, stay.values()))), **reserved}
  # (each node's users in placing order)
  goal = _goals(order, {n: sorted(users.get(n, ()), key=lambda u: (level(u), u)) for n in order}, held)
  width, height = _place_new(order, base, old_of, reserved, goal, pos, layer, rows, bands, src, size,
                             (stay, users, held, level))
  give_way()
  _route_new(new, base, old_of, pos, edges, srcs)
  return pos, layer, edges, width, height, rows, bands


def _stayers(new: list[int], removed: set[int], old_of: dict[int, int], base_pos: dict,
             srcs: dict[int, tuple[int, ...]], size: Callable[[int], tuple[float, float]],
             look: Callable[[int], Node | None] | None = None) -> tuple[dict[int, int], dict[int, list[int]]]:
  """The rebuilt nodes taken to keep their old version's box as it is (new id -> old id), and the users of each new
  node among the new ones. Such a node's old node left the graph, no other new node rebuilds it, the box has the
  same size, and it lies below each of the node's sources that is kept or such a node itself; _place_new would put
  it in that box (its first case) and change nothing else, so derive gives these nodes their boxes at once and
  places only the others in order, and a node's users of this kind once it is placed (their box may be no longer
  below it). A rewrite rebuilds every user of what a match replaced: ~1,300-1,900 of the ~3,000 nodes at each step
  of a GPT step's `add bufferize`, all but a handful kept in place. Cost: one look per new node and per source (srcs:
  each new node's sources), in loops kept tight: this runs for every step of a far jump's chain."""
  olds = list(map(old_of.get, new))
  count: dict[int, int] = {}
  for o in olds:
    if o is not None:
      count[o] = count.get(o, 0) + 1
  users: dict[int, list[int]] = {n: [] for n in new}
  cand: dict[int, float] = {}  # a new node that may keep its old box -> the y of that box
  for n, o in zip(new, olds):
    if o is not None and count[o] == 1 and o in removed:
      if look is not None:  # (the same look: the same box, no size asked; most rebuilt nodes are fresh ones that
        # nothing else sizes: a size made for each was ~15% of derive, and kept ~300 bytes a node in the view's Looks)
        a, b = look(n), look(o)
        if not (a[0] == b[0] and a[1] == b[1] and a[2] == b[2]) and size(n) != size(o):  # type: ignore[index]
          continue
      elif size(n) != size(o):
        continue
      cand[n] = base_pos[o][1]
  stay: dict[int, int] = {}
  get_cand, get_users = cand.get, users.get
  for n in new:
    y = get_cand(n)
    ok = y is not None
    for s in srcs[n]:
      us = get_users(s)
      if us is not None:
        us.append(n)
        if ok and (ys := get_cand(s)) is not None and ys >= y:  # (a source placed in order asks again once placed)
          ok = False
      elif ok and base_pos[s][1] >= y:
        ok = False
    if ok:
      stay[n] = old_of[n]
  return stay, users


def _drop_removed(removed: Iterable[int], pos: dict, layer: dict, edges: dict, rows: Rows,
                  srcs_of: Callable[[Iterable[int]], Iterable[tuple[int, ...]]],
                  size: Callable[[int], tuple[float, float]], stay: dict[int, int]) -> None:
  """Take the nodes the step dropped, with their in-edges, out of the layout being made; the places of those that a
  staying node rebuilds (stay: new -> old) go to that node (their boxes stay as they are). Most of a step's ~2,000
  dropped nodes have such an heir: their places move and their edges go in C (map, zip), not one by one."""
  heir = dict(zip(stay.values(), stay.keys()))  # (the lists in C, filter and map: ~2,000 nodes a step)
  gone = list(filter(pos.__contains__, removed))
  olds = list(filter(heir.__contains__, gone))
  for r in list(filterfalse(heir.__contains__, gone)):
    x, y = pos.pop(r)
    rows.remove(x, y, size(r)[0])
    layer.pop(r, None)
  news = list(map(heir.__getitem__, olds))
  pos.update(zip(news, map(pos.pop, olds)))
  layer.update(zip(news, map(layer.pop, olds)))
  srcs = list(srcs_of(gone))
  ends = zip(chain.from_iterable(srcs), chain.from_iterable(map(repeat, gone, map(len, srcs))))
  deque(map(edges.pop, ends, repeat(None)), maxlen=0)


def _hold_old_places(order: list[int], old_of: dict[int, int], base: Layout, rows: Rows,
                     size: Callable[[int], tuple[float, float]]) -> dict[int, tuple[float, float]]:
  """Hold the old places of rebuilt nodes (one new node each), so that nodes placed earlier do not take them:
  new node -> the place it holds."""
  reserved: dict[int, tuple[float, float]] = {}
  held_by: dict[int, int] = {}  # old id -> the new node holding its place
  for n in order:
    o = old_of.get(n)
    if o is not None and o not in held_by:
      held_by[o] = n
      ox, oy = reserved[n] = base.pos[o]
      w, h = size(o)
      rows.add(ox, oy, w, h)
  return reserved


def _goals(order: list[int], users: dict[int, list[int]], reserved: dict[int, tuple[float, float]]
           ) -> dict[int, tuple[float, int, list[tuple[float, float]]]]:
  """Per node, the held places it should stay above (its paired users', or those its unpaired users should stay
  above) and how many unpaired nodes chain below it before such a place (that many rows are left free for them):
  n -> (y limit, depth, places)."""
  goal: dict[int, tuple[float, int, list[tuple[float, float]]]] = {}
  for n in reversed(order):
    goal[n] = _goal(users.get(n, ()), reserved, goal)
  return goal


def _goal(users: Iterable[int], reserved: dict[int, tuple[float, float]], goal: dict
          ) -> tuple[float, int, list[tuple[float, float]]]:
  """One node's goal (_goals) from its users'."""
  lim, depth = float("inf"), 0
  places: dict[tuple[float, float], None] = {}  # the first MAX_PLACES distinct, in order (a node of many users
  for u in users:  # would otherwise gather and dedupe MAX_PLACES places per user)
    if u in reserved:
      p = reserved[u]
      if len(places) < MAX_PLACES:
        places[p] = None
      lim = min(lim, p[1])
    elif u in goal:
      ulim, udepth, uplaces = goal[u]
      if ulim < float("inf"):
        for p in uplaces:
          if len(places) >= MAX_PLACES:
            break
          places[p] = None
        lim = min(lim, ulim)
        depth = max(depth, udepth + 1)
  return lim, depth, list(places)


def _place_new(order: list[int], base: Layout, old_of: dict[int, int], reserved: dict[int, tuple[float, float]],
               goal: dict, pos: dict, layer: dict, rows: Rows, bands: Bands, src: Callable[[int], tuple[int, ...]],
               size: Callable[[int], tuple[float, float]], stayers: tuple) -> tuple[float, float]:
  """Place the new nodes in order, sources first: a rebuilt node in its held place when that is still free and
  below its sources, the others at a free spot; returns the new layout's width and height. stayers: (stay, users,
  held, level): the nodes given their old boxes (_stayers) are looked at in order too once a source of theirs is
  placed, unless that source is one of them and kept its box (their boxes were below it)."""
  stay, users, held_at, level = stayers
  wh = [base.width, base.height]
  heap = [(level(n), n) for n in order]  # (sorted: a heap already)
  asked: set[int] = set()
  while heap:
    n = heapq.heappop(heap)[1]
    _place_one(n, base, old_of, reserved, goal, pos, layer, rows, bands, src, size, wh)
    if n in stay and pos[n] == held_at[n]:
      continue
    for u in users.get(n, ()):
      if u in stay and u not in asked:
        asked.add(u)
        reserved[u] = held_at[u]
        goal[u] = _goal(sorted(users.get(u, ()), key=lambda v: (level(v), v)), held_at, goal)
        heapq.heappush(heap, (level(u), u))
  return wh[0], wh[1]


def _place_one(n: int, base: Layout, old_of: dict[int, int], reserved: dict[int, tuple[float, float]], goal: dict,
               pos: dict, layer: dict, rows: Rows, bands: Bands, src: Callable[[int], tuple[int, ...]],
               size: Callable[[int], tuple[float, float]], wh: list[float]) -> None:
  """Place new node n (_place_new), growing wh (the layout's width and height) to hold it."""
  w, h = size(n)
  srcs = src(n)
  above = max([pos[s][1] for s in srcs]) if srcs else -1e9
  held = reserved.pop(n, None)
  if held is not None:
    o = old_of[n]
    ow = size(o)[0]
    if held[1] > above and size(o) == (w, h):  # its held box is its own: free of everything placed
      pos[n], layer[n] = held, base.layer[o]
      return
    rows.remove(held[0], held[1], ow)
    if held[1] > above and rows.is_free(held[0], held[1], w, h):
      pos[n], layer[n] = held, base.layer[o]
      rows.add(held[0], held[1], w, h)
      wh[0], wh[1] = max(wh[0], held[0] + w / 2), max(wh[1], held[1] + h / 2)
      return
    if held[1] <= above and rows.is_free(held[0], above + BAND_STEP / 2, w, h):
      # its sources were pushed down past its place: it goes just below them, in its column. Every node under a
      # node pushed down is rebuilt and follows so, and what was under it keeps its arrangement; placed one by one
      # at free spots they were spread across the rows below (84k more crossings in one step of a GPT step's `add
      # bufferize`, 1,000 nodes moved: bench/bench_place.py)
      _put(n, (held[0], above + BAND_STEP / 2), w, h, pos, layer, rows, bands, wh)
      return
    # that spot is taken (or its box grew): the free spot nearest it, rows nearest its old row (or, pushed, the row
    # just below its sources) first, not down by its users' old places (50-100 pushed nodes a step of the demo's
    # `index fold` went there, spreading what hung under them over the rows below: bench/bench_place.py)
    _put(n, _spot(w, h, srcs, above, goal[n], held, pos, rows, bands, max(held[1], above)), w, h, pos, layer, rows,
         bands, wh)
    return
  elif n in old_of:
    held = base.pos[old_of[n]]  # another node holds that place: stay near it
  _put(n, _spot(w, h, srcs, above, goal[n], held, pos, rows, bands), w, h, pos, layer, rows, bands, wh)


def _put(n: int, spot: tuple[float, float], w: float, h: float, pos: dict, layer: dict, rows: Rows, bands: Bands,
         wh: list[float]) -> None:
  x, y = pos[n] = spot
  rows.add(x, y, w, h)
  layer[n] = bands.layer_at(y)
  wh[0], wh[1] = max(wh[0], x + w / 2), max(wh[1], y + h / 2)


def _route_new(order: list[int], base: Layout, old_of: dict[int, int], pos: dict, edges: dict,
               srcs: dict[int, tuple[int, ...]]) -> None:
  """The in-edges of the new nodes: the old version's route where both ends are where they were, else straight.
  (Listed in C, map and zip, over all the in-edges at once: ~4,000 a step of a GPT step's `add bufferize`.)"""
  old, at = old_of.get, pos.__getitem__
  each = list(map(srcs.__getitem__, order))
  ss = list(chain.from_iterable(each))  # (a source used twice gets the same route twice)
  ds = list(chain.from_iterable(map(repeat, order, map(len, each))))
  routes = map(base.edges.get, zip(map(old, ss, ss), map(old, ds, ds)))
  edges.update(zip(zip(ss, ds), [pts if pts is not None and pts[0] == ps and pts[-1] == pd else (ps, pd)
                                 for pts, ps, pd in zip(routes, map(at, ss), map(at, ds))]))


def _spot(w: float, h: float, srcs: tuple[int, ...], above: float, goal: tuple[float, int, list],
          held: tuple[float, float] | None, pos: dict, rows: Rows, bands: Bands, near_y: float | None = None
          ) -> tuple[float, float]:
  """A free spot for a node without a place (held: the old version's place it could not keep): on a candidate row
  below its sources (and above the held places of the users it leads to, leaving one row for each unpaired node
  between; near_y: the rows nearest that y first), nearest its old place, else those users, else its sources."""
  lim, depth, places = goal
  cands = _Candidates(bands, max(above, h / 2 - 1e-6))
  inside = max(1, cands.below(lim)) if lim < float("inf") else cands.n  # (at least the first row)
  near = [held] if held is not None else places or [pos[s] for s in srcs]
  target = sum(p[0] for p in near) / len(near) if near else w / 2
  if near_y is not None:
    want = max(0, min(cands.below(near_y), inside - 1))
  else:
    want = max(0, inside - 1 - depth) if lim < float("inf") else 0
  best, best_score = None, float("inf")
  d = 0
  while d * RANK_PENALTY < best_score and (want - d >= 0 or want + d < inside):  # rows nearest `want` first
    for i in ((want,) if d == 0 else (want - d, want + d)):
      if 0 <= i < inside:
        y, gap = cands[i]
        x = rows.free_x(y, w, h, target)
        score = abs(x - target) + d * RANK_PENALTY + (GAP_PENALTY if gap else 0.0)
        if score < best_score:
          best, best_score = (x, y), score
    d += 1
  assert best is not None
  return best
