"""The trace store: opens traces with the reader, indexes them (contexts, rewrites, kernels, runs) without building
any graph, follows growing files and directories, and tells listeners what changed."""
from __future__ import annotations

import contextlib
import io
import math
import os
import shutil
import tempfile
import threading
import time
import weakref
from array import array
from itertools import groupby, islice
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator

from viz_server.nodes import NodeColumns, site_of
from vztrace.counts import TraceCounts
from vztrace.format import TraceFormatError, clip_text, exit_summary, site_problem
from vztrace.memory import MAX_EVENTS
from vztrace.memory import event as mem_event
from vztrace.reader import STALE_S, BatchMatches, BatchNodes, Item, TraceReader, unfinished, writer_alive

TRACE_SUFFIX = ".vztrace"
POLL_WINDOW = 1 << 16  # compressed bytes read per poll: about one frame, so one batch holds a frame of records
MAX_DEVICE_NAME = 32  # a mem record's device name, clipped (a memory lane is labelled with it)
MAX_EVENTS_PER_BATCH = 1000  # a bigger burst is announced as one `trace` event with reload=True
WRITER_CHECK_S = 2.0  # idle seconds after which a live trace's writer process is checked for being gone
KERNEL_RECORDS = ("opt", "beam", "source", "run")
MAX_INDEX_RECORDS = 2_000_000  # records indexed per trace (~60 bytes a node, ~100 a match: docs/architecture.md);
                               # past it the rest is left out and the trace says so
# ... and at most this many per byte of the file read, past INDEX_FLOOR: the recorder's traces take ~50 bytes a record
# compressed, while columns of equal values compress to almost nothing (a 100 KB file of 3M records took 30 s to index)
RECORDS_PER_BYTE = 1
INDEX_FLOOR = 100_000
SOURCE_KEEP_CHARS = 1 << 20  # of one source record's text kept (the API sends at most 256 KiB of one)
TEXT_BUDGET = 64 << 20  # source text kept per trace: a 431 KB file of repeated 4 MiB texts kept 160 MB
UPLOAD_MAX_COUNT = 32  # uploaded traces kept; past it (or past UPLOAD_MAX_BYTES on disk) the oldest is let go
UPLOAD_MAX_BYTES = 2 << 30

Listener = Callable[[str, dict], None]


class Events(list):
  """(event, data) pairs for listeners; past MAX_EVENTS_PER_BATCH it stops collecting and remembers it overflowed."""

  def __init__(self) -> None:
    super().__init__()
    self.overflow = False

  def append(self, item: tuple[str, dict]) -> None:
    if len(self) >= MAX_EVENTS_PER_BATCH:
      self.overflow = True
    else:
      super().append(item)


class Context:
  __slots__ = ("id", "parent", "name", "kind", "ts", "end_ts", "error", "ended", "rewrites", "opts", "beam",
               "sources", "runs", "errors", "callsites", "callsites_more", "schedule")

  def __init__(self, cid: int, parent: int | None, name: str, kind: str, ts: float | None) -> None:
    self.id, self.parent, self.name, self.kind, self.ts = cid, parent, name, kind, ts
    self.end_ts: float | None = None
    self.error: str | None = None
    self.ended = False
    self.rewrites: list[int] = []
    self.opts: list[dict] = []
    self.beam: list[dict] = []
    self.sources: list[dict] = []
    self.runs: list[dict] = []
    self.errors: list[str] = []
    self.callsites: list[dict] = []  # a kernel's: the user's lines that made its ops ({file, line, function})
    self.callsites_more = 0  # how many more the recorder left out
    self.schedule: int | None = None  # the schedule context that made what it runs (checked: _schedule_link)

  @property
  def is_kernel(self) -> bool:
    return self.kind == "kernel" or bool(self.opts or self.beam or self.sources or self.runs)


class Rewrite:
  """One graph_rewrite call; its matches are parallel arrays (pattern, before, after, dt) plus sparse errors."""
  __slots__ = ("id", "ctx", "name", "file", "line", "bottom_up", "root", "ts", "end_root", "dt", "error", "ended",
               "pat", "before", "after", "mdt", "merr", "nodes_at_end", "order", "order_at_end")

  def __init__(self, rec: dict) -> None:
    self.id: int = rec["id"]
    self.ctx: int = rec["ctx"]
    self.name: str = rec["name"]
    self.file: str | None = rec["file"]
    self.line: int | None = rec["line"]
    self.bottom_up: bool = rec["bottom_up"]
    self.root: int = rec["root"]
    self.ts = rec["ts"]
    self.end_root: int | None = None
    self.dt: float | None = None
    self.error: str | None = None
    self.ended = False
    self.pat = array("q")
    self.before = array("q")
    self.after = array("q")  # -1: the rule raised (no result)
    self.mdt = array("d")
    self.merr: dict[int, str] = {}  # step k -> error text
    self.nodes_at_end: int | None = None  # node table size at rw_end: replay names nodes only from this prefix
    # rewrites begun before this one began and before it ended: one that began in between ran inside it (a rule's
    # own graph_rewrite), which record order says exactly where timestamps on a loaded machine may not
    self.order = 0
    self.order_at_end: int | None = None

  @property
  def matches(self) -> int:
    return len(self.after)

  def step(self, k: int) -> dict:
    """Match k (1-based) as the API shows it."""
    i = k - 1
    a = self.after[i]
    dt = self.mdt[i]
    return {"k": k, "pattern": self.pat[i], "before": self.before[i], "after": None if a < 0 else a,
            "dt": None if math.isnan(dt) else dt, "error": self.merr.get(k)}


class _Window(io.RawIOBase):
  """A file seen only up to `limit` bytes, so one reader.poll() decodes a bounded amount of a big file."""

  def __init__(self, f: BinaryIO) -> None:
    super().__init__()
    self._f = f
    self.limit = 0
    self.name = getattr(f, "name", "<trace>")

  def readable(self) -> bool:
    return True

  def read(self, n: int = -1) -> bytes:
    room = self.limit - self._f.tell()
    if room <= 0:
      return b""
    return self._f.read(room if n is None or n < 0 else min(n, room))

  def tell(self) -> int:
    return self._f.tell()

  def fileno(self) -> int:
    return self._f.fileno()

  def size(self) -> int:
    return os.fstat(self._f.fileno()).st_size

  def close(self) -> None:
    self._f.close()
    super().close()


class Trace:
  """The index of one trace file. Mutated only by the store (under its lock); read by the API under the lock."""

  columns = True  # take a batch's nodes and matches as the reader's columns (False: a dict each, the bench's baseline)

  def __init__(self, tid: int, path: Path, name: str, follow: bool) -> None:
    self.id = tid
    self.path = path
    self.name = name
    self.follow = follow
    self.meta: dict | None = None
    self.nodes = NodeColumns()
    self.patterns: dict[int, dict] = {}
    self.contexts: dict[int, Context] = {}
    self.rewrites: dict[int, Rewrite] = {}
    self.kernels: dict[int, None] = {}  # ctx ids of kernel contexts, in order of appearance
    self.runs: list[dict] = []
    self.errors: list[dict] = []
    self.mem_events: list[tuple] = []  # `mem` records as vztrace.memory events (at most MAX_EVENTS), for the timeline
    self.mem_seen = 0  # mem records read (kept or not)
    self.mem_devices: list[str] = []  # the device of each of mem_events ("CPU" where a record names none)
    self.anomalies: list[str] = []  # records that broke the trace's own consistency (kept out of the index)
    self.match_count = 0
    self.counts = TraceCounts()  # contexts, kernels and runs as every surface counts them (vztrace.counts)
    self.indexed = 0  # records applied (bounded by MAX_INDEX_RECORDS)
    self.text_kept = 0  # chars of source text kept (bounded by TEXT_BUDGET)
    self.ended = False
    self.exit: dict | None = None  # how the program ended, where not cleanly (the end record's: format.exit_summary)
    self.damage: dict | None = None
    self.updated = time.monotonic()
    self.version = 0  # bumped on every batch; caches of derived data compare it
    self._final: os.stat_result | None = None
    self._final_asts: tuple[int, dict[int, Rewrite]] = (-1, {})  # (version, final_asts()) of the last answer
    f = open(path, "rb", buffering=0)
    try:
      self.inode = os.fstat(f.fileno()).st_ino
      self._win = _Window(f)
      self.reader = TraceReader(self._win)  # raises TraceFormatError if this is not a trace
    except BaseException:
      f.close()
      raise

  def final_asts(self) -> dict[int, Rewrite]:
    """Context id -> the last finished rewrite in it or its sub-contexts (its end_root is the context's final AST);
    the caller holds the store's lock while the trace is live. Kept until the next batch (a diff asks twice)."""
    if self._final_asts[0] == self.version:
      return self._final_asts[1]
    best: dict[int, Rewrite] = {}
    for rw in self.rewrites.values():
      if not rw.ended or rw.end_root is None or rw.end_root not in self.nodes:
        continue
      c, seen = self.contexts.get(rw.ctx), 0
      while c is not None and seen <= len(self.contexts):  # (a hostile trace's parents may loop)
        best[c.id] = rw
        c, seen = self.contexts.get(c.parent) if c.parent is not None else None, seen + 1
    self._final_asts = (self.version, best)
    return best

  def final_ast(self, ctx: Context) -> Rewrite | None:
    return self.final_asts().get(ctx.id)

  # ---- status
  @property
  def status(self) -> str:
    return "damaged" if self.damage else ("ended" if self.ended else "live")

  @property
  def live(self) -> bool:
    return self.damage is None and not self.ended

  def entry(self) -> dict:
    """The trace as `GET /api/traces` lists it."""
    return {"id": self.id, "name": self.name, "status": self.status, "damage": self.damage,
            "counts": {"contexts": self.counts.contexts, "rewrites": len(self.rewrites), "matches": self.match_count,
                       "nodes": len(self.nodes), "kernels": self.counts.kernels, "runs": self.counts.runs},
            "meta": self.meta, "anomalies": len(self.anomalies), "exit": self.exit}

  # ---- reading
  def pull(self, final: bool = False) -> Iterable[list[Item]]:
    """Batches of new records (a batch's nodes and matches in runs of columns). `final`: the file is finished, an
    incomplete last frame is damage."""
    if final:
      self._win.limit = 1 << 62
      yield from self._chunks(self.reader.read_to_end(columns=self.columns))
      self._note_damage()
      return
    while True:
      self._win.limit = self._win.tell() + POLL_WINDOW
      got = False
      for recs in self._chunks(self.reader.tail(columns=self.columns)):
        got = True
        yield recs
      self._note_damage()
      if self.damage is not None or (not got and self._win.tell() >= self._win.size()):
        return

  def _chunks(self, recs: Iterator[Item], size: int = 10000) -> Iterator[list[Item]]:
    """Records in lists of about `size` (a run of columns counts its rows; a batch of the reader is made as it is
    consumed: 2**20 nodes at once as dicts took ~400 MB); stops once the index refused more (MAX_INDEX_RECORDS)."""
    batch: list[Item] = []
    rows = 0
    for rec in recs:
      batch.append(rec)
      rows += 1 if type(rec) is dict else len(rec)
      if rows >= size:
        yield batch
        batch, rows = [], 0
        if self.damage is not None:
          return
    if batch:
      yield batch

  def _note_damage(self) -> None:
    r = self.reader
    if r.damaged and self.damage is None:
      self.damage = {"offset": r.stopped_at, "reason": r.reason}

  def writer_gone(self) -> bool:
    """True if the process writing this live trace ran on this host and no longer exists."""
    return writer_alive(self.meta) is False

  def unfinished_reason(self) -> str | None:
    """Why this live trace will not grow any more although it has no `end` record, or None if it may still grow."""
    alive = writer_alive(self.meta)
    if alive is False:
      return "the writing process exited without finishing the trace (no end record)"
    if alive is None and unfinished(self.path, self.meta):
      return f"unfinished: no end record, and the file has not grown for {STALE_S:.0f} s"
    return None

  def finish_unended(self, reason: str = "the writing process exited without finishing the trace (no end record)"
                     ) -> None:
    """The writer is gone without an `end` record: read what is left as a finished file and say it is cut short."""
    if self.damage is None:
      self.damage = {"offset": self._win.tell(), "reason": reason}

  def same_file(self, st: os.stat_result) -> bool:
    """Is the file now at this trace's path (stat st) still the one this trace reads (not a new one there)?"""
    if self._final is None:
      try:
        mine = os.fstat(self._win.fileno())
      except (OSError, ValueError):
        return False
      return (mine.st_ino, mine.st_dev) == (st.st_ino, st.st_dev) and mine.st_nlink > 0
    f = self._final  # a finished file is never written again: any change means a new file (inodes are reused)
    return (f.st_ino, f.st_dev, f.st_size, f.st_mtime_ns) == (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)

  def close(self) -> None:
    if self._final is None:
      try:
        self._final = os.fstat(self._win.fileno())
      except (OSError, ValueError):
        pass
    self.reader.close()
    self._win.close()

  # ---- indexing
  def apply(self, recs: list[Item], events: Events | None) -> None:
    """Index a batch of validated records (and runs of a batch's nodes and matches in columns); append (event, data)
    pairs for listeners to `events` if given."""
    kernels_touched: dict[int, None] = {}
    cap = min(MAX_INDEX_RECORDS, max(INDEX_FLOOR, RECORDS_PER_BYTE * self.reader.offset))  # (offset: bytes read)
    rows = _rows(recs)
    if rows > cap - self.indexed:
      recs = _first_rows(recs, max(cap - self.indexed, 0))
      rows = _rows(recs)
      if self.damage is None:
        self.damage = {"offset": None, "reason": f"too big for the viewer: it indexes at most {MAX_INDEX_RECORDS:,} "
                       f"records of a trace (nodes, matches, ...), and {RECORDS_PER_BYTE} per byte of its file past "
                       f"the first {INDEX_FLOOR:,}; the rest is left out"}
    self.indexed += rows
    for rec in recs:
      t = rec["t"] if type(rec) is dict else type(rec).__name__
      try:
        handler = _HANDLERS.get(t) if type(rec) is dict else _RUN_HANDLERS[type(rec)]
        if handler is not None:
          handler(self, rec, events, kernels_touched)
      except (KeyError, TypeError, ValueError, IndexError, ArithmeticError, RecursionError) as e:
        # a record inconsistent with the rest of the trace, or a value the index cannot hold (the reader bounds ints
        # and nesting; this keeps one bad record from stopping the rest)
        self._anomaly(f"{t} record: {type(e).__name__}: {str(e)[:200]}")
    if events is not None:
      for cid in kernels_touched:
        events.append(("kernel", {"trace": self.id, "ctx": cid}))
    self.version += 1
    self.updated = time.monotonic()

  def _anomaly(self, text: str) -> None:
    if len(self.anomalies) < 1000:
      self.anomalies.append(text)

  def _ctx(self, cid: int) -> Context:
    c = self.contexts.get(cid)
    if c is None:  # a record names a context that never began: show it rather than drop the record
      c = self.contexts[cid] = Context(cid, None, f"<context {cid}>", "unknown", None)
      self._anomaly(f"context {cid} used before it began")
    return c

  # handlers, one per record type
  def _on_meta(self, rec: dict, events: Any, touched: Any) -> None:
    if self.meta is None:
      self.meta = {k: v for k, v in rec.items() if k != "t"}

  def _on_node(self, rec: dict, events: Any, touched: Any) -> None:
    site = rec.get("site")
    if site is not None and (bad := site_problem(site, "node.site")) is not None:
      self._anomaly(f"node {rec['id']}: {bad}; its call site left out")
      site = None
    why = self.nodes.add(rec["id"], rec["op"], rec["dtype"], rec["arg"], rec["src"], site_of(site))
    if why is not None:
      self._anomaly(why)

  def _on_node_run(self, run: BatchNodes, events: Any, touched: Any) -> None:
    for why in self.nodes.add_run(run):
      self._anomaly(why)

  def _on_pattern(self, rec: dict, events: Any, touched: Any) -> None:
    if rec["id"] in self.patterns:
      self._anomaly(f"pattern {rec['id']} is defined twice")
      return
    self.patterns[rec["id"]] = {k: rec[k] for k in ("id", "file", "line", "src", "pat", "name")}

  def _on_ctx_begin(self, rec: dict, events: Any, touched: Any) -> None:
    cid = rec["id"]
    c = self.contexts.get(cid)
    if c is not None and c.kind != "unknown":
      self._anomaly(f"context {cid} begins twice")
      return
    new = Context(cid, rec["parent"], rec["name"], rec["kind"], rec["ts"])
    if "callsites" in rec:  # (minor version 3; checked by the reader: at most MAX_CALLSITES, each of its fields)
      new.callsites = [{"file": clip_text(s["file"]), "line": s["line"], "function": clip_text(s["function"])}
                       for s in rec["callsites"]]
      new.callsites_more = max(0, rec.get("callsites_more", 0))
    if "schedule" in rec:  # (minor version 6)
      new.schedule = self._schedule_link(new, rec["schedule"])
    if c is not None:
      new.rewrites = c.rewrites
    self.contexts[cid] = new
    self.counts.context(rec)
    if new.kind == "kernel":
      self.kernels[cid] = None
    if events is not None:
      events.append(("context", {"trace": self.id, "context": context_entry(self, new)}))

  def _schedule_link(self, c: Context, link: int) -> int | None:
    """A context's `schedule` where it names a schedule context that began before it (so links make no cycle), else
    None and an anomaly: a trace's link is never trusted."""
    s = self.contexts.get(link)
    if s is not None and s.kind == "schedule" and c.kind != "schedule" and link != c.id:
      return link
    self._anomaly(f"context {c.id} names context {link} as its schedule, which is no schedule context before it")
    return None

  def _on_ctx_end(self, rec: dict, events: Any, touched: Any) -> None:
    c = self._ctx(rec["id"])
    c.ended, c.end_ts, c.error = True, rec["ts"], rec.get("error")
    if events is not None:
      events.append(("context", {"trace": self.id, "context": context_entry(self, c)}))

  def _on_rw_begin(self, rec: dict, events: Any, touched: Any) -> None:
    if rec["id"] in self.rewrites:
      self._anomaly(f"rewrite {rec['id']} begins twice")
      return
    rw = Rewrite(rec)
    rw.order = len(self.rewrites)
    self.rewrites[rw.id] = rw
    self.counts.rewrite(rec)
    self._ctx(rw.ctx).rewrites.append(rw.id)
    if events is not None:
      events.append(("rewrite", {"trace": self.id, "ctx": rw.ctx, "rewrite": rewrite_entry(rw)}))

  def _on_match(self, rec: dict, events: Any, touched: Any) -> None:
    rw = self.rewrites.get(rec["rw"])
    if rw is None or rw.ended:
      self._anomaly(f"match for {'unknown' if rw is None else 'ended'} rewrite {rec['rw']}")
      return
    after = rec["after"]
    dt = rec["dt"]
    rw.pat.append(rec["pat"])
    rw.before.append(rec["before"])
    rw.after.append(-1 if after is None else after)
    rw.mdt.append(math.nan if dt is None else float(dt))
    err = rec.get("error")
    if err is not None:
      rw.merr[len(rw.after)] = err
    self.match_count += 1

  def _on_match_run(self, run: BatchMatches, events: Any, touched: Any) -> None:
    """A run of matches in columns: what _on_match does for each (they never raised), a rewrite at a time."""
    lo = 0
    for rid, same in groupby(run.rw):
      hi = lo + len(list(same))
      rw = self.rewrites.get(rid)
      if rw is None or rw.ended:
        for _ in range(lo, hi):
          self._anomaly(f"match for {'unknown' if rw is None else 'ended'} rewrite {rid}")
      else:
        rw.pat.fromlist(run.pat[lo:hi].tolist())
        rw.before.fromlist(run.before[lo:hi].tolist())
        rw.mdt.extend(map(float, run.dt[lo:hi]))
        rw.after.fromlist(run.after[lo:hi].tolist())  # last: `matches` counts it
        self.match_count += hi - lo
      lo = hi

  def _on_rw_end(self, rec: dict, events: Any, touched: Any) -> None:
    rw = self.rewrites.get(rec["id"])
    if rw is None or rw.ended:
      self._anomaly(f"end of {'unknown' if rw is None else 'ended'} rewrite {rec['id']}")
      return
    rw.ended, rw.end_root, rw.dt, rw.error = True, rec["root"], rec["dt"], rec.get("error")
    rw.nodes_at_end, rw.order_at_end = len(self.nodes), len(self.rewrites)
    if events is not None:
      events.append(("rewrite", {"trace": self.id, "ctx": rw.ctx, "rewrite": rewrite_entry(rw)}))

  def _on_kernel_record(self, rec: dict, events: Any, touched: dict) -> None:
    c = self._ctx(rec["ctx"])
    t = rec["t"]
    self.counts.kernel_record(t, rec)
    data = {k: v for k, v in rec.items() if k != "t"}
    if t == "opt":
      c.opts.append(data)
    elif t == "beam":
      c.beam.append(data)
    elif t == "source":
      text = data["text"]
      keep = max(0, min(len(text), SOURCE_KEEP_CHARS, TEXT_BUDGET - self.text_kept))
      if keep < len(text):  # the API says the text is cut (chars: its whole length)
        data["text"], data["chars"] = text[:keep], len(text)
      self.text_kept += keep
      c.sources.append(data)
    else:
      c.runs.append(data)
      self.runs.append(data)
      if events is not None:
        events.append(("run", {"trace": self.id, "run": run_entry(data)}))
    self.kernels[c.id] = None
    touched[c.id] = None

  def _on_error(self, rec: dict, events: Any, touched: Any) -> None:
    self.errors.append({"ctx": rec["ctx"], "text": rec["text"]})
    if rec["ctx"] is not None and rec["ctx"] in self.contexts:
      self.contexts[rec["ctx"]].errors.append(rec["text"])

  def _on_end(self, rec: dict, events: Any, touched: Any) -> None:
    self.ended = True
    if "exit" in rec:
      self.exit = exit_summary(rec["exit"])

  def _on_mem(self, rec: dict, events: Any, touched: Any) -> None:
    self.mem_seen += 1
    if len(self.mem_events) < MAX_EVENTS and (e := mem_event(rec, self.mem_seen)) is not None:
      self.mem_events.append(e)
      dev = rec.get("device")
      self.mem_devices.append(dev[:MAX_DEVICE_NAME] if type(dev) is str and dev else "CPU")


_HANDLERS: dict[str, Callable] = {
  "meta": Trace._on_meta, "node": Trace._on_node, "pattern": Trace._on_pattern, "ctx_begin": Trace._on_ctx_begin,
  "ctx_end": Trace._on_ctx_end, "rw_begin": Trace._on_rw_begin, "match": Trace._on_match,
  "rw_end": Trace._on_rw_end, "opt": Trace._on_kernel_record, "beam": Trace._on_kernel_record,
  "source": Trace._on_kernel_record, "run": Trace._on_kernel_record, "error": Trace._on_error, "end": Trace._on_end,
  "mem": Trace._on_mem,
}
_RUN_HANDLERS: dict[type, Callable] = {BatchNodes: Trace._on_node_run, BatchMatches: Trace._on_match_run}


def _rows(recs: list[Item]) -> int:
  """Records in a list of records and runs of columns."""
  return sum(1 if type(r) is dict else len(r) for r in recs)


def _first_rows(recs: list[Item], k: int) -> list[Item]:
  """The first k records (a run that k cuts becomes the records of its first rows)."""
  out: list[Item] = []
  for r in recs:
    if k <= 0:
      break
    if type(r) is dict:
      out.append(r)
      k -= 1
    elif len(r) <= k:
      out.append(r)
      k -= len(r)
    else:
      out.extend(islice(r.records(), k))
      k = 0
  return out


# ---- entries as the API shows them (shared with the socket.io events)

def rewrite_entry(rw: Rewrite) -> dict:
  changed = None if not rw.ended else (rw.end_root is not None and rw.end_root != rw.root)
  return {"id": rw.id, "name": rw.name, "file": rw.file, "line": rw.line, "bottom_up": rw.bottom_up,
          "matches": rw.matches, "changed": changed, "dt": rw.dt, "ended": rw.ended, "error": rw.error}


def shape_colors(c: Context) -> list[list] | None:
  """A kernel's shape after its last applied opt as [[size, color], ...], each axis colored by its type (None: not a
  kernel, or no opt applied). The kernel's name is its context's (the scheduler's, fixed before any opt)."""
  if not c.is_kernel:
    return None
  for o in reversed(c.opts):
    shape, colors = o.get("shape"), o.get("colors")
    if o.get("ok") and shape and colors and len(shape) == len(colors):
      return [[str(s), col] for s, col in zip(shape, colors)]
  return None


def context_entry(tr: Trace, c: Context) -> dict:
  return {"id": c.id, "parent": c.parent, "name": c.name, "kind": c.kind, "shape_colors": shape_colors(c),
          "ended": c.ended, "error": c.error, "rewrites": [rewrite_entry(tr.rewrites[r]) for r in c.rewrites],
          "callsites": c.callsites, "schedule": c.schedule}


def run_entry(r: dict) -> dict:
  return {k: r.get(k) for k in ("ctx", "kname", "min", "median", "times", "flops", "bytes", "gflops", "gbs")}


class TraceStore:
  """All served traces. A background thread (start()) follows live files and watched directories."""

  def __init__(self, poll_interval: float = 0.05, scan_interval: float = 0.2, upload_dir: str | None = None,
               upload_max_count: int = UPLOAD_MAX_COUNT, upload_max_bytes: int = UPLOAD_MAX_BYTES) -> None:
    self.lock = threading.RLock()
    self.upload_max_count, self.upload_max_bytes = upload_max_count, upload_max_bytes
    self._uploads: list[int] = []  # ids of uploaded traces, oldest first
    self.traces: dict[int, Trace] = {}
    self.listeners: list[Listener] = []
    self.poll_interval = poll_interval
    self.scan_interval = scan_interval
    self.dirs: list[Path] = []
    self._followed: dict[Path, int] = {}  # followed path -> id of the newest trace read from it
    self._rejected: dict[Path, tuple] = {}  # path -> (inode, mtime, size) of a file that is not a trace
    self._next_id = 0
    self._follow_lock = threading.Lock()
    self._upload_dir = upload_dir
    self._upload_cleanup: weakref.finalize | None = None  # removes the upload directory this store made
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None
    self._last_scan = 0.0

  # ---- adding traces
  def add_path(self, path: str | os.PathLike) -> list[Trace]:
    """Serve a file (followed while it grows) or a directory (every trace in it, now and later)."""
    p = Path(path).resolve()
    if p.is_dir():
      with self.lock:
        if p not in self.dirs:
          self.dirs.append(p)
      return self._scan_dir(p)
    if not p.is_file():
      raise FileNotFoundError(f"no such trace file or directory: {path}")
    return [self.follow(p)]

  def follow(self, path: str | os.PathLike) -> Trace:
    """Serve one trace file, following it; the same file (same inode) is served once. Raises TraceFormatError."""
    p = Path(path).resolve()
    with self._follow_lock:  # the follower thread and API requests may add the same file at once
      with self.lock:
        tid = self._followed.get(p)
        if tid is not None:
          try:
            if self.traces[tid].same_file(os.stat(p)):
              return self.traces[tid]
          except OSError:
            pass
      tr = self._open(p, p.name, follow=True)
      with self.lock:
        self._followed[p] = tr.id
      return tr

  def add_upload(self, stream: BinaryIO, filename: str) -> Trace:
    """Store an uploaded trace in the server's own directory and index it whole; the oldest uploads go past the
    count and disk caps. Raises TraceFormatError, also for a file without one intact record."""
    if self._upload_dir is None:
      self._upload_dir = tempfile.mkdtemp(prefix="tinyviz-uploads-")
      # at stop(), else when the store is collected or the interpreter exits: a store nobody stops (an app made for
      # a script or a test) left its directory and uploads in the temporary folder for good
      self._upload_cleanup = weakref.finalize(self, shutil.rmtree, self._upload_dir, True)
    fd, tmp = tempfile.mkstemp(suffix=TRACE_SUFFIX, dir=self._upload_dir)
    try:
      with os.fdopen(fd, "wb") as f:
        while chunk := stream.read(1 << 20):
          f.write(chunk)
      name = os.path.basename(filename or "") or "upload" + TRACE_SUFFIX
      tr = self._open(Path(tmp), name, follow=False, need_records=True)
    except BaseException:
      os.unlink(tmp)
      raise
    with self.lock:
      self._uploads.append(tr.id)
    self._evict_uploads()
    return tr

  def _evict_uploads(self) -> None:
    """Let the oldest uploads go while there are more than the caps allow (the newest one always stays)."""
    with self.lock:
      sizes = {tid: self.traces[tid].path.stat().st_size for tid in self._uploads if tid in self.traces}
      gone = []
      while len(self._uploads) > 1 and (len(self._uploads) > self.upload_max_count
                                        or sum(sizes.get(t, 0) for t in self._uploads) > self.upload_max_bytes):
        gone.append(self._uploads.pop(0))
    for tid in gone:
      self.remove(tid)

  def remove(self, tid: int) -> None:
    """Stop serving a trace (an upload: its file goes too); listeners get a `removed` event."""
    with self.lock:
      tr = self.traces.pop(tid, None)
      if tr is None:
        return
      tr.close()
      if tid in self._uploads:
        self._uploads.remove(tid)
    if not tr.follow:
      with contextlib.suppress(OSError):
        tr.path.unlink()
    self._emit([("removed", {"trace": tid})])

  def _open(self, path: Path, name: str, follow: bool, need_records: bool = False) -> Trace:
    tr = Trace(-1, path, name, follow)  # raises TraceFormatError before an id is spent on a file that is no trace
    with self.lock:
      tr.id = self._next_id
      self._next_id += 1
    events = Events()
    try:
      for batch in tr.pull(final=not follow):
        tr.apply(batch, events)
      if need_records and tr.reader.records == 0:
        reason = f": {tr.damage['reason']}" if tr.damage else ""
        raise TraceFormatError(f"no intact record in the file{reason}")
    except BaseException:
      tr.close()
      raise
    if not tr.live:
      tr.close()
    with self.lock:
      self.traces[tr.id] = tr
    # the new trace first, then (if not too many) what it already holds, so a client sees a live file from its start
    first = ("trace", {**tr.entry(), "reload": True} if events.overflow else tr.entry())
    self._emit([first] + ([] if events.overflow else list(events)))
    return tr

  def _scan_dir(self, d: Path) -> list[Trace]:
    out = []
    try:
      entries = sorted(d.iterdir())
    except OSError:
      return out
    for p in entries:
      if p.suffix != TRACE_SUFFIX:
        continue
      try:
        st = p.stat()
      except OSError:
        continue
      if not p.is_file():
        continue
      tr = self._check_file(p, st)
      if tr is not None:
        out.append(tr)
    return out

  def _check_file(self, p: Path, st: os.stat_result | None = None) -> Trace | None:
    """Follow the file at p if it is a trace not served yet; remember files that are not traces."""
    try:
      st = st or p.stat()
    except OSError:
      return None
    with self.lock:
      tid = self._followed.get(p)
      known = tid is not None and self.traces[tid].same_file(st)
    if known or self._rejected.get(p) == (st.st_ino, st.st_mtime_ns, st.st_size):
      return None
    try:
      return self.follow(p)
    except (TraceFormatError, OSError):
      self._rejected[p] = (st.st_ino, st.st_mtime_ns, st.st_size)
      return None
    except Exception as e:  # one file the store cannot take must not hide the files after it
      self._rejected[p] = (st.st_ino, st.st_mtime_ns, st.st_size)
      print(f"tinyviz: cannot serve {p}: {type(e).__name__}: {str(e)[:200]}", flush=True)
      return None

  # ---- lookups
  def get(self, tid: int) -> Trace | None:
    return self.traces.get(tid)

  def entries(self) -> list[dict]:
    with self.lock:
      return [tr.entry() for tr in self.traces.values()]

  # ---- following
  def start(self) -> None:
    if self._thread is None:
      self._thread = threading.Thread(target=self._run, name="tinyviz-store", daemon=True)
      self._thread.start()

  def stop(self) -> None:
    self._stop.set()
    if self._thread is not None and self._thread is not threading.current_thread():
      self._thread.join(timeout=5)
    with self.lock:
      for tr in self.traces.values():
        if tr.live:
          tr.close()
    if self._upload_cleanup is not None:
      self._upload_cleanup()

  def _run(self) -> None:
    while not self._stop.wait(self.poll_interval):
      try:
        self.poll_once()
      except Exception as e:  # keep following the other traces; the error is visible in the server log
        print(f"tinyviz: store poll failed: {type(e).__name__}: {e}", flush=True)

  def poll_once(self) -> None:
    """One round of the follower: new records of live traces, new files in watched directories."""
    with self.lock:
      live = [tr for tr in self.traces.values() if tr.live]
    for tr in live:
      self._poll_trace(tr)
    now = time.monotonic()
    if now - self._last_scan >= self.scan_interval:
      self._last_scan = now
      for d in list(self.dirs):
        self._scan_dir(d)
      with self.lock:
        followed = [p for p in self._followed if p.parent not in self.dirs]
      for p in followed:  # a file rewritten in place (a new file at the same path) is a new trace
        self._check_file(p)

  def _poll_trace(self, tr: Trace) -> None:
    events = Events()
    was = tr.status
    got = False
    try:
      for batch in tr.pull():
        with self.lock:
          tr.apply(batch, events)
        got = True
    except (TraceFormatError, OSError) as e:
      tr.damage = {"offset": None, "reason": f"read error: {e}"}
    except Exception as e:  # a bug indexing this trace must not stop the follower for the others
      tr.damage = {"offset": None, "reason": f"indexing failed: {type(e).__name__}: {str(e)[:200]}"}
    if not got and tr.live and time.monotonic() - tr.updated > WRITER_CHECK_S:
      tr.updated = time.monotonic()
      why = tr.unfinished_reason()
      if why is not None:
        with self.lock:
          try:
            for batch in tr.pull(final=True):
              tr.apply(batch, events)
          except (TraceFormatError, OSError) as e:  # e.g. an empty file: not even the header was written
            why = f"{why} ({e})"
          tr.finish_unended(why)
    if not tr.live:
      tr.close()
    if events.overflow:
      self._emit([("trace", {**tr.entry(), "reload": True})])
      return
    if got or tr.status != was:
      events.append(("trace", tr.entry()))
    self._emit(list(events))

  def _emit(self, events: list[tuple[str, dict]]) -> None:
    for name, data in events:
      for fn in list(self.listeners):
        try:
          fn(name, data)
        except Exception as e:
          print(f"tinyviz: listener failed on {name}: {type(e).__name__}: {e}", flush=True)
