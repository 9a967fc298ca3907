"""Opening a trace in the viewer's store (issue 13): a batch's nodes and matches taken as the reader's columns
(`Trace.columns`, what the store does) vs made into a dict each and indexed one by one (the reader's plain API,
what the store did before), side by side in one process, alternating, median of R runs each.

Traces: the project's workloads compiled with tracing on (the demo's trace, at --scale), and the `symbolic`
simplifier on random index expressions until --matches matches (a big trace); or the files given with --trace.
Prints a table; run from the repo root:

    python bench/bench_store_load.py                       # about a minute, most of it making the big trace
    python bench/bench_store_load.py --trace a.vztrace     # your own traces
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.table import format_table  # noqa: E402
from viz_server import store as store_mod  # noqa: E402
from viz_server.store import TraceStore  # noqa: E402


def open_time(path: Path, columns: bool) -> tuple[float, int, int]:
  """Seconds to open (read and index) the trace; its node and match counts."""
  store_mod.Trace.columns = columns
  try:
    gc.collect()
    t = time.perf_counter()
    (tr,) = TraceStore().add_path(path)
    dt = time.perf_counter() - t
    return dt, len(tr.nodes), tr.match_count
  finally:
    store_mod.Trace.columns = True


def bench(paths: list[tuple[str, Path]], repeat: int) -> None:
  rows = []
  for name, path in paths:
    cols, dicts = [], []
    for _ in range(repeat):
      dt, nodes, matches = open_time(path, False)
      dicts.append(dt)
      dt, nodes2, matches2 = open_time(path, True)
      cols.append(dt)
      assert (nodes, matches) == (nodes2, matches2), "the two ways index different traces"
    before, after = statistics.median(dicts), statistics.median(cols)
    rows.append((name, path.stat().st_size / 1e6, nodes, matches, before, after, after / before))
  print(f"\n== opening a trace in the store, median of {repeat} (dicts: a dict per node and match, as before)")
  print(format_table([("trace", "<16"), ("MB", ">6.2f"), ("nodes", ">8"), ("matches", ">8"), ("dicts s", ">8.3f"),
                      ("columns s", ">9.3f"), ("ratio", ">6.2f")], rows))


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--trace", nargs="*", default=[], help="trace files to open instead of the made ones")
  ap.add_argument("--scale", type=float, default=0.25, help="of the workloads in the demo's trace")
  ap.add_argument("--matches", type=int, default=60_000, help="matches of the big trace")
  ap.add_argument("--repeat", type=int, default=3)
  args = ap.parse_args()
  if args.trace:
    bench([(Path(p).name, Path(p)) for p in args.trace], args.repeat)
    return
  from bench.bench_server import huge_trace, workloads_trace  # the compiler only to make the traces
  with tempfile.TemporaryDirectory() as d:
    demo, big = Path(d) / "demo.vztrace", Path(d) / "big.vztrace"
    made = [("demo", demo)] if workloads_trace(demo, args.scale) else []
    huge_trace(big, args.matches)
    bench(made + [("big", big)], args.repeat)


if __name__ == "__main__":
  main()
