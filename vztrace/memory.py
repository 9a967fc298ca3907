"""Bytes in use over time from a trace's `mem` records (a buffer's memory taken, "alloc", or released, "free"), and
the peak: what the viewer's timeline draws and `python -m compiler.trace info` prints. Standard library only.

Records come from strangers, so the fold trusts nothing: events are taken in order of their time (a free is written
after the allocation that follows it, with its own earlier time), a free releases what its buffer's allocation took
(its own `bytes` may disagree), and an event that makes no sense (no time, negative bytes, an unknown op, a second
allocation of a live buffer, a free of a buffer not allocated) is counted in `skipped` and changes nothing."""
from __future__ import annotations

import math
from typing import Any, Iterable

_NAN = float("nan")
MAX_EVENTS = 1_000_000  # mem records kept per trace (each a tuple of 7); past this the rest are counted, not kept


def event(rec: dict, order: int) -> tuple | None:
  """A mem record as (ts, order, op, buf, bytes, ctx, (dtype, size)), or None if buf or bytes is not an int (the
  reader checks the schema; this is for callers holding records from elsewhere)."""
  ts, buf, nbytes = rec.get("ts"), rec.get("buf"), rec.get("bytes")
  if type(buf) is not int or type(nbytes) is not int:
    return None
  if type(ts) not in (int, float):
    ts = _NAN  # (no time: the reader's null for a non-finite one) skipped by the profile, and counted
  dtype, size = rec.get("dtype"), rec.get("size")
  what = (dtype if type(dtype) is str else None, size if type(size) is int else None)
  ctx = rec.get("ctx")
  return (float(ts), order, rec.get("op"), buf, nbytes, ctx if type(ctx) is int else None, what)


class MemoryProfile:
  """The step line of bytes in use: `ts[i]` (epoch s) and `used[i]` (bytes after event i), the peak, and counts."""

  def __init__(self, events: Iterable[tuple]) -> None:
    self.ts: list[float] = []
    self.used: list[int] = []
    self.peak: dict[str, Any] | None = None  # {ts, bytes, buf, buf_bytes, dtype, size, ctx}: the first time it was hit
    self.allocs = self.frees = self.skipped = 0
    live: dict[int, int] = {}  # buffer -> the bytes its allocation took
    in_use = 0
    timed = []
    for e in events:
      if math.isfinite(e[0]):
        timed.append(e)
      else:
        self.skipped += 1
    for ts, _, op, buf, nbytes, ctx, (dtype, size) in sorted(timed, key=lambda e: (e[0], e[1])):
      if op == "alloc" and nbytes >= 0 and buf not in live:
        live[buf] = nbytes
        in_use += nbytes
        self.allocs += 1
        if self.peak is None or in_use > self.peak["bytes"]:
          self.peak = {"ts": ts, "bytes": in_use, "buf": buf, "buf_bytes": nbytes, "dtype": dtype, "size": size,
                       "ctx": ctx}
      elif op == "free" and buf in live:
        in_use -= live.pop(buf)
        self.frees += 1
      else:
        self.skipped += 1
        continue
      self.ts.append(ts)
      self.used.append(in_use)
    self.live = len(live)  # buffers still allocated when the trace ends

  def summary(self) -> dict[str, Any]:
    """The counts and the peak (bytes 0 and no buffer when nothing was allocated)."""
    none = {"ts": None, "bytes": 0, "buf": None, "buf_bytes": 0, "dtype": None, "size": None, "ctx": None}
    return {"allocs": self.allocs, "frees": self.frees, "skipped": self.skipped, "live_at_end": self.live,
            "end_bytes": self.used[-1] if self.used else 0, "peak": dict(self.peak) if self.peak else none}
