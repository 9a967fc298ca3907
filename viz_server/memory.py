"""The timeline's memory lanes, one per device: a trace's `mem` records (buffer allocations and frees, kept by the
store as vztrace.memory events, with the device each names: CPU where none) folded into bytes in use over time, with
the peak."""
from __future__ import annotations

import weakref
from typing import Any

from viz_server.store import Trace
from vztrace.memory import MemoryProfile

MAX_DEVICES = 8  # lanes of devices other than the CPU served at most (a trace names any devices it likes)
MAX_POINTS = 20_000  # step points served; past this each of MAX_POINTS // 2 time buckets keeps its highest and last

# a trace's profiles by device and the number of events they were folded from (a live trace's list only grows)
_profiles: weakref.WeakKeyDictionary[Trace, tuple[int, dict[str, MemoryProfile]]] = weakref.WeakKeyDictionary()


def device_profiles(tr: Trace) -> dict[str, MemoryProfile]:
  """Each device's profile (the CPU's always; at most MAX_DEVICES others, the first named): one pass over events."""
  n = len(tr.mem_events)
  got = _profiles.get(tr)
  if got is None or got[0] != n:
    events: dict[str, list[tuple]] = {"CPU": []}
    for e, dev in zip(tr.mem_events[:n], tr.mem_devices[:n]):
      if dev in events or len(events) <= MAX_DEVICES:
        events.setdefault(dev, []).append(e)
    got = _profiles[tr] = (n, {dev: MemoryProfile(evs) for dev, evs in events.items()})
  return got[1]


def device_lanes(tr: Trace, t0: float | None) -> list[dict[str, Any]]:
  """The lanes of the devices other than the CPU (memory_lane's each, with its `device`), by name."""
  return [{"device": dev, **memory_lane(tr, t0, dev)} for dev in sorted(device_profiles(tr)) if dev != "CPU"]


def memory_lane(tr: Trace, t0: float | None, device: str = "CPU") -> dict[str, Any]:
  """A device's lane for GET /timeline (call under the store's lock): step points (seconds since t0, bytes in use
  after each event), the peak and counts. `t0` None (no timed context): times are left out."""
  prof = device_profiles(tr).get(device) or MemoryProfile([])
  out = prof.summary()
  base = t0 if t0 is not None else (prof.ts[0] if prof.ts else 0.0)
  ts, used = _thin(prof.ts, prof.used)
  out["t"] = [x - base for x in ts]
  out["bytes"] = used
  peak = out["peak"]
  peak["t"] = None if peak["ts"] is None else peak["ts"] - base
  del peak["ts"]
  out["truncated"] = tr.mem_seen > len(tr.mem_events) or len(ts) < len(prof.ts)
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
