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
  log(u) is not x: float32 selu(-101.36) was off by 3e-4): there it is plain u - 1."""
  u = x.exp()
  r = (u - 1) * x / u.log()
  r = (u == 1).where(x, (x < -1).where(u - 1, r))
  return (x == math.inf).where(math.inf, r)


def _log1p(u: Any) -> Any:
  """log(1 + u) without losing a tiny u (Kahan: log(w) * u / (w - 1), w = 1 + u rounded)."""
  w = 1 + u
  return (w == 1).where(u, (w == math.inf).where(w, w.log() * u / (w - 1)))


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
    return self.relu().minimum(6)

  def elu(self, alpha: float = 1.0) -> Any:
    x = self._float()
    return (x > 0).where(x, alpha * _expm1(x))

  def celu(self, alpha: float = 1.0) -> Any:
    x = self._float()
    return (x > 0).where(x, alpha * _expm1(x / alpha))

  def selu(self, alpha: float = 1.67326, gamma: float = 1.0507) -> Any:
    x = self._float()
    return gamma * (x >= 0).where(x, alpha * _expm1(x))

  def hardswish(self) -> Any:
    x = self._float()
    return x * (x + 3).relu6() * (1 / 6)

  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Any:
    return (alpha * self._float() + beta).clip(0, 1)

  def hardtanh(self, min_val: float = -1, max_val: float = 1) -> Any:
    return self._float().clip(min_val, max_val)

  def softplus(self, beta: float = 1) -> Any:
    """log(1 + exp(beta x)) / beta, without overflow: relu(bx) + log(1 + exp(-|bx|))."""
    bx = self._float() * beta
    return (bx.relu() + _log1p((-bx.abs()).exp())) * (1 / beta)

  def logsigmoid(self) -> Any:
    return -(-self._float()).softplus()

  def mish(self) -> Any:
    """x * tanh(softplus(x)) as x * n / (n + 2), n = e^x (e^x + 2): no tanh of a tiny softplus (which cancels)."""
    x = self._float()
    e = x.minimum(20).exp()
    n = e * (e + 2)
    return (x > 20).where(x, x * n / (n + 2))

  def softsign(self) -> Any:
    x = self._float()
    return x / (1 + x.abs())

  def quick_gelu(self) -> Any:
    x = self._float()
    return x * (x * 1.702).sigmoid()

  # ---- inverse trigonometric
  def asin(self) -> Any:
    """Accurate to ~1e-7 absolute; nan outside [-1, 1]."""
    x = self._float()
    a = x.abs()
    ret = (a <= 0.5).where(a * _poly(a * a, _ASIN_SMALL), (math.pi / 2) - (1 - a).sqrt() * _poly(a, _ASIN))
    return (a > 1).where(math.nan, ret.copysign(x))

  def acos(self) -> Any:
    x = self._float()
    a = x.abs()
    r = (1 - a).sqrt() * _poly(a, _ASIN)  # acos(|x|), without the cancellation of pi/2 - asin(x) near 1
    return (a > 1).where(math.nan, (x < 0).where(math.pi - r, r))

  def atan(self) -> Any:
    x = self._float()
    a = x.abs()
    big = a > 1
    r = big.where(1 / a, a)
    base = (r / (1 + r * r).sqrt()).asin()
    return big.where((math.pi / 2) - base, base).copysign(x)

  # ---- hyperbolic and their inverses
  def sinh(self) -> Any:
    x = self._float()
    x2 = x * x
    small = x * (1 + x2 * (1 / 6 + x2 * (1 / 120 + x2 * (1 / 5040))))  # Taylor: exp(x) - exp(-x) cancels
    return (x.abs() < 0.5).where(small, (x.exp() - (-x).exp()) * 0.5)

  def cosh(self) -> Any:
    x = self._float()
    return (x.exp() + (-x).exp()) * 0.5

  def asinh(self) -> Any:
    x = self._float()
    a = x.abs()
    a2 = a * a
    small = a * (1 + a2 * (-1 / 6 + a2 * (3 / 40 + a2 * (-15 / 336))))
    huge = a.log() + _LN2  # a*a would overflow
    mid = (a + (a2 + 1).sqrt()).log()
    return (a < 0.1).where(small, (a > 1e18).where(huge, mid)).copysign(x)

  def acosh(self) -> Any:
    x = self._float()
    d = x - 1  # exact near 1, where x * x - 1 would cancel
    return (x > 1e18).where(x.log() + _LN2, _log1p(d + (d * (x + 1)).sqrt()))

  def atanh(self) -> Any:
    x = self._float()
    a = x.abs()
    a2 = a * a
    small = a * (1 + a2 * (1 / 3 + a2 * (1 / 5 + a2 * (1 / 7 + a2 * (1 / 9)))))
    return (a < 0.1).where(small, ((1 + a) / (1 - a)).log() * 0.5).copysign(x)

  def erf(self) -> Any:
    """The error function, to ~1.5e-7 absolute."""
    x = self._float()
    a = x.abs()
    t = 1 / (1 + _ERF_P * a)
    big = 1 - t * _poly(t, _ERF) * (-a * a).exp()
    return (a < 0.5).where(a * _poly(a * a, _ERF_SMALL), big).copysign(x)
