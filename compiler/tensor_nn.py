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


def _pair(v: Any, name: str, what: str) -> tuple[int, int]:
  t = (v, v) if _is_int(v) else tuple(v) if isinstance(v, (tuple, list)) else ()
  if len(t) != 2 or not all(_is_int(x) and x > 0 for x in t):
    raise ValueError(f"Tensor.{name}: {what} must be a positive int or a pair of them, got {v!r}")
  return int(t[0]), int(t[1])


def _padding(p: Any, name: str) -> tuple[int, int, int, int]:
  """Flat torch-order padding (left, right, top, bottom) from an int, (ph, pw), or 4 ints."""
  if _is_int(p):
    t = (p, p, p, p)
  elif isinstance(p, (tuple, list)) and len(p) == 2:
    t = (p[1], p[1], p[0], p[0])
  elif isinstance(p, (tuple, list)) and len(p) == 4:
    t = tuple(p)
  else:
    raise ValueError(f"Tensor.{name}: padding must be an int, (ph, pw) or 4 ints, got {p!r}")
  if not all(_is_int(x) and x >= 0 for x in t):
    raise ValueError(f"Tensor.{name}: padding must be non-negative ints, got {p!r}")
  return int(t[0]), int(t[1]), int(t[2]), int(t[3])


def pool(x: Tensor, k: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...], name: str) -> Tensor:
  """Sliding windows over the last len(k) dims: (..., *i) -> (..., *o, *k), by repeat/shrink/reshape only."""
  nk = len(k)
  if x.ndim < nk:
    raise ValueError(f"Tensor.{name}: input of shape {x.shape} has fewer than {nk} dims")
  prefix, i_ = x.shape[:-nk], x.shape[-nk:]
  o_ = tuple((i - d * (kk - 1) - 1) // s + 1 for i, d, kk, s in zip(i_, dilation, k, stride))
  if any(o <= 0 for o in o_):
    raise ValueError(f"Tensor.{name}: window {k} (dilation {dilation}) doesn't fit input of shape {x.shape}")
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
  """2-d convolution (cross-correlation, as torch): x (bs, cin, H, W), weight (cout, cin/groups, kh, kw)."""
  from compiler.tensor import Tensor
  if not isinstance(weight, Tensor) or not (bias is None or isinstance(bias, Tensor)):
    raise TypeError(f"Tensor.conv2d: weight and bias must be Tensors, got {type(weight).__name__} and "
                    f"{type(bias).__name__}")
  if x.ndim != 4 or weight.ndim != 4:
    raise ValueError(f"Tensor.conv2d: needs a 4-d input and weight, got {x.shape} and {weight.shape}")
  bs, cin_ = x.shape[:2]
  cout, cin = weight.shape[:2]
  hw = weight.shape[2:]
  if not isinstance(groups, int) or groups <= 0 or groups * cin != cin_ or cout % groups:
    raise ValueError(f"Tensor.conv2d: input {x.shape} and weight {weight.shape} don't match with groups={groups}")
  if bias is not None and bias.shape != (cout,):
    raise ValueError(f"Tensor.conv2d: bias of shape {bias.shape}, expected ({cout},)")
  st, dl = _pair(stride, "conv2d", "stride"), _pair(dilation, "conv2d", "dilation")
  x = pool(x.pad(_padding(padding, "conv2d")), hw, st, dl, "conv2d")  # (bs, cin_, oy, ox, kh, kw)
  rcout, oyx = cout // groups, x.shape[2:4]
  x = x.reshape(bs, groups, cin, 1, *oyx, *hw).expand(bs, groups, cin, rcout, *oyx, *hw)
  x = x.permute(0, 1, 3, 4, 5, 2, 6, 7)  # (bs, groups, rcout, oy, ox, cin, kh, kw)
  ret = (x * weight.reshape(1, groups, rcout, 1, 1, cin, *hw)).sum((-1, -2, -3)).reshape(bs, cout, *oyx)
  return ret if bias is None else ret + bias.reshape(1, cout, 1, 1)


def _pool_args(x: Tensor, kernel_size: Any, stride: Any, dilation: Any, padding: Any, name: str):
  if x.ndim < 2:
    raise ValueError(f"Tensor.{name}: needs an input of at least 2 dims, got shape {x.shape}")
  k = _pair(kernel_size, name, "kernel_size")
  st = k if stride is None else _pair(stride, name, "stride")
  return k, st, _pair(dilation, name, "dilation"), _padding(padding, name)


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any, dilation: Any, padding: Any) -> Tensor:
  k, st, dl, pd = _pool_args(x, kernel_size, stride, dilation, padding, "max_pool2d")
  lowest = dtypes.min(x.dtype)
  return pool(x.pad(pd, value=lowest), k, st, dl, "max_pool2d").max((-1, -2))


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any, dilation: Any, padding: Any) -> Tensor:
  """Mean over each window, padding counted (torch's count_include_pad=True)."""
  k, st, dl, pd = _pool_args(x, kernel_size, stride, dilation, padding, "avg_pool2d")
  return pool(x.pad(pd), k, st, dl, "avg_pool2d").mean((-1, -2))
