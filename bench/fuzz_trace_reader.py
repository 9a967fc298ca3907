"""Fuzz the trace reader with random and mutated files; anything but TraceFormatError escaping is a crash.

  python bench/fuzz_trace_reader.py [CASES] [--seed N]

Every 8th mutated case mutates a trace with a frame over INFLATE_WHOLE raw bytes (read a window at a time), and a
reader must then decode its records as they are consumed (at most one record ahead of its consumer); every 16th
case is a frame with a list field one past its bound (LIST_BOUNDS), which must be damage.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import tempfile
import time
import traceback
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vztrace.format import (  # noqa: E402
  FRAME_HEADER,
  FRAME_MAGIC,
  HEADER,
  LIST_BOUNDS,
  MAGIC,
  RECORD_LEN,
  TraceFormatError,
  pack_column,
)
from vztrace.reader import INFLATE_WHOLE, TraceReader  # noqa: E402
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


def big_trace() -> tuple[bytes, list[dict]]:
  """base_trace with a frame of error records over INFLATE_WHOLE raw bytes after its first frame."""
  data, records = base_trace()
  rec = {"t": "error", "ctx": None, "text": "x" * 30}
  text = json.dumps(rec, separators=(",", ":")).encode()
  n = INFLATE_WHOLE // (len(text) + RECORD_LEN.size) + 100
  raw = (RECORD_LEN.pack(len(text)) + text) * n
  payload = zlib.compress(raw, 1)
  frame = FRAME_HEADER.pack(FRAME_MAGIC, len(payload), zlib.crc32(payload), len(raw)) + payload
  first = HEADER.size + FRAME_HEADER.size + FRAME_HEADER.unpack_from(data, HEADER.size)[1]
  return data[:first] + frame + data[first:], records[:2] + [rec] * n + records[2:]


# a valid record of each type with a bounded list field (not batch: a million records in one costs a second)
VALID = {"meta": {"t": "meta", "version": "1.0", "argv": ["a"], "host": "h", "pid": 1, "python": "3", "started": 1.0,
                  "cwd": "/"},
         "node": {"t": "node", "id": 1, "op": "CONST", "dtype": "int", "arg": "1", "src": []},
         "opt": {"t": "opt", "ctx": 0, "op": "UPCAST", "axis": 0, "arg": 4, "ok": True, "reason": None, "shape": [4],
                 "colors": ["blue"], "kname": "k"},
         "beam": {"t": "beam", "ctx": 0, "round": 0, "opts": [], "chosen": True},
         "run": {"t": "run", "ctx": 0, "kname": "k", "times": [1.0], "min": 1, "median": 1, "flops": 1, "bytes": 1,
                 "gflops": 1, "gbs": 1}}
ELEMENT = {"argv": "a", "src": 0, "shape": 4, "colors": "blue", "opts": ["UPCAST", 0, 4], "times": 1.0}


def long_list(rng: random.Random) -> bytes:
  """A header and a frame of a meta record and a record with one list field one element past its bound."""
  t = rng.choice(sorted(VALID))
  field, bound = rng.choice(sorted(LIST_BOUNDS[t].items()))
  rec: dict = {**VALID[t], field: [ELEMENT[field]] * (bound + 1)}
  raw = b"".join(RECORD_LEN.pack(len(x)) + x for x in (json.dumps(r).encode() for r in (VALID["meta"], rec)))
  payload = zlib.compress(raw)
  return HEADER.pack(MAGIC, 2, 2) + FRAME_HEADER.pack(FRAME_MAGIC, len(payload), zlib.crc32(payload), len(raw)) + \
    payload


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
  small, small_records = base_trace()
  big, big_records = big_trace()
  stats = {"rejected": 0, "damaged": 0, "intact": 0, "crashes": 0, "wrong": 0}
  t0 = time.perf_counter()
  for i in range(args.cases):
    data, records = (big, big_records) if i % 16 == 1 else (small, small_records)
    case = long_list(rng) if i % 16 == 2 else mutate(rng, data) if i % 2 else random_case(rng)
    try:
      live = TraceReader(io.BytesIO(case)).poll()
      r = TraceReader(io.BytesIO(case))
      got = []
      for rec in r:  # records are decoded as they are consumed: at most the rest of one batch (4 here) ahead
        got.append(rec)
        if r.records > len(got) + 4:
          stats["wrong"] += 1
          break
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
    if i % 16 == 2 and not (r.damaged and "elements, more than" in (r.reason or "")):
      stats["wrong"] += 1
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
