"""Tensor methods: activations, inverse trigonometric and hyperbolic functions, erf, round, copysign, lerp,
shifts, isclose/allclose, bitcast, clone. Built from the existing elementwise ops (no new UOp ops)."""
from __future__ import annotations

import math
from typing import Any

from compiler.dtype import dtypes

_LN2 = math.log(2)
# asin(x) = pi/2 - sqrt(1 - x) * P(x) on [0, 1] (Abramowitz & Stegun 4.4.46, |error| <= 2e-8)
_ASIN = (-0.0012624911, 0.0066700901, -0.0170881256, 0.0308918810, -0.0501743046, 0.0889789874, -0.2145988016,
         1.5707963050)
# erf(x) = 1 - t * P(t) * exp(-x^2), t = 1 / (1 + p x) (Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7)
# asin's Taylor series, (2n)! / (4^n n!^2 (2n+1)) for n = 10 .. 0: on |x| <= 0.5 it keeps the relative precision
# that pi/2 - sqrt(1 - x) * P(x) loses to cancellation near 0
_ASIN_SMALL = tuple(math.comb(2 * n, n) / (4 ** n * (2 * n + 1)) for n in range(10, -1, -1))
# erf's Taylor series 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)) for n = 7 .. 0, for |x| < 0.5 (where 1 - t P(t)
# e^-x^2 cancels: 13% off at 1e-6)
_ERF_SMALL = tuple((-1) ** n * 2 / math.sqrt(math.pi) / (math.factorial(n) * (2 * n + 1)) for n in range(7, -1, -1))
_ERF_P = 0.3275911
_ERF = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)


def _poly(x: Any, coeffs: tuple[float, ...]) -> Any:
  """Horner: coeffs from the highest power down."""
  ret = x.full((), coeffs[0], x.dtype)
  for c in coeffs[1:]:
    ret = ret * x + c
  return ret


def _expm1(x: Any) -> Any:
  """exp(x) - 1 without the cancellation near 0 (Kahan: (u - 1) * x / log(u), u = exp(x)); keeps -0.0. Below x = -1
  there is no cancellation to avoid, and the trick would be wrong where u is subnormal (few significant bits, so
  log(u) is not x: float32 selu(-101.36) was off by 3e-4): there it is plain u - 1, as where u overflows. Where the
  trick is not used its input is 1 (double where): its 0 / 0 at u == 1 and inf / inf would make the gradient nan."""
  u = x.exp()
  kahan = (u != 1) & (x >= -1) & (u != math.inf)
  xs = kahan.where(x, 1.0)
  us = xs.exp()
  return kahan.where((us - 1) * xs / us.log(), (u == 1).where(x, u - 1))


def _log1p(u: Any) -> Any:
  """log(1 + u) without losing a tiny u (Kahan: log(w) * u / (w - 1), w = 1 + u rounded). Where the trick is not
  used its input is 1 (double where, as _expm1); below -1 it is log(w) (nan, with the derivative 1 / (1 + u))."""
  w = 1 + u
  kahan = (w != 1) & (w > 0) & (w != math.inf)
  us = kahan.where(u, 1.0)
  ws = 1 + us
  return kahan.where(ws.log() * us / (ws - 1), (w == 1).where(u, (u == math.inf).where(math.inf, w.log())))


def _acosh_from_1(x: Any) -> Any:
  """acosh for x >= 1 (below it nan): log1p of d + sqrt(d (x + 1)) with d = x - 1, exact near 1 where x * x - 1
  would cancel; past 1e18, log(x) + ln 2 (x * x would overflow)."""
  huge = x > 1e18
  xm = huge.where(1.0, x)
  d = xm - 1  # (sqrt(d) apart, whose derivative at 1 is inf times 0)
  return huge.where(huge.where(x, 1.0).log() + _LN2, _log1p(d + d.sqrt() * (xm + 1).sqrt()))


def _exp_big(x: Any) -> Any:
  """cosh|x| = sinh|x| = e^|x| / 2 for |x| > 20 (e^-2|x| is below float64's epsilon), as e^(|x| - 2) * e^2 / 2
  (|x| - 2 is exact there): e^|x| overflowed float32 from 88.7, cosh not until 89.4, and no step of the value or of
  its gradient is larger than the result."""
  return (x.abs() - 2).exp() * (math.exp(2) / 2)


def _signed_abs(x: Any) -> tuple[Any, Any]:
  """(x's sign bit, |x|) with |x| a where, whose derivative is -1 or 1 at -0.0 and 0.0 too (abs's is 0 there): an
  odd function made of f(|x|) keeps its derivative at 0."""
  neg = x._signbit()
  return neg, neg.where(-x, x)


class ElementwiseMixin:
  __slots__ = ()

  # ---- bits
  def bitcast(self, dtype: Any) -> Any:
    """The same bits read as another dtype of the same size."""
    from compiler.dtype import DType
    T = type(self)
    dt = dtype if isinstance(dtype, DType) else T.zeros(0, dtype=dtype).dtype
    if dt.itemsize != self.dtype.itemsize or dt == dtypes.bool or self.dtype == dtypes.bool:
      raise RuntimeError(f"Tensor.bitcast: can't bitcast {self.dtype} to {dt} (shape {self.shape}): sizes differ")
    return self if dt == self.dtype else T(self.uop.bitcast(dt))

  def copysign(self, other: Any) -> Any:
    """|self| with the sign of other (the sign bit: -0.0 counts as negative), as torch.copysign."""
    T = type(self)
    x = self._float()
    o = other if isinstance(other, T) else T.full((), other, x.dtype)
    x, o = x._broadcasted(o.cast(x.dtype) if dtypes.is_float(o.dtype) else o._float(), "copysign")
    mag = x.abs()  # a WHERE, not bit operations: the gradient flows through it (erf, atan, asinh, atanh use it)
    return o._signbit().where(-mag, mag)

  def lerp(self, end: Any, weight: Any) -> Any:
    """self + (end - self) * weight."""
    return self + (end - self) * weight

  # ---- shifts
  def _shift_check(self, y: Any, name: str) -> None:
    if not dtypes.is_int(self.dtype) or self.dtype == dtypes.bool:
      raise RuntimeError(f"Tensor.{name}: needs an integer tensor, got {self.dtype} of shape {self.shape}")
    if isinstance(y, type(self)):
      if not dtypes.is_int(y.dtype) or y.dtype == dtypes.bool:
        raise RuntimeError(f"Tensor.{name}: the shift must be an integer, got {y.dtype} of shape {y.shape}")
    elif not isinstance(y, int) or isinstance(y, bool) or y < 0:
      raise RuntimeError(f"Tensor.{name}: the shift must be a non-negative int or an integer Tensor, got {y!r}")

  def _pow2(self, y: Any) -> Any:
    """2**y as int64 (an exact float32 power of two, then cast)."""
    return y.cast(dtypes.float32).exp2().cast(dtypes.int64)

  def lshift(self, y: Any) -> Any:
    """self << y (multiplication by 2**y, wrapping like C)."""
    self._shift_check(y, "lshift")
    if isinstance(y, int):
      bits = 8 * self.dtype.itemsize
      if y >= bits:
        return self.zeros_like()
      x = self
      while y > 0:  # factors that fit the dtype; the products wrap like C
        s = min(y, bits - 2)
        x, y = x * (2 ** s), y - s
      return x
    return (self.cast(dtypes.int64) * self._pow2(y)).cast(self.dtype)

  def rshift(self, y: Any) -> Any:
    """self >> y (floor division by 2**y: arithmetic for signed ints)."""
    self._shift_check(y, "rshift")
    if isinstance(y, int):
      bits = 8 * self.dtype.itemsize
      if y >= bits:
        return (self < 0).where(-1, 0).cast(self.dtype) if not dtypes.is_unsigned(self.dtype) else self.zeros_like()
      return self // (2 ** y) if 2 ** y <= dtypes.max(self.dtype) else (self < 0).where(-1, 0).cast(self.dtype)
    return self.cast(dtypes.int64).floordiv(self._pow2(y)).cast(self.dtype)

  def __lshift__(self, y): return self.lshift(y)
  def __rshift__(self, y): return self.rshift(y)

  # ---- comparisons
  def isclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Any:
    """|self - other| <= atol + rtol * |other| elementwise; infinities close only to themselves."""
    T = type(self)
    o = other if isinstance(other, T) else T.full((), other, self.dtype if dtypes.is_float(self.dtype) else
                                                     dtypes.default_float)
    a, b = self._broadcasted(o, "isclose")
    a, b = a._float(), b._float()
    finite = (a.abs() != math.inf) & (b.abs() != math.inf)
    ret = (a == b) | (finite & ((a - b).abs() <= atol + rtol * b.abs()))
    return ret | ((a != a) & (b != b)) if equal_nan else ret

  def allclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Any:
    """isclose everywhere (a 0-d bool Tensor, as tinygrad)."""
    return self.isclose(other, rtol, atol, equal_nan).all()

  def clone(self) -> Any:
    """A copy in a buffer of its own."""
    return self.contiguous()

  # ---- rounding
  def round(self) -> Any:
    """Round half to even (as torch and numpy); the sign of zero is kept."""
    if not dtypes.is_float(self.dtype):
      return self
    f = self.floor()
    diff = self - f
    half_f = f * 0.5
    even = half_f.floor() == half_f
    r = (diff > 0.5).where(f + 1, (diff < 0.5).where(f, even.where(f, f + 1)))
    return (self != self).where(self, r.copysign(self))

  # ---- activations
  def swish(self) -> Any:
    return self * self.sigmoid()

  def silu(self) -> Any:
    return self.swish()

  def relu6(self) -> Any:
    return self.hardtanh(0, 6) if dtypes.is_float(self.dtype) else self.relu().minimum(6)

  # the negative side gets its input clamped to 0 (double where): exp of a large positive x overflowed there, and
  # the unused inf made the gradient nan. At 0 the slope is the negative side's, as torch's
  def elu(self, alpha: float = 1.0) -> Any:
    x = self._float()
    pos = x > 0
    return pos.where(x, alpha * _expm1(pos.where(0.0, x)))

  def celu(self, alpha: float = 1.0) -> Any:
    x = self._float()
    pos = x > 0
    return pos.where(x, alpha * _expm1(pos.where(0.0, x) / alpha))

  def selu(self, alpha: float = 1.67326, gamma: float = 1.0507) -> Any:
    x = self._float()
    pos = x > 0
    return gamma * pos.where(x, alpha * _expm1(pos.where(0.0, x)))

  def hardswish(self) -> Any:
    """x * relu6(x + 3) / 6, with torch's derivative at -3 (-1/2) and 3 (3/2)."""
    x = self._float()
    mid = (x >= -3) & (x <= 3)
    xm = mid.where(x, 0.0)  # (the unused middle's input: x * (x + 3) of an inf would make the gradient nan)
    return (x < -3).where(x * 0.0, mid.where(xm * (xm + 3) * (1 / 6), x))  # (x * 0: -0.0, and nan at -inf)

  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Any:
    return (alpha * self._float() + beta).hardtanh(0, 1)

  def hardtanh(self, min_val: float = -1, max_val: float = 1) -> Any:
    """x clamped to [min_val, max_val], with torch's derivative: 0 at the bounds (clip's is 1 there)."""
    x = self._float()
    return (x <= min_val).where(min_val, (x >= max_val).where(max_val, x))

  def softplus(self, beta: float = 1) -> Any:
    """log(1 + exp(beta x)) / beta, without overflow: max(bx, 0) + log(1 + exp(-|bx|)), by wheres whose derivatives
    at 0 add up to 1/2 (relu's and abs's are 0 there)."""
    bx = self._float() * beta
    pos = bx > 0
    return (pos.where(bx, 0.0) + _log1p(pos.where(-bx, bx).exp())) * (1 / beta)

  def logsigmoid(self) -> Any:
    return -(-self._float()).softplus()

  def mish(self) -> Any:
    """x * tanh(softplus(x)) as x * n / (n + 2), n = e^x (e^x + 2): no tanh of a tiny softplus (which cancels)."""
    x = self._float()
    big = x > 20
    e = big.where(20.0, x).exp()  # (a where, not minimum: its tie at 20 would halve the gradient)
    n = e * (e + 2)
    return big.where(x, x * n / (n + 2))

  def softsign(self) -> Any:
    x = self._float()
    return x / (1 + x.abs())

  def quick_gelu(self) -> Any:
    x = self._float()
    return x * (x * 1.702).sigmoid()

  # ---- inverse trigonometric
  # (the odd functions below are f(|x|) with x's sign, |x| from _signed_abs so that f'(0) reaches x; each branch of
  # a where gets an input it is defined at where it is not used, so no unused inf or nan reaches the gradient)
  def asin(self) -> Any:
    """Accurate to ~1e-7 absolute; nan outside [-1, 1]."""
    x = self._float()
    neg, a = _signed_abs(x)
    small = a <= 0.5
    a_s, a_b = small.where(a, 0.0), small.where(0.5, a)
    ret = small.where(a_s * _poly(a_s * a_s, _ASIN_SMALL), (math.pi / 2) - (1 - a_b).sqrt() * _poly(a_b, _ASIN))
    return (a > 1).where(math.nan, neg.where(-ret, ret))

  def acos(self) -> Any:
    x = self._float()
    neg, a = _signed_abs(x)
    r = (1 - a).sqrt() * _poly(a, _ASIN)  # acos(|x|), without the cancellation of pi/2 - asin(x) near 1
    return (a > 1).where(math.nan, neg.where(math.pi - r, r))

  def atan(self) -> Any:
    x = self._float()
    neg, a = _signed_abs(x)
    big = a > 1
    r = big.where(1 / big.where(a, 1.0), a)
    base = (r / (1 + r * r).sqrt()).asin()
    ret = big.where((math.pi / 2) - base, base)
    return neg.where(-ret, ret)

  # ---- hyperbolic and their inverses
  def sinh(self) -> Any:
    x = self._float()
    small, big = x.abs() < 0.5, x.abs() > 20
    xs = small.where(x, 0.0)
    x2 = xs * xs
    taylor = xs * (1 + x2 * (1 / 6 + x2 * (1 / 120 + x2 * (1 / 5040))))  # exp(x) - exp(-x) cancels
    xm = (small | big).where(1.0, x)
    return small.where(taylor, big.where(_exp_big(x).copysign(x), (xm.exp() - (-xm).exp()) * 0.5))

  def cosh(self) -> Any:
    x = self._float()
    big = x.abs() > 20
    xm = big.where(1.0, x)
    return big.where(_exp_big(x), (xm.exp() + (-xm).exp()) * 0.5)

  def asinh(self) -> Any:
    x = self._float()
    neg, a = _signed_abs(x)
    small, huge = a < 0.1, a > 1e18
    a_s, a_h, a_m = small.where(a, 0.0), huge.where(a, 1.0), (small | huge).where(1.0, a)
    a2 = a_s * a_s
    ret = small.where(a_s * (1 + a2 * (-1 / 6 + a2 * (3 / 40 + a2 * (-15 / 336)))),
                      huge.where(a_h.log() + _LN2, (a_m + (a_m * a_m + 1).sqrt()).log()))  # (a * a would overflow)
    return neg.where(-ret, ret)

  def acosh(self) -> Any:
    """log(x + sqrt(x^2 - 1)); below -1 the value is nan and the derivative torch's 1 / sqrt(x^2 - 1): there it is
    nan + -acosh(-x), whose nan is a constant (no derivative), each branch fed a safe input (double where)."""
    x = self._float()
    mirror = x <= -1
    inner = _acosh_from_1(mirror.where(2.0, x))
    return mirror.where(math.nan - _acosh_from_1(mirror.where(-x, 2.0)), inner)

  def atanh(self) -> Any:
    """(log1p(x) - log1p(-x)) / 2: both terms have x's sign, so nothing cancels, and the derivative is 1 / (1 - x^2)
    everywhere (inf at +-1; finite outside [-1, 1], as torch's, where the value is nan)."""
    x = self._float()
    return (_log1p(x) - _log1p(-x)) * 0.5

  def erf(self) -> Any:
    """The error function, to ~1.5e-7 absolute."""
    x = self._float()
    neg, a = _signed_abs(x)
    small, flat = a < 0.5, a > 6  # past 6, erf is 1 in float64 (and a * a overflows past 1e154)
    a_s, a_b = small.where(a, 0.0), (small | flat).where(1.0, a)
    t = 1 / (1 + _ERF_P * a_b)
    big = 1 - t * _poly(t, _ERF) * (-a_b * a_b).exp()
    ret = small.where(a_s * _poly(a_s * a_s, _ERF_SMALL), flat.where(1.0, big))
    return neg.where(-ret, ret)

  # ---- classification (bool results; an int or bool tensor is finite), log10, logaddexp, bitwise_not
  def isnan(self) -> Any:
    return self != self if dtypes.is_float(self.dtype) else self.full_like(False, dtypes.bool)

  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Any:
    """True where self is +inf (with detect_positive) or -inf (with detect_negative)."""
    if not dtypes.is_float(self.dtype) or not (detect_positive or detect_negative):
      return self.full_like(False, dtypes.bool)
    if detect_positive and detect_negative:
      return (self == math.inf) | (self == -math.inf)
    return self == (math.inf if detect_positive else -math.inf)

  def isfinite(self) -> Any:
    """Neither inf nor nan (both comparisons are false for nan)."""
    if not dtypes.is_float(self.dtype):
      return self.full_like(True, dtypes.bool)
    return (self > -math.inf) & (self < math.inf)

  def log10(self) -> Any:
    return self._via_float32(lambda x: x.log2() * math.log10(2))

  def logaddexp(self, y: Any) -> Any:
    """log(exp(self) + exp(y)) without overflow: max + log1p(exp(-|self - y|))."""
    a, b = self._broadcasted(y, "logaddexp")
    a, b = a._float(), b._float()
    if a.dtype == dtypes.float16:  # (half intermediates cost several ulps, as _via_float32)
      return a.float().logaddexp(b.float()).half()
    m = a.maximum(b)
    # -|a - b| as (a - m) + (b - m), one of them 0: at a tie its gradient is 1 - 2 dm/da and the result's is 1/2
    # whichever way MAX shares its gradient (|a - b| would give 0 there, and the result dm/da)
    d = (a - m) + (b - m)
    e = d.exp()
    w = 1 + e
    # log1p(e) as _log1p, with a denominator never 0: the branch not taken gets a zero gradient, which 0 / 0 made NaN
    lp = (w == 1).where(e, w.log() * e / (w == 1).where(1.0, w - 1))
    return m.isinf().where(m, m + lp)  # both +-inf, or +inf and -inf: d is inf - inf, the result the max

  def bitwise_not(self) -> Any:
    """~self: every bit flipped (ints), logical not (bool)."""
    if dtypes.is_float(self.dtype):
      raise RuntimeError(f"Tensor.bitwise_not: needs int or bool tensors, got {self.dtype} of shape {self.shape}")
    return self.logical_not() if self.dtype == dtypes.bool else self ^ -1
