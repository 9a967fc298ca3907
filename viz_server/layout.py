"""Layered (Sugiyama-style) layout of DAGs such as UOp graphs, computed server-side with numpy.

Orientation: top to bottom. An edge (src, dst) goes from an operand to its user; layer indices and y grow along
edges, so leaves sit at the top (layer 0) and the sink at the bottom. x grows to the right. Every coordinate is
>= 0 and every node box lies inside [0, width] x [0, height]. An edge's polyline starts at the center of src and
ends at the center of dst with one point per layer in between (the edge's dummy node there, or on a channel its
one x, at that layer's center y), so it has layer[dst] - layer[src] + 1 points. Callers clip the ends at the
boxes and may draw a smooth curve through the points.

Pipeline (numpy throughout; Python loops only where a step is inherently sequential and linear):
1. cycles: reverse the back edges of a DFS (only when a topological peel finds a cycle);
2. layers: longest path from the leaves, then every node with more users than operands (leaves, constants)
   pulled down to just above its first user, then fan-out nodes moved further down together with the users that
   must follow while that shortens the edges in total (a bounded "promote layering");
3. dummy nodes on long edges (one per layer crossed), at most DUMMY_BUDGET x (nodes + edges) of them: past that
   the longest edges are channels instead, left out of passes 4 and 5 and placed after them (5b);
4. order: from two starts (a barycenter sweep up from the sink, which is planar for trees, and one down from the
   leaves then up) a few median/barycenter sweeps; the better result then gets long runs of a vectorized
   "transpose": every non-interfering pair of neighbours in all layers at once is swapped when that lowers
   crossings (every third round also on ties, to leave plateaus), keeping the best order seen (on big graphs,
   past BIG_EDGES proper edges: one start, fewer sweeps and rounds);
5. x: rows start packed and centered; each step moves nodes halfway to the weighted mean of their neighbours (dot's
   weights: 1 / 2 / 8 for real-real / real-dummy / dummy-dummy edges), dummies partly toward the straight line of
   their edge, then projects all rows exactly back onto their order and separations (weighted isotonic
   regression, all rows in one vectorized pool-adjacent-violators, each step's started from the blocks of the
   step before: the same fit in a few passes);
5b. channels: each a vertical line beside the rows it passes (outside the extent of the nodes, dummies and channels
   placed before it on those layers, on the side nearer its ends), shortest first, so the longest run outermost;
6. y: each layer is a band as tall as its tallest node, bands LAYER_GAP apart.
A step's layout is derived from the one before it elsewhere (viz_server/place.py); this module lays a graph out
from scratch.
"""
from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any, Callable

import numpy as np

NODE_GAP = 24.0     # horizontal gap between two real node boxes
DUMMY_GAP = 10.0    # gap next to a dummy node (edge routing channel)
DUMMY_W = 4.0       # width of a dummy node
LAYER_GAP = 44.0    # vertical gap between the bands of two consecutive layers
DEFAULT_SIZE = (40.0, 20.0)  # size of a node that appears in edges but not in sizes
STARTS = (0, 1)     # crossing reduction: initial orders tried (see _search),
SWEEPS = 3          # median/barycenter sweeps from each, each followed by a short transpose run
SWEEP_ROUNDS = 2    # transpose rounds after each sweep
FINAL_ROUNDS = 48   # transpose rounds from the best order at the end...
TRANSPOSE_WORK = 2_500_000  # ...at most this many (rounds x proper edges)
# past this many proper edges (a 2,000-node UOp graph has ~18k, a 5,000-node one ~42k) the ordering is cut to one
# start, BIG_SWEEPS sweeps and BIG_WORK (at least 4 rounds) of final transposes: the 5,000-node graph of
# bench/bench_layout.py in 0.37 s instead of 1.4 s, for 0.6% more crossings (the second start and the long final
# runs win almost nothing there)
BIG_EDGES = 25_000
BIG_SWEEPS = 2
BIG_WORK = 200_000
SORTED_ROUNDS = 8   # a transpose of at least this many rounds first puts its entries in their keys' order
COORD_ITERS = 30    # coordinate steps from packed rows
DUMMY_LINE = 0.5    # a dummy's target x: this much the straight line of its edge, the rest its neighbours' mean
# the proper graph holds at most this many dummies per node and edge: past it the longest edges become vertical
# channels beside the rows (a GPT step's tensor graph, 2,942 nodes over 986 layers, had 419,543 dummies: 7.5 s)
DUMMY_BUDGET = 4
# up to this many proper edges the ordering runs on Python lists (_ListOrderer: the same orders), where numpy's
# per-call cost outweighed the work (a 16-63-node graph took ~10 ms, ~60% of it crossing reduction; the two break
# even at ~600 edges: bench/bench_layout.py --small)
SMALL_EDGES = 500


_hook = threading.local()  # .pause: what layout_graph(pause=...) calls between chunks of work on this thread


def _pause() -> None:
    fn = getattr(_hook, "pause", None)
    if fn is not None:
        fn()


@dataclass
class Layout:
    """Node centers, layers (0 = top), edge polylines keyed like the input edges, and the bounding size."""

    pos: dict[int, tuple[float, float]]
    layer: dict[int, int]
    edges: dict[tuple[int, int], tuple[tuple[float, float], ...]]  # tuples: the GC need not scan cached layouts
    width: float
    height: float


# ---------------------------------------------------------------- helpers


def _inversions(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> int:
    """Number of pairs i, j with g_i == g_j, a_i < a_j and b_i > b_j (non-negative int arrays): segment crossings."""
    n = len(g)
    if n < 2:
        return 0
    g, a, b = g.astype(np.int64), a.astype(np.int64), b.astype(np.int64)
    kb, ka, ki = max(1, int(b.max()).bit_length()), max(1, int(a.max()).bit_length()), n.bit_length()
    order = np.argsort((g << (ka + kb)) | (a << kb) | b, kind="stable")
    gs, bs = g[order], b[order]
    idx = np.arange(n, dtype=np.int64)
    total = 0
    # radix over the bits of b: at each level, pairs that agree above `bit` and differ at it are compared once
    for bit in range(kb - 1, -1, -1):
        # sorting packed (group, index) keys is an argsort by group that keeps index order, read back from the keys;
        # a stable (merge) sort, fast on these keys: runs already sorted by g and, each level, by the bits above
        key = np.sort((((gs << kb) | (bs >> (bit + 1))) << ki) | idx, kind="stable")
        bits = (bs[key & ((1 << ki) - 1)] >> bit) & 1
        gg = key >> ki
        before = np.cumsum(bits) - bits
        start = np.empty(n, dtype=bool)
        start[0] = True
        np.not_equal(gg[1:], gg[:-1], out=start[1:])
        base = before[np.maximum.accumulate(np.where(start, idx, 0))]
        total += int((before - base)[bits == 0].sum())
    return total


def _dense_rank(x: np.ndarray) -> np.ndarray:
    return np.unique(x, return_inverse=True)[1].astype(np.int64).reshape(-1)


def count_segment_crossings(gap: np.ndarray, x_top: np.ndarray, x_bottom: np.ndarray) -> int:
    """Crossings among straight segments grouped by layer gap; segments sharing an endpoint x do not cross."""
    gap, x_top, x_bottom = np.asarray(gap), np.asarray(x_top, dtype=float), np.asarray(x_bottom, dtype=float)
    if len(gap) < 2:
        return 0
    return _inversions(_dense_rank(gap), _dense_rank(x_top), _dense_rank(x_bottom))


def count_crossings(layout: Layout) -> int:
    """Crossings between straight polyline segments of edges in each pair of consecutive layers."""
    gaps: list[int] = []
    xt: list[float] = []
    xb: list[float] = []
    seen = set()
    for (s, d), pts in layout.edges.items():
        ls, ld = layout.layer[s], layout.layer[d]
        if ls > ld:  # a reversed (cycle) edge: walk it in layer order; (a, b) and (b, a) share one path
            s, d, ls, ld, pts = d, s, ld, ls, pts[::-1]
        if s == d or (s, d) in seen:
            continue
        seen.add((s, d))
        if len(pts) != ld - ls + 1:
            continue
        for k in range(ld - ls):
            gaps.append(ls + k)
            xt.append(pts[k][0])
            xb.append(pts[k + 1][0])
    return count_segment_crossings(np.array(gaps, dtype=np.int64), np.array(xt), np.array(xb))


def mean_displacement(a: Layout, b: Layout, spacing: float) -> float:
    """Mean distance moved by the nodes present in both layouts, in units of `spacing`."""
    common = [v for v in a.pos if v in b.pos]
    if not common:
        return 0.0
    pa = np.array([a.pos[v] for v in common])
    pb = np.array([b.pos[v] for v in common])
    return float(np.linalg.norm(pa - pb, axis=1).mean() / spacing)


# ---------------------------------------------------------------- graph preparation


def _csr(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Out-adjacency as (ptr, targets, edge ids), targets of each node in edge order."""
    order = np.argsort(src, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    return ptr, dst[order], order


def _peel(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Longest-path layer from the sources (Kahn's queue); -1 for nodes on or behind a cycle."""
    ptr, tgt, _ = _csr(n, src, dst)
    ptr_l, tgt_l = ptr.tolist(), tgt.tolist()
    indeg = np.bincount(dst, minlength=n).tolist()
    lay = [0] * n
    # a queue in one list, one visit per node and edge: a numpy round per layer cost ~40 ms on a 986-layer graph
    order = [v for v in range(n) if indeg[v] == 0]
    for v in order:
        lv = lay[v] + 1
        for w in tgt_l[ptr_l[v]:ptr_l[v + 1]]:
            if lay[w] < lv:
                lay[w] = lv
            indeg[w] -= 1
            if indeg[w] == 0:
                order.append(w)
    out = np.full(n, -1, dtype=np.int64)
    out[order] = np.array(lay, dtype=np.int64)[order]
    return out


def _back_edges(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Edge ids of DFS back edges; reversing them makes the graph acyclic."""
    ptr, tgt, eid = _csr(n, src, dst)
    ptr_l, tgt_l, eid_l = ptr.tolist(), tgt.tolist(), eid.tolist()
    state = [0] * n
    back = []
    for r in range(n):
        if state[r]:
            continue
        state[r] = 1
        stack = [[r, ptr_l[r]]]
        while stack:
            top = stack[-1]
            v, i = top
            if i < ptr_l[v + 1]:
                top[1] = i + 1
                w = tgt_l[i]
                if state[w] == 0:
                    state[w] = 1
                    stack.append([w, ptr_l[w]])
                elif state[w] == 1:
                    back.append(eid_l[i])
            else:
                state[v] = 2
                stack.pop()
    return np.array(back, dtype=np.int64)


def _assign_layers(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Longest-path layering, then nodes with more users than operands pulled down next to their first user."""
    lay = _peel(n, src, dst)
    _pause()
    net = np.bincount(src, minlength=n) - np.bincount(dst, minlength=n)
    movable = net > 0
    if movable.any():
        ptr, tgt, _ = _csr(n, src, dst)
        lay_l, ptr_l, tgt_l = lay.tolist(), ptr.tolist(), tgt.tolist()
        mov = movable.tolist()
        # decreasing layer is a reverse topological order: users are final before their operands move
        for v in np.argsort(-lay, kind="stable").tolist():
            if mov[v]:
                lay_l[v] = min(lay_l[w] for w in tgt_l[ptr_l[v]:ptr_l[v + 1]]) - 1
        lay = np.array(lay_l, dtype=np.int64)
    return lay - lay.min()


def _demote(n: int, src: np.ndarray, dst: np.ndarray, lay: np.ndarray, cap: int = 64) -> np.ndarray:
    """Move fan-out nodes down one layer at a time, together with the users that must follow, while that
    shortens the edges in total (a bounded form of the "promote layering" heuristic): a constant whose first user
    is shallow but whose other users are deep then follows them down."""
    indeg = np.bincount(dst, minlength=n)
    outdeg = np.bincount(src, minlength=n)
    cands = np.flatnonzero((outdeg >= 2) & (outdeg > indeg))
    if len(cands) == 0:
        return lay
    cands = cands[np.argsort(-outdeg[cands], kind="stable")].tolist()
    ptr, tgt, _ = _csr(n, src, dst)
    ptr_l, tgt_l = ptr.tolist(), tgt.tolist()
    net = (indeg - outdeg).tolist()
    lay_l = lay.tolist()
    # a candidate's test reads only the layers of the nodes it reaches: one that failed is skipped until one of
    # those moved (moved[m]: the move that last moved m; failed[v]: v's reads and the moves made when it failed),
    # as the passes after the first repeat ~400 tests of 65 nodes each with nothing near them moved
    moved, moves = [0] * n, 1
    failed: dict[int, tuple[list[int], int]] = {}
    for _ in range(4):
        improved = False
        for v in cands:
            got = failed.get(v)
            if got is not None and max(map(moved.__getitem__, got[0])) < got[1]:
                continue
            while True:
                group, seen, i, delta = [v], {v}, 0, 0
                reads = [v]
                while i < len(group) and len(group) <= cap:
                    m = group[i]
                    i += 1
                    delta += net[m]
                    nxt = lay_l[m] + 1
                    users = tgt_l[ptr_l[m]:ptr_l[m + 1]]
                    reads += users
                    for w in users:
                        if lay_l[w] == nxt and w not in seen:
                            seen.add(w)
                            group.append(w)
                # the edges inside the group keep their length: delta sums operands minus users over it
                if len(group) > cap or i < len(group) or delta >= 0:
                    failed[v] = (reads, moves)
                    break
                # the group and delta stay the same until it reaches a user outside it: move that far at once
                # (the same as one layer at a time; a node of a 986-layer graph moved down up to 951 layers)
                far = min(lay_l[w] - lay_l[m] - 1 for m in group for w in tgt_l[ptr_l[m]:ptr_l[m + 1]] if w not in seen)
                for m in group:
                    lay_l[m] += far
                    moved[m] = moves
                moves += 1
                improved = True
        if not improved:
            break
    return np.array(lay_l, dtype=np.int64)


# ---------------------------------------------------------------- proper layered graph


class _ProperGraph:
    """The layered graph with dummy nodes: every edge joins consecutive layers."""

    def __init__(self, n: int, lay: np.ndarray, src: np.ndarray, dst: np.ndarray, widths: np.ndarray):
        span = lay[dst] - lay[src]
        nd = span - 1
        self.n_real = n
        self.dstart = n + np.cumsum(nd) - nd          # first dummy id of each DAG edge
        self.span = span
        tot = n + int(nd.sum())
        self.n_nodes = tot
        e_rep = np.repeat(np.arange(len(src)), span)
        k = np.arange(int(span.sum())) - np.repeat(np.cumsum(span) - span, span)
        up = np.where(k == 0, src[e_rep], self.dstart[e_rep] + k - 1)
        lo = np.where(k == span[e_rep] - 1, dst[e_rep], self.dstart[e_rep] + k)
        layer = np.empty(tot, dtype=np.int64)
        layer[:n] = lay
        dm = np.flatnonzero((k > 0))
        layer[up[dm]] = lay[src[e_rep[dm]]] + k[dm]
        self.layer = layer
        self.width = np.concatenate([widths, np.full(tot - n, DUMMY_W)])
        self.dummy = np.zeros(tot, dtype=bool)
        self.dummy[n:] = True
        self.edge_of = np.full(tot, -1, dtype=np.int64)  # DAG edge of each dummy
        self.edge_of[up[dm]] = e_rep[dm]
        o = np.lexsort((lo, layer[up]))
        self.up, self.lo = up[o], lo[o]
        self.gap = layer[self.up]
        self.n_layers = int(layer.max()) + 1 if tot else 0
        gptr = np.zeros(self.n_layers + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.gap, minlength=self.n_layers), out=gptr[1:])
        self.gptr = gptr
        lo_order = np.argsort(layer, kind="stable")
        lptr = np.zeros(self.n_layers + 1, dtype=np.int64)
        np.cumsum(np.bincount(layer, minlength=self.n_layers), out=lptr[1:])
        self.lptr = lptr
        self.slots = lo_order  # the layers' nodes one after another (each layer's by id)
        self.members = [lo_order[lptr[i]:lptr[i + 1]] for i in range(self.n_layers)]
        self.loc = np.empty(tot, dtype=np.int64)
        self.loc[lo_order] = np.arange(tot) - np.repeat(lptr[:-1], np.diff(lptr))
        # incidence lists (node, neighbour, side) for the transpose step: side 0 = neighbour above, 1 = below
        self.inc_node = np.concatenate([self.lo, self.up])
        self.inc_nbr = np.concatenate([self.up, self.lo])
        self.inc_side = np.concatenate([np.zeros(len(self.up), np.int64), np.ones(len(self.up), np.int64)])


# ---------------------------------------------------------------- crossing reduction


class _OrderBest:
    """The best order an orderer has seen (its crossings `best_c`, its positions `best`) and its current count."""
    pos: Any
    count: int | None
    best_c: int | None
    best: Any

    def note(self, c: int) -> None:
        self.count = c
        if self.best_c is None or c < self.best_c:
            self.best_c, self.best = c, self.pos.copy()

    def restore(self) -> None:
        self.pos[:] = self.best
        self.count = self.best_c


class _Orderer(_OrderBest):
    """Orders of the layers of a proper graph (pos: index of each node in its layer) and the search on them."""

    def __init__(self, graph: _ProperGraph, comp: np.ndarray):
        self.graph = graph
        self.comp = comp.astype(np.float64)
        self.pos = graph.loc.astype(np.int64).copy()
        self.single_comp = bool(len(comp) == 0 or comp.max() == comp.min())
        self._tp: list | None = None
        self._sides: dict[bool, tuple[np.ndarray, ...]] | None = None  # _side_tables of each direction, once made
        self._lloc: tuple[np.ndarray, np.ndarray] | None = None  # loc of each proper edge's upper and lower end
        self._lptr: list[int] = []
        self.count: int | None = None      # crossings of the current order, when known
        self.best_c: int | None = None
        self.best = self.pos

    def reset(self) -> None:
        """Back to the graph's initial order (by id), nothing counted."""
        self.pos[:] = self.graph.loc
        self.count = self.best_c = None

    def crossings(self, pos: np.ndarray | None = None) -> int:
        p = self.pos if pos is None else pos
        return _inversions(self.graph.gap, p[self.graph.up], p[self.graph.lo])

    def _sort_layer(self, l: int, li: np.ndarray, nbr_pos: np.ndarray, fixed_w: int, median: bool,
                    side: tuple[np.ndarray, ...]) -> None:
        """Sort layer l by the median or mean position of each node's neighbours in the fixed adjacent layer (li:
        the layer's nodes' places at the edges to it, nbr_pos: the neighbours' positions; side: _side_tables)."""
        graph, pos = self.graph, self.pos
        a, b = self._lptr[l], self._lptr[l + 1]
        w = b - a
        if w < 2:
            return
        mem = graph.slots[a:b]
        cnt1, has, i1, i2 = side
        has = has[a:b]
        cur = pos[mem]
        if median and len(li):
            # the neighbours' positions sorted by (node, position): one sort of packed keys
            ps = li * fixed_w + nbr_pos
            ps.sort()
            ps = (ps % fixed_w).astype(np.float64)
            val = np.where(has, (ps[i1[a:b]] + ps[i2[a:b]]) * 0.5, 0.0)
        else:
            val = np.bincount(li, weights=nbr_pos.astype(np.float64), minlength=w) / cnt1[a:b]
        # nodes with no neighbour on the fixed side keep their relative place
        scale = (fixed_w - 1) / max(w - 1, 1)
        key = np.where(has, val, cur * scale)
        order = np.lexsort((cur, key)) if self.single_comp else np.lexsort((cur, key, self.comp[mem]))
        pos[mem[order]] = np.arange(w)

    def _side_tables(self, down: bool) -> tuple[np.ndarray, ...]:
        """What a sweep's layer sorts read that the order does not change, per node in slot order: its neighbours
        on the fixed side (at least 1), whether it has any, and where its median's two middle neighbours sit among
        its layer's edges to that side once sorted by (node, position)."""
        graph = self.graph
        key_nodes = graph.lo if down else graph.up
        cnt = np.bincount(key_nodes, minlength=graph.n_nodes)[graph.slots]
        cs = np.cumsum(cnt) - cnt
        first = np.repeat(graph.lptr[:-1], np.diff(graph.lptr))  # each slot's layer's first slot
        start = cs - cs[first]
        tot = np.bincount(graph.layer[graph.slots], weights=cnt, minlength=graph.n_layers).astype(np.int64)
        last = tot[graph.layer[graph.slots]] - 1
        return (np.maximum(cnt, 1), cnt > 0, np.minimum(start + (cnt - 1) // 2, last),
                np.minimum(start + cnt // 2, last))

    def sweep(self, down: bool, median: bool) -> None:
        self.count = None
        graph, pos = self.graph, self.pos
        if self._sides is None:
            self._sides = {}
            self._lloc = (graph.loc[graph.up], graph.loc[graph.lo])
            self._lptr = graph.lptr.tolist()
        side = self._sides.get(down)
        if side is None:
            side = self._sides[down] = self._side_tables(down)
        rng = range(1, graph.n_layers) if down else range(graph.n_layers - 2, -1, -1)
        _pause()
        gptr, up, lo = graph.gptr.tolist(), graph.up, graph.lo
        lw = np.diff(graph.lptr).tolist()  # (each layer's width)
        loc_up, loc_lo = self._lloc
        for l in rng:
            if lw[l] < 2:
                continue  # (nothing to sort: _sort_layer would return at once, after the gathers below)
            if down:
                g0, g1 = gptr[l - 1], gptr[l]
                self._sort_layer(l, loc_lo[g0:g1], pos[up[g0:g1]], lw[l - 1], median, side)
            else:
                g0, g1 = gptr[l], gptr[l + 1]
                self._sort_layer(l, loc_up[g0:g1], pos[lo[g0:g1]], lw[l + 1], median, side)

    def transpose(self, rounds: int, equal_every: int = 0, stop_on_cycle: bool = True) -> None:
        """Swap adjacent nodes when that lowers crossings, all non-interfering pairs at once: a round has four
        phases (even/odd layers x pairs starting at even/odd positions) whose pairs share no edge. Every
        `equal_every`-th round also swaps pairs whose crossings tie, to leave plateaus. Keeps the count current
        and the best order seen in self.best; stop_on_cycle: stop once the rounds repeat (the best order and count
        are those of the full run; the current order is then one of the cycle's)."""
        graph = self.graph
        if graph.n_nodes < 2 or rounds <= 0:
            return
        if self._tp is None:
            self._setup_transpose()
        if self.count is None:
            self.note(self.crossings())
        self.at[graph.lptr[graph.layer] + self.pos] = np.arange(graph.n_nodes)
        if rounds >= SORTED_ROUNDS:
            # the entries in the order of their keys now: a round swaps a few adjacent nodes, so the phases' keys come
            # nearly sorted (their sort's cost; in node order each layer's keys are a shuffle of its places). Not for
            # fewer rounds (a sweep's 2, a big graph's last 4-5), which pay the argsort for what their sorts save.
            self._tp = [tuple(a[np.argsort(self._phase_keys(ent, 0), kind="stable")] for a in ent) for ent in self._tp]
        dirty = None  # None: every pair is a candidate
        since = 0     # rounds since the best count last dropped
        tie_starts: set[bytes] = set()  # the orders tie rounds started from
        for r in range(rounds):
            _pause()
            if since >= 4 * max(equal_every, 1):
                break  # tie rounds keep shuffling, but nothing better came of the last few of them
            eq = equal_every > 0 and r % equal_every == equal_every - 1
            if eq:
                # a tie round reads every pair, so the rounds from it on depend on the order alone: one that starts
                # from an order an earlier tie round started from repeats a cycle whose counts were all noted
                key = self.pos.tobytes()
                if key in tie_starts and stop_on_cycle:
                    break
                tie_starts.add(key)
            elif dirty is not None and not dirty.any():
                since += 1  # a strict round with no candidate pair moves nothing (as the loop below would find)
                continue
            moved = []
            # the pairs near a dirty node: the same for both parities (a phase moves nodes of its parity's layers only)
            near = None if eq or dirty is None else self._near(dirty)
            for lp in (0, 1):
                ent = self._round_entries(lp, near)
                for sh in (0, 1):
                    mv = self._transpose_phase(ent, sh, eq)
                    if mv is not None:
                        moved.append(mv)
            before = self.best_c
            self.note(self.count)
            since = 0 if self.best_c != before else since + 1
            if not moved:
                if eq or equal_every == 0:
                    break
                dirty = np.zeros(graph.n_nodes, dtype=bool)  # converged for strict swaps: only tie rounds remain
                continue
            # a pair's crossings change only when one of its nodes or one of their neighbours moved
            dirty = np.zeros(graph.n_nodes, dtype=bool)
            dirty[np.concatenate(moved)] = True
            dirty[graph.inc_nbr[dirty[graph.inc_node]]] = True

    def _setup_transpose(self) -> None:
        graph = self.graph
        lw = np.diff(graph.lptr)
        par = graph.layer[graph.inc_node] & 1
        self._tp = []
        self._mb = mb = (int(lw.max()) + 1).bit_length()  # bits of a neighbour's position in a sort key
        for lp in (0, 1):
            e = np.flatnonzero(par == lp)
            node = graph.inc_node[e]
            lstart = graph.lptr[graph.layer[node]]
            # (what a phase's sort key takes from each entry but its positions, packed once)
            self._tp.append((node, graph.inc_nbr[e], (lstart << (mb + 2)) | (graph.inc_side[e] << (mb + 1))))
        self.at = np.empty(graph.n_nodes, dtype=np.int64)

    def _near(self, dirty: np.ndarray) -> np.ndarray:
        """Nodes dirty or next to a dirty node in their layer (whose pairs a strict round looks at)."""
        slot = self.graph.lptr[self.graph.layer] + self.pos
        N = self.graph.n_nodes
        return dirty | dirty[self.at[np.maximum(slot - 1, 0)]] | dirty[self.at[np.minimum(slot + 1, N - 1)]]

    def _round_entries(self, lp: int, near: np.ndarray | None):
        """Incidence entries of the layers of parity lp, only of the nodes `near` marks when given (_near)."""
        ent = self._tp[lp]
        if near is None:
            return ent
        k = near[ent[0]].nonzero()[0]
        return tuple(a[k] for a in ent)

    def _phase_keys(self, ent, sh: int) -> np.ndarray:
        """The sort keys of a phase's entries (_transpose_phase): all of them, none picked out. A node that its
        layer's pairs leave out (its first, shifted by sh, or its last) keys a (pair, side) group of right entries
        only or of left entries only, which counts no crossing, so no pair moves for it: its pair's other slot lies
        in a layer of the other parity (none of this phase's entries), or across an empty one in the last slot of the
        layer above (whose entries are all of side 0: it has no neighbour below) or the first of the layer below
        (side 1 only). A pair across two components is left out of the moves (_transpose_phase)."""
        pos = self.pos
        node, nbr, base = ent
        p = pos[node]
        role = (p - sh) & 1
        return base + ((p - role) << (self._mb + 2)) + (pos[nbr] << 1) + role

    def _transpose_phase(self, ent, sh: int, allow_equal: bool) -> np.ndarray | None:
        pos, at, mb = self.pos, self.at, self._mb
        # one sort of packed keys (pair, side, neighbour position, role): by neighbour position inside each
        # (pair, side) group, left entries first on ties; the fields are read back from the sorted keys (a stable
        # sort, in place: in a long transpose the entries come in their keys' order at its start, so the keys are in
        # long sorted runs)
        key = self._phase_keys(ent, sh)
        if len(key) < 2:
            return None
        key.sort(kind="stable")
        n = len(key)
        rs = key & 1
        gs = key >> (mb + 1)
        gstart = np.empty(n, dtype=bool)
        gstart[0] = True
        np.not_equal(gs[1:], gs[:-1], out=gstart[1:])
        cs = rs.cumsum()
        gbeg = gstart.nonzero()[0]
        gid = gstart.cumsum() - 1
        isl = (rs == 0).nonzero()[0]
        if len(isl) == 0:
            return None
        # for each left entry: the group's right entries before it (crossings if kept), after it and not at the same
        # neighbour (crossings if swapped; at most one right entry shares its neighbour, sorted just after it); the
        # right entries up to a left one are cs's count there (it adds none itself)
        g_l = gid[isl]
        cl, kl = cs[isl], key[isl]
        lt = cl - (cs[gbeg] - rs[gbeg])[g_l]
        nxt = isl + 1
        nxt[-1] = min(nxt[-1], n - 1)  # (the last entry's next is itself: never its key + 1)
        gt = cs[np.append(gbeg[1:], n) - 1][g_l] - cl - (key[nxt] == kl + 1)
        lpid = kl >> (mb + 2)
        # per pair (compressed): crossings among its two nodes' edges if kept, and if swapped
        first = np.empty(len(lpid), dtype=bool)
        first[0] = True
        np.not_equal(lpid[1:], lpid[:-1], out=first[1:])  # sorted by pair already
        fi = first.nonzero()[0]
        up_ = lpid[fi]
        keep = np.add.reduceat(lt, fi)  # (runs: sums of ints, no float weights)
        swap = np.add.reduceat(gt, fi)
        do = swap < keep
        if allow_equal:
            do |= (swap == keep) & (keep > 0)
        sel = do.nonzero()[0]
        if not self.single_comp and len(sel):  # (a pair that moves has its right node: it counts a crossing)
            sel = sel[self.comp[at[up_[sel]]] == self.comp[at[up_[sel] + 1]]]
        if len(sel) == 0:
            return None
        slots = up_[sel]
        self.count += int((swap[sel] - keep[sel]).sum())
        left, right = at[slots], at[slots + 1]
        pos[left] += 1
        pos[right] -= 1
        at[slots], at[slots + 1] = right, left
        return np.concatenate([left, right])


def _components(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Connected component label of each node (label = smallest node index in it), by pointer jumping."""
    lab = np.arange(n)
    if len(src) == 0:
        return lab
    while True:
        m = np.minimum(lab[src], lab[dst])
        new = lab.copy()
        np.minimum.at(new, src, m)
        np.minimum.at(new, dst, m)
        new = new[new]
        if np.array_equal(new, lab):
            return lab
        lab = new


def _search(orderer: _Orderer | _ListOrderer, starts: tuple[int, ...], sweeps: int = SWEEPS) -> tuple[int, Any]:
    """Best order from the given starts (0: a barycenter sweep up from the sink, 1: one down from the leaves then
    up), each refined by sweeps that alternate direction and median/barycenter, each followed by a short
    transpose."""
    found: list[tuple[int, int, Any]] = []
    for start in starts:
        if found and found[0][0] == 0:
            break
        orderer.reset()
        if start % 2 == 1:
            orderer.sweep(down=True, median=False)
        orderer.sweep(down=False, median=False)
        orderer.note(orderer.crossings())
        for it in range(sweeps):
            if orderer.best_c == 0:
                break
            orderer.sweep(down=it % 2 == 0, median=it % 4 < 2)
            orderer.note(orderer.crossings())
            orderer.transpose(SWEEP_ROUNDS, equal_every=3)
        assert orderer.best_c is not None
        found.append((orderer.best_c, start, orderer.best))
    c, _, best = min(found, key=lambda f: (f[0], f[1]))
    return c, best


def _finish(orderer: _Orderer | _ListOrderer, work: int = TRANSPOSE_WORK, least: int = 8) -> Any:
    """Long transpose runs with tie rounds from the best order found, which is where most of the gain is."""
    graph = orderer.graph
    orderer.restore()
    if orderer.best_c:
        # rounds are capped by a work budget (rounds x edges) so that graphs with many dummies stay fast
        orderer.transpose(int(np.clip(work // max(len(graph.up), 1), least, FINAL_ROUNDS)), equal_every=3)
    orderer.restore()
    return orderer.pos


class _ListOrderer(_OrderBest):
    """_Orderer's search in Python lists, for small proper graphs (up to SMALL_EDGES proper edges), where numpy's
    per-call cost (~25 calls a transpose phase, ~200 phases a graph) outweighs the work: the same sweeps, rounds,
    pairs and decisions, so the same orders (tests/viewer/test_layout.py compares the two on seeded graphs). Every
    value it compares is an int, or a float made from ints exactly as _Orderer makes it (medians, barycenters and the
    scaled places of nodes without neighbours: one IEEE operation each, the same in both)."""

    def __init__(self, graph: _ProperGraph, comp: np.ndarray):
        self.graph = graph
        self.comp = comp.tolist()
        self.single_comp = bool(len(comp) == 0 or comp.max() == comp.min())
        n = graph.n_nodes
        self.loc = graph.loc.tolist()
        self.pos = list(self.loc)
        self.layer = graph.layer.tolist()
        self.lptr = graph.lptr.tolist()
        self.slots = graph.slots.tolist()
        self.up, self.lo = graph.up.tolist(), graph.lo.tolist()
        self.gptr = graph.gptr.tolist()
        above: list[list[int]] = [[] for _ in range(n)]
        below: list[list[int]] = [[] for _ in range(n)]
        for u, v in zip(self.up, self.lo):  # (edge order: by gap, then lower end; what _sort_layer's sums read)
            below[u].append(v)
            above[v].append(u)
        self.above, self.below = above, below
        self.count: int | None = None
        self.best_c: int | None = None
        self.best = self.pos

    def reset(self) -> None:
        self.pos[:] = self.loc
        self.count = self.best_c = None

    def crossings(self) -> int:
        """_inversions over each gap's edges: pairs whose upper ends and lower ends are in opposite orders."""
        pos, up, lo, gptr = self.pos, self.up, self.lo, self.gptr
        at = pos.__getitem__
        total = 0
        for g in range(len(gptr) - 1):
            a, b = gptr[g], gptr[g + 1]
            if b - a < 2:
                continue
            seen: list[int] = []
            for _, q in sorted(zip(map(at, up[a:b]), map(at, lo[a:b]))):
                total += len(seen) - bisect_right(seen, q)  # earlier edges (upper end left or equal) ending right
                insort(seen, q)
        return total

    def sweep(self, down: bool, median: bool) -> None:
        """_Orderer.sweep: each layer in turn sorted by its nodes' median or mean neighbour on the fixed side."""
        self.count = None
        pos, lptr, slots, comp = self.pos, self.lptr, self.slots, self.comp
        nbrs = self.above if down else self.below
        n_layers = len(lptr) - 1
        _pause()
        for l in (range(1, n_layers) if down else range(n_layers - 2, -1, -1)):
            a, b = lptr[l], lptr[l + 1]
            w = b - a
            if w < 2:
                continue
            f = l - 1 if down else l + 1
            scale = (lptr[f + 1] - lptr[f] - 1) / max(w - 1, 1)
            keys = []
            for v in slots[a:b]:
                nb = nbrs[v]
                cur = pos[v]
                if not nb:
                    k = cur * scale
                elif median:
                    ps = sorted([pos[u] for u in nb])
                    k = (float(ps[(len(ps) - 1) // 2]) + float(ps[len(ps) // 2])) * 0.5
                else:
                    k = float(sum([pos[u] for u in nb])) / len(nb)
                keys.append(((k, cur) if self.single_comp else (comp[v], k, cur), v))
            keys.sort()
            for i, (_, v) in enumerate(keys):
                pos[v] = i

    def transpose(self, rounds: int, equal_every: int = 0, stop_on_cycle: bool = True) -> None:
        """_Orderer.transpose, pair by pair: the same rounds, phases, candidate pairs and swaps."""
        n = self.graph.n_nodes
        if n < 2 or rounds <= 0:
            return
        if self.count is None:
            self.note(self.crossings())
        pos, lptr, layer = self.pos, self.lptr, self.layer
        at = [0] * n
        for v in range(n):
            at[lptr[layer[v]] + pos[v]] = v
        par = [[l for l in range(len(lptr) - 1) if l & 1 == lp and lptr[l + 1] - lptr[l] >= 2] for lp in (0, 1)]
        above, below = self.above, self.below
        # each pair's counts as last read (_phase), valid while no neighbour of its two nodes moved: the pos changes
        # only by this call's swaps, each of which stamps its nodes' neighbours (tie rounds reuse them most: they
        # look at every pair, most of them unchanged since the round before)
        self._memo: dict[int, tuple[int, int, int]] = {}
        self._touched, self._tick = [0] * n, 0
        dirty: set[int] | None = None
        since = 0
        tie_starts: set[tuple[int, ...]] = set()
        for r in range(rounds):
            _pause()
            if since >= 4 * max(equal_every, 1):
                break
            eq = equal_every > 0 and r % equal_every == equal_every - 1
            if eq:
                key = tuple(pos)
                if key in tie_starts and stop_on_cycle:
                    break
                tie_starts.add(key)
            elif dirty is not None and not dirty:
                since += 1
                continue
            near = None if eq or dirty is None else self._near(dirty, at)
            moved: list[int] = []
            for lp in (0, 1):
                for sh in (0, 1):
                    self._phase(par[lp], sh, eq, near, at, moved)
            before = self.best_c
            self.note(self.count)  # type: ignore[arg-type]
            since = 0 if self.best_c != before else since + 1
            if not moved:
                if eq or equal_every == 0:
                    break
                dirty = set()
                continue
            # the dirty nodes as a set (a round's few moves mark a few nodes; a list of n flags cost O(n) a round)
            dirty = set(moved)
            for v in moved:  # (their neighbours: the moved nodes' only, as _Orderer's one gather)
                dirty.update(above[v])
                dirty.update(below[v])

    def _near(self, dirty: set[int], at: list[int]) -> list[bool]:
        """_Orderer._near, slot neighbours across layer ends included, as there: v is near when v, the node in the
        slot before v's or the one in the slot after is dirty, so marking each dirty node and its two slot
        neighbours marks the same nodes, in O(dirty) instead of O(nodes)."""
        pos, lptr, layer = self.pos, self.lptr, self.layer
        last = len(at) - 1
        out = [False] * len(at)
        for v in dirty:
            s = lptr[layer[v]] + pos[v]
            out[v] = True
            if s > 0:
                out[at[s - 1]] = True
            if s < last:
                out[at[s + 1]] = True
        return out

    def _phase(self, layers: list[int], sh: int, allow_equal: bool, near: list[bool] | None, at: list[int],
               moved: list[int]) -> None:
        """_Orderer._transpose_phase: the pairs at slots (i, i + 1), i = sh mod 2, of the given layers, each swapped
        when that lowers its two nodes' crossings (or ties them, above zero, on a tie round); near: only pairs of
        nodes it marks (_Orderer's entries of other nodes are left out, which leaves such a pair no crossings)."""
        pos, lptr, comp, above, below = self.pos, self.lptr, self.comp, self.above, self.below
        memo, touched, n = self._memo, self._touched, len(pos)
        single = self.single_comp
        for l in layers:
            for s in range(lptr[l] + sh, lptr[l + 1] - 1, 2):
                a, b = at[s], at[s + 1]
                if near is not None and not (near[a] and near[b]):
                    continue
                if not single and comp[a] != comp[b]:
                    continue
                # a pair's counts read only its nodes' neighbours' places: reused while none of them moved
                got = memo.get(a * n + b)
                if got is not None and touched[a] <= got[0] and touched[b] <= got[0]:
                    keep, swap = got[1], got[2]
                else:  # (a and b's edges crossing if kept, and if swapped: sums of ints, a lone neighbour first;
                    # both sides written out, not a call: a pair read is ~2 us, the small graphs' ordering's cost)
                    keep = swap = 0
                    na, nb = above[a], above[b]
                    if na and nb:
                        if len(nb) == 1:
                            q = pos[nb[0]]
                            if len(na) == 1:
                                p = pos[na[0]]
                                keep, swap = int(q < p), int(q > p)
                            else:
                                for u in na:
                                    p = pos[u]
                                    keep += q < p
                                    swap += q > p
                        else:
                            pb = sorted([pos[u] for u in nb])
                            m = len(pb)
                            for u in na:
                                p = pos[u]
                                keep += bisect_left(pb, p)
                                swap += m - bisect_right(pb, p)
                    na, nb = below[a], below[b]
                    if na and nb:
                        if len(nb) == 1:
                            q = pos[nb[0]]
                            for u in na:
                                p = pos[u]
                                keep += q < p
                                swap += q > p
                        else:
                            pb = sorted([pos[u] for u in nb])
                            m = len(pb)
                            for u in na:
                                p = pos[u]
                                keep += bisect_left(pb, p)
                                swap += m - bisect_right(pb, p)
                    memo[a * n + b] = (self._tick, keep, swap)
                if swap < keep or (allow_equal and swap == keep and keep > 0):
                    self.count += swap - keep  # type: ignore[operator]
                    pos[a] += 1
                    pos[b] -= 1
                    at[s], at[s + 1] = b, a
                    moved.append(a)
                    moved.append(b)
                    self._tick += 1
                    for v in (a, b):
                        for u in above[v]:
                            touched[u] = self._tick
                        for u in below[v]:
                            touched[u] = self._tick


# ---------------------------------------------------------------- coordinates


_TRUE, _ZERO = np.ones(1, dtype=bool), np.zeros(1)  # (constant heads of concatenations, never written)


def _rows(graph: _ProperGraph, pos: np.ndarray) -> list[np.ndarray]:
    """Each layer's nodes in their order (pos: a permutation of each layer's places), by one scatter of the nodes
    into their slots (a sort per layer cost ~4 numpy calls each of a ~1,000-layer graph's layers)."""
    flat = np.empty(graph.n_nodes, dtype=np.int64)
    flat[graph.lptr[graph.layer] + pos] = np.arange(graph.n_nodes)
    lp = graph.lptr.tolist()
    return [flat[lp[i]:lp[i + 1]] for i in range(graph.n_layers)]


def _seps(graph: _ProperGraph, row: np.ndarray) -> np.ndarray:
    """Minimum center distance between consecutive nodes of a row."""
    w, d = graph.width[row], graph.dummy[row]
    gap = np.where(d[1:] | d[:-1], DUMMY_GAP, NODE_GAP)
    return (w[1:] + w[:-1]) * 0.5 + gap


def _isotonic(y: np.ndarray, w: np.ndarray, first: np.ndarray, starts: np.ndarray | None = None,
              memo: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least-squares fit of y that is non-decreasing within each run that `first` starts (pool adjacent
    violators; every violating run is pooled in the same pass, valid since pooling order does not matter), and the
    starts of its blocks (the fit is constant on each).

    starts: blocks to begin from (those of a fit of a nearby y): a block whose own fit is constant (every prefix's
    mean at least the block's) is constant in the whole fit too, so such blocks are kept pooled and the rest split
    into such blocks; the answer is the same, in far fewer passes when few blocks change.
    memo: a dict kept across calls with the same w and first (the x steps): what depends on the blocks alone is
    made once while they stay the same (the same array object comes back then; ~4 steps in 5 of a small graph)."""
    n = len(y)
    s, ws = y * w, w.astype(np.float64, copy=False)  # (read, never written)
    if starts is None or len(starts) == 0:
        starts = np.arange(n)
    else:
        starts = _solid_blocks(s, ws, starts, memo=memo)
        s, ws = np.add.reduceat(s, starts), np.add.reduceat(ws, starts)
    got = None if memo is None else memo.get("later")
    if got is not None and got[0] is starts:
        later = got[1]
    else:
        later = ~first[starts[1:]]
        if memo is not None:
            memo["later"] = (starts, later)
    m = s / ws
    while len(s) > 1:
        viol = (m[:-1] > m[1:]) & later
        if not viol.any():
            break
        keep = np.concatenate((_TRUE, ~viol)).nonzero()[0]
        starts = starts[keep]
        s = np.add.reduceat(s, keep)
        ws = np.add.reduceat(ws, keep)
        m = s / ws
        later = ~first[starts[1:]]
    # (array methods, not np.repeat / np.diff / np.append: a small graph's x steps make thousands of such calls,
    # and the wrappers cost about as much as the work)
    return m.repeat(np.concatenate((starts[1:], (n,))) - starts), starts


def _block_tables(starts: np.ndarray, n: int, memo: dict | None) -> tuple[np.ndarray, ...]:
    """_solid_blocks' first round's view of the blocks `starts` begins (ends, sizes, first places, each node's
    block and that block's start), from memo while the same starts come back."""
    got = None if memo is None else memo.get("blocks")
    if got is not None and got[0] is starts:
        return got[1]
    end = np.concatenate((starts[1:], (n,)))
    size = end - starts
    off = size.cumsum() - size
    bid = np.arange(len(starts)).repeat(size)
    out = (end, size, off, bid, starts[bid], off + size - 1)
    if memo is not None:
        memo["blocks"] = (starts, out)
    return out


def _solid_blocks(s: np.ndarray, ws: np.ndarray, starts: np.ndarray, rounds: int = 6, memo: dict | None = None
                  ) -> np.ndarray:
    """The given block starts, each block whose own isotonic fit is not constant split into blocks whose fit is:
    its fit's level sets, cut off one per round from the front (the prefix of least mean is one, and its own fit
    is constant: none of its prefixes has a lower mean); what is still not constant after `rounds` becomes single
    nodes. Each round after the first tests only the blocks the round before split (a block found constant stays
    so: its test reads only its own nodes). No block split: `starts` itself comes back."""
    n = len(s)
    cs, cw = s.cumsum(), ws.cumsum()
    cs0, cw0 = np.concatenate((_ZERO, cs)), np.concatenate((_ZERO, cw))  # [i]: the sum before node i
    beg = starts  # the blocks under test
    end, size, off, bid, base, last = _block_tables(starts, n, memo)
    is_start: np.ndarray | None = None
    idx: np.ndarray | None = None  # their nodes (None: all, in the first round)
    for r in range(rounds + 1):
        if r:
            size = end - beg
            off = size.cumsum() - size  # each block's first place in pm
            bid = np.arange(len(beg)).repeat(size)
            base = beg[bid]
            last = off + size - 1
        if idx is None:  # (the blocks cover every node)
            pm = (cs - cs0[base]) / (cw - cw0[base])   # each node's prefix mean within its block
        else:
            idx = np.arange(len(bid)) - off[bid] + base
            pm = (cs[idx] - cs0[base]) / (cw[idx] - cw0[base])
        bm = pm[last]                           # the block's mean
        least = np.minimum.reduceat(pm, off)
        # a tolerance: a prefix whose mean ties the block's only by rounding does not break the block
        bad_block = least < bm - 1e-9 * (np.abs(bm) + 1.0)
        if not bad_block.any():
            break
        if is_start is None:
            is_start = np.zeros(n, dtype=bool)
            is_start[starts] = True
        bad = bad_block[bid]
        if r == rounds:
            is_start[bad.nonzero()[0] if idx is None else idx[bad]] = True
            break
        cut = ((pm <= least[bid]) & bad).nonzero()[0]
        cb = bid[cut]
        cut = cut[np.concatenate((_TRUE, cb[1:] != cb[:-1]))]
        first_cut = cut if idx is None else idx[cut]  # the least-mean prefix ends there
        is_start[first_cut + 1] = True  # never a block's last node: the whole block's mean is above the least
        split = bad_block.nonzero()[0]  # (every bad block has a cut)
        nb, ne = np.empty(2 * len(split), dtype=np.int64), np.empty(2 * len(split), dtype=np.int64)
        nb[0::2], nb[1::2] = beg[split], first_cut + 1
        ne[0::2], ne[1::2] = first_cut + 1, end[split]
        beg, end = nb, ne
        idx = np.empty(0, dtype=np.int64)  # (not None: the rounds after the first read their blocks' nodes)
    return starts if is_start is None else is_start.nonzero()[0]


def _coordinates(graph: _ProperGraph, rows: list[np.ndarray], seps: list[np.ndarray], us: np.ndarray, ud: np.ndarray,
                 iters: int, settle: bool = True) -> np.ndarray:
    """x of every proper node. Rows start packed and centered; then each step moves every node halfway to the
    weighted mean x of its neighbours (edge weights 1 / 2 / 8 for real-real, real-dummy and dummy-dummy, as in
    dot) and every dummy halfway to the straight line between its edge's ends, and projects all rows at once back
    onto their orders and separations, exactly: a weighted isotonic regression in which heavier nodes move less.
    settle: stop once a step gives its input back (False: every step, what the tests compare it with)."""
    x = np.zeros(graph.n_nodes)
    if graph.n_nodes == 0:
        return x
    flat = np.concatenate(rows)
    cum = [np.concatenate([[0.0], np.cumsum(sp)])[:len(r)] for r, sp in zip(rows, seps)]
    for r, c in zip(rows, cum):
        if len(r):
            x[r] = c - c[-1] / 2
    c = np.concatenate(cum)      # y = x - c is non-decreasing along a row iff no two of its nodes overlap
    first = np.zeros(len(flat), dtype=bool)
    starts = np.cumsum([0] + [len(r) for r in rows[:-1]])
    first[starts[starts < len(flat)]] = True
    dm = graph.dummy.astype(np.int64)
    ew = (1 + dm[graph.inc_node] + dm[graph.inc_nbr]).astype(np.float64)
    ew[ew == 3] = 8.0
    wsum = np.bincount(graph.inc_node, weights=ew, minlength=graph.n_nodes)
    nw = np.maximum(wsum, 1.0)
    n = graph.n_real
    e = graph.edge_of[n:]
    frac = (graph.layer[n:] - graph.layer[us[e]]) / graph.span[e]
    blocks = None
    # what the steps read that they do not change, gathered once
    has, wdiv, ue, de, nwf = wsum > 0, np.maximum(wsum, 1e-12), us[e], ud[e], nw[flat]
    state = b""
    memo: dict = {}  # (_isotonic's, for this w and first)
    for _ in range(iters):
        _pause()
        d = np.bincount(graph.inc_node, weights=ew * x[graph.inc_nbr], minlength=graph.n_nodes)
        d = np.where(has, d / wdiv, x)
        if len(ue):  # (no dummies: nothing to write; a third of a small graph's step on empty arrays)
            a, b = x[ue], x[de]
            d[n:] = DUMMY_LINE * (a + (b - a) * frac) + (1 - DUMMY_LINE) * d[n:]
        t = 0.5 * (x + d)
        fit, blocks = _isotonic(t[flat] - c, nwf, first, blocks, memo)
        x[flat] = fit + c
        # a step is a function of x and the blocks alone: once a step gives them back bit for bit, so would every
        # later step (a chain, a lone row: about one small graph in four settles within 5 steps)
        was, state = state, x.tobytes() + blocks.tobytes()
        if settle and state == was:
            break
    return x


def _proper(n: int, lay: np.ndarray, us: np.ndarray, ud: np.ndarray, widths: np.ndarray,
            comp: np.ndarray) -> tuple[_ProperGraph, np.ndarray]:
    """The proper layered graph, and the component of each of its nodes (numbered by their smallest member)."""
    graph = _ProperGraph(n, lay, us, ud, widths)
    pcomp = np.concatenate([comp, comp[us[graph.edge_of[n:]]]]) if graph.n_nodes > n else comp
    return graph, np.unique(pcomp, return_inverse=True)[1].reshape(-1)


def layout_graph(sizes: dict[int, tuple[float, float]], edges: list[tuple[int, int]],
                 pause: Callable[[], None] | None = None, slim: bool = False) -> Layout:
    """Layered layout of a DAG: node id -> (width, height), edges (src, dst).

    pause: called between chunks of work (a few ms each), so that a background caller can give way to others.
    slim: routes without the points inside their vertical runs (consecutive points whose x are equal to a tenth of a
    pixel, as the viewer's answers send them): the routes viz_server.stepgraphs.slim makes of the full ones, without
    making the full ones first (a ~3,000-node GPT step's graph has ~550k route points, ~30k of them slim)."""
    outer = getattr(_hook, "pause", None)
    _hook.pause = pause
    try:
        return _layout_graph(sizes, edges, slim)
    finally:
        _hook.pause = outer


def _layout_graph(sizes: dict[int, tuple[float, float]], edges: list[tuple[int, int]], slim: bool = False) -> Layout:
    ids = sorted(set(sizes).union(v for e in edges for v in e))
    n = len(ids)
    if n == 0:
        return Layout({}, {}, {}, 0.0, 0.0)
    index = {v: i for i, v in enumerate(ids)}
    wh = np.array([sizes.get(v, DEFAULT_SIZE) for v in ids], dtype=np.float64).reshape(n, 2)
    keys = list(dict.fromkeys((s, d) for s, d in edges))
    ek = [k for k in keys if k[0] != k[1]]
    rev, us, ud, e_of_key = _acyclic(n, ek, index)
    _pause()
    lay = _demote(n, us, ud, _assign_layers(n, us, ud))
    _pause()
    chan = _channels(n, lay, us, ud)
    ks, kd = us[~chan], ud[~chan]
    graph, pcomp = _proper(n, lay, ks, kd, wh[:, 0], _components(n, ks, kd))
    _pause()
    pos = _order(graph, pcomp)
    _pause()
    x = _x_coords(graph, pos, ks, kd)
    cx = _place_channels(graph, x, lay[us[chan]] + 1, lay[ud[chan]] - 1, (x[us[chan]] + x[ud[chan]]) * 0.5)
    x, cx, width = _normalize(graph, x, cx)
    ly, height = _y_coords(graph, lay, wh[:, 1])
    _pause()
    xl, yl = x.tolist(), ly[graph.layer].tolist()
    pos_out = {v: (xl[i], yl[i]) for i, v in enumerate(ids)}
    kept = np.cumsum(~chan) - 1  # each kept edge's index in the proper graph
    routes = _edge_routes(graph, xl, yl, _Channels(us, ud, kept, chan, cx, lay, ly), ek, e_of_key, rev, slim)
    width = _self_loops(routes, keys, pos_out, wh, index, width)
    return Layout(pos_out, dict(zip(ids, lay.tolist())), routes, width, height)


def _acyclic(n: int, ek: list[tuple[int, int]], index: dict[int, int]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pass 1, cycles: the edges (not self-loops) as rows, a cycle's back edges reversed, duplicates merged:
    (reversed per edge, sources and targets of the unique edges, the unique edge of each edge)."""
    src = np.array([index[s] for s, _ in ek], dtype=np.int64)
    dst = np.array([index[d] for _, d in ek], dtype=np.int64)
    rev = np.zeros(len(ek), dtype=bool)
    if len(ek) and (_peel(n, src, dst) < 0).any():
        rev[_back_edges(n, src, dst)] = True
    us, ud = np.where(rev, dst, src), np.where(rev, src, dst)
    uniq, e_of_key = np.unique(us * n + ud, return_inverse=True)
    return rev, uniq // n, uniq % n, e_of_key.reshape(-1)


def _order(graph: _ProperGraph, pcomp: np.ndarray) -> np.ndarray:
    """Pass 4, order: each node's position in its layer, with fewer crossings (a cut-down search on big graphs)."""
    if len(graph.up) <= SMALL_EDGES:
        small = _ListOrderer(graph, pcomp)
        small.best_c, small.best = _search(small, STARTS)
        return np.array(_finish(small), dtype=np.int64)
    orderer = _Orderer(graph, pcomp)
    if len(graph.up) > BIG_EDGES:
        orderer.best_c, orderer.best = _search(orderer, STARTS[:1], BIG_SWEEPS)
        return _finish(orderer, BIG_WORK, 4)
    orderer.best_c, orderer.best = _search(orderer, STARTS)
    return _finish(orderer)


def _x_coords(graph: _ProperGraph, pos: np.ndarray, us: np.ndarray, ud: np.ndarray) -> np.ndarray:
    """Pass 5, x: node centers (proper nodes, dummies included) from the order (not yet shifted to x >= 0)."""
    rows = _rows(graph, pos)
    # every row's separations (_seps) in one pass over the rows laid end to end, the pairs across two rows left out
    # (the same elementwise operations on the same pairs)
    sep = _seps(graph, np.concatenate(rows))
    lp = graph.lptr.tolist()
    return _coordinates(graph, rows, [sep[lp[i]:max(lp[i + 1] - 1, lp[i])] for i in range(graph.n_layers)], us, ud,
                        COORD_ITERS)


def _channels(n: int, lay: np.ndarray, us: np.ndarray, ud: np.ndarray) -> np.ndarray:
    """Pass 3: which edges are channels: the longest, as few as leave at most DUMMY_BUDGET x (nodes + edges)
    dummies to the others (none on most graphs: a 5,000-node UOp graph has ~2.4 x)."""
    nd = lay[ud] - lay[us] - 1
    chan = np.zeros(len(us), dtype=bool)
    budget = DUMMY_BUDGET * (n + len(us))
    if int(nd.sum()) <= budget:
        return chan
    o = np.argsort(-nd, kind="stable")
    left = int(nd.sum()) - np.cumsum(nd[o])  # dummies left once o[:i + 1] are channels
    chan[o[:int(np.argmax(left <= budget)) + 1]] = True
    return chan


def _place_channels(graph: _ProperGraph, x: np.ndarray, top: np.ndarray, bottom: np.ndarray, target: np.ndarray
                    ) -> np.ndarray:
    """Pass 5b, the x of each channel (running down layers top..bottom): beside everything placed on those layers,
    on the side nearer target, shortest first; one slice max and one slice write per channel, no pass."""
    cx = np.zeros(len(top))
    if len(top) == 0:
        return cx
    half = graph.width * 0.5
    left, right = np.full(graph.n_layers, np.inf), np.full(graph.n_layers, -np.inf)
    np.minimum.at(left, graph.layer, x - half)
    np.maximum.at(right, graph.layer, x + half)
    step, hw = DUMMY_GAP + DUMMY_W * 0.5, DUMMY_W * 0.5
    for i in np.lexsort((np.arange(len(top)), bottom - top)).tolist():
        a, b, t = int(top[i]), int(bottom[i]) + 1, float(target[i])
        lo, hi = float(left[a:b].min()) - step, float(right[a:b].max()) + step
        if lo > hi:  # nothing on these layers yet
            c = t
        else:
            c = max(hi, t) if max(hi, t) - t <= t - min(lo, t) else min(lo, t)
        cx[i] = c
        np.minimum(left[a:b], c - hw, out=left[a:b])
        np.maximum(right[a:b], c + hw, out=right[a:b])
    return cx


def _normalize(graph: _ProperGraph, x: np.ndarray, cx: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """x and the channels' x shifted so that every box and channel starts at x >= 0, and the width."""
    if graph.n_nodes == 0:
        return x, cx, 0.0
    half = graph.width * 0.5
    lo, hi = float((x - half).min()), float((x + half).max())
    if len(cx):
        lo, hi = min(lo, float(cx.min()) - DUMMY_W * 0.5), max(hi, float(cx.max()) + DUMMY_W * 0.5)
    return x - lo, cx - lo, hi - lo


def _y_coords(graph: _ProperGraph, lay: np.ndarray, heights: np.ndarray) -> tuple[np.ndarray, float]:
    """Pass 6, y: each layer's center (a layer is a band as tall as its tallest node), and the height."""
    lh = np.zeros(graph.n_layers)
    np.maximum.at(lh, lay, heights)
    top = np.concatenate([[0.0], np.cumsum(lh + LAYER_GAP)[:-1]])
    return top + lh * 0.5, float(top[-1] + lh[-1]) if graph.n_layers else 0.0


@dataclass
class _Channels:
    """What routes need of the edges: ends (unique edges), each kept edge's proper index, which are channels and
    their x, layers and layer centers."""

    us: np.ndarray
    ud: np.ndarray
    kept: np.ndarray
    chan: np.ndarray
    cx: np.ndarray
    lay: np.ndarray
    ly: np.ndarray


def _edge_routes(graph: _ProperGraph, xl: list[float], yl: list[float], ch: _Channels,
                 ek: list[tuple[int, int]], e_of_key: np.ndarray, rev: np.ndarray, slim: bool = False
                 ) -> dict[tuple[int, int], tuple[tuple[float, float], ...]]:
    """Each edge's polyline: its source's center, its dummies' (a channel's: its x at each layer's center y), its
    target's (a reversed edge's the other way); slim: without the points inside vertical runs (layout_graph)."""
    dstart, span = graph.dstart.tolist(), graph.span.tolist()
    usl, udl, el = ch.us.tolist(), ch.ud.tolist(), e_of_key.tolist()
    kl, lay, ly = ch.kept.tolist(), ch.lay.tolist(), ch.ly.tolist()
    cxl = dict(zip(np.flatnonzero(ch.chan).tolist(), ch.cx.tolist()))
    pt = list(zip(xl, yl))  # one point tuple per proper node, shared by the routes through it
    keep = _slim_dummies(graph, xl, ch.us[~ch.chan], ch.ud[~ch.chan]) if slim else None
    n = graph.n_real
    # each unique edge's route: two points (most edges: no dummies; made in C, map and zip), the rest below
    routes = list(zip(map(pt.__getitem__, usl), map(pt.__getitem__, udl)))
    long = ch.chan.copy()
    long[~ch.chan] = graph.span[ch.kept[~ch.chan]] > 1
    for e in np.flatnonzero(long).tolist():
        s, d = usl[e], udl[e]
        if e in cxl:
            c, a, b = cxl[e], lay[s] + 1, lay[d]
            if slim and b - a >= 2:  # a channel is one vertical run: its first and last points, unless its ends join it
                routes[e] = (pt[s], *([(c, ly[a])] if not _same_x(xl[s], c) else []),
                             *([(c, ly[b - 1])] if not _same_x(c, xl[d]) else []), pt[d])
            else:
                routes[e] = (pt[s], *zip(repeat(c), ly[a:b]), pt[d])  # (no Python frame a point: ~500k here)
        else:
            ds, sp = dstart[kl[e]], span[kl[e]]
            if keep is None:
                routes[e] = (pt[s], *pt[ds:ds + sp - 1], pt[d])
            else:
                routes[e] = (pt[s], *compress(pt[ds:ds + sp - 1], keep[ds - n:ds - n + sp - 1]), pt[d])
    out = dict(zip(ek, map(routes.__getitem__, el)))
    for i in np.flatnonzero(rev).tolist():  # a reversed edge's route runs the other way
        out[ek[i]] = routes[el[i]][::-1]
    return out


def round_tenths(x: np.ndarray) -> np.ndarray:
    """Python's round(v, 1) of each float64 (the same doubles), in numpy: rint of 10 v picks round's tenth (that of
    v's exact decimal value) except where 10 v lies within 1e-6 of a half (or is huge, or not finite), and there
    round itself runs."""
    t = x * 10.0
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.rint(t) / 10.0
        odd = ~(np.abs(t - np.floor(t) - 0.5) > 1e-6) | ~(np.abs(t) < 1e9)
    for i in np.flatnonzero(odd).tolist():
        out[i] = round(float(x[i]), 1)
    return out


def _same_x(a: float, b: float) -> bool:
    """Whether two route points' x are one to a tenth of a pixel (as answers send them)."""
    return a == b or round(a, 1) == round(b, 1)


def _slim_dummies(graph: _ProperGraph, xl: list[float], src: np.ndarray, dst: np.ndarray) -> list[bool]:
    """Whether each dummy (in id order, from n_real) stays in its slim route: it does unless its x is the same
    (_same_x) as both its neighbours' on the route, or its route has fewer than two dummies (under 4 points).
    src, dst: the ends of the proper graph's edges (those that are not channels)."""
    n, tot = graph.n_real, graph.n_nodes
    if tot == n:
        return []
    x = np.array(xl)
    rx = round_tenths(x)  # (exactly as answers round)
    e = graph.edge_of[n:]
    ds = graph.dstart[e]
    dummy = np.arange(n, tot)
    # a route's points: its source (the proper edge into its first dummy), its dummies in id order, its target
    prev = np.where(dummy == ds, src[e], dummy - 1)
    nxt = np.where(dummy == ds + graph.span[e] - 2, dst[e], dummy + 1)
    same_prev = (x[prev] == x[dummy]) | (rx[prev] == rx[dummy])
    same_next = (x[nxt] == x[dummy]) | (rx[nxt] == rx[dummy])
    return (~(same_prev & same_next) | (graph.span[e] < 3)).tolist()


def _self_loops(routes: dict, keys: list[tuple[int, int]], pos: dict[int, tuple[float, float]], wh: np.ndarray,
                index: dict[int, int], width: float) -> float:
    """Add each self-loop's route (a small loop right of its node) to routes; the width that makes room for them."""
    for key in keys:
        if key[0] == key[1]:
            cx, cy = pos[key[0]]
            w, h = wh[index[key[0]]]
            r = cx + w / 2
            r2 = r + DUMMY_GAP
            routes[key] = ((r, cy - h / 4), (r2, cy - h / 4), (r2, cy + h / 4), (r, cy + h / 4))
            width = max(width, r + DUMMY_GAP)
    return width
