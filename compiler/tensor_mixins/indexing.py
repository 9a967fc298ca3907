"""Tensor methods: indexing (basic: ints, slices, None, Ellipsis; advanced: integer tensors and lists), gather/scatter,
masks, one_hot, tril/triu, diagonals.

A selection is a one-hot mask summed over `where(mask, value, -0.0)`: x + -0.0 is x for every x (inf and nan too),
and the gradient is the mask (a MAX over `where(mask, value, lowest)` tied a -inf with the fill and shared its
gradient; a product with the mask would turn 0 * inf into nan). A sum's accumulator starts at +0.0, so a selected
zero takes its sign from a MAX over the selected zeros."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from compiler.dtype import dtypes
from compiler.tensor_mixins._args import is_int


def _zero(t: Any) -> Any:
  """A 0-d zero of t's dtype (a bare 0 next to a bool tensor would promote it to int)."""
  return type(t).full((), 0, t.dtype)


def pick(mask: Any, values: Any, axis: int) -> Any:
  """values where mask is true, reduced over axis (at most one true along it; none gives 0, or -inf for a float):
  the value exact, the gradient the mask."""
  T, dt = type(values), values.dtype
  if dt == dtypes.bool:
    return (mask & values).any(axis)
  if not dtypes.is_float(dt):
    return mask.where(values, _zero(values)).sum(axis).cast(dt)
  got = mask.where(values, T.full((), -0.0, dt)).sum(axis).cast(dt)
  # only a zero can come out of the sum with the wrong sign; among the selected zeros alone the MAX ties with nothing
  signed = _masked_max(mask & (values == 0), values, axis)
  return (got == 0).where(signed, got)


def _masked_max(mask: Any, values: Any, axis: int) -> Any:
  """The max of values where mask is true, over axis (none gives the dtype's lowest); ties share the gradient."""
  return mask.where(values, type(values).full((), dtypes.min(values.dtype), values.dtype)).max(axis)


def _check_index(op: str, index: Any, T: type) -> None:
  if not isinstance(index, T):
    raise TypeError(f"Tensor.{op}: index must be a Tensor, got {type(index).__name__}")
  if not dtypes.is_int(index.dtype) or index.dtype == dtypes.bool:
    raise RuntimeError(f"Tensor.{op}: index must be an integer tensor, got {index.dtype} of shape {index.shape}")


def _check_size(op: str, size: Any, shape: tuple) -> None:
  if size is not None and (not is_int(size) or size < 0):
    raise ValueError(f"Tensor.{op}: size must be a non-negative int or None, got {size!r} (input {shape})")


def _along(n: int, axis: int, ndim: int, T: type) -> Any:
  """arange(n) shaped to run along axis of an ndim-d tensor."""
  return T.arange(n, dtype=dtypes.int32).reshape((n,) + (1,) * (ndim - axis - 1)) if n else \
    T.zeros(*((0,) + (1,) * (ndim - axis - 1)), dtype=dtypes.int32)


class IndexingMixin:
  __slots__ = ()

  # ---- basic indexing
  def __getitem__(self, idx: Any) -> Any:
    """self[idx]: ints, slices with steps, None and Ellipsis as shrink/flip/pad/reshape; any Tensor, list or tuple
    index goes to advanced indexing (numpy's rules)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    if any(isinstance(i, (type(self), list, tuple, np.ndarray)) for i in items):
      return self._getitem_advanced(idx)
    for i in items:
      if not (i is None or i is Ellipsis or isinstance(i, slice) or is_int(i)):
        raise TypeError(f"Tensor indexing: unsupported index {type(i).__name__} (ints, slices, None, ... only)")
    check_count(list(items), self.shape)
    n_real = sum(1 for i in items if i is not None and i is not Ellipsis)
    if Ellipsis in items:
      k = items.index(Ellipsis)
      items = items[:k] + (slice(None),) * (self.ndim - n_real) + items[k + 1:]
    else:
      items = items + (slice(None),) * (self.ndim - n_real)
    bounds, flips, steps, out_shape = [], [], [], []
    d = 0
    for i in items:
      if i is None:
        out_shape.append(1)
        continue
      s = self.shape[d]
      if isinstance(i, slice):
        if i.step == 0:
          raise ValueError(f"Tensor indexing: slice step must not be 0 (axis {d} of shape {self.shape})")
        start, stop, step = i.indices(s)
        n = len(range(start, stop, step))
        if n == 0:
          bounds.append((0, 0))
        elif step > 0:
          bounds.append((start, start + (n - 1) * step + 1))
        else:
          bounds.append((start + (n - 1) * step, start + 1))
        flips.append(step < 0)
        steps.append((abs(step), n))
        out_shape.append(n)
      else:
        if not -s <= i < s:
          raise IndexError(f"Tensor indexing: index {i} is out of bounds for axis {d} with size {s}")
        i = int(i) % s
        bounds.append((i, i + 1))
        flips.append(False)
        steps.append((1, 1))
      d += 1
    x = self.shrink(tuple(bounds))
    if any(flips):
      x = x.flip(tuple(k for k, f in enumerate(flips) if f))
    if any(k > 1 and n > 1 for k, n in steps):
      # every k-th element: pad to n*k, view as (n, k), keep column 0
      x = x.pad(tuple((0, n * k - s) if k > 1 and n > 1 else None for (k, n), s in zip(steps, x.shape)))
      x = x.reshape(tuple(v for (k, n), s in zip(steps, x.shape) for v in ((n, k) if k > 1 and n > 1 else (s,))))
      x = x.shrink(tuple(r for (k, n), s in zip(steps, self.shrink(tuple(bounds)).shape)
                         for r in (((0, n), (0, 1)) if k > 1 and n > 1 else ((0, s),))))
    return x.reshape(tuple(out_shape))

  # ---- advanced indexing
  def _getitem_advanced(self, idx: Any) -> Any:
    """Integer Tensors / lists mixed with basic indices, by tinygrad's and torch's rules: ints (and 0-d index tensors)
    select first, then the other index tensors broadcast together, and their dims go where the first one was when
    they are adjacent, else in front (numpy counts an int as an index tensor there: a[1, :, [0, 2]] is (2, 3) in
    numpy, (3, 2) in torch and tinygrad)."""
    T = type(self)
    items = list(idx) if isinstance(idx, tuple) else [idx]
    for k, i in enumerate(items):
      if isinstance(i, (list, tuple, np.ndarray)):
        arr = np.asarray(i)
        if arr.dtype == np.bool_:
          raise IndexError(f"Tensor indexing: boolean mask indices are not supported (shape {self.shape}); "
                           "use masked_select")
        if arr.size == 0:
          arr = arr.astype(np.int32)
        if arr.dtype.kind not in "iu":
          raise IndexError(f"Tensor indexing: index {i!r} must hold ints (tensor of shape {self.shape})")
        items[k] = T(arr.astype(np.int64) if arr.dtype.kind == "u" else arr)
      elif isinstance(i, T) and (not dtypes.is_int(i.dtype) or i.dtype == dtypes.bool):
        raise IndexError(f"Tensor indexing: tensor indices must be integers, got {i.dtype} (tensor of shape "
                         f"{self.shape})")
    check_count(items, self.shape)
    ell = [k for k, i in enumerate(items) if i is Ellipsis]
    if ell:
      n_real = sum(1 for i in items if i is not None and i is not Ellipsis)
      items[ell[0]:ell[0] + 1] = [slice(None)] * (self.ndim - n_real)
    basic, scalars, adv, d, dim = [], [], [], 0, 0
    for i in items:
      if isinstance(i, T):
        (scalars if i.ndim == 0 else adv).append((dim, i, self.shape[d]))
        basic.append(slice(None))
      else:
        basic.append(i)
      if not is_int(i):  # an int drops its dim, None adds one, a slice or an index tensor keeps its dim
        dim += 1
      if i is not None:
        d += 1
    x = self[tuple(basic)]
    if scalars:  # selects like ints: their dims go, and the other index tensors' dims close up
      x = _take(x, scalars)
      adv = [(p - sum(1 for q, _, _ in scalars if q < p), t, s) for p, t, s in adv]
    return _take(x, adv) if adv else x

  def gather(self, dim: int, index: Any) -> Any:
    """out[i][j][k] = self[index[i][j][k]][j][k] (dim 0), as torch.gather; out-of-range indices give 0."""
    T = type(self)
    _check_index("gather", index, T)
    if self.ndim == 0:
      self._axis(dim, "gather", 1)
      return self.reshape(1).gather(0, index.reshape(1)).reshape(index.shape)
    if index.ndim != self.ndim:
      raise RuntimeError(f"Tensor.gather: index of shape {index.shape} must have the {self.ndim} dims of the "
                         f"input {self.shape}")
    d = self._axis(dim, "gather")
    if any(i > s for k, (s, i) in enumerate(zip(self.shape, index.shape)) if k != d):
      raise RuntimeError(f"Tensor.gather: index of shape {index.shape} is larger than the input {self.shape} "
                         f"outside dim {dim}")
    n = self.shape[d]
    x = self.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(index.shape)))
    mask = index.unsqueeze(d + 1) == _along(n, d + 1, self.ndim + 1, T)
    res = pick(mask, x.unsqueeze(d), d + 1)
    return ((index >= 0) & (index < n)).where(res, _zero(res))

  # ---- scatter
  def _pre_scatter(self, op: str, dim: int, index: Any, src: Any) -> tuple[Any, Any, int]:
    """The one-hot mask (*I[:d], I[d], n, *I[d+1:]) and src aligned with it, and the resolved dim."""
    T = type(self)
    _check_index(op, index, T)
    if not isinstance(src, T):
      raise TypeError(f"Tensor.{op}: src must be a Tensor or a scalar, got {type(src).__name__}")
    if not index.ndim == self.ndim == src.ndim:
      raise RuntimeError(f"Tensor.{op}: self {self.shape}, index {index.shape} and src {src.shape} must have "
                         "the same number of dims")
    d = self._axis(dim, op) if self.ndim else 0
    if any((k != d and i > s) or i > r for k, (s, i, r) in enumerate(zip(self.shape, index.shape, src.shape))):
      raise RuntimeError(f"Tensor.{op}: index {index.shape} must fit in src {src.shape} and, outside dim {dim}, in "
                         f"self {self.shape}")
    if src.dtype != self.dtype:
      raise RuntimeError(f"Tensor.{op}: src dtype {src.dtype} differs from self dtype {self.dtype}")
    src = src.shrink(tuple((0, i) for i in index.shape))
    mask = index.unsqueeze(d + 1) == _along(self.shape[d], d + 1, self.ndim + 1, T)
    return mask, src.unsqueeze(d + 1), d

  def _scatter_out(self, x: Any, d: int, value: Any) -> Any:
    """(*I[:d], n, *I[d+1:]) padded out to self.shape with value."""
    return x.pad(tuple(None if k == d else (0, s - i) for k, (s, i) in enumerate(zip(self.shape, x.shape))), value)

  def scatter(self, dim: int, index: Any, src: Any, reduce: str | None = None) -> Any:
    """self with src written at index along dim (as torch.scatter; with repeated indices the last one wins)."""
    if reduce not in (None, "add", "multiply"):
      raise TypeError(f"Tensor.scatter: reduce={reduce!r} must be None, 'add' or 'multiply'")
    T = type(self)
    if isinstance(src, (bool, int, float, np.generic)):
      _check_index("scatter", index, T)
      src = T.full(index.shape, src, self.dtype)
    elif reduce is not None:
      raise TypeError("Tensor.scatter: reduce needs a scalar src; use scatter_reduce with a Tensor src")
    if reduce is not None:
      return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod", include_self=True)
    if self.ndim == 0:
      return self.reshape(1).scatter(dim, index.reshape(1), src.reshape(1)).reshape(())
    mask, src, d = self._pre_scatter("scatter", dim, index, src)
    k = index.shape[d]
    order = _along(k, d, mask.ndim, T)
    last = mask.where(order, -1).max(d, keepdim=True)  # the last write to each place
    val = pick(mask & (order == last), src, d)
    hit = self._scatter_out(last.squeeze(d) >= 0, d, False)
    return hit.where(self._scatter_out(val, d, 0), self)

  def scatter_reduce(self, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True) -> Any:
    """self with src reduced into it at index along dim: reduce in sum, prod, mean, amax, amin (torch's rules)."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise RuntimeError(f"Tensor.scatter_reduce: reduce={reduce!r} must be one of 'sum', 'prod', 'mean', 'amax', "
                         "'amin'")
    if self.ndim == 0:
      return self.reshape(1).scatter_reduce(dim, index.reshape(1), src.reshape(1), reduce, include_self).reshape(())
    mask, src, d = self._pre_scatter("scatter_reduce", dim, index, src)
    dt = self.dtype
    hit = self._scatter_out(mask.any(d), d, False)

    def merged(red: Any, fill: Any, combine: Any) -> Any:
      red = self._scatter_out(red.cast(dt), d, fill)
      return combine(red, self) if include_self else hit.where(red, self)
    if reduce == "sum":
      return merged(mask.where(src, _zero(src)).sum(d), 0, lambda a, b: (a + b).cast(dt))
    if reduce == "prod":
      return merged(mask.where(src, type(self).full((), 1, dt)).prod(d), 1, lambda a, b: (a * b).cast(dt))
    if reduce == "amax":
      return merged(_masked_max(mask, src, d), dtypes.min(dt), lambda a, b: a.maximum(b))
    if reduce == "amin":
      low = (-src if dtypes.is_float(dt) else src._flipped()) if dt != dtypes.bool else src.logical_not()
      red = _masked_max(mask, low, d)
      red = -red if dtypes.is_float(dt) else red._flipped() if dt != dtypes.bool else red.logical_not()
      return merged(red, dtypes.max(dt), lambda a, b: a.minimum(b))
    total = self._scatter_out(mask.where(src, _zero(src)).sum(d), d, 0)
    count = self._scatter_out(mask.sum(d), d, 0)
    if include_self:
      total, count = total + self, count + 1
    else:
      count = hit.where(count, 1)
      total = hit.where(total, self)
    return (total.div(count) if dtypes.is_float(dt) else total.floordiv(count)).cast(dt)

  # ---- masks
  def masked_fill(self, mask: Any, value: Any) -> Any:
    """self with value where mask is true."""
    T = type(self)
    v = value.cast(self.dtype) if isinstance(value, T) else T.full((), value, self.dtype)
    return mask.cast(dtypes.bool).where(v, self)

  def masked_select(self, mask: Any, size: int | None = None, fill_value: Any = 0) -> Any:
    """The 1-d tensor of the elements where mask is true; size=None realizes the mask to know the count, size=N
    gives N elements: the first N selected, then fill_value (tinygrad's)."""
    T = type(self)
    if not isinstance(mask, T):
      raise TypeError(f"Tensor.masked_select: mask must be a Tensor, got {type(mask).__name__}")
    if mask.dtype != dtypes.bool:
      raise RuntimeError(f"Tensor.masked_select: mask must be bool, got {mask.dtype} (mask {mask.shape}, input "
                         f"{self.shape})")
    _check_size("masked_select", size, self.shape)
    try:
      shape = tuple(np.broadcast_shapes(self.shape, mask.shape))
    except ValueError:
      raise ValueError(f"Tensor.masked_select: mask of shape {mask.shape} doesn't broadcast with {self.shape}") \
        from None
    x, m = self._broadcast_to(shape).flatten(), mask._broadcast_to(shape).flatten()
    n = int(m.sum().item()) if size is None else size
    if n == 0:
      return T.zeros(0, dtype=self.dtype)
    slot = m.cast(dtypes.int32).cumsum(0) - 1
    out = T.arange(n, dtype=dtypes.int32).reshape(n, 1)
    got = pick(m.reshape(1, -1) & (slot.reshape(1, -1) == out), x.reshape(1, -1), 1)
    if size is None:
      return got
    return (out.reshape(n) < m.cast(dtypes.int32).sum()).where(got, T.full((), fill_value, self.dtype))

  def nonzero(self, size: int | None = None, fill_value: Any = 0) -> Any:
    """The (count, ndim) int32 indices of the non-zero elements, row-major; size=None realizes to know the count,
    size=N gives N rows: the first N, then rows of fill_value (tinygrad's)."""
    T = type(self)
    _check_size("nonzero", size, self.shape)
    flat = T.arange(self.numel(), dtype=dtypes.int32).reshape(self.shape) if self.numel() else \
      T.zeros(*self.shape, dtype=dtypes.int32)
    nz = self != _zero(self)
    idx = flat.reshape(-1).masked_select(nz.reshape(-1), size)
    cols, stride = [], 1
    for s in reversed(self.shape):
      cols.append((idx // stride) % s)
      stride *= s
    if not cols:
      return T.zeros(idx.shape[0], 0, dtype=dtypes.int32)
    out = T.stack(*reversed(cols), dim=1)
    if size is None or size == 0:
      return out
    filled = T.arange(size, dtype=dtypes.int32) >= nz.cast(dtypes.int32).sum()
    return filled.reshape(size, 1).where(T.full((), fill_value, dtypes.int32), out)

  def one_hot(self, num_classes: int = -1) -> Any:
    """(..., num_classes) int: 1 at each index (num_classes=-1: max + 1, which realizes the tensor)."""
    T = type(self)
    if not dtypes.is_int(self.dtype) or self.dtype == dtypes.bool:
      raise RuntimeError(f"Tensor.one_hot: expects an integer tensor, got {self.dtype} of shape {self.shape}")
    if num_classes == -1:
      num_classes = int(self.max().item()) + 1 if self.numel() else 0
    if not is_int(num_classes) or num_classes < 0:
      raise ValueError(f"Tensor.one_hot: num_classes must be a non-negative int, got {num_classes!r}")
    return (self.unsqueeze(-1) == _along(num_classes, 0, 1, T)).cast(dtypes.default_int)

  # ---- triangles
  def _tri(self, op: str, diagonal: int, upper: bool) -> Any:
    T = type(self)
    if self.ndim < 2:
      raise RuntimeError(f"Tensor.{op}: needs at least 2 dims, got shape {self.shape}")
    r, c = self.shape[-2:]
    rows = _along(r, 0, 2, T) if r else T.zeros(0, 1, dtype=dtypes.int32)
    cols = _along(c, 0, 1, T).reshape(1, c) if c else T.zeros(1, 0, dtype=dtypes.int32)
    keep = (rows + diagonal <= cols) if upper else (rows + diagonal >= cols)
    return keep.where(self, _zero(self))

  def triu(self, diagonal: int = 0) -> Any:
    return self._tri("triu", diagonal, True)

  def tril(self, diagonal: int = 0) -> Any:
    return self._tri("tril", diagonal, False)

  def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Any:
    """The diagonal of the dims dim1 and dim2 (offset > 0 above the main one), as a last dim (torch's)."""
    if not is_int(offset):
      raise TypeError(f"Tensor.diagonal: offset must be an int, got {offset!r}")
    if self.ndim < 2:
      raise ValueError(f"Tensor.diagonal: needs at least 2 dims, got shape {self.shape}")
    a, b = self._axis(dim1, "diagonal"), self._axis(dim2, "diagonal")
    if a == b:
      raise ValueError(f"Tensor.diagonal: dim1 and dim2 are the same dim {a} (shape {self.shape})")
    x = self.permute(*(k for k in range(self.ndim) if k not in (a, b)), a, b)
    r, c = x.shape[-2:]
    lead = (None,) * (x.ndim - 2)
    r0, c0 = min(max(-offset, 0), r), min(max(offset, 0), c)  # where the diagonal starts (past the end: empty)
    m = min(r - r0, c - c0)
    x = x.shrink(lead + ((r0, r0 + m), (c0, c0 + m)))
    # m rows of m, padded to rows of m + 1: the diagonal is then column 0
    x = x.reshape(*x.shape[:-2], m * m).pad(lead + ((0, m),)).reshape(*x.shape[:-2], m, m + 1)
    return x.shrink(lead + (None, (0, 1))).reshape(x.shape[:-1])

  def diag(self, diagonal: int = 0) -> Any:
    """1-d: the square matrix with self on the diagonal `diagonal`; 2-d: that diagonal (torch's)."""
    if not is_int(diagonal):
      raise TypeError(f"Tensor.diag: diagonal must be an int, got {diagonal!r}")
    if self.ndim == 2:
      return self.diagonal(diagonal)
    if self.ndim != 1:
      raise ValueError(f"Tensor.diag: expects a 1-d or 2-d tensor, got shape {self.shape}")
    n, k = self.shape[0], abs(diagonal)
    # each element followed by n zeros: n rows of n + 1, flattened and cut to n * n, is the n x n diagonal matrix
    x = self.reshape(n, 1).pad((None, (0, n))).reshape(n * (n + 1)).shrink(((0, n * n),)).reshape(n, n)
    return x.pad(((0, k), (k, 0)) if diagonal >= 0 else ((k, 0), (0, k)))


def check_count(items: list, shape: tuple) -> None:
  """tinygrad's errors for more than one Ellipsis and for more indices than dims (with the shape)."""
  if sum(1 for i in items if i is Ellipsis) > 1:
    raise IndexError(f"indices can only have a single ellipsis (Tensor indexing of shape {shape})")
  n = sum(1 for i in items if i is not None and i is not Ellipsis)
  if n > len(shape):
    raise IndexError(f"too many num_indices={n} for self.ndim={len(shape)} (Tensor indexing of shape {shape})")


def _take(x: Any, adv: list) -> Any:
  """x indexed by integer tensors at dims adv = [(dim of x, index, size)]: the broadcast index dims go where the
  first index was if the dims are adjacent, else in front."""
  T = type(x)
  dims = [p for p, _, _ in adv]
  idxs = [t for _, t, _ in adv]
  sizes = [s for _, _, s in adv]
  try:
    bshape = tuple(np.broadcast_shapes(*(t.shape for t in idxs)))
  except ValueError:
    raise IndexError(f"Tensor indexing: index tensors of shapes {[t.shape for t in idxs]} don't broadcast together "
                     f"(tensor of shape {x.shape})") from None
  lin, valid, stride = None, None, 1
  for t, s in reversed(list(zip(idxs, sizes))):
    t = t.cast(dtypes.int32)._broadcast_to(bshape) if bshape else t.cast(dtypes.int32)
    t = (t < 0).where(t + s, t)
    ok = (t >= 0) & (t < s)
    lin = t * stride if lin is None else lin + t * stride
    valid = ok if valid is None else valid & ok
    stride *= s
  rest = [k for k in range(x.ndim) if k not in dims]
  n = math.prod(sizes)
  xr = x.permute(*dims, *rest).reshape(n, *(x.shape[k] for k in rest))
  nb, nr = len(bshape), len(rest)
  mask = lin.reshape(*bshape, 1) == (T.arange(n, dtype=dtypes.int32) if n else T.zeros(0, dtype=dtypes.int32))
  mask = mask.reshape(*bshape, n, *(1,) * nr)
  res = pick(mask, xr.reshape(*(1,) * nb, *xr.shape), nb)
  res = valid.reshape(*bshape, *(1,) * nr).where(res, _zero(res))
  if dims == list(range(dims[0], dims[0] + len(dims))):
    # adjacent index tensors: their dims go where the first one was
    p0 = dims[0]
    return res.permute(*range(nb, nb + p0), *range(nb), *range(nb + p0, nb + nr))
  return res
