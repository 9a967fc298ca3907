"""Streaming trace reader: validates frame by frame, stops at the first damage and keeps everything before it.

Two ways to read, sharing one position in the file:
  for rec in reader       a final read to the end of the file; bytes after the last complete frame are damage
  reader.poll()           live tailing: the records of frames completed since the last call; an incomplete frame
                          at the end is "not yet" (the writer is mid-write), never damage
Both give every record as a dict. `read_to_end(columns=True)` and `tail(columns=True)` give a batch's nodes and
matches as they are in the file instead, runs of them in columns (BatchNodes, BatchMatches), for a consumer that
keeps columns (the viewer's index) and need not make a dict per node.

Only TraceFormatError (a ValueError) is raised for bad contents; damage after a valid header is reported in
`damaged`/`stopped_at`/`reason` instead. Opening a path that cannot be read raises OSError as usual.

Memory: a frame's records are decoded one at a time, as they are consumed, never a frame's worth at once (a 163 KB
file of one frame of 3M records took 1.08 GB when they were). A reader holds the compressed frame being read (at most
MAX_PAYLOAD_LEN, and never more than the file has), its raw bytes where they are at most INFLATE_WHOLE (every frame
of several records the writer makes), else a window of INFLATE_WINDOW raw bytes plus the record being decoded, and
that one record decoded: O(compressed frame + max(INFLATE_WHOLE, largest record) + the largest record's values).
A consumer that stops in the middle of a frame gets the rest of it from its next call.
"""
from __future__ import annotations

import json
import json.scanner
import math
import os
import re
import socket
import time
import zlib
from array import array
from itertools import accumulate
from typing import Any, BinaryIO, Callable, Iterator

from vztrace.format import (
  FRAME_HEADER,
  FRAME_MAGIC,
  FRAME_TARGET,
  HEADER,
  MAGIC,
  MATCH_COLUMNS,
  MATCH_DT,
  MAX_BATCH_ROWS,
  MAX_DEPTH,
  MAX_INT,
  MAX_PAYLOAD_LEN,
  MAX_RAW_LEN,
  NODE_COLUMNS,
  READ_MAJORS,
  RECORD_LEN,
  VERSION,
  TraceFormatError,
  site_problem,
  unpack_column,
  validate_record,
)

READ_CHUNK = 1 << 16
MAX_READ = 1 << 20  # per read() call: a damaged header claiming a huge frame must not allocate that much per poll
INFLATE_WHOLE = FRAME_TARGET  # a frame of at most this many raw bytes is inflated at once (the fast path)
INFLATE_WINDOW = 1 << 16  # else raw bytes are inflated this many at a time (and compressed ones fed as many)


def _reject_constant(name: str) -> Any:
  raise ValueError(f"{name} is not valid JSON")


def _finite_float(s: str) -> float:
  f = float(s)
  if not math.isfinite(f):
    raise ValueError(f"number {s[:20]} is out of range")
  return f


# Strict JSON: no NaN/Infinity literals and no numbers that overflow to inf (the writer never produces them).
# The scanner called directly is ~2x faster than JSONDecoder.decode; a record must be exactly one compact value.
_scan = json.scanner.make_scanner(json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float))


# An int outside int64 has at least 19 digits: a frame without such a run of digits needs no look at its ints, and a
# record with at most MAX_DEPTH brackets none at its nesting (format.out_of_bounds walks the others).
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def _decode(s: str) -> Any:
  try:
    obj, end = _scan(s, 0)
  except StopIteration:
    raise ValueError("no JSON value at the start") from None
  if end != len(s):
    raise ValueError(f"extra data after the JSON value at char {end}")
  return obj


def _column(rec: dict, key: str, kind: str = "u32s") -> array:
  try:
    return unpack_column(rec[key], kind, None if key in ("src", "at") else MAX_BATCH_ROWS, as_array=True)
  except ValueError as e:
    raise _Damage(f"'batch' record: column {key!r}: {e}") from None


STALE_S = 60.0  # a trace with no end record whose file has not grown for this long, writer unknown, is unfinished


def writer_alive(meta: dict | None) -> bool | None:
  """Whether the process that wrote a trace (its meta record) still runs: None when this cannot be told (no meta, or
  another host or OS)."""
  if not meta or meta.get("host") != socket.gethostname() or os.name != "posix":
    return None
  pid = meta.get("pid")
  if type(pid) is not int or pid <= 0:
    return None
  if pid == os.getpid():
    return True
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except OSError:  # it exists but is not ours (EPERM), or cannot be asked
    return True
  return True


def unfinished(path: str | os.PathLike, meta: dict | None, now: float | None = None) -> bool:
  """Whether a trace without an end record is finished growing all the same: its writer is gone, or (when that
  cannot be told, e.g. a header-only file has no meta) the file has not grown for STALE_S seconds."""
  alive = writer_alive(meta)
  if alive is not None:
    return not alive
  try:
    mtime = os.stat(path).st_mtime
  except OSError:
    return True
  return (time.time() if now is None else now) - mtime >= STALE_S


COLUMN_RUN = 8192  # rows of a BatchNodes / BatchMatches at most, so a consumer takes a big batch in bounded steps


class BatchNodes:
  """A run of a batch's nodes in columns: node `first + i` is (strs[op[i]], strs[dtype[i]], strs[arg[i]]) over the
  `nsrc[i]` ids of `src` after those of the nodes before it. `strs` is the reader's string table (it only grows
  while one reader reads, so a code means the same string in every run of that reader). Node `first + i` was made by
  the user's line `sites[site[i] - 1]` (none where site[i] is 0, or site is None), sites being the reader's call-site
  table (each {file, line, function}; it only grows as strs does)."""
  __slots__ = ("first", "strs", "op", "dtype", "arg", "nsrc", "src", "site", "sites")

  def __init__(self, first: int, strs: list[str], op: array, dtype: array, arg: array, nsrc: array,
               src: array, site: array | None = None, sites: list[dict] | None = None) -> None:
    self.first, self.strs, self.op, self.dtype, self.arg, self.nsrc, self.src = first, strs, op, dtype, arg, nsrc, src
    self.site, self.sites = site, sites or []

  def __len__(self) -> int:
    return len(self.op)

  def records(self) -> Iterator[dict]:
    """The run as `node` records."""
    table, src, pos = self.strs, self.src, 0
    for i, (o, d, a, k) in enumerate(zip(self.op, self.dtype, self.arg, self.nsrc)):
      rec = {"t": "node", "id": self.first + i, "op": table[o], "dtype": table[d], "arg": table[a],
             "src": src[pos:pos + k].tolist()}
      if self.site is not None and self.site[i]:
        rec["site"] = self.sites[self.site[i] - 1]
      yield rec
      pos += k


class BatchMatches:
  """A run of a batch's matches in columns (match i is rw[i], pat[i], before[i], after[i], dt[i]; none raised)."""
  __slots__ = ("rw", "pat", "before", "after", "dt")

  def __init__(self, rw: array, pat: array, before: array, after: array, dt: array) -> None:
    self.rw, self.pat, self.before, self.after, self.dt = rw, pat, before, after, dt

  def __len__(self) -> int:
    return len(self.rw)

  def records(self) -> Iterator[dict]:
    """The run as `match` records."""
    for rw, p, b, a, dt in zip(self.rw, self.pat, self.before, self.after, self.dt):
      yield {"t": "match", "rw": rw, "pat": p, "before": b, "after": a, "dt": dt}


Item = dict | BatchNodes | BatchMatches  # what the columns=True readers yield


class _Expansion:
  """A batch's records, made one by one each time they are iterated (a batch of 2**20 nodes as dicts at once took
  ~400 MB), or as runs of columns: `n` records, `ends` whether one is an `end` record."""
  __slots__ = ("make", "n", "ends")

  def __init__(self, make: Callable[[bool], Iterator[Item]], n: int, ends: bool) -> None:
    self.make, self.n, self.ends = make, n, ends

  def __iter__(self) -> Iterator[dict]:
    return self.make(False)  # type: ignore[return-value]


def _flat(items: list, columns: bool = False) -> Iterator[Item]:
  for x in items:
    if type(x) is dict:
      yield x
    else:
      yield from x.make(columns)


def _check_positions(at: array, nrecs: int, n: int, m: int) -> None:
  """A batch's positions of its records among its n nodes and m matches: two each, never going back, within."""
  if len(at) != 2 * nrecs:
    raise _Damage(f"'batch' record: {len(at)} positions for {nrecs} records")
  for i in range(2, len(at)):
    if at[i] < at[i - 2]:
      raise _Damage("'batch' record: positions go back")
  if at and (at[-2] > n or at[-1] > m):
    raise _Damage("'batch' record: a position past the nodes or matches")


def _known_records(recs: list[dict]) -> list[bool]:
  """Whether each of a batch's other records is of a known type; damage if one is invalid or is a batch."""
  known = []
  for j, rec in enumerate(recs):
    try:
      known.append(validate_record(rec, bounds=False))  # the batch's own check covered what it holds
    except TraceFormatError as e:
      raise _Damage(f"'batch' record: record {j}: {e.reason}") from None
    if rec["t"] == "batch":
      raise _Damage(f"'batch' record: record {j} is a 'batch' record")
  return known


class _Damage(Exception):
  """Internal: the frame being read is damaged (the records before the damage were given already)."""

  def __init__(self, reason: str) -> None:
    self.reason = reason


class _Inflater:
  """A frame's payload inflated piece by piece: read(limit) gives the next at most `limit` raw bytes (b"" at the
  end), feeding zlib INFLATE_WINDOW compressed bytes at a time (a slice of the rest each call would copy it
  quadratically)."""

  def __init__(self, payload: bytes) -> None:
    self._d = zlib.decompressobj()
    self._in = memoryview(payload)
    self._at = 0  # compressed bytes fed

  def read(self, limit: int) -> bytes:
    d = self._d
    while True:
      data = d.unconsumed_tail
      if not data:
        if d.eof or self._at >= len(self._in):
          return b""
        data = self._in[self._at:self._at + INFLATE_WINDOW]
        self._at += len(data)
      try:
        out = d.decompress(data, limit)
      except zlib.error as e:
        raise _Damage(f"bad zlib data: {e}") from None
      if out:
        return out

  @property
  def eof(self) -> bool:
    return self._d.eof

  @property
  def clean_end(self) -> bool:
    """The stream ended and nothing follows it."""
    return self._d.eof and not self._d.unused_data and self._at >= len(self._in)


def _check_length(payload: bytes, raw_len: int) -> None:
  """Damage unless the payload inflates to exactly raw_len bytes (inflated a window at a time and dropped)."""
  inf, total = _Inflater(payload), 0
  while total <= raw_len and (chunk := inf.read(INFLATE_WINDOW)):
    total += len(chunk)
  if total != raw_len or not inf.clean_end:
    more = "+" if total > raw_len or not inf.eof else ""
    raise _Damage(f"frame decompresses to {total}{more} bytes, header says {raw_len}")


class TraceReader:
  """Read a trace file (a path or a binary file object). See the module docstring for iteration vs poll().

  Not thread-safe: use one reader per thread. After a live trace stops growing without an `end` record, a final
  iteration (`for _ in reader: ...`) reports a partial trailing frame as truncation."""

  def __init__(self, source: str | os.PathLike | BinaryIO) -> None:
    if isinstance(source, (str, os.PathLike)):
      self.name = os.fspath(source)
      self._f: BinaryIO = open(source, "rb", buffering=0)  # unbuffered: we buffer, and a growing file must be re-read
      self._own = True
    else:
      self.name = str(getattr(source, "name", "<stream>"))
      self._f, self._own = source, False
    self._buf = bytearray()
    self.offset = 0  # bytes consumed: the file offset of the end of the last complete frame (or of the header)
    self.version: tuple[int, int] | None = None
    self.frames = 0
    self.records = 0  # valid records returned
    self.skipped_unknown = 0
    self.complete = False  # an `end` record was seen
    self.damaged = False
    self.stopped_at: int | None = None  # byte offset of the damaged frame
    self.stopped_record: int | None = None  # index (counting all records, unknown ones too) of the first one lost
    self.reason: str | None = None
    self._seen = 0  # records decoded, unknown types included
    self._strs: list[str] = []  # the string table of compact `nodes` records
    self._sites: list[dict] = []  # the call-site table of batch records (format.py, "batch")
    self._open: Iterator[dict | _Expansion] | None = None  # the rest of the frame being read
    try:
      self._header(final=False)
    except BaseException:
      self.close()
      raise

  # ---- reading
  def __iter__(self) -> Iterator[dict]:
    """Yield every remaining record; an incomplete frame at the end of the file counts as damage (truncation)."""
    return self.read_to_end()  # type: ignore[return-value]

  def read_to_end(self, columns: bool = False) -> Iterator[Item]:
    """Every remaining record, as iteration gives them; columns: a batch's nodes and matches as runs of columns."""
    if self._f.closed:
      return
    self._header(final=True)
    while not self.damaged:
      recs = self._items(final=True)
      if recs is None:
        return
      yield from _flat(recs, columns)

  def poll(self, max_records: int | None = None) -> list[dict]:
    """The records of the frames completed since the last call (live tailing; cheap when nothing is new).

    With max_records, stop after the frame that reaches it (the rest comes with the next call)."""
    if self.damaged or self._f.closed or not self._header(final=False):
      return []
    out: list[dict] = []
    while not self.damaged and (max_records is None or len(out) < max_records):
      recs = self._items(final=False)
      if recs is None:
        break
      out.extend(_flat(recs))
    if not out and not self.damaged and self._own:
      self._check_shrunk()
    return out

  def tail(self, columns: bool = False) -> Iterator[Item]:
    """poll() made as it is consumed: a batch's records are made one by one, not all at once (columns: its nodes
    and matches as runs of columns)."""
    if self.damaged or self._f.closed or not self._header(final=False):
      return
    got = False
    while not self.damaged:
      recs = self._items(final=False)
      if recs is None:
        break
      for rec in _flat(recs, columns):
        got = True
        yield rec
    if not got and not self.damaged and self._own:
      self._check_shrunk()

  def follow(self, interval: float = 0.05, idle_timeout: float | None = None) -> Iterator[dict]:
    """Yield records as the file grows until an `end` record, damage, or idle_timeout seconds with nothing new."""
    last = time.monotonic()
    while True:
      recs = self.poll()
      yield from recs
      if self.complete or self.damaged:
        return
      now = time.monotonic()
      if recs:
        last = now
      elif idle_timeout is not None and now - last >= idle_timeout:
        return
      time.sleep(interval)

  # ---- internals
  def _fill(self, n: int) -> bool:
    """Make the buffer hold at least n bytes if the file has them now."""
    while len(self._buf) < n:
      try:
        chunk = self._f.read(min(max(n - len(self._buf), READ_CHUNK), MAX_READ))
      except OSError as e:
        raise TraceFormatError(f"read error: {e}", self.offset + len(self._buf)) from e
      if not chunk:
        return False
      self._buf += chunk
    return True

  def _header(self, final: bool) -> bool:
    """Check magic and version once they are all there; raise TraceFormatError if this is not a trace we read."""
    if self.version is not None:
      return True
    have = self._fill(HEADER.size)
    head = bytes(self._buf[:HEADER.size])
    if head[:len(MAGIC)] != MAGIC[:len(head)]:
      raise TraceFormatError(f"not a trace file: starts with {head[:8]!r}, expected {MAGIC!r}", 0)
    if not have:
      if final:
        raise TraceFormatError(f"not a trace file: too short ({len(head)} bytes; a trace header has {HEADER.size})",
                               0)
      return False
    _, major, minor = HEADER.unpack(head)
    if major not in READ_MAJORS:
      newer = "newer than this reader's" if major > VERSION[0] else "older than this reader's"
      raise TraceFormatError(f"trace format version {major}.{minor} is {newer} {VERSION[0]}.{VERSION[1]}", 8)
    self.version = (major, minor)
    del self._buf[:HEADER.size]
    self.offset = HEADER.size
    return True

  def _items(self, final: bool) -> Iterator[dict | _Expansion] | None:
    """The rest of the frame being read, else the records of the next complete frame (batches as _Expansion), made
    as they are consumed; None if there is none (yet)."""
    if self._open is None:
      self._open = self._frame(final)
    return self._open

  def _frame(self, final: bool) -> Iterator[dict | _Expansion] | None:
    """The next complete frame's records, to be decoded as they are consumed (checksum and length checked first), or
    None if there is none (yet) or it is damaged (which sets the damage fields)."""
    start = self.offset
    try:
      if not self._fill(FRAME_HEADER.size):
        got = bytes(self._buf)
        if got[:4] != FRAME_MAGIC[:len(got)]:
          raise _Damage(f"bad frame magic {got[:4]!r}")
        if final and got:
          raise _Damage(f"truncated frame header ({len(got)} of {FRAME_HEADER.size} bytes)")
        return None
      magic, plen, crc, rlen = FRAME_HEADER.unpack_from(self._buf)
      if magic != FRAME_MAGIC:
        raise _Damage(f"bad frame magic {magic!r}")
      if plen > MAX_PAYLOAD_LEN or rlen > MAX_RAW_LEN:
        raise _Damage(f"frame claims {plen} compressed / {rlen} raw bytes, over the limit")
      end = FRAME_HEADER.size + plen
      if not self._fill(end):
        if final:
          raise _Damage(f"truncated frame ({len(self._buf)} of {end} bytes)")
        return None
      payload = bytes(self._buf[FRAME_HEADER.size:end])
      if zlib.crc32(payload) != crc:
        raise _Damage("frame checksum mismatch (crc32)")
      if rlen <= INFLATE_WHOLE:
        raw, src = self._inflate(payload, rlen), None
      else:  # checked whole first (a frame's framing is right or none of it is read), then read a window at a time
        _check_length(payload, rlen)
        raw, src = bytearray(), _Inflater(payload)
    except _Damage as d:
      self._stop(start, d.reason)
      return None
    del self._buf[:end]
    self.offset += end
    return self._frame_records(start, raw, src, rlen)

  def _stop(self, start: int, reason: str) -> None:
    self.damaged = True
    self.offset = self.stopped_at = start
    self.stopped_record = self._seen  # (records decoded so far: the index of the first one lost)
    self.reason = reason

  @staticmethod
  def _inflate(payload: bytes, raw_len: int) -> bytes:
    d = zlib.decompressobj()
    try:
      raw = d.decompress(payload, raw_len + 1)  # +1: a 0 limit means unlimited; more than raw_len is damage anyway
    except zlib.error as e:
      raise _Damage(f"bad zlib data: {e}") from None
    if len(raw) != raw_len or not d.eof or d.unused_data:
      raise _Damage(f"frame decompresses to {len(raw)}{'+' if not d.eof else ''} bytes, header says {raw_len}")
    return raw

  def _frame_records(self, start: int, raw: bytes | bytearray, src: _Inflater | None, rlen: int
                     ) -> Iterator[dict | _Expansion]:
    """Decode and validate one frame's records one at a time (unknown record types are counted and dropped); at
    damage, stop where it is (the records before it were given). `raw`: the frame's raw bytes, or with `src` the
    part of them inflated so far (a window: the bytes before `pos` are dropped as it moves)."""
    pos = done = idx = 0  # pos: in raw; done: raw bytes of the frame before raw[0]
    long_ints = src is None and _LONG_DIGITS.search(raw) is not None  # (streamed: looked for record by record)
    try:
      while done + pos < rlen:
        where = f"record {idx} of frame {self.frames}"
        if done + pos + RECORD_LEN.size > rlen:
          raise _Damage(f"{where}: length cut off")
        if src is not None and len(raw) - pos < RECORD_LEN.size:
          raw, done, pos = self._refill(src, raw, pos, done, RECORD_LEN.size)
        (size,) = RECORD_LEN.unpack_from(raw, pos)
        pos += RECORD_LEN.size
        if done + pos + size > rlen:
          raise _Damage(f"{where}: length {size} overruns the frame")
        if src is not None and len(raw) - pos < size:
          raw, done, pos = self._refill(src, raw, pos, done, size)
        end = pos + size
        try:
          rec = _decode(raw[pos:end].decode("utf-8"))
        except ValueError as e:
          raise _Damage(f"{where}: bad JSON: {str(e)[:200]}") from None
        except RecursionError:  # nesting deeper than the stack allows, so far beyond MAX_DEPTH: the same damage
          raise _Damage(f"{where}: bad JSON: values nested deeper than {MAX_DEPTH}") from None
        bounds = (long_ints or (src is not None and _LONG_DIGITS.search(raw, pos, end) is not None)
                  or raw.count(b"[", pos, end) + raw.count(b"{", pos, end) > MAX_DEPTH)
        pos = end
        try:
          known = validate_record(rec, bounds)
        except TraceFormatError as e:
          raise _Damage(f"{where}: {e.reason}") from None
        if not known:
          self.skipped_unknown += 1
          item = None
        elif rec["t"] == "batch":
          try:
            item = self._expand(rec)
          except _Damage as d:
            raise _Damage(f"{where}: {d.reason}") from None
        else:
          item = rec
        self._seen += 1
        idx += 1
        if item is not None:
          self._count(item)
          yield item
    except _Damage as d:
      self._stop(start, d.reason)
    else:
      self.frames += 1
    finally:
      self._open = None

  @staticmethod
  def _refill(src: _Inflater, raw: bytes | bytearray, pos: int, done: int, need: int
              ) -> tuple[bytearray, int, int]:
    """The window moved to pos and grown to hold at least `need` bytes (and up to INFLATE_WINDOW more)."""
    win = bytearray(raw[pos:])
    while len(win) < need:
      chunk = src.read(max(INFLATE_WINDOW, need - len(win)))
      if not chunk:  # (the length was checked before: only a file changed under the reader gets here)
        raise _Damage("frame decompresses to fewer bytes than on the first pass")
      win += chunk
    return win, done + pos, 0

  def _expand(self, batch: dict) -> _Expansion:
    """The records of a batch, in their order, made as they are consumed (all or nothing: an inconsistent batch is
    damage, found before the first of its records is made)."""
    ops, dts, args, nsrc, src = (_column(batch, k) for k in NODE_COLUMNS)
    n = len(ops)
    if len(dts) != n or len(args) != n or len(nsrc) != n:
      raise _Damage("'batch' record: node columns of different lengths")
    if sum(nsrc) != len(src):
      raise _Damage("'batch' record: nsrc does not add up to src")
    strs = self._strs
    size = len(strs) + len(batch["strs"])
    if n and max(max(ops), max(dts), max(args)) >= size:
      raise _Damage(f"'batch' record: a node names a string outside the table of {size}")
    mcols = [_column(batch, k) for k in MATCH_COLUMNS] + [_column(batch, MATCH_DT, "i64s")]
    m = len(mcols[0])
    if any(len(c) != m for c in mcols):
      raise _Damage("'batch' record: match columns of different lengths")
    site, sites = self._site_column(batch, n)
    at, recs = _column(batch, "at"), batch["recs"]
    _check_positions(at, len(recs), n, m)
    first = batch["id"]
    if first + n > MAX_INT:
      raise _Damage(f"'batch' record: node ids {first}.. outside int64")
    known = _known_records(recs)
    self.skipped_unknown += known.count(False)
    table = self._strs = strs + batch["strs"]  # only now: a damaged batch leaves the table as it was
    self._sites = sites
    starts = array("Q", accumulate(nsrc, initial=0))

    def node_runs(lo: int, hi: int) -> Iterator[BatchNodes]:
      for a in range(lo, hi, COLUMN_RUN):
        b = min(a + COLUMN_RUN, hi)
        yield BatchNodes(first + a, table, ops[a:b], dts[a:b], args[a:b], nsrc[a:b], src[starts[a]:starts[b]],
                         None if site is None else site[a:b], sites)

    def match_runs(lo: int, hi: int) -> Iterator[BatchMatches]:
      for a in range(lo, hi, COLUMN_RUN):
        b = min(a + COLUMN_RUN, hi)
        yield BatchMatches(*(c[a:b] for c in mcols))

    def nodes(lo: int, hi: int) -> Iterator[dict]:
      for run in node_runs(lo, hi):
        yield from run.records()

    def matches(lo: int, hi: int) -> Iterator[dict]:
      for run in match_runs(lo, hi):
        yield from run.records()

    def expanded(columns: bool) -> Iterator[Item]:
      node_part, match_part = (node_runs, match_runs) if columns else (nodes, matches)
      ni = mi = 0
      for j, rec in enumerate(recs):
        yield from node_part(ni, at[2 * j])
        yield from match_part(mi, at[2 * j + 1])
        ni, mi = at[2 * j], at[2 * j + 1]
        if known[j]:
          yield rec
      yield from node_part(ni, n)
      yield from match_part(mi, m)
    ends = any(k and rec["t"] == "end" for k, rec in zip(known, recs))
    return _Expansion(expanded, n + m + sum(known), ends)

  def _site_column(self, batch: dict, n: int) -> tuple[array | None, list[dict]]:
    """A batch's call sites: its `site` column (None where it has none) and the call-site table with its `sites`
    appended (kept as the reader's only once the whole batch is found sound: _expand)."""
    new = batch.get("sites", [])
    for i, s in enumerate(new):
      if (why := site_problem(s, f"batch.sites[{i}]")) is not None:
        raise _Damage(f"'batch' record: {why}")
    table = self._sites + [{"file": s["file"], "line": s["line"], "function": s["function"]} for s in new] if new \
      else self._sites
    if "site" not in batch:
      return None, table
    col = _column(batch, "site")
    if len(col) != n:
      raise _Damage("'batch' record: site column of another length than the node columns")
    if n and max(col) > len(table):
      raise _Damage(f"'batch' record: a node names a call site outside the table of {len(table)}")
    return col, table

  def _count(self, item: dict | _Expansion) -> None:
    if type(item) is dict:
      self.records += 1
      self.complete = self.complete or item["t"] == "end"
    else:
      self.records += item.n  # type: ignore[union-attr]
      self.complete = self.complete or item.ends  # type: ignore[union-attr]

  def _check_shrunk(self) -> None:
    try:
      size = os.fstat(self._f.fileno()).st_size
    except (OSError, AttributeError, ValueError):
      return
    if size < self.offset + len(self._buf):
      self.damaged, self.stopped_at, self.reason = True, self.offset, "the file shrank while being read (rewritten?)"
      self.stopped_record = self._seen

  def close(self) -> None:
    if self._own:
      self._f.close()

  def __enter__(self) -> TraceReader:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()
