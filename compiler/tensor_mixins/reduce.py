"""Tensor methods that reduce: sum, prod, max/min, any/all, mean/var/std, argmax/argmin, matmul/dot, softmax and its
kin, cumulative ops (cumsum, cumprod, cummax, cummin, logcumsumexp), logsumexp, std_mean/var_mean, sort/argsort/topk,
einsum.

A scan over n elements is an (n, n) triangle mask reduced along one axis, so it lowers to a plain REDUCE the
scheduler fuses like any other (tinygrad pools a padded copy: the same work); long axes go in two stages. einsum is a
broadcast product and a sum: every operand permuted to one letter order, size-1 dims elsewhere."""
from __future__ import annotations

import math
import string
from typing import Any, Sequence

import numpy as np

from compiler.device import check_same_device
from compiler.dtype import DType, dtypes, least_upper_dtype
from compiler.schedule.shape import shape_of
from compiler.tensor_mixins._args import ArgumentError, broadcast_shape, to_dtype
from compiler.tensor_mixins.indexing import pick
from compiler.uop import Ops, UOp

_ACC_DTYPES: dict[DType, DType] = {}  # dtype -> its sum's accumulator (least_upper_dtype's walk, once a dtype)
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


def _parse(formula: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
  """Each operand's letters and the output's, with "..." spelled out as letters the formula doesn't use."""
  f = formula.replace(" ", "")
  lhs, arrow, rhs = f.partition("->")
  ins = lhs.split(",")
  if len(ins) != len(shapes):
    raise ArgumentError(f"Tensor.einsum: formula {formula!r} names {len(ins)} operands, got {len(shapes)}")
  spare = [c for c in string.ascii_letters if c not in f]
  n_ell = max((len(s) - len(t.replace("...", "")) for t, s in zip(ins, shapes) if "..." in t), default=0)
  ell = "".join(spare[:n_ell])
  letters = []
  for t, s in zip(ins, shapes):
    if t.count("...") > 1 or (arrow and rhs.count("...") > 1):
      raise ArgumentError(f"Tensor.einsum: more than one ... in {formula!r}")
    k = len(s) - len(t.replace("...", ""))
    t = t.replace("...", ell[n_ell - k:] if k else "") if "..." in t else t
    if len(t) != len(s) or not all(c in string.ascii_letters for c in t):
      raise ArgumentError(f"Tensor.einsum: {t!r} of {formula!r} doesn't fit an operand of shape {s}")
    letters.append(t)
  if arrow:
    out = rhs.replace("...", ell)
  else:
    counts = {c: sum(t.count(c) for t in letters) for c in set("".join(letters))}
    out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
  if len(set(out)) != len(out) or any(c not in "".join(letters) for c in out):
    raise ArgumentError(f"Tensor.einsum: invalid output {out!r} in {formula!r}")
  return letters, out


def _diagonal(x: Any, t: str, c: str, formula: str) -> tuple[Any, str]:
  """x restricted to equal indices on the first two axes lettered c (the second goes)."""
  p = t.index(c)
  q = t.index(c, p + 1)
  n = x.shape[p]
  if x.shape[q] != n:
    raise ArgumentError(f"Tensor.einsum: letter {c!r} has sizes {n} and {x.shape[q]} in {formula!r}")
  T = type(x)
  eye = T.eye(n, dtype="bool").reshape(tuple(n if k in (p, q) else 1 for k in range(x.ndim)))
  return eye.where(x, T.full((), 0, x.dtype)).sum(q).cast(x.dtype), t[:q] + t[q + 1:]


def _einsum(formula: str, *operands: Any, dtype: Any = None) -> Any:
  """numpy.einsum's value (a letter twice in one operand takes the diagonal)."""
  if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
    operands = tuple(operands[0])
  if not operands:
    raise ArgumentError("Tensor.einsum: needs at least one operand")
  letters, out = _parse(formula, [t.shape for t in operands])
  ops = list(operands)
  for k, t in enumerate(letters):
    while len(set(t)) != len(t):  # a letter twice in one operand: its diagonal
      c = next(c for c in t if t.count(c) > 1)
      ops[k], t = _diagonal(ops[k], t, c, formula)
    letters[k] = t
  operands = tuple(ops)
  sizes: dict[str, int] = {}
  for t, x in zip(letters, operands):
    for c, n in zip(t, x.shape):
      if sizes.get(c, 1) != 1 and n != 1 and sizes[c] != n:
        raise ArgumentError(f"Tensor.einsum: letter {c!r} has sizes {sizes[c]} and {n} in {formula!r} (shapes "
                         f"{[o.shape for o in operands]})")
      sizes[c] = max(sizes.get(c, 1), n) if n != 0 and sizes.get(c, 1) != 0 else 0
  order = out + "".join(sorted(c for c in sizes if c not in out))
  prod = None
  for t, x in zip(letters, operands):
    x = x.permute(*sorted(range(len(t)), key=lambda i: order.index(t[i]))) if len(t) > 1 else x
    present = sorted(t, key=order.index)
    x = x.reshape(*(x.shape[present.index(c)] if c in present else 1 for c in order)) if order else x
    if dtype is not None:
      x = x.cast(dtype)
    prod = x if prod is None else prod * x
  prod = prod._broadcast_to(tuple(sizes[c] for c in order))
  red = tuple(range(len(out), len(order)))
  return prod.sum(red) if red else prod


class ReduceMixin:
  __slots__ = ()

  # ---- reductions
  def _axes(self, axis: int | Sequence[int] | None, name: str) -> tuple[int, ...]:
    if type(axis) is int and -(nd := len(self.shape)) <= axis < nd:  # the usual case: one axis in range
      return (axis % nd,)
    if axis is None:
      return tuple(range(self.ndim))
    if isinstance(axis, (int, np.integer)):
      axes: tuple = (axis,)
    elif isinstance(axis, (tuple, list)):
      axes = tuple(axis)
    else:
      raise TypeError(f"Tensor.{name}: axis must be an int or a sequence of ints, got {axis!r}")
    if self.ndim == 0:  # a 0-d tensor reduces over dim 0 (or -1) to itself, as in torch and tinygrad
      for a in axes:
        self._axis(a, name, 1)
      return ()
    out = tuple(sorted({self._axis(a, name) for a in axes}))
    if len(out) != len(axes):
      raise ValueError(f"Tensor.{name}: repeated axis in {axis}")
    return out

  def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool, name: str) -> Any:
    axes = self._axes(axis, name)
    if not axes:
      return self
    ret = self._of(UOp(Ops.REDUCE_AXIS, self.uop.dtype, (self.uop,), (op, axes)))
    shape_of(ret.uop)  # (known now from its source's; see _alu)
    # (dropping the reduced dims: a reshape to fewer dims of the same elements, with nothing to check)
    return ret if keepdim else ret._mop(Ops.RESHAPE, tuple(s for i, s in enumerate(self.shape) if i not in axes))

  @classmethod
  def _acc_dtype(cls, dt: DType) -> DType:
    """The dtype a sum or product of dt accumulates in."""
    acc = _ACC_DTYPES.get(dt)
    if acc is None:
      acc = cls._acc_rule(dt)
      if dt != dtypes.bool:  # (bool's is dtypes.default_int, which a program may change)
        _ACC_DTYPES[dt] = acc
    return acc

  @staticmethod
  def _acc_rule(dt: DType) -> DType:
    if dt == dtypes.bool:
      return dtypes.default_int
    if dtypes.is_unsigned(dt):
      return least_upper_dtype(dt, dtypes.uint32)
    if dtypes.is_int(dt):
      return least_upper_dtype(dt, dtypes.int32)
    return least_upper_dtype(dt, dtypes.float32)

  def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: Any = None) -> Any:
    acc = to_dtype(dtype, "Tensor.sum") or self._acc_dtype(self.dtype)
    ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim, "sum")
    return ret.cast(self.dtype) if dtype is None and self.dtype == dtypes.float16 else ret

  def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: Any = None) -> Any:
    acc = to_dtype(dtype, "Tensor.prod") or self._acc_dtype(self.dtype)
    ret = self.cast(acc)._reduce(Ops.MUL, axis, keepdim, "prod")
    return ret.cast(self.dtype) if dtype is None and self.dtype == dtypes.float16 else ret

  def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Any:
    if self.dtype == dtypes.bool:
      return self.cast(dtypes.uint8)._reduce(Ops.MAX, axis, keepdim, "max").cast(dtypes.bool)
    return self._reduce(Ops.MAX, axis, keepdim, "max")

  def _flipped(self) -> Any:
    """A order-reversing bijection of the dtype's values (for min = flip(max(flip)))."""
    if dtypes.is_float(self.dtype):
      return -self
    if dtypes.is_unsigned(self.dtype):
      return self ^ dtypes.max(self.dtype)
    return self ^ -1

  def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Any:
    if self.dtype == dtypes.bool:
      return self.logical_not().max(axis, keepdim).logical_not()
    return self._flipped().max(axis, keepdim)._flipped()

  def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Any:
    return self.cast(dtypes.bool).max(axis, keepdim)

  def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Any:
    return self.cast(dtypes.bool).min(axis, keepdim)

  def _count(self, axis: int | Sequence[int] | None) -> int:
    return math.prod(self.shape[a] for a in self._axes(axis, "mean"))

  def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Any:
    x = self._float()
    acc = self._acc_dtype(x.dtype)  # a half sum overflows long before the mean does
    return (x.sum(axis, keepdim, dtype=acc) / self._count(axis)).cast(x.dtype)  # n == 0 gives nan, like numpy

  def _var(self, axis: int | Sequence[int] | None, keepdim: bool, correction: int) -> Any:
    """The variance in the accumulation dtype (half in float32, as numpy: its squares overflow early)."""
    x = self._float()
    x = x.cast(self._acc_dtype(x.dtype))
    sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    return sq / max(self._count(axis) - correction, 0)  # no degrees of freedom: inf/nan, like numpy

  def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Any:
    return self._var(axis, keepdim, correction).cast(self._float().dtype)

  def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Any:
    return self._var(axis, keepdim, correction).sqrt().cast(self._float().dtype)

  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Any:
    """Index of the first maximum (int32)."""
    if axis is None:
      ret = self.flatten().argmax(0)
      return ret.reshape((1,) * self.ndim) if keepdim else ret
    if self.ndim == 0:
      self._axis(axis, "argmax", 1)
      return self.full((), 0, dtypes.int32)
    a = self._axis(axis, "argmax")
    n = self.shape[a]
    if n == 0:
      raise ValueError(f"Tensor.argmax: empty axis {axis} of shape {self.shape}")
    is_max = self == self.max(a, keepdim=True)
    if dtypes.is_float(self.dtype):
      is_max = is_max | (self != self)  # a NaN is the max (max propagates it) and equals nothing
    rev = self.arange(n, 0, -1, dtype=dtypes.int32).reshape((n,) + (1,) * (self.ndim - a - 1))
    return (n - (is_max * rev).max(a, keepdim)).cast(dtypes.int32)

  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Any:
    return (self.logical_not() if self.dtype == dtypes.bool else self._flipped()).argmax(axis, keepdim)

  # ---- compound
  def dot(self, w: Any) -> Any:
    """Matrix product with numpy's rules for 1-d operands and broadcast batch dims."""
    if not isinstance(w, type(self)):
      raise TypeError(f"Tensor.matmul: operand must be a Tensor, got {type(w).__name__}")
    check_same_device("matmul", self.uop, w.uop)
    xs, ws = self.shape, w.shape
    n1, n2 = len(xs), len(ws)
    if n1 == 0 or n2 == 0:
      raise ArgumentError(f"Tensor.matmul: 0-d operand (shapes {xs} and {ws})")
    if xs[-1] != ws[-min(n2, 2)]:
      raise ArgumentError(f"Tensor.matmul: shapes {xs} and {ws} don't line up ({xs[-1]} != {ws[-min(n2, 2)]})")
    if n1 > 2 or n2 > 2:
      try:
        broadcast_shape(xs[:-2], ws[:-2])
      except ValueError:
        raise ArgumentError(f"Tensor.matmul: batch dims of shapes {xs} and {ws} can't be broadcast together") from None
    k = min(n1 - 1, n2 - 1, 1)
    x = self.reshape(xs[:-1] + (1,) * k + xs[-1:])
    wt = w.reshape(ws[:-2] + (1,) * k + ws[-min(n2, 2):]).transpose(-1, -min(n2, 2))
    return (x * wt).sum(-1)

  def matmul(self, w: Any) -> Any:
    return self.dot(w)

  def softmax(self, axis: int = -1) -> Any:
    self._axes(axis, "softmax")
    x = self._float()
    e = (x - x.max(axis, keepdim=True)).exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1) -> Any:
    self._axes(axis, "log_softmax")
    x = self._float()
    m = x - x.max(axis, keepdim=True)
    return m - m.exp().sum(axis, keepdim=True).log()

  def softmin(self, axis: int = -1) -> Any:
    """softmax(-self) (torch's softmin), negated as a float: an unsigned input would wrap around."""
    self._axes(axis, "softmin")
    return self._float().neg().softmax(axis)

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

  # ---- einsum
  @staticmethod
  def einsum(formula: str, *operands: Any, dtype: Any = None) -> Any:
    """Einstein summation ("ij,jk->ik", implicit output, "..." broadcast dims), as numpy.einsum."""
    return _einsum(formula, *operands, dtype=dtype)
