"""Tensor methods: losses, scaled_dot_product_attention, interpolate, conv_transpose2d, einsum (tinygrad's
signatures; values as torch)."""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import numpy as np

from compiler.dtype import dtypes

_REDUCTIONS = ("none", "sum", "mean")


def _is_int(x: Any) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _tuple(v: Any, n: int, name: str, what: str) -> tuple[int, ...]:
  t = (v,) * n if _is_int(v) else tuple(v) if isinstance(v, (tuple, list)) else ()
  if len(t) != n or not all(_is_int(x) for x in t):
    raise ValueError(f"Tensor.{name}: {what} must be an int or {n} ints, got {v!r}")
  return tuple(int(x) for x in t)


def _pads(p: Any, n: int, name: str) -> list[tuple[int, int]]:
  """(before, after) per spatial dim from an int, one int per dim, or 2n flat ints (last dim first, as torch)."""
  if _is_int(p):
    return [(int(p), int(p))] * n
  if isinstance(p, (tuple, list)) and len(p) == n and all(_is_int(x) for x in p):
    return [(int(x), int(x)) for x in p]
  if isinstance(p, (tuple, list)) and len(p) == 2 * n and all(_is_int(x) for x in p):
    return [(int(p[2 * i]), int(p[2 * i + 1])) for i in reversed(range(n))]
  raise ValueError(f"Tensor.{name}: padding must be an int, {n} ints or {2 * n} ints, got {p!r}")


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

  def max_unpool2d(self, indices: Any, kernel_size: Any = (2, 2), stride: Any = None, dilation: Any = 1,
                   padding: Any = 0, output_size: Sequence[int] | None = None) -> Any:
    """The partial inverse of max_pool2d(return_indices=True): each value at its index, zeros elsewhere."""
    from compiler import tensor_nn
    return tensor_nn.max_unpool2d(self, indices, kernel_size, stride, dilation, padding, output_size)

  # ---- resampling
  def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Any:
    """Resize the last len(size) dims: mode linear (bilinear, trilinear), nearest or nearest-exact."""
    T = type(self)
    modes = ("linear", "bilinear", "trilinear", "nearest", "nearest-exact")
    if not isinstance(size, (tuple, list)) or not size or len(size) > self.ndim or \
        not all(_is_int(s) and s > 0 for s in size):
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
    if not _is_int(groups) or groups <= 0 or self.shape[1] != cin or cin % groups:
      raise ValueError(f"Tensor.conv_transpose2d: input {self.shape} and weight {weight.shape} don't match with "
                       f"groups={groups}")
    st = _tuple(stride, nd, "conv_transpose2d", "stride")
    dl = _tuple(dilation, nd, "conv_transpose2d", "dilation")
    op = _tuple(output_padding, nd, "conv_transpose2d", "output_padding")
    pd = _pads(padding, nd, "conv_transpose2d")
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

  # ---- einsum
  @staticmethod
  def einsum(formula: str, *operands: Any, dtype: Any = None) -> Any:
    """Einstein summation ("ij,jk->ik", implicit output, "..." broadcast dims), as numpy.einsum."""
    from compiler.tensor_mixins.einsum import einsum
    return einsum(formula, *operands, dtype=dtype)
