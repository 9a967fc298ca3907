"""Tensor methods: cumulative ops (cumsum, cumprod, cummax, cummin, logcumsumexp), logsumexp, std_mean/var_mean,
sort/argsort/topk.

A scan over n elements is an (n, n) triangle mask reduced along one axis, so it lowers to a plain REDUCE the
scheduler fuses like any other (tinygrad pools a padded copy: the same work); long axes go in two stages."""
from __future__ import annotations

import math
from typing import Any

from compiler.dtype import dtypes
from compiler.tensor_mixins.indexing import pick
from compiler.uop import Ops

_SPLIT = 256  # a scan longer than 2 * _SPLIT runs per block of _SPLIT, then over the blocks' totals


def order_flip(x: Any) -> Any:
  """An order-reversing bijection of x's values (min via max), exact for every dtype, NaN kept."""
  if x.dtype == dtypes.bool:
    return x.logical_not()
  return -x if dtypes.is_float(x.dtype) else x._flipped()


def _identity(op: Ops, dt: Any) -> Any:
  if op is Ops.ADD:
    return -0.0 if dtypes.is_float(dt) else 0  # -0.0 + x is x for every x, -0.0 included
  return 1 if op is Ops.MUL else dtypes.min(dt)


def _reduce_last(x: Any, op: Ops) -> Any:
  if op is Ops.ADD:
    return x.sum(-1)
  return x.prod(-1) if op is Ops.MUL else x.max(-1)


def _scan_last(x: Any, op: Ops) -> Any:
  """Inclusive scan over the last axis of x (n >= 1) by a lower-triangle mask."""
  T = type(x)
  n = x.shape[-1]
  if n > 2 * _SPLIT:
    return _scan_blocks(x, op)
  ar = T.arange(n, dtype=dtypes.int32)
  tri = ar.reshape(n, 1) >= ar.reshape(1, n)  # (out j, in i): i <= j
  dt = x.sum().dtype if op is Ops.ADD else x.prod().dtype if op is Ops.MUL else x.dtype
  xe = x.cast(dt).unsqueeze(-2)
  return _reduce_last(tri.where(xe, T.full((), _identity(op, dt), dt)), op)


def _scan_blocks(x: Any, op: Ops) -> Any:
  n = x.shape[-1]
  nb = math.ceil(n / _SPLIT)
  dt = x.sum().dtype if op is Ops.ADD else x.prod().dtype if op is Ops.MUL else x.dtype
  x = x.cast(dt).pad((None,) * (x.ndim - 1) + ((0, nb * _SPLIT - n),), _identity(op, dt))
  blocks = _scan_last(x.reshape(*x.shape[:-1], nb, _SPLIT), op)  # (..., nb, SPLIT)
  totals = blocks.shrink((None,) * (blocks.ndim - 1) + ((_SPLIT - 1, _SPLIT),)).reshape(*x.shape[:-1], nb)
  before = _scan_last(totals, op).pad((None,) * (totals.ndim - 1) + ((1, 0),), _identity(op, dt))
  before = before.shrink((None,) * (totals.ndim - 1) + ((0, nb),)).unsqueeze(-1)
  ret = blocks + before if op is Ops.ADD else blocks * before if op is Ops.MUL else blocks.maximum(before)
  ret = ret.cast(dt).reshape(*x.shape[:-1], nb * _SPLIT)
  return ret.shrink((None,) * (ret.ndim - 1) + ((0, n),))


class ReduceMixin:
  __slots__ = ()

  def _cumulative(self, axis: int, op: Ops, name: str) -> Any:
    if self.ndim == 0:
      self._axis(axis, name, 1)
      return _scan_last(self.reshape(1), op).reshape(())
    d = self._axis(axis, name)
    if self.shape[d] == 0:
      return self.cast(self.sum().dtype) if op is Ops.ADD else self.cast(self.prod().dtype) if op is Ops.MUL else self
    return _scan_last(self.transpose(d, -1), op).transpose(d, -1)

  def cumsum(self, axis: int = 0) -> Any:
    """Running sum along axis (ints accumulate in int32 or wider, bool as int, like sum)."""
    return self._cumulative(axis, Ops.ADD, "cumsum")

  def cumprod(self, axis: int) -> Any:
    """Running product along axis."""
    return self._cumulative(axis, Ops.MUL, "cumprod")

  def cummax(self, axis: int = 0) -> tuple[Any, Any]:
    """(running max, index of the last element equal to it so far) along axis, as torch (NaN is the max)."""
    T = type(self)
    if self.ndim == 0:
      self._axis(axis, "cummax", 1)
      return self, T.full((), 0, dtypes.int32)
    d = self._axis(axis, "cummax")
    values = self._cumulative(d, Ops.MAX, "cummax")
    n = self.shape[d]
    if n == 0:
      return values, T.zeros(*self.shape, dtype=dtypes.int32)
    x, v = self.transpose(d, -1), values.transpose(d, -1)
    match = x.unsqueeze(-2) == v.unsqueeze(-1)  # (..., j, i)
    if dtypes.is_float(self.dtype):
      match = match | ((x != x).unsqueeze(-2) & (v != v).unsqueeze(-1))
    ar = T.arange(n, dtype=dtypes.int32)
    match = match & (ar.reshape(n, 1) >= ar.reshape(1, n))
    idx = match.where(ar.reshape(1, n), -1).max(-1)
    return values, idx.transpose(d, -1)

  def cummin(self, axis: int = 0) -> tuple[Any, Any]:
    """(running min, index of the last element equal to it so far) along axis."""
    values, idx = order_flip(self).cummax(axis)
    return order_flip(values), idx

  def logsumexp(self, axis: Any = None, keepdim: bool = False) -> Any:
    """log(sum(exp(x))) without overflow: shifted by the max (by 0 where the max is infinite). The shift is detached:
    its two paths' gradients cancel, to rounding, which went to the max's element only."""
    x = self._float()
    m = x.max(axis, keepdim=True).detach()
    m = (m.abs() != math.inf).where(m, x.full((), 0, x.dtype))
    ret = (x - m).exp().sum(axis, keepdim=True).log() + m
    return ret if keepdim else ret._squeeze_axes(self._axes(axis, "logsumexp"))

  def _squeeze_axes(self, axes: tuple[int, ...]) -> Any:
    """self without the listed size-1 axes."""
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  def logcumsumexp(self, axis: int = 0) -> Any:
    """log(cumsum(exp(x))) along axis, shifted by the running max (detached, as logsumexp's). Above the diagonal the
    exponent is -inf, not masked after exp (double where): x_i - c_j there can overflow exp, a nan gradient."""
    T = type(self)
    x = self._float()
    if x.ndim == 0:
      x._axis(axis, "logcumsumexp", 1)
      return x
    d = x._axis(axis, "logcumsumexp")
    n = x.shape[d]
    if n == 0:
      return x
    xt = x.transpose(d, -1)
    c = xt._cumulative(xt.ndim - 1, Ops.MAX, "logcumsumexp").detach()
    c = (c.abs() != math.inf).where(c, x.full((), 0, x.dtype))
    ar = T.arange(n, dtype=dtypes.int32)
    tri = ar.reshape(n, 1) >= ar.reshape(1, n)
    e = tri.where(xt.unsqueeze(-2) - c.unsqueeze(-1), x.full((), -math.inf, x.dtype)).exp()
    return (e.sum(-1).log() + c).transpose(d, -1)

  def var_mean(self, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Any, Any]:
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

  def std_mean(self, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Any, Any]:
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  # ---- sorting
  def sort(self, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
    """(sorted values, their int32 indices) along dim; stable (equal values keep their order), NaN sorts largest."""
    T = type(self)
    if self.ndim == 0:
      self._axis(dim, "sort", 1)
      return self, T.full((), 0, dtypes.int32)
    d = self._axis(dim, "sort")
    n = self.shape[d]
    if n <= 1:
      return self, T.zeros(*self.shape, dtype=dtypes.int32)
    x = self.transpose(d, -1)
    xi, xj = x.unsqueeze(-1), x.unsqueeze(-2)  # (..., i, 1) and (..., 1, j)
    before = (xj > xi) if descending else (xj < xi)
    same = xj == xi
    if dtypes.is_float(self.dtype):
      ni, nj = xi != xi, xj != xj
      before = (before | (nj & ni.logical_not())) if descending else (before | (ni & nj.logical_not()))
      same = same | (ni & nj)
    ar = T.arange(n, dtype=dtypes.int32)
    earlier = ar.reshape(1, n) < ar.reshape(n, 1)  # j < i
    rank = (before | (same & earlier)).cast(dtypes.int32).sum(-1)  # (..., i): where element i goes
    slot = rank.unsqueeze(-2) == ar.reshape(n, 1)  # (..., r, i)
    values = pick(slot, x.unsqueeze(-2), -1)
    idx = pick(slot, ar.reshape(1, n), -1)
    return values.transpose(d, -1), idx.transpose(d, -1)

  def argsort(self, dim: int = -1, descending: bool = False) -> Any:
    return self.sort(dim, descending)[1]

  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Any, Any]:
    """The k largest (or smallest) values along dim and their indices, sorted."""
    if not sorted_:
      raise NotImplementedError("Tensor.topk: sorted_=False is not supported")
    d = self._axis(dim, "topk", max(self.ndim, 1)) if self.ndim else 0
    n = self.shape[d] if self.ndim else 1
    if not isinstance(k, int) or not 0 <= k <= n:
      raise ValueError(f"Tensor.topk: k={k!r} is out of range for dim {dim} of shape {self.shape}")
    x, idx = self.sort(dim, descending=largest)
    if self.ndim == 0:
      return x, idx
    keep = tuple((0, k) if i == d else None for i in range(self.ndim))
    return x.shrink(keep), idx.shrink(keep)
