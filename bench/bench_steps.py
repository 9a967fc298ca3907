"""Server-side cost of stepping through a trace's rewrite with the most steps (issue 30: a GPT step's `add bufferize`,
~900 steps of ~3,000 nodes, each rebuilding ~2,000 of them), in process, as the routes serve it:
- CPU ms per step of its parts, steps 2..N+1 in order: replaying the step, deriving its layout (place), and building
  and encoding the compact delta (`compact=2`) once both layouts are there;
- wall ms of arrow steps (delta k-1 -> k, then the views' prefetch, each inside the request gate as a request is) and
  of jumps to steps near and behind, with the layouts derived for them counted (the worker's included).
CPU times, not wall times, compare best on a loaded machine; run two versions alternately for a before/after.

  PYTHONPATH=. python bench/bench_steps.py TRACE [--steps N]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viz_server.gate import REQUEST_GATE  # noqa: E402
from viz_server.replay import Replay  # noqa: E402
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


def stepping(tr, rw, n: int, jumps: list[int]) -> None:
  """Wall ms of opening, n arrow steps and the jumps, as the routes serve them; layouts derived counted."""
  views = Views(None)  # type: ignore[arg-type]  # (prefetch needs no store)
  view = views.get(tr, rw)

  def ask(j: int, k: int) -> float:
    t = time.perf_counter()
    with REQUEST_GATE.request():
      dumps(view.delta(j, k, compact=True, rebuilt=True))
      views.prefetch(view, k)
    return (time.perf_counter() - t) * 1e3

  t = time.perf_counter()
  view.graph_json(0, compact=True)
  print(f"open (step 0 laid out whole): {(time.perf_counter() - t) * 1e3:.0f} ms")
  arrows = [ask(k - 1, k) for k in range(1, n + 1)]
  print(f"arrow steps 1..{n}: median {statistics.median(arrows):.0f} ms, max {max(arrows):.0f} ms, "
        f"layouts derived {view.stats['derived']}")
  cur = n
  for k in jumps:
    before = view.stats["derived"]
    print(f"jump {cur} -> {k}: {ask(cur, k):.0f} ms, layouts derived {view.stats['derived'] - before}")
    cur = k


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
  stepping(tr, rw, n, [k for k in (90, 45, 70, 10, 89) if k <= rw.matches])


if __name__ == "__main__":
  main()
