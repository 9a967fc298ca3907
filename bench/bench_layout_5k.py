"""Issue 18: layout_graph time per pass on the graphs the server lays out cold, old vs new side by side.

The graphs are the ones viz_server's StepGraphs hands layout_graph for step 0 of: bench_ui.py's synthetic kernels
(big_kernel, 500 / 2,000 / 5,000 nodes asked) and, with --demo TRACE, the largest rewrite of a recorded trace.
The old implementation is a module file given by --old (e.g. `git show HEAD~1:viz_server/layout.py >
/tmp/layout_old.py`); both run in this process, alternating, best of --repeat. Also checks both give the same
layout (or says how many crossings each has when they differ).

    python bench/bench_layout_5k.py --old /tmp/layout_old.py [--demo /tmp/demo.vztrace] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import importlib.util
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_ui import write_trace  # noqa: E402

import viz_server.stepgraphs as stepgraphs  # noqa: E402
from viz_server import layout as new_layout  # noqa: E402
from viz_server.replay import Replay  # noqa: E402
from viz_server.store import TraceStore  # noqa: E402

Graph = tuple[dict[int, tuple[float, float]], list[tuple[int, int]]]


def step0_graphs(path: Path) -> list[tuple[str, Graph]]:
  """(rewrite name, the sizes and edges StepGraphs passes layout_graph for its step 0) of every rewrite in a trace."""
  store = TraceStore()
  tr = store.add_path(path)[0]
  got: list[Graph] = []
  real = stepgraphs.layout_graph
  stepgraphs.layout_graph = lambda sizes, edges, pause=None, slim=False: (
    got.append((sizes, edges)) or real(sizes, edges, slim=slim))
  out = []
  try:
    for rw in list(tr.rewrites.values()):
      got.clear()
      stepgraphs.StepGraphs(tr, rw, Replay(tr, rw))._full(0)
      out.append((rw.name, got[0]))
  finally:
    stepgraphs.layout_graph = real
  return out


def load_module(path: str):
  spec = importlib.util.spec_from_file_location("layout_old", path)
  mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
  sys.modules["layout_old"] = mod  # dataclasses look their module up
  spec.loader.exec_module(mod)  # type: ignore[union-attr]
  return mod


def best_ms(fn, g: Graph, repeat: int):
  times, lay = [], None
  for _ in range(repeat):
    t = time.perf_counter()
    lay = fn(*g)
    times.append((time.perf_counter() - t) * 1000)
  return min(times), lay


def server_answers(old, repeat: int) -> tuple[list[float], list[float]]:
  """ms of the server's whole cold answer (GET .../graph?step=0 of a 5,000-node rewrite never laid out, in-process
  through the Flask test client), with the old layout and the new one, alternating."""
  from viz_server.app import create_app
  with tempfile.TemporaryDirectory() as tmp:
    trace = Path(tmp) / "cold.vztrace"
    write_trace(trace, [(f"cold{i}", 5000) for i in range(2 * repeat)])
    client = create_app([trace], follow=False, allowed_hosts=None).test_client()
    tid = client.get("/api/traces").get_json()[0]["id"]
    rids = [c["rewrites"][0]["id"] for c in client.get(f"/api/traces/{tid}/contexts").get_json() if c["rewrites"]]
    real, out = stepgraphs.layout_graph, ([], [])
    try:
      for i, rid in enumerate(rids):
        stepgraphs.layout_graph = old.layout_graph if i % 2 == 0 else real
        t = time.perf_counter()
        assert client.get(f"/api/traces/{tid}/rewrites/{rid}/graph?step=0").status_code == 200
        out[i % 2].append((time.perf_counter() - t) * 1000)
    finally:
      stepgraphs.layout_graph = real
  return out


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--old", help="path of the old layout.py to compare against")
  ap.add_argument("--demo", help="a recorded trace: its largest rewrite is benchmarked too")
  ap.add_argument("--sizes", default="500,2000,5000")
  ap.add_argument("--repeat", type=int, default=3)
  ap.add_argument("--profile", action="store_true", help="cProfile the new layout of the largest graph")
  args = ap.parse_args()
  graphs: list[tuple[str, Graph]] = []
  with tempfile.TemporaryDirectory() as tmp:
    trace = Path(tmp) / "synthetic.vztrace"
    write_trace(trace, [(f"big_{n}", int(n)) for n in args.sizes.split(",")])
    graphs += step0_graphs(trace)
  if args.demo:
    demo = step0_graphs(Path(args.demo))
    name, g = max(demo, key=lambda ng: len(ng[1][0]))
    graphs.append((f"demo: {name}", g))
  old = load_module(args.old) if args.old else None
  new_layout.layout_graph({0: (1.0, 1.0), 1: (1.0, 1.0)}, [(0, 1)])
  print(f"{'graph':<40} {'nodes':>6} {'edges':>6} {'old ms':>8} {'new ms':>8} {'ratio':>6}  same")
  for name, g in graphs:
    new_ms, lay = best_ms(new_layout.layout_graph, g, args.repeat)
    old_ms, same = float("nan"), "-"
    if old is not None:
      old_ms, ref = best_ms(old.layout_graph, g, args.repeat)
      new_ms = min(new_ms, best_ms(new_layout.layout_graph, g, args.repeat)[0])  # alternate: load drifts
      if ref.pos == lay.pos and ref.edges == lay.edges:
        same = "identical"
      elif ref.pos.keys() == lay.pos.keys() and ref.edges.keys() == lay.edges.keys() and ref.layer == lay.layer:
        d = max(max(abs(a - b) for p, q in zip(ref.pos[v], lay.pos[v]) for a, b in [(p, q)]) for v in ref.pos)
        same = f"same layers and keys, max |dx| {d:.2g} px; crossings old {new_layout.count_crossings(ref)} " \
               f"new {new_layout.count_crossings(lay)}"
      else:
        same = f"differs: crossings old {new_layout.count_crossings(ref)} new {new_layout.count_crossings(lay)}"
    print(f"{name[:40]:<40} {len(g[0]):>6} {len(g[1]):>6} {old_ms:>8.1f} {new_ms:>8.1f} {new_ms / old_ms:>6.2f}  "
          f"{same}", flush=True)
  if old is not None:
    o, n = server_answers(old, args.repeat)
    print(f"server's cold answer, 5,000-node graph (in-process, best of {args.repeat}): old {min(o):.1f} ms, "
          f"new {min(n):.1f} ms")
  if args.profile:
    g = max(graphs, key=lambda ng: len(ng[1][0]))[1]
    prof = cProfile.Profile()
    prof.runcall(new_layout.layout_graph, *g)
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
  main()
