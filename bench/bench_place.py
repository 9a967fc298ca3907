"""How the viewer's stable layout of a rewrite's steps reads against a fresh layout of the same graph (issue 30: "nodes
that a step adds are placed where a fresh layout would put them"). The stable layout (viz_server/place.py) never moves
a node the steps share; a fresh layout (`/graph?fresh=1`, key `r`) lays the step out from scratch. Per step sampled:
edge crossings (every pair of drawn segments that cross, ends not shared), edges that run upwards, the total drawn
edge length and the layout's height, for both.

  python bench/bench_place.py TRACE [--rewrite NAME] [--steps K,K,...]
  (default: the trace's rewrite with the most matches, ten steps spread over it)

Measured (a GPT-2-shaped training step at bench/real_models.py's `quick` size, `add bufferize`, 492 steps, 1,679 ->
1,992 nodes; crossings and edge length over a fresh layout's at the step):
  rule                                 step 61  step 184  step 492  | length at 492
  nodes pushed down placed one by one     2.07      5.92      6.04  |          1.36
  ... just below their sources            2.11      2.34      4.25  |          0.86
Most of the first came in a few steps (step 148: +84k crossings, 1,008 nodes re-placed across the rows below a node
pushed far down, 16k px down). The demo's largest rewrite (`examples/demo.py`, 284 steps, 2,383 nodes) goes the other
way, less: 1.37 -> 1.44x the crossings and 1.04 -> 1.14x the length at its last step. What is left is a chain of new
nodes (no old version) right below its first source, zigzagging around the boxes already there (step 27: +23k).
A rebuilt node whose spot is taken (or whose box grew) then went to the free spot nearest its old place on the rows
nearest its old row (pushed: just below its sources), not down by its users' places: the demo's crossings over a
fresh layout's 1.80 / 1.76 / 1.44x -> 1.65 / 1.64 / 1.36x at steps 35 / 142 / 284 (length 1.14 -> 1.06x at 284);
on the full-size GPT step (`add bufferize`, 874 steps) nothing changed: 1.55 / 1.85 / 2.71x at steps 61 / 184 / 492,
where what is left is chains of ~120 rebuilt nodes pushed far down a step (step 92: +12.9k).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viz_server.layout import Layout  # noqa: E402
from viz_server.replay import Replay  # noqa: E402
from viz_server.stepgraphs import StepGraphs  # noqa: E402
from viz_server.store import TraceStore  # noqa: E402

BLOCK = 512  # segments compared against all others at once (a BLOCK x segments boolean array)


def segments(lay: Layout) -> np.ndarray:
  """Every drawn segment as a row (x1, y1, x2, y2, src, dst)."""
  rows = [(a[0], a[1], b[0], b[1], s, d) for (s, d), pts in lay.edges.items() for a, b in zip(pts[:-1], pts[1:])]
  return np.array(rows, dtype=np.float64).reshape(-1, 6)


def crossings(seg: np.ndarray) -> int:
  """Pairs of segments that cross properly, not counting two edges of one node (they meet at its box)."""
  x1, y1, x2, y2, s, d = (seg[:, i][None, :] for i in range(6))
  total = 0
  for i in range(0, len(seg), BLOCK):
    a = seg[i:i + BLOCK]
    ax1, ay1, ax2, ay2, as_, ad = (a[:, j][:, None] for j in range(6))
    side = lambda px, py, qx, qy, rx, ry: np.sign((qx - px) * (ry - py) - (qy - py) * (rx - px))  # noqa: E731
    hit = (side(ax1, ay1, ax2, ay2, x1, y1) * side(ax1, ay1, ax2, ay2, x2, y2) < 0)
    hit &= (side(x1, y1, x2, y2, ax1, ay1) * side(x1, y1, x2, y2, ax2, ay2) < 0)
    hit &= ~((as_ == s) | (as_ == d) | (ad == s) | (ad == d))
    hit &= np.arange(len(seg))[None, :] > np.arange(i, i + len(a))[:, None]  # (each pair once)
    total += int(hit.sum())
  return total


def quality(lay: Layout) -> dict:
  seg = segments(lay)
  return {"nodes": len(lay.pos), "cross": crossings(seg),
          "up": sum(1 for s, d in lay.edges if lay.pos[d][1] <= lay.pos[s][1]),
          "length": float(np.hypot(seg[:, 2] - seg[:, 0], seg[:, 3] - seg[:, 1]).sum()), "height": lay.height}


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("trace", type=Path)
  ap.add_argument("--rewrite", help="the rewrite's name (the one of that name with the most matches)")
  ap.add_argument("--steps", help="comma-separated steps (default: ten spread over the rewrite)")
  args = ap.parse_args()
  (tr,) = TraceStore().add_path(args.trace)
  rws = [r for r in tr.rewrites.values() if args.rewrite in (None, r.name)]
  if not rws:
    sys.exit(f"no rewrite named {args.rewrite!r}")
  rw = max(rws, key=lambda r: r.matches)
  view = StepGraphs(tr, rw, Replay(tr, rw))
  n = rw.matches
  ks = [int(k) for k in args.steps.split(",")] if args.steps else sorted({0, 1, *(n * i // 8 for i in range(1, 9))})
  print(f"{rw.name}: {n} steps")
  hdr = (f"{'step':>5} {'nodes':>6} | {'cross':>8} {'length':>9} {'up':>3} {'height':>7} | {'fresh cross':>11} "
         f"{'length':>9} {'up':>3} {'height':>7} | {'cross x':>7} {'len x':>6} {'stable s':>8}")
  print(hdr)
  print("-" * len(hdr))
  for k in ks:
    t = time.process_time()
    a = quality(view.layout(k))
    dt = time.process_time() - t
    f = quality(view.fresh(k))
    print(f"{k:>5} {a['nodes']:>6} | {a['cross']:>8} {a['length'] / 1e3:>8.0f}k {a['up']:>3} {a['height']:>7.0f} | "
          f"{f['cross']:>11} {f['length'] / 1e3:>8.0f}k {f['up']:>3} {f['height']:>7.0f} | "
          f"{a['cross'] / max(f['cross'], 1):>7.2f} {a['length'] / max(f['length'], 1):>6.2f} {dt:>8.2f}", flush=True)
  print("cross x, len x: the stable layout's crossings and edge length over the fresh layout's (1.00: as if laid out "
        "fresh); stable s: CPU seconds to the stable layout of that step (the chain of steps before it, once)")


if __name__ == "__main__":
  main()
