"""A trace's `mem` records (buffer allocations and frees), which the store does not index: read by a reader of this
module's own, never past the bytes the store has read (so a trace the store stopped at costs no more here), and
folded into bytes in use over time (vztrace.memory) for the timeline's memory lane."""
from __future__ import annotations

import os
import weakref
from typing import Any

from viz_server.store import Trace, _Window  # (the store's view of a file up to a limit, reused)
from vztrace.format import TraceFormatError
from vztrace.memory import MAX_EVENTS, MemoryProfile, event
from vztrace.reader import TraceReader

MAX_POINTS = 20_000  # step points served; past this each of MAX_POINTS // 2 time buckets keeps its highest and last


class MemoryLog:
  """The mem records of one trace file read so far, and their profile (recomputed when records were added)."""

  def __init__(self, path: str | os.PathLike) -> None:
    self.events: list[tuple] = []
    self.seen = 0  # mem records read (kept or not)
    self.error: str | None = None
    self._profile: MemoryProfile | None = None
    try:
      self._win = _Window(open(path, "rb", buffering=0))
      self.reader: TraceReader | None = TraceReader(self._win)
    except (OSError, TraceFormatError) as e:
      self.reader, self.error = None, str(e)

  def update(self, upto: int) -> None:
    """Read the mem records of the file's first `upto` bytes not read yet."""
    if self.reader is None:
      return
    self._win.limit = upto
    try:
      for rec in self.reader.tail(columns=True):
        if type(rec) is dict and rec["t"] == "mem":
          self.seen += 1
          if len(self.events) < MAX_EVENTS and (e := event(rec, self.seen)) is not None:
            self.events.append(e)
            self._profile = None
    except (OSError, TraceFormatError) as e:  # the store reports the trace's damage; this lane keeps what it read
      self.error = str(e)

  def profile(self) -> MemoryProfile:
    if self._profile is None:
      self._profile = MemoryProfile(self.events)
    return self._profile


_logs: weakref.WeakKeyDictionary[Trace, MemoryLog] = weakref.WeakKeyDictionary()


def memory_lane(tr: Trace, t0: float | None) -> dict[str, Any]:
  """The lane for GET /timeline (call under the store's lock): step points (seconds since t0, bytes in use after
  each event), the peak and counts. `t0` None (no timed context): times are left out."""
  log = _logs.get(tr)
  if log is None:
    log = _logs[tr] = MemoryLog(tr.path)
  # the store's reader stopped at damage: this one stops there too, after the damaged frame's intact records
  log.update(1 << 62 if tr.reader.damaged else tr.reader.offset)
  prof = log.profile()
  out = prof.summary()
  base = t0 if t0 is not None else (prof.ts[0] if prof.ts else 0.0)
  ts, used = _thin(prof.ts, prof.used)
  out["t"] = [x - base for x in ts]
  out["bytes"] = used
  peak = out["peak"]
  peak["t"] = None if peak["ts"] is None else peak["ts"] - base
  del peak["ts"]
  out["truncated"] = log.seen > len(log.events) or len(ts) < len(prof.ts)
  out["error"] = log.error
  return out


def _thin(ts: list[float], used: list[int]) -> tuple[list[float], list[int]]:
  """At most MAX_POINTS points: per time bucket its highest point and its last (the step line's level after it), so
  the drawn line still reaches every local peak."""
  if len(ts) <= MAX_POINTS:
    return ts, used
  buckets = MAX_POINTS // 2
  lo, span = ts[0], (ts[-1] - ts[0]) or 1.0
  keep: list[int] = []
  i, n = 0, len(ts)
  while i < n:
    b = min(buckets - 1, int((ts[i] - lo) / span * buckets))
    j, top = i, i
    while j < n and min(buckets - 1, int((ts[j] - lo) / span * buckets)) == b:
      if used[j] > used[top]:
        top = j
      j += 1
    keep.extend((top, j - 1) if top != j - 1 else (top,))
    i = j
  return [ts[k] for k in keep], [used[k] for k in keep]
