"""Device buffers: a flat numpy array of one dtype, and the map from BUFFER UOps to the Buffer they name."""
from __future__ import annotations

import itertools
import weakref

import numpy as np

from compiler.dtype import DType
from compiler.uop import Ops, UOp


class Buffer:
  """`size` elements of `dtype` in host memory (numpy-backed; allocated on first use)."""
  __slots__ = ("dtype", "size", "_np", "__weakref__")

  def __init__(self, dtype: DType, size: int, data: np.ndarray | None = None):
    if size < 0:
      raise ValueError(f"Buffer: negative size {size}")
    self.dtype, self.size = dtype, size
    self._np: np.ndarray | None = None
    if data is not None:
      self.copyin(data)

  @property
  def np(self) -> np.ndarray:
    """The backing 1-D numpy array (writable, C-contiguous)."""
    return self.ensure_allocated()._np

  def ensure_allocated(self) -> Buffer:
    if self._np is None:
      self._np = np.zeros(self.size, dtype=self.dtype.np)
    return self

  @property
  def allocated(self) -> bool:
    return self._np is not None

  @property
  def nbytes(self) -> int:
    return self.size * self.dtype.itemsize

  def copyin(self, data: np.ndarray) -> Buffer:
    arr = np.array(data, dtype=self.dtype.np, order="C").reshape(-1)  # always a private copy
    if arr.size != self.size:
      raise ValueError(f"Buffer.copyin: {arr.size} elements into a buffer of {self.size}")
    self._np = arr
    return self

  def numpy(self) -> np.ndarray:
    """A copy of the contents."""
    return self.np.copy()

  def __repr__(self) -> str:
    return f"<Buffer {self.dtype} x{self.size}{'' if self.allocated else ' (unallocated)'}>"


# BUFFER UOps carry (id, size) in their arg; the Buffer lives as long as its UOp does
_buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()
_next_id = itertools.count()


def new_buffer_uop(dtype: DType, size: int, data: np.ndarray | None = None) -> UOp:
  """A fresh BUFFER UOp (1-D, `size` elements) with its Buffer."""
  u = UOp(Ops.BUFFER, dtype, (), (next(_next_id), size))
  _buffers[u] = Buffer(dtype, size, data)
  return u


def buffer_of(u: UOp) -> Buffer:
  """The Buffer a BUFFER UOp names."""
  if u.op is not Ops.BUFFER:
    raise TypeError(f"buffer_of needs a BUFFER UOp, got {u.op}")
  buf = _buffers.get(u)
  if buf is None:
    buf = _buffers[u] = Buffer(u.dtype, u.arg[1])
  return buf
