"""Activations, inverse trigonometric and hyperbolic functions, erf, round, copysign, lerp, shifts, isclose,
bitcast and clone against numpy on both backends."""
import math

import numpy as np
import pytest
from support.api_helpers import check, specials
from support.tensor_values import check_value, randf, randi

from compiler import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("backend")

rng = np.random.default_rng(11)
X = np.concatenate([specials(4, 5).reshape(-1), np.array([-30, -5, -2.5, -0.5, 0.5, 1.5, 2.5, 6.2, 40, 1e-6],
                                                           np.float32)])


def _np_softplus(x):
  return np.logaddexp(0, x.astype(np.float64))


def _sig(x):
  return 1 / (1 + np.exp(-x.astype(np.float64)))


ACTIVATIONS = {
  "silu": lambda x: x * _sig(x), "swish": lambda x: x * _sig(x), "relu6": lambda x: np.clip(x, 0, 6),
  "elu": lambda x: np.where(x > 0, x, np.expm1(x)), "celu": lambda x: np.where(x > 0, x, np.expm1(x)),
  "selu": lambda x: 1.0507 * np.where(x >= 0, x, 1.67326 * np.expm1(x)),
  "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6, "hardsigmoid": lambda x: np.clip(x / 6 + 0.5, 0, 1),
  "hardtanh": lambda x: np.clip(x, -1, 1), "softplus": _np_softplus, "logsigmoid": lambda x: -_np_softplus(-x),
  "mish": lambda x: x * np.tanh(_np_softplus(x)), "softsign": lambda x: x / (1 + np.abs(x)),
  "quick_gelu": lambda x: x * _sig(1.702 * x),
}


def test_activations():
  with np.errstate(all="ignore"):
    pairs = [(getattr(Tensor(X), n)(), f(X)) for n, f in ACTIVATIONS.items()]
    pairs += [(Tensor(X).elu(0.5), np.where(X > 0, X, 0.5 * np.expm1(X))),
              (Tensor(X).celu(2.0), np.where(X > 0, X, 2.0 * np.expm1(X / 2))),
              (Tensor(X).softplus(2.0), _np_softplus(2 * X) / 2), (Tensor(X).hardtanh(-2, 3), np.clip(X, -2, 3)),
              (Tensor(np.zeros((0, 3), np.float32)).silu(), np.zeros((0, 3)))]
  check(*pairs, rtol=2e-5, atol=1e-6)


def test_elu_family_near_zero():
  # exp(x) - 1 would lose the relative precision of tiny x (5% at 1e-6) and the sign of -0.0
  t = np.array([-1e-6, -3e-4, -1e-30, -0.0, 0.0], np.float32)
  check((Tensor(t).elu(), np.expm1(t)), (Tensor(t).celu(2.0), 2 * np.expm1(t / 2)),
        (Tensor(t).selu(), np.float32(1.0507 * 1.67326) * np.expm1(t)), rtol=1e-5, atol=0)
  check((1 / Tensor(t[3:]).elu(), np.array([-np.inf, np.inf], np.float32)), exact=True)
  # mish of a very negative x is tiny, not 0 (a tanh of the tiny softplus cancelled to 0)
  m = np.array([-80, -30, -12, 19.5, 20.5], np.float32)
  check((Tensor(m).mish(), m * np.tanh(np.logaddexp(0, m.astype(np.float64)))), rtol=1e-5, atol=0)


def test_activations_half_and_int():
  h = np.array([-3, -0.5, 0, 0.25, 2, 7], np.float16)
  i = np.array([-8, -1, 0, 3, 9], np.int32)
  check((Tensor(h).silu(), (h * _sig(h)).astype(np.float16)), (Tensor(i).relu6(), np.clip(i, 0, 6)),
        (Tensor(i).hardswish(), i * np.clip(i + 3, 0, 6) / 6), rtol=2e-3, atol=1e-3)
  assert Tensor(h).silu().dtype == dtypes.float16 and Tensor(i).relu6().dtype == dtypes.int32


def test_inverse_trig_hyperbolic_erf():
  u = np.concatenate([np.linspace(-1, 1, 41, dtype=np.float32), np.array([1.01, -3, np.nan, -0.0, 1e-5], np.float32)])
  big = np.array([1, 1.0001, 1.5, 10, 1e5, 1e20, 0.5, np.inf, np.nan], np.float32)
  erf = np.vectorize(math.erf)
  with np.errstate(all="ignore"):
    check((Tensor(u).asin(), np.arcsin(u)), (Tensor(u).acos(), np.arccos(u)), (Tensor(X).atan(), np.arctan(X)),
          (Tensor(u).atanh(), np.arctanh(u.astype(np.float64))), (Tensor(X).asinh(), np.arcsinh(X.astype(np.float64))),
          (Tensor(big).acosh(), np.arccosh(big.astype(np.float64))), (Tensor(X).sinh(), np.sinh(X.astype(np.float64))),
          (Tensor(X).cosh(), np.cosh(X.astype(np.float64))), (Tensor(X).erf(), erf(X.astype(np.float64))),
          (Tensor(np.array([1, 2], np.int32)).asin(), np.arcsin(np.array([1, 2], np.float32))), rtol=1e-5, atol=3e-7)
  check((Tensor(np.array([-0.0, 0.0], np.float32)).asin(), np.array([-0.0, 0.0], np.float32)),
        (Tensor(np.array([-0.0, -np.inf], np.float32)).atan(), np.array([-0.0, -np.pi / 2], np.float32)), exact=True)


def test_relative_precision_near_cancellations():
  # erf of tiny x (1 - t P(t) e^-x^2 cancelled: 13% off at 1e-6), softplus of very negative x (log(1 + tiny) was 0),
  # acosh near 1 (x * x - 1 cancelled)
  e = np.array([1e-6, -3e-5, 0.01, 0.3, 0.49, 0.51, -0.0], np.float32)
  z = np.array([-30, -60, -10, -1], np.float32)
  c = np.array([1.0001, 1.001, 1.01, 1.5], np.float32)
  erf = np.vectorize(math.erf)
  check((Tensor(e).erf(), erf(e.astype(np.float64))), (Tensor(z).softplus(), np.logaddexp(0, z.astype(np.float64))),
        (Tensor(-z).logsigmoid(), -np.logaddexp(0, z.astype(np.float64))),
        (Tensor(c).acosh(), np.arccosh(c.astype(np.float64))), rtol=1e-5, atol=0)


def test_round_copysign_lerp():
  r = np.array([-2.5, -1.5, -0.5, -0.3, -0.0, 0.0, 0.5, 1.5, 2.5, 2.4999998, 3.5000002, 1e9 + 0.5, 8388609.0, np.inf,
                -np.inf, np.nan], np.float32)
  o = rng.standard_normal(r.shape).astype(np.float32)
  o[:3] = [-0.0, 0.0, np.inf]
  i = np.array([-3, 0, 4], np.int32)
  check((Tensor(r).round(), np.round(r)), (Tensor(i).round(), i), (Tensor(r).copysign(Tensor(o)), np.copysign(r, o)),
        (Tensor(r).copysign(-1.0), np.copysign(r, np.float32(-1))),
        (Tensor(i).copysign(Tensor(np.array([1.0, -0.0, -2.0], np.float32))), np.array([3, -0.0, -4], np.float32)),
        (Tensor(r[:10].astype(np.float16)).copysign(-1.0), np.copysign(r[:10].astype(np.float16), np.float16(-1))),
        exact=True)
  a, b, w = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
  check((Tensor(a).lerp(Tensor(b), Tensor(w)), a + (b - a) * w), (Tensor(a).lerp(Tensor(b), 0.25), a + (b - a) * 0.25))


@pytest.mark.parametrize("dt", [np.int8, np.int32, np.uint8, np.int64])
def test_shifts(dt):
  info = np.iinfo(dt)
  x = np.array([info.min, -7 if info.min < 0 else 7, -1 if info.min < 0 else 1, 0, 5, info.max], dt)
  s = np.array([1, 3, 0, 2, 7, 1], dt)
  bits = 8 * np.dtype(dt).itemsize
  with np.errstate(all="ignore"):
    check((Tensor(x) << 3, x << dt(3)), (Tensor(x) >> 2, x >> dt(2)), (Tensor(x) << (bits - 1), x << dt(bits - 1)),
          (Tensor(x) >> (bits - 1), x >> dt(bits - 1)), (Tensor(x) << Tensor(s), x << s),
          (Tensor(x) >> Tensor(s), x >> s),
          (Tensor(x).lshift(1), x << dt(1)), (Tensor(x).rshift(0), x), exact=True)


def test_shift_errors():
  with pytest.raises(RuntimeError, match=r"lshift.*float32"):
    Tensor([1.0]) << 1
  with pytest.raises(RuntimeError, match="rshift"):
    Tensor([1]) >> -1
  with pytest.raises(RuntimeError, match="lshift"):
    Tensor([1]) << Tensor([1.0])


def test_isclose_allclose_bitcast_clone():
  a = np.array([1.0, 1.0, np.nan, np.inf, -np.inf, np.inf, 0.0, 1e-9], np.float32)
  b = np.array([1.0 + 1e-6, 1.1, np.nan, np.inf, np.inf, 1e38, -0.0, 0.0], np.float32)
  check((Tensor(a).isclose(Tensor(b)), np.isclose(a, b)), (Tensor(a).isclose(Tensor(b), equal_nan=True),
                                                           np.isclose(a, b, equal_nan=True)),
        (Tensor(a).isclose(Tensor(b), rtol=0.2, atol=0.0), np.isclose(a, b, rtol=0.2, atol=0.0)),
        (Tensor(a).isclose(1.0), np.isclose(a, 1.0)), (Tensor(a[:2]).allclose(Tensor(b[:2])), np.bool_(False)),
        (Tensor(a[:1]).allclose(Tensor(b[:1])), np.bool_(True)), (Tensor(a).bitcast(dtypes.int32), a.view(np.int32)),
        (Tensor(a).clone(), a), exact=True)
  with pytest.raises(RuntimeError, match="bitcast"):
    Tensor(a).bitcast(dtypes.int16)


def test_dtype_min_max():
  for dt, np_dt in ((dtypes.int8, np.int8), (dtypes.uint16, np.uint16), (dtypes.int64, np.int64)):
    assert (dt.min, dt.max) == (np.iinfo(np_dt).min, np.iinfo(np_dt).max)
  assert (dtypes.float32.min, dtypes.float16.max) == (-math.inf, math.inf)
  assert (dtypes.bool.min, dtypes.bool.max) == (False, True)


EDGES = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1.0, -1.0, 3e38, -3e38, 1e-40, 2.5, -7.25], np.float32)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16])
def test_isinf_isnan_isfinite(dt):
  with np.errstate(over="ignore"):
    x = EDGES.astype(dt)  # (3e38 is inf in half)
  pairs = [(Tensor(x).isinf(), np.isinf(x)), (Tensor(x).isinf(detect_negative=False), np.isposinf(x)),
           (Tensor(x).isinf(detect_positive=False), np.isneginf(x)),
           (Tensor(x).isinf(False, False), np.zeros(x.shape, bool)),
           (Tensor(x).isnan(), np.isnan(x)), (Tensor(x).isfinite(), np.isfinite(x)),
           (Tensor(x.reshape(3, 4)).isfinite(), np.isfinite(x.reshape(3, 4)))]
  check(*pairs, exact=True)
  assert all(t.dtype == dtypes.bool for t, _ in pairs)


def test_isinf_isnan_isfinite_ints_and_bools():
  for a in (np.array([np.iinfo(np.int32).min, -1, 0, np.iinfo(np.int32).max], np.int32),
            np.array([0, 255], np.uint8), np.array([np.iinfo(np.int64).max], np.int64), np.array([True, False])):
    check((Tensor(a).isinf(), np.zeros(a.shape, bool)), (Tensor(a).isnan(), np.zeros(a.shape, bool)),
          (Tensor(a).isfinite(), np.ones(a.shape, bool)), exact=True)


def test_log10():
  big = np.array([1, 10, 1000, 1e-30, 1e30, 3.4e38, 1e-40, 0.5, 7], np.float32)
  with np.errstate(all="ignore"):
    check((Tensor(EDGES).log10(), np.log10(EDGES.astype(np.float64))),
          (Tensor(big).log10(), np.log10(big.astype(np.float64))),
          (Tensor(big.astype(np.float64)).log10(), np.log10(big.astype(np.float64))),
          (Tensor(np.array([1, 10, 100, 7], np.int32)).log10(), np.log10(np.array([1, 10, 100, 7], np.float64))),
          rtol=3e-7, atol=0)
    h = EDGES.astype(np.float16)
    check((Tensor(h).log10(), np.log10(h)), rtol=1e-3, atol=0)
  # the signed zeros and the infinities exactly; an int tensor's log10 is float32, a half's half
  check((Tensor(np.array([0.0, -0.0, np.inf, 1.0], np.float32)).log10(), np.array([-np.inf, -np.inf, np.inf, 0.0],
                                                                                   np.float32)), exact=True)
  assert Tensor([1, 2]).log10().dtype == dtypes.float32 and Tensor(h).log10().dtype == dtypes.float16


def test_logaddexp():
  a = np.array([1000, -1000, 0, np.inf, -np.inf, np.inf, -np.inf, np.nan, 3, -0.0, 88, -88, 1e-30, 5, 20, -3e38],
               np.float32)
  b = np.array([1000, 0, -1000, np.inf, -np.inf, -np.inf, 2, 1, 3 + 1e-6, -0.0, 89, -200, 0, -60, 3e38, -3e38],
               np.float32)
  x, y = rng.standard_normal((3, 4)) * 30, rng.standard_normal((1, 4)) * 30
  with np.errstate(all="ignore"):
    check((Tensor(a).logaddexp(Tensor(b)), np.logaddexp(a.astype(np.float64), b.astype(np.float64))),
          (Tensor(b).logaddexp(Tensor(a)), np.logaddexp(b.astype(np.float64), a.astype(np.float64))),
          (Tensor(x).logaddexp(Tensor(y)), np.logaddexp(x, y)), (Tensor(a).logaddexp(2.0), np.logaddexp(a, 2.0)),
          (Tensor(np.array([1, -5, 30], np.int32)).logaddexp(Tensor(np.array([1, 2, 0], np.int32))),
           np.logaddexp(np.array([1, -5, 30.0]), np.array([1, 2, 0.0]))), rtol=2e-7, atol=0)
    h = a.astype(np.float16)
    check((Tensor(h).logaddexp(Tensor(b.astype(np.float16))), np.logaddexp(h, b.astype(np.float16))), rtol=1e-3,
          atol=0)
  # tiny terms keep their relative precision (log(1 + 9e-14) would be 0), to exp's (float32 exp(-30) is 1.2e-6 off)
  check((Tensor(np.array([0.0, -30.0], np.float32)).logaddexp(Tensor(np.array([-30.0, -60.0], np.float32))),
         np.logaddexp(np.array([0.0, -30.0]), np.array([-30.0, -60.0]))), rtol=3e-6, atol=0)
  check((Tensor(np.array([0.0, -30.0])).logaddexp(Tensor(np.array([-30.0, -60.0]))),
         np.logaddexp(np.array([0.0, -30.0]), np.array([-30.0, -60.0]))), rtol=1e-13, atol=0)
  assert Tensor([1, 2]).logaddexp(1).dtype == dtypes.float32 and Tensor(h).logaddexp(1.0).dtype == dtypes.float16
  with pytest.raises(ValueError, match=r"logaddexp.*\(2,\).*\(3,\)"):
    Tensor([1.0, 2.0]).logaddexp(Tensor([1.0, 2.0, 3.0]))


def test_logaddexp_log10_gradients():
  # exact and finite far out: d/da logaddexp(a, b) is sigmoid(a - b), 1/2 at a tie however large
  a = np.array([1000.0, -1000.0, 0.0, 5.0, -3e5, 1e6, 40.0])
  b = np.array([1000.0, 0.0, -1000.0, 5.0, 1e5, 1e6, 0.0])
  for dt in (np.float64, np.float32):
    ta, tb = Tensor(a.astype(dt), requires_grad=True), Tensor(b.astype(dt), requires_grad=True)
    ga, gb = ta.logaddexp(tb).sum().gradient(ta, tb)
    check((ga, 1 / (1 + np.exp(np.clip(b - a, -700, 700)))), (gb, 1 / (1 + np.exp(np.clip(a - b, -700, 700)))),
          rtol=1e-6, atol=1e-30)
  from support.gradcheck import check_gradient, input_array
  g = np.random.default_rng(3)
  x, y = input_array(g, (3, 4)) * 3, input_array(g, (3, 4)) * 3
  check_gradient(lambda p, q: p.logaddexp(q), x, y, rng=g)
  check_gradient(lambda p, q: p.logaddexp(q), x, x.copy(), rng=g)  # ties
  check_gradient(lambda p, q: p.logaddexp(q), x[:1], y, rng=g)  # broadcast
  check_gradient(lambda p: p.log10(), input_array(g, (3, 4), "pos"), rng=g)


INT_DTYPES = [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64]


def _wrapped(v, dt):
  """The Python int v in dt, wrapped as C (and tinygrad) do."""
  return np.array(v % 2 ** (8 * np.dtype(dt).itemsize)).astype(np.uint64).astype(dt)


@pytest.mark.parametrize("dt", INT_DTYPES)
def test_bitwise_not_and_wrapped_int_scalars(dt):
  info = np.iinfo(dt)
  x = np.array([info.min, info.max, 0, 1, 5 if info.min == 0 else -5, 0x5A], dt)
  pairs = [(Tensor(x).bitwise_not(), ~x), (~Tensor(x), ~x)]
  for v in (0xFFFFFFFF, -1, 0x1FF, 2 ** 64 - 1, -2 ** 63, 0xF0F0F0F0F0F0F0F0, 7):
    w = _wrapped(v, dt)
    pairs += [(Tensor(x) | v, x | w), (Tensor(x) & v, x & w), (Tensor(x) ^ v, x ^ w), (v | Tensor(x), w | x),
              (v & Tensor(x), w & x), (v ^ Tensor(x), w ^ x)]
  check(*pairs, exact=True)
  assert all(t.dtype == Tensor(x).dtype for t, _ in pairs)


def test_wrapped_scalars_are_for_bitwise_ops_only():
  t = Tensor([0], dtype="int")
  check((t | 0xFFFFFFFF, np.array([-1], np.int32)), (t ^ 0xFFFFFFFF, np.array([-1], np.int32)),
        (t & 0xFFFFFFFF, np.array([0], np.int32)), (Tensor([True, False]).bitwise_not(), np.array([False, True])),
        (Tensor([True, False]) | 1, np.array([1, 1], np.int32)), exact=True)
  # arithmetic keeps refusing a Python int out of the tensor's range (numpy's rule) instead of wrapping it
  for fn in (lambda: t + 0xFFFFFFFF, lambda: t * 2 ** 31, lambda: t.maximum(2 ** 40)):
    with pytest.raises(OverflowError, match=r"4294967295|2147483648|1099511627776"):
      fn()
  with pytest.raises(RuntimeError, match=r"bitwise_not.*float32.*\(2,\)"):
    Tensor([1.0, 2.0]).bitwise_not()


def test_clip_needs_a_bound():
  with pytest.raises(RuntimeError, match=r"clip.*min_.*max_.*\(2, 3\)"):
    Tensor.ones(2, 3).clip()
  check((Tensor([-2.0, 0.5, 3.0]).clip(None, 1.0), np.array([-2.0, 0.5, 1.0], np.float32)), exact=True)


# ---- elementwise binary ops with broadcasting

SHAPE_PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (1, 4, 1)), ((), (3,)), ((0, 3), (1, 3)), ((1,), (1, 1)),
               ((5, 1), ())]


BINARY = {
  "add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
  "mul": (lambda a, b: a * b, np.multiply), "maximum": (lambda a, b: a.maximum(b), np.maximum),
  "minimum": (lambda a, b: a.minimum(b), np.minimum),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
def test_binary_float(name, shapes):
  f, ref = BINARY[name]
  a, b = randf(*shapes[0]), randf(*shapes[1])
  check_value(f(Tensor(a), Tensor(b)), ref(a, b), dtype=dtypes.float32)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_int(name):
  f, ref = BINARY[name]
  a, b = randi(3, 4), randi(4)
  check_value(f(Tensor(a), Tensor(b)), ref(a, b), dtype=dtypes.int32)


@pytest.mark.parametrize("shapes", SHAPE_PAIRS[:4])
def test_true_division(shapes):
  a, b = randf(*shapes[0]), randf(*shapes[1]) + 3
  check_value(Tensor(a) / Tensor(b), a / b, rtol=1e-6)
  ai, bi = randi(*shapes[0]), randi(*shapes[1], lo=1, hi=9)
  check_value(Tensor(ai) / Tensor(bi), ai / bi, dtype=dtypes.float32)


def test_floordiv_mod_match_numpy():
  a = np.array([7, -7, 7, -7, 0, 9, -9, 5], dtype=np.int32)
  b = np.array([2, 2, -2, -2, 3, 3, 3, -5], dtype=np.int32)
  check_value(Tensor(a) // Tensor(b), a // b, dtype=dtypes.int32)
  check_value(Tensor(a) % Tensor(b), a % b, dtype=dtypes.int32)
  check_value(Tensor(a) // 3, a // 3)
  check_value(Tensor(a) % -3, a % -3)
  check_value(17 // Tensor(b), 17 // b)
  af, bf = np.array([7.5, -7.5, 2.0, -0.5], np.float32), np.array([2.0, 2.0, -1.5, 0.25], np.float32)
  check_value(Tensor(af) // Tensor(bf), af // bf)
  check_value(Tensor(af) % Tensor(bf), af % bf)
  au = np.array([7, 200, 3], np.uint8)
  check_value(Tensor(au) // 3, au // 3, dtype=dtypes.uint8)
  check_value(Tensor(au) % 7, au % 7, dtype=dtypes.uint8)


def test_scalars_either_side_and_promotion():
  f, i, b = Tensor(randf(3)), Tensor(randi(3)), Tensor(np.array([True, False, True]))
  assert (f + 1).dtype == dtypes.float32 and (1 + f).dtype == dtypes.float32
  assert (i + 1).dtype == dtypes.int32 and (i * 2.5).dtype == dtypes.float32
  assert (b + 1).dtype == dtypes.int32 and (b + True).dtype == dtypes.bool
  assert (Tensor([1, 2], dtype=dtypes.int8) + 1).dtype == dtypes.int8
  assert (Tensor([1, 2], dtype=dtypes.float16) + 1.5).dtype == dtypes.float16
  assert (Tensor([1], dtype=dtypes.int8) + Tensor([1], dtype=dtypes.int32)).dtype == dtypes.int32
  assert (Tensor([1], dtype=dtypes.uint8) + Tensor([1], dtype=dtypes.int8)).dtype == dtypes.int16
  assert (Tensor([1], dtype=dtypes.int32) + Tensor([1.0], dtype=dtypes.float16)).dtype == dtypes.float16
  fa, ia = f.numpy(), i.numpy()
  check_value(2 - f, 2 - fa)
  check_value(3 / f, 3 / fa, rtol=1e-5)
  check_value(i * 2.5, ia * 2.5)
  check_value(1 - i, 1 - ia)
  check_value(b + 1, np.array([2, 1, 2]))
  check_value(b * True, np.array([True, False, True]))


def test_bool_arithmetic_is_logical():
  a, c = np.array([True, False, True, False]), np.array([True, True, False, False])
  check_value(Tensor(a) + Tensor(c), a | c, dtype=dtypes.bool)
  check_value(Tensor(a) * Tensor(c), a & c, dtype=dtypes.bool)
  check_value(Tensor(a) & Tensor(c), a & c)
  check_value(Tensor(a) | Tensor(c), a | c)
  check_value(Tensor(a) ^ Tensor(c), a ^ c)
  check_value(~Tensor(a), ~a)
  check_value(-Tensor(a), ~a)
  check_value(Tensor(a).maximum(Tensor(c)), np.maximum(a, c))
  check_value(Tensor(a).minimum(Tensor(c)), np.minimum(a, c))


def test_int_bitwise():
  a, c = randi(5), randi(5)
  check_value(Tensor(a) & Tensor(c), a & c)
  check_value(Tensor(a) | 6, a | 6)
  check_value(Tensor(a) ^ Tensor(c), a ^ c)
  check_value(~Tensor(a), ~a)
  u = np.array([0, 1, 250], np.uint8)
  check_value(~Tensor(u), ~u, dtype=dtypes.uint8)
  with pytest.raises(TypeError, match="xor"):
    Tensor(randf(2)) ^ 1


@pytest.mark.parametrize("op,ref", [("__lt__", np.less), ("__le__", np.less_equal), ("__gt__", np.greater),
                                    ("__ge__", np.greater_equal), ("__eq__", np.equal), ("__ne__", np.not_equal)])
def test_comparisons(op, ref):
  a, b = randi(3, 4, lo=-2, hi=2), randi(4, lo=-2, hi=2)
  check_value(getattr(Tensor(a), op)(Tensor(b)), ref(a, b), dtype=dtypes.bool)
  check_value(getattr(Tensor(a.astype(np.float32)), op)(0.5), ref(a.astype(np.float32), 0.5), dtype=dtypes.bool)
  nan = np.array([np.nan, 1.0], np.float32)
  check_value(getattr(Tensor(nan), op)(1.0), ref(nan, 1.0))


# ---- unary ops

UNARY = {
  "neg": (lambda t: -t, np.negative, None), "exp": (Tensor.exp, np.exp, None), "exp2": (Tensor.exp2, np.exp2, None),
  "log": (Tensor.log, np.log, "pos"), "log2": (Tensor.log2, np.log2, "pos"), "sqrt": (Tensor.sqrt, np.sqrt, "pos"),
  "rsqrt": (Tensor.rsqrt, lambda x: 1 / np.sqrt(x), "pos"), "sin": (Tensor.sin, np.sin, None),
  "cos": (Tensor.cos, np.cos, None), "abs": (Tensor.abs, np.abs, None), "sign": (Tensor.sign, np.sign, None),
  "reciprocal": (Tensor.reciprocal, np.reciprocal, "pos"), "relu": (Tensor.relu, lambda x: np.maximum(x, 0), None),
  "sigmoid": (Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x)), None), "tanh": (Tensor.tanh, np.tanh, None),
  "gelu": (Tensor.gelu, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), None),
  "square": (Tensor.square, np.square, None), "floor": (Tensor.floor, np.floor, None),
  "ceil": (Tensor.ceil, np.ceil, None), "trunc": (Tensor.trunc, np.trunc, None),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(7,), (2, 3, 4), (), (0, 2)])
def test_unary_float(name, shape):
  f, ref, dom = UNARY[name]
  x = randf(*shape) * 3
  if dom == "pos":
    x = np.abs(x) + 0.1
  check_value(f(Tensor(x)), ref(x).astype(np.float32), rtol=2e-5, atol=1e-5, dtype=dtypes.float32)


def test_unary_on_ints_gives_float():
  x = np.array([1, 2, 4], np.int32)
  check_value(Tensor(x).sqrt(), np.sqrt(x), dtype=dtypes.float32)
  check_value(Tensor(x).exp(), np.exp(x).astype(np.float32), rtol=1e-5, dtype=dtypes.float32)
  check_value(Tensor(x).log2(), np.log2(x), dtype=dtypes.float32)
  check_value(-Tensor(x), -x, dtype=dtypes.int32)
  check_value(Tensor(x).relu(), x, dtype=dtypes.int32)
  check_value(Tensor(np.array([-3, 0, 5], np.int32)).abs(), [3, 0, 5], dtype=dtypes.int32)
  check_value(Tensor(np.array([-3, 0, 5], np.int32)).sign(), [-1, 0, 1], dtype=dtypes.int32)


def test_special_values():
  x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30], np.float32)
  with np.errstate(all="ignore"):
    check_value(Tensor(x).exp(), np.exp(x))
    check_value(Tensor(x).relu(), np.maximum(x, 0))
    check_value(Tensor(np.abs(x)).sqrt(), np.sqrt(np.abs(x)))
    check_value(Tensor(x).sigmoid(), 1 / (1 + np.exp(-x)))


def test_where_clip_cast_pow():
  c, a, b = np.array([True, False, True]), randf(3), randf(1)
  check_value(Tensor(c).where(Tensor(a), Tensor(b)), np.where(c, a, b))
  check_value(Tensor(c).where(1.5, Tensor(b)), np.where(c, 1.5, b))
  check_value(Tensor(c).where(1, 0), np.where(c, 1, 0), dtype=dtypes.int32)
  check_value(Tensor(c).where(1, 2.5), np.where(c, 1, 2.5), dtype=dtypes.float32)
  check_value((Tensor(a) > 0).where(Tensor(a), 0), np.where(a > 0, a, 0), dtype=dtypes.float32)
  ci, ia = randi(3) > 0, randi(3)
  check_value(Tensor(ci).where(Tensor(ia), Tensor(a)), np.where(ci, ia, a), dtype=dtypes.float32)
  x = randf(10) * 4
  check_value(Tensor(x).clip(-1, 2), np.clip(x, -1, 2))
  check_value(Tensor(x).clip(max_=0), np.minimum(x, 0))
  with pytest.raises(RuntimeError, match="clip"):  # tinygrad's type
    Tensor(x).clip()
  check_value(Tensor(x).cast(dtypes.int32), x.astype(np.int32), dtype=dtypes.int32)
  check_value(Tensor(x).cast(dtypes.bool), x.astype(bool), dtype=dtypes.bool)
  check_value(Tensor(x).cast(dtypes.float16), x.astype(np.float16), rtol=1e-3, dtype=dtypes.float16)
  check_value(Tensor(x) ** 2, x ** 2, rtol=1e-5)
  check_value(Tensor(x) ** -1, 1 / x, rtol=1e-5)
  check_value(Tensor(np.abs(x)) ** 0.5, np.sqrt(np.abs(x)), rtol=1e-5)
  check_value(2 ** Tensor(x), 2 ** x, rtol=1e-5)
  with pytest.raises(TypeError):
    Tensor(c).where("a", 1)


def test_broadcast_error_names_op_and_shapes():
  a, b = Tensor(randf(3, 4)), Tensor(randf(5))
  with pytest.raises(ValueError, match=r"Tensor\.add.*\(3, 4\).*\(5,\)"):
    a + b
  with pytest.raises(ValueError, match=r"Tensor\.where"):
    Tensor(np.ones((2,), bool)).where(a, 1.0)
  with pytest.raises(TypeError, match="add"):
    a + "x"
  # nothing half-built: the operands are still usable
  check_value(a + 1, a.numpy() + 1)


# ---- regressions found by differential fuzzing against numpy

def test_minimum_and_clip_propagate_nan():
  x = np.array([np.nan, 1.0, -2.0], np.float32)
  check_value(Tensor(x).minimum(0.5), np.minimum(x, 0.5))
  check_value(Tensor(x).clip(-1.5, 1.5), np.clip(x, -1.5, 1.5))
  i = np.array([np.iinfo(np.int32).min, 3, -4], np.int32)
  check_value(Tensor(i).minimum(Tensor(np.array([0, 2, 7], np.int32))), np.minimum(i, [0, 2, 7]), dtype=dtypes.int32)
  u = np.array([0, 200, 255], np.uint8)
  check_value(Tensor(u).minimum(Tensor(np.array([255, 100, 0], np.uint8))), np.minimum(u, [255, 100, 0]),
              dtype=dtypes.uint8)


def test_pow_negative_bases_and_zero_exponents():
  a = np.array([-2, -2, -8, 0, 0, 0, 1, np.inf, -np.inf, np.nan, -1.5], np.float32)
  b = np.array([3, 2, 1 / 3, 0, -1, 2, np.nan, 0, 3, 0, 4], np.float32)
  with np.errstate(all="ignore"):
    check_value(Tensor(a) ** Tensor(b), a ** b)
    check_value(Tensor(a) ** 65, (a.astype(np.float64) ** 65).astype(np.float32), rtol=1e-4)  # past repeated squaring


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 17, 30])
def test_integer_power_of_ints_stays_exact(n):
  x = np.array([3, -2, 0, 1, -1], np.int64)
  check_value(Tensor(x) ** n, x ** n, dtype=dtypes.int64)
  f = randf(5)
  check_value(Tensor(f) ** n, f.astype(np.float64) ** n, rtol=1e-5)


@pytest.mark.parametrize("name,ref", [("exp", np.exp), ("log", np.log), ("tanh", np.tanh), ("cos", np.cos),
                                      ("tan", np.tan), ("sigmoid", lambda x: 1 / (1 + np.exp(-x.astype(np.float64))))])
def test_half_transcendentals_within_one_ulp(name, ref):
  lo, hi = {"log": (0.01, 9), "cos": (-300, 300), "tan": (-1.5, 1.5)}.get(name, (-9, 9))
  x = np.linspace(lo, hi, 999).astype(np.float16)
  got = getattr(Tensor(x), name)().numpy()
  want = ref(x).astype(np.float16)
  assert got.dtype == np.float16
  err = np.abs(got.astype(np.float64) - want.astype(np.float64))
  # cos near its zeros: the float32 pi/2 - x keeps an absolute error of ~1e-5 that is many ulps of a tiny result
  ulps = err / np.maximum(np.spacing(np.abs(want)), np.spacing(np.float16(0.25)) if name == "cos" else 0)
  assert ulps.max() <= 1, f"{name}: {ulps.max()} ulps at x={x[ulps.argmax()]}"


def test_float_mod_by_infinity():
  a = np.array([2.0, -2.0, 0.0, 2.0, -2.0, np.inf, 3.0, np.nan, np.nan], np.float32)
  b = np.array([np.inf, np.inf, np.inf, -np.inf, -np.inf, np.inf, 0.0, np.inf, -np.inf], np.float32)
  with np.errstate(all="ignore"):
    check_value(Tensor(a) % Tensor(b), a % b)


def test_sign_of_nan_is_nan():
  x = np.array([np.nan, -np.inf, -2.0, 0.0, 3.0], np.float32)
  check_value(Tensor(x).sign(), np.sign(x))
