"""Append-only trace writer: records are batched in memory and written as checksummed zlib frames."""
from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Callable

from vztrace.format import (
  FRAME_HEADER,
  FRAME_MAGIC,
  FRAME_TARGET,
  HEADER,
  LIST_BOUNDS,
  MAGIC,
  MAX_RAW_LEN,
  RECORD_LEN,
  VERSION,
  clip_lists,
  validate_record,
)

CHECK_EVERY = 64  # writes between two looks at the clock: keeps write() at one append and one compare
MAX_BATCH = 16384  # records; bounds memory and the pause of one flush
MAX_NESTED = MAX_RAW_LEN // 4  # bytes of one record inside another


def _default(o: Any) -> Any:
  """JSON fallback for values json cannot encode: numpy scalars/arrays via .item()/.tolist(), sets, else str()."""
  for conv in ("item", "tolist"):
    fn = getattr(o, conv, None)
    if callable(fn):
      try:
        return fn()
      except Exception:
        pass
  if isinstance(o, (set, frozenset)):
    return sorted(o, key=repr)
  return str(o)


def _sanitize(o: Any, depth: int = 0) -> Any:
  """A JSON-safe copy of o: non-finite floats become null, non-str keys str, other objects go through _default."""
  if depth > 64:  # only a cyclic structure gets here
    return None
  if isinstance(o, float):
    return o if math.isfinite(o) else None
  if o is None or isinstance(o, (str, int)):  # bool is an int
    return o
  if isinstance(o, dict):
    return {k if isinstance(k, str) else str(k): _sanitize(v, depth + 1) for k, v in o.items()}
  if isinstance(o, (list, tuple)):
    return [_sanitize(v, depth + 1) for v in o]
  conv = _default(o)
  return conv if isinstance(conv, str) else _sanitize(conv, depth + 1)


def _make_encoder() -> Any:
  """obj -> JSON str (compact, ASCII, NaN rejected): the C encoder called directly is ~2x faster than json.dumps (and
  taken from _json, the json package's C part, it spares a recording program importing the package)."""
  try:  # a private CPython API: use it only if it exists and behaves
    from _json import encode_basestring_ascii, make_encoder
    it = make_encoder(None, _default, encode_basestring_ascii, None, ":", ",", False, False, False)
    enc = lambda o: "".join(it(o, 0))  # noqa: E731
    if enc({"t": "x", "a": [1, 2.5, None, True, "\u00e9"]}) == '{"t":"x","a":[1,2.5,null,true,"\\u00e9"]}':
      return enc
  except Exception:
    pass
  import json
  return json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_default).encode


_encode = _make_encoder()


def encode_json(obj: Any) -> bytes:
  """Compact ASCII JSON of obj; raises ValueError for a non-finite float, RecursionError for a cycle (encode_record
  has the fallbacks)."""
  return _encode(obj).encode("ascii")


def encode_record(rec: Any) -> bytes:
  """One record as compact JSON bytes; never raises for odd values (non-finite floats are written as null)."""
  try:
    return _encode(rec).encode("ascii")
  except (ValueError, TypeError, RecursionError):
    pass
  try:
    return _encode(_sanitize(rec)).encode("ascii")
  except (ValueError, TypeError, RecursionError) as e:
    return _error_record(rec, f"trace writer could not encode it: {type(e).__name__}: {e}")


def nested_record_bytes(rec: Any) -> bytes:
  """A record to go inside another one (a batch): like encode_record (its lists clipped, format.clip_lists), and
  replaced by an error record over MAX_NESTED bytes, so the record holding it stays within the frame limit."""
  data = encode_record(clip_lists(rec) if type(rec) is dict else rec)
  if len(data) > MAX_NESTED:
    data = _error_record(rec, f"trace writer dropped a {len(data)}-byte record (over the limit)")
  return data


def _error_record(rec: Any, why: str) -> bytes:
  """An `error` record standing in for a record that cannot be written."""
  t = rec.get("t") if isinstance(rec, dict) else ("batch" if isinstance(rec, bytes) else None)
  ctx = rec.get("ctx") if isinstance(rec, dict) else None
  text = f"a {t!r} record is missing from the trace: {why}"
  return _encode({"t": "error", "ctx": ctx if type(ctx) is int else None, "text": text}).encode("ascii")


class Deferred:
  """Records made only when the writer flushes (under its lock, in whichever thread flushes): a producer appends
  rows to it cheaply, and drain() turns the rows added since the last drain into records (dicts, or encoded ones
  as bytes)."""

  def drain(self) -> list[dict | bytes]:
    raise NotImplementedError


class TraceWriter:
  """Write a trace file. write() only appends to a batch; a flush encodes the batch into frames.

  A flush happens on flush()/close(), on flush_if_due() once flush_interval seconds have passed since the last
  one, and when the batch holds MAX_BATCH records. Without a background thread write() also looks at the clock
  every CHECK_EVERY writes; with background=True a daemon thread flushes every flush_interval instead, so the
  writing thread never encodes (and zlib, which releases the GIL, runs beside it).
  The writer keeps the dicts it is given until the flush: do not mutate a record after writing it.

  `tail`: a Deferred that is still being filled, drained at the end of every flush (so flush() also writes what it
  holds). `lock` is held during a flush. `on_flush`: called after a flush that wrote something, outside the lock.
  """

  def __init__(self, path: str | os.PathLike, *, flush_interval: float = 0.1, level: int = 1,
               validate: bool = False, background: bool = False) -> None:
    self.path = Path(path)
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self.flush_interval = flush_interval
    self.level = level
    self.validate = validate  # encode and check each record at write() time (for tests; slow)
    self.frames = 0
    self.records = 0
    self.bytes = HEADER.size
    with contextlib.suppress(FileNotFoundError):  # a new inode: a reader still tailing an old trace here keeps it
      os.unlink(self.path)
    self._f = open(self.path, "wb")
    self._f.write(HEADER.pack(MAGIC, *VERSION))
    self._f.flush()
    self._pid = os.getpid()
    self._batch: list[Any] = []
    self.tail: Deferred | None = None
    self.on_flush: Callable[[], None] | None = None
    self.lock = self._lock = threading.Lock()  # between flushers (and a tail's owner); write() never takes it
    self._last = time.monotonic()
    self._closed = False
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None
    if background:
      self._thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)
      self._thread.start()

  def write(self, rec: dict) -> None:
    """Queue one record (a dict with a "t" field); with validate=True, raise TraceFormatError if it is invalid."""
    if self._closed:
      raise ValueError("write to a closed TraceWriter")
    if self.validate:
      import json
      validate_record(json.loads(encode_record(clip_lists(rec))))
    b = self._batch
    b.append(rec)
    if len(b) % CHECK_EVERY == 0 and (len(b) >= MAX_BATCH or (self._thread is None and
                                                             time.monotonic() - self._last >= self.flush_interval)):
      self.flush()

  def flush_if_due(self) -> None:
    """Flush if flush_interval has passed since the last flush (cheap; for callers at natural boundaries)."""
    if (self._batch or self.tail is not None) and time.monotonic() - self._last >= self.flush_interval:
      self.flush()

  def flush(self) -> None:
    """Encode every queued record into frames and hand them to the OS."""
    if self._flush() and self.on_flush is not None:
      self.on_flush()

  def _flush(self) -> bool:
    with self._lock:
      self._last = time.monotonic()
      b = self._batch
      n = len(b)  # records appended meanwhile (by another thread) stay queued for the next flush
      recs = b[:n]
      del b[:n]
      if self.tail is not None:
        recs.extend(self.tail.drain())
      if not recs or self._f.closed or os.getpid() != self._pid:
        return False  # (a forked child drops what it wrote: it must not interleave frames into its parent's file)
      parts: list[bytes] = []
      size = count = 0
      for rec in recs:
        if type(rec) is dict and type(t := rec.get("t")) is str and t in LIST_BOUNDS:
          rec = clip_lists(rec)  # a list longer than a reader takes (a run timed 10,000 times) is cut, not damage
        data = rec if type(rec) is bytes else encode_record(rec)
        if len(data) + RECORD_LEN.size > MAX_RAW_LEN:
          data = _error_record(rec, f"trace writer dropped a {len(data)}-byte record (over the frame limit)")
        if size + len(data) + RECORD_LEN.size > FRAME_TARGET and parts:
          self._write_frame(parts)
          parts, size = [], 0
        parts.append(RECORD_LEN.pack(len(data)))
        parts.append(data)
        size += len(data) + RECORD_LEN.size
        count += 1
      if parts:
        self._write_frame(parts)
        self._f.flush()
      self.records += count
      return True

  def _write_frame(self, parts: list[bytes]) -> None:
    raw = b"".join(parts)
    payload = zlib.compress(raw, self.level)
    self._f.write(FRAME_HEADER.pack(FRAME_MAGIC, len(payload), zlib.crc32(payload), len(raw)) + payload)
    self.frames += 1
    self.bytes += FRAME_HEADER.size + len(payload)

  def _run(self) -> None:
    while not self._stop.wait(self.flush_interval):
      try:
        self.flush_if_due()
      except Exception:  # keep the thread alive on a write error (a full disk); flushes by the caller still raise
        pass

  def close(self) -> None:
    """Flush and close the file (idempotent)."""
    if self._closed:
      return
    self._closed = True
    self._stop.set()
    if self._thread is not None and self._thread is not threading.current_thread():
      self._thread.join()
    try:
      self.flush()
    finally:
      with self._lock:
        self._f.close()

  @property
  def closed(self) -> bool:
    return self._closed

  def __enter__(self) -> TraceWriter:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()
