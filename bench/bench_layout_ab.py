"""Every step-0 graph of traces laid out by an old layout.py and this one (issue 30): the layouts compared by repr (full
and slim routes: every float bit, every key order) and the CPU each took, old and new alternating graph by graph in
this process, so the shared machine's load falls on both alike.

  python bench/bench_layout_ab.py TRACE [TRACE ...] --old /tmp/wt_export_old/viz_server/layout.py [--every N]

The graphs are those StepGraphs hands layout_graph for each rewrite's step 0 (an export lays out exactly these),
equal ones (same ids, sizes and edges) once; --every N: every N-th of them. Exits 1 when a layout differs.

Measured (issue 30, the long transposes' entries in their keys' order, every entry keyed; CPU s, load 3-12 on 2
cores): the demo's and the GPT step trace's 130 + 972 graphs, old 50.9 s, new 44.2 s, 0.87x, identical.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import viz_server.stepgraphs as stepgraphs  # noqa: E402
from viz_server import layout as new_layout  # noqa: E402
from viz_server.replay import Replay  # noqa: E402
from viz_server.store import TraceStore  # noqa: E402

Graph = tuple[dict[int, tuple[float, float]], list[tuple[int, int]]]
CPU = time.process_time


class _Taken(Exception):
  """Raised once a step-0 graph is taken, so that it is not laid out here."""


def step0_graphs(path: Path) -> list[Graph]:
  """The sizes and edges StepGraphs passes layout_graph for step 0 of every rewrite in a trace, equal ones once."""
  tr = TraceStore().add_path(path)[0]
  got: list[Graph] = []

  def take(sizes: dict, edges: list, pause: object = None, slim: bool = False) -> None:
    got.append((dict(sizes), list(edges)))
    raise _Taken

  real = stepgraphs.layout_graph
  stepgraphs.layout_graph = take
  try:
    for rw in list(tr.rewrites.values()):
      try:
        stepgraphs.StepGraphs(tr, rw, Replay(tr, rw))._full(0)
      except _Taken:
        pass
  finally:
    stepgraphs.layout_graph = real
  seen: set[str] = set()
  out = []
  for sizes, edges in got:
    key = json.dumps([sorted(sizes.items()), edges])
    if key not in seen:
      seen.add(key)
      out.append((sizes, edges))
  return out


def load_module(path: str):
  spec = importlib.util.spec_from_file_location("layout_old", path)
  mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
  sys.modules["layout_old"] = mod  # (dataclasses look their module up)
  spec.loader.exec_module(mod)  # type: ignore[union-attr]
  return mod


def compare(old, graphs: list[Graph]) -> tuple[float, float, int]:
  """(old CPU s, new CPU s, layouts that differ), both slim and full, the first code alternating per graph."""
  spent = {old: 0.0, new_layout: 0.0}
  differ = 0
  for i, (sizes, edges) in enumerate(graphs):
    for slim in (False, True):
      got = {}
      for mod in ((old, new_layout) if i % 2 else (new_layout, old)):
        start = CPU()
        got[mod] = repr(mod.layout_graph(sizes, edges, slim=slim))
        spent[mod] += CPU() - start
      if got[old] != got[new_layout]:
        differ += 1
        print(f"  graph {i} ({len(sizes)} nodes, slim={slim}): the layouts differ")
  return spent[old], spent[new_layout], differ


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("traces", nargs="+")
  ap.add_argument("--old", required=True, help="the old layout.py")
  ap.add_argument("--every", type=int, default=1, help="every N-th graph only")
  args = ap.parse_args()
  old = load_module(args.old)
  bad = 0
  for trace in args.traces:
    graphs = step0_graphs(Path(trace))[::args.every]
    t_old, t_new, differ = compare(old, graphs)
    bad += differ
    print(f"{Path(trace).name}: {len(graphs)} graphs, old {t_old:.2f} s, new {t_new:.2f} s CPU, "
          f"{t_new / max(t_old, 1e-9):.3f}x, {'identical' if not differ else f'{differ} differ'}")
  sys.exit(1 if bad else 0)


if __name__ == "__main__":
  main()
