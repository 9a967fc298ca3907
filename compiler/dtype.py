"""Data types: scalars, vectors (`dtype.vec(n)`) and pointers (`dtype.ptr()`), with numpy/LLVM spellings."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np


class _Interned(type):
  """Making a DType gives the one object with those fields (the first made, kept from then on), so equality is
  identity and the hash the object's: both object's own, in C. DType hashes in every UOp's hash-consing key (~0.5M
  hashes in a GPT training step's first call), where a Python __hash__, even one returning a cached value, was a
  Python call each."""

  def __call__(cls, *args, **kwargs):
    d = super().__call__(*args, **kwargs)
    return _INTERN.setdefault(d._key(), d)


# eq=False: no dataclass __eq__ (and so no __hash__ either); object's identity compare and id hash are exact here
@dataclass(frozen=True, eq=False)
class DType(metaclass=_Interned):
  priority: int  # promotion order inside a kind; also a stable sort key
  itemsize: int  # bytes of one scalar element
  name: str
  fmt: str | None  # numpy dtype char; None for void
  count: int = 1  # vector width
  _scalar: DType | None = None

  def _key(self) -> tuple:
    # _scalar and base are interned already, so their identity hash and compare stand for their fields
    return (type(self), self.priority, self.itemsize, self.name, self.fmt, self.count, self._scalar,
            getattr(self, "base", None), getattr(self, "size", -1))

  def __reduce__(self):
    # rebuilt through the constructor, never from __dict__: the receiving process's object with these fields is the
    # one it must get (equality is identity), and the id hash is only valid in the process that made the object
    return (_rebuild_dtype, (type(self), tuple(getattr(self, f.name) for f in fields(self))))

  def __repr__(self) -> str:
    return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self._scalar.name}.vec({self.count})"

  def __str__(self) -> str:
    return self.name if self.count == 1 else f"{self._scalar.name}x{self.count}"

  def __lt__(self, other: DType) -> bool:
    return (self.priority, self.itemsize, self.name, self.count) < (other.priority, other.itemsize, other.name,
                                                                     other.count)

  def vec(self, n: int) -> DType:
    """The vector of n elements of this scalar type (n == 1 gives the scalar)."""
    if self.count != 1:
      raise ValueError(f"can't make a vector of the vector type {self}")
    if n == 1 or self == dtypes.void:
      return self
    vecs = self.__dict__.get("_vecs")  # (codegen asks for the same few vectors of every lane group)
    if vecs is None:
      vecs = self.__dict__["_vecs"] = {}
    got = vecs.get(n)
    if got is None:
      got = vecs[n] = DType(self.priority, self.itemsize * n, f"{self.name}x{n}", None, n, self)
    return got

  def scalar(self) -> DType:
    return self._scalar if self._scalar is not None else self

  @property
  def min(self) -> int | float | bool:
    """The lowest value (-inf for floats), as tinygrad's DType.min."""
    return dtypes.min(self)

  @property
  def max(self) -> int | float | bool:
    return dtypes.max(self)

  def ptr(self, size: int = -1) -> PtrDType:
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, self._scalar, self, size)

  @property
  def np(self) -> np.dtype:
    """The numpy dtype of one element (vectors give their scalar's)."""
    s = self.scalar()
    if s.fmt is None:
      raise TypeError(f"{self} has no numpy equivalent")
    return np.dtype(s.fmt)


_INTERN: dict[tuple, DType] = {}  # DType._key() -> the one DType with those fields


def _rebuild_dtype(cls: type, args: tuple) -> DType:
  """Unpickling: the process's own object for this dtype (the constructor interns)."""
  return cls(*args)


@dataclass(frozen=True, eq=False)
class PtrDType(DType):
  base: DType | None = None
  size: int = -1  # number of elements, -1 if unknown

  def __repr__(self) -> str:
    return f"{self.base!r}.ptr({self.size})" if self.size != -1 else f"{self.base!r}.ptr()"

  def __str__(self) -> str:
    return f"{self.base}*"

  def vec(self, n: int) -> DType:
    raise ValueError("vector of pointers is not supported")


class dtypes:
  void = DType(-1, 0, "void", None)
  bool = DType(0, 1, "bool", "?")
  int8 = DType(1, 1, "int8", "b")
  uint8 = DType(2, 1, "uint8", "B")
  int16 = DType(3, 2, "int16", "h")
  uint16 = DType(4, 2, "uint16", "H")
  int32 = DType(5, 4, "int32", "i")
  uint32 = DType(6, 4, "uint32", "I")
  int64 = DType(7, 8, "int64", "q")
  uint64 = DType(8, 8, "uint64", "Q")
  float16 = DType(9, 2, "float16", "e")
  float32 = DType(11, 4, "float32", "f")
  float64 = DType(12, 8, "float64", "d")
  # aliases, as in tinygrad
  char = int8
  uchar = uint8
  short = int16
  ushort = uint16
  int = int32
  uint = uint32
  long = int64
  ulong = uint64
  float = float32
  half = float16
  double = float64
  default_float = float32
  default_int = int32
  index = int32  # the dtype of index math over RANGEs

  # frozenset lookups hash (cached) and check identity first: these run on the rewrite hot path
  @staticmethod
  def is_float(t: DType) -> bool:
    return (t._scalar or t) in _FLOATS

  @staticmethod
  def is_int(t: DType) -> bool:
    return (t._scalar or t) in _INTS

  @staticmethod
  def is_unsigned(t: DType) -> bool:
    return (t._scalar or t) in _UINTS

  @staticmethod
  def from_np(t: Any) -> DType:
    """The DType of a numpy dtype (or anything np.dtype accepts)."""
    npt = np.dtype(t)
    for d in dtypes.all:
      if d.fmt is not None and np.dtype(d.fmt) == npt:
        return d
    raise TypeError(f"numpy dtype {npt} is not supported")

  @staticmethod
  def from_py(x: Any) -> DType:
    """The dtype a Python scalar (or nested list of them) gets by default."""
    if isinstance(x, (list, tuple)):
      return max((dtypes.from_py(v) for v in x), default=dtypes.default_float)
    if isinstance(x, bool):
      return dtypes.bool
    if isinstance(x, int):
      return dtypes.default_int
    if isinstance(x, float):
      return dtypes.default_float
    raise TypeError(f"can't infer a dtype from {type(x).__name__}")

  @staticmethod
  def min(t: DType) -> int | float | bool:
    t = t.scalar()
    if t == dtypes.bool:
      return False
    if dtypes.is_int(t):
      return 0 if dtypes.is_unsigned(t) else -(2 ** (8 * t.itemsize - 1))
    return -math.inf

  @staticmethod
  def max(t: DType) -> int | float | bool:
    t = t.scalar()
    if t == dtypes.bool:
      return True
    if dtypes.is_int(t):
      return 2 ** (8 * t.itemsize) - 1 if dtypes.is_unsigned(t) else 2 ** (8 * t.itemsize - 1) - 1
    return math.inf

  @staticmethod
  def from_str(name: str) -> DType | None:
    """A dtype by tinygrad's spelling: a name or alias of `dtypes` ('int' is int32, 'float' float32), any case."""
    d = getattr(dtypes, name.lower(), None) if name.isidentifier() else None
    return d if isinstance(d, DType) and d.fmt is not None and d.count == 1 else None

  @staticmethod
  def by_name(name: str) -> DType:
    for d in dtypes.all:
      if d.name == name:
        return d
    raise ValueError(f"unknown dtype {name!r}")


dtypes.ints = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
               dtypes.uint64)
dtypes.floats = (dtypes.float16, dtypes.float32, dtypes.float64)
dtypes.all = (dtypes.bool, *dtypes.ints, *dtypes.floats)
_FLOATS = frozenset(dtypes.floats)
_INTS = frozenset(dtypes.ints)
_UINTS = frozenset((dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64))


def truncate(dt: DType, x: Any) -> Any:
  """Wrap/round a Python number into what `dt` can hold (C semantics: ints wrap, floats round)."""
  dt = dt.scalar()
  if dt == dtypes.bool:
    return bool(x)
  if dtypes.is_int(dt):
    bits = 8 * dt.itemsize
    v = int(x) & ((1 << bits) - 1)
    if not dtypes.is_unsigned(dt) and v >= 1 << (bits - 1):
      v -= 1 << bits
    return v
  if dtypes.is_float(dt):
    # remembered: numpy's rounding (and its errstate) took ~5 us a constant, a dozen times a training step
    key = (dt, x, math.copysign(1.0, x) if isinstance(x, (float, np.floating)) else 0)  # equal values round alike
    got = _ROUNDED.get(key)
    if got is None:
      with np.errstate(over="ignore", invalid="ignore"):
        got = float(np.array(x, dtype=np.float64).astype(dt.np))
      if len(_ROUNDED) >= 4096:
        _ROUNDED.clear()
      _ROUNDED[key] = got
    return got
  return x


_ROUNDED: dict[tuple, float] = {}  # (dtype, value, sign) -> the value rounded to that float dtype


def least_upper_dtype(*ts: DType) -> DType:
  """numpy-like promotion for the supported dtypes."""
  ts = tuple(t.scalar() for t in ts)
  floats = [t for t in ts if dtypes.is_float(t)]
  if floats:
    return max(floats)
  ints = [t for t in ts if dtypes.is_int(t)]
  if not ints:
    return dtypes.bool
  signed = [t for t in ints if not dtypes.is_unsigned(t)]
  unsigned = [t for t in ints if dtypes.is_unsigned(t)]
  if not signed:
    return max(unsigned, key=lambda t: t.itemsize)
  s = max(signed, key=lambda t: t.itemsize)
  if not unsigned:
    return s
  u = max(unsigned, key=lambda t: t.itemsize)
  if s.itemsize > u.itemsize:
    return s
  # a signed type wide enough for both, as numpy does (uint64 with a signed int goes to float64)
  for cand in (dtypes.int16, dtypes.int32, dtypes.int64):
    if cand.itemsize > u.itemsize:
      return cand
  return dtypes.float64
