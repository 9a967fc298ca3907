"""Fuzz the trace reader with random and mutated files; anything but TraceFormatError escaping is a crash.

  python bench/fuzz_trace_reader.py [CASES] [--seed N]
"""
from __future__ import annotations

import argparse
import io
import os
import random
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vztrace.format import FRAME_MAGIC, HEADER, MAGIC, TraceFormatError, pack_column  # noqa: E402
from vztrace.reader import TraceReader  # noqa: E402
from vztrace.writer import TraceWriter  # noqa: E402


def _col(values: list[int], kind: str = "u32s") -> str:
  return pack_column(values, kind).decode()


# a batch (what the recorder writes) and the records it expands to
BATCH = {"t": "batch", "id": 5, "strs": ["ADD", "int", "None"], "op": _col([0, 0]), "dtype": _col([1, 1]),
         "arg": _col([2, 2]), "nsrc": _col([2, 1]), "src": _col([3, 4, 5]), "rw": _col([1]), "pat": _col([0]),
         "before": _col([5]), "after": _col([6]), "dt": _col([7], "i64s"), "at": _col([1, 0]),
         "recs": [{"t": "rw_begin", "id": 1, "ctx": 0, "name": "b", "file": None, "line": None, "bottom_up": False,
                   "root": 5, "ts": 1.5}]}
BATCH_RECORDS = [{"t": "node", "id": 5, "op": "ADD", "dtype": "int", "arg": "None", "src": [3, 4]}, BATCH["recs"][0],
                 {"t": "node", "id": 6, "op": "ADD", "dtype": "int", "arg": "None", "src": [5]},
                 {"t": "match", "rw": 1, "pat": 0, "before": 5, "after": 6, "dt": 7}]


def base_trace() -> tuple[bytes, list[dict]]:
  """A valid 4-frame trace with most record types, a batch among them."""
  recs = [[{"t": "meta", "version": "1.0", "argv": ["a"], "host": "h", "pid": 1, "python": "3", "started": 1.0,
            "cwd": "/"}, {"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 1.0}],
          [{"t": "node", "id": i, "op": "CONST", "dtype": "int", "arg": str(i), "src": list(range(i))}
           for i in range(5)],
          [{"t": "rw_begin", "id": 0, "ctx": 0, "name": "sym", "file": "f.py", "line": 1, "bottom_up": True,
            "root": 4, "ts": 1.0}, {"t": "match", "rw": 0, "pat": 0, "before": 4, "after": 3, "dt": 5},
           {"t": "rw_end", "id": 0, "root": 3, "dt": 9, "matches": 1}, {"t": "unknown_kind", "x": 1}, BATCH],
          [{"t": "run", "ctx": 0, "kname": "k", "times": [1e-3], "min": 1e-3, "median": 1e-3, "flops": 1, "bytes": 2,
            "gflops": 0.5, "gbs": 1.0}, {"t": "end", "ts": 2.0}]]
  with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "t.vztrace")
    with TraceWriter(p, validate=True) as w:
      for batch in recs:
        for r in batch:
          w.write(r)
        w.flush()
    data = open(p, "rb").read()
  return data, [x for b in recs for r in b if r["t"] != "unknown_kind" for x in (BATCH_RECORDS if r is BATCH else [r])]


def mutate(rng: random.Random, data: bytes) -> bytes:
  buf = bytearray(data)
  for _ in range(rng.randint(1, 4)):
    kind, pos = rng.randrange(6), rng.randint(0, len(buf))
    blob = rng.randbytes(rng.randint(1, 8))
    if kind == 0 and pos < len(buf):
      buf[pos] ^= 1 << rng.randrange(8)
    elif kind == 1:
      buf[pos:pos + len(blob)] = blob
    elif kind == 2:
      buf[pos:pos] = blob
    elif kind == 3:
      del buf[pos:pos + len(blob)]
    elif kind == 4:
      del buf[pos:]
    else:  # duplicate a slice: frames out of place
      a = rng.randint(0, len(buf))
      buf[pos:pos] = buf[a:a + rng.randint(1, 64)]
  return bytes(buf)


def random_case(rng: random.Random) -> bytes:
  prefix = rng.choice([b"", MAGIC, HEADER.pack(MAGIC, 1, 0), HEADER.pack(MAGIC, 2, 0) + FRAME_MAGIC])
  return prefix + rng.randbytes(rng.randint(0, 200))


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("cases", type=int, nargs="?", default=100_000, help="number of cases (default 100000)")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()
  rng = random.Random(args.seed)
  data, records = base_trace()
  stats = {"rejected": 0, "damaged": 0, "intact": 0, "crashes": 0, "wrong": 0}
  t0 = time.perf_counter()
  for i in range(args.cases):
    case = mutate(rng, data) if i % 2 else random_case(rng)
    try:
      live = TraceReader(io.BytesIO(case)).poll()
      r = TraceReader(io.BytesIO(case))
      got = list(r)
    except TraceFormatError:
      stats["rejected"] += 1
      continue
    except Exception:
      stats["crashes"] += 1
      if stats["crashes"] <= 3:
        traceback.print_exc()
        print("case:", case.hex(), file=sys.stderr)
      continue
    stats["damaged" if r.damaged else "intact"] += 1
    # what is read must be a prefix of what was written (for mutated files), and poll never reads past a full read
    if (i % 2 and got != records[:len(got)]) or got[:len(live)] != live:
      stats["wrong"] += 1
  dt = time.perf_counter() - t0
  print(f"{'cases':>8} {'crashes':>8} {'wrong':>6} {'rejected':>9} {'damaged':>8} {'intact':>7} {'time s':>7} "
        f"{'cases/s':>8}")
  print(f"{args.cases:>8} {stats['crashes']:>8} {stats['wrong']:>6} {stats['rejected']:>9} {stats['damaged']:>8} "
        f"{stats['intact']:>7} {dt:>7.1f} {args.cases / dt:>8.0f}")
  sys.exit(1 if stats["crashes"] or stats["wrong"] else 0)


if __name__ == "__main__":
  main()
