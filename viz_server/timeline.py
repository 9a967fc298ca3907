"""Where a traced program's time went, on one axis: its contexts, the graph_rewrite passes inside them, each kernel's
LLVM compile and each kernel run, as spans in seconds since the trace's first event, and the bytes of buffers in use
(viz_server.memory) (GET /api/traces/<t>/timeline, drawn by static/timeline.js and static/memlane.js)."""
from __future__ import annotations

from typing import Any

from viz_server.memory import device_lanes, memory_lane
from viz_server.store import Trace


def _num(x: Any) -> float | None:
  """x as a float if it is a number: the reader gives a non-finite time as None, and a field missing from an older
  trace is None too."""
  return float(x) if type(x) in (int, float) else None


def timeline(tr: Trace) -> dict:
  """The spans of a trace (call under the store's lock). Rewrites come as columns: a trace can hold many."""
  starts = [ts for c in tr.contexts.values() if (ts := _num(c.ts)) is not None]
  if not starts:
    return {"t0": None, "end": 0.0, "contexts": [], "rewrites": _columns([], {}), "compiles": [], "runs": [],
            "memory": memory_lane(tr, None), "memory_devices": device_lanes(tr, None)}
  t0 = min(starts)

  def rel(ts: Any) -> float | None:
    v = _num(ts)
    return None if v is None else v - t0

  depth: dict[int, int] = {}
  contexts = []
  for c in tr.contexts.values():  # in order of appearance: a parent comes before its children
    d = depth[c.id] = depth.get(c.parent, -1) + 1 if c.parent is not None else 0
    start = rel(c.ts)
    if start is not None:
      contexts.append({"id": c.id, "parent": c.parent, "name": c.name, "kind": c.kind, "start": start,
                       "end": rel(c.end_ts) if c.ended else None, "depth": d})
  names: dict[str, int] = {}
  rws = []
  for rw in tr.rewrites.values():
    start, dt = rel(rw.ts), _num(rw.dt)
    if start is not None:  # dt: ns, None while the rewrite runs
      rws.append((rw.id, rw.ctx, names.setdefault(rw.name, len(names)), start, max(dt or 0.0, 0.0) / 1e9,
                  rw.matches))
  compiles = []
  for c in tr.contexts.values():
    for s in c.sources:  # opt_ir and asm come from the same compile as llvm_ir
      start, dur = rel(s.get("ts")), _num(s.get("compile_s"))
      if s.get("kind") == "llvm_ir" and start is not None and dur is not None:
        compiles.append({"ctx": c.id, "start": start, "dur": max(dur, 0.0)})
  runs = []
  for r in tr.runs:
    start, times = rel(r.get("ts")), r.get("times")
    if start is not None:
      dur = sum(t for t in map(_num, times) if t is not None and t > 0) if isinstance(times, list) else 0.0
      runs.append({"ctx": r.get("ctx"), "kname": r.get("kname"), "start": start, "dur": dur})
  ends = [c["end"] if c["end"] is not None else c["start"] for c in contexts]
  ends += [r[3] + r[4] for r in rws] + [x["start"] + x["dur"] for x in compiles + runs]
  memory = memory_lane(tr, t0)
  devices = device_lanes(tr, t0)
  for lane in (memory, *devices):
    ends += lane["t"][-1:]  # (in time order: the last is the latest)
  return {"t0": t0, "end": max(ends, default=0.0), "contexts": contexts, "rewrites": _columns(rws, names),
          "compiles": compiles, "runs": runs, "memory": memory, "memory_devices": devices}


def _columns(rws: list[tuple], names: dict[str, int]) -> dict:
  cols = ("id", "ctx", "name", "start", "dur", "matches")
  return {"names": list(names), **{k: [r[i] for r in rws] for i, k in enumerate(cols)}}
