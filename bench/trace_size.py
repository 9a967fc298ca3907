"""Bytes per record and writer/reader speed for a typical rewrite-heavy trace, by zlib level.

  python bench/trace_size.py [--records N]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compiler.trace import writer as writer_mod  # noqa: E402
from compiler.trace.reader import TraceReader  # noqa: E402
from compiler.trace.writer import TraceWriter  # noqa: E402


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


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--records", type=int, default=200_000)
  args = ap.parse_args()
  recs = typical(args.records)
  matches = [r for r in recs if r["t"] == "match"]
  print(f"{args.records} records ({len(matches)} matches); write = the hot path (append to the batch), flush = "
        "encode + compress + write, read = TraceReader iteration (decode + validate)")
  writer_mod.MAX_BATCH = 1 << 62  # measure write() and flush() apart: nothing flushes until close()
  print(f"{'level':>5} {'B/record':>9} {'B/match':>8} {'write ns':>9} {'flush ns':>9} {'read ns':>8} {'frames':>7}")
  with tempfile.TemporaryDirectory() as d:
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


if __name__ == "__main__":
  main()
