"""Device buffers: a flat numpy array of one dtype, and the map from BUFFER UOps to the Buffer they name.

While a trace records, a buffer's memory taken and released are `mem` records (op "alloc" / "free", its bytes), so
the viewer's timeline can draw the bytes in use. A free happens in `__del__`, which may run inside the recorder
itself (a garbage collection there, or in the writer's thread), so it only queues (time, context, bytes, id) and the
next buffer operation of the program writes the queued frees, each with its own time.

Memory comes from a pool of released arrays: a Buffer that dies while nothing else holds its array gives the array
back, and the next Buffer of that dtype and size takes it instead of fresh pages from the OS (a 16 MB output's page
faults cost about as much as the kernel that fills it). A kernel's output that the kernel writes whole is not
zeroed first (`ensure_allocated(zero=False)`); every other first use still reads zeros."""
from __future__ import annotations

import ctypes
import itertools
import sys
import time
from collections import deque

import numpy as np

from compiler.dtype import DType
from compiler.trace import recorder
from compiler.uop import Ops, UOp

_next_id = itertools.count()  # ids of BUFFER UOps, and of Buffers made without one
_freed: deque[tuple[float, int, int, int, int]] = deque()  # (ts, ctx, bytes, buffer id, recorder) not yet written

POOL_BYTES = 256 << 20  # released arrays kept for reuse, in all
POOL_PER_KIND = 8  # ... and of one (dtype, size)
# (numpy dtype, size) -> released arrays. Only list appends and pops (atomic under the GIL): a release runs in
# __del__, which may come in any thread, inside a garbage collection, while the pool is being taken from
_pool: dict[tuple[np.dtype, int], list[np.ndarray]] = {}
_pool_bytes = [0]


def _take(dt: np.dtype, size: int) -> np.ndarray | None:
  """A released array of this dtype and size, or None (its contents are what its last Buffer left)."""
  free = _pool.get((dt, size))
  try:
    arr = free.pop() if free else None
  except IndexError:  # another thread took the last one between the test and the pop
    return None
  if arr is not None:
    _pool_bytes[0] -= arr.nbytes
  return arr


def _give(arr: np.ndarray) -> None:
  if _pool_bytes[0] + arr.nbytes > POOL_BYTES:
    return
  free = _pool.setdefault((arr.dtype, arr.size), [])
  if len(free) < POOL_PER_KIND:
    _pool_bytes[0] += arr.nbytes
    free.append(arr)


def clear_pool() -> None:
  """Release the pooled arrays to the OS."""
  _pool.clear()
  _pool_bytes[0] = 0


class Buffer:
  """`size` elements of `dtype` in host memory (numpy-backed; allocated on first use). `uid` names it in a trace
  (the id of its BUFFER UOp; a fresh id when None)."""
  __slots__ = ("dtype", "size", "_np", "addr", "uid", "_traced", "__weakref__")

  def __init__(self, dtype: DType, size: int, data: np.ndarray | None = None, uid: int | None = None):
    if size < 0:
      raise ValueError(f"Buffer: negative size {size}")
    self.dtype, self.size = dtype, size
    self.uid = next(_next_id) if uid is None else uid
    self._np: np.ndarray | None = None
    self.addr = 0  # the array's address once allocated (what a kernel call passes; read once, not per call)
    self._traced = 0  # id() of the recorder its allocation was written to (0: none), so its free goes to that trace
    if data is not None:
      self.copyin(data)

  @property
  def np(self) -> np.ndarray:
    """The backing 1-D numpy array (writable, C-contiguous)."""
    return self.ensure_allocated()._np

  def ensure_allocated(self, zero: bool = True) -> Buffer:
    """Give the buffer its memory if it has none: zeros, or (zero=False, for a kernel output written whole before
    anything reads it) whatever a pooled array holds."""
    if self._np is None:
      dt = self.dtype.np
      arr = _take(dt, self.size)
      if arr is None:
        arr = np.zeros(self.size, dtype=dt) if zero else np.empty(self.size, dtype=dt)
      elif zero:
        arr.fill(0)
      self._set(arr)
      if recorder.RECORDER is not None:
        self._record_alloc()
    elif _freed:
      write_frees()
    return self

  def _set(self, arr: np.ndarray) -> None:
    self._np, self.addr = arr, array_address(arr)

  def _record_alloc(self) -> None:
    write_frees()
    recorder.record("mem", op="alloc", buf=self.uid, bytes=self.nbytes, ts=time.time(), dtype=self.dtype.name,
                    size=self.size)
    self._traced = id(recorder.RECORDER)

  def __del__(self) -> None:
    arr = self._np
    if arr is None:
      return
    if self._traced:
      rec = getattr(recorder, "RECORDER", None)  # (at interpreter exit the module may be torn down already)
      if id(rec) == self._traced:  # still the trace its allocation went to (a deque's append is thread-safe)
        _freed.append((time.time(), rec.current_ctx, self.nbytes, self.uid, self._traced))
    # pooled only when nothing else holds the array (this slot, `arr` and getrefcount's argument): a view of it or
    # a caller that kept `.np` would see the next buffer's values
    if sys.getrefcount(arr) == 3 and arr.base is None and arr.size:
      try:
        _give(arr)
      except Exception:  # at interpreter exit the pool may be gone
        pass

  @property
  def allocated(self) -> bool:
    return self._np is not None

  @property
  def nbytes(self) -> int:
    return self.size * self.dtype.itemsize

  def copyin(self, data: np.ndarray) -> Buffer:
    src = np.asarray(data)
    if src.size != self.size:
      raise ValueError(f"Buffer.copyin: {src.size} elements into a buffer of {self.size}")
    dt = self.dtype.np
    arr = _take(dt, self.size)  # always a private copy: into a pooled array, or a new one
    if arr is None:
      arr = np.empty(self.size, dtype=dt)
    if src.dtype == dt:  # a plain copy (no cast to mind: errstate and copyto's dispatch were most of a small one)
      (arr if src.ndim == 1 else arr.reshape(src.shape))[...] = src
    else:
      with np.errstate(all="ignore"):  # a cast out of range wraps as numpy's astype does (the caller checked ranges)
        np.copyto(arr.reshape(src.shape), src, casting="unsafe")
    fresh = self._np is None
    self._set(arr)
    if fresh and recorder.RECORDER is not None:
      self._record_alloc()
    return self

  def numpy(self) -> np.ndarray:
    """A copy of the contents."""
    return self.np.copy()

  def __repr__(self) -> str:
    return f"<Buffer {self.dtype} x{self.size}{'' if self.allocated else ' (unallocated)'}>"


def array_address(a: np.ndarray) -> int:
  """The address of an array's first byte (ctypes reads a writable array's in under a microsecond; the array
  interface's dict took ~5)."""
  try:
    return ctypes.addressof(ctypes.c_char.from_buffer(a))
  except (TypeError, ValueError, BufferError):  # read-only, empty, or not one contiguous block
    return a.__array_interface__["data"][0]


def write_frees() -> None:
  """Write the queued frees into the trace their buffer's allocation went to (while it still records)."""
  rec = recorder.RECORDER
  while _freed:
    ts, ctx, nbytes, uid, traced = _freed.popleft()
    if rec is not None and id(rec) == traced:
      recorder.record("mem", op="free", buf=uid, bytes=nbytes, ts=ts, ctx=ctx)


# BUFFER UOps carry (id, size) in their arg; the Buffer lives as long as its UOp does: it is kept in the UOp's own
# __dict__ (a weak-keyed map's lookups were Python code, and a schedule run looks up every kernel's buffers)
_BUFFER_KEY = "_buffer"


def new_buffer_uop(dtype: DType, size: int, data: np.ndarray | None = None) -> UOp:
  """A fresh BUFFER UOp (1-D, `size` elements) with its Buffer."""
  uid = next(_next_id)
  u = UOp(Ops.BUFFER, dtype, (), (uid, size))
  u.__dict__[_BUFFER_KEY] = Buffer(dtype, size, data, uid)
  return u


def buffer_of(u: UOp) -> Buffer:
  """The Buffer a BUFFER UOp names."""
  buf = u.__dict__.get(_BUFFER_KEY)
  if buf is not None:
    return buf
  if u.op is not Ops.BUFFER:
    raise TypeError(f"buffer_of needs a BUFFER UOp, got {u.op}")
  buf = u.__dict__[_BUFFER_KEY] = Buffer(u.dtype, u.arg[1], uid=u.arg[0])
  return buf
