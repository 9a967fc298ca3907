"""The Tensor's argument helpers and errors, written once: ints, shapes, dtypes, scalars, window tuples and pads."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from compiler.dtype import DType, dtypes

Shape = tuple[int, ...]
Scalar = int | float | bool


class ArgumentError(RuntimeError, ValueError):
  """An invalid shape or order argument: RuntimeError as in tinygrad and torch, and the ValueError numpy raises."""


class AxisError(IndexError, ValueError):
  """An axis out of range: IndexError as in tinygrad and torch, and a ValueError as numpy's AxisError is."""


class DTypeNameError(AttributeError, TypeError):
  """An unknown dtype name: AttributeError as in tinygrad (getattr(dtypes, name)), and the TypeError numpy raises."""


def is_int(x: Any) -> bool:
  """A Python or numpy int, not a bool."""
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def is_scalar(x: Any) -> bool:
  return isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating))


def py_value(x: Any) -> Scalar:
  """A numpy scalar as the Python scalar it holds; anything else as it is."""
  return x.item() if isinstance(x, np.generic) else x


_NP_DTYPES: dict[np.dtype, DType] = {}  # numpy dtype -> DType (dtypes.from_np walks every dtype: 5 us a tensor)


def to_dtype(dt: Any, op: str = "to_dtype") -> DType | None:
  """A DType from a DType, its name, or anything numpy accepts as a dtype; None stays None. op names the caller in
  the error."""
  if dt is None or isinstance(dt, DType):
    return dt
  if isinstance(dt, np.dtype) and (known := _NP_DTYPES.get(dt)) is not None:
    return known
  if isinstance(dt, str) and (named := dtypes.from_str(dt)) is not None:
    return named  # before numpy's reading, where 'int' is int64 and 'float' float64
  try:
    got = dtypes.from_np(dt)
  except TypeError as e:
    if isinstance(dt, str):
      raise DTypeNameError(f"{op}: unsupported dtype {dt!r}: not the name of a dtype") from e
    raise TypeError(f"{op}: unsupported dtype {dt!r}") from e
  if isinstance(dt, np.dtype):
    _NP_DTYPES[dt] = got
  return got


def shape_arg(shape: tuple, name: str) -> Shape:
  """Accept f(2, 3) and f((2, 3)) alike."""
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
    shape = tuple(shape[0])
  for s in shape:  # the usual case, Python ints: nothing to check further or convert (a loop: all() of a generator
    if type(s) is not int:  # was most of a reshape's own cost)
      break
  else:
    return shape
  if not all(is_int(s) for s in shape):
    raise TypeError(f"{name}: shape must be ints, got {shape!r}")
  return tuple(int(s) for s in shape)


def check_shape(shape: Shape, name: str) -> Shape:
  """shape, or a ValueError naming the caller when a dim is negative."""
  if any(s < 0 for s in shape):
    raise ValueError(f"{name}: negative dimension in shape {shape}")
  return shape


def broadcast_shape(*shapes: Shape, op: str = "broadcast") -> Shape:
  """numpy broadcasting of shapes; ValueError naming the op and the shapes when they don't broadcast."""
  if len(shapes) == 2 and type(a := shapes[0]) is tuple and type(b := shapes[1]) is tuple:
    if a == b:
      return a  # the usual case of a binary op: nothing to broadcast
    if len(a) != len(b):
      a, b = (1,) * (len(b) - len(a)) + a, (1,) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b):  # (a binary op's broadcast, without the sets of the general rule below)
      if x == y or y == 1:
        out.append(x)
      elif x == 1:
        out.append(y)
      else:
        break
    else:
      return tuple(out)
  nd = max((len(s) for s in shapes), default=0)
  padded = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
  out = []
  for dims in zip(*padded):
    big = {d for d in dims if d != 1}
    if len(big) > 1:
      raise ValueError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} can't be broadcast together")
    out.append(big.pop() if big else 1)
  return tuple(out)


def fitting_int(dt: DType, lo: int, hi: int, name: str) -> DType:
  """For the default int inferred from Python ints: it if they fit, else int64 (numpy's choice), never a wrap."""
  if dt != dtypes.default_int:
    return dt
  for cand in (dtypes.default_int, dtypes.int64):
    if dtypes.min(cand) <= lo and hi <= dtypes.max(cand):
      return cand
  raise OverflowError(f"{name}: the integer {hi if hi > 0 else lo} doesn't fit int64")


_FLOAT_MAX: dict[DType, float] = {}


def in_range(v: Scalar, dt: DType, op: str) -> Scalar:
  """A Python scalar as a value of dt (a float into an int dtype truncates, as torch); OverflowError naming the op,
  the value and the dtype when it doesn't fit, instead of a silent wrap."""
  v = py_value(v)
  if dt == dtypes.bool:
    return bool(v)
  if dtypes.is_int(dt):
    if isinstance(v, float):
      if not math.isfinite(v):
        raise OverflowError(f"{op}: the value {v} can't be converted to {dt}")
      v = int(v)
    if not dtypes.min(dt) <= v <= dtypes.max(dt):
      raise OverflowError(f"{op}: the value {v} is out of range for {dt} [{dtypes.min(dt)}, {dtypes.max(dt)}]")
    return int(v)
  top = _FLOAT_MAX.get(dt)
  if top is None:
    top = _FLOAT_MAX[dt] = float(np.finfo(dt.np).max)  # (np.finfo each call was most of a constant's making)
  if math.isfinite(v) and abs(v) > top:
    raise OverflowError(f"{op}: the value {v} overflows {dt}")
  return float(v)


def make_tuple(v: Any, n: int, name: str, what: str, positive: bool = False) -> tuple[int, ...]:
  """An int (repeated n times) or n ints (tinygrad's make_tuple); positive: each must be > 0 (a window's kernel
  size, stride or dilation), else any int (conv_transpose2d checks its own)."""
  t = (v,) * n if is_int(v) else tuple(v) if isinstance(v, (tuple, list)) else ()
  if len(t) != n or not all(is_int(x) and (not positive or x > 0) for x in t):
    kind = f"a positive int or {n} of them" if positive else f"an int or {n} ints"
    raise ValueError(f"Tensor.{name}: {what} must be {kind}, got {v!r}")
  return tuple(int(x) for x in t)


def pool_pads(p: Any, n: int, name: str, negative: bool = False) -> tuple[tuple[int, int], ...]:
  """(before, after) per spatial dim from an int, n ints (one per dim) or 2n flat ints (last dim first, torch);
  negative: pads below 0 are allowed (conv2d's crop, as tinygrad)."""
  if is_int(p):
    flat = (p,) * (2 * n)
  elif isinstance(p, (tuple, list)) and len(p) == n:
    flat = tuple(v for q in reversed(p) for v in (q, q))
  elif isinstance(p, (tuple, list)) and len(p) == 2 * n:
    flat = tuple(p)
  else:
    raise ValueError(f"Tensor.{name}: padding must be an int or a sequence of {n} or {2 * n} ints, got {p!r}")
  if not all(is_int(x) and (negative or x >= 0) for x in flat):
    raise ValueError(f"Tensor.{name}: padding must be {'' if negative else 'non-negative '}ints, got {p!r}")
  return tuple((int(flat[2 * i]), int(flat[2 * i + 1])) for i in reversed(range(n)))
