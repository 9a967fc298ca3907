"""Windowed ops on Tensors: pooling windows as movement ops, conv2d, max/avg pooling (tinygrad's approach)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.dtype import dtypes

if TYPE_CHECKING:
  from compiler.tensor import Tensor


def _is_int(x: Any) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _tuple(v: Any, n: int, name: str, what: str) -> tuple[int, ...]:
  """An int (repeated n times) or n positive ints."""
  t = (v,) * n if _is_int(v) else tuple(v) if isinstance(v, (tuple, list)) else ()
  if len(t) != n or not all(_is_int(x) and x > 0 for x in t):
    raise ValueError(f"Tensor.{name}: {what} must be a positive int or {n} of them, got {v!r}")
  return tuple(int(x) for x in t)


def _pads(p: Any, n: int, name: str, negative: bool = False) -> tuple[tuple[int, int], ...]:
  """(before, after) per spatial dim from an int, n ints (one per dim) or 2n flat ints (last dim first, torch);
  negative: pads below 0 are crops (conv2d's, as tinygrad)."""
  if _is_int(p):
    flat = (p,) * (2 * n)
  elif isinstance(p, (tuple, list)) and len(p) == n:
    flat = tuple(v for q in reversed(p) for v in (q, q))
  elif isinstance(p, (tuple, list)) and len(p) == 2 * n:
    flat = tuple(p)
  else:
    raise ValueError(f"Tensor.{name}: padding must be an int or a sequence of {n} or {2 * n} ints, got {p!r}")
  if not all(_is_int(x) and (negative or x >= 0) for x in flat):
    raise ValueError(f"Tensor.{name}: padding must be {'' if negative else 'non-negative '}ints, got {p!r}")
  return tuple((int(flat[2 * i]), int(flat[2 * i + 1])) for i in reversed(range(n)))


def _spatial_pad(x: Tensor, pads: tuple[tuple[int, int], ...], value: Any = 0.0) -> Tensor:
  """x padded on its last len(pads) dims; a negative pad crops."""
  lead = (None,) * (x.ndim - len(pads))
  if any(b < 0 or a < 0 for b, a in pads):
    spatial = x.shape[-len(pads):]
    if any(max(0, -b) + max(0, -a) > s for (b, a), s in zip(pads, spatial)):
      from compiler.tensor import ArgumentError
      raise ArgumentError(f"Tensor.conv2d: padding {pads} crops more than the input of shape {x.shape}")
    x = x.shrink(lead + tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pads, spatial)))
    pads = tuple((max(0, b), max(0, a)) for b, a in pads)
  return x.pad(lead + tuple(pads), value=value)


def pool(x: Tensor, k: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...], name: str) -> Tensor:
  """Sliding windows over the last len(k) dims: (..., *i) -> (..., *o, *k), by repeat/shrink/reshape only."""
  from compiler.tensor import ArgumentError
  nk = len(k)
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
  x = x.repeat((1,) * len(prefix) + e_)
  x = x.shrink(noop + [(0, kk * sp) for kk, sp in zip(k, span)])
  x = x.reshape(prefix + tuple(v for kk, sp in zip(k, span) for v in (kk, sp)))
  x = x.shrink(noop + [r for kk, o, s in zip(k, o_, stride) for r in ((0, kk), (0, o * s))])
  x = x.reshape(prefix + tuple(v for kk, o, s in zip(k, o_, stride) for v in (kk, o, s)))
  x = x.shrink(noop + [r for kk, o in zip(k, o_) for r in ((0, kk), (0, o), (0, 1))])
  x = x.reshape(prefix + tuple(v for kk, o in zip(k, o_) for v in (kk, o)))
  n = len(prefix)
  return x.permute(tuple(range(n)) + tuple(n + 2 * j + 1 for j in range(nk)) + tuple(n + 2 * j for j in range(nk)))


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, stride: Any, dilation: Any,
           padding: Any) -> Tensor:
  """n-d convolution (cross-correlation, as torch): x (bs, cin, *spatial), weight (cout, cin/groups, *kernel)."""
  from compiler.tensor import ArgumentError, Tensor
  if not isinstance(weight, Tensor) or not (bias is None or isinstance(bias, Tensor)):
    raise TypeError(f"Tensor.conv2d: weight and bias must be Tensors, got {type(weight).__name__} and "
                    f"{type(bias).__name__}")
  # shape mismatches are RuntimeErrors, as tinygrad and torch (ArgumentError is a ValueError too)
  if weight.ndim < 3 or x.ndim != weight.ndim:
    raise ArgumentError(f"Tensor.conv2d: needs an input (bs, cin, *spatial) and a weight (cout, cin/groups, *kernel) "
                     f"of the same number (>= 3) of dims, got {x.shape} and {weight.shape}")
  n = weight.ndim - 2
  bs, cin_ = x.shape[:2]
  cout, cin = weight.shape[:2]
  ks = weight.shape[2:]
  if not isinstance(groups, int) or groups <= 0 or groups * cin != cin_ or cout % groups:
    raise ArgumentError(f"Tensor.conv2d: input {x.shape} and weight {weight.shape} don't match with groups={groups}")
  if bias is not None and bias.shape != (cout,):
    raise ArgumentError(f"Tensor.conv2d: bias of shape {bias.shape}, expected ({cout},) for weight {weight.shape}")
  st, dl = _tuple(stride, n, "conv2d", "stride"), _tuple(dilation, n, "conv2d", "dilation")
  x = pool(_spatial_pad(x, _pads(padding, n, "conv2d", negative=True)), ks, st, dl, "conv2d")  # (bs, cin_, *o, *k)
  rcout, o_ = cout // groups, x.shape[2:2 + n]
  x = x.reshape(bs, groups, cin, 1, *o_, *ks).expand(bs, groups, cin, rcout, *o_, *ks)
  x = x.permute(0, 1, 3, *range(4, 4 + n), 2, *range(4 + n, 4 + 2 * n))  # (bs, groups, rcout, *o, cin, *k)
  w = weight.reshape(1, groups, rcout, *(1,) * n, cin, *ks)
  ret = (x * w).sum(tuple(range(-1, -n - 2, -1))).reshape(bs, cout, *o_)
  return ret if bias is None else ret + bias.reshape(1, cout, *(1,) * n)


def _pool_args(x: Tensor, kernel_size: Any, stride: Any, dilation: Any, padding: Any, ceil_mode: bool, name: str):
  """Kernel, stride, dilation, (before, after) pads and the extra right pads that ceil_mode's last windows need."""
  n = 2 if _is_int(kernel_size) else len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 0
  k = _tuple(kernel_size, max(n, 1), name, "kernel_size")
  n = len(k)
  if x.ndim < n:
    raise ValueError(f"Tensor.{name}: needs an input of at least {n} dims, got shape {x.shape}")
  st = k if stride is None else _tuple(stride, n, name, "stride")
  dl, pads = _tuple(dilation, n, name, "dilation"), _pads(padding, n, name)
  extra = []
  for s, kk, ss, d, (pb, pa) in zip(x.shape[-n:], k, st, dl, pads):
    span = s + pb + pa - d * (kk - 1) - 1
    o = span // ss + 1
    if ceil_mode and span >= 0:
      o = -(-span // ss) + 1
      if (o - 1) * ss >= s + pb:  # torch: the last window starts inside the input or its left padding
        o -= 1
    extra.append(max(0, (o - 1) * ss + d * (kk - 1) + 1 - (s + pb + pa)))
  return k, st, dl, pads, tuple(extra)


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any, dilation: Any, padding: Any, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
  """Max over each window of the last len(kernel_size) dims (2 for an int kernel_size); return_indices: also each
  max's flat index into those dims of the input (the first of equal maxima in the window, as torch)."""
  from compiler.tensor import Tensor
  k, st, dl, pads, extra = _pool_args(x, kernel_size, stride, dilation, padding, ceil_mode, "max_pool2d")
  axes = tuple(range(-1, -len(k) - 1, -1))
  full = tuple((pb, pa + e) for (pb, pa), e in zip(pads, extra))
  win = pool(_spatial_pad(x, full, dtypes.min(x.dtype)), k, st, dl, "max_pool2d")
  if not return_indices:
    return win.max(axes)
  # each position numbered from the back (numel .. 1, padding 0): the largest number among a window's maxima is
  # its first one in row-major order
  spatial = x.shape[-len(k):]
  numel = math.prod(spatial)
  back = Tensor.arange(numel, 0, -1, dtype=dtypes.int32).reshape(spatial)
  back_win = pool(_spatial_pad(back, full, 0), k, st, dl, "max_pool2d")
  m = win.max(axes)
  hit = win == m.reshape(m.shape + (1,) * len(k))
  return m, numel - hit.where(back_win, 0).max(axes)


def max_unpool2d(x: Tensor, indices: Tensor, kernel_size: Any, stride: Any, dilation: Any, padding: Any,
                 output_size: Any) -> Tensor:
  """x's values placed at their flat indices into the last len(kernel_size) dims of a tensor of output_size (by
  default the size max_pool2d's arguments invert), zeros elsewhere."""
  from compiler.tensor import ArgumentError, Tensor
  n = 2 if _is_int(kernel_size) else len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 0
  k = _tuple(kernel_size, max(n, 1), "max_unpool2d", "kernel_size")
  n = len(k)
  if not isinstance(indices, Tensor) or indices.shape != x.shape or not dtypes.is_int(indices.dtype) or \
      indices.dtype == dtypes.bool or x.ndim < n:
    raise ArgumentError(f"Tensor.max_unpool2d: indices must be an integer tensor of the input's shape {x.shape}, "
                        f"got {getattr(indices, 'dtype', type(indices).__name__)} {getattr(indices, 'shape', '')}")
  prefix, spatial = x.shape[:-n], x.shape[-n:]
  if output_size is None:
    st = k if stride is None else _tuple(stride, n, "max_unpool2d", "stride")
    dl, pads = _tuple(dilation, n, "max_unpool2d", "dilation"), _pads(padding, n, "max_unpool2d")
    out = tuple((i - 1) * s - (pb + pa) + d * (kk - 1) + 1 for i, s, (pb, pa), d, kk in zip(spatial, st, pads, dl, k))
  else:
    out = tuple(int(s) for s in tuple(output_size)[-n:])
  if len(out) != n or any(o <= 0 for o in out):
    raise ArgumentError(f"Tensor.max_unpool2d: invalid output size {out} for input {x.shape}")
  size, count = math.prod(out), math.prod(spatial)
  # (..., size, count): which input element goes to each output position
  hot = indices.reshape(*prefix, 1, count) == Tensor.arange(size, dtype=indices.dtype).reshape(size, 1)
  vals = hot.where(x.reshape(*prefix, 1, count), 0).sum(-1)
  # overlapping windows can pick one element twice: it is written once (torch assigns), not added up
  hits = hot.sum(-1)
  return (hits > 1).where(vals / hits.maximum(1).cast(vals.dtype), vals).cast(x.dtype).reshape(*prefix, *out)


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any, dilation: Any, padding: Any, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
  """Mean over each window; count_include_pad counts the padding (never ceil_mode's overhang), as torch."""
  from compiler.tensor import Tensor
  k, st, dl, pads, extra = _pool_args(x, kernel_size, stride, dilation, padding, ceil_mode, "avg_pool2d")
  axes = tuple(range(-1, -len(k) - 1, -1))
  full = tuple((pb, pa + e) for (pb, pa), e in zip(pads, extra))
  win = pool(_spatial_pad(x, full), k, st, dl, "avg_pool2d")
  if not any(extra) and (count_include_pad or not any(b or a for b, a in pads)):
    return win.mean(axes)
  # the divisor per window: how many of its elements are input (and padding, if counted)
  ones = Tensor.ones(*x.shape[-len(k):], dtype=dtypes.bool)
  counted = ones.pad(pads, value=count_include_pad).pad(tuple((0, e) for e in extra))
  count = pool(counted, k, st, dl, "avg_pool2d").sum(axes)
  xs = x._float()
  return win.sum(axes).cast(xs.dtype) / count.cast(xs.dtype)
