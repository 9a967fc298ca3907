"""place.derive's cost on a step that rebuilds a long chain of users (what a match does to every user of the node it
replaces; a GPT step's `add bufferize` rebuilds ~2,000 nodes a step): the rebuilt nodes that keep their old boxes are
given them at once, only the others are placed one by one, and the layout is the one placing every node in order
gives. Counted, not clocked."""
import pytest

from viz_server import place
from viz_server.layout import Layout, layout_graph
from viz_server.place import Bands, Rows

CHAIN, SIDE = 200, 20  # rebuilt users; the kept side chain the match's result is placed below
SIZE = (60.0, 20.0)


def _step(side_src: bool):
  """A base graph (leaf 1 under a chain 10.. of CHAIN users, leaf 2 under a side chain 500.. of SIDE nodes) and a
  step replacing leaf 1 with node 3, which rebuilds the whole chain as 1000.. (each over the one before): node 3 uses
  the side chain's last node when side_src, so the bottom of the rebuilt chain cannot keep its boxes."""
  src = {1: (), 2: (), 10: (1,), **{10 + i: (9 + i,) for i in range(1, CHAIN)}, 500: (2,),
         **{500 + i: (499 + i,) for i in range(1, SIDE)}}
  base = layout_graph({n: SIZE for n in src}, [(s, d) for d, ss in src.items() for s in ss])
  src[3] = (500 + SIDE - 1,) if side_src else (2,)
  src.update({1000: (3,), **{1000 + i: (999 + i,) for i in range(1, CHAIN)}})
  new = [3, *range(1000, 1000 + CHAIN)]
  old_of = {1000 + i: 10 + i for i in range(CHAIN)}
  removed = [1, *range(10, 10 + CHAIN)]
  level: dict[int, int] = {}
  for n in sorted(src, key=lambda n: (n >= 1000, n == 3, n)):  # (sources first: leaves, kept chains, 3, then 1000..)
    level[n] = 1 + max((level[s] for s in src[n]), default=-1)
  return base, new, removed, old_of, src, level


def _derive(base, new, removed, old_of, src, level):
  return place.derive(base, Rows.of(base.pos, lambda n: SIZE), Bands.of(base), new, removed, old_of,
                      src.__getitem__, lambda n: SIZE, level.__getitem__)


@pytest.mark.parametrize("side_src", [False, True])
def test_rebuilt_chain_is_placed_at_the_cost_of_what_moves(monkeypatch, side_src):
  base, new, removed, old_of, src, level = _step(side_src)
  calls = []
  one = place._place_one
  monkeypatch.setattr(place, "_place_one", lambda n, *a: (calls.append(n), one(n, *a))[1])
  pos, layer, edges, width, height, _, _ = _derive(base, new, removed, old_of, src, level)
  fast = len(calls)
  calls.clear()
  users: dict[int, list[int]] = {}
  for n in new:
    for s in src[n]:
      if s in new:
        users.setdefault(s, []).append(n)
  monkeypatch.setattr(place, "_stayers", lambda *a: ({}, users))  # every node placed in order
  ref = _derive(base, new, removed, old_of, src, level)
  assert ref[:5] == (pos, layer, edges, width, height)  # the same layout as placing every node one by one
  assert len(calls) == CHAIN + 1
  moved = [n for n in range(1000, 1000 + CHAIN) if pos[n] != base.pos[old_of[n]]]
  assert (len(moved) > SIDE // 2) == side_src  # (the side chain pushes the bottom of the rebuilt chain down)
  # placed one by one: node 3, the rebuilt nodes that moved, and the first above them that kept its box
  assert fast <= 1 + len(moved) + 1, (fast, len(moved))


def test_derived_routes_are_the_base_routes_or_straight():
  """What caches.LAYOUTS counts a derived layout by (stepgraphs._Derived.own): every route it keeps is its base's
  tuple, every route it makes has two points."""
  base, new, removed, old_of, src, level = _step(True)
  _, _, edges, _, _, _, _ = _derive(base, new, removed, old_of, src, level)
  made = 0
  for (s, d), pts in edges.items():
    old = base.edges.get((old_of.get(s, s), old_of.get(d, d)))
    if pts is not old:
      assert len(pts) == 2
      made += 1
  assert 0 < made <= sum(len(src[n]) for n in new)


def test_a_node_pushed_down_goes_just_below_its_sources_in_its_column():
  """A rebuilt chain whose first node a step pushes below a long side chain: each node goes just below its source in
  its old column, not down by its user's old place far below (which spread what hung under a pushed node across the
  rows below it: 2.5x the crossings of a GPT step's `add bufferize` at its middle step, bench/bench_place.py)."""
  side, far, pitch = 12, 40, 64.0
  # three columns: the chain 1 -> 10 -> 11 -> 12, the side chain 2 -> 500.., a long chain 800.. whose end and 12 feed
  # node 90, far below the chain
  at = {1: (100.0, 0), 10: (100.0, 1), 11: (100.0, 2), 12: (100.0, 3), 2: (300.0, 0),
        **{500 + i: (300.0, 1 + i) for i in range(side)}, **{800 + i: (500.0, i) for i in range(far)},
        90: (100.0, far)}
  src = {1: (), 10: (1,), 11: (10,), 12: (11,), 2: (), 500: (2,), **{500 + i: (499 + i,) for i in range(1, side)},
         800: (), **{800 + i: (799 + i,) for i in range(1, far)}, 90: (12, 800 + far - 1)}
  pos = {n: (x, 10.0 + pitch * ly) for n, (x, ly) in at.items()}
  base = Layout(pos, {n: ly for n, (_, ly) in at.items()}, {(s, d): (pos[s], pos[d]) for d in src for s in src[d]},
                530.0, 20.0 + pitch * far)
  src.update({3: (500 + side - 1,), 1000: (3,), 1001: (1000,), 1002: (1001,), 1090: (1002, 800 + far - 1)})
  new, old_of = [3, 1000, 1001, 1002, 1090], {1000: 10, 1001: 11, 1002: 12, 1090: 90}
  level = {n: i for i, n in enumerate([*sorted(at, key=lambda n: at[n][1]), 3, 1000, 1001, 1002, 1090])}
  got = _derive(base, new, [1, 10, 11, 12, 90], old_of, src, level)[0]
  assert got[1090] == pos[90]  # the user far below keeps its box
  for n in (1000, 1001, 1002):
    (s,) = src[n]
    assert got[n] == (100.0, got[s][1] + place.BAND_STEP / 2), n


def test_a_pushed_node_whose_column_is_taken_stays_just_below_its_sources():
  """As above, with a kept node in the column just below the side chain: the pushed node goes to the free spot
  nearest its column on the rows just below its sources, not down by its user's old place far below (50-100 pushed
  nodes a step of the demo's `index fold` went there, spreading what hung under them over the rows below)."""
  side, far, pitch = 4, 40, 64.0
  at = {1: (100.0, 0), 10: (100.0, 1), 2: (300.0, 0), **{500 + i: (300.0, 1 + i) for i in range(side)},
        700: (100.0, side + 1), 701: (100.0, side + 2), **{800 + i: (500.0, i) for i in range(far)}, 90: (100.0, far)}
  src = {1: (), 10: (1,), 2: (), 500: (2,), **{500 + i: (499 + i,) for i in range(1, side)}, 700: (), 701: (700,),
         800: (), **{800 + i: (799 + i,) for i in range(1, far)}, 90: (10, 800 + far - 1)}
  pos = {n: (x, 10.0 + pitch * ly) for n, (x, ly) in at.items()}
  base = Layout(pos, {n: ly for n, (_, ly) in at.items()}, {(s, d): (pos[s], pos[d]) for d in src for s in src[d]},
                530.0, 20.0 + pitch * far)
  src.update({3: (500 + side - 1,), 1000: (3,), 1090: (1000, 800 + far - 1)})
  new, old_of = [3, 1000, 1090], {1000: 10, 1090: 90}
  level = {n: i for i, n in enumerate([*sorted(at, key=lambda n: at[n][1]), 3, 1000, 1090])}
  got = _derive(base, new, [1, 10, 90], old_of, src, level)[0]
  assert got[1090] == pos[90]
  assert got[3][1] < got[1000][1] <= got[3][1] + place.BAND_STEP, (got[3], got[1000])
  assert abs(got[1000][0] - 100.0) <= SIZE[0] + place.NODE_GAP + 1  # beside kept node 700, in its column's row


@pytest.mark.parametrize("side_src", [False, True])
def test_rebuilt_nodes_of_their_old_look_keep_their_boxes_unsized(monkeypatch, side_src):
  """Given the nodes' looks, derive sizes no rebuilt node that has its old node's look (its box is its old node's:
  a view's sizes are a function of the look; a step of a GPT step's `add bufferize` rebuilt ~2,000 fresh nodes that
  nothing else sizes, ~15% of derive, and the view's Looks kept each), and lays out what it laid out sizing them."""
  base, new, removed, old_of, src, level = _step(side_src)
  look = {n: ("ADD", "dtypes.float", "", src[n]) for n in src}
  look[3] = ("CONST", "dtypes.float", "3", src[3])
  sized: list[int] = []
  placed: list[int] = []
  one = place._place_one
  monkeypatch.setattr(place, "_place_one", lambda n, *a: (placed.append(n), one(n, *a))[1])

  def size(n):
    sized.append(n)
    return SIZE
  got = place.derive(base, Rows.of(base.pos, lambda n: SIZE), Bands.of(base), new, removed, old_of,
                     src.__getitem__, size, level.__getitem__, look.__getitem__)
  assert got[:5] == _derive(base, new, removed, old_of, src, level)[:5]
  kept = [n for n in range(1000, 1000 + CHAIN) if got[0][n] == base.pos[old_of[n]]]
  assert len(kept) > CHAIN // 2
  # only the nodes placed one by one are sized (before: every rebuilt node and its old node, to compare their boxes)
  assert set(sized) & set(new) <= set(placed) and len(placed) < len(kept)
  look[1000 + CHAIN // 2] = ("MUL", "dtypes.float", "", src[1000 + CHAIN // 2])  # another look: sized, as it was
  sized.clear()
  again = place.derive(base, Rows.of(base.pos, lambda n: SIZE), Bands.of(base), new, removed, old_of,
                       src.__getitem__, size, level.__getitem__, look.__getitem__)
  assert again[:5] == got[:5] and 1000 + CHAIN // 2 in sized
