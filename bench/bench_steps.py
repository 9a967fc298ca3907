"""Server-side cost of stepping through a trace's rewrite with the most steps (issue 30: a GPT step's `add bufferize`,
~900 steps of ~3,000 nodes, each rebuilding ~2,000 of them), in process, as the routes serve it:
- CPU ms per step of its parts, steps 2..N+1 in order: replaying the step, deriving its layout (place), and building
  and encoding the compact delta (`compact=2`) once both layouts are there;
- wall ms of arrow steps (delta k-1 -> k, then the views' prefetch, each inside the request gate as a request is) and
  of jumps to steps near and behind, asked as the page asks them (a step more than NEAR away: its graph on the chain
  of the step shown, which lays it out fresh as a new anchor unless a layout of that chain is near; else the delta on
  that chain), with the layouts derived and laid out whole for them counted (the worker's included); then cold far
  jumps (a fresh view: the page opened at one step, then a jump far ahead), with the steps replay computed counted.
CPU times, not wall times, compare best on a loaded machine; run two versions alternately for a before/after.

  PYTHONPATH=. python bench/bench_steps.py TRACE [--steps N]   (PYTHONPATH=OLD_TREE: the same asks of an older tree)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viz_server.gate import REQUEST_GATE  # noqa: E402
from viz_server.replay import NEAR, Replay  # noqa: E402
from viz_server.stepgraphs import StepGraphs, dumps  # noqa: E402
from viz_server.store import TraceStore  # noqa: E402
from viz_server.views import Views  # noqa: E402


def parts(tr, rw, n: int) -> tuple[float, float, float, float]:
  """CPU ms per step: replay, derive, delta; and the median delta answer in KB."""
  view, cpu = StepGraphs(tr, rw, Replay(tr, rw)), time.process_time
  view.replay.ensure(1)
  t = cpu()
  view.replay.ensure(1 + n)
  replay = (cpu() - t) / n
  view.layout(1)
  t = cpu()
  for k in range(2, 2 + n):
    view.layout(k)
  derive = (cpu() - t) / n
  t, sizes = cpu(), []
  for k in range(2, 2 + n):
    sizes.append(len(dumps(view.delta(k - 1, k, compact=True, rebuilt=True))))
  delta = (cpu() - t) / n
  return replay * 1e3, derive * 1e3, delta * 1e3, statistics.median(sizes) / 1e3


class Page:
  """Asks a view as the page does (static/graph.js): the step shown and the anchor of its layout chain."""

  def __init__(self, views: Views, view: StepGraphs, k: int) -> None:
    self.views, self.view, self.step, self.anchor = views, view, k, 0
    self.ms = self.ask(k, graph=True)

  def ask(self, k: int, graph: bool = False) -> float:
    """Wall ms of showing step k: the delta from the step shown on its chain, or (far, or graph) k's graph."""
    view, t = self.view, time.perf_counter()
    anchored = hasattr(view, "anchor_for")  # (a tree before anchors, for a before/after: its page asked a delta)
    with REQUEST_GATE.request():
      if graph or (anchored and abs(k - self.step) > NEAR):
        a = view.anchor_for(k, self.anchor) if anchored else 0
        if a == k and not graph and hasattr(view, "jump"):  # (the page sends the step on screen: jump() from it)
          a = view.jump(k, self.step, self.anchor) or k
        self.anchor = a
        view.graph_json(k, compact=True, **({"anchor": self.anchor} if anchored else {}))
      else:
        kw = {"anchor": self.anchor} if anchored else {}
        dumps(view.delta(self.step, k, compact=True, rebuilt=True, **kw))
        self.views.prefetch(view, k, *kw.values())
    self.step = k
    return (time.perf_counter() - t) * 1e3


def stepping(tr, rw, n: int, jumps: list[int]) -> None:
  """Wall ms of opening, n arrow steps and the jumps, as the page asks for them; layouts counted."""
  views = Views(None)  # type: ignore[arg-type]  # (prefetch needs no store)
  view = views.get(tr, rw)
  page = Page(views, view, 0)
  print(f"open (step 0 laid out whole): {page.ms:.0f} ms")
  arrows = [page.ask(k) for k in range(1, n + 1)]
  print(f"arrow steps 1..{n}: median {statistics.median(arrows):.0f} ms, max {max(arrows):.0f} ms, "
        f"layouts derived {view.stats['derived']}")
  for k in jumps:
    before, cur = dict(view.stats), page.step
    ms = page.ask(k)
    print(f"jump {cur} -> {k}: {ms:.0f} ms, layouts derived {view.stats['derived'] - before['derived']}, "
          f"whole {view.stats['full'] - before['full']} (anchor {page.anchor})")
  views.wait_idle()


def cold_jumps(tr, rw, pairs: list[tuple[int, int]]) -> None:
  """Wall ms of a far jump on a fresh view (the page opened at j), with the steps its replay computed."""
  for j, k in pairs:
    views = Views(None, prefetch=0)  # type: ignore[arg-type]
    view = views.get(tr, rw)
    page = Page(views, view, j)
    ms = page.ask(k)
    rp = view.replay
    print(f"cold jump {j} -> {k}: {ms:.0f} ms (open {page.ms:.0f} ms), steps computed {len(rp.steps) - 1}, "
          f"nodes made {len(rp.fresh)}")


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("trace", type=Path)
  ap.add_argument("--steps", type=int, default=20)
  args = ap.parse_args()
  (tr,) = TraceStore().add_path(args.trace)
  rw = max(tr.rewrites.values(), key=lambda r: r.matches)
  print(f"rewrite {rw.id} `{rw.name}`: {rw.matches} steps")
  r, d, e, kb = parts(tr, rw, args.steps)
  print(f"CPU ms per step: replay {r:.1f}, derive {d:.1f}, delta {e:.1f} (answers {kb:.1f} KB)")
  n = min(args.steps, rw.matches)
  stepping(tr, rw, n, [k for k in (90, 45, 70, 10, 89, rw.matches, rw.matches - 1) if k <= rw.matches])
  cold_jumps(tr, rw, [(j, k) for j, k in ((20, 90), (80, rw.matches)) if k <= rw.matches])


if __name__ == "__main__":
  main()
