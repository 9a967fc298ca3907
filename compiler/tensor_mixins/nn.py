"""Tensor methods for networks: linear, layernorm, convolution (conv2d, conv_transpose2d), pooling (max, avg,
max_unpool2d; windows are movement ops, tinygrad's approach), dropout, normalize, losses, scaled_dot_product_attention,
interpolate (tinygrad's signatures; values as torch)."""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import numpy as np

from compiler.dtype import dtypes
from compiler.tensor_mixins._args import ArgumentError, is_int, make_tuple, pool_pads

_REDUCTIONS = ("none", "sum", "mean")


def _spatial_pad(x: Any, pads: tuple[tuple[int, int], ...], value: Any = 0.0) -> Any:
  """x padded on its last len(pads) dims; a negative pad crops."""
  lead = (None,) * (x.ndim - len(pads))
  if any(b < 0 or a < 0 for b, a in pads):
    spatial = x.shape[-len(pads):]
    if any(max(0, -b) + max(0, -a) > s for (b, a), s in zip(pads, spatial)):
      raise ArgumentError(f"Tensor.conv2d: padding {pads} crops more than the input of shape {x.shape}")
    x = x.shrink(lead + tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pads, spatial)))
    pads = tuple((max(0, b), max(0, a)) for b, a in pads)
  return x.pad(lead + tuple(pads), value=value)


def _pool_args(x: Any, kernel_size: Any, stride: Any, dilation: Any, padding: Any, ceil_mode: bool, name: str):
  """Kernel, stride, dilation, (before, after) pads and the extra right pads that ceil_mode's last windows need."""
  n = 2 if is_int(kernel_size) else len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 0
  k = make_tuple(kernel_size, max(n, 1), name, "kernel_size", positive=True)
  n = len(k)
  if x.ndim < n:
    raise ValueError(f"Tensor.{name}: needs an input of at least {n} dims, got shape {x.shape}")
  st = k if stride is None else make_tuple(stride, n, name, "stride", positive=True)
  dl, pads = make_tuple(dilation, n, name, "dilation", positive=True), pool_pads(padding, n, name)
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


def _one_hot_along(y: Any, n: int, dim: int) -> Any:
  """y with a new axis of size n at dim, true where the index matches."""
  T = type(y)
  d = dim % (y.ndim + 1)
  ar = T.arange(n, dtype=dtypes.int32) if n else T.zeros(0, dtype=dtypes.int32)
  return y.unsqueeze(d) == ar.reshape((n,) + (1,) * (y.ndim - d))


def _along_axis(v: Any, axis: int, ndim: int) -> Any:
  """A 1-d v shaped to run along axis of an ndim-d tensor."""
  return v.reshape(tuple(-1 if k == axis % ndim else 1 for k in range(ndim)))


def _gather_along(x: Any, axis: int, idx: Any) -> Any:
  """x indexed along axis by the 1-d idx (every other dim kept)."""
  shape = list(x.shape)
  shape[axis] = idx.shape[0]
  return x.gather(axis, _along_axis(idx, axis, x.ndim).expand(shape))


def _int16_linear_weights(n_in: int, n_out: int, align_corners: bool) -> tuple[np.ndarray, np.ndarray, int]:
  """torch's uint8 linear resampling taps along one axis: first source index and integer weights (output, tap), and
  their precision (bits): weights in float64 as its _compute_weights_aa, then rounded to int16 fixed point."""
  if align_corners:
    scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
  else:
    scale = n_in / n_out
  delta = 0.5 if align_corners else 0.0
  taps = 3  # a triangle of support 1: at most 3 source samples (one of them weighted 0)
  first, w = np.zeros(n_out, np.int64), np.zeros((n_out, taps), np.float64)
  for i in range(n_out):
    center = scale * (i + 0.5 - delta)
    xmin = max(int(center - 1.0 + 0.5 + delta), 0)  # int(): C's truncation toward zero, as torch's static_cast
    xsize = min(int(center + 1.0 + 0.5 + delta), n_in) - xmin
    ws = [max(0.0, 1.0 - abs(j + xmin - center + 0.5 - delta)) for j in range(xsize)]
    total = sum(ws)
    first[i] = xmin
    w[i, :xsize] = [v / total for v in ws] if total else ws
  precision = 0
  while precision < 22 and int(0.5 + w.max() * (1 << (precision + 1))) < (1 << 15):
    precision += 1
  return first, np.floor(0.5 + w * (1 << precision)), precision


def _int_linear_axis(x: Any, axis: int, n_out: int, align_corners: bool) -> Any:
  """One separable pass of linear resampling of an integer tensor, rounded to its dtype as torch's uint8 kernels:
  (sum(w_int * x) + 2^(p-1)) >> p, clamped to the dtype's range."""
  T, n_in = type(x), x.shape[axis]
  first, w_int, p = _int16_linear_weights(n_in, n_out, align_corners)
  taps = w_int.shape[1]
  idx = np.minimum(first[:, None] + np.arange(taps), n_in - 1)  # a clipped tap has weight 0
  # the products and sums are integers below 2^24 for 8-bit data (exact in float32), below 2^53 for wider
  acc_dt = dtypes.float32 if x.dtype.itemsize == 1 else dtypes.float64
  both = _gather_along(x.cast(acc_dt), axis, T(idx.T.reshape(-1).astype(np.int32)))
  acc = None
  for k, part in enumerate(both.split(n_out, axis)):
    term = part * _along_axis(T(w_int[:, k].astype(acc_dt.np)), axis, x.ndim)
    acc = term if acc is None else acc + term
  out = ((acc + (1 << (p - 1))) * (1.0 / (1 << p))).floor() if p else acc
  return out.clip(dtypes.min(x.dtype), dtypes.max(x.dtype)).cast(x.dtype)


class NnMixin:
  __slots__ = ()

  def linear(self, weight: Any, bias: Any | None = None) -> Any:
    """self @ weight + bias, weight shaped (in, out) (as tinygrad)."""
    x = self * weight if weight.ndim == 1 else self.dot(weight)
    return x + bias if bias is not None else x

  def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Any:
    """(x - mean) / sqrt(var + eps) over axis (biased variance), without affine parameters."""
    x = self._float()
    y = x - x.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

  # ---- convolution and pooling
  def conv2d(self, weight: Any, bias: Any | None = None, groups: int = 1, stride: Any = 1, dilation: Any = 1,
             padding: Any = 0) -> Any:
    """n-d convolution (cross-correlation, as torch): self (bs, cin, *spatial), weight (cout, cin/groups, *kernel);
    the number of spatial dims is weight.ndim - 2 (conv1d, conv2d, conv3d, ...)."""
    x = self
    if not isinstance(weight, type(self)) or not (bias is None or isinstance(bias, type(self))):
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
    st = make_tuple(stride, n, "conv2d", "stride", positive=True)
    dl = make_tuple(dilation, n, "conv2d", "dilation", positive=True)
    pads = pool_pads(padding, n, "conv2d", negative=True)
    x = _spatial_pad(x, pads)._pool(ks, st, dl, "conv2d")  # (bs, cin_, *o, *k)
    rcout, o_ = cout // groups, x.shape[2:2 + n]
    x = x.reshape(bs, groups, cin, 1, *o_, *ks).expand(bs, groups, cin, rcout, *o_, *ks)
    x = x.permute(0, 1, 3, *range(4, 4 + n), 2, *range(4 + n, 4 + 2 * n))  # (bs, groups, rcout, *o, cin, *k)
    w = weight.reshape(1, groups, rcout, *(1,) * n, cin, *ks)
    ret = (x * w).sum(tuple(range(-1, -n - 2, -1))).reshape(bs, cout, *o_)
    return ret if bias is None else ret + bias.reshape(1, cout, *(1,) * n)

  def max_pool2d(self, kernel_size: Any = (2, 2), stride: Any = None, dilation: Any = 1, padding: Any = 0,
                 ceil_mode: bool = False, return_indices: bool = False) -> Any | tuple[Any, Any]:
    """Max over each window of the last len(kernel_size) dims (2 for an int kernel_size; n-d, as tinygrad's);
    return_indices: also each max's flat index into those dims of the input (the first of equal maxima in the window,
    as torch)."""
    x = self
    k, st, dl, pads, extra = _pool_args(x, kernel_size, stride, dilation, padding, ceil_mode, "max_pool2d")
    axes = tuple(range(-1, -len(k) - 1, -1))
    full = tuple((pb, pa + e) for (pb, pa), e in zip(pads, extra))
    win = _spatial_pad(x, full, dtypes.min(x.dtype))._pool(k, st, dl, "max_pool2d")
    if not return_indices:
      return win.max(axes)
    # each position numbered from the back (numel .. 1, padding 0): the largest number among a window's maxima is
    # its first one in row-major order
    spatial = x.shape[-len(k):]
    numel = math.prod(spatial)
    back = self.arange(numel, 0, -1, dtype=dtypes.int32).reshape(spatial)
    back_win = _spatial_pad(back, full, 0)._pool(k, st, dl, "max_pool2d")
    m = win.max(axes)
    hit = win == m.reshape(m.shape + (1,) * len(k))
    return m, numel - hit.where(back_win, 0).max(axes)

  def avg_pool2d(self, kernel_size: Any = (2, 2), stride: Any = None, dilation: Any = 1, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True) -> Any:
    """Mean over each window of the last len(kernel_size) dims (n-d, as tinygrad's); count_include_pad counts the
    padding (never ceil_mode's overhang), as torch."""
    x = self
    k, st, dl, pads, extra = _pool_args(x, kernel_size, stride, dilation, padding, ceil_mode, "avg_pool2d")
    axes = tuple(range(-1, -len(k) - 1, -1))
    full = tuple((pb, pa + e) for (pb, pa), e in zip(pads, extra))
    win = _spatial_pad(x, full)._pool(k, st, dl, "avg_pool2d")
    if not any(extra) and (count_include_pad or not any(b or a for b, a in pads)):
      return win.mean(axes)
    # the divisor per window: how many of its elements are input (and padding, if counted)
    ones = self.ones(*x.shape[-len(k):], dtype=dtypes.bool)
    counted = ones.pad(pads, value=count_include_pad).pad(tuple((0, e) for e in extra))
    count = counted._pool(k, st, dl, "avg_pool2d").sum(axes)
    xs = x._float()
    return win.sum(axes).cast(xs.dtype) / count.cast(xs.dtype)

  def max_unpool2d(self, indices: Any, kernel_size: Any = (2, 2), stride: Any = None, dilation: Any = 1,
                   padding: Any = 0, output_size: Sequence[int] | None = None) -> Any:
    """The partial inverse of max_pool2d(return_indices=True): each value at its flat index into the last
    len(kernel_size) dims of a tensor of output_size (by default the size max_pool2d's arguments invert), zeros
    elsewhere."""
    x = self
    n = 2 if is_int(kernel_size) else len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 0
    k = make_tuple(kernel_size, max(n, 1), "max_unpool2d", "kernel_size", positive=True)
    n = len(k)
    if not isinstance(indices, type(self)) or indices.shape != x.shape or not dtypes.is_int(indices.dtype) or \
        indices.dtype == dtypes.bool or x.ndim < n:
      raise ArgumentError(f"Tensor.max_unpool2d: indices must be an integer tensor of the input's shape {x.shape}, "
                          f"got {getattr(indices, 'dtype', type(indices).__name__)} {getattr(indices, 'shape', '')}")
    prefix, spatial = x.shape[:-n], x.shape[-n:]
    if output_size is None:
      st = k if stride is None else make_tuple(stride, n, "max_unpool2d", "stride", positive=True)
      dl = make_tuple(dilation, n, "max_unpool2d", "dilation", positive=True)
      pads = pool_pads(padding, n, "max_unpool2d")
      out = tuple((i - 1) * s - (pb + pa) + d * (kk - 1) + 1 for i, s, (pb, pa), d, kk in zip(spatial, st, pads, dl, k))
    else:
      out = tuple(int(s) for s in tuple(output_size)[-n:])
    if len(out) != n or any(o <= 0 for o in out):
      raise ArgumentError(f"Tensor.max_unpool2d: invalid output size {out} for input {x.shape}")
    size, count = math.prod(out), math.prod(spatial)
    # (..., size, count): which input element goes to each output position
    hot = indices.reshape(*prefix, 1, count) == self.arange(size, dtype=indices.dtype).reshape(size, 1)
    vals = hot.where(x.reshape(*prefix, 1, count), 0).sum(-1)
    # overlapping windows can pick one element twice: it is written once (torch assigns), not added up
    hits = hot.sum(-1)
    return (hits > 1).where(vals / hits.maximum(1).cast(vals.dtype), vals).cast(x.dtype).reshape(*prefix, *out)

  # ---- layers as functions
  def sequential(self, ll: Sequence[Callable[[Any], Any]]) -> Any:
    """Apply each callable of ll in turn (tinygrad: a model's layer list)."""
    return functools.reduce(lambda x, f: f(x), ll, self)

  def dropout(self, p: float = 0.5) -> Any:
    """While Tensor.training: zero each element with probability p and scale the rest by 1 / (1 - p); otherwise
    self (as tinygrad)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
      raise ValueError(f"Tensor.dropout: p={p!r} is not in [0, 1] (input of shape {self.shape})")
    T = type(self)
    if not T.training or p == 0:
      return self
    if p == 1:
      return self.zeros_like()
    return (T.rand(*self.shape) >= p).where(self, 0) / (1.0 - p)

  def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Any:
    """self / max(||self||_p along dim, eps), as torch.nn.functional.normalize."""
    x = self._float()
    if p == math.inf:
      norm = x.abs().max(dim, keepdim=True)
    elif p == 1:
      norm = x.abs().sum(dim, keepdim=True)
    else:
      s = (x.square() if p == 2 else x.abs().pow(p)).sum(dim, keepdim=True)
      # a zero vector's norm is 0 with gradient 0 (as torch); the root of 0 has an infinite one
      pos = s > 0
      root = pos.where(s, 1).sqrt() if p == 2 else pos.where(s, 1).pow(1 / p)
      norm = pos.where(root, 0)
    return x / norm.maximum(eps)

  # ---- losses
  def _do_reduction(self, reduction: str = "mean") -> Any:
    if reduction not in _REDUCTIONS:
      raise ValueError(f"Tensor loss: reduction={reduction!r} must be one of {_REDUCTIONS}")
    return self if reduction == "none" else self.sum() if reduction == "sum" else self.mean()

  def binary_crossentropy(self, Y: Any, reduction: str = "mean") -> Any:
    """self holds probabilities; each log is clamped at -100, as torch's BCELoss, and so is its derivative torch's,
    (p - y) / max(p (1 - p), 1e-12), also at p = 0 and 1 where the clamped logs have none: the loss is computed from
    the detached p (Y's derivative stays log(1 - p) - log(p)) plus (p - detached p) times that slope, which is 0."""
    def log(p: Any) -> Any:
      pos = p > 0
      return pos.where(pos.where(p, 1.0).log().maximum(-100), -100.0)
    x = self._float()
    p = x.detach()
    slope = ((p - Y) / (p * (1 - p)).maximum(1e-12)).detach()
    return (-Y * log(p) - (1 - Y) * log(1 - p) + (x - p) * slope)._do_reduction(reduction)

  def binary_crossentropy_logits(self, Y: Any, reduction: str = "mean", pos_weight: Any = None) -> Any:
    """self holds logits (torch's BCEWithLogitsLoss), computed through logsigmoid so large logits don't overflow."""
    x = self._float()
    log_p, log_q = x.logsigmoid(), (-x).logsigmoid()
    w = 1 if pos_weight is None else pos_weight
    return (-(w * Y * log_p + (1 - Y) * log_q))._do_reduction(reduction)

  def sparse_categorical_crossentropy(self, Y: Any, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Any:
    """self holds logits with the classes on the last axis, Y the labels (ignore_index is left out)."""
    if not 0.0 <= label_smoothing <= 1.0:
      raise ValueError(f"Tensor.sparse_categorical_crossentropy: label_smoothing={label_smoothing} not in [0, 1]")
    if self.shape[:-1] != Y.shape:
      raise ValueError(f"Tensor.sparse_categorical_crossentropy: logits {self.shape} don't match labels {Y.shape}")
    log_probs = self.log_softmax(-1)
    y = _one_hot_along(Y, self.shape[-1], -1)
    keep, count = None, Y.numel()  # without an ignore_index every label counts: no mask in the graph
    if ignore_index != -1:
      keep = Y != ignore_index
      y, count = y & keep.unsqueeze(-1), keep.sum()
    unreduced = y.where(log_probs, 0).sum(-1)
    if label_smoothing:  # (only then: 0 * the mean of log-probs would make a -inf logit's loss nan, unlike torch's)
      smooth = log_probs.mean(-1) if keep is None else log_probs.mean(-1) * keep
      unreduced = (1 - label_smoothing) * unreduced + label_smoothing * smooth
    if reduction == "mean":
      return -unreduced.sum() / count
    return -unreduced._do_reduction(reduction)

  def cross_entropy(self, Y: Any, reduction: str = "mean", label_smoothing: float = 0.0) -> Any:
    """self holds logits (classes on axis 1, or 0 for 1-d); Y class indices or class probabilities."""
    if not 0.0 <= label_smoothing <= 1.0:
      raise ValueError(f"Tensor.cross_entropy: label_smoothing={label_smoothing} not in [0, 1]")
    cdim = 0 if self.ndim == 1 else 1
    n = self.shape[cdim]
    lsm = self.log_softmax(cdim)
    if self.shape != Y.shape:
      if self.shape[:cdim] + self.shape[cdim + 1:] != Y.shape:
        raise RuntimeError(f"Tensor.cross_entropy: logits {self.shape} and target {Y.shape} don't match")
      # class indices: select, as torch does (a product with a one-hot would turn a -inf log-prob into nan)
      loss = -_one_hot_along(Y, n, cdim).where(lsm, 0).sum(cdim)
      if label_smoothing:
        loss = (1 - label_smoothing) * loss - label_smoothing * lsm.mean(cdim)
      return loss._do_reduction(reduction)
    Y = (1 - label_smoothing) * Y + label_smoothing / n
    return -(lsm * Y).sum(cdim)._do_reduction(reduction)

  def nll_loss(self, Y: Any, weight: Any = None, ignore_index: int | None = None, reduction: str = "mean") -> Any:
    """self holds log-probabilities (classes on axis 1), Y the labels, as torch.nn.functional.nll_loss."""
    cdim = 0 if self.ndim == 1 else 1
    if self.shape[:cdim] + self.shape[cdim + 1:] != Y.shape:
      raise RuntimeError(f"Tensor.nll_loss: input {self.shape} and target {Y.shape} don't match")
    w = Y.full_like(1, self._float().dtype) if weight is None else weight.gather(0, Y.flatten()).reshape(Y.shape)
    if ignore_index is not None:
      w = (Y != ignore_index).where(w, 0)
    picked = self.gather(cdim, Y.unsqueeze(cdim)).squeeze(cdim) if self.ndim > 1 else self.gather(0, Y.reshape(1)) \
      .reshape(())
    nll = -picked * w
    return nll.sum() / w.sum() if reduction == "mean" else nll._do_reduction(reduction)

  # ---- attention
  def scaled_dot_product_attention(self, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                                   is_causal: bool = False, scale: float | None = None,
                                   enable_gqa: bool = False) -> Any:
    """softmax(q k^T * scale + mask) v; a bool mask keeps where true, is_causal masks the upper triangle; dropout_p
    drops attention weights while Tensor.training; enable_gqa repeats key/value heads (dim -3) to the query's."""
    if self.ndim < 2 or key.ndim < 2 or value.ndim < 2:
      raise ValueError(f"Tensor.scaled_dot_product_attention: needs query/key/value of at least 2 dims, got "
                       f"{self.shape}, {key.shape}, {value.shape}")
    if is_causal and attn_mask is not None:
      raise RuntimeError("Tensor.scaled_dot_product_attention: give attn_mask or is_causal, not both")
    if enable_gqa:
      if self.ndim < 3 or key.ndim < 3 or value.ndim < 3 or key.shape[-3] != value.shape[-3] or \
          not key.shape[-3] or self.shape[-3] % key.shape[-3]:
        raise RuntimeError(f"Tensor.scaled_dot_product_attention: enable_gqa needs the query's heads (dim -3) to be a "
                           f"multiple of key's and value's, got {self.shape}, {key.shape}, {value.shape}")
      key = key.repeat_interleave(self.shape[-3] // key.shape[-3], dim=-3)
      value = value.repeat_interleave(self.shape[-3] // value.shape[-3], dim=-3)
    q = self._float()
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    qk = q.matmul(key.transpose(-2, -1)) * s
    if is_causal:
      attn_mask = type(self).ones(qk.shape[-2], qk.shape[-1], dtype=dtypes.bool).tril()
    if attn_mask is not None:
      if attn_mask.dtype == dtypes.bool:
        qk = attn_mask.where(qk, -math.inf)
      else:
        qk = qk + attn_mask
    return qk.softmax(-1).dropout(dropout_p).matmul(value)

  # ---- resampling
  def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Any:
    """Resize the last len(size) dims: mode linear (bilinear, trilinear), nearest or nearest-exact."""
    T = type(self)
    modes = ("linear", "bilinear", "trilinear", "nearest", "nearest-exact")
    if not isinstance(size, (tuple, list)) or not size or len(size) > self.ndim or \
        not all(is_int(s) and s > 0 for s in size):
      raise ValueError(f"Tensor.interpolate: size {size!r} must be 1 to {self.ndim} positive ints for {self.shape}")
    if mode not in modes:
      raise ValueError(f"Tensor.interpolate: mode {mode!r} must be one of {modes}")
    linear = mode in ("linear", "bilinear", "trilinear")
    if align_corners and not linear:
      raise ValueError(f"Tensor.interpolate: align_corners needs a linear mode, got {mode!r}")
    if any(s == 0 for s in self.shape[-len(size):]):
      raise ValueError(f"Tensor.interpolate: can't resize the empty dims of {self.shape}")
    x = self
    for i in range(-1, -len(size) - 1, -1):
      n_in, n_out = self.shape[i], int(size[i])
      if n_out == n_in:  # the identity in every mode
        continue
      ar = T.arange(n_out, dtype=dtypes.float32)
      if linear and dtypes.is_int(self.dtype) and self.dtype != dtypes.bool:
        # rounded after each axis, as torch's uint8 kernels (a cast of the float result would truncate)
        x = _int_linear_axis(x, i, n_out, align_corners)
      elif linear:
        if align_corners:
          src = ar * ((n_in - 1) / (n_out - 1)) if n_out > 1 else ar * 0
        else:
          src = ((ar + 0.5) * (n_in / n_out) - 0.5).maximum(0)
        src = src.minimum(n_in - 1)
        lo = src.floor()
        lo_i = lo.cast(dtypes.int32)
        # both neighbours in one gather (one kernel per axis): indices lo then hi along the axis
        both = _gather_along(x._float(), i, T.stack(lo_i, (lo_i + 1).minimum(n_in - 1)).reshape(2 * n_out))
        lo_x, hi_x = both.split(n_out, i)
        x = lo_x.lerp(hi_x, _along_axis(src - lo, i, x.ndim))
      else:
        pos = (ar + 0.5) * (n_in / n_out) if mode == "nearest-exact" else ar * (n_in / n_out)
        x = _gather_along(x, i, pos.floor().cast(dtypes.int32).minimum(n_in - 1))
    return x.cast(self.dtype)

  # ---- transposed convolution
  def conv_transpose2d(self, weight: Any, bias: Any = None, groups: int = 1, stride: Any = 1, dilation: Any = 1,
                       padding: Any = 0, output_padding: Any = 0) -> Any:
    """The gradient of conv2d with respect to its input: weight (cin, cout/groups, *k), as torch."""
    T = type(self)
    if not isinstance(weight, T):
      raise TypeError(f"Tensor.conv_transpose2d: weight must be a Tensor, got {type(weight).__name__}")
    if weight.ndim < 3 or self.ndim != weight.ndim:
      raise ValueError(f"Tensor.conv_transpose2d: input {self.shape} and weight {weight.shape} need the same "
                       "number of dims (at least 3)")
    nd = weight.ndim - 2
    cin, k_ = weight.shape[0], weight.shape[2:]
    if not is_int(groups) or groups <= 0 or self.shape[1] != cin or cin % groups:
      raise ValueError(f"Tensor.conv_transpose2d: input {self.shape} and weight {weight.shape} don't match with "
                       f"groups={groups}")
    st = make_tuple(stride, nd, "conv_transpose2d", "stride")
    dl = make_tuple(dilation, nd, "conv_transpose2d", "dilation")
    op = make_tuple(output_padding, nd, "conv_transpose2d", "output_padding")
    pd = pool_pads(padding, nd, "conv_transpose2d", negative=True)  # (negative pads were always allowed here)
    if any(s <= 0 for s in st) or any(d <= 0 for d in dl) or any(o < 0 or (o >= s and o >= d)
                                                                  for o, s, d in zip(op, st, dl)):
      raise ValueError(f"Tensor.conv_transpose2d: invalid stride {st}, dilation {dl} or output_padding {op}")
    w = weight.reshape(groups, cin // groups, *weight.shape[1:]).transpose(1, 2)
    w = w.flip(tuple(range(3, w.ndim))).reshape(groups * weight.shape[1], cin // groups, *k_)
    x = self
    if any(s > 1 for s in st):
      # s - 1 zeros between neighbours: (n) -> (n, 1) -> pad to (n, s) -> (n * s) -> drop the trailing s - 1
      x = x.reshape(*x.shape[:2], *(v for n in x.shape[2:] for v in (n, 1)))
      x = x.pad((None, None, *(p for s in st for p in (None, (0, s - 1)))))
      x = x.reshape(*x.shape[:2], *(a * b for a, b in zip(x.shape[2::2], x.shape[3::2])))
      x = x.shrink((None, None, *((0, n - (s - 1)) for n, s in zip(x.shape[2:], st))))
    full = [((k - 1) * d - b, (k - 1) * d - a + o) for k, d, (b, a), o in zip(k_, dl, pd, op)]
    x = x.pad((None, None, *full))
    return x.conv2d(w, bias, groups=groups, dilation=dl, padding=0)
