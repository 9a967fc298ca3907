"""Trace size and writer/reader speed: the recorder's `batch` records vs the same records one JSON object each (the
version 1 encoding), on the overhead bench's workloads, and per-record JSON by zlib level.

  python bench/trace_size.py [--records N] [--exprs N]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compiler.trace import recorder  # noqa: E402
from vztrace import writer as writer_mod  # noqa: E402
from vztrace.reader import TraceReader  # noqa: E402
from vztrace.writer import TraceWriter  # noqa: E402


def typical(n: int) -> list[dict]:
  """Mostly matches, with the nodes they create and a rewrite boundary every ~50 matches (like symbolic runs)."""
  rng = random.Random(0)
  out: list[dict] = []
  nid, rw = 0, 0
  while len(out) < n:
    out.append({"t": "rw_begin", "id": rw, "ctx": 1, "name": "symbolic", "file": "compiler/symbolic.py", "line": 40,
                "bottom_up": False, "root": max(nid - 1, 0), "ts": time.time()})
    for _ in range(50):
      out.append({"t": "node", "id": nid, "op": rng.choice(["ADD", "MUL", "CONST", "IDIV", "MOD"]),
                  "dtype": "dtypes.int", "arg": str(rng.randint(0, 99)), "src": [max(nid - 1, 0), max(nid - 2, 0)]})
      out.append({"t": "match", "rw": rw, "pat": rng.randrange(120), "before": max(nid - 3, 0), "after": nid,
                  "dt": rng.randint(800, 40000)})
      nid += 1
    out.append({"t": "rw_end", "id": rw, "root": nid - 1, "dt": 123456, "matches": 50})
    rw += 1
  return out[:n]


def by_level(n: int, d: str) -> None:
  recs = typical(n)
  matches = [r for r in recs if r["t"] == "match"]
  print(f"one JSON record each: {n} records ({len(matches)} matches); write = the hot path (append to the batch), "
        "flush = encode + compress + write, read = TraceReader iteration (decode + validate)")
  saved, writer_mod.MAX_BATCH = writer_mod.MAX_BATCH, 1 << 62  # measure write() and flush() apart
  print(f"{'level':>5} {'B/record':>9} {'B/match':>8} {'write ns':>9} {'flush ns':>9} {'read ns':>8} {'frames':>7}")
  for level in (1, 6, 9):
    p = os.path.join(d, f"t{level}.vztrace")
    w = TraceWriter(p, flush_interval=1e9, level=level)
    write = w.write
    t0 = time.perf_counter()
    for r in recs:
      write(r)
    t1 = time.perf_counter()
    w.close()
    t2 = time.perf_counter()
    pm = os.path.join(d, f"m{level}.vztrace")
    with TraceWriter(pm, flush_interval=1e9, level=level) as wm:
      for r in matches:
        wm.write(r)
    t3 = time.perf_counter()
    got = sum(1 for _ in TraceReader(p))
    t4 = time.perf_counter()
    assert got == len(recs)
    print(f"{level:>5} {os.path.getsize(p) / len(recs):>9.2f} {os.path.getsize(pm) / len(matches):>8.2f} "
          f"{(t1 - t0) / len(recs) * 1e9:>9.0f} {(t2 - t1) / len(recs) * 1e9:>9.0f} "
          f"{(t4 - t3) / len(recs) * 1e9:>8.0f} {w.frames:>7}")
  writer_mod.MAX_BATCH = saved


def batches_vs_records(exprs: int, d: str) -> None:
  from bench.bench_symbolic import random_index_exprs
  from bench.bench_trace_overhead import compile_workloads, symbolic_workload
  ex = random_index_exprs(exprs, seed=0)
  comp = compile_workloads()
  comp()
  print("\nthe recorder's batches vs the same records one JSON object each (zlib level 1); read = TraceReader "
        "iteration per record it yields")
  print(f"{'workload':<22}{'encoding':<10}{'bytes':>10}{'B/node':>8}{'B/match':>9}{'read ns':>9}")
  for name, fn in (("symbolic simplify", lambda: symbolic_workload(ex)), ("compile 5 workloads", comp)):
    p = os.path.join(d, "batch.vztrace")
    recorder.enable(p, announce=False)
    fn()
    recorder.disable()
    t0 = time.perf_counter()
    recs = list(TraceReader(p))
    read_batch = (time.perf_counter() - t0) / len(recs)
    q = os.path.join(d, "records.vztrace")
    with TraceWriter(q, flush_interval=1e9) as w:
      for r in recs:
        w.write(r)
    t0 = time.perf_counter()
    assert list(TraceReader(q)) == recs
    read_recs = (time.perf_counter() - t0) / len(recs)
    nodes, matches = sum(r["t"] == "node" for r in recs), sum(r["t"] == "match" for r in recs)
    for enc, path, read in (("batch", p, read_batch), ("records", q, read_recs)):
      size = os.path.getsize(path)
      print(f"{name:<22}{enc:<10}{size:>10}{size / nodes:>8.1f}{size / max(1, matches):>9.1f}{read * 1e9:>9.0f}")


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--records", type=int, default=200_000)
  ap.add_argument("--exprs", type=int, default=400, help="random index expressions in the symbolic workload")
  args = ap.parse_args()
  recorder.disable()
  with tempfile.TemporaryDirectory() as d:
    by_level(args.records, d)
    batches_vs_records(args.exprs, d)


if __name__ == "__main__":
  main()
