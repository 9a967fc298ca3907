"""Tensor methods that move elements without computing: reshape, permute, expand, pad, shrink, flip, repeat, cat,
stack, split and its kin, roll, windows (_pool, unfold). Each is a view (a movement UOp) or a few of them."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from compiler.device import check_same_device
from compiler.dtype import dtypes, least_upper_dtype
from compiler.tensor_mixins._args import (
  ArgumentError,
  AxisError,
  Scalar,
  Shape,
  in_range,
  is_int,
  is_scalar,
  py_value,
  shape_arg,
)
from compiler.uop import Ops, UOp


class MovementMixin:
  __slots__ = ()

  def _axis(self, axis: int, name: str, ndim: int | None = None) -> int:
    nd = self.ndim if ndim is None else ndim
    if not is_int(axis):
      raise TypeError(f"Tensor.{name}: axis must be an int, got {axis!r}")
    if not -max(nd, 1) <= axis < max(nd, 1) or nd == 0:
      raise AxisError(f"Tensor.{name}: axis {axis} is out of range for shape {self.shape}")
    return int(axis) % nd

  def reshape(self, *shape: Any) -> Any:
    """The same elements in shape `shape`: one -1 is inferred, a None keeps that dim's size (tinygrad's)."""
    try:
      shape = shape_arg(shape, "Tensor.reshape")
    except TypeError:
      shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
      if not any(s is None for s in shape):
        raise
      if any(s is None for s in shape[self.ndim:]):
        raise AxisError(f"Tensor.reshape: a None keeps its dim, but {shape} has one past the dims of {self.shape}") \
          from None
      shape = shape_arg(tuple(self.shape[i] if s is None else s for i, s in enumerate(shape)), "Tensor.reshape")
    own = self.shape
    if shape == own:
      return self
    if min(shape, default=0) < 0:  # a -1 to infer, or an invalid size
      shape = self._infer_dim(shape)
    if math.prod(shape) != math.prod(own):
      raise ValueError(f"Tensor.reshape: can't reshape {own} ({math.prod(own)} elements) to {shape}")
    return self if shape == own else self._mop(Ops.RESHAPE, shape)

  def _infer_dim(self, shape: Shape) -> Shape:
    """A reshape's shape with its -1 replaced by the size that keeps the element count."""
    if sum(1 for s in shape if s == -1) > 1:
      raise ArgumentError(f"Tensor.reshape: only one dimension of {shape} can be -1 (reshaping {self.shape})")
    if any(s < -1 for s in shape):
      raise ValueError(f"Tensor.reshape: invalid shape {shape} for {self.shape}")
    rest = math.prod(s for s in shape if s != -1)
    if rest == 0 or self.numel() % rest:
      raise ValueError(f"Tensor.reshape: can't reshape {self.shape} to {shape}")
    return tuple(self.numel() // rest if s == -1 else s for s in shape)

  def view(self, *shape: Any) -> Any:
    return self.reshape(*shape)

  def permute(self, *order: Any) -> Any:
    order = shape_arg(order, "Tensor.permute")
    axes = list(range(self.ndim))
    if len(order) != len(axes):
      raise ArgumentError(f"Tensor.permute: order {order} doesn't match shape {self.shape}")
    if sorted(order) != axes:  # (the usual case, a permutation of 0..n-1, has no negative axes to normalize)
      order = tuple(self._axis(o, "permute") for o in order)
      if sorted(order) != axes:
        raise ArgumentError(f"Tensor.permute: {order} is not a permutation of the axes of {self.shape}")
    return self if list(order) == axes else self._mop(Ops.PERMUTE, order)

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Any:
    if self.ndim == 0:  # dims 0 and -1 of a 0-d tensor are the tensor itself (torch)
      for d in (dim0, dim1):
        self._axis(d, "transpose", 1)
      return self
    order = list(range(self.ndim))
    a, b = self._axis(dim0, "transpose"), self._axis(dim1, "transpose")
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Any:
    """All axes reversed (numpy's .T; the usual transpose for 2-d)."""
    return self.permute(tuple(reversed(range(self.ndim))))

  def expand(self, *shape: Any) -> Any:
    shape = shape_arg(shape, "Tensor.expand")
    own = self.shape
    if len(shape) < len(own):
      raise ValueError(f"Tensor.expand: can't expand {own} to fewer dims {shape}")
    src = (1,) * (len(shape) - len(own)) + own
    new = tuple(s if n == -1 else n for s, n in zip(src, shape)) if -1 in shape else shape
    for s, n in zip(src, new):
      if (s != n and s != 1) or n < 0:
        raise ValueError(f"Tensor.expand: can't expand {own} to {shape}")
    x = self if src == own else self._mop(Ops.RESHAPE, src)  # (leading 1s: a reshape with nothing to check)
    return x if new == src else x._mop(Ops.EXPAND, new)

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Any:
    if self.ndim == 0:
      return self.reshape(1)
    s, e = self._axis(start_dim, "flatten"), self._axis(end_dim, "flatten")
    if s > e:
      raise ValueError(f"Tensor.flatten: start_dim {start_dim} is after end_dim {end_dim} for {self.shape}")
    return self.reshape(self.shape[:s] + (math.prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def unflatten(self, dim: int, sizes: tuple[int, ...]) -> Any:
    """Dim `dim` as the dims `sizes` (one of them may be -1)."""
    d = self._axis(dim, "unflatten")
    sizes = tuple(sizes)
    known = math.prod(s for s in sizes if s != -1)
    n_free = sum(1 for s in sizes if s == -1)
    if n_free > 1 or (n_free and (known == 0 or self.shape[d] % known)) or (not n_free and known != self.shape[d]):
      raise ValueError(f"Tensor.unflatten: sizes {sizes} don't multiply to dim {dim} of shape {self.shape}")
    sizes = tuple(self.shape[d] // known if s == -1 else s for s in sizes)
    return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])

  def squeeze(self, dim: int | Sequence[int] | None = None) -> Any:
    """Drop size-1 dims: all of them, or those of dim (an int or a sequence, as torch; other sizes are kept)."""
    if dim is None:
      return self.reshape(tuple(s for s in self.shape if s != 1))
    if isinstance(dim, (tuple, list)):
      axes = self._axes(tuple(dim), "squeeze")
      return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes or s != 1))
    if self.ndim == 0:
      self._axis(dim, "squeeze", 1)  # a 0-d tensor has dims 0 and -1 only (as torch and tinygrad)
      return self
    d = self._axis(dim, "squeeze")
    return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

  def unsqueeze(self, dim: int) -> Any:
    d = self._axis(dim, "unsqueeze", self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  _PAD_MODES = ("constant", "reflect", "replicate", "circular")

  def pad(self, padding: Sequence, mode: str = "constant", value: Scalar = 0.0) -> Any:
    """Pad by ((before, after) or None per dim), or by flat ints (last dim first, like torch). Modes: "constant"
    (value), "reflect" (mirror without the edge), "replicate" (the edge repeated), "circular" (wrap around). A
    negative pad removes elements. (A number as the second argument is the value, as in the old signature.)"""
    if is_scalar(mode):
      mode, value = "constant", mode
    if mode not in self._PAD_MODES:
      raise NotImplementedError(f"Tensor.pad: mode {mode!r} is not supported (one of {', '.join(self._PAD_MODES)})")
    if mode != "constant" and py_value(value) != 0:
      raise ValueError(f"Tensor.pad: mode {mode!r} takes no value (got {value!r})")
    pairs = self._pad_pairs(padding)
    if mode == "constant":
      return self._pad_constant(pairs, value)
    if mode == "circular":
      return self._pad_circular(pairs)
    x = self
    for d, (b, a) in enumerate(pairs):
      b, a = max(b, 0), max(a, 0)
      s = x.shape[d]
      if mode == "reflect" and (b or a) and (b >= s or a >= s):
        raise ValueError(f"Tensor.pad: reflect padding ({b}, {a}) must be less than size {s} of dim {d} "
                         f"(shape {self.shape})")
      if mode == "replicate" and s == 0 and (b or a):
        raise ValueError(f"Tensor.pad: replicate padding of the empty dim {d} (shape {self.shape})")
      parts = []
      if b:
        parts.append(x._slice(d, 1, b + 1).flip(d) if mode == "reflect" else x._slice(d, 0, 1)._repeat_dim(d, b))
      parts.append(x)
      if a:
        edge = x._slice(d, s - 1, s)._repeat_dim(d, a)
        parts.append(x._slice(d, s - a - 1, s - 1).flip(d) if mode == "reflect" else edge)
      x = type(x).cat(*parts, dim=d) if len(parts) > 1 else x
    return x._pad_constant([(min(b, 0), min(a, 0)) for b, a in pairs], 0)

  def _slice(self, d: int, start: int, end: int) -> Any:
    return self.shrink(tuple((start, end) if i == d else None for i in range(self.ndim)))

  def _repeat_dim(self, d: int, n: int) -> Any:
    """A size-1 dim d expanded to n."""
    return self.expand(tuple(n if i == d else s for i, s in enumerate(self.shape)))

  def _pad_circular(self, pairs: list[tuple[int, int]]) -> Any:
    # a negative pad removes elements first, and the positive ones wrap around what is left (torch's)
    core = self._pad_constant([(min(b, 0), min(a, 0)) for b, a in pairs], 0)
    pairs = [(max(b, 0), max(a, 0)) for b, a in pairs]
    if any(b > s or a > s for (b, a), s in zip(pairs, core.shape)):
      raise ValueError(f"Tensor.pad: circular padding {pairs} wraps around shape {core.shape} more than once")
    # three copies side by side (where a dim is padded), then the window that starts b before the middle one
    x = core.repeat(tuple(3 if b or a else 1 for b, a in pairs))
    return x.shrink(tuple((s - b, 2 * s + a) if b or a else None for (b, a), s in zip(pairs, core.shape)))

  def _pad_pairs(self, padding: Sequence) -> list[tuple[int, int]]:
    """(before, after) per dim from tinygrad's/torch's padding forms."""
    if not isinstance(padding, (list, tuple)):
      raise TypeError(f"Tensor.pad: padding must be a sequence, got {type(padding).__name__}")
    if all(isinstance(p, (int, np.integer)) for p in padding):
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise ValueError(f"Tensor.pad: flat padding {tuple(padding)} doesn't fit shape {self.shape}")
      pairs = [(0, 0)] * self.ndim
      for i in range(len(padding) // 2):
        pairs[self.ndim - 1 - i] = (int(padding[2 * i]), int(padding[2 * i + 1]))
      return pairs
    if len(padding) != self.ndim:
      raise ValueError(f"Tensor.pad: {len(padding)} pads for shape {self.shape}")
    if not all(p is None or (isinstance(p, (list, tuple)) and len(p) == 2) for p in padding):
      raise ValueError(f"Tensor.pad: padding {padding!r} must be (before, after) or None per dim of {self.shape}")
    return [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]

  def _pad_constant(self, pairs: Sequence[tuple[int, int]], value: Scalar) -> Any:
    # negative padding is a shrink
    shrink = tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, self.shape))
    if any(lo > hi for lo, hi in shrink):
      raise ValueError(f"Tensor.pad: negative padding {list(pairs)} removes more than shape {self.shape} has")
    x = self.shrink(shrink) if any(b < 0 or a < 0 for b, a in pairs) else self
    pos = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
    if all(b == 0 and a == 0 for b, a in pos):
      return x
    ret = x._mop(Ops.PAD, pos)
    if py_value(value) == 0 and not (isinstance(value, float) and math.copysign(1, value) < 0):
      return ret
    mask = self.full(x.shape, True, dtypes.bool)._mop(Ops.PAD, pos)
    fill = type(self)(UOp.const(self.dtype, in_range(value, self.dtype, "Tensor.pad")))  # the value takes the dtype
    return mask.where(ret, fill)

  def shrink(self, arg: Sequence) -> Any:
    """Keep [start, end) per dim (None keeps the dim)."""
    own = self.shape
    if len(arg) != len(own):
      raise ValueError(f"Tensor.shrink: {len(arg)} ranges for shape {own}")
    pairs = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, own))
    whole = True
    for (b, e), s in zip(pairs, own):  # (one pass: in range, and whether it keeps everything)
      if not 0 <= b <= e <= s:
        raise ValueError(f"Tensor.shrink: {pairs} out of range for shape {own}")
      whole = whole and b == 0 and e == s
    return self if whole else self._mop(Ops.SHRINK, pairs)

  def flip(self, axis: int | Sequence[int] = None) -> Any:
    axes = range(self.ndim) if axis is None else ((axis,) if isinstance(axis, (int, np.integer)) else axis)
    if self.ndim == 0:
      for a in axes:
        self._axis(a, "flip", 1)
      return self
    flips = [False] * self.ndim
    for a in axes:
      d = self._axis(a, "flip")
      if flips[d]:
        raise RuntimeError(f"Tensor.flip: axis {a} appears more than once in {tuple(axes)} (shape {self.shape})")
      flips[d] = True
    return self._mop(Ops.FLIP, tuple(flips)) if any(flips) else self

  def repeat(self, *repeats: Any) -> Any:
    repeats = shape_arg(repeats, "Tensor.repeat")
    if len(repeats) < self.ndim or any(r < 0 for r in repeats):
      raise ValueError(f"Tensor.repeat: repeats {repeats} don't fit shape {self.shape}")
    base = (1,) * (len(repeats) - self.ndim) + self.shape
    x = self.reshape(base)
    inter = tuple(v for s in base for v in (1, s))
    exp = tuple(v for r, s in zip(repeats, base) for v in (r, s))
    return x.reshape(inter).expand(exp).reshape(tuple(r * s for r, s in zip(repeats, base)))

  @staticmethod
  def _tensor_args(first: Any, rest: tuple, name: str) -> tuple[Any, ...]:
    """Both call forms, as tinygrad's argfix: t.f(a, b), Tensor.f(t, a, b) and Tensor.f([t, a, b]) (where the
    first argument, `self`, is a list: hence MovementMixin, not type(self), to check the tensors with)."""
    if isinstance(first, (list, tuple)):
      if rest:
        raise ValueError(f"Tensor.{name}: a sequence of tensors must be the only argument, got {first!r} and "
                         f"{len(rest)} more")
      tensors = tuple(first)
    else:
      tensors = (first, *rest)
    if not tensors:
      raise ValueError(f"Tensor.{name}: needs at least one tensor")
    if not all(isinstance(t, MovementMixin) for t in tensors):
      raise TypeError(f"Tensor.{name}: all arguments must be Tensors, got {[type(t).__name__ for t in tensors]}")
    return tensors

  def cat(self: Any | Sequence[Any], *args: Any, dim: int = 0) -> Any:
    """Concatenate along dim: `a.cat(b, c, dim=1)` or `Tensor.cat(a, b, c, dim=1)`."""
    tensors = MovementMixin._tensor_args(self, args, "cat")
    check_same_device("cat", *(t.uop for t in tensors))
    first = tensors[0]
    if first.ndim == 0:
      raise IndexError("Tensor.cat: zero-dimensional tensors can't be concatenated")
    d = first._axis(dim, "cat")
    for t in tensors[1:]:
      if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d):
        raise ValueError(f"Tensor.cat: shapes {[x.shape for x in tensors]} differ outside dim {dim}")
    dt = least_upper_dtype(*(t.dtype for t in tensors))
    total = sum(t.shape[d] for t in tensors)
    ret, off = None, 0
    for t in tensors:
      pads = [None] * t.ndim
      pads[d] = (off, total - off - t.shape[d])
      p = t.cast(dt).pad(pads)
      # a WHERE on the tensor's own region, not an ADD of zero pads: 0.0 + -0.0 would lose the sign of a zero
      ret = p if ret is None else t.full(t.shape, True, dtypes.bool).pad(pads).where(p, ret)
      off += t.shape[d]
    return ret

  def stack(self: Any | Sequence[Any], *args: Any, dim: int = 0) -> Any:
    """Join along a new dim: `a.stack(b, dim=1)` or `Tensor.stack(a, b, dim=1)`."""
    tensors = MovementMixin._tensor_args(self, args, "stack")
    if any(t.shape != tensors[0].shape for t in tensors):
      raise ValueError(f"Tensor.stack: shapes {[t.shape for t in tensors]} differ")
    d = tensors[0]._axis(dim, "stack", tensors[0].ndim + 1)
    return type(tensors[0]).cat(*(t.unsqueeze(d) for t in tensors), dim=d)

  # ---- windows
  def _pool(self, k: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...], name: str) -> Any:
    """Sliding windows over the last len(k) dims: (..., *i) -> (..., *o, *k), by repeat/shrink/reshape only."""
    x, nk = self, len(k)
    if x.ndim < nk:
      raise ArgumentError(f"Tensor.{name}: input of shape {x.shape} has fewer than {nk} dims")
    prefix, i_ = x.shape[:-nk], x.shape[-nk:]
    o_ = tuple((i - d * (kk - 1) - 1) // s + 1 for i, d, kk, s in zip(i_, dilation, k, stride))
    if any(o <= 0 for o in o_):
      raise ArgumentError(f"Tensor.{name}: window {k} (dilation {dilation}) doesn't fit input of shape {x.shape}")
    # repeat the input so a window row (k rows of i*f+d elements) reads it without padding
    f_ = tuple(max(1, math.ceil((o * s - d) / i)) for o, s, d, i in zip(o_, stride, dilation, i_))
    span = tuple(i * f + d for i, f, d in zip(i_, f_, dilation))
    e_ = tuple(math.ceil(kk * sp / i) for kk, sp, i in zip(k, span, i_))
    noop = [None] * len(prefix)
    if all(kk <= s for kk, s in zip(k, stride)) and all(d == 1 for d in dilation):
      return x._pool_disjoint(k, stride, o_)
    x = x.repeat((1,) * len(prefix) + e_)
    x = x.shrink(noop + [(0, kk * sp) for kk, sp in zip(k, span)])
    x = x.reshape(prefix + tuple(v for kk, sp in zip(k, span) for v in (kk, sp)))
    x = x.shrink(noop + [r for kk, o, s in zip(k, o_, stride) for r in ((0, kk), (0, o * s))])
    x = x.reshape(prefix + tuple(v for kk, o, s in zip(k, o_, stride) for v in (kk, o, s)))
    x = x.shrink(noop + [r for kk, o in zip(k, o_) for r in ((0, kk), (0, o), (0, 1))])
    x = x.reshape(prefix + tuple(v for kk, o in zip(k, o_) for v in (kk, o)))
    n = len(prefix)
    return x.permute(tuple(range(n)) + tuple(n + 2 * j + 1 for j in range(nk)) + tuple(n + 2 * j for j in range(nk)))

  def _pool_disjoint(self, k: tuple[int, ...], stride: tuple[int, ...], o_: tuple[int, ...]) -> Any:
    """`_pool` where no two windows share an element (k <= stride, no dilation): each spatial dim cut into o rows of
    `stride` (padded or shrunk to o * stride) and each row shrunk to its first k. Its gradient is a pad and a reshape,
    so a pool's backward reads each element once where the repeat's reads a (e x e) window of masked taps."""
    x, nk = self, len(k)
    noop = [None] * (x.ndim - nk)
    i_ = x.shape[-nk:]
    x = x.pad(noop + [(0, max(0, o * s - i)) for o, s, i in zip(o_, stride, i_)])
    x = x.shrink(noop + [(0, o * s) for o, s in zip(o_, stride)])
    x = x.reshape(x.shape[:-nk] + tuple(v for o, s in zip(o_, stride) for v in (o, s)))
    x = x.shrink(noop + [r for o, kk in zip(o_, k) for r in ((0, o), (0, kk))])
    n = len(noop)
    return x.permute(tuple(range(n)) + tuple(n + 2 * j for j in range(nk)) + tuple(n + 2 * j + 1 for j in range(nk)))

  # ---- rearranging
  def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Any:
    """Elements shifted along dims, wrapping around (dims=None: over the flattened tensor, as torch)."""
    if dims is None:
      one = (shifts,) if is_int(shifts) else tuple(shifts) if isinstance(shifts, (tuple, list)) else None
      if one is None or len(one) != 1 or not is_int(one[0]):
        raise RuntimeError(f"Tensor.roll: without dims, shifts must be one int or a 1-tuple, got {shifts!r} (shape "
                           f"{self.shape})")
      return self.flatten().roll(one[0], 0).reshape(self.shape)
    shifts = (shifts,) if is_int(shifts) else tuple(shifts)
    dims = (dims,) if is_int(dims) else tuple(dims)
    if len(shifts) != len(dims):
      raise RuntimeError(f"Tensor.roll: {len(shifts)} shifts for {len(dims)} dims (shape {self.shape})")
    x = self
    for s, dim in zip(shifts, dims):
      d = x._axis(dim, "roll") if x.ndim else 0
      n = x.shape[d] if x.ndim else 1
      if n == 0 or s % n == 0:
        continue
      s %= n
      # two copies side by side, then the window that starts n - s in
      x = x.repeat(*(2 if k == d else 1 for k in range(x.ndim)))
      x = x.shrink(tuple((n - s, 2 * n - s) if k == d else None for k in range(x.ndim)))
    return x

  def unfold(self, dim: int, size: int, step: int) -> Any:
    """The windows of `size` elements every `step` along dim: dim becomes the window count, and a last dim of
    size `size` is added (torch's Tensor.unfold)."""
    if not is_int(size) or size < 0:
      raise RuntimeError(f"Tensor.unfold: size must be >= 0 but got size={size!r} (shape {self.shape})")
    if not is_int(step) or step <= 0:
      raise RuntimeError(f"Tensor.unfold: step must be > 0 but got step={step!r} (shape {self.shape})")
    if self.ndim == 0:
      self._axis(dim, "unfold", 1)
      return self.reshape(1).unfold(0, size, step).reshape(size)
    d = self._axis(dim, "unfold")
    n = self.shape[d]
    if size > n:
      raise RuntimeError(f"Tensor.unfold: maximum size for tensor at dimension {dim} is {n} but size is {size} "
                         f"(shape {self.shape})")
    w = (n - size) // step + 1
    order = (*(k for k in range(self.ndim) if k != d), d)
    x = self.permute(order)
    if size == 0:  # no elements: any window of the right shape
      x = x.shrink((None,) * (x.ndim - 1) + ((0, 0),)).reshape(*x.shape[:-1], w, 0)
    else:
      x = x._pool((size,), (step,), (1,), "unfold")
    back = [order.index(k) for k in range(self.ndim)]
    return x.permute(*back, self.ndim)

  def repeat_interleave(self, repeats: int, dim: int | None = None) -> Any:
    """Each element repeated `repeats` times along dim (dim=None: of the flattened tensor)."""
    if not is_int(repeats) or repeats < 0:
      raise ValueError(f"Tensor.repeat_interleave: repeats must be a non-negative int, got {repeats!r}")
    x, d = (self.flatten(), 0) if dim is None else (self, self._axis(dim, "repeat_interleave"))
    s = x.shape
    return x.reshape(*s[:d + 1], 1, *s[d + 1:]).expand(*s[:d + 1], repeats, *s[d + 1:]) \
      .reshape(*s[:d], s[d] * repeats, *s[d + 1:])

  def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple:
    """Pieces along dim: of `sizes` each (the last may be smaller), or of the listed sizes."""
    d = self._axis(dim, "split")
    n = self.shape[d]
    if is_int(sizes):
      if sizes <= 0:
        raise RuntimeError(f"Tensor.split: split size must be positive, got {sizes} (shape {self.shape})")
      sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    sizes = list(sizes)
    if sum(sizes) != n or any(not is_int(s) or s < 0 for s in sizes):
      raise RuntimeError(f"Tensor.split: sizes {sizes} don't sum to dim {dim} of shape {self.shape}")
    out, off = [], 0
    for s in sizes:
      out.append(self.shrink(tuple((off, off + s) if k == d else None for k in range(self.ndim))))
      off += s
    return tuple(out)

  def chunk(self, chunks: int, dim: int = 0) -> tuple:
    """At most `chunks` pieces of equal size along dim (the last may be smaller), as torch."""
    if not is_int(chunks) or chunks <= 0:
      raise RuntimeError(f"Tensor.chunk: chunks must be a positive int, got {chunks!r}")
    n = self.shape[self._axis(dim, "chunk")]
    return self.split(math.ceil(n / chunks) if n else [0] * chunks, dim)

  def unbind(self, dim: int = 0) -> tuple:
    """The slices along dim, each without it."""
    d = self._axis(dim, "unbind")
    return tuple(p.squeeze(d) for p in self.split(1, d)) if self.shape[d] else ()

  def meshgrid(self, *args: Any, indexing: str = "ij") -> tuple:
    """Coordinate grids from 1-d tensors (self first), indexing "ij" (matrix) or "xy" (cartesian)."""
    if indexing not in ("ij", "xy"):
      raise RuntimeError(f"Tensor.meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = (self, *args)
    if any(t.ndim > 1 for t in ts):
      raise RuntimeError(f"Tensor.meshgrid: needs 0-d or 1-d tensors, got shapes {[t.shape for t in ts]}")
    ts = tuple(t.reshape(-1) if t.ndim == 0 else t for t in ts)
    shape = tuple(t.shape[0] for t in ts)
    grids = [t.reshape(tuple(-1 if k == i else 1 for k in range(len(ts)))).expand(shape) for i, t in enumerate(ts)]
    if indexing == "xy" and len(ts) >= 2:
      grids = [g.transpose(0, 1) for g in grids]  # cartesian: the first two axes swapped
    return tuple(grids)
