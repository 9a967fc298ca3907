"""Basic indexing of Tensors: ints, slices with steps, None and Ellipsis, as shrink/flip/pad/reshape."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.tensor_mixins.indexing import check_count

if TYPE_CHECKING:
  from compiler.tensor import Tensor


def getitem(t: Tensor, idx: Any) -> Tensor:
  """t[idx]: basic indices here; any Tensor, list or tuple index goes to advanced indexing (numpy's rules)."""
  items = idx if isinstance(idx, tuple) else (idx,)
  if any(isinstance(i, (type(t), list, tuple, np.ndarray)) for i in items):
    return t._getitem_advanced(idx)
  for i in items:
    if not (i is None or i is Ellipsis or isinstance(i, slice) or
            (isinstance(i, (int, np.integer)) and not isinstance(i, bool))):
      raise TypeError(f"Tensor indexing: unsupported index {type(i).__name__} (ints, slices, None, ... only)")
  check_count(list(items), t.shape)
  n_real = sum(1 for i in items if i is not None and i is not Ellipsis)
  if Ellipsis in items:
    k = items.index(Ellipsis)
    items = items[:k] + (slice(None),) * (t.ndim - n_real) + items[k + 1:]
  else:
    items = items + (slice(None),) * (t.ndim - n_real)
  bounds, flips, steps, out_shape = [], [], [], []
  d = 0
  for i in items:
    if i is None:
      out_shape.append(1)
      continue
    s = t.shape[d]
    if isinstance(i, slice):
      if i.step == 0:
        raise ValueError(f"Tensor indexing: slice step must not be 0 (axis {d} of shape {t.shape})")
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
  x = t.shrink(tuple(bounds))
  if any(flips):
    x = x.flip(tuple(k for k, f in enumerate(flips) if f))
  if any(k > 1 and n > 1 for k, n in steps):
    # every k-th element: pad to n*k, view as (n, k), keep column 0
    x = x.pad(tuple((0, n * k - s) if k > 1 and n > 1 else None for (k, n), s in zip(steps, x.shape)))
    x = x.reshape(tuple(v for (k, n), s in zip(steps, x.shape) for v in ((n, k) if k > 1 and n > 1 else (s,))))
    x = x.shrink(tuple(r for (k, n), s in zip(steps, t.shrink(tuple(bounds)).shape)
                       for r in (((0, n), (0, 1)) if k > 1 and n > 1 else ((0, s),))))
  return x.reshape(tuple(out_shape))
