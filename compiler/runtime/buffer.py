"""Device buffers: a flat numpy array of one dtype, and the map from BUFFER UOps to the Buffer they name.

While a trace records, a buffer's memory taken and released are `mem` records (op "alloc" / "free", its bytes), so
the viewer's timeline can draw the bytes in use. A free happens in `__del__`, which may run inside the recorder
itself (a garbage collection there, or in the writer's thread), so it only queues (time, context, bytes, id) and the
next buffer operation of the program writes the queued frees, each with its own time.

Memory comes from a pool of released arrays: a Buffer that dies while nothing else holds its array gives the array
back, and the next Buffer of that dtype and size takes it instead of fresh pages from the OS (a 16 MB output's page
faults cost about as much as the kernel that fills it). A kernel's output that the kernel writes whole is not
zeroed first (`ensure_allocated(zero=False)`); every other first use still reads zeros.

A buffer the memory planner placed (`place`) is a view of its arena's bytes (tinygrad's `base` and `offset`): its bytes
are the arena's, counted, recorded and pooled once there, and the arena lives while any of its views does. Such a
buffer that is about to hand out its memory (`numpy()`) or be written while a caller holds its array first moves to
memory of its own, as a borrowed array does.

No copies out or in where none is needed: `numpy()` is a read-only view of the buffer's memory, and `copyin(share=True)`
(Tensor.from_numpy) keeps a caller's array as the buffer's memory when a kernel can read it (its dtype, C-contiguous,
aligned). Memory someone else reads is never written: before a kernel writes a buffer (compiler.realize, TinyJit's
replay), `prepare_write` moves a buffer whose memory is exposed (a view handed out, a caller's array) to memory of its
own, and the pool gives an array to a new buffer only once no view of it is left.

How much the pool keeps is sized from what the program needs, not a constant: run_schedule reports the arrays each
schedule took fresh (after the memory planner, compiler/runtime/memory.py, shared what it could), and the pool keeps,
of one (dtype, size), up to the most one schedule took (at least `POOL_PER_KIND`), and in all the bytes of the most
arrays of each kind one of the last `POOL_SCHEDULES` distinct schedules took, summed over the kinds (at least
`POOL_BYTES`): what the program's schedules take between them, not the biggest one's alone, so a process that
alternates programs (a training step and an eval, the bench's programs side by side) keeps each one's memory and the
next run of every schedule finds all of it here instead of faulting fresh pages in. `POOL_MAX_FRACTION` of the
machine's memory caps it; a full pool releases the arrays given back longest ago to keep the one just released
(`_evict`). The bytes held by live buffers and their peak are counted (`memory_in_use`, `memory_peak`: DEBUG=2 prints
them)."""
from __future__ import annotations

import ctypes
import itertools
import os
import sys
import threading
import time
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from compiler.device import note_elsewhere
from compiler.dtype import DType
from compiler.trace import recorder
from compiler.uop import _UCACHE, Ops, UOp, cons_key

_next_id = itertools.count()  # ids of BUFFER UOps, and of Buffers made without one
# (ts, ctx, bytes, buffer id, recorder, device) not yet written
_freed: deque[tuple[float, int, int, int, int, str]] = deque()

POOL_BYTES = 256 << 20  # released arrays kept for reuse, in all, at least (more when a schedule needs more)
POOL_PER_KIND = 8  # ... and of one (dtype, size), at least
POOL_MAX_FRACTION = 0.25  # ... and at most this part of the machine's memory, whatever the program needs
# arrays per (numpy dtype, size): the most one schedule took fresh; bytes: the recent schedules' needs (below)
_need_bytes = [0]
POOL_SCHEDULES = 32  # ... the bytes summed over the needs of this many schedules that ran last (distinct ones)
_recent: OrderedDict[frozenset[tuple[np.dtype, int, int]], None] = OrderedDict()
_need_kind: dict[tuple[np.dtype, int], int] = {}
_pool_cap: list[int] = []  # POOL_MAX_FRACTION of the machine's memory, read once
# bytes held by live buffers, and the most held at once since reset_peak. A release runs in __del__ (any thread, or a
# garbage collection in the middle of `+=`), so it only appends its bytes here and the next allocation folds them in
_in_use = [0, 0]
_released: deque[int] = deque()
# (numpy dtype, size) -> released arrays. A release runs in __del__, which may come in any thread or inside a
# garbage collection while the pool is being taken from (the same thread: the lock is reentrant)
_pool: dict[tuple[np.dtype, int], list[np.ndarray]] = {}
_pool_bytes = [0]
_gives = itertools.count()
_given: dict[tuple[np.dtype, int], int] = {}  # kind -> the count of the _give that last gave one back
_POOL_LOCK = threading.RLock()


def _take(dt: np.dtype, size: int) -> np.ndarray | None:
  """A released array of this dtype and size that nothing else holds now, or None (its contents are what its last
  Buffer left). A pooled array may still be held by views handed out of its Buffer (`Buffer.numpy`): it is taken
  only once they are gone, so a later buffer never writes memory a caller still reads."""
  free = _pool.get((dt, size))
  if not free:
    return None
  with _POOL_LOCK:
    for i in range(len(free) - 1, -1, -1):  # (appends from a __del__ meanwhile leave lower indices in place)
      arr = free[i]
      if sys.getrefcount(arr) <= 3:  # the pool's list, `arr`, getrefcount's argument
        del free[i]
        _pool_bytes[0] -= arr.nbytes
        return arr
  return None


def _give(arr: np.ndarray) -> None:
  """Keep an array that owns its memory for reuse (views of it may still be alive: _take waits for them). A full
  kind first drops the arrays a caller still holds (kept, they would only stop free ones from being pooled)."""
  if arr.base is not None or not arr.size:
    return
  with _POOL_LOCK:
    kind = (arr.dtype, arr.size)
    free = _pool.setdefault(kind, [])
    per_kind, limit = max(POOL_PER_KIND, _need_kind.get(kind, 0)), pool_limit()
    if len(free) >= per_kind or _pool_bytes[0] + arr.nbytes > limit:
      for i in range(len(free) - 1, -1, -1):
        if sys.getrefcount(free[i]) > 2:  # (the list, getrefcount's argument)
          _pool_bytes[0] -= free.pop(i).nbytes
    if len(free) < per_kind and _evict(kind, _pool_bytes[0] + arr.nbytes - limit) <= 0:
      _pool_bytes[0] += arr.nbytes
      free.append(arr)
    _given[kind] = next(_gives)  # (when each kind was last given back: the oldest are evicted first)


def _evict(keep: tuple[np.dtype, int], nbytes: int) -> int:
  """Release at least nbytes of pooled arrays to the OS, of the kinds given back longest ago (not `keep`'s); the
  bytes still missing (<= 0: done). A full pool makes room for the array just released rather than refuse it, so a
  program's next call finds what its last one gave back, not what another program left long ago (lock held)."""
  if nbytes <= 0 or nbytes > _pool_bytes[0] - sum(a.nbytes for a in _pool.get(keep, ())):
    return nbytes  # (nothing to release, or not enough of other kinds: keep them all and refuse the newcomer)
  for kind in sorted(_pool, key=lambda kd: _given.get(kd, -1)):
    free = _pool[kind]
    while free and nbytes > 0 and kind != keep:
      got = free.pop(0).nbytes
      _pool_bytes[0] -= got
      nbytes -= got
  return nbytes


def _machine_bytes() -> int:
  """The machine's physical memory (0 where the OS does not say)."""
  try:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError, AttributeError):
    return 0


def pool_limit() -> int:
  """The bytes the pool keeps at most: the most arrays of each kind one of the last POOL_SCHEDULES schedules took
  fresh, in bytes, summed over the kinds (at least POOL_BYTES), capped at POOL_MAX_FRACTION of the machine's memory."""
  if not _pool_cap:
    _pool_cap.append(int(_machine_bytes() * POOL_MAX_FRACTION) or POOL_BYTES)
  return min(_pool_cap[0], max(POOL_BYTES, _need_bytes[0]))


def note_schedule_need(kinds: dict[tuple[DType, int], int]) -> None:
  """A schedule took fresh memory for `kinds[(dtype, size)]` arrays of each kind: the pool keeps that much from now
  on (each kind's high-water mark; in bytes, with the needs of the other schedules that ran lately), so the next run
  of the schedule takes all of it from the pool, as does the next run of another schedule that took other kinds. A
  schedule that ran before moves to the newest (no sums again)."""
  sig = frozenset((_np_dtype(dt), size, n) for (dt, size), n in kinds.items())
  with _POOL_LOCK:
    for dt, size, n in sig:
      if n > _need_kind.get((dt, size), 0):
        _need_kind[(dt, size)] = n
    if sig in _recent:
      _recent.move_to_end(sig)
      return
    _recent[sig] = None
    if len(_recent) > POOL_SCHEDULES:
      _recent.popitem(last=False)
    most: dict[tuple[np.dtype, int], int] = {}
    for s in _recent:
      for dt, size, n in s:
        most[(dt, size)] = max(n, most.get((dt, size), 0))
    _need_bytes[0] = sum(n * size * dt.itemsize for (dt, size), n in most.items())


def _note_alloc(nbytes: int) -> None:
  """A buffer took nbytes: count them (after the releases queued since) and raise the peak."""
  used = _in_use[0]
  while _released:
    used -= _released.popleft()
  used += nbytes
  _in_use[0] = used
  if used > _in_use[1]:
    _in_use[1] = used


def memory_in_use() -> int:
  """Bytes held by live buffers now (their arrays; the pool's are not counted)."""
  _note_alloc(0)
  return _in_use[0]


def memory_peak() -> int:
  """The most bytes live buffers held at once since the last reset_peak."""
  return _in_use[1]


def reset_peak() -> None:
  """Start the peak again from the bytes in use now."""
  _in_use[1] = memory_in_use()


_NP_DTYPES: dict[DType, np.dtype] = {}  # DType -> numpy's (DType.np makes a numpy dtype each time: 0.5 us)


def _np_dtype(dt: DType) -> np.dtype:
  got = _NP_DTYPES.get(dt)
  if got is None:
    got = _NP_DTYPES[dt] = dt.np
  return got


def arena_size(nbytes: int) -> int:
  """The bytes to make a memory planner's arena of at least nbytes with: those of the smallest released byte array
  of nbytes up to twice as many, else nbytes. The schedules of one training step plan arenas of different sizes:
  the next one runs in the array the last one left instead of each keeping its own in the pool."""
  best = nbytes
  u8 = np.dtype(np.uint8)
  if _pool.get((u8, nbytes)):
    return nbytes
  with _POOL_LOCK:
    for (dt, size), free in list(_pool.items()):
      if free and dt == u8 and nbytes < size < 2 * nbytes and (best == nbytes or size < best):
        best = size
  return best


# numpy advises the kernel to back an array of 4 MB or more (its `1 << 22`) with transparent huge pages
# (madvise(MADV_HUGEPAGE), where THP is "madvise"), so a new buffer's first touch faults 2 MB at a time. In a VM whose
# guest hands free memory back to the host (Firecracker's free page reporting, 8 MB blocks) such a page is new to the
# host as well: ~10 ms a 2 MB fault, against ~2.4 us a 4 KB one (1.2 ms for 2 MB); MNIST step's first call spent 0.9-1.5
# s of system time in 143 of them, and whether the memory had been reported yet made its warm first call bimodal.
# Buffers are made without the advice (the kernel's default stays: THP "always" still backs them with huge pages);
# a repeat call runs in pooled arrays, touched already. `NUMPY_MADVISE_HUGEPAGE` set in the environment (numpy's own
# switch, read at its import) is left to decide.
_HUGE_BYTES = 1 << 22
_madvise_lock = threading.Lock()


def _madvise_switch() -> Any:
  """numpy's setter of its huge page advice (returns the old setting), or None: numpy's own env switch is set, or
  this numpy has none."""
  if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
    return None
  core = getattr(np, "_core", None) or getattr(np, "core", None)
  return getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)


_set_madvise = _madvise_switch()


def _new_array(dt: np.dtype, size: int, zero: bool) -> np.ndarray:
  """A new array of `size` elements (zeros, or whatever the OS gives: zero=False), made without numpy's huge page
  advice (above). Neither touches the memory: a big one's pages are faulted in at the first write."""
  if _set_madvise is None or size * dt.itemsize < _HUGE_BYTES:
    return np.zeros(size, dtype=dt) if zero else np.empty(size, dtype=dt)
  with _madvise_lock:  # (the advice is numpy's global: two threads' switches must not interleave)
    prev = _set_madvise(False)
    try:
      return np.zeros(size, dtype=dt) if zero else np.empty(size, dtype=dt)
    finally:
      _set_madvise(prev)


def clear_pool() -> None:
  """Release the pooled arrays to the OS, and forget what the schedules so far needed (the pool's size starts over)."""
  _pool.clear()
  _given.clear()
  _pool_bytes[0] = 0
  _need_bytes[0] = 0
  _need_kind.clear()
  _recent.clear()


class Buffer:
  """`size` elements of `dtype` in host memory (numpy-backed; allocated on first use), or on another `device`
  ("CL": memory of the OpenCL device, `dev_mem`, read back only by numpy/np/copyout). `uid` names it in a trace
  (the id of its BUFFER UOp; a fresh id when None)."""
  __slots__ = ("dtype", "size", "_np", "addr", "uid", "_traced", "_base", "offset", "device", "dev_mem",
               "__weakref__")

  def __init__(self, dtype: DType, size: int, data: np.ndarray | None = None, uid: int | None = None,
               device: str = "CPU"):
    if size < 0:
      raise ValueError(f"Buffer: negative size {size}")
    self.dtype, self.size, self.device = dtype, size, device
    self.dev_mem = None  # a device buffer's memory there (None: on the CPU, or not allocated yet)
    self.uid = next(_next_id) if uid is None else uid
    self._np: np.ndarray | None = None
    self.addr = 0  # the array's address once allocated (what a kernel call passes; read once, not per call)
    self._traced = 0  # id() of the recorder its allocation was written to (0: none), so its free goes to that trace
    self._base: Buffer | None = None  # the arena it is a view of (the memory planner's), at byte `offset`
    self.offset = 0
    if data is not None:
      self.copyin(data)

  @classmethod
  def borrow(cls, dtype: DType, arr: np.ndarray, addr: int = 0) -> Buffer:
    """`Buffer(dtype, arr.size).copyin(arr, share=True)` for an array known to pass can_share for dtype.np, in
    fewer steps (a TinyJit replay makes one for every numpy array argument, every call); `addr`: arr's address
    when the caller knows it (reading it takes a microsecond)."""
    b = cls(dtype, arr.size)
    view = arr.reshape(-1)  # (a view: the caller's memory, never pooled, moved before a kernel writes it)
    if addr:
      b._np, b.addr = view, addr
      _note_alloc(b.nbytes)
    else:
      b._set(view)
    if recorder.RECORDER is not None:
      b._record_alloc()
    return b

  @property
  def base(self) -> Buffer | None:
    """The arena Buffer this one is a view of (tinygrad's `Buffer.base`), or None: memory of its own."""
    return self._base

  def place(self, base: Buffer, offset: int) -> None:
    """Make this unallocated buffer a view of `base`'s bytes from `offset` (the memory planner's arena): its memory is
    taken when it is first used, and the arena lives as long as any of its views."""
    if self._np is not None or self.device != "CPU" or offset < 0 or offset + self.nbytes > base.nbytes or \
        offset % self.dtype.itemsize:
      raise ValueError(f"Buffer.place: {self.nbytes} bytes of {self.dtype} at offset {offset} of {base.nbytes} "
                       f"({'allocated' if self._np is not None else 'unallocated'})")
    self._base, self.offset = base, offset

  @property
  def np(self) -> np.ndarray:
    """The backing 1-D numpy array (C-contiguous; a borrowed one, copyin share, is the caller's memory: not to be
    written). Ask again after a kernel ran: one that writes the buffer while this array is still held elsewhere
    moves the buffer to other memory (prepare_write). A device buffer's: a copy of its contents (copyout)."""
    if self.device != "CPU":
      return self.copyout()
    return self.ensure_allocated()._np

  def ensure_allocated(self, zero: bool = True) -> Buffer:
    """Give the buffer its memory if it has none: zeros, or (zero=False, for a kernel output written whole before
    anything reads it) whatever a pooled array holds."""
    if self.device != "CPU":
      if self.dev_mem is None:
        self.dev_mem = _device_runtime(self.device).alloc(self.nbytes, zero)
        if recorder.RECORDER is not None:
          self._record_alloc()
      return self
    if self._np is None and self._base is not None:  # (its bytes are the arena's: counted and recorded once, there)
      dt = _np_dtype(self.dtype)
      arr = self._base.ensure_allocated(zero=False)._np[self.offset:self.offset + self.nbytes].view(dt)
      if zero:
        arr.fill(0)
      self._np, self.addr = arr, array_address(arr)
    elif self._np is None:
      dt = _np_dtype(self.dtype)
      arr = _take(dt, self.size)
      if arr is None:
        arr = _new_array(dt, self.size, zero)
      elif zero:
        arr.fill(0)
      self._set(arr)
      if recorder.RECORDER is not None:
        self._record_alloc()
    elif _freed:
      write_frees()
    return self

  def _set(self, arr: np.ndarray) -> None:
    if self._np is None:
      _note_alloc(self.nbytes)
    self._np, self.addr = arr, array_address(arr)

  def _record_alloc(self) -> None:
    write_frees()
    extra = {} if self.device == "CPU" else {"device": self.device}  # (a CPU buffer's record as it always was)
    recorder.record("mem", op="alloc", buf=self.uid, bytes=self.nbytes, ts=time.time(), dtype=self.dtype.name,
                    size=self.size, **extra)
    self._traced = id(recorder.RECORDER)

  def __del__(self) -> None:
    if self.dev_mem is not None:  # (the device's memory goes with its handle; only the trace hears of it)
      if self._traced and id(rec := getattr(recorder, "RECORDER", None)) == self._traced:
        _freed.append((time.time(), rec.current_ctx, self.nbytes, self.uid, self._traced, self.device))
      return
    arr = self._np
    if arr is None or self._base is not None:  # (an arena's view: the arena releases the bytes once all are gone)
      return
    try:
      _released.append(self.size * self.dtype.itemsize)  # (a deque's append is thread-safe)
    except Exception:  # at interpreter exit the module may be torn down already
      pass
    if self._traced:
      rec = getattr(recorder, "RECORDER", None)  # (at interpreter exit the module may be torn down already)
      if id(rec) == self._traced:  # still the trace its allocation went to (a deque's append is thread-safe)
        _freed.append((time.time(), rec.current_ctx, self.nbytes, self.uid, self._traced, "CPU"))
    # pooled even while a view handed out (`numpy`) or a caller that kept `.np` still holds it: _take gives it to
    # another buffer only once they are gone (an array borrowed from a caller is not ours to pool)
    if arr.base is None:
      try:
        _give(arr)
      except Exception:  # at interpreter exit the pool may be gone
        pass

  @property
  def allocated(self) -> bool:
    return self._np is not None or self.dev_mem is not None

  def copy_from(self, src: Buffer) -> None:
    """Take src's contents (same dtype and size), across devices: a COPY step of a schedule."""
    if self.device == "CPU":
      dst = self.ensure_allocated(zero=False)._np
      if src.device == "CPU":
        dst[...] = src.np
      else:
        _device_runtime(src.device).copy_out(dst, src.ensure_allocated().dev_mem)
    elif src.device == "CPU":
      _device_runtime(self.device).copy_in(self.ensure_allocated(zero=False).dev_mem, src.np)
    else:
      self.copyin(src.copyout())

  def device_runtime(self) -> Any:
    """The runtime of this buffer's device (not the CPU's)."""
    return _device_runtime(self.device)

  def copyout(self) -> np.ndarray:
    """A new host array of the contents (a device buffer's read back from the device)."""
    if self.device == "CPU":
      return self.np.copy()
    out = np.empty(self.size, dtype=_np_dtype(self.dtype))
    _device_runtime(self.device).copy_out(out, self.ensure_allocated().dev_mem)
    return out

  @property
  def nbytes(self) -> int:
    return self.size * self.dtype.itemsize

  def copyin(self, data: np.ndarray, share: bool = False) -> Buffer:
    """Give the buffer data's values: a private copy, or (share, where data is an ndarray of this dtype, C-contiguous
    and aligned) data's own memory, which the buffer then only reads (a kernel writing it gets memory of its own
    first: `prepare_write`)."""
    src = np.asarray(data)
    if src.size != self.size:
      raise ValueError(f"Buffer.copyin: {src.size} elements into a buffer of {self.size}")
    dt = _np_dtype(self.dtype)
    if self.device != "CPU":
      with np.errstate(all="ignore"):
        host = np.ascontiguousarray(src.reshape(-1), dtype=dt) if src.dtype == dt else src.reshape(-1).astype(dt)
      _device_runtime(self.device).copy_in(self.ensure_allocated(zero=False).dev_mem, host)
      return self
    if share and can_share(src, dt):
      arr = src.reshape(-1)  # a view: its base is the caller's array, so it is never pooled and always renamed
    else:
      arr = _take(dt, self.size)  # a private copy: into a pooled array, or a new one
      if arr is None:
        arr = _new_array(dt, self.size, False)
      if src.dtype == dt:  # a plain copy (no cast to mind: errstate and copyto's dispatch were most of a small one)
        (arr if src.ndim == 1 else arr.reshape(src.shape))[...] = src
      else:
        with np.errstate(all="ignore"):  # a cast out of range wraps as numpy's astype does (the caller checked ranges)
          np.copyto(arr.reshape(src.shape), src, casting="unsafe")
    self._leave_arena()
    fresh = self._np is None
    self._set(arr)
    if fresh and recorder.RECORDER is not None:
      self._record_alloc()
    return self

  def numpy(self) -> np.ndarray:
    """The contents as a read-only view of the buffer's memory (no copy). The buffer never writes memory such a view
    still reads: a kernel writing the buffer later gets other memory first (`prepare_write`), and the memory goes
    back to the pool only once the view is gone."""
    if self.device != "CPU":  # (read back: the host array is the caller's alone)
      v = self.copyout()
      v.flags.writeable = False
      return v
    if self._base is not None:  # (a view of it would not hold this buffer's array: prepare_write could not see it)
      self._move(whole=False)
    v = self.np.view()
    v.flags.writeable = False
    return v

  def prepare_write(self, whole: bool) -> None:
    """Before a kernel writes the buffer: when someone besides this buffer reads its memory (a view handed out, a
    caller that kept `.np`, an array borrowed by copyin share), move to memory of its own (a pooled array or a new
    one), with the old contents copied unless the kernel writes every element and reads none (`whole`), so that
    arrays handed out keep their values. Memory nobody else reads is written in place."""
    old = self._np
    # (the slot, `old`, the argument; an arena's view has a base of its own: the arena)
    if old is None or not ((old.base is not None and self._base is None) or sys.getrefcount(old) > 3):
      return
    del old
    self._move(whole)

  def _move(self, whole: bool) -> None:
    """Move to memory of its own (a pooled array or a new one), with the contents unless `whole`; an arena's view
    with no memory yet only leaves the arena (its first use takes its own)."""
    old = self._np
    if old is None:
      self._leave_arena()
      return
    arr = _take(old.dtype, self.size)
    if arr is None:
      arr = _new_array(old.dtype, self.size, False)
    if not whole:
      arr[...] = old
    self._leave_arena()
    self._set(arr)
    _give(old)

  def _leave_arena(self) -> None:
    """Stop being an arena's view (before taking memory of its own, which is then counted as any buffer's)."""
    if self._base is not None:
      self._base, self.offset, self._np = None, 0, None

  def __repr__(self) -> str:
    where = "" if self.device == "CPU" else f" on {self.device}"
    return f"<Buffer {self.dtype} x{self.size}{where}{'' if self.allocated else ' (unallocated)'}>"


def _device_runtime(device: str) -> Any:
  """The runtime of a device other than the CPU: alloc(nbytes, zero), copy_in(mem, array), copy_out(array, mem)."""
  if device != "CL":
    raise ValueError(f"no runtime for device {device!r}")
  from compiler.runtime.opencl import get_device  # lazy: loads pyopencl only where a tensor lives on CL
  return get_device()


def array_address(a: np.ndarray) -> int:
  """The address of an array's first byte (ctypes reads a writable array's in under a microsecond; the array
  interface's dict took ~5)."""
  try:
    return ctypes.addressof(ctypes.c_char.from_buffer(a))
  except (TypeError, ValueError, BufferError):  # read-only, empty, or not one contiguous block
    return a.__array_interface__["data"][0]


def can_share(a: np.ndarray, dt: np.dtype) -> bool:
  """Whether a kernel can read `a`'s memory as a buffer of dtype dt: the very dtype (byte order included),
  C-contiguous, aligned to its elements, not empty."""
  flags = a.flags  # (a new flags object each time it is asked)
  return a.dtype == dt and flags.c_contiguous and flags.aligned and a.size > 0


def write_frees() -> None:
  """Write the queued frees into the trace their buffer's allocation went to (while it still records)."""
  rec = recorder.RECORDER
  while _freed:
    ts, ctx, nbytes, uid, traced, device = _freed.popleft()
    if rec is not None and id(rec) == traced:
      extra = {} if device == "CPU" else {"device": device}
      recorder.record("mem", op="free", buf=uid, bytes=nbytes, ts=ts, ctx=ctx, **extra)


def named(buf: Buffer) -> bool:
  """Whether a live BUFFER UOp names buf: a Tensor, a lazy graph or the realized memo can still read (or write) it
  after the schedule running now (the schedule's own intermediates are named by nothing once it is made)."""
  arg = (buf.uid, buf.size) if buf.device == "CPU" else (buf.uid, buf.size, buf.device)
  ref = _UCACHE.get(cons_key(Ops.BUFFER, buf.dtype, (), arg))
  return ref is not None and ref() is not None


# BUFFER UOps carry (id, size) in their arg; the Buffer lives as long as its UOp does: it is kept in the UOp's own
# __dict__ (a weak-keyed map's lookups were Python code, and a schedule run looks up every kernel's buffers)
_BUFFER_KEY = "_buffer"


def new_buffer_uop(dtype: DType, size: int, data: np.ndarray | None = None, share: bool = False,
                   device: str = "CPU") -> UOp:
  """A fresh BUFFER UOp (1-D, `size` elements) on `device` with its Buffer (holding a copy of data, or with share
  its memory where it can: Buffer.copyin). Its arg is (id, size), and the device third where it is not the CPU."""
  uid = next(_next_id)
  if device != "CPU":
    note_elsewhere()
  u = UOp(Ops.BUFFER, dtype, (), (uid, size) if device == "CPU" else (uid, size, device))
  b = u.__dict__[_BUFFER_KEY] = Buffer(dtype, size, None, uid, device)
  if data is not None:
    b.copyin(data, share)
  return u


def buffer_of(u: UOp) -> Buffer:
  """The Buffer a BUFFER UOp names."""
  buf = u.__dict__.get(_BUFFER_KEY)
  if buf is not None:
    return buf
  if u.op is not Ops.BUFFER:
    raise TypeError(f"buffer_of needs a BUFFER UOp, got {u.op}")
  device = u.arg[2] if len(u.arg) > 2 else "CPU"
  buf = u.__dict__[_BUFFER_KEY] = Buffer(u.dtype, u.arg[1], uid=u.arg[0], device=device)
  return buf
