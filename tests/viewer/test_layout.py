"""Tests of the layered DAG layout: geometry invariants, crossings, stability, determinism, robustness."""
from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from viz_server import place
from viz_server.layout import NODE_GAP, Layout, count_crossings, layout_graph


def uop_like(n: int, seed: int) -> list[tuple[int, int]]:
    """Random DAG shaped like a UOp graph: expression trees over shared leaves (consts, ranges, buffers) with some
    common subexpressions, each ending in a store, and one sink using every node nobody else uses."""
    rng = random.Random(seed)
    shared = list(range(max(3, n // 25)))
    edges: list[tuple[int, int]] = []
    made: list[int] = []
    nid = len(shared)

    def new(srcs: list[int]) -> int:
        nonlocal nid
        v, nid = nid, nid + 1
        edges.extend((s, v) for s in dict.fromkeys(srcs))
        return v

    def expr(depth: int) -> int:
        if made and rng.random() < 0.08:
            return rng.choice(made[-20:])
        if depth == 0 or nid >= n - 3 or rng.random() < 0.2:
            return rng.choice(shared) if rng.random() < 0.6 else new([rng.choice(shared), rng.choice(shared)])
        v = new([expr(depth - 1) for _ in range(rng.choice([1, 2, 2, 3]))])
        made.append(v)
        return v

    while nid < n - 3:
        new([rng.choice(shared), expr(rng.randint(2, 7))])
    used = {s for s, _ in edges}
    new([v for v in range(nid) if v not in used])
    return edges


def sizes_for(nodes, seed: int = 0) -> dict[int, tuple[float, float]]:
    rng = random.Random(seed)
    return {v: (float(rng.randint(20, 140)), float(rng.randint(14, 60))) for v in nodes}


def nodes_of(edges) -> set[int]:
    return {v for e in edges for v in e}


def assert_valid(lay: Layout, sizes, edges, acyclic: bool = True, gap: float = NODE_GAP) -> None:
    """Invariants; `gap`: least gap between boxes of a layer."""
    ids = sorted(sizes)
    assert set(lay.pos) == set(ids) and set(lay.layer) == set(ids)
    # no two node boxes overlap, and all lie inside [0, width] x [0, height]
    if ids:
        c = np.array([lay.pos[v] for v in ids])
        wh = np.array([sizes[v] for v in ids])
        lo, hi = c - wh / 2, c + wh / 2
        eps = 1e-6
        assert lo.min() >= -eps and hi[:, 0].max() <= lay.width + eps and hi[:, 1].max() <= lay.height + eps
        ox = (lo[:, None, 0] < hi[None, :, 0] - eps) & (lo[None, :, 0] < hi[:, None, 0] - eps)
        oy = (lo[:, None, 1] < hi[None, :, 1] - eps) & (lo[None, :, 1] < hi[:, None, 1] - eps)
        both = ox & oy
        np.fill_diagonal(both, False)
        assert not both.any(), "overlapping boxes"
        # one y per layer, growing with the layer
        by_layer: dict[int, set[float]] = {}
        for v in ids:
            by_layer.setdefault(lay.layer[v], set()).add(lay.pos[v][1])
        assert all(len(ys) == 1 for ys in by_layer.values())
        ys = [next(iter(by_layer[k])) for k in sorted(by_layer)]
        assert all(a < b for a, b in zip(ys, ys[1:]))
        for k in by_layer:
            row = sorted((lay.pos[v][0] - sizes[v][0] / 2, lay.pos[v][0] + sizes[v][0] / 2) for v in ids
                         if lay.layer[v] == k)
            assert all(b[0] - a[1] >= gap - 1e-6 for a, b in zip(row, row[1:])), "boxes too close"
    for s, d in edges:
        assert (s, d) in lay.edges
        pts = lay.edges[(s, d)]
        if s == d:
            continue
        assert pts[0] == pytest.approx(lay.pos[s]) and pts[-1] == pytest.approx(lay.pos[d])
        if acyclic:
            assert lay.layer[d] > lay.layer[s], "edge must go to a strictly higher layer"
        span = abs(lay.layer[d] - lay.layer[s])
        assert span >= 1 and len(pts) == span + 1
        ys = [p[1] for p in pts]
        if lay.layer[d] < lay.layer[s]:
            ys = ys[::-1]
        assert all(a < b for a, b in zip(ys, ys[1:])), "polyline not monotone"
        # the dummy points of a long edge sit outside every node box (they are spaced like nodes)
        for x, y in pts[1:-1]:
            inside = (lo[:, 0] < x - eps) & (x + eps < hi[:, 0]) & (lo[:, 1] <= y) & (y <= hi[:, 1])
            assert not inside.any(), "edge runs through a node"


def brute_crossings(lay: Layout) -> int:
    segs = []
    for (s, d), pts in lay.edges.items():
        if s == d:
            continue
        if lay.layer[s] > lay.layer[d]:
            s, d, pts = d, s, pts[::-1]
        segs += [(lay.layer[s] + k, pts[k][0], pts[k + 1][0]) for k in range(len(pts) - 1)]
    segs = sorted(set(segs))
    return sum(1 for i, a in enumerate(segs) for b in segs[i + 1:]
               if a[0] == b[0] and (a[1] - b[1]) * (a[2] - b[2]) < 0)


# ---------------------------------------------------------------- basics


def test_empty_graph():
    lay = layout_graph({}, [])
    assert lay.pos == {} and lay.edges == {} and lay.width == 0 and lay.height == 0
    assert count_crossings(lay) == 0


def test_single_node():
    lay = layout_graph({7: (50.0, 20.0)}, [])
    assert lay.pos == {7: (25.0, 10.0)} and lay.layer == {7: 0}
    assert (lay.width, lay.height) == (50.0, 20.0)


def test_chain_is_vertical_and_layers_follow_edges():
    sizes = {i: (40.0, 20.0) for i in range(4)}
    edges = [(0, 1), (1, 2), (2, 3)]
    lay = layout_graph(sizes, edges)
    assert [lay.layer[i] for i in range(4)] == [0, 1, 2, 3]
    assert len({lay.pos[i][0] for i in range(4)}) == 1
    assert_valid(lay, sizes, edges)


def test_layer_spacing_uses_tallest_node():
    sizes = {0: (40.0, 100.0), 1: (40.0, 10.0), 2: (40.0, 10.0)}
    lay = layout_graph(sizes, [(0, 2), (1, 2)])
    assert lay.pos[0][1] == lay.pos[1][1]
    # node 1 is centered in a band as tall as node 0
    assert lay.pos[2][1] - 5.0 >= 100.0


def test_missing_sizes_and_duplicate_edges():
    sizes = {0: (30.0, 10.0), 1: (30.0, 10.0)}
    edges = [(0, 1), (0, 1), (0, 2), (1, 2), (1, 2)]
    lay = layout_graph(sizes, edges)
    assert set(lay.pos) == {0, 1, 2}
    assert set(lay.edges) == {(0, 1), (0, 2), (1, 2)}
    assert lay.layer[2] == 2


def test_leaves_sit_just_above_their_first_user():
    # a constant used only by the last node of a chain is pulled down next to it, not left at the top
    sizes = {i: (40.0, 20.0) for i in range(6)}
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (5, 4)]
    lay = layout_graph(sizes, edges)
    assert lay.layer[5] == lay.layer[4] - 1
    assert len(lay.edges[(5, 4)]) == 2


def test_long_edges_stay_straight():
    # the long edge 0->5 beside the chain 0->1->..->5 runs (nearly) straight down beside it
    sizes = {i: (40.0, 20.0) for i in range(6)}
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5)]
    lay = layout_graph(sizes, edges)
    xs = [p[0] for p in lay.edges[(0, 5)][1:-1]]
    assert max(xs) - min(xs) < 0.1 * (40 + NODE_GAP)
    chain = [lay.pos[i][0] for i in range(1, 5)]
    assert max(chain) - min(chain) < 0.1 * (40 + NODE_GAP)
    assert_valid(lay, sizes, edges)


def test_parent_centered_over_children():
    sizes = {i: (40.0, 20.0) for i in range(4)}
    lay = layout_graph(sizes, [(0, 3), (1, 3), (2, 3)])
    xs = sorted(lay.pos[i][0] for i in range(3))
    assert lay.pos[3][0] == pytest.approx(xs[1]) and lay.pos[3][0] == pytest.approx((xs[0] + xs[2]) / 2)


def test_components_do_not_overlap():
    edges = [(0, 1), (1, 2), (10, 11), (11, 12), (20, 12)]
    sizes = sizes_for(nodes_of(edges))
    assert_valid(layout_graph(sizes, edges), sizes, edges)


# ---------------------------------------------------------------- crossings


def test_tree_has_no_crossings():
    # complete binary tree of operands feeding one root, node ids shuffled so input order does not help
    rng = random.Random(3)
    perm = list(range(63))
    rng.shuffle(perm)
    edges = [(perm[2 * i + 1], perm[i]) for i in range(31)] + [(perm[2 * i + 2], perm[i]) for i in range(31)]
    rng.shuffle(edges)
    sizes = sizes_for(range(63))
    lay = layout_graph(sizes, edges)
    assert count_crossings(lay) == 0
    assert_valid(lay, sizes, edges)


def test_planar_ladder_with_long_edges_has_no_crossings():
    # two chains joined by rungs and a long edge hugging the outside: drawable without crossings
    edges = [(i, i + 1) for i in range(7)] + [(10 + i, 11 + i) for i in range(7)]
    edges += [(i, 11 + i) for i in range(0, 7, 2)] + [(0, 7), (10, 17)]
    sizes = sizes_for(nodes_of(edges), 1)
    lay = layout_graph(sizes, edges)
    assert count_crossings(lay) == 0
    assert_valid(lay, sizes, edges)


def test_unavoidable_crossing_is_counted():
    # K(2,2) between two layers always has exactly one crossing
    edges = [(0, 2), (0, 3), (1, 2), (1, 3)]
    lay = layout_graph(sizes_for(range(4)), edges)
    assert count_crossings(lay) == 1 == brute_crossings(lay)


def test_count_crossings_handcrafted():
    lay = Layout(pos={0: (0, 0), 1: (10, 0), 2: (0, 10), 3: (10, 10), 4: (5, 20)},
                 layer={0: 0, 1: 0, 2: 1, 3: 1, 4: 2},
                 edges={(0, 3): [(0, 0), (10, 10)], (1, 2): [(10, 0), (0, 10)],
                        (0, 4): [(0, 0), (-10, 10), (5, 20)], (2, 4): [(0, 10), (5, 20)]},
                 width=20, height=20)
    # (0,3) x (1,2) cross; (0,4) passes left of everything: no other crossing
    assert count_crossings(lay) == 1 == brute_crossings(lay)


def test_crossings_far_below_naive_order():
    # the ordering step must beat random x per node (long edges straight from source to target) by a wide margin
    edges = uop_like(150, 5)
    sizes = sizes_for(nodes_of(edges))
    lay = layout_graph(sizes, edges)
    rng = random.Random(0)
    rx = {v: rng.random() for v in lay.pos}
    naive_edges = {}
    for s, d in lay.edges:
        span = lay.layer[d] - lay.layer[s]
        xs = [rx[s] + (rx[d] - rx[s]) * k / span for k in range(span + 1)]
        naive_edges[(s, d)] = [(x, 0.0) for x in xs]
    naive = Layout(pos={v: (x, 0.0) for v, x in rx.items()}, layer=lay.layer, edges=naive_edges, width=0, height=0)
    assert count_crossings(lay) < 0.5 * count_crossings(naive)


def test_crossings_close_to_dot():
    # Graphviz dot 2.43 (bench/bench_layout.py's run_dot: same sizes and gaps) drew these graphs with these many
    # crossings; the layout must stay within 8% of dot over the three (it is at about 5%)
    dot = {(300, 11): 7286, (400, 7): 14354, (250, 3): 5664}
    ours = 0
    for (n, seed) in dot:
        edges = uop_like(n, seed)
        ours += count_crossings(layout_graph(sizes_for(nodes_of(edges), seed), edges))
    assert ours <= 1.08 * sum(dot.values()), ours


# ---------------------------------------------------------------- determinism and robustness


def _bigger_graph():
    edges = uop_like(300, 11)
    return sizes_for(nodes_of(edges), 2), edges


def test_deterministic():
    sizes, edges = _bigger_graph()
    a, b = layout_graph(sizes, edges), layout_graph(dict(sizes), list(edges))
    assert a.pos == b.pos and a.edges == b.edges and a.layer == b.layer


@pytest.mark.timeout(20)
def test_cycles_are_broken():
    edges = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 3), (3, 4), (4, 3), (5, 5)]
    sizes = sizes_for(range(6))
    lay = layout_graph(sizes, edges)
    assert_valid(lay, sizes, edges, acyclic=False)
    assert set(lay.edges) == set(edges)
    assert count_crossings(lay) >= 0


@pytest.mark.timeout(20)
def test_large_cycle_does_not_hang():
    # one big cycle with chords: the cycle is cut once, leaving a path of n layers and long chords
    n = 400
    edges = [(i, (i + 1) % n) for i in range(n)] + [(i, (i * 7 + 3) % n) for i in range(0, n, 5)]
    sizes = {i: (30.0, 12.0) for i in range(n)}
    lay = layout_graph(sizes, edges)
    assert len(lay.pos) == n and set(lay.edges) == set(edges)


def test_uop_like_graph_invariants():
    edges = uop_like(400, 7)
    sizes = sizes_for(nodes_of(edges), 7)
    lay = layout_graph(sizes, edges)
    assert_valid(lay, sizes, edges)
    assert count_crossings(lay) == brute_crossings(lay)


dag_edges = st.integers(2, 28).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag_edges, st.integers(0, 10**6))
def test_random_dags(ne, seed):
    n, raw = ne
    edges = [(min(a, b), max(a, b)) for a, b in raw if a != b]
    sizes = sizes_for(range(n), seed)
    lay = layout_graph(sizes, edges)
    assert_valid(lay, sizes, edges)
    assert count_crossings(lay) == brute_crossings(lay)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag_edges, st.integers(0, 10**6))
def test_random_graphs_with_cycles(ne, seed):
    n, raw = ne
    sizes = sizes_for(range(n), seed)
    lay = layout_graph(sizes, raw)
    assert_valid(lay, sizes, raw, acyclic=False)
    assert count_crossings(lay) == brute_crossings(lay)


# ---------------------------------------------------------------- incremental placement (viz_server.place)


def _brute_free(boxes, x, y, w, h) -> bool:
    """No box (bx, by, bw, bh) closer than NODE_GAP horizontally and VPAD vertically to a w x h box at (x, y)."""
    return x >= w / 2 - 1e-9 and all(abs(by - y) >= (h + bh) / 2 + place.VPAD
                                     or abs(bx - x) >= (w + bw) / 2 + place.NODE_GAP - 1e-9 for bx, by, bw, bh in boxes)


row_ys = [0.0, 20.0, 40.0, 55.0, 67.0, 90.0, 100.0]
box_st = st.tuples(st.integers(0, 60).map(lambda v: v * 10.0), st.sampled_from(row_ys),
                   st.integers(2, 30).map(lambda v: v * 6.6 + 16), st.sampled_from([23.0, 36.0]))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(box_st, max_size=25), st.sampled_from(row_ys),
       st.integers(2, 30).map(lambda v: v * 6.6 + 16), st.sampled_from([23.0, 36.0]), st.floats(-50, 700))
def test_free_spot_is_free_and_nearest(boxes, y, w, h, target):
    gap = place.NODE_GAP
    pos = {i: (bx, by) for i, (bx, by, _, _) in enumerate(boxes)}
    rows = place.Rows.of(pos, lambda i: (boxes[i][2], boxes[i][3]))
    x = rows.free_x(y, w, h, target)
    assert _brute_free(boxes, x, y, w, h) and rows.is_free(x, y, w, h)
    reach = [(bx - bw / 2 - gap - w / 2, bx + bw / 2 + gap + w / 2) for bx, _, bw, _ in boxes]
    cands = [target, w / 2] + [c for pair in reach for c in pair]
    better = [c for c in cands if abs(c - target) < abs(x - target) - 1e-6 and _brute_free(boxes, c, y, w, h)]
    assert not better
    for bx, _, bw, _ in boxes:  # is_free agrees with the brute force around every box
        for c in (bx, bx + bw / 2 + gap + w / 2, bx - bw / 2 - gap - w / 2 - 0.5):
            assert rows.is_free(c, y, w, h) == _brute_free(boxes, c, y, w, h)


def test_rows_copy_on_write():
    a = place.Rows.of({1: (50.0, 10.0), 2: (200.0, 10.0), 3: (50.0, 80.0)}, lambda i: (40.0, 23.0))
    b = a.copy()
    b.remove(50.0, 10.0, 40.0)
    b.remove(50.0, 80.0, 40.0)
    b.add(120.0, 45.0, 40.0, 23.0)
    assert not a.is_free(50.0, 10.0, 40.0, 23.0) and not a.is_free(50.0, 80.0, 40.0, 23.0)
    assert a.is_free(120.0, 45.0, 10.0, 4.0) and not b.is_free(120.0, 45.0, 10.0, 4.0)
    assert b.is_free(50.0, 10.0, 40.0, 23.0) and b.is_free(50.0, 80.0, 40.0, 23.0) and b.ys == [10.0, 45.0]


def test_rows_keep_a_held_place_on_a_box_alike_until_both_are_removed():
    # boxes carry no id: a place held on the box of a node still there is a second box alike, and removing one
    # of them (either: they are alike) must leave the other
    rows = place.Rows.of({1: (100.0, 10.0)}, lambda i: (40.0, 23.0))
    rows.add(100.0, 10.0, 40.0, 23.0)
    rows.remove(100.0, 10.0, 40.0)
    assert not rows.is_free(100.0, 10.0, 40.0, 23.0)
    rows.remove(100.0, 10.0, 40.0)
    rows.remove(100.0, 10.0, 40.0)  # (none left: nothing)
    assert rows.is_free(100.0, 10.0, 40.0, 23.0) and rows.ys == []


def test_big_graph_takes_the_cut_search_and_stays_valid(monkeypatch):
    # past BIG_EDGES proper edges the ordering runs from one start with a smaller transpose budget (issue 18: a
    # 5,000-node layout under 400 ms); the result must still be a valid layout, better than the first sweep alone
    import viz_server.layout as L
    seen = []
    search, finish = L._search, L._finish
    monkeypatch.setattr(L, "_search",
                        lambda o, starts, *a: seen.append((len(o.graph.up), starts)) or search(o, starts, *a))
    swept = []
    monkeypatch.setattr(L, "_finish", lambda orderer, *a: swept.append(orderer.best_c) or finish(orderer, *a))
    edges = uop_like(5000, 2)
    sizes = sizes_for(nodes_of(edges), 2)
    lay = layout_graph(sizes, edges)
    assert_valid(lay, sizes, edges)
    ((n_proper, starts),) = seen
    assert n_proper > L.BIG_EDGES and starts == L.STARTS[:1]
    assert count_crossings(lay) <= swept[0]


def _isotonic_reference(y: np.ndarray, w: np.ndarray, first: np.ndarray) -> np.ndarray:
  """Plain sequential pool-adjacent-violators, run by run: the fit _isotonic must match."""
  out = np.empty(len(y))
  bounds = list(np.flatnonzero(first)) + [len(y)]
  for a, b in zip(bounds[:-1], bounds[1:]):
    blocks: list[list[float]] = []  # [weighted sum, weight, count]
    for i in range(a, b):
      blocks.append([y[i] * w[i], float(w[i]), 1])
      while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
        s, ws, k = blocks.pop()
        blocks[-1][0] += s
        blocks[-1][1] += ws
        blocks[-1][2] += k
    i = a
    for s, ws, k in blocks:
      out[i:i + k] = s / ws
      i += k
  return out


@pytest.mark.parametrize("seed", range(6))
def test_isotonic_warm_start_gives_the_exact_fit(seed):
  """Issue 18: the coordinate steps start each isotonic fit from the previous fit's blocks; blocks that no longer
  hold (a prefix below the block's mean) must be split, so the fit is the one from scratch, for any start blocks."""
  from viz_server.layout import _isotonic
  rng = np.random.default_rng(seed)
  n = 400
  first = np.zeros(n, dtype=bool)
  first[np.sort(rng.choice(np.arange(1, n), 12, replace=False))] = True
  first[0] = True
  w = rng.choice([1.0, 2.0, 9.0], n)
  y = np.cumsum(rng.normal(0, 1, n)) + rng.normal(0, 3, n)
  ref = _isotonic_reference(y, w, first)
  cold, blocks = _isotonic(y, w, first)
  np.testing.assert_allclose(cold, ref, atol=1e-9)
  # from the blocks of a fit of a nearby y (the case the coordinate steps are in), and of an unrelated y
  for other in (y + rng.normal(0, 0.5, n), rng.normal(0, 5, n)[::-1].cumsum()):
    starts = _isotonic(other, w, first)[1]
    warm, _ = _isotonic(y, w, first, starts)
    np.testing.assert_allclose(warm, ref, atol=1e-9)
  # the blocks returned are where the fit is constant: starting from them is a no-op
  np.testing.assert_allclose(_isotonic(y, w, first, blocks)[0], ref, atol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_transpose_keeps_its_crossing_count_exact(seed):
  """Issue 18: transpose rounds update the crossing count from each swapped pair's own count (kept vs swapped,
  ties at a shared neighbour excluded); after every run it must equal a recount, and never rise above the start."""
  from viz_server.layout import _assign_layers, _components, _Orderer, _proper
  edges = uop_like(300, seed)
  n = 1 + max(v for e in edges for v in e)
  us = np.array([s for s, _ in edges], dtype=np.int64)
  ud = np.array([d for _, d in edges], dtype=np.int64)
  lay = _assign_layers(n, us, ud)
  P, pcomp = _proper(n, lay, us, ud, np.full(n, 40.0), _components(n, us, ud))
  O = _Orderer(P, pcomp)
  rng = np.random.default_rng(seed)
  for m in P.members:  # a shuffled order: many crossings, many swaps
    O.pos[m] = rng.permutation(len(m))
  start = O.crossings()
  for eq in (0, 1, 3):
    O.transpose(6, equal_every=eq)
    assert O.count == O.crossings()
    assert O.best_c == O.crossings(O.best) <= start



def test_transpose_stops_on_a_cycle_with_the_same_best():
  """Issue 30: a tie round that starts from an order an earlier tie round started from repeats a cycle; stopping
  there must leave the best order and count of the full run, in fewer rounds (counted by the pause hook)."""
  from viz_server import layout as L
  fewer = 0
  for seed in range(8):  # dense random layers (4 x 6 nodes, 3 edges each to the next layer): many tied pairs
    rng = random.Random(seed)
    edges = sorted({(k * 6 + a, (k + 1) * 6 + b) for k in range(3) for a in range(6) for b in rng.sample(range(6), 3)})
    us = np.array([s for s, _ in edges], dtype=np.int64)
    ud = np.array([d for _, d in edges], dtype=np.int64)
    P, pcomp = L._proper(24, L._assign_layers(24, us, ud), us, ud, np.full(24, 40.0), L._components(24, us, ud))
    got = []
    for stop in (True, False):
      O = L._Orderer(P, pcomp)
      O.best_c, O.best = L._search(O, L.STARTS)
      O.restore()
      rounds: list[int] = []
      L._hook.pause = lambda r=rounds: r.append(1)
      try:
        O.transpose(L.FINAL_ROUNDS, equal_every=3, stop_on_cycle=stop)
      finally:
        L._hook.pause = None
      got.append((O.best_c, O.best.tolist(), len(rounds)))
    (c1, b1, r1), (c2, b2, r2) = got
    assert (c1, b1) == (c2, b2) and c1 == O.crossings(np.array(b1))
    assert r1 <= r2
    fewer += r1 < r2
  assert fewer >= 4


def test_long_edges_past_the_budget_become_channels_and_the_passes_stay_bounded(monkeypatch):
    # issue 30: a GPT step's tensor graph (2,942 nodes, 986 layers) had 419,543 dummies, 7.5 s of ordering and x;
    # the passes now see at most DUMMY_BUDGET x (nodes + edges) dummies, the rest of the long edges are channels
    import viz_server.layout as L
    seen = []
    order, x_coords = L._order, L._x_coords
    monkeypatch.setattr(L, "_order", lambda g, c: seen.append(("order", g.n_nodes - g.n_real)) or order(g, c))
    monkeypatch.setattr(L, "_x_coords", lambda g, *a: seen.append(("x", g.n_nodes - g.n_real)) or x_coords(g, *a))
    # a chain of 200 with 100 edges each skipping 100 layers (9,900 dummies) and a hub feeding the chain's end
    edges = [(i, i + 1) for i in range(199)] + [(i, i + 100) for i in range(100)] + [(300, i) for i in range(150, 200)]
    sizes = sizes_for(nodes_of(edges), 4)
    lay = layout_graph(sizes, edges)
    assert_valid(lay, sizes, edges)
    budget = L.DUMMY_BUDGET * (len(sizes) + len(set(edges)))
    plain = sum(lay.layer[d] - lay.layer[s] - 1 for s, d in edges)
    assert plain > 4 * budget
    assert [p for p, _ in seen] == ["order", "x"] and all(0 < d <= budget for _, d in seen)
    # channels: vertical between their ends, beside the rows, apart from each other where their layers overlap
    chans = [(lay.layer[s] + 1, lay.layer[d] - 1, pts[1][0]) for (s, d), pts in lay.edges.items()
             if len(pts) > 3 and len({p[0] for p in pts[1:-1]}) == 1]
    assert len(chans) >= (plain - budget) // 99
    for i, (a, b, x) in enumerate(chans):
        for a2, b2, x2 in chans[i + 1:]:
            assert a2 > b or a > b2 or abs(x - x2) >= L.DUMMY_W + L.DUMMY_GAP - 1e-6
    # a graph within the budget has no channel: its layout is the one every other test checks
    small = uop_like(1000, 0)
    ids = sorted(nodes_of(small))
    index = {v: i for i, v in enumerate(ids)}
    _, us, ud, _ = L._acyclic(len(ids), small, index)
    assert not L._channels(len(ids), L._demote(len(ids), us, ud, L._assign_layers(len(ids), us, ud)), us, ud).any()


def _proper_of(edges, seed: int):
  """The proper layered graph layout_graph orders for edges (ids 0..n-1), and its components."""
  from viz_server import layout as L
  ids = sorted(nodes_of(edges))
  index = {v: i for i, v in enumerate(ids)}
  n = len(ids)
  _, us, ud, _ = L._acyclic(n, edges, index)
  lay = L._demote(n, us, ud, L._assign_layers(n, us, ud))
  widths = np.array([w for w, _ in sizes_for(ids, seed).values()])
  return L._proper(n, lay, us, ud, widths, L._components(n, us, ud))


def _search_and_finish(orderer) -> tuple[int, list[int]]:
  from viz_server import layout as L
  orderer.best_c, orderer.best = L._search(orderer, L.STARTS)
  return orderer.best_c, list(L._finish(orderer))


def test_small_graphs_list_orderer_gives_the_numpy_orders():
  """Issue 30: small proper graphs are ordered on Python lists (_ListOrderer), which must make exactly the numpy
  _Orderer's orders and counts: sweeps, transpose rounds and the tie rounds' plateaus, on a few hundred seeded
  graphs (several components, cycles, fan-outs), and so the same layouts."""
  from viz_server import layout as L
  tried = 0
  for seed in range(240):
    rng = random.Random(seed)
    n = rng.randint(3, 70)
    if seed % 3:
      edges = uop_like(n, seed)
    else:  # (any digraph: cycles, several components, isolated pairs)
      edges = [(rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(1, 2 * n))]
    edges = [(s, d) for s, d in dict.fromkeys(edges) if s != d]
    P, pcomp = _proper_of(edges, seed) if edges else (None, None)
    if P is None or len(P.up) > L.SMALL_EDGES:
      continue
    tried += 1
    want = _search_and_finish(L._Orderer(P, pcomp))
    assert _search_and_finish(L._ListOrderer(P, pcomp)) == want, seed
  assert tried >= 200


@pytest.mark.parametrize("seed", range(6))
def test_transpose_pairs_no_nodes_of_two_layers_or_components(seed):
  """Issue 30: a transpose phase keys every entry of its layers (none picked out), so a layer's first and last node,
  which pair with nobody, key pairs with a slot of another layer: across an empty layer (a long edge that became a
  channel leaves one) the last node of the layer above and the first of the layer below, which must never swap; nor
  two nodes of two components. Shuffled orders of such graphs, numpy's and the lists' transposes the same."""
  from viz_server import layout as L
  rng = random.Random(seed)
  width = rng.randint(3, 6)  # (layers 0 and 2..4 of `width` nodes each, layer 1 empty)
  lay = np.array([0] * width + [l for l in (2, 3, 4) for _ in range(width)], dtype=np.int64)
  # (two components, odd and even nodes, whose shuffled places interleave)
  edges = [(s, d) for s in range(len(lay)) for d in range(len(lay))
           if lay[d] == lay[s] + 1 and (s - d) % 2 == 0 and rng.random() < 0.6]
  edges += [(s, d) for s in range(width) for d in range(width, 2 * width) if rng.random() < 0.3]  # (over layer 1)
  us = np.array([s for s, _ in edges], dtype=np.int64)
  ud = np.array([d for _, d in edges], dtype=np.int64)
  chan = lay[ud] - lay[us] > 1  # (channels: out of the proper graph, as layout_graph leaves them)
  n = len(lay)
  P = L._ProperGraph(n, lay, us[~chan], ud[~chan], np.full(n, 40.0))
  assert P.lptr[2] == P.lptr[1]  # (layer 1 empty)
  pcomp = L._components(n, us[~chan], ud[~chan])
  orders = []
  for orderer in (L._Orderer(P, pcomp), L._ListOrderer(P, pcomp)):
    shuffle = np.random.default_rng(seed)
    for m in P.members:
      for v, q in zip(m.tolist(), shuffle.permutation(len(m)).tolist()):
        orderer.pos[v] = q
    for eq in (0, 1, 3):
      orderer.transpose(8, equal_every=eq)
    pos = [int(v) for v in orderer.pos]
    assert all(sorted(pos[v] for v in m) == list(range(len(m))) for m in P.members)  # (each layer's places)
    orders.append((pos, orderer.count))
  assert orders[0] == orders[1]


def test_small_graph_layouts_equal_the_numpy_path(monkeypatch):
  """The layouts themselves (positions, layers, routes, size: repr, so every float bit) with the list orderer and
  without it (SMALL_EDGES 0: every graph on numpy)."""
  from viz_server import layout as L
  graphs = [uop_like(n, n) for n in range(8, 90, 3)]
  graphs += [[(s, d) for s, d in dict.fromkeys((random.Random(s).randrange(30), random.Random(s + 1).randrange(30))
                                                  for s in range(k, k + 50)) if s != d] for k in range(0, 400, 40)]
  fast = [repr(layout_graph(sizes_for(nodes_of(e), i), e, slim=i % 2 == 0)) for i, e in enumerate(graphs)]
  monkeypatch.setattr(L, "SMALL_EDGES", 0)
  slow = [repr(layout_graph(sizes_for(nodes_of(e), i), e, slim=i % 2 == 0)) for i, e in enumerate(graphs)]
  assert fast == slow


def _x_inputs(edges: list[tuple[int, int]], i: int) -> tuple:
  """What the x steps (_coordinates) take for a graph: its proper graph, ordered rows, their separations and the
  acyclic edges' ends."""
  from viz_server import layout as L
  P, pcomp = _proper_of(edges, i)
  rows = L._rows(P, L._order(P, pcomp))
  ids = sorted(nodes_of(edges))
  _, us, ud, _ = L._acyclic(len(ids), edges, {v: k for k, v in enumerate(ids)})
  return P, rows, [L._seps(P, r) for r in rows], us, ud


def test_coordinates_stop_once_a_step_gives_its_input_back():
  """Issue 30: the x steps stop once one gives x and the isotonic blocks back bit for bit (every later step would):
  the same x, to the bit, as all COORD_ITERS steps, and fewer steps on graphs that settle (chains, lone rows)."""
  from viz_server import layout as L
  graphs = [[(i, i + 1) for i in range(6)], [(0, 2), (1, 2)], [(0, 1), (0, 2), (1, 3), (2, 3)]]
  graphs += [uop_like(n, n) for n in range(6, 60, 4)]
  settled = 0
  for i, edges in enumerate(graphs):
    P, rows, seps, us, ud = _x_inputs(edges, i)
    steps: list[int] = []
    L._hook.pause = lambda s=steps: s.append(1)
    try:
      got = L._coordinates(P, rows, seps, us, ud, L.COORD_ITERS)
    finally:
      L._hook.pause = None
    every = L._coordinates(P, rows, seps, us, ud, L.COORD_ITERS, settle=False)
    assert got.tobytes() == every.tobytes(), i
    settled += len(steps) < L.COORD_ITERS
  assert settled >= 3


def test_x_steps_memo_of_unchanged_blocks_changes_no_bit(monkeypatch):
  """Issue 30: the x steps keep what depends on the isotonic blocks alone (_block_tables, the row starts' flags)
  while the same blocks come back: the same x, to the bit, as recomputing it every step; and a step whose blocks
  all stay solid hands the very same starts array back (what the memo keys on)."""
  from viz_server import layout as L
  graphs = [uop_like(n, n) for n in range(6, 120, 7)] + [[(0, 2), (1, 2), (2, 3), (0, 3)]]
  fresh = L._isotonic
  for i, edges in enumerate(graphs):
    P, rows, seps, us, ud = _x_inputs(edges, i)
    got = L._coordinates(P, rows, seps, us, ud, L.COORD_ITERS, settle=False)
    monkeypatch.setattr(L, "_isotonic", lambda y, w, first, starts=None, memo=None: fresh(y, w, first, starts))
    want = L._coordinates(P, rows, seps, us, ud, L.COORD_ITERS, settle=False)
    monkeypatch.setattr(L, "_isotonic", fresh)
    assert got.tobytes() == want.tobytes(), i
  s = np.array([2.0, 1.0, 3.0, 4.0, 0.5])
  w = np.ones(5)
  starts = np.array([0, 2, 3])  # blocks [2, 1], [3], [4, 0.5]: each one's own fit constant
  assert L._solid_blocks(s, w, starts) is starts
  assert L._solid_blocks(s[::-1].copy(), w, starts).tolist() == [0, 1, 2, 3, 4]  # [0.5, 4] and [1, 2] split


@pytest.mark.parametrize("seed", range(6))
def test_list_transpose_keeps_its_crossing_count_exact(seed):
  """Issue 30: _ListOrderer's transposes reuse a pair's counts while none of its two nodes' neighbours moved; from
  shuffled orders (many swaps, so many stale pairs if the stamps were wrong) the running count must equal a recount
  after every run, as numpy's does, and the orders must be numpy's."""
  from viz_server import layout as L
  edges = uop_like(60, seed)
  P, pcomp = _proper_of(edges, seed)
  assert len(P.up) <= L.SMALL_EDGES
  rng = np.random.default_rng(seed)
  start = P.loc.copy()
  for m in P.members:
    start[m] = rng.permutation(len(m))
  O, N = L._ListOrderer(P, pcomp), L._Orderer(P, pcomp)
  O.pos[:] = start.tolist()
  N.pos[:] = start
  for eq in (0, 1, 3):
    O.transpose(6, equal_every=eq)
    N.transpose(6, equal_every=eq)
    assert O.count == O.crossings() == N.count
    assert O.pos == N.pos.tolist()
