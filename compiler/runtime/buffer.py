"""Device buffers: a flat numpy array of one dtype, and the map from BUFFER UOps to the Buffer they name.

While a trace records, a buffer's memory taken and released are `mem` records (op "alloc" / "free", its bytes), so
the viewer's timeline can draw the bytes in use. A free happens in `__del__`, which may run inside the recorder
itself (a garbage collection there, or in the writer's thread), so it only queues (time, context, bytes, id) and the
next buffer operation of the program writes the queued frees, each with its own time."""
from __future__ import annotations

import itertools
import time
import weakref
from collections import deque

import numpy as np

from compiler.dtype import DType
from compiler.trace import recorder
from compiler.uop import Ops, UOp

_next_id = itertools.count()  # ids of BUFFER UOps, and of Buffers made without one
_freed: deque[tuple[float, int, int, int, int]] = deque()  # (ts, ctx, bytes, buffer id, recorder) not yet written


class Buffer:
  """`size` elements of `dtype` in host memory (numpy-backed; allocated on first use). `uid` names it in a trace
  (the id of its BUFFER UOp; a fresh id when None)."""
  __slots__ = ("dtype", "size", "_np", "uid", "_traced", "__weakref__")

  def __init__(self, dtype: DType, size: int, data: np.ndarray | None = None, uid: int | None = None):
    if size < 0:
      raise ValueError(f"Buffer: negative size {size}")
    self.dtype, self.size = dtype, size
    self.uid = next(_next_id) if uid is None else uid
    self._np: np.ndarray | None = None
    self._traced = 0  # id() of the recorder its allocation was written to (0: none), so its free goes to that trace
    if data is not None:
      self.copyin(data)

  @property
  def np(self) -> np.ndarray:
    """The backing 1-D numpy array (writable, C-contiguous)."""
    return self.ensure_allocated()._np

  def ensure_allocated(self) -> Buffer:
    if self._np is None:
      self._np = np.zeros(self.size, dtype=self.dtype.np)
      if recorder.RECORDER is not None:
        self._record_alloc()
    elif _freed:
      write_frees()
    return self

  def _record_alloc(self) -> None:
    write_frees()
    recorder.record("mem", op="alloc", buf=self.uid, bytes=self.nbytes, ts=time.time(), dtype=self.dtype.name,
                    size=self.size)
    self._traced = id(recorder.RECORDER)

  def __del__(self) -> None:
    if self._traced and self._np is not None:
      rec = getattr(recorder, "RECORDER", None)  # (at interpreter exit the module may be torn down already)
      if id(rec) == self._traced:  # still the trace its allocation went to (a deque's append is thread-safe)
        _freed.append((time.time(), rec.current_ctx, self.nbytes, self.uid, self._traced))

  @property
  def allocated(self) -> bool:
    return self._np is not None

  @property
  def nbytes(self) -> int:
    return self.size * self.dtype.itemsize

  def copyin(self, data: np.ndarray) -> Buffer:
    with np.errstate(all="ignore"):  # a cast out of range wraps as numpy's astype does (the caller checked ranges)
      arr = np.array(data, dtype=self.dtype.np, order="C").reshape(-1)  # always a private copy
    if arr.size != self.size:
      raise ValueError(f"Buffer.copyin: {arr.size} elements into a buffer of {self.size}")
    fresh, self._np = self._np is None, arr
    if fresh and recorder.RECORDER is not None:
      self._record_alloc()
    return self

  def numpy(self) -> np.ndarray:
    """A copy of the contents."""
    return self.np.copy()

  def __repr__(self) -> str:
    return f"<Buffer {self.dtype} x{self.size}{'' if self.allocated else ' (unallocated)'}>"


def write_frees() -> None:
  """Write the queued frees into the trace their buffer's allocation went to (while it still records)."""
  rec = recorder.RECORDER
  while _freed:
    ts, ctx, nbytes, uid, traced = _freed.popleft()
    if rec is not None and id(rec) == traced:
      recorder.record("mem", op="free", buf=uid, bytes=nbytes, ts=ts, ctx=ctx)


# BUFFER UOps carry (id, size) in their arg; the Buffer lives as long as its UOp does
_buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


def new_buffer_uop(dtype: DType, size: int, data: np.ndarray | None = None) -> UOp:
  """A fresh BUFFER UOp (1-D, `size` elements) with its Buffer."""
  uid = next(_next_id)
  u = UOp(Ops.BUFFER, dtype, (), (uid, size))
  _buffers[u] = Buffer(dtype, size, data, uid)
  return u


def buffer_of(u: UOp) -> Buffer:
  """The Buffer a BUFFER UOp names."""
  if u.op is not Ops.BUFFER:
    raise TypeError(f"buffer_of needs a BUFFER UOp, got {u.op}")
  buf = _buffers.get(u)
  if buf is None:
    buf = _buffers[u] = Buffer(u.dtype, u.arg[1], uid=u.arg[0])
  return buf
