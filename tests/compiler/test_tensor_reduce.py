"""Cumulative ops, logsumexp, logcumsumexp, std_mean/var_mean, sort/argsort/topk against numpy on both backends."""
import numpy as np
import pytest
from support.api_helpers import check, specials
from support.tensor_values import check_value, randf, randi

from compiler import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("backend")

rng = np.random.default_rng(5)


def np_cumext(x, axis, fn):
  """Running max/min with torch's indices: the last position equal to the running value (NaN is the extreme)."""
  x = np.moveaxis(x, axis, -1)
  vals, idx = np.empty_like(x), np.zeros(x.shape, np.int32)
  for pos in np.ndindex(*x.shape[:-1]):
    best, bi = None, 0
    for i, v in enumerate(x[pos]):
      if best is None or np.isnan(v) or (not np.isnan(best) and fn(v, best)):
        best, bi = v, i
      vals[pos + (i,)], idx[pos + (i,)] = best, bi
  return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)


@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 1, 3), 1), ((2, 0), 1), ((1,), -1)])
def test_cumulative(shape, axis):
  x = specials(*shape) if np.prod(shape) >= 6 else rng.standard_normal(shape).astype(np.float32)
  xi = rng.integers(-3, 4, shape).astype(np.int32)
  xb = rng.random(shape) > 0.5
  with np.errstate(all="ignore"):
    pairs = [(Tensor(x).cumsum(axis), np.cumsum(x, axis)), (Tensor(x).cumprod(axis), np.cumprod(x, axis)),
             (Tensor(xi).cumsum(axis), np.cumsum(xi, axis)), (Tensor(xi).cumprod(axis), np.cumprod(xi, axis)),
             (Tensor(xb).cumsum(axis), np.cumsum(xb, axis))]
  for t, fn in ((x, np.greater_equal), (xi, np.greater_equal)):
    v, i = Tensor(t).cummax(axis)
    rv, ri = np_cumext(t, axis, fn)
    pairs += [(v, rv), (i, ri)]
  for t in (x, xi):
    v, i = Tensor(t).cummin(axis)
    rv, ri = np_cumext(t, axis, np.less_equal)
    pairs += [(v, rv), (i, ri)]
  check(*pairs)
  assert Tensor(xb).cumsum(axis).dtype == dtypes.int32 and Tensor(xi.astype(np.int8)).cumsum(axis).dtype == dtypes.int32


def test_cumsum_long_axis_two_stage():
  x = rng.standard_normal((2, 1100)).astype(np.float32)
  xi = rng.integers(-9, 9, 600).astype(np.int32)
  check((Tensor(x).cumsum(1), np.cumsum(x, 1)), (Tensor(xi).cumsum(), np.cumsum(xi)),
        (Tensor(x).cummax(-1)[0], np.maximum.accumulate(x, 1)), rtol=1e-4, atol=1e-4)


def test_cumulative_0d_and_errors():
  check((Tensor(2.5).cumsum(), np.float32(2.5)), (Tensor(3).cumprod(0), np.int32(3)), (Tensor(2.0).cummax()[1], 0))
  with pytest.raises(ValueError, match=r"cumsum.*\(3,\)"):
    Tensor([1, 2, 3]).cumsum(1)


def np_logsumexp(x, axis, keepdims=False):
  with np.errstate(all="ignore"):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    return np.squeeze(np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m, axis=None if keepdims else axis) \
      if not keepdims else np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m


def test_logsumexp_logcumsumexp():
  x = rng.standard_normal((3, 5)).astype(np.float32) * 30
  x[0, 1], x[1] = -np.inf, -np.inf
  x[2, 3] = np.inf
  with np.errstate(all="ignore"):
    lcse = np.logaddexp.accumulate(x.astype(np.float64), axis=1)
    lcse0 = np.logaddexp.accumulate(x.astype(np.float64), axis=0)
  check((Tensor(x).logsumexp(1), np_logsumexp(x, 1)), (Tensor(x).logsumexp(-2, keepdim=True), np_logsumexp(x, 0, True)),
        (Tensor(x).logsumexp(), np_logsumexp(x, None)), (Tensor(x).logcumsumexp(1), lcse),
        (Tensor(x).logcumsumexp(0), lcse0), (Tensor(np.zeros((0, 2), np.float32)).logsumexp(0), np.full(2, -np.inf)))


@pytest.mark.parametrize("axis,keepdim,correction", [(None, False, 1), (1, True, 0), (-1, False, 1), ((0, 1), True, 1)])
def test_std_mean_var_mean(axis, keepdim, correction):
  x = rng.standard_normal((3, 4, 2)).astype(np.float32)
  s, m = Tensor(x).std_mean(axis, keepdim, correction)
  v, m2 = Tensor(x).var_mean(axis, keepdim=keepdim, correction=correction)
  check((s, np.std(x, axis, keepdims=keepdim, ddof=correction)), (m, np.mean(x, axis, keepdims=keepdim)),
        (v, np.var(x, axis, keepdims=keepdim, ddof=correction)), (m2, np.mean(x, axis, keepdims=keepdim)))


def np_sort(x, dim, descending):
  """Stable sort with NaN largest (torch's order), by lexsort along dim."""
  xm = np.moveaxis(x, dim, -1)
  order = np.zeros(xm.shape, np.int64)
  for pos in np.ndindex(*xm.shape[:-1]):
    row = xm[pos].astype(np.float64)
    nan = np.isnan(row).astype(np.int8)
    val = np.where(nan, 0, row)
    order[pos] = np.lexsort((-val, -nan)) if descending else np.lexsort((val, nan))
  order = np.moveaxis(order, -1, dim)
  return np.take_along_axis(x, order, dim), order.astype(np.int32)


@pytest.mark.parametrize("shape,dim", [((6,), 0), ((3, 5), -1), ((4, 3), 0), ((2, 1, 4), 2), ((2, 1), 1), ((0, 3), 1)])
def test_sort_argsort_topk(shape, dim):
  x = rng.integers(-3, 3, shape).astype(np.float32)  # many ties: the order must be stable
  if x.size >= 6:
    x.reshape(-1)[[0, 4]] = [np.nan, -0.0]
  xi = rng.integers(-50, 50, shape).astype(np.int32)
  pairs = []
  for t in (x, xi):
    for desc in (False, True):
      v, i = Tensor(t).sort(dim, descending=desc)
      rv, ri = np_sort(t, dim, desc)
      pairs += [(v, rv), (i, ri), (Tensor(t).argsort(dim, desc), ri)]
  if shape[dim] >= 2:
    v, i = Tensor(xi).topk(2, dim)
    rv, ri = np_sort(xi, dim, True)
    pairs += [(v, np.take(rv, [0, 1], dim)), (i, np.take(ri, [0, 1], dim))]
    v, i = Tensor(x).topk(1, dim, largest=False)
    rv, ri = np_sort(x, dim, False)
    pairs += [(v, np.take(rv, [0], dim)), (i, np.take(ri, [0], dim))]
  check(*pairs, exact=True)


def test_sort_errors_and_bool():
  check((Tensor([True, False, True]).sort()[0], np.array([False, True, True])), exact=True)
  with pytest.raises(ValueError, match=r"topk.*\(3,\)"):
    Tensor([1, 2, 3]).topk(4)
  with pytest.raises(ValueError, match="sort"):
    Tensor([1, 2, 3]).sort(2)


def test_sum_prod_dtype_errors():
  # an unknown dtype name is tinygrad's AttributeError (getattr(dtypes, name)); a valid one still works
  for fn, name in ((lambda d: Tensor([1, 2]).sum(dtype=d), "sum"), (lambda d: Tensor([1, 2]).prod(dtype=d), "prod")):
    for bad in ("", "int33", "float31"):
      with pytest.raises(AttributeError, match=rf"Tensor\.{name}: unsupported dtype '{bad}'"):
        fn(bad)
  with pytest.raises(AttributeError, match="dtype"):
    Tensor.ones(2, dtype="nope")
  check((Tensor([1, 2]).sum(dtype="float64"), np.float64(3)), (Tensor([3, 2]).prod(dtype="int8"), np.int8(6)),
        (Tensor([1.5, 2.0]).sum(dtype=dtypes.float16), np.float16(3.5)), exact=True)


def test_matmul_shape_errors_are_runtime_errors():
  # tinygrad's RuntimeError, still a ValueError as numpy's; the message names the op and both shapes
  cases = [((3, 4), (3, 4), r"\(3, 4\) and \(3, 4\)"), ((3, 4), (), r"0-d.*\(3, 4\) and \(\)"),
           ((2, 3, 4), (3, 4, 5), r"batch dims.*\(2, 3, 4\) and \(3, 4, 5\)"), ((4,), (3,), r"\(4,\) and \(3,\)")]
  for xs, ws, msg in cases:
    for fn in (Tensor.matmul, Tensor.dot, Tensor.__matmul__):
      with pytest.raises(RuntimeError, match=rf"Tensor\.matmul: .*{msg}"):
        fn(Tensor.ones(*xs), Tensor.ones(*ws))
  with pytest.raises(ValueError, match="matmul"):
    Tensor.ones(3, 4) @ Tensor.ones(3, 4)
  a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
  check((Tensor(a) @ Tensor(b), a @ b), (Tensor(a[0, 0]).dot(Tensor(b)), a[0, 0] @ b))


# ---- reductions

REDUCE_AXES = [None, 0, -1, (0, 2), (-1, 1), ()]


@pytest.mark.parametrize("axis", REDUCE_AXES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["sum", "max", "min", "mean", "prod"])
def test_reduce_float(name, axis, keepdim):
  x = randf(2, 3, 4)
  ref = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean, "prod": np.prod}[name]
  check_value(getattr(Tensor(x), name)(axis, keepdim=keepdim), ref(x, axis=axis, keepdims=keepdim), rtol=1e-5,
              atol=1e-5)


@pytest.mark.parametrize("name", ["sum", "max", "min", "prod"])
def test_reduce_int_and_bool(name):
  x = randi(3, 5, lo=-4, hi=5)
  ref = getattr(np, name)
  check_value(getattr(Tensor(x), name)(1), ref(x, axis=1), dtype=dtypes.int32)
  b = x > 0
  got = getattr(Tensor(b), name)(0)
  check_value(got, ref(b, axis=0))
  assert got.dtype == (dtypes.bool if name in ("max", "min") else dtypes.int32)
  u = np.array([[3, 250], [7, 0]], np.uint8)
  check_value(getattr(Tensor(u), name)(0), ref(u, axis=0).astype(np.uint32 if name in ("sum", "prod") else np.uint8))


def test_reduce_dtypes():
  assert Tensor([1, 2], dtype=dtypes.int8).sum().dtype == dtypes.int32
  assert Tensor([1, 2], dtype=dtypes.uint8).sum().dtype == dtypes.uint32
  assert Tensor([1, 2], dtype=dtypes.int64).sum().dtype == dtypes.int64
  assert Tensor([1, 2], dtype=dtypes.float16).sum().dtype == dtypes.float16
  check_value(Tensor([100, 100, 100], dtype=dtypes.int8).sum(), 300)
  assert Tensor([1, 2], dtype=dtypes.int8).max().dtype == dtypes.int8
  check_value(Tensor([-128, 5], dtype=dtypes.int8).min(), -128)
  check_value(Tensor([127, -128], dtype=dtypes.int8).max(), 127)
  assert Tensor([1, 2]).mean().dtype == dtypes.float32
  check_value(Tensor([1, 2]).sum(dtype=dtypes.float32), 3.0, dtype=dtypes.float32)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
def test_var_std(axis):
  x = randf(4, 6)
  check_value(Tensor(x).var(axis), x.var(axis=axis, ddof=1), rtol=1e-4)
  check_value(Tensor(x).std(axis, keepdim=True), x.std(axis=axis, ddof=1, keepdims=True), rtol=1e-4)
  check_value(Tensor(x).var(axis, correction=0), x.var(axis=axis), rtol=1e-4)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_argmax_argmin(axis):
  x = randi(4, 6, lo=0, hi=4)  # ties: the first index wins, as numpy
  check_value(Tensor(x).argmax(axis), np.argmax(x, axis=axis), dtype=dtypes.int32)
  check_value(Tensor(x).argmin(axis), np.argmin(x, axis=axis), dtype=dtypes.int32)
  xf = randf(3, 5)
  check_value(Tensor(xf).argmax(axis, keepdim=True),
        np.argmax(xf, axis=axis, keepdims=True) if axis is not None else np.argmax(xf).reshape(1, 1))
  check_value(Tensor(x > 1).argmax(1), np.argmax(x > 1, axis=1))


def test_reduce_empty_and_size_one():
  check_value(Tensor.zeros(3, 0).sum(1), np.zeros(3), dtype=dtypes.float32)
  check_value(Tensor.zeros(0, 3).sum(0), np.zeros(3))
  check_value(Tensor(np.zeros((0, 3), np.float32)).prod(0), np.ones(3))
  check_value(Tensor(np.zeros((2, 0, 3), np.float32)).sum((0, 2)), np.zeros(0))
  check_value(Tensor(np.zeros((0,), np.float32)).mean(), np.array(np.nan))
  x = randf(1, 5, 1)
  check_value(Tensor(x).sum(0), x.sum(0))
  check_value(Tensor(x).max((0, 2)), x.max((0, 2)))
  check_value(Tensor(np.float32(3.5)).sum(), np.float32(3.5))
  check_value(Tensor(5).max(), 5)


def test_any_all():
  x = np.array([[0, 1], [0, 0]], np.int32)
  check_value(Tensor(x).any(1), x.any(1), dtype=dtypes.bool)
  check_value(Tensor(x).all(), x.all(), dtype=dtypes.bool)


def test_reduce_axis_errors():
  x = Tensor(randf(2, 3))
  with pytest.raises(ValueError, match=r"Tensor\.sum: axis 2 is out of range for shape \(2, 3\)"):
    x.sum(2)
  with pytest.raises(ValueError, match="max"):
    x.max(-3)
  with pytest.raises(ValueError, match="repeated"):
    x.sum((0, 0))
  with pytest.raises(TypeError):
    x.sum(1.5)
  with pytest.raises(ValueError, match="argmax"):
    Tensor.zeros(2, 0).argmax(1)


def test_argmax_argmin_with_nan_pick_the_first_nan():
  x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, -1.0, 0.5, 9.0]], np.float32)
  check_value(Tensor(x).argmax(1), np.argmax(x, 1), dtype=dtypes.int32)
  check_value(Tensor(x).argmin(1), np.argmin(x, 1), dtype=dtypes.int32)
  check_value(Tensor(x).argmax(), np.argmax(x), dtype=dtypes.int32)


def test_half_mean_var_std_do_not_overflow():
  x = (rng.standard_normal(100000) * 3 + 3).astype(np.float16)  # its sum (3e5) is past half's max (65504)
  x64 = x.astype(np.float64)
  check_value(Tensor(x).mean(), x64.mean().astype(np.float16), rtol=1e-3, dtype=dtypes.float16)
  check_value(Tensor(x).var(), x64.var(ddof=1).astype(np.float16), rtol=1e-3, dtype=dtypes.float16)
  check_value(Tensor(x).std(), x64.std(ddof=1).astype(np.float16), rtol=1e-3, dtype=dtypes.float16)
  check_value(Tensor(x.reshape(100, 1000)).mean(1, keepdim=True), x64.reshape(100, 1000).mean(1, keepdims=True),
              rtol=1e-3)


@pytest.mark.parametrize("formula,shapes", [
  ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]),
  ("i,i->", [(4,), (4,)]), ("i,j->ij", [(3,), (2,)]), ("...ij,jk->...ik", [(5, 2, 3), (3, 4)]),
  ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]), ("ji", [(2, 3)]), ("b...,b->...", [(2, 3, 1), (2,)]),
  ("ij,j->i", [(0, 3), (3,)]), ("ij , jk -> ki", [(1, 1), (1, 5)]), ("ii->", [(3, 3)]), ("ii->i", [(4, 4)]),
  ("iji,j->ij", [(2, 3, 2), (3,)]),
])
def test_einsum(formula, shapes):
  ops = [randf(*s) for s in shapes]
  check((Tensor.einsum(formula, *[Tensor(o) for o in ops]), np.einsum(formula, *ops)),
        (Tensor.einsum(formula, [Tensor(o) for o in ops]), np.einsum(formula, *ops)), rtol=1e-5, atol=1e-5)


def test_einsum_errors():
  # RuntimeError, as tinygrad and torch
  with pytest.raises(RuntimeError, match=r"einsum.*'j'.*\(2, 3\)"):
    Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 4))
  with pytest.raises(RuntimeError, match="einsum"):
    Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3))
  with pytest.raises(RuntimeError, match=r"einsum.*'i'.*sizes 2 and 3"):
    Tensor.einsum("ii->i", Tensor.ones(2, 3))
