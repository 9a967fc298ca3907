"""Fuzz compiler.nn.state.safe_load with mutated and hostile files; anything but ValueError escaping is a crash, a file
that loads must hold what was saved (for the unmutated file), and no case may decode more than its bounds allow.

  python bench/fuzz_safetensors.py [CASES] [--seed N]

Hostile shapes (issue 31): deep nesting, many values, duplicate names and fields, escapes and brackets in strings,
header lengths past the file or the format's limit.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
import tempfile
import time
import traceback
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from compiler.nn.state import HEADER_DEPTH, MAX_HEADER, MAX_TOKENS, safe_load, safe_save  # noqa: E402
from compiler.tensor import Tensor  # noqa: E402

ENTRY = '{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'


def base_file(d: str) -> tuple[bytes, dict[str, np.ndarray]]:
  """A valid file of three tensors and metadata with brackets and escapes in its strings."""
  arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int32),
            "m": np.array([True, False, True])}
  p = os.path.join(d, "base.safetensors")
  safe_save({k: Tensor(v) for k, v in arrays.items()}, p, metadata={"cfg": '{"a": [[1]], "q": "x\\"[{"}'})
  return open(p, "rb").read(), arrays


def with_header(text: str | bytes, data: bytes = b"\0" * 8) -> bytes:
  raw = text.encode() if isinstance(text, str) else text
  return struct.pack("<Q", len(raw)) + raw + data


def hostile(rng: random.Random) -> bytes:
  """One of the hostile header shapes, sized at random around its bound."""
  kind = rng.randrange(7)
  if kind == 0:  # nesting past the format's depth
    n = rng.randint(HEADER_DEPTH - 1, 2000)
    return with_header('{"a":{"dtype":"F32","shape":' + "[" * n + "]" * n + ',"data_offsets":[0,8]}}')
  if kind == 1:  # many values in one list
    n = rng.choice([10, MAX_TOKENS // 4, MAX_TOKENS + 1])
    return with_header('{"a":{"dtype":"F32","shape":[' + "0," * n + '0],"data_offsets":[0,0]}}', b"")
  if kind == 2:  # a name given twice
    return with_header(f'{{"a":{ENTRY},"a":{ENTRY}}}')
  if kind == 3:  # a field given twice
    return with_header('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"shape":[1]}}')
  if kind == 4:  # brackets and escaped quotes inside strings only
    s = json.dumps("\\\"" + "[" * rng.randint(0, 500) + "\\")
    return with_header(f'{{"__metadata__":{{"k":{s}}},"a":{ENTRY}}}')
  if kind == 5:  # a header length past the file, or past the format's limit
    return struct.pack("<Q", rng.choice([MAX_HEADER + 1, 1 << 63, 40])) + b"{}"
  return with_header(b"[]" * rng.randint(1, 1 << 16))  # not an object


def mutate(rng: random.Random, data: bytes) -> bytes:
  buf = bytearray(data)
  for _ in range(rng.randint(1, 4)):
    pos = rng.randint(0, len(buf))
    kind = rng.randrange(4)
    if kind == 0 and pos < len(buf):
      buf[pos] ^= 1 << rng.randrange(8)
    elif kind == 1:
      buf[pos:pos] = rng.choice([b"[", b"{", b'"', b"\\", b",", b":", rng.randbytes(3)])
    elif kind == 2:
      del buf[pos:pos + rng.randint(1, 8)]
    else:
      buf[pos:pos + 1] = rng.choice([b"[", b"]", b"{", b"}", b'"'])
  return bytes(buf)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("cases", type=int, nargs="?", default=2000, help="number of cases (default 2000)")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()
  rng = random.Random(args.seed)
  stats = {"rejected": 0, "loaded": 0, "crashes": 0, "wrong": 0, "over": 0}
  worst = 0.0
  t0 = time.perf_counter()
  with tempfile.TemporaryDirectory() as d:
    data, arrays = base_file(d)
    p = os.path.join(d, "case.safetensors")
    for i in range(args.cases):
      case = data if i % 50 == 1 else hostile(rng) if i % 3 == 0 else mutate(rng, data)
      with open(p, "wb") as f:
        f.write(case)
      tracemalloc.start()
      try:
        got = safe_load(p)
      except ValueError:
        stats["rejected"] += 1
        got = None
      except Exception:
        stats["crashes"] += 1
        if stats["crashes"] <= 3:
          traceback.print_exc()
          print("case:", case[:200].hex(), file=sys.stderr)
        got = None
      finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
      # what a load may cost: the file, a mask of its header, and ~100 bytes per value json decodes
      ratio = peak / (2 * len(case) + 100 * min(MAX_TOKENS, len(case)) + (1 << 16))
      worst = max(worst, ratio)
      stats["over"] += ratio > 1
      if got is not None:
        stats["loaded"] += 1
        if case == data and (list(got) != list(arrays) or
                             any(not np.array_equal(got[k].numpy(), v) for k, v in arrays.items())):
          stats["wrong"] += 1
  dt = time.perf_counter() - t0
  print(f"{'cases':>8} {'crashes':>8} {'wrong':>6} {'over':>5} {'rejected':>9} {'loaded':>7} {'peak/bound':>10} "
        f"{'time s':>7}")
  print(f"{args.cases:>8} {stats['crashes']:>8} {stats['wrong']:>6} {stats['over']:>5} {stats['rejected']:>9} "
        f"{stats['loaded']:>7} {worst:>10.2f} {dt:>7.1f}")
  sys.exit(1 if stats["crashes"] or stats["wrong"] or stats["over"] else 0)


if __name__ == "__main__":
  main()
