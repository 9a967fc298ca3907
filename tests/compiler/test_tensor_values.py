"""Regression tests for wrong values and wrong errors of the Tensor front end (issue 12), on both backends:
the numpy reference interpreter and the compiled LLVM kernels."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.dtype import dtypes
from compiler.tensor import Tensor

pytestmark = pytest.mark.usefixtures("backend")
ON_CL = True  # the value regressions run on OpenCL too (support/backends.py)


def same(t: Tensor, want, dtype=None) -> None:
  """Equal values (nan where nan, the sign of zeros and infinities included) and, if given, the dtype."""
  got = t.numpy()
  want = np.asarray(want)
  assert got.shape == want.shape, (got.shape, want.shape)
  if dtype is not None:
    assert t.dtype == dtype, (t.dtype, dtype)
  if got.dtype.kind == "f":
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    ok = ~np.isnan(got)
    assert np.array_equal(got[ok], want[ok]), (got, want)
    assert np.array_equal(np.signbit(got[ok]), np.signbit(want[ok])), (got, want)
  else:
    assert np.array_equal(got, want), (got, want)


# ---- cat / stack: both call forms
def test_cat_method_form_keeps_self():
  a, b, c = Tensor([1, 2]), Tensor([3, 4]), Tensor([5])
  same(a.cat(b), [1, 2, 3, 4])
  same(a.cat(b, c), [1, 2, 3, 4, 5])
  same(Tensor.cat(a, b), [1, 2, 3, 4])
  same(Tensor.cat([a, b]), [1, 2, 3, 4])
  m, n = np.arange(6).reshape(2, 3), np.arange(4).reshape(2, 2)
  same(Tensor(m).cat(Tensor(n), Tensor(m), dim=1), np.concatenate([m, n, m], 1))
  same(Tensor(m).cat(Tensor(n), dim=-1), np.concatenate([m, n], -1))


def test_stack_method_form_keeps_self():
  a, b = Tensor([1, 2]), Tensor([3, 4])
  same(a.stack(b), [[1, 2], [3, 4]])
  same(a.stack(b, a, dim=1), [[1, 3, 1], [2, 4, 2]])
  same(Tensor.stack(a, b, dim=1), [[1, 3], [2, 4]])
  same(Tensor.stack([a, b], dim=-1), [[1, 3], [2, 4]])
  same(Tensor(np.float32(2.5)).stack(Tensor(np.float32(1))), np.float32([2.5, 1]))


def test_cat_stack_bad_arguments():
  a, b, c = Tensor([1, 2]), Tensor([3, 4]), Tensor([5, 6])
  with pytest.raises(ValueError, match="stack"):  # tinygrad's argfix: a sequence must be the only argument
    Tensor.stack((a, b), c)
  with pytest.raises(ValueError, match="cat"):
    Tensor.cat([a, b], c)
  with pytest.raises(TypeError, match="cat"):
    a.cat(3)
  with pytest.raises(IndexError, match="cat"):
    a.cat(b, dim=1)
  with pytest.raises(IndexError, match="stack"):
    a.stack(b, dim=2)
  with pytest.raises(IndexError, match="cat"):
    Tensor(1).cat(Tensor(2))
  assert not hasattr(Tensor, "cat_")


def test_cat_keeps_negative_zero():
  same(1 / Tensor.cat(Tensor([-0.0]), Tensor([1.0])), np.float32([-math.inf, 1]))
  same(Tensor([-0.0, 0.0]).cat(Tensor([-0.0]), Tensor([0.0, math.nan])), np.float32([-0.0, 0.0, -0.0, 0.0, math.nan]))
  same(Tensor([[-0.0]]).stack(Tensor([[0.0]]), dim=2), np.float32([[[-0.0, 0.0]]]))


# ---- constants that don't fit their dtype raise instead of wrapping
def test_arange_picks_int64_past_int32():
  t = Tensor.arange(2**31, 2**31 + 2)
  same(t, np.array([2**31, 2**31 + 1], np.int64), dtypes.int64)
  same(Tensor.arange(-2**31 - 1, -2**31 + 1), np.array([-2**31 - 1, -2**31], np.int64), dtypes.int64)
  same(Tensor.arange(2**31 - 2, 2**31), np.array([2**31 - 2, 2**31 - 1], np.int32), dtypes.int32)
  same(Tensor.arange(5, 0, -2), np.int32([5, 3, 1]), dtypes.int32)
  same(Tensor.arange(0), np.zeros(0, np.int32), dtypes.int32)


def test_arange_out_of_range_for_dtype_raises():
  with pytest.raises(OverflowError, match=r"arange.*128.*int8"):
    Tensor.arange(126, 129, dtype=dtypes.int8)
  with pytest.raises(OverflowError, match=r"arange.*int32"):
    Tensor.arange(2**33, dtype=dtypes.int)
  with pytest.raises(OverflowError, match=r"arange.*uint8"):
    Tensor.arange(-1, 3, dtype=dtypes.uint8)
  same(Tensor.arange(125, 128, dtype=dtypes.int8), np.int8([125, 126, 127]), dtypes.int8)
  same(Tensor.arange(0, 1, 0.25, dtype=dtypes.float16), np.float16([0, 0.25, 0.5, 0.75]), dtypes.float16)


def test_full_out_of_range_raises():
  with pytest.raises(OverflowError, match=r"full.*300.*uint8"):
    Tensor.full((2,), 300, dtypes.uint8)
  with pytest.raises(OverflowError, match=r"full.*-1.*uint32"):
    Tensor.full((2,), -1, dtypes.uint32)
  with pytest.raises(OverflowError, match=r"full.*float16"):
    Tensor.full((2,), 1e6, dtypes.float16)
  with pytest.raises(OverflowError, match=r"full.*int32"):
    Tensor.full((2,), math.inf, dtypes.int32)
  with pytest.raises(OverflowError, match=r"full.*int8"):
    Tensor.ones(2, dtype=dtypes.int8).full_like(128)
  same(Tensor.full((2,), 255, dtypes.uint8), np.uint8([255, 255]), dtypes.uint8)
  same(Tensor.full((1,), 2.7, dtypes.int32), np.int32([2]), dtypes.int32)
  same(Tensor.full((1,), math.inf, dtypes.float16), np.float16([math.inf]), dtypes.float16)


def test_pad_value_out_of_range_raises():
  x = Tensor(np.uint8([1, 2]))
  with pytest.raises(OverflowError, match=r"pad.*300.*uint8"):
    x.pad(((1, 1),), value=300)
  with pytest.raises(OverflowError, match=r"pad.*-1.*uint8"):
    x.pad(((1, 0),), value=-1)
  same(x.pad(((1, 1),), value=255), np.uint8([255, 1, 2, 255]), dtypes.uint8)
  same(Tensor(np.int8([1])).pad(((0, 1),), value=-128), np.int8([1, -128]), dtypes.int8)


# ---- dtype names, as tinygrad spells them
@pytest.mark.parametrize("name, dt", [
  ("int", dtypes.int32), ("float", dtypes.float32), ("half", dtypes.float16), ("double", dtypes.float64),
  ("long", dtypes.int64), ("uint", dtypes.uint32), ("ulong", dtypes.uint64), ("char", dtypes.int8),
  ("uchar", dtypes.uint8), ("short", dtypes.int16), ("ushort", dtypes.uint16), ("bool", dtypes.bool),
  ("float32", dtypes.float32), ("INT", dtypes.int32), ("Float", dtypes.float32), ("int64", dtypes.int64),
  ("f8", dtypes.float64), ("i2", dtypes.int16)])  # numpy's codes still read as numpy reads them
def test_dtype_strings(name, dt):
  t = Tensor([0, 1], dtype=name)
  same(t, np.array([0, 1], dt.np), dt)
  assert Tensor.zeros(2, dtype=name).dtype == dt
  assert Tensor([1.5]).cast(name).dtype == dt


def test_unknown_dtype_string_raises():
  with pytest.raises(TypeError, match="dtype"):
    Tensor([1], dtype="int33")
  with pytest.raises(TypeError, match="dtype"):
    Tensor([1], dtype="void")


def close(t: Tensor, want, rtol: float, dtype=None) -> None:
  """Within rtol where finite; nan, infinities and the sign of zeros exactly as in want."""
  got, want = t.numpy(), np.asarray(want)
  assert got.shape == want.shape and (dtype is None or t.dtype == dtype), (got.shape, want.shape, t.dtype)
  fin = np.isfinite(want) & (want != 0)
  assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
  exact = ~fin & ~np.isnan(want)
  assert np.array_equal(got[exact], want[exact]) and np.array_equal(np.signbit(got[exact]), np.signbit(want[exact])), \
    (got, want)
  np.testing.assert_allclose(got[fin], want[fin], rtol=rtol)


# ---- pow: IEEE pow's special cases (numpy's float32 np.power, which torch matches), int powers stay int
POW_BASES = np.float32([-math.inf, -1e10, -3, -2, -1, -0.5, -0.0, 0.0, 1e-10, 0.5, 1, 2, 3.5, 1e10, math.inf, math.nan])


@pytest.mark.parametrize("e", [0.3, 3.3, 2.5, -0.3, -2.5, -3.0, 3.0, 0.0, -0.0, math.inf, -math.inf, math.nan, 1e10])
def test_pow_special_cases(e):
  with np.errstate(all="ignore"):
    want = np.power(POW_BASES, np.float32(e))
  close(Tensor(POW_BASES) ** Tensor(np.full(POW_BASES.shape, e, np.float32)), want, 3e-7, dtypes.float32)
  close(Tensor(POW_BASES) ** e, want, 3e-7, dtypes.float32)


def test_pow_issue_cases():
  same(Tensor([-math.inf]) ** 0.3, np.float32([math.inf]))
  same(Tensor([-math.inf]) ** 3.3, np.float32([math.inf]))
  same(Tensor([-math.inf]) ** Tensor([2.5]), np.float32([math.inf]))
  same(Tensor([-1.0]) ** Tensor([math.inf]), np.float32([1]))
  same(Tensor([-1.0, -1.0]) ** Tensor([-math.inf, math.nan]), np.float32([1, math.nan]))


def test_pow_float64_and_half():
  b = POW_BASES.astype(np.float64)
  with np.errstate(all="ignore"):
    close(Tensor(b) ** Tensor(np.full(b.shape, 2.5)), np.power(b, 2.5), 1e-12, dtypes.float64)
    h = np.float16([-math.inf, -2, -0.0, 0.5, 3, math.nan])
    close(Tensor(h) ** Tensor(np.float16([1.5] * 6)), np.power(h, np.float16(1.5)), 1e-3, dtypes.float16)


def test_int_pow_stays_int():
  same(Tensor([1, 2, 3]) ** Tensor([2, 2, 2]), np.int32([1, 4, 9]), dtypes.int32)
  same(2 ** Tensor([1, 2, 3]), np.int32([2, 4, 8]), dtypes.int32)
  same(Tensor([True, False]) ** 4, np.int32([1, 0]), dtypes.int32)  # tinygrad: bool with an int promotes to int32
  same(Tensor([-3, 7, 0, 5]) ** 3, np.int32([-27, 343, 0, 125]), dtypes.int32)
  same(Tensor([3, 2]) ** 0, np.int32([1, 1]), dtypes.int32)
  x = np.array([-3, -1, 0, 1, 2, 7, 11], np.int64)
  e = np.array([5, 4, 3, 0, 40, 11, 17], np.int64)
  same(Tensor(x) ** Tensor(e), x ** e, dtypes.int64)  # wraps as numpy's int64 does
  u = np.uint8([2, 3, 255, 0])
  same(Tensor(u) ** Tensor(np.uint8([7, 5, 2, 0])), u ** np.uint8([7, 5, 2, 0]), dtypes.uint8)
  # a negative tensor exponent truncates 1/x**n (torch): 1 and -1 keep their magnitude, the rest give 0
  same(Tensor([2, 1, -1, -1, 5]) ** Tensor([-1, -3, -3, -2, -2]), np.int32([0, 1, -1, 1, 0]), dtypes.int32)
  same(Tensor([2, 3]) ** 2.0, np.float32([4, 9]), dtypes.float32)
  same(Tensor([2, 4]) ** -1.0, np.float32([0.5, 0.25]), dtypes.float32)


def test_int_to_negative_int_power_raises():
  with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
    Tensor([1, 2]) ** -2
  with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
    Tensor([True]) ** -1


# ---- float % and //: numpy's fmod-based remainder, exactly
MOD_SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 2.5, 1e-40]


def _spread(rng, n: int, dt, lo: int, hi: int) -> np.ndarray:
  """Random values of every magnitude between 2**lo and 2**hi, both signs, plus every pair of special values."""
  return (rng.standard_normal(n) * np.exp2(rng.integers(lo, hi, n).astype(np.float64))).astype(dt)


def _mod_operands(dt, lo: int, hi: int, n: int = 600) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(12)
  sp = np.array(MOD_SPECIALS, dt)
  a = np.concatenate([_spread(rng, n, dt, lo, hi), np.repeat(sp, len(sp)), np.float32([3.0, -3.0, 3.0]).astype(dt)])
  b = np.concatenate([_spread(rng, n, dt, lo, hi), np.tile(sp, len(sp)), np.float32([1 / 3, 1 / 3, -1 / 3]).astype(dt)])
  return a, b


def test_float_mod_issue_case():
  same(Tensor([3.0]) % Tensor([np.float32(1 / 3)]), np.float32([0.33333325]))
  same(Tensor([3.0]) // Tensor([np.float32(1 / 3)]), np.float32([8.0]))
  same(Tensor([-1.0, 1.0, -0.0]) % math.inf, np.remainder(np.float32([-1.0, 1.0, -0.0]), np.float32(math.inf)))


@pytest.mark.parametrize("dt, lo, hi", [(np.float32, -149, 128), (np.float16, -24, 16)])
def test_float_mod_floordiv_fmod_exact(dt, lo, hi):
  a, b = _mod_operands(dt, lo, hi)
  with np.errstate(all="ignore"):
    same(Tensor(a) % Tensor(b), np.remainder(a, b))
    same(Tensor(a).fmod(Tensor(b)), np.fmod(a, b))
    same(Tensor(a) // Tensor(b), np.floor_divide(a, b))
    same(Tensor(a[:40]) % 0.75, np.remainder(a[:40], dt(0.75)))
    same(5.5 % Tensor(b[:40]), np.remainder(dt(5.5), b[:40]))


def test_float64_mod_exact():
  # exact while |a / b| < 2**116, at every magnitude (the pieces of b are scaled into float32's range)
  rng = np.random.default_rng(13)
  a = _spread(rng, 1500, np.float64, -1070, 1020)
  with np.errstate(all="ignore"):
    b = a / np.exp2(rng.integers(-30, 116, a.size).astype(np.float64)) * rng.uniform(0.5, 1.0, a.size)
  b = np.where(b == 0, 1e-300, b)
  sp = np.array(MOD_SPECIALS[:-1], np.float64)  # not 1e-40: 1 / 1e-40 is past 2**116
  a, b = np.concatenate([a, np.repeat(sp, len(sp)), [3.0]]), np.concatenate([b, np.tile(sp, len(sp)), [0.1]])
  with np.errstate(all="ignore"):
    same(Tensor(a).fmod(Tensor(b)), np.fmod(a, b), dtypes.float64)
    same(Tensor(a) % Tensor(b), np.remainder(a, b), dtypes.float64)
    same(Tensor(a[-90:]) // Tensor(b[-90:]), np.floor_divide(a[-90:], b[-90:]), dtypes.float64)


def test_float64_mod_huge_quotient_close():
  # past 2**116 one corrected truncating step: within the dividend's rounding (exact where LLVM forms an fma)
  a, b = np.float64([1e300, -3e200, 7e100, 1.0]), np.float64([3.3, 1.7e10, -0.9, 1e-40])
  got = (Tensor(a) % Tensor(b)).numpy()
  assert np.all((got >= np.minimum(b, 0)) & (got <= np.maximum(b, 0)))


def test_abs_of_zeros():
  same(Tensor([-0.0, 0.0, -1.5, math.nan, -math.inf]).abs(), np.float32([0.0, 0.0, 1.5, math.nan, math.inf]))
  same(Tensor(np.float64([-0.0])).abs(), np.float64([0.0]))
  same(Tensor([-3, 0, 2]).abs(), np.int32([3, 0, 2]))


# ---- sin / cos: exact argument reduction over the whole float range
def _ulp_error(got: np.ndarray, x: np.ndarray, fn) -> np.ndarray:
  """|got - fn(x)| in ulps of the result's dtype, against fn computed in float64 (x's float32/16 values exactly)."""
  with np.errstate(all="ignore"):
    want = fn(x.astype(np.float64))
  fin = np.isfinite(want)
  assert np.array_equal(np.isnan(got), np.isnan(want)), (x, got, want)
  return np.abs(got[fin].astype(np.float64) - want[fin]) / np.spacing(np.abs(want[fin]).astype(got.dtype))


def test_cos_large_arguments_issue_case():
  got = Tensor([1e7, 2.0**31]).cos().numpy()
  np.testing.assert_allclose(got, np.cos(np.float32([1e7, 2.0**31]).astype(np.float64)), rtol=1e-6)
  assert abs(got[0] - -0.907) < 1e-3 and abs(got[1] - 0.238) < 1e-3


@pytest.mark.parametrize("dt, lo, hi", [(np.float32, -40, 128), (np.float16, -24, 16)])
def test_sin_cos_every_magnitude(dt, lo, hi):
  rng = np.random.default_rng(6)
  with np.errstate(over="ignore"):
    x = _spread(rng, 3000, dt, lo, hi)
  fi = np.finfo(dt)
  edge = [0.0, -0.0, math.inf, -math.inf, math.nan, fi.max, -fi.max, fi.tiny, fi.smallest_subnormal, math.pi / 2,
          math.pi, 3 * math.pi / 2, 2 * math.pi, 1e4 * math.pi]
  x = np.concatenate([x, np.array(edge, dt)])
  for name, fn in (("sin", np.sin), ("cos", np.cos)):
    got = getattr(Tensor(x), name)().numpy()
    assert got.dtype == dt
    assert _ulp_error(got, x, fn).max(initial=0) <= 1.0, name
  same(Tensor(np.array([0.0, -0.0], dt)).sin(), np.array([0.0, -0.0], dt))


def test_sin_cos_float64():
  rng = np.random.default_rng(7)
  x = np.concatenate([_spread(rng, 2000, np.float64, -40, 128), [0.0, -0.0, math.inf, math.nan, 1e300, -1e200]])
  for name, fn in (("sin", np.sin), ("cos", np.cos)):
    got = getattr(Tensor(x), name)().numpy()
    assert got.dtype == np.float64
    assert _ulp_error(got, x, fn).max(initial=0) <= 4.0, name


@settings(max_examples=15)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1, max_size=48))
def test_sin_cos_hypothesis(xs):
  x = np.resize(np.array(xs, np.float32), 48)  # one shape: every example runs the kernels compiled for the first
  for name, fn in (("sin", np.sin), ("cos", np.cos)):
    assert _ulp_error(getattr(Tensor(x), name)().numpy(), x, fn).max(initial=0) <= 1.0, (name, x)


def test_tan_large_arguments():
  x = np.float32([1e7, 2.0**31, -3e38, 0.5, -0.0, 1e-30])
  np.testing.assert_allclose(Tensor(x).tan().numpy(), np.tan(x.astype(np.float64)), rtol=3e-7)


# ---- invalid arguments are refused, with tinygrad's exception types
def test_flip_repeated_axis_raises():
  x = Tensor(np.arange(6).reshape(2, 3))
  with pytest.raises(RuntimeError, match=r"flip.*more than once"):
    x.flip((0, 0))
  with pytest.raises(RuntimeError, match="flip"):
    x.flip((1, -1))
  with pytest.raises(IndexError, match="flip"):
    x.flip(2)
  same(x.flip((0, 1)), np.arange(6).reshape(2, 3)[::-1, ::-1])
  same(x.flip(-1), np.arange(6).reshape(2, 3)[:, ::-1])


def test_squeeze_of_0d_checks_the_axis():
  x = Tensor(np.float32(3))
  with pytest.raises(IndexError, match="squeeze"):
    x.squeeze(10)
  with pytest.raises(IndexError, match="squeeze"):
    x.squeeze(-2)
  same(x.squeeze(0), np.float32(3))
  same(x.squeeze(-1), np.float32(3))
  same(x.squeeze(), np.float32(3))
  with pytest.raises(IndexError, match="squeeze"):
    Tensor([[1]]).squeeze(2)


# ---- 0-d tensors take dim 0 and -1 (torch, tinygrad)
@pytest.mark.parametrize("dim", [0, -1, (0,), None])
def test_0d_reductions_take_dim_0(dim):
  x, v = Tensor(np.float32(2.5)), np.float32(2.5)
  for name in ("sum", "max", "min", "mean", "prod"):
    got = getattr(x, name)(dim)
    assert got.shape == ()
    same(got, v)
  same(x.sum(dim, keepdim=True), v)
  same(Tensor(True).any(dim), np.True_)
  same(Tensor(3).sum(dim), np.int32(3))
  if dim is not None and not isinstance(dim, tuple):
    same(x.softmax(dim), np.float32(1))
    same(x.log_softmax(dim), np.float32(0))
    same(x.argmax(dim), np.int32(0))
    same(x.argmin(dim), np.int32(0))
  same(x.var(dim, correction=0), np.float32(0))


def test_0d_reduction_bad_dim_raises():
  x = Tensor(np.float32(1))
  for call in (lambda: x.sum(1), lambda: x.max(-2), lambda: x.softmax(1), lambda: x.argmax(1), lambda: x.mean((0, 2))):
    with pytest.raises(IndexError):
      call()


# ---- div(rounding_mode=)
def test_div_rounding_modes():
  a = np.array([7, -7, 7, -7, 0, 5], np.int32)
  b = np.array([2, 2, -2, -2, 3, 5], np.int32)
  same(Tensor(a).div(Tensor(b), rounding_mode="trunc"), np.trunc(a / b).astype(np.int32), dtypes.int32)
  same(Tensor(a).div(Tensor(b), rounding_mode="floor"), a // b, dtypes.int32)
  same(Tensor(a).div(3, rounding_mode="trunc"), np.int32([2, -2, 2, -2, 0, 1]), dtypes.int32)
  same(Tensor(a).div(Tensor(b)), (a / b).astype(np.float32), dtypes.float32)
  f = np.float32([7.5, -7.5, 1e30, -0.5, math.inf, math.nan, 3.0])
  g = np.float32([2, 2, 3e-9, 4, 2, 1, 1 / 3])
  with np.errstate(all="ignore"):
    same(Tensor(f).div(Tensor(g), rounding_mode="trunc"), np.trunc(f / g), dtypes.float32)
    same(Tensor(f).div(Tensor(g), rounding_mode="floor"), np.floor_divide(f, g), dtypes.float32)
  same(Tensor(np.int8([9, -9])).div(4, rounding_mode="trunc"), np.int8([2, -2]), dtypes.int8)
  same(Tensor(np.float32([5.0])).div(2, reverse=True, rounding_mode="floor"), np.float32([0]))
  with pytest.raises(RuntimeError, match="rounding_mode"):
    Tensor([1.0]).div(2, rounding_mode="round")


def test_gelu_approximate():
  x = np.float32([-5, -1.5, -0.1, 0, 0.3, 2, 8])
  from math import erf
  exact = np.float32([0.5 * v * (1 + erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
  tanh = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
  np.testing.assert_allclose(Tensor(x).gelu(approximate="none").numpy(), exact, atol=3e-7, rtol=1e-6)
  np.testing.assert_allclose(Tensor(x).gelu(approximate="tanh").numpy(), tanh, atol=1e-6, rtol=1e-5)
  np.testing.assert_allclose(Tensor(x).gelu().numpy(), tanh, atol=1e-6, rtol=1e-5)  # tinygrad's default
  with pytest.raises(RuntimeError, match="gelu"):
    Tensor(x).gelu(approximate="fast")


def test_squeeze_unsqueeze_edges():
  a = np.zeros((1, 3, 1, 0, 1), np.float32)
  same(Tensor(a).squeeze((0, 2)), a.squeeze((0, 2)))
  same(Tensor(a).squeeze((-1, 1)), a.reshape(1, 3, 1, 0))  # size-3 dim 1 is kept (torch)
  same(Tensor(a).squeeze(3), a)
  same(Tensor(a).squeeze(), a.squeeze())
  same(Tensor(np.float32(1)).unsqueeze(0), np.float32([1]))
  same(Tensor(np.float32(1)).unsqueeze(-1), np.float32([1]))
  same(Tensor(a).unsqueeze(-1), a[..., None])
  same(Tensor(a).unsqueeze(-6), a[None])
  with pytest.raises(IndexError, match="unsqueeze"):
    Tensor(a).unsqueeze(6)
  with pytest.raises(IndexError, match="squeeze"):
    Tensor(a).squeeze((0, 5))
  with pytest.raises(ValueError, match="squeeze"):
    Tensor(a).squeeze((0, 0))


# ---- pad modes (numpy: reflect = torch's reflect, edge = replicate, wrap = circular)
_NP_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pads", [
  ((5,), ((2, 3),)), ((3, 4), ((1, 2), (3, 0))), ((2, 3, 4), (None, (2, 2), (0, 3))), ((1, 4), (None, (3, 1))),
  ((4, 1), ((0, 3), None))])
def test_pad_modes_match_numpy(mode, shape, pads):
  a = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) - 3.5
  np_pads = [(0, 0) if p is None else p for p in pads]
  if mode == "reflect" and any(max(p) >= s for p, s in zip(np_pads, shape)):
    with pytest.raises(ValueError, match="reflect"):
      Tensor(a).pad(pads, mode=mode)
    return
  same(Tensor(a).pad(pads, mode=mode), np.pad(a, np_pads, mode=_NP_MODE[mode]))
  flat = tuple(v for p in reversed(np_pads) for v in p)  # torch's flat order: last dim first
  same(Tensor(a).pad(flat, mode=mode), np.pad(a, np_pads, mode=_NP_MODE[mode]))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_modes_negative_and_int(mode):
  a = np.arange(12, dtype=np.int32).reshape(3, 4)
  # as tinygrad: the positive pads first, then the negative ones remove from the padded tensor
  same(Tensor(a).pad(((1, -1), (-2, 2)), mode=mode), np.pad(a, ((1, 0), (0, 2)), mode=_NP_MODE[mode])[:3, 2:],
       dtypes.int32)


def test_pad_mode_errors_and_constant():
  x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
  with pytest.raises(NotImplementedError, match="symmetric"):
    x.pad(((1, 1), (1, 1)), mode="symmetric")
  with pytest.raises(ValueError, match="circular"):
    x.pad(((3, 0), None), mode="circular")
  np.testing.assert_array_equal(x.pad(((-1, 0), None), mode="circular").numpy(), x.numpy()[1:])  # a crop, as torch
  with pytest.raises(ValueError, match="value"):
    x.pad(((1, 0), None), mode="reflect", value=2.0)
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  same(x.pad(((1, 0), (0, 2)), mode="constant", value=-1.5), np.pad(a, ((1, 0), (0, 2)), constant_values=-1.5))
  same(x.pad(((1, 0), (0, 2)), 7.0), np.pad(a, ((1, 0), (0, 2)), constant_values=7.0))  # the old (padding, value)
  same(x.pad((1, 1), mode="circular"), np.pad(a, ((0, 0), (1, 1)), mode="wrap"))
  same(Tensor(np.zeros((0, 3), np.float32)).pad((None, (1, 1)), mode="reflect"), np.zeros((0, 5), np.float32))


# ---- n-d convolution and pooling, ceil_mode, count_include_pad (numpy references written from torch's rules)
def _np_conv(x, w, stride, padding, dilation, groups):
  n = w.ndim - 2
  x = np.pad(x.astype(np.float64), ((0, 0), (0, 0)) + tuple((p, p) for p in padding))
  cout, cpg, ks = w.shape[0], w.shape[1], w.shape[2:]
  o_ = tuple((s - d * (k - 1) - 1) // st + 1 for s, d, k, st in zip(x.shape[2:], dilation, ks, stride))
  out = np.zeros((x.shape[0], cout) + o_)
  for o in range(cout):
    g = o // (cout // groups)
    for off in np.ndindex(*ks):
      sl = tuple(slice(k * d, k * d + st * (oo - 1) + 1, st) for k, d, st, oo in zip(off, dilation, stride, o_))
      patch = x[(slice(None), slice(g * cpg, (g + 1) * cpg)) + sl]
      out[:, o] += np.tensordot(patch, w[(o, slice(None)) + off].astype(np.float64), axes=([1], [0]))
  assert out.ndim == n + 2
  return out.astype(np.float32)


@pytest.mark.parametrize("shape, wshape, kw", [
  ((2, 4, 9), (6, 2, 3), dict(groups=2, stride=2, padding=1)),  # conv1d
  ((1, 3, 7), (2, 3, 1), dict(dilation=3)),
  ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), dict(padding=(1, 0, 2), stride=(1, 2, 2))),  # conv3d
  ((2, 2, 4, 4, 4), (2, 1, 3, 3, 3), dict(groups=2, dilation=(1, 1, 2), padding=1)),
  ((1, 1, 1, 5), (1, 1, 1, 2), dict()),  # size-1 spatial dims
])
def test_conv_nd(shape, wshape, kw):
  rng = np.random.default_rng(3)
  x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (shape, wshape, (wshape[0],)))
  n = len(wshape) - 2
  tup = lambda v, d: tuple(v) if isinstance(v, tuple) else (v,) * n  # noqa: E731
  ref = _np_conv(x, w, tup(kw.get("stride", 1), 1), tup(kw.get("padding", 0), 0), tup(kw.get("dilation", 1), 1),
                 kw.get("groups", 1))
  bias = b.reshape((1, -1) + (1,) * n)
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), Tensor(b), **kw).numpy(), ref + bias, rtol=1e-4, atol=1e-4)


def test_conv_nd_errors():
  with pytest.raises(ValueError, match="conv2d"):
    Tensor(np.zeros((1, 2, 5), np.float32)).conv2d(Tensor(np.zeros((1, 2, 3, 3), np.float32)))
  with pytest.raises(ValueError, match="padding"):
    Tensor(np.zeros((1, 2, 5), np.float32)).conv2d(Tensor(np.zeros((1, 2, 3), np.float32)), padding=(1, 1, 1))
  with pytest.raises(ValueError, match="stride"):
    Tensor(np.zeros((1, 2, 5, 5, 5), np.float32)).conv2d(Tensor(np.zeros((1, 2, 3, 3, 3), np.float32)), stride=(1, 2))


def _np_pool(x, k, st, pads, dl, ceil_mode, fn, count_include_pad=True):
  """torch's pooling over the last len(k) dims: pads per dim (before, after); mean's divisor as torch counts it."""
  n = len(k)
  lead = x.shape[:-n]
  outs = []
  for s, kk, ss, d, (pb, pa) in zip(x.shape[-n:], k, st, dl, pads):
    span = s + pb + pa - d * (kk - 1) - 1
    o = (-(-span // ss) if ceil_mode else span // ss) + 1
    if ceil_mode and (o - 1) * ss >= s + pb:
      o -= 1
    outs.append(o)
  out = np.zeros(lead + tuple(outs), np.float64)
  for idx in np.ndindex(*outs):
    vals, cnt = [], 0
    for off in np.ndindex(*k):
      pos = [i * ss - pb + o * d for i, ss, (pb, _), o, d in zip(idx, st, pads, off, dl)]
      inside = all(0 <= p < s for p, s in zip(pos, x.shape[-n:]))
      in_pad = all(-pb <= p < s + pa for p, s, (pb, pa) in zip(pos, x.shape[-n:], pads))
      if inside:
        vals.append(x[(...,) + tuple(pos)])
      elif in_pad and fn == "avg":
        vals.append(np.zeros(lead))
      cnt += inside or (in_pad and count_include_pad)
    out[(...,) + idx] = np.max(vals, 0) if fn == "max" else np.sum(vals, 0) / cnt
  return out


@pytest.mark.parametrize("shape, k, st, pad, ceil", [
  ((2, 3, 7, 7), 3, 2, 1, True), ((1, 2, 6, 5), (2, 3), (2, 2), 0, True), ((1, 1, 5, 5), 2, 2, 1, True),
  ((2, 8), (3,), (2,), (1,), True), ((1, 2, 4, 5, 6), (2, 2, 3), (2, 1, 2), (1, 0, 1), True),  # 1-d and 3-d
  ((1, 2, 4, 5, 6), (2, 2, 3), None, 0, False), ((3, 1, 5), (2,), (3,), 0, False), ((1, 1, 1, 4), 1, 1, 0, True),
])
def test_pools_nd_ceil_mode(shape, k, st, pad, ceil):
  rng = np.random.default_rng(4)
  x = rng.standard_normal(shape).astype(np.float32)
  kk = (k, k) if isinstance(k, int) else k
  n = len(kk)
  stt = kk if st is None else ((st,) * n if isinstance(st, int) else st)
  pads = tuple((p, p) for p in ((pad,) * n if isinstance(pad, int) else pad))
  got = Tensor(x).max_pool2d(k, st, padding=pad, ceil_mode=ceil).numpy()
  np.testing.assert_allclose(got, _np_pool(x, kk, stt, pads, (1,) * n, ceil, "max"))
  for cip in (True, False):
    got = Tensor(x).avg_pool2d(k, st, padding=pad, ceil_mode=ceil, count_include_pad=cip).numpy()
    np.testing.assert_allclose(got, _np_pool(x, kk, stt, pads, (1,) * n, ceil, "avg", cip), rtol=1e-5, atol=1e-6)


def test_pool_dilation_ceil_and_ints():
  x = np.arange(2 * 9 * 8, dtype=np.int32).reshape(2, 9, 8) % 17 - 8
  got = Tensor(x).max_pool2d(3, 2, dilation=2, padding=1, ceil_mode=True)
  same(got, _np_pool(x, (3, 3), (2, 2), ((1, 1), (1, 1)), (2, 2), True, "max").astype(np.int32), dtypes.int32)
  got = Tensor(x).avg_pool2d((2, 3), 2, padding=(1, 1), ceil_mode=True, count_include_pad=False).numpy()
  np.testing.assert_allclose(got, _np_pool(x, (2, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), True, "avg", False), rtol=1e-6)


def test_0d_movement_takes_dim_0():
  x = Tensor(np.float32(4))
  same(x.flip(0), np.float32(4))
  same(x.flip((-1,)), np.float32(4))
  same(x.transpose(0, -1), np.float32(4))
  with pytest.raises(IndexError, match="flip"):
    x.flip(1)
  with pytest.raises(IndexError, match="transpose"):
    x.transpose(0, 1)


def test_integer_float_powers_round_once():
  x = np.float32([1.0000001, 0.9999999, 1.1, -1.3, 3.0, 7.7, 1e-3, -0.0, math.inf, math.nan])
  for n in (2, 3, 7, 31, 64, -1, -5, -64, 0):
    with np.errstate(all="ignore"):
      want = np.power(x.astype(np.float64), n).astype(np.float32)
      want_h = np.power(x.astype(np.float16).astype(np.float64), n).astype(np.float16)
    close(Tensor(x) ** n, want, 1.5e-7, dtypes.float32)
    close(Tensor(x.astype(np.float16)) ** n, want_h, 1e-3, dtypes.float16)


def test_permute_and_reshape_argument_errors_are_runtime_errors():
  x = Tensor(np.zeros((2, 3), np.float32))
  for call in (lambda: x.permute(0, 0), lambda: x.permute(1, 0, 2), lambda: x.reshape(-1, -1)):
    with pytest.raises(RuntimeError, match=r"Tensor\.(permute|reshape)"):  # tinygrad's and torch's type
      call()
    with pytest.raises(ValueError):  # and numpy's
      call()


def test_unflatten_infers_a_minus_one():
  a = np.arange(24, dtype=np.float32).reshape(2, 12)
  same(Tensor(a).unflatten(1, (-1, 3)), a.reshape(2, 4, 3))
  same(Tensor(a).unflatten(-1, (2, -1, 2)), a.reshape(2, 2, 3, 2))
  same(Tensor(np.zeros((2, 0), np.float32)).unflatten(1, (0, 5)), np.zeros((2, 0, 5), np.float32))
  for bad in ((-1, 5), (-1, -1), (5, 2)):
    with pytest.raises(ValueError, match="unflatten"):
      Tensor(a).unflatten(1, bad)


# ---- signed zeros and small arguments (found by the op fuzz, bench/fuzz_tensor_ops.py)
def test_pad_by_negative_zero_keeps_its_sign():
  same(Tensor([1.0]).pad(((1, 0),), value=-0.0), np.array([-0.0, 1.0], np.float32))


def test_constant_folding_keeps_signs_of_zero():
  same(Tensor(-0.83).ceil(), np.float32(-0.0))  # trunc(-0.83) folded in Python was +0.0
  same(Tensor(-0.25).trunc(), np.float32(-0.0))
  same(Tensor(-0.0) + 0.0, np.float32(0.0))  # x + 0.0 is not x for x = -0.0
  same(Tensor(-0.0) - (-0.0), np.float32(0.0))
  same(Tensor(-0.0) - 0.0, np.float32(-0.0))
  x = Tensor(np.array([-0.0, 0.0, 2.0], np.float32))
  same(x + 0.0, np.array([0.0, 0.0, 2.0], np.float32))
  same(x + (-0.0), np.array([-0.0, 0.0, 2.0], np.float32))


def test_tanh_keeps_relative_precision_near_zero():
  x = np.array([2.0 ** -102, 1e-30, 1e-4, -1e-4, 0.3, -2.0, 9.0, 20.0, 30.0, -0.0, np.inf, -np.inf, np.nan],
               np.float32)
  got, want = Tensor(x).tanh().numpy(), np.tanh(x.astype(np.float64)).astype(np.float32)
  np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)
  assert np.signbit(got[9])


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_elu_family_where_exp_is_subnormal(dt):
  """expm1's Kahan form (u - 1) * x / log(u) needs a u = exp(x) with all its bits; a subnormal u has few, and float32
  selu(-101.36) came out as -1.75857 instead of -1.75809 (found by the fuzz)."""
  x = np.array([-101.36, -95.0, -88.7, -87.5, -745.0, -720.0, -20.0, -6.1156, -1.0, -0.5, -1e-8], dt)
  want = np.expm1(x.astype(np.float64))
  got = {"selu": Tensor(x).selu().numpy(), "elu": Tensor(x).elu().numpy(), "celu": Tensor(x).celu().numpy()}
  np.testing.assert_allclose(got["selu"], 1.0507 * 1.67326 * want, rtol=4e-7 if dt is np.float32 else 1e-12)
  np.testing.assert_allclose(got["elu"], want, rtol=4e-7 if dt is np.float32 else 1e-12)
  np.testing.assert_allclose(got["celu"], want, rtol=4e-7 if dt is np.float32 else 1e-12)
