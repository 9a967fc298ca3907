"""Derivatives where they used to go wrong: at 0, +-tiny, ties (relu, maximum, clip at a bound), domain edges (acosh
at 1, atanh at +-1, log and sqrt at 0), +-inf, and |x| large enough to overflow float32 inside an op (20 .. 1e4).

Every differentiable unary op's gradient at those points, in float32 and float64 on both backends, against its
analytic derivative in float64 (rounded to the dtype: an overflowing derivative is inf there too) and, where the
derivative is a convention, torch's value (relu'(0) = 0, clamp's bounds 1, hardtanh's 0, elu'(0) = alpha); where
torch's derivative is nan nothing is asserted (pow's: nan exactly there), everywhere else the gradient must be
finite exactly where it is.
The derivatives themselves are checked against central finite differences in float64 at ordinary points, and a
fixed-seed fuzz of random op chains (bench/fuzz_gradients.py) runs a few hundred cases."""
from __future__ import annotations

import math

import numpy as np
import pytest
from support.gradcheck import check_gradient

from bench.fuzz_gradients import run_fuzz
from compiler import Tensor, dtypes
from compiler.schedule.bufferize import MIN_SHARED_EXPENSIVE
from compiler.trace import recorder
from compiler.uop import Ops
from vztrace.reader import TraceReader

INF = math.inf
LN2 = math.log(2)
EDGES = [0.0, -0.0, 1e-8, -1e-8, 1e-30, -1e-30, 20.0, -20.0, 50.0, -50.0, 89.0, -89.0, 100.0, -100.0, 1e4, -1e4,
         INF, -INF]
ORDINARY = [-2.7, -0.9, -0.3, 0.25, 0.8, 1.9, 3.3]
POINTS = {
  "all": EDGES + ORDINARY,
  "pos": [p for p in EDGES + ORDINARY if p >= 0],
  "pos_finite": [p for p in EDGES + ORDINARY if 0 <= p < INF],
  "pos_nonzero": [p for p in EDGES + ORDINARY if p > 0],
  "nonzero": [p for p in EDGES + ORDINARY if p != 0],
  "unit": [0.0, -0.0, 1e-8, -1e-8, 1e-30, -1e-30, -1.0, 1.0, -0.9, -0.3, 0.25, 0.8, 0.999],
  "atanh": [0.0, -0.0, 1e-8, -1e-8, 1e-30, -1e-30, -1.0, 1.0, -0.9, -0.3, 0.25, 0.8, 0.999, 1.5, -2.0],
  "acosh": [-1e4, -89.0, -20.0, -3.0, -1.5, -1.0, 1.0, 1.25, 1.9, 3.3, 20.0, 50.0, 89.0, 100.0, 1e4, INF],
  "kinks": EDGES + ORDINARY + [-6.0, 6.0, -3.0, 3.0, -1.0, 1.0, -0.5, 0.5],
}


def _sig(x):
  e = np.exp(-np.abs(x))
  return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _dsig(x):
  e = np.exp(-np.abs(x))
  return e / (1 + e) ** 2


def _sech2(x):
  e = np.exp(-2 * np.abs(x))
  return 4 * e / (1 + e) ** 2


def _dgelu(x):
  c = math.sqrt(2 / math.pi)
  u = c * (x + 0.044715 * x ** 3)
  return 0.5 * (1 + np.tanh(u)) + 0.5 * x * _sech2(u) * c * (1 + 3 * 0.044715 * x * x)


def _dmish(x):
  sp = np.logaddexp(0, x)
  return np.tanh(sp) + x * _sech2(sp) * _sig(x)


_PHI = np.vectorize(lambda v: 0.5 * math.erfc(-v / math.sqrt(2)))
SELU_A, SELU_G = 1.67326, 1.0507

# name -> (the op, its derivative in float64 (torch's convention at kinks), points, None or (rtol float32, rtol
# float64, atol) where the op is an approximation (erf, asin: A&S polynomials) whose derivative is off a little more)
UNARY = {
  "neg": (lambda x: -x, lambda x: -np.ones_like(x), "all", None),
  "exp": (lambda x: x.exp(), np.exp, "all", None),
  "exp2": (lambda x: x.exp2(), lambda x: np.exp2(x) * LN2, "all", None),
  "log": (lambda x: x.log(), lambda x: 1 / x, "pos", None),
  "log2": (lambda x: x.log2(), lambda x: 1 / (x * LN2), "pos", None),
  "sqrt": (lambda x: x.sqrt(), lambda x: 0.5 / np.sqrt(x), "pos", None),
  "rsqrt": (lambda x: x.rsqrt(), lambda x: -0.5 / np.sqrt(x) ** 3, "pos", None),  # (+inf at -0.0, as torch)
  "reciprocal": (lambda x: x.reciprocal(), lambda x: -1 / (x * x), "all", None),
  "square": (lambda x: x.square(), lambda x: 2 * x, "all", None),
  "sin": (lambda x: x.sin(), np.cos, "all", None),
  "cos": (lambda x: x.cos(), lambda x: -np.sin(x), "all", None),
  "tan": (lambda x: x.tan(), lambda x: 1 / np.cos(x) ** 2, "all", (1e-4, 1e-9, 0)),
  "sigmoid": (lambda x: x.sigmoid(), _dsig, "all", None),
  "tanh": (lambda x: x.tanh(), _sech2, "all", None),
  "relu": (lambda x: x.relu(), lambda x: (x > 0) * 1.0, "all", None),
  "leaky_relu": (lambda x: x.leaky_relu(0.1), lambda x: np.where(x > 0, 1.0, 0.1), "all", None),
  "elu": (lambda x: x.elu(1.3), lambda x: np.where(x > 0, 1.0, 1.3 * np.exp(x)), "all", None),
  "celu": (lambda x: x.celu(1.5), lambda x: np.where(x > 0, 1.0, np.exp(x / 1.5)), "all", None),
  "selu": (lambda x: x.selu(), lambda x: np.where(x > 0, SELU_G, SELU_G * SELU_A * np.exp(x)), "all", None),
  "softplus": (lambda x: x.softplus(), _sig, "all", None),
  "softplus_beta2": (lambda x: x.softplus(2.0), lambda x: _sig(2 * x), "all", None),
  "logsigmoid": (lambda x: x.logsigmoid(), lambda x: _sig(-x), "all", None),
  "silu": (lambda x: x.silu(), lambda x: _sig(x) + x * _dsig(x), "all", None),
  "quick_gelu": (lambda x: x.quick_gelu(), lambda x: _sig(1.702 * x) + 1.702 * x * _dsig(1.702 * x), "all", None),
  "gelu": (lambda x: x.gelu(), _dgelu, "all", None),
  "gelu_erf": (lambda x: x.gelu("none"), lambda x: _PHI(x) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi), "all",
               (2e-5, 2e-5, 1e-6)),
  "mish": (lambda x: x.mish(), _dmish, "all", None),
  "softsign": (lambda x: x.softsign(), lambda x: np.where(np.isinf(x), np.nan, 1 / (1 + np.abs(x)) ** 2), "all",
               None),  # (torch's is a composite: nan at +-inf, as ours)
  "hardswish": (lambda x: x.hardswish(), lambda x: np.where(x < -3, 0.0, np.where(x <= 3, x / 3 + 0.5, 1.0)), "kinks",
                None),
  "hardsigmoid": (lambda x: x.hardsigmoid(), lambda x: ((x > -3) & (x < 3)) / 6, "kinks", None),
  "hardtanh": (lambda x: x.hardtanh(), lambda x: ((x > -1) & (x < 1)) * 1.0, "kinks", None),
  "relu6": (lambda x: x.relu6(), lambda x: ((x > 0) & (x < 6)) * 1.0, "kinks", None),
  "clip": (lambda x: x.clip(-0.5, 0.5), lambda x: ((x >= -0.5) & (x <= 0.5)) * 1.0, "kinks", None),
  "clip_min": (lambda x: x.clip(0.5), lambda x: (x >= 0.5) * 1.0, "kinks", None),
  "abs": (lambda x: x.abs(), np.sign, "all", None),
  "sign": (lambda x: x.sign(), lambda x: np.zeros_like(x), "all", None),
  "floor": (lambda x: x.floor(), lambda x: np.zeros_like(x), "all", None),
  "round": (lambda x: x.round(), lambda x: np.zeros_like(x), "all", None),
  "pow_2.5": (lambda x: x ** 2.5, lambda x: 2.5 * x ** 1.5, "pos", None),  # (torch's inf at inf)
  "pow_0.3": (lambda x: x ** 0.3, lambda x: 0.3 * x ** -0.7, "pos", None),  # (torch's inf at 0)
  "pow_3": (lambda x: x ** 3, lambda x: 3 * x * x, "all", None),
  "pow_0": (lambda x: x ** 0, lambda x: np.zeros_like(x), "all", None),
  "pow_-2": (lambda x: x ** -2, lambda x: -2 * x ** -3.0, "nonzero", None),
  "rpow_2": (lambda x: 2 ** x, lambda x: 2.0 ** x * LN2, "all", None),
  "rpow_0.7": (lambda x: 0.7 ** x, lambda x: 0.7 ** x * math.log(0.7), "all", None),
  "rpow_0": (lambda x: 0.0 ** x, lambda x: np.where(x >= 0, 0.0, -np.inf), "all", None),  # (torch: inf * ln 0)
  "asin": (lambda x: x.asin(), lambda x: 1 / np.sqrt(1 - x * x), "unit", (2e-5, 1e-5, 0)),
  "acos": (lambda x: x.acos(), lambda x: -1 / np.sqrt(1 - x * x), "unit", (2e-5, 1e-5, 0)),
  "atan": (lambda x: x.atan(), lambda x: 1 / (1 + x * x), "all", (2e-5, 1e-5, 0)),
  "sinh": (lambda x: x.sinh(), np.cosh, "all", (2e-5, 1e-8, 0)),  # (a Taylor polynomial below 0.5)
  "cosh": (lambda x: x.cosh(), np.sinh, "all", None),
  "asinh": (lambda x: x.asinh(), lambda x: 1 / np.hypot(1, x), "all", None),
  "acosh": (lambda x: x.acosh(), lambda x: 1 / np.sqrt((x - 1) * (x + 1) + 0.0), "acosh", None),
  "atanh": (lambda x: x.atanh(), lambda x: 1 / ((1 - x) * (1 + x)), "atanh", None),
  "erf": (lambda x: x.erf(), lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x), "all", (2e-5, 2e-5, 1e-6)),
}
ATOL = {dtypes.float32: 3e-7, dtypes.float64: 1e-12}


def assert_derivative(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, what: str) -> None:
  """Finite where want is (and close), the same infinity where want is infinite; nothing where want is nan."""
  finite, inf = np.isfinite(want), np.isinf(want)
  with np.errstate(invalid="ignore"):  # (inf - inf where both are infinite: judged by the line below)
    bad = finite & ~(np.isfinite(got) & (np.abs(got - want) <= atol + rtol * np.abs(want)))
  bad |= inf & (got != want)
  assert not bad.any(), f"{what}: at {np.flatnonzero(bad)} got {got[bad]}, want {want[bad]}"


def _grad(fn, xs: np.ndarray, dt) -> np.ndarray:
  x = Tensor(xs, dtype=dt)
  (g,) = fn(x).sum().gradient(x)
  return g.numpy()


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_derivative_at_edges(backend, name, dt):
  fn, deriv, points, rtols = UNARY[name]
  xs = np.array(POINTS[points], dtype=dt.np)
  with np.errstate(all="ignore"):
    want = deriv(xs.astype(np.float64)).astype(dt.np).astype(np.float64)
  tol = rtols or (2e-5, 1e-9, 0)
  got = _grad(fn, xs, dt).astype(np.float64)
  assert_derivative(got, want, tol[dt == dtypes.float64], ATOL[dt] + tol[2], f"{name} {dt} at {xs.tolist()}")


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_derivative_against_finite_differences(name):
  """The analytic derivatives above are the ops' own: central differences in float64 at ordinary points."""
  fn, _, points, rtols = UNARY[name]
  if name in ("sign", "floor", "round", "rpow_0"):  # (constant at ordinary points, or inf)
    return
  xs = np.array({"acosh": [1.25, 1.9, 3.3], "unit": [-0.9, -0.3, 0.25, 0.8], "atanh": [-0.9, -0.3, 0.25, 0.8]}.get(
    points, [p for p in ORDINARY if p > 0] if points.startswith("pos") else ORDINARY))
  rng = np.random.default_rng(len(name))
  check_gradient(fn, xs, rng=rng, rtol=1e-5 if rtols is None else 1e-4, atol=1e-7)


def test_tanh_elu_sigmoid_at_zero_are_their_limits():
  # tanh'(0) was 0 (abs's derivative at 0) and nan for 0 < |x| <= 2e-8; elu's nan for |x| <= 5e-8
  xs = np.array([0.0, -0.0, 1e-9, -2e-8, 5e-8, -5e-8])
  for dt in (dtypes.float32, dtypes.float64):
    np.testing.assert_allclose(_grad(lambda x: x.tanh(), xs, dt), 1.0, rtol=1e-7)
    np.testing.assert_allclose(_grad(lambda x: x.elu(), xs, dt), np.where(xs > 0, 1.0, np.exp(xs)), rtol=2e-7)
    np.testing.assert_allclose(_grad(lambda x: x.sigmoid(), xs, dt), 0.25, rtol=2e-7)


# (a, b) -> torch's (d/da, d/db) of a ** b; nan: torch's is nan, nothing asserted
POW_CASES = [((0.7, 0.0), (0.0, math.log(0.7))), ((2.0, 0.0), (0.0, LN2)), ((1.0, 0.3), (0.3, 0.0)),
             ((1.0, 2.5), (2.5, 0.0)), ((0.0, 2.5), (0.0, 0.0)), ((0.0, 0.0), (0.0, 0.0)),
             ((3.0, 2.0), (6.0, 9 * math.log(3))), ((-2.0, 3.0), (12.0, math.nan)), ((-2.0, 0.5), (math.nan, math.nan)),
             ((0.5, INF), (math.nan, 0.0)), ((2.0, -INF), (math.nan, 0.0)), ((0.0, 3.0), (0.0, 0.0)),
             ((4.0, 0.5), (0.25, 2 * math.log(4))), ((INF, -1.5), (0.0, math.nan))]


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=["float32", "float64"])
def test_pow_special_cases_keep_their_derivatives(backend, dt):
  a = Tensor(np.array([c[0][0] for c in POW_CASES]), dtype=dt)
  b = Tensor(np.array([c[0][1] for c in POW_CASES]), dtype=dt)
  ga, gb = (a ** b).sum().gradient(a, b)
  rtol = 2e-6 if dt == dtypes.float32 else 1e-12
  assert_derivative(ga.numpy().astype(np.float64), np.array([c[1][0] for c in POW_CASES]), rtol, 0, "d/da")
  assert_derivative(gb.numpy().astype(np.float64), np.array([c[1][1] for c in POW_CASES]), rtol, 0, "d/db")


def test_ops_that_drop_an_input_give_it_a_zero_gradient(backend):
  # x ** 0 and copysign's sign folded their input away, and gradient() raised (torch: zeros)
  x = Tensor(np.array([0.0, -2.0, 3.0, INF]))
  y = Tensor(np.array([-1.0, 0.0, -0.0, 5.0]))
  (gx,) = (x ** 0).sum().gradient(x)
  np.testing.assert_array_equal(gx.numpy(), 0.0)
  gx, gy = x.copysign(y).sum().gradient(x, y)
  np.testing.assert_array_equal(gy.numpy(), 0.0)
  np.testing.assert_array_equal(gx.numpy(), [0.0, -1.0, -1.0, 1.0])  # torch: 0 at x == 0 (result / x masked)


def test_ties_follow_torch(backend):
  x = Tensor(np.array([0.0, 1.0, -1.0, 2.0]))
  y = Tensor(np.array([0.0, 1.0, 3.0, -1.0]))
  ga, gb = x.maximum(y).sum().gradient(x, y)  # torch: a tie shares the gradient
  np.testing.assert_array_equal(ga.numpy(), [0.5, 0.5, 0.0, 1.0])
  np.testing.assert_array_equal(gb.numpy(), [0.5, 0.5, 1.0, 0.0])
  ga, gb = x.minimum(y).sum().gradient(x, y)
  np.testing.assert_array_equal(ga.numpy(), [0.5, 0.5, 1.0, 0.0])
  np.testing.assert_array_equal(gb.numpy(), [0.5, 0.5, 0.0, 1.0])
  # clip with tensor bounds: 1 to x inside, the bounds included; the bound that wins outside gets it
  lo, hi = Tensor(np.array([0.0, 0.0, 0.0, 0.0])), Tensor(np.array([1.0, 1.0, 1.0, 1.0]))
  gx, glo, ghi = x.clip(lo, hi).sum().gradient(x, lo, hi)
  np.testing.assert_array_equal(gx.numpy(), [1.0, 1.0, 0.0, 0.0])
  np.testing.assert_array_equal(glo.numpy(), [0.0, 0.0, 1.0, 0.0])
  np.testing.assert_array_equal(ghi.numpy(), [0.0, 0.0, 0.0, 1.0])
  m = Tensor(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]))
  (g,) = m.max(1).sum().gradient(m)  # a max-reduction shares among its maxima (tinygrad's)
  np.testing.assert_allclose(g.numpy(), [[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])


def _np_logcumsumexp_grad(x: np.ndarray) -> np.ndarray:
  lcse = np.logaddexp.accumulate(x)
  return np.array([np.exp(x[i] - lcse[i:]).sum() for i in range(len(x))])


def _softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max())
  return e / e.sum()


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=["float32", "float64"])
def test_reductions_and_losses_with_large_values(backend, dt):
  rtol = 3e-5 if dt == dtypes.float32 else 1e-10
  for xs in ([0.0, 100.0], [-100.0, 0.0, 100.0, 50.0], [1e4, 0.0, -1e4], [0.0, 0.0, 0.0]):
    a = np.array(xs)
    x = Tensor(a, dtype=dt)
    (g,) = x.logcumsumexp().sum().gradient(x)
    np.testing.assert_allclose(g.numpy(), _np_logcumsumexp_grad(a), rtol=rtol, atol=1e-30, err_msg=f"lcse {xs}")
    (g,) = x.logsumexp().gradient(x)
    np.testing.assert_allclose(g.numpy(), _softmax(a), rtol=rtol, atol=1e-30, err_msg=f"logsumexp {xs}")
    (g,) = (x.log_softmax() * Tensor(np.arange(len(xs), dtype=np.float64), dtype=dt)).sum().gradient(x)
    w = np.arange(len(xs))
    np.testing.assert_allclose(g.numpy(), w - _softmax(a) * w.sum(), rtol=rtol, atol=1e-5, err_msg=f"lsm {xs}")
  # binary cross-entropy on logits: (sigmoid(x) - y) / n, also where exp(|x|) overflows float32
  a = np.array([0.0, 17.0, -17.0, 20.0, -20.0, 100.0, -100.0, 1e4, -1e4])
  y = np.array([0.0, 1.0, 0.3, 0.0, 1.0, 0.5, 0.0, 1.0, 1.0])
  x = Tensor(a, dtype=dt)
  (g,) = x.binary_crossentropy_logits(Tensor(y, dtype=dt)).gradient(x)
  np.testing.assert_allclose(g.numpy(), (_sig(a) - y) / len(a), rtol=rtol, atol=1e-12)
  p = Tensor(np.array([0.0, 1.0, 0.5, 1e-30]), dtype=dt)  # log(0) is clamped at -100: a zero derivative, not nan
  (g,) = p.binary_crossentropy(Tensor(np.array([1.0, 0.0, 1.0, 0.0]), dtype=dt)).gradient(p)
  assert np.isfinite(g.numpy()).all() and g.numpy()[2] == pytest.approx(-0.5, rel=1e-6)


def test_a_transformer_step_on_large_activations_stays_finite():
  # gelu's gradient was nan from |x| >= 10, which turned a GPT-2-shaped model nan at its 4th Adam step
  rng = np.random.default_rng(3)
  x = Tensor(rng.standard_normal((4, 8)) * 30, dtype=dtypes.float32)
  w = Tensor(rng.standard_normal((8, 8)), dtype=dtypes.float32, requires_grad=True)
  h = x.dot(w)
  loss = (h.gelu() + h.layernorm().tanh() + h.sigmoid() + h.silu() + h.softplus()).log_softmax(-1).mean()
  (g,) = loss.gradient(w)
  assert np.isfinite(g.numpy()).all()


def test_fuzz_of_random_chains_against_finite_differences(monkeypatch):
  monkeypatch.setenv("BACKEND", "interp")
  # a fixed number of chains of 2-5 ops (the same ones on every machine); bench/fuzz_gradients.py runs more
  counts = run_fuzz(n=40, seed=2024, directions=1)
  assert counts["chains"] == 40 and counts["checks"] >= 40, counts
  assert counts["failures"] == 0, counts["reports"][:5]


# ---- pow as one op (POW) with torch's derivative, lowered by the scheduler to the exp2/log2 formula

POW_BASES = [0.0, -0.0, INF, -INF, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0, math.nan]
POW_EXPONENTS = [-INF, -3.0, -2.0, -1.5, -1.0, -0.5, -0.0, 0.0, 0.3, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, INF, math.nan]


def _torch_pow_grads(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """torch's pow_backward_self and pow_backward_exponent (FunctionsManual.cpp) in float64 numpy."""
  with np.errstate(all="ignore"):
    da = np.where(b == 0, 0.0, b * np.power(a, b - 1))
    db = np.where((a == 0) & (b >= 0), 0.0, np.power(a, b) * np.log(a))
  return da, db


def assert_torch_derivative(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
  """assert_derivative, and nan exactly where torch's derivative is nan."""
  assert_derivative(got, want, rtol, 0, what)
  bad = np.isnan(got) != np.isnan(want)
  assert not bad.any(), f"{what}: nan at {np.flatnonzero(bad)}: got {got[bad]}, want {want[bad]}"


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=["float32", "float64"])
def test_pow_derivatives_are_torchs_at_zero_inf_and_negative_bases(backend, dt):
  # were 0 at a zero base (torch: b * 0**(b - 1): inf for 0 < b < 1, 1 at b == 1, -inf for b < 0) and at an infinite
  # one with b > 1 (torch: inf), and finite for d/db at a negative base (torch: a**b * ln a, nan)
  a = np.array([x for x in POW_BASES for _ in POW_EXPONENTS]).astype(dt.np)
  b = np.array([y for _ in POW_BASES for y in POW_EXPONENTS]).astype(dt.np)
  ta, tb = Tensor(a, dtype=dt), Tensor(b, dtype=dt)
  ga, gb = (ta ** tb).sum().gradient(ta, tb)
  want_a, want_b = (w.astype(dt.np).astype(np.float64) for w in _torch_pow_grads(a.astype(np.float64),
                                                                                 b.astype(np.float64)))
  rtol = 2e-6 if dt == dtypes.float32 else 1e-12
  where = f"{dt} at {list(zip(a.tolist(), b.tolist()))}"
  assert_torch_derivative(ga.numpy().astype(np.float64), want_a, rtol, f"d/da {where}")
  assert_torch_derivative(gb.numpy().astype(np.float64), want_b, rtol, f"d/db {where}")
  # the points the issue names, spelled out
  at: dict[tuple[float, float], int] = {}  # (0.0 before -0.0: equal keys)
  for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
    at.setdefault((x, y), i)
  got_a, got_b = ga.numpy(), gb.numpy()
  assert got_a[at[(0.0, 0.5)]] == INF and got_a[at[(0.0, 1.0)]] == 1 and got_a[at[(0.0, 2.5)]] == 0
  assert got_a[at[(0.0, 0.0)]] == 0 and got_a[at[(0.0, -1.5)]] == -INF and got_a[at[(INF, 2.5)]] == INF
  assert np.isnan(got_b[at[(-2.0, 3.0)]]) and np.isnan(got_b[at[(-2.0, 2.0)]]) and got_b[at[(0.0, 2.0)]] == 0
  assert got_b[at[(0.0, -1.0)]] == -INF  # torch: inf * ln 0


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=["float32", "float64"])
def test_pow_values_are_the_lowered_formulas(backend, dt):
  # the POW node computes what the exp2/log2 formula computed before it was one node, bit for bit
  a = np.array([x for x in POW_BASES for _ in POW_EXPONENTS] + [0.7, 1e-30, 123.25]).astype(dt.np)
  b = np.array([y for _ in POW_BASES for y in POW_EXPONENTS] + [41.5, 0.01, -7.3]).astype(dt.np)
  ta, tb = Tensor(a, dtype=dt), Tensor(b, dtype=dt)
  got, formula = (ta ** tb).numpy(), ta._float_pow(tb).numpy()
  np.testing.assert_array_equal(got.view(np.uint8), formula.view(np.uint8))
  with np.errstate(all="ignore"):
    np.testing.assert_allclose(got, np.power(a.astype(np.float64), b).astype(dt.np), rtol=1e-6, atol=0)


def test_pow_derivatives_against_finite_differences():
  rng = np.random.default_rng(27)
  a, b = rng.random(12) * 3 + 0.1, rng.standard_normal(12) * 2
  check_gradient(lambda x, y: x ** y, a, b, rng=rng, rtol=1e-5, atol=1e-7)
  check_gradient(lambda x: x ** 1.7 + 2.5 ** x, a, rng=rng, rtol=1e-5, atol=1e-7)


def test_pow_second_derivatives_have_no_nan_from_unused_branches(backend):
  # d/da is 0 where b == 0 and d/db 0 where a == 0, b >= 0: their wheres' other branches (0 * a**-1 at a zero base,
  # a**b * ln 0) get safe inputs, so differentiating them again gives 0 there, not 0 * inf (a**0 and 0**b are
  # constant in a and in b)
  a = Tensor(np.array([0.0, 2.0, INF, 0.0, 0.0]))
  b = Tensor(np.array([0.0, 0.0, 0.0, 2.0, 0.5]))
  (ga,) = (a ** b).sum().gradient(a)
  (gaa,) = ga.sum().gradient(a)
  np.testing.assert_array_equal(gaa.numpy()[:3], 0.0)
  (gb,) = (a ** b).sum().gradient(b)
  (gbb,) = gb.sum().gradient(b)
  np.testing.assert_array_equal(gbb.numpy()[3:], 0.0)


def test_pow_is_one_op_with_a_named_rule_and_a_named_lowering(trace, fresh_caches):
  x = Tensor(np.array([0.0, 0.5, 2.0], dtype=np.float32), requires_grad=True)
  y = Tensor(np.array([0.5, 2.0, -1.0], dtype=np.float32), requires_grad=True)
  (x ** y).sum().backward()
  Tensor.realize(x.grad, y.grad)
  np.testing.assert_array_equal(x.grad.numpy(), [INF, 1.0, -0.25])  # (b * a**(b - 1))
  recorder.disable()
  recs = list(TraceReader(trace))
  pats = {r["id"]: r["name"] for r in recs if r["t"] == "pattern"}
  rws = {r["id"]: r["name"] for r in recs if r["t"] == "rw_begin"}
  matched = [(rws[m["rw"]], pats[m["pat"]]) for m in recs if m["t"] == "match"]
  assert ("gradient", "d/dx POW") in matched
  assert ("earliest rewrites", "POW(a, b) -> exp2(log2|a| * b) with pow's special cases") in matched


def test_kernels_never_see_a_float_pow_and_pow_is_computed_once():
  # the lowering makes the kernels the formula made: the cost rule still gives a shared pow read by a reduction and
  # by another kernel a buffer of its own (its exp2 and log2 computed once), and the codegen meets no float POW
  n = MIN_SHARED_EXPENSIVE
  x = Tensor(np.linspace(0.1, 3.0, n, dtype=np.float32))
  y = Tensor(np.linspace(-2.0, 2.0, n, dtype=np.float32))
  p = x ** y
  got = (p / p.sum()).schedule()
  f = x._float_pow(y)
  want = (f / f.sum()).schedule()
  assert [si.ast for si in got] == [si.ast for si in want]
  assert sum(u.op is Ops.EXP2 for si in got for u in si.ast.toposort()) == 1
  (gx,) = (x ** y).sum().gradient(x)
  for si in got + gx.schedule():
    assert not any(u.op is Ops.POW for u in si.ast.toposort()), si.name


def test_binary_crossentropy_has_torchs_derivative_at_zero_and_one(backend):
  """torch's BCELoss: each log clamped at -100, the derivative (p - y) / max(p (1 - p), 1e-12) also at p = 0 and 1
  (where the clamped logs have none), the target's log(1 - p) - log(p) with the same clamps."""
  pn = np.array([0.0, 1.0, 0.0, 1.0, 0.3, 0.999999, 1e-9, 0.5], np.float32)
  yn = np.array([1.0, 0.0, 0.0, 1.0, 0.7, 0.0, 1.0, 0.25], np.float32)
  p, y = Tensor(pn, requires_grad=True), Tensor(yn, requires_grad=True)
  loss = p.binary_crossentropy(y)
  gp, gy = loss.gradient(p, y)
  pd, yd = pn.astype(np.float64), yn.astype(np.float64)
  with np.errstate(divide="ignore"):
    lp, lq = np.maximum(np.log(pd), -100), np.maximum(np.log1p(-pd), -100)
  np.testing.assert_allclose(loss.numpy(), np.mean(-yd * lp - (1 - yd) * lq), rtol=1e-6)
  np.testing.assert_allclose(gp.numpy(), (pd - yd) / np.maximum(pd * (1 - pd), 1e-12) / len(pn), rtol=1e-5)
  np.testing.assert_allclose(gy.numpy(), (lq - lp) / len(pn), rtol=1e-5)
