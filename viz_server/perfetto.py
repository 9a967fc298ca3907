"""`export FILE --perfetto -o run.json`: a trace's timeline in the Chrome Trace Event Format (its JSON object form),
which ui.perfetto.dev and chrome://tracing open.

The spans are the viewer's timeline (viz_server/timeline.py: contexts, the graph_rewrite passes inside them, LLVM
compiles and kernel runs) and the memory lines are vztrace.memory's folds, one per device as the timeline's memory
lanes (viz_server/memory.py), each step a counter value; nothing is derived again here. The traced process is one
process whose main thread holds the contexts with their passes and compiles, nested as the program ran them; the
devices are a second process holding the kernel runs and one counter track of bytes in use per device.

Events are written as they are made (`X` complete events, `M` metadata naming every process and thread, `C` counter
events), so the file is never built in memory: cost O(spans log spans) to order the spans of a lane (timsort: O(n) on
a real trace's already ordered runs), one event per span and per memory step. Times are integer nanoseconds since the
export's zero written as microseconds (three decimals), so an importer's rounding keeps children inside parents.
Each thread's spans nest properly, whatever the trace holds: a span that overlaps another without nesting goes to
the lane's next thread (at most MAX_TRACKS), and on the last one is cut at its parent's end (counted as `clipped`).
A span tries its context's thread first: kernels compiled ahead of their runs overlap their siblings (each begins
at its optimize, up to COMPILE_AHEAD kernels early), so they take threads of their own and their passes and
compiles go with them."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterable

from viz_server.export import ExportError
from viz_server.export.collect import kept_contexts, kept_timeline
from viz_server.export.redact import Redactor, redact_path
from viz_server.memory import device_profiles
from viz_server.store import Trace, TraceStore
from viz_server.timeline import timeline
from vztrace.memory import MemoryProfile
from vztrace.term import safe

HOST_PID, DEVICE_PID = 1, 2
MAX_TRACKS = 16  # threads per lane: a span overlapping others without nesting takes the next one (hostile traces)
# a trace's times are floats of epoch seconds (~0.24 us apart at today's dates): a child's end can land a rounding
# step past its parent's, and a span can start a step before its sibling ended (tests/viewer/test_timeline.py's EPS);
# the main thread's spans are fitted within this, the runs' never (their durations are the measured ones)
ROUND_NS = 1000
MAX_NS = 1 << 53  # the latest time written (104 days: doubles of microseconds stay exact); past it a span is left out
MEMORY = "memory in use"  # a device's counter track: "memory in use on CPU" (memory_track)
CTX, COMPILE, PASS = 0, 1, 2  # span kinds of the main thread, in the order a parent comes before a child at one time


class _Writer:
  """The `traceEvents` array, one event per line, written as each event comes."""

  def __init__(self, f: IO[str]) -> None:
    self.f, self.n = f, 0
    self.named: set[tuple[int, int]] = set()

  def event(self, ev: dict) -> None:
    self.f.write(("\n" if self.n == 0 else ",\n") + json.dumps(ev, separators=(",", ":"), allow_nan=False))
    self.n += 1

  def thread(self, pid: int, tid: int, name: str, sort: int) -> None:
    """Name a thread once, before its first event."""
    if (pid, tid) not in self.named:
      self.named.add((pid, tid))
      self.event({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
      self.event({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": sort}})


def _fit(stack: list[int], s: int, e: int, tol: int, force: bool) -> tuple[int, int] | None:
  """Place the span [s, e] on a thread whose open spans end at `stack` (outermost first; spans come in order of
  start): (s, e) as placed, pushed on the stack, or None where it overlaps an open span without nesting in it (force:
  cut it at that span's end instead). Within tol a span ending past its parent's end ends there, and one starting
  before its sibling's end (and ending after it) starts there."""
  while stack and stack[-1] <= s:  # ended before this starts, so before every later span starts too
    stack.pop()
  j = len(stack)
  while j and s >= stack[j - 1] - tol and e > stack[j - 1] + tol:  # a sibling that ended a rounding step late
    s = stack[j - 1]
    j -= 1
    while j and stack[j - 1] <= s:
      j -= 1
  if j and e > stack[j - 1] + tol and not force:
    return None
  del stack[j:]
  if stack:
    e = min(e, stack[-1])
  stack.append(e)
  return s, e


def _lane(out: _Writer, spans: list[tuple[int, int, int, int]], pid: int, tid0: int, thread: str, tol: int,
          make: Any, home: Any = None) -> dict[str, int]:
  """Write a lane's spans (start ns, end ns, kind, index) as X events on its threads; make(kind, index) gives an
  event's name, cat and args. home(kind, index): the (kind, index) of the span it belongs in (its context), whose
  thread it tries first (kernels compiled ahead overlap their siblings: a kernel's passes go where it went), or None.
  Returns counts."""
  spans.sort(key=lambda x: -x[1])  # parents (the longer, at one start) first: two stable sorts
  spans.sort(key=lambda x: x[0])
  stacks: list[list[int]] = []
  track: dict[tuple[int, int], int] = {}  # (kind, index) -> the thread it went on (spans with a home only)
  clipped = 0
  for s, e, kind, i in spans:
    first = track.get(home(kind, i), 0) if home is not None else 0
    for k in (first, *range(MAX_TRACKS)) if first else range(MAX_TRACKS):
      while k >= len(stacks):
        stacks.append([])
      got = _fit(stacks[k], s, e, tol, force=k == MAX_TRACKS - 1)
      if got is not None:
        break
    assert got is not None  # (the last thread takes every span)
    if home is not None:
      track[(kind, i)] = k
    name, cat, args = make(kind, i)
    if got[1] < e - tol:
      clipped += 1
      args = {**args, "clipped_dur_us": (e - s) / 1000}
    out.thread(pid, tid0 + k, thread if k == 0 else f"{thread} (overlapping, {k})", k)
    out.event({"name": name, "cat": cat, "ph": "X", "ts": got[0] / 1000, "dur": (got[1] - got[0]) / 1000,
               "pid": pid, "tid": tid0 + k, "args": args})
  return {"spans": len(spans), "threads": len(stacks), "clipped": clipped}


class _Clock:
  """Seconds since the timeline's t0 as integer ns since the export's zero: the earliest start (a buffer is often
  allocated before the first context), so no time is negative."""

  def __init__(self, starts: Iterable[float]) -> None:
    self.zero = min((x for x in starts if math.isfinite(x) and x >= -MAX_NS / 1e9), default=0.0)
    self.zero = min(self.zero, 0.0)

  def ns(self, s: Any) -> int | None:
    """None where s is no time or out of range (a hostile trace's)."""
    if type(s) not in (int, float):
      return None
    v = (s - self.zero) * 1e9
    return round(v) if math.isfinite(v) and 0 <= v <= MAX_NS else None


def process_name(meta: dict | None, redact: Iterable[str] = ()) -> str:
  """The traced process as the trace's meta names it ("python prog.py (pid 1234 on host)"), redacted as asked."""
  red = Redactor(redact, meta)
  m = red.meta(meta) or {}
  argv = [a for a in m.get("argv") or [] if isinstance(a, str)]
  if "paths" in red.what:
    argv = [redact_path(a, red.cwd) if "/" in a else a for a in argv]
  cmd = "python " + " ".join(argv[:8]) + (" ..." if len(argv) > 8 else "") if argv else "the traced program"
  pid, host = m.get("pid"), m.get("host")
  where = ([f"pid {pid}"] if type(pid) is int else []) + ([host] if isinstance(host, str) else [])
  return f"{cmd} ({' on '.join(where)})" if where else cmd


def _spans(tl: dict, clock: _Clock) -> tuple[list, list, int]:
  """The main thread's spans and the runs' as (start ns, end ns, kind, index into the timeline's list), and how many
  were left out (no usable time); an unfinished context reaches the trace's end, as the viewer draws it."""
  main: list[tuple[int, int, int, int]] = []
  runs: list[tuple[int, int, int, int]] = []
  skipped = 0

  def span(start: Any, stop: Any, kind: int, i: int, into: list) -> None:
    nonlocal skipped
    s, e = clock.ns(start), clock.ns(stop)
    if s is None or e is None or e < s:
      skipped += 1
    else:
      into.append((s, e, kind, i))

  for i, c in enumerate(tl["contexts"]):
    span(c["start"], c["end"] if c["end"] is not None else max(tl["end"], c["start"]), CTX, i, main)
  for i, x in enumerate(tl["compiles"]):
    span(x["start"], x["start"] + x["dur"], COMPILE, i, main)
  for i, (s, d) in enumerate(zip(tl["rewrites"]["start"], tl["rewrites"]["dur"])):
    span(s, s + d, PASS, i, main)
  for i, r in enumerate(tl["runs"]):
    span(r["start"], r["start"] + r["dur"], 0, i, runs)
  return main, runs, skipped


def memory_track(device: str) -> str:
  """The name of a device's counter track of bytes in use."""
  return f"{MEMORY} on {device}"


def _processes(out: _Writer, meta: dict | None, redact: Iterable[str], devices: list[str]) -> None:
  """Name the two processes and order them: the traced program first, then its devices."""
  out.event({"name": "process_name", "ph": "M", "pid": HOST_PID, "tid": 0,
             "args": {"name": process_name(meta, redact)}})
  out.event({"name": "process_name", "ph": "M", "pid": DEVICE_PID, "tid": 0,
             "args": {"name": f"device{'s' if len(devices) > 1 else ''}: {', '.join(devices)}"}})
  for pid in (HOST_PID, DEVICE_PID):
    out.event({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
  out.named.update({(HOST_PID, 0), (DEVICE_PID, 0)})


def write(tr: Trace, f: IO[str], names: list[str] | None = None, redact: Iterable[str] = ()) -> dict[str, Any]:
  """Write the trace's timeline as a Chrome trace-event JSON object to f (call under the store's lock). names: only
  these contexts with their sub-contexts (export's --context). Returns the counts."""
  tl = timeline(tr)
  named = {c["id"]: c["name"] for c in tl["contexts"]}  # (the timeline's contexts: the names the viewer shows)
  if names:
    _, keep = kept_contexts([{"id": c.id, "name": c.name, "parent": c.parent} for c in tr.contexts.values()], names)
    tl = kept_timeline(tl, keep)
  profs = device_profiles(tr)
  devices = ["CPU"] + sorted(d for d in profs if d != "CPU")  # (the CPU's first: the process's name and order)
  first = min((p.ts[0] for p in profs.values() if p.ts), default=None)  # (each in time order: its first is earliest)
  t0 = tl["t0"] if tl["t0"] is not None else (first if first is not None else 0.0)
  rw = tl["rewrites"]
  mem_t = [] if first is None else [first - t0]
  clock = _Clock([c["start"] for c in tl["contexts"]] + rw["start"] + [x["start"] for x in tl["compiles"]]
                 + [r["start"] for r in tl["runs"]] + mem_t)
  main, runs, skipped = _spans(tl, clock)

  def kernel(ctx: Any) -> str:
    return named[ctx] if ctx in named else f"context #{ctx}"

  def main_event(kind: int, i: int) -> tuple[str, str, dict]:
    if kind == CTX:
      c = tl["contexts"][i]
      return c["name"], c["kind"], {"ctx": c["id"], "kind": c["kind"], **({} if c["end"] is not None else
                                                                          {"unfinished": True})}
    if kind == COMPILE:
      x = tl["compiles"][i]
      return f"LLVM compile {kernel(x['ctx'])}", "compile", {"ctx": x["ctx"]}
    return rw["names"][rw["name"][i]], "pass", {"rewrite": rw["id"][i], "ctx": rw["ctx"][i],
                                                "matches": rw["matches"][i]}

  def run_event(kind: int, i: int) -> tuple[str, str, dict]:
    r = tl["runs"][i]
    return r["kname"] if isinstance(r["kname"], str) else kernel(r["ctx"]), "run", {"ctx": r["ctx"]}

  f.write('{"traceEvents":[')
  out = _Writer(f)
  _processes(out, tr.meta, redact, devices)
  index = {c["id"]: i for i, c in enumerate(tl["contexts"])}

  def home(kind: int, i: int) -> tuple[int, int] | None:
    ctx = tl["contexts"][i]["parent"] if kind == CTX else (tl["compiles"][i]["ctx"] if kind == COMPILE else
                                                            rw["ctx"][i])
    j = index.get(ctx) if type(ctx) is int else None  # (a hostile trace's field may be anything)
    return None if j is None else (CTX, j)

  got_main = _lane(out, main, HOST_PID, 1, "main thread: contexts, passes, LLVM compiles", ROUND_NS, main_event,
                   home)
  del main
  got_runs = _lane(out, runs, DEVICE_PID, 1 + MAX_TRACKS, "kernel runs", 0, run_event)
  del runs
  points = 0
  for dev in devices:  # one counter track per device (a trace names at most memory.MAX_DEVICES others)
    prof, track = profs.get(dev) or MemoryProfile([]), memory_track(dev)
    for ts, used in zip(prof.ts, prof.used):
      t = clock.ns(ts - t0)
      if t is None:
        skipped += 1
        continue
      out.event({"name": track, "ph": "C", "ts": t / 1000, "pid": DEVICE_PID, "args": {"bytes": used}})
      points += 1
  peaks = {dev: (profs.get(dev) or MemoryProfile([])).summary()["peak"]["bytes"] for dev in devices}
  counts = {"events": out.n, "spans": got_main["spans"] + got_runs["spans"], "runs": got_runs["spans"],
            "memory_points": points, "skipped": skipped, "clipped": got_main["clipped"] + got_runs["clipped"],
            "threads": got_main["threads"] + got_runs["threads"], "peak_bytes": peaks["CPU"], "peaks": peaks}
  other = {"source": "tinyviz", "trace": tr.name, "status": tr.status, "damage": tr.damage,
           "zero_s": t0 + clock.zero if tl["t0"] is not None or first is not None else None, **counts}
  f.write("\n]," + json.dumps({"otherData": other}, separators=(",", ":"), allow_nan=False)[1:] + "\n")
  return {**counts, "status": tr.status, "damage": tr.damage, "ended": tr.ended}


def _load(path: str | os.PathLike) -> tuple[TraceStore, Trace]:
  """The trace at path read whole by the viewer's store (as `show` and the HTML export read it)."""
  if not Path(path).is_file():
    raise FileNotFoundError(f"no such trace file: {os.fspath(path)}" if not Path(path).exists() else
                            f"not a trace file: {os.fspath(path)}")
  store = TraceStore()
  try:
    return store, store.add_path(path)[0]
  except BaseException:
    store.stop()
    raise


def export(path: str | os.PathLike, out: str | os.PathLike, names: list[str] | None = None,
           redact: Iterable[str] = ()) -> dict[str, Any]:
  """Write the Perfetto export of the trace at path to out (whole or not at all); returns write()'s counts.
  Raises TraceFormatError/OSError for the trace, ExportError for an option, OSError("cannot write ...") for out."""
  store, tr = _load(path)
  try:
    out = Path(out)
    tmp = None
    try:  # (the trace is read: an OSError from here on is the output's)
      fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
      with os.fdopen(fd, "w", encoding="ascii") as f, store.lock:
        got = write(tr, f, names, redact)
      os.chmod(tmp, 0o644)
      os.replace(tmp, out)
      tmp = None
    except OSError as e:
      raise _OutputError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
      if tmp is not None:
        os.unlink(tmp)
    return got
  finally:
    store.stop()


class _OutputError(OSError):
  """The output file cannot be written (said as such, not as a bad trace)."""


def _holds(got: dict[str, Any]) -> str:
  return (f"{got['events']} events: {got['spans'] - got['runs']} spans of contexts, passes and compiles, "
          f"{got['runs']} kernel runs, {got['memory_points']} memory points")


def run(args: Any) -> int:
  """The `export --perfetto` command: exit 0 written, 1 written from a damaged trace (it holds the records before the
  damage), 2 not a readable trace, a bad option or an output that cannot be written."""
  what = [w.strip() for w in (args.redact or "").split(",") if w.strip()]
  try:
    got = export(args.file, args.output, args.context, what)
  except (ExportError, _OutputError) as e:
    print(safe(f"export: {e}"))
    return 2
  lines = [f"{args.output}: {_holds(got)} (Chrome trace-event JSON: open it in ui.perfetto.dev or chrome://tracing)"]
  if got["skipped"] or got["clipped"]:
    lines.append(f"left out {got['skipped']} spans or memory points without a usable time; cut {got['clipped']} "
                 f"spans that overlapped others past {MAX_TRACKS} threads")
  d = got["damage"]
  if d is not None:
    at = f" at byte {d['offset']}" if d.get("offset") is not None else ""
    lines.append(f"the trace is DAMAGED{at}: {d['reason']}; the export holds what was read before the damage")
  elif not got["ended"]:
    lines.append("the trace has no end record (still being written, or the writer died): the export holds it so far")
  print("\n".join(map(safe, lines)))  # (the lines hold the trace's texts: a stranger's file)
  return 1 if d is not None else 0
