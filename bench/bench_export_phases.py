"""Where an export's CPU time goes (issue 30), in this process with no workers (-j 1): the viewer's own work for each
kept rewrite (its step-0 graph: replay and layout_graph; its steps: replay, place.derive and the compact deltas)
against the export's own (redacting, GraphPacker, EdgeStrip, Packer: the rest of collect), the other answers, and
writing the page (deflate); then the rewrites that cost most and the cost by rewrite name.

  python bench/bench_export_phases.py TRACE [--top N]

Measured on the shared 2-core machine (CPU seconds, time.process_time; one run each, load 6-9, so read the shares):
  demo (301,289 B)  views: step 0  views: steps  packing  other answers  write  total
  before               4.22 (42%)    2.60 (26%)  2.16 (22%)         0.03   0.43   9.97
  now                  4.28 (39%)    3.19 (29%)  2.44 (23%)         0.03   0.44  10.84 (the machine busier: the
                                                 interleaved runs of docs/architecture.md: 16-23% less CPU)
  demo (240,576 B), small graphs' layouts on lists (viz_server/layout.py SMALL_EDGES), two runs each, alternated:
  before               1.99 / 1.94   0.83 / 0.82  0.54 / 0.50  0.03   0.32   3.97 / 3.87
  now                  1.44 / 1.49   0.78 / 0.83  0.48 / 0.52  0.02   0.30   3.28 / 3.43
  demo (265,579 B), the long transposes' keys in order and slim shared layouts, 3 runs each, alternated (load 3.4-4.4):
  before               1.65 / 1.58 / 1.57                             4.60 / 4.19 / 4.37
  now                  1.33 / 1.34 / 1.34                             4.11 / 4.19 / 4.08
The step-0 graphs' layouts (layout_graph) and the steps' derivations are the viewer's and stay: see "Trace tools"
in docs/architecture.md.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from viz_server.export import collect, command, page, workers  # noqa: E402

CPU = time.process_time


class Clock:
  """CPU seconds by phase, and per rewrite (its step-0 graph and its steps)."""

  def __init__(self) -> None:
    self.phase: collections.Counter = collections.Counter()
    self.rewrites: list[tuple[int, int, float, float]] = []  # (rewrite, steps, step-0 s, steps s)

  def timed(self, name: str, f: Callable) -> Callable:
    def run(*a: Any, **k: Any) -> Any:
      start = CPU()
      try:
        return f(*a, **k)
      finally:
        self.phase[name] += CPU() - start
    return run


def _patch(clock: Clock) -> None:
  """Wrap the phases' functions (this process only: a bench, the export's code is left as it is)."""
  step0, deltas = workers.step0, workers.deltas

  def timed_deltas(view: Any, n: int) -> Iterator[dict]:
    spent, it = 0.0, deltas(view, n)
    while True:
      start = CPU()
      d = next(it, None)
      spent += CPU() - start
      if d is None:
        break
      yield d
    clock.phase["views: steps"] += spent
    clock.rewrites[-1] = (*clock.rewrites[-1][:3], spent)

  def timed_step0(view: Any) -> dict:
    start = CPU()
    g = step0(view)
    spent = CPU() - start
    clock.phase["views: step 0"] += spent
    clock.rewrites.append((view.rw.id, view.rw.matches, spent, 0.0))
    return g

  workers.step0, workers.deltas = timed_step0, timed_deltas
  collect._rewrites = clock.timed("rewrites", collect._rewrites)
  collect._other_answers = clock.timed("other answers", collect._other_answers)
  command.write = clock.timed("write", page.write)  # (command imported write by name)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("trace", type=Path)
  ap.add_argument("--top", type=int, default=10, help="the rewrites that cost most, this many")
  args = ap.parse_args()
  clock = Clock()
  _patch(clock)
  start = CPU()
  with collect.OfflineApi(args.trace) as api:
    names = {e["id"]: e["name"] for c in api.trace_get("contexts") for e in c["rewrites"]}
  command.export(args.trace, "/dev/null", jobs=1)
  total = CPU() - start
  p = clock.phase
  packing = p["rewrites"] - p["views: step 0"] - p["views: steps"]
  for name, s in [("views: step 0", p["views: step 0"]), ("views: steps", p["views: steps"]), ("packing", packing),
                  ("other answers", p["other answers"]), ("write", p["write"]), ("total", total)]:
    print(f"{name:14} {s:7.2f} s  {100 * s / total:5.1f}%")
  print(f"\nthe {args.top} rewrites that cost most (rewrite, name, steps, step 0 s, steps s):")
  for r, n, g0, st in sorted(clock.rewrites, key=lambda x: -(x[2] + x[3]))[:args.top]:
    print(f"  {r:6} {names.get(r, '?')[:40]:40} {n:6} {g0:7.3f} {st:7.3f}")
  by: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
  for r, _, g0, st in clock.rewrites:
    by[names.get(r, "?")][0] += 1
    by[names.get(r, "?")][1] += g0 + st
  print("\nby name (rewrites, s):")
  for name, (count, s) in sorted(by.items(), key=lambda kv: -kv[1][1])[:args.top]:
    print(f"  {name[:40]:40} {count:6} {s:7.2f}")


if __name__ == "__main__":
  main()
