"""Benchmark of viz_server.layout against Graphviz dot on random DAGs shaped like UOp graphs.

Prints, per graph size: our time and edge crossings, dot's time and crossings (when `dot` is installed), the ratio
of crossings ours/dot. (How far nodes move from one step to the next is viz_server/place.py's job: bench_server.py.)

    python bench/bench_layout.py            # 500, 2000 and 5000 nodes, dot on all (5000 takes minutes)
    python bench/bench_layout.py --quick    # no dot at 5000
    python bench/bench_layout.py --small    # ordering on lists (_ListOrderer) vs numpy (_Orderer) by proper edges

--small (where SMALL_EDGES comes from; CPU ms of one graph's ordering, median of 3, on the shared 2-core machine
with an export running beside it), lists vs numpy: 81 proper edges 2.7 vs 12.0, 252 7.9 vs 15.3, 379 14.4 vs 20.4,
597 27.4 vs 28.9, 721 36.1 vs 33.8, 1,332 72.2 vs 41.6: the two break even at about 600.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from viz_server.layout import (  # noqa: E402
    LAYER_GAP,
    NODE_GAP,
    count_crossings,
    count_segment_crossings,
    layout_graph,
)

# ---------------------------------------------------------------- graphs


def uop_dag(n: int, seed: int = 0) -> tuple[int, list[tuple[int, int]]]:
    """About n nodes shaped like a UOp graph: shared DEFINE_GLOBALs, CONSTs (a few with high fan-out) and RANGEs;
    expression trees over LOAD(INDEX(buffer, range*const)) leaves with common subexpressions; each tree ends in a
    STORE, later trees sometimes read earlier stores; one SINK uses every node nobody else uses."""
    rng = np.random.default_rng(seed)
    edges: list[tuple[int, int]] = []
    nid = 0

    def new(srcs: list[int]) -> int:
        nonlocal nid
        v, nid = nid, nid + 1
        edges.extend((s, v) for s in dict.fromkeys(srcs))
        return v

    n_glob, n_rng, n_const = max(2, n // 400), max(2, n // 150), max(3, n // 40)
    globs = [new([]) for _ in range(n_glob)]
    consts = [new([]) for _ in range(n_const)]
    ranges = [new([consts[int(rng.integers(0, n_const))]]) for _ in range(n_rng)]
    cpop = 1.0 / np.arange(1, n_const + 1)
    cpop /= cpop.sum()
    stores: list[int] = []
    made: list[int] = []

    def const() -> int:
        return consts[int(rng.choice(n_const, p=cpop))]

    def leaf() -> int:
        r = rng.random()
        if r < 0.3:
            return const()
        if r < 0.45:
            return ranges[int(rng.integers(0, n_rng))]
        if r < 0.55 and stores:
            return stores[int(rng.integers(max(0, len(stores) - 8), len(stores)))]
        idx = new([ranges[int(rng.integers(0, n_rng))], const()])
        return new([new([globs[int(rng.integers(0, n_glob))], idx])])

    def expr(depth: int) -> int:
        if made and rng.random() < 0.08:
            return made[int(rng.integers(max(0, len(made) - 30), len(made)))]
        if depth <= 0 or nid >= n - 8 or rng.random() < 0.15:
            return leaf()
        v = new([expr(depth - 1) for _ in range(int(rng.choice([1, 2, 3], p=[0.3, 0.55, 0.15])))])
        made.append(v)
        return v

    while nid < n - 5:
        val = expr(int(rng.integers(3, 9)))
        idx = new([ranges[int(rng.integers(0, n_rng))], consts[0]])
        stores.append(new([new([globs[int(rng.integers(0, n_glob))], idx]), val]))
    used = {s for s, _ in edges}
    new([v for v in range(nid) if v not in used])
    return nid, edges


def label_sizes(nodes, seed: int = 0) -> dict[int, tuple[float, float]]:
    """Sizes like rendered labels: one to three lines of 6 to 22 characters."""
    rng = random.Random(seed)
    return {v: (float(12 + 7 * rng.randint(6, 22)), float(10 + 16 * rng.randint(1, 3))) for v in nodes}


def run_dot(sizes, edges, timeout: float) -> tuple[float | None, int | None]:
    """Lay the graph out with `dot -Tplain` (same box sizes and gaps) and count crossings like ours."""
    lines = [f"digraph G {{ nodesep={NODE_GAP / 72:.3f}; ranksep={LAYER_GAP / 72:.3f};",
             'node [shape=box, fixedsize=true, label=""];']
    lines += [f"n{v} [width={w / 72:.4f}, height={h / 72:.4f}];" for v, (w, h) in sizes.items()]
    lines += [f"n{s} -> n{d};" for s, d in dict.fromkeys(edges)]
    lines.append("}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "g.dot")
        with open(path, "w") as f:
            f.write("\n".join(lines))
        t = time.perf_counter()
        try:
            out = subprocess.run(["dot", "-Tplain", path], capture_output=True, text=True, timeout=timeout, check=True)
        except subprocess.TimeoutExpired:
            return None, None
        dt = time.perf_counter() - t
    return dt, dot_crossings(out.stdout)


def _bezier_points(pts: np.ndarray, m: int = 24) -> np.ndarray:
    t = np.linspace(0.0, 1.0, m)[:, None]
    segs = [(1 - t) ** 3 * pts[i] + 3 * (1 - t) ** 2 * t * pts[i + 1] + 3 * (1 - t) * t ** 2 * pts[i + 2]
            + t ** 3 * pts[i + 3] for i in range(0, len(pts) - 3, 3)]
    return np.concatenate(segs)


def dot_crossings(plain: str) -> int:
    """Crossings of a `dot -Tplain` layout: ranks from node y; an edge's x at each rank it passes from its spline."""
    nodes: dict[str, tuple[float, float]] = {}
    splines = []
    for line in plain.splitlines():
        p = line.split()
        if p and p[0] == "node":
            nodes[p[1]] = (float(p[2]), float(p[3]))
        elif p and p[0] == "edge":
            k = int(p[3])
            splines.append((p[1], p[2], np.array([[float(p[4 + 2 * i]), float(p[5 + 2 * i])] for i in range(k)])))
    ys = np.array(sorted({round(y, 3) for _, y in nodes.values()}, reverse=True))  # rank 0 on top: largest y
    rank = {k: int(np.abs(ys - round(y, 3)).argmin()) for k, (_, y) in nodes.items()}
    gap, xt, xb = [], [], []
    for s, d, pts in splines:
        rs, rd = rank[s], rank[d]
        if rs == rd:
            continue
        if rs > rd:
            s, d, rs, rd = d, s, rd, rs
        xs = [nodes[s][0]]
        if rd - rs > 1:
            curve = _bezier_points(pts)
            o = np.argsort(curve[:, 1])
            xs += list(np.interp(ys[rs + 1:rd], curve[o, 1], curve[o, 0]))
        xs.append(nodes[d][0])
        gap += range(rs, rd)
        xt += xs[:-1]
        xb += xs[1:]
    return count_segment_crossings(np.array(gap), np.array(xt), np.array(xb))


# ---------------------------------------------------------------- main


def small() -> None:
    """CPU ms of the ordering (search and final transposes) per graph, on lists and on numpy, by proper edges."""
    from viz_server import layout as L
    rows = []
    for n in range(10, 401, 10):
        nn, edges = uop_dag(n, seed=n)
        ids = list(range(nn))
        _, us, ud, _ = L._acyclic(nn, edges, {v: v for v in ids})
        lay = L._demote(nn, us, ud, L._assign_layers(nn, us, ud))
        graph, pcomp = L._proper(nn, lay, us, ud, np.full(nn, 60.0), L._components(nn, us, ud))
        got = []
        for kind in (L._ListOrderer, L._Orderer):
            cpu = []
            for _ in range(3):
                c = time.process_time()
                o = kind(graph, pcomp)
                o.best_c, o.best = L._search(o, L.STARTS)
                order = list(L._finish(o))
                cpu.append(time.process_time() - c)
            got.append((sorted(cpu)[1], order))
        assert got[0][1] == got[1][1], n  # (the same orders)
        rows.append((len(graph.up), got[0][0] * 1e3, got[1][0] * 1e3))
    print(f"{'proper edges':>12} {'lists ms':>9} {'numpy ms':>9}")
    for e, a, b in sorted(rows):
        print(f"{e:>12} {a:>9.2f} {b:>9.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="500,2000,5000", help="comma-separated node counts")
    ap.add_argument("--quick", action="store_true", help="skip dot at 5,000 nodes and above")
    ap.add_argument("--dot-timeout", type=float, default=150.0)
    ap.add_argument("--repeat", type=int, default=3, help="timing runs of our layout (best is shown)")
    ap.add_argument("--small", action="store_true", help="ordering on lists vs numpy by proper edges (SMALL_EDGES)")
    args = ap.parse_args()
    if args.small:
        small()
        return
    has_dot = shutil.which("dot") is not None
    layout_graph({0: (1.0, 1.0), 1: (1.0, 1.0)}, [(0, 1)])  # warm up lazy numpy imports
    hdr = (f"{'nodes':>6} {'edges':>6} {'ours s':>7} {'cpu s':>6} {'ours cross':>10} {'dot s':>8} {'dot cross':>10} "
           f"{'ratio':>6}")
    print(hdr)
    print("-" * len(hdr))
    for n in [int(x) for x in args.sizes.split(",")]:
        nn, edges = uop_dag(n)
        nodes = set(range(nn))
        sizes = label_sizes(nodes)
        times, cpu = [], []
        for _ in range(args.repeat):
            t, c = time.perf_counter(), time.process_time()
            lay = layout_graph(sizes, edges)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        ours = count_crossings(lay)
        dot_s, dot_c = "-", "-"
        ratio = "-"
        if not has_dot:
            dot_s = "no dot"
        elif args.quick and n >= 5000:
            dot_s = "skipped"
        else:
            dt, dc = run_dot(sizes, edges, args.dot_timeout)
            if dt is None:
                dot_s = f">{args.dot_timeout:.0f}"
            else:
                dot_s, dot_c, ratio = f"{dt:.2f}", str(dc), f"{ours / max(dc, 1):.3f}"
        print(f"{nn:>6} {len(edges):>6} {min(times):>7.3f} {min(cpu):>6.3f} {ours:>10} {dot_s:>8} {dot_c:>10} "
              f"{ratio:>6}", flush=True)
    print("ours s: best wall time of --repeat runs; cpu s: its process time (tells contention apart)")


if __name__ == "__main__":
    main()
