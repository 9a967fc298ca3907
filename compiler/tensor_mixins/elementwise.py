"""Tensor methods computed element by element: arithmetic (with numpy's rules for division, remainders and powers),
comparisons, bitwise and logical ops, the Python operators, unary math, trig and its inverses, hyperbolic functions,
activations, erf, round, copysign, lerp, shifts, isclose/allclose, bitcast, clone. Built from the existing
elementwise ops (no new UOp ops).

sin and cos of any float: an exact reduction modulo pi/2 (Payne-Hanek style, in float64 Tensor ops), then the SIN op
on |angle| <= pi/4 only, so no backend has to reduce a large argument. x * 2/pi is summed from products of x with
26-bit pieces of 2/pi: each product is exact in float64 (a float32 significand has 24 bits) and so is its remainder
modulo 4, so the pieces whose weight is a multiple of 4 vanish exactly and the fraction keeps all its bits however
large x is. The remainders are added with error-free sums (TwoSum: adds only, which the LLVM renderer's `contract`
flag leaves alone)."""
from __future__ import annotations

import math
from typing import Any

from compiler.device import check_same_device
from compiler.dtype import dtypes, least_upper_dtype, truncate
from compiler.tensor_mixins._args import Scalar, broadcast_shape, fitting_int, is_int, is_scalar, py_value
from compiler.trace import recorder
from compiler.uop import Ops, UOp, toposort

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


# ---- sin and cos
# 2/pi to 384 bits (computed with Machin's formula; the same digits as fdlibm's two_over_pi table)
_TWO_OVER_PI_HEX = ("a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e006492eea09d1921c"
                    "fe1d")[:96]
_PIECE_BITS = 26
# enough pieces that what is left of x * 2/pi is below 2**-110 for |x| < 2**128 (float32's range and float64's
# inputs split into three float32 parts)
_N_PIECES = 12


def _pieces() -> tuple[float, ...]:
  bits = int(_TWO_OVER_PI_HEX, 16)
  total = 4 * len(_TWO_OVER_PI_HEX)
  out = []
  for i in range(_N_PIECES):
    shift = total - _PIECE_BITS * (i + 1)
    out.append(math.ldexp((bits >> shift) & ((1 << _PIECE_BITS) - 1), -_PIECE_BITS * (i + 1)))
  return tuple(out)


_TWO_OVER_PI = _pieces()
_SMALL = 2.0 ** -27  # below it sin(x) rounds to x and cos(x) to 1 in float64
_F32_MAX = float.fromhex("0x1.fffffep127")


def _quarter_turns(ax: Any, parts: list[Any]) -> tuple[Any, Any]:
  """For float64 ax >= 0 = sum(parts) (each with a float32 significand): (k, f) with ax * 2/pi = 4m + k + f, k an
  integer in 0..3 (as float64) and |f| <= 1/2 to about 2**-100."""
  s = e = e2 = None
  for part in parts:
    for c in _TWO_OVER_PI:
      p = part * c  # exact: 24 + 26 bits
      q = p - (p * 0.25).trunc() * 4.0  # exact: p mod 4
      if s is None:
        s, e, e2 = q, q.zeros_like(), q.zeros_like()
        continue
      s, err = s._two_sum(q)
      if len(parts) == 1:
        e = e + err
      else:  # float64's many terms: the rounding of the error sum would show in its last bits near a zero
        e, err2 = e._two_sum(err)
        e2 = e2 + err2
  n = (s + 0.5).floor()
  f = (s - n) + (e + e2)  # s - n is exact
  k = n - (n * 0.25).floor() * 4.0
  return k, f


def _split_f32(x: Any) -> list[Any]:
  """float64 x as three float32-representable parts (exact while |x| is inside float32's normal range)."""
  x1 = x.cast(dtypes.float32).cast(dtypes.float64)
  r = x - x1
  x2 = r.cast(dtypes.float32).cast(dtypes.float64)
  return [x1, x2, r - x2]


def _sin_cos(x: Any, cos: bool) -> Any:
  """sin(x) or cos(x) for a float tensor, accurate over the whole range of float16/float32 (float64: |x| < 2**128,
  beyond which the backend's SIN reduces)."""
  dt = x.dtype
  xd = x.cast(dtypes.float64)
  ax = xd.abs()
  parts = [ax] if dt != dtypes.float64 else _split_f32(ax)
  k, f = _quarter_turns(ax, parts)
  if cos:
    k = (k == 3).where(0.0, k + 1)  # cos(x) = sin(x + pi/2): one quarter turn on
  y = f * (math.pi / 2)
  sin_y = y._alu(Ops.SIN)
  h = (y * 0.5)._alu(Ops.SIN)
  cos_y = 1.0 - 2.0 * h * h  # no cancellation for |y| <= pi/4
  ret = (k == 0).where(sin_y, (k == 1).where(cos_y, (k == 2).where(-sin_y, -cos_y)))
  if not cos:
    ret = xd._signbit().where(-ret, ret)  # sin is odd (and sin(-0.0) is -0.0)
  small = ax < _SMALL
  ret = small.where(1.0 if cos else xd, ret)
  if dt == dtypes.float64:
    # outside float32's range a float64 x is split inexactly: the backend's SIN reduces it (sin(x + pi/2) would
    # round the quarter turn away at that size, hence cos(x) = sin(2x) / (2 sin(x)) or 1 - 2 sin(x/2)**2)
    # (inputs where a branch is not used are 1, double where: a 1/0 there made the gradient nan)
    big = ax > _F32_MAX
    xb = big.where(xd, 1.0)
    s1 = xb._alu(Ops.SIN)
    half = (xb * 0.5)._alu(Ops.SIN)
    by_sin2 = s1.abs() > 0.5
    big_cos = by_sin2.where((xb * 2.0)._alu(Ops.SIN) / (2.0 * by_sin2.where(s1, 1.0)), 1.0 - 2.0 * half * half)
    ret = big.where(big_cos if cos else s1, ret)
  return ret.cast(dt)


class ElementwiseMixin:
  __slots__ = ()

  # arithmetic
  def add(self, y: Any | Scalar, reverse: bool = False) -> Any:
    a, b = self._broadcasted(y, "add", reverse)
    return a._alu(Ops.OR if a.dtype == dtypes.bool else Ops.ADD, b)

  def sub(self, y: Any | Scalar, reverse: bool = False) -> Any:
    a, b = self._broadcasted(y, "sub", reverse)
    if a.dtype == dtypes.bool:
      raise TypeError("Tensor.sub: subtracting bool tensors is not supported (use ^ or logical_not)")
    return a._alu(Ops.SUB, b)

  def mul(self, y: Any | Scalar, reverse: bool = False) -> Any:
    a, b = self._broadcasted(y, "mul", reverse)
    return a._alu(Ops.AND if a.dtype == dtypes.bool else Ops.MUL, b)

  def div(self, y: Any | Scalar, reverse: bool = False, rounding_mode: str | None = None) -> Any:
    """True division (ints divide as floats); rounding_mode "trunc" rounds toward 0, "floor" toward -inf (torch's;
    ints stay ints)."""
    if rounding_mode == "floor":
      return self.floordiv(y, reverse)
    if rounding_mode == "trunc":
      a, b = self._broadcasted(y, "div", reverse)
      if dtypes.is_float(a.dtype):
        return a._alu(Ops.FDIV, b).trunc()
      if a.dtype == dtypes.bool:
        a, b = a.cast(dtypes.int8), b.cast(dtypes.int8)
      return a._alu(Ops.IDIV, b)
    if rounding_mode is not None:
      raise RuntimeError(f"Tensor.div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = self._broadcasted(y, "div", reverse)
    if not dtypes.is_float(a.dtype):
      a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    return a._alu(Ops.FDIV, b)

  def floordiv(self, y: Any | Scalar, reverse: bool = False) -> Any:
    """Division rounding toward -inf, like numpy's //."""
    a, b = self._broadcasted(y, "floordiv", reverse)
    if dtypes.is_float(a.dtype):
      return a._float_floordiv(b)
    if a.dtype == dtypes.bool:
      a, b = a.cast(dtypes.int8), b.cast(dtypes.int8)
    q = a._alu(Ops.IDIV, b)
    if dtypes.is_unsigned(a.dtype):
      return q
    # C truncates; step down where the remainder is non-zero and the signs differ
    r = a._alu(Ops.MOD, b)
    fix = (r != 0) & ((r < 0) != (b < 0))
    return fix.where(q - 1, q)

  def mod(self, y: Any | Scalar, reverse: bool = False) -> Any:
    """Remainder with the divisor's sign, like numpy's %."""
    a, b = self._broadcasted(y, "mod", reverse)
    if dtypes.is_float(a.dtype):
      return a._float_remainder(b)
    if a.dtype == dtypes.bool:
      a, b = a.cast(dtypes.int8), b.cast(dtypes.int8)
    r = a._alu(Ops.MOD, b)
    if dtypes.is_unsigned(a.dtype):
      return r
    fix = (r != 0) & ((r < 0) != (b < 0))
    return fix.where(r + b, r)

  def _signbit(self) -> Any:
    """True where a float is negative, -0.0 included."""
    return (self < 0) | ((self == 0) & (self._alu(Ops.RECIP) < 0))

  def fmod(self, y: Any | Scalar) -> Any:
    """C's fmod: the exact remainder of truncating division, with the dividend's sign (ints: C's %)."""
    a, b = self._broadcasted(y, "fmod")
    if not dtypes.is_float(a.dtype):
      return a._alu(Ops.MOD, b) if a.dtype != dtypes.bool else a._alu(Ops.MOD, b.cast(dtypes.int8)).cast(dtypes.bool)
    return a._fmod(b)

  def _two_sum(self, y: Any) -> tuple[Any, Any]:
    """s, e with s = fl(self + y) and s + e == self + y exactly (Knuth's TwoSum: adds only)."""
    s = self + y
    bb = s - self
    return s, (self - (s - bb)) + (y - bb)

  def _fmod(self, b: Any, narrow: bool = False) -> Any:
    """C's fmod of two float tensors of one dtype, exact (float64: while |self / b| < 2**116 and |b| is inside
    float32's range; beyond, one corrected truncating step). narrow: float64 holding float16/32 values."""
    if self.dtype != dtypes.float64:
      return self.cast(dtypes.float64)._fmod(b.cast(dtypes.float64), narrow=True).cast(self.dtype)
    a = self
    r, d = a.abs(), b.abs()
    # 10 steps of 28 bits cover the largest float32 ratio, 2**128 / 2**-149
    r = self._fmod_steps(r, d, 28, 10, None) if narrow else self._fmod_f64(r, d)
    r = a._signbit().where(-r, r)
    # C's special cases: an infinite divisor leaves a finite dividend; inf % y and x % 0 are nan
    r = ((d == math.inf) & (a.abs() != math.inf)).where(a, r)
    return ((d == 0) | (a.abs() == math.inf)).where(math.nan, r)

  @staticmethod
  def _fmod_steps(r: Any, d: Any, bits: int, steps: int, pieces: list[Any] | None) -> Any:
    """r mod d for float64 r, d >= 0 as r mod (d * 2**(bits*k)) for k = steps..0, each quotient q < 2**bits.

    Every remainder is a multiple of the ulp of its step (so it is exact), q * step is exact when d has a
    float32 significand (bits=28); else d is given as float32-sized pieces (bits=29) whose products are exact
    and whose differences TwoSum keeps exactly."""
    for k in range(steps, -1, -1):
      scale = float(2 ** (bits * k))
      step = d * scale
      q = (r / step).trunc()
      if pieces is None:
        r = r - q * step
      else:
        errs = []
        for piece in pieces:
          r, err = r._two_sum(-(q * (piece * scale)))
          errs.append(err)
        r = r + (errs[0] + errs[1] + errs[2])  # the errors are few-bit multiples of the step's ulp: exact
      r = (r < 0).where(r + step, r)  # the quotient rounded up to the next integer: one step too many
    return r

  @classmethod
  def _fmod_f64(cls, r: Any, d: Any) -> Any:
    """|a| mod |b| for float64 tensors (see _fmod)."""
    # scale both by powers of two (exact) until d is where its float32 pieces are exact: [2**-70, 2**127]
    rs, ds, moves = r, d, []
    for f in (2.0 ** 180,) * 6 + (2.0 ** -180,) * 5:
      move = (ds < 2.0 ** -70) if f > 1 else (ds > 2.0 ** 127)
      rs, ds = move.where(rs * f, rs), move.where(ds * f, ds)
      moves.append((move, f))
    d1 = ds.cast(dtypes.float32).cast(dtypes.float64)
    d2 = (ds - d1).cast(dtypes.float32).cast(dtypes.float64)
    exact = cls._fmod_steps(rs, ds, 29, 3, [d1, d2, (ds - d1) - d2])
    for move, f in reversed(moves):  # back one level at a time: the whole factor may be below float64's range
      exact = move.where(exact * (1 / f), exact)
    rough = cls._fmod_steps(r, d, 0, 0, None)
    rough = (rough >= d).where(rough - d, rough)  # a rounded product can leave one divisor too many
    # r < d is its own remainder (and scaling it down could lose it); quotients of 2**116 or more: rough
    return (r < d).where(r, (r < d * 2.0 ** 116).where(exact, rough))

  def _float_remainder(self, b: Any) -> Any:
    """numpy's float %: fmod, moved by b where it is non-zero and its sign differs from b's; else 0 with b's sign."""
    r = self._fmod(b)
    differ = r._signbit() != b._signbit()
    moved = ((r != 0) & differ).where(r + b, r)
    return (r == 0).where(b._signbit().where(-0.0, 0.0).cast(r.dtype), moved)

  def _float_floordiv(self, b: Any) -> Any:
    """numpy's float //: (a - fmod(a, b)) / b, one less where the remainder's sign differs from b's, rounded."""
    if self.dtype == dtypes.float16:  # numpy divides halves in float32
      return self.float()._float_floordiv(b.float()).half()
    a = self
    r = a._fmod(b)
    div = (a - r)._alu(Ops.FDIV, b)
    div = ((r != 0) & (r._signbit() != b._signbit())).where(div - 1, div)
    fl = div.floor()
    fl = (div - fl > 0.5).where(fl + 1, fl)
    # a zero quotient has the sign of a / b; b == 0 gives a / b (inf or nan), as numpy
    zero = (a._signbit() != b._signbit()).where(-0.0, 0.0).cast(a.dtype)
    return (b == 0).where(a._alu(Ops.FDIV, b), (div == 0).where(zero, fl))

  def pow(self, y: Any | Scalar, reverse: bool = False) -> Any:
    """self ** y with numpy's (IEEE pow's) special cases; int ** int stays int (a negative int exponent raises)."""
    v = py_value(y) if is_scalar(y) else None
    if not reverse and isinstance(v, int) and not isinstance(v, bool):
      if v < 0 and not dtypes.is_float(self.dtype):
        raise RuntimeError(f"Tensor.pow: Integers to negative integer powers are not allowed ({self.dtype} tensor of "
                           f"shape {self.shape} ** {v})")
    whole = isinstance(v, int) or (isinstance(v, float) and v.is_integer())
    if not reverse and whole and (abs(v) <= 64 or not dtypes.is_float(self.dtype)):
      base = self.cast(self._scalar_dtype(v))
      if base.dtype in (dtypes.float16, dtypes.float32):  # each product would round: in float64 only the last does
        return base.cast(dtypes.float64)._pow_by_squaring(int(v)).cast(base.dtype)
      return base._pow_by_squaring(int(v))
    a, b = self._broadcasted(y, "pow", reverse)
    if not dtypes.is_float(a.dtype):
      return a._int_pow(b)
    # one POW node, whose derivative is torch's ("d/dx POW" in gradient.py; _float_pow's formula's was 0 where
    # torch's is inf or nan); the scheduler lowers it to that formula (_lower_pow)
    return a._alu(Ops.POW, b.cast(a.dtype))

  def _pow_by_squaring(self, n: int) -> Any:
    """self ** n for a Python int n: exact for ints, accurate for floats (a negative n only for floats)."""
    # a negative n squares 1 / self: its derivative at 0 and inf is -inf and 0, where 1 / self**|n|'s was 0 * inf
    ret, p, k = None, self.reciprocal() if n < 0 else self, abs(n)
    while k:
      if k & 1:
        ret = p if ret is None else ret * p
      k >>= 1
      if k:
        p = p * p
    if ret is None:  # x**0 is 1 even for inf and nan; self stays in the graph, so its gradient is 0, not missing
      return (self == self).where(1, 1).cast(self.dtype)
    return ret

  def _int_pow(self, e: Any) -> Any:
    """Elementwise int ** int by squaring over e's bits; a negative e gives the truncated 1/self**|e| (as torch)."""
    if self.dtype == dtypes.bool:
      return self.cast(dtypes.default_int)._int_pow(e.cast(dtypes.default_int))
    ret, p, k = self.ones_like(), self, e.abs()
    for i in range(8 * self.dtype.itemsize - (0 if dtypes.is_unsigned(self.dtype) else 1)):
      ret = ((k & 1) != 0).where(ret * p, ret)
      k = k._alu(Ops.IDIV, self.full(k.shape, 2, k.dtype))  # k >= 0, so C's truncation is a shift
      if i < 8 * self.dtype.itemsize - 2:
        p = p * p
    if dtypes.is_unsigned(self.dtype):
      return ret
    odd = (e & 1) != 0
    neg_e = (self == 1).where(1, (self == -1).where(odd.where(-1, 1), 0)).cast(self.dtype)
    return (e < 0).where(neg_e, ret)

  def _float_pow(self, b: Any) -> Any:
    """Elementwise float ** float as exp2(log2|a| * b) with pow's signs and special cases: what a POW node computes
    (the scheduler's lowering, `_lower_pow`; its derivative is gradient.py's "d/dx POW", not this formula's)."""
    if self.dtype != dtypes.float64:  # log2's rounding error grows with the result's exponent: float64 holds it
      return self.cast(dtypes.float64)._float_pow(b.cast(dtypes.float64)).cast(self.dtype)
    a = self
    # log2|a| * b is nan for 0 * inf (x**0 at 0, inf, nan; 1**inf) and for nan, and at a base of 0 or inf the power
    # is 0 or inf: there the formula gets safe inputs (its result is not used) and the special cases' values
    bad = (a.abs().log2() * b) != (a.abs().log2() * b)
    edge = (a == 0) | (a.abs() == math.inf)  # the power is 0 or inf
    safe = bad | edge
    mag = (safe.where(1.0, a).abs().log2() * safe.where(0.0, b)).exp2()
    mag = edge.where((a == 0).where((b > 0).where(0.0, math.inf), (b > 0).where(math.inf, 0.0)), mag)
    neg_base = a._signbit()  # -0.0 is a negative base too
    b_int = b.trunc() == b  # false for nan, true for +-inf
    halved = b * 0.5
    b_odd = b_int & (halved.trunc() != halved)
    # a negative base has a real power for integer exponents (odd ones negate it), and at -0 and -inf for any; else
    # nan: mag times nan, times 0 where it is not used
    not_real = neg_base & (b_int | (a == 0) | (a.abs() == math.inf)).logical_not()
    ret = not_real.where(mag * not_real.where(math.nan, 0.0), (neg_base & b_odd).where(-mag, mag))
    # x**0, 1**y and (-1)**+-inf are 1 even for inf and nan
    one = (b == 0) | (a == 1) | ((a == -1) & (b.abs() == math.inf))
    return bad.where(one.where(1.0, math.nan), ret)

  @classmethod
  def _lower_pow(cls, x: UOp) -> UOp:
    """A float POW node of the tensor graph as `_float_pow`'s formula (the scheduler's "earliest rewrites"): the
    kernels compute the values they computed before POW was one node. Its nodes' call site is the POW's (the `**`'s
    line, as when the front end built the formula), not the frame realizing it that note_callsite would find."""
    with recorder.untraced():
      out = cls._of(x.src[0])._float_pow(cls._of(x.src[1])).uop
    if (site := recorder.callsite_of(x)) is not None:
      for u in toposort(out, gate=lambda y: y not in x.src):  # (not out: the scheduler finds the POW it stands for)
        if u is not out:
          u.__dict__.setdefault(recorder.CALLSITE_KEY, site)  # (the first maker keeps its own, as note_callsite)
    return out

  def maximum(self, y: Any | Scalar) -> Any:
    a, b = self._broadcasted(y, "maximum")
    if a.dtype == dtypes.bool:
      return a | b
    return a._alu(Ops.MAX, b)

  def minimum(self, y: Any | Scalar) -> Any:
    a, b = self._broadcasted(y, "minimum")
    if a.dtype == dtypes.bool:
      return a & b
    return a._flipped()._alu(Ops.MAX, b._flipped())._flipped()  # MAX propagates NaN, like numpy's minimum

  def clip(self, min_: Any | Scalar | None = None, max_: Any | Scalar | None = None) -> Any:
    if min_ is None and max_ is None:
      raise RuntimeError(f"Tensor.clip: give min_ or max_ (or both) to clip the tensor of shape {self.shape}")
    ret = self
    if min_ is not None:
      ret = ret.maximum(min_)
    if max_ is not None:
      ret = ret.minimum(max_)
    if not dtypes.is_float(ret.dtype) or self.dtype == dtypes.bool:
      return ret
    # the gradient as torch's clamp: 1 to self within the bounds, the bounds included (maximum's tie would share it)
    within = [c for c in ((self >= min_) if min_ is not None else None, (self <= max_) if max_ is not None else None)
              if c is not None]
    inside = within[0] if len(within) == 1 else within[0] & within[1]
    return inside.where(self, ret)

  def where(self, x: Any | Scalar, y: Any | Scalar) -> Any:
    """x where self is true, else y (self is the condition)."""
    T = type(self)
    for v in (x, y):
      if not isinstance(v, T) and not is_scalar(v):
        raise TypeError(f"Tensor.where: unsupported operand {type(v).__name__}")
    if not isinstance(x, T) and not isinstance(y, T):
      dt = least_upper_dtype(*(fitting_int(dtypes.from_py(py_value(v)), py_value(v), py_value(v), "Tensor.where")
                               for v in (x, y)))
      x_t, y_t = self._scalar(py_value(x), dt, "where"), self._scalar(py_value(y), dt, "where")
    else:
      x_t = x if isinstance(x, T) else self._scalar(py_value(x), y._scalar_dtype(py_value(x)), "where")
      y_t = y if isinstance(y, T) else self._scalar(py_value(y), x_t._scalar_dtype(py_value(y)), "where")
    check_same_device("where", self.uop, x_t.uop, y_t.uop)
    dt = least_upper_dtype(x_t.dtype, y_t.dtype)
    shape = broadcast_shape(self.shape, x_t.shape, y_t.shape, op="Tensor.where")
    c = self.cast(dtypes.bool)._broadcast_to(shape)
    return T(c.uop.alu(Ops.WHERE, x_t.cast(dt)._broadcast_to(shape).uop, y_t.cast(dt)._broadcast_to(shape).uop))

  # comparisons (bool results)
  def _cmp(self, op: Ops, y: Any | Scalar, name: str, reverse: bool = False) -> Any:
    a, b = self._broadcasted(y, name, reverse)
    return a._alu(op, b)

  def __lt__(self, y): return self._cmp(Ops.CMPLT, y, "lt")
  def __gt__(self, y): return self._cmp(Ops.CMPLT, y, "gt", reverse=True)
  def __le__(self, y): return self._cmp(Ops.CMPLT, y, "le") | self._cmp(Ops.CMPEQ, y, "le")
  def __ge__(self, y): return self._cmp(Ops.CMPLT, y, "ge", reverse=True) | self._cmp(Ops.CMPEQ, y, "ge")
  def __eq__(self, y): return self._cmp(Ops.CMPEQ, y, "eq")  # type: ignore[override]
  def __ne__(self, y): return self._cmp(Ops.CMPNE, y, "ne")  # type: ignore[override]

  # bitwise / logical
  def _bitop(self, op: Ops, y: Any | Scalar, name: str, reverse: bool = False) -> Any:
    if dtypes.is_int(self.dtype) and is_int(y):
      # a Python int takes the int tensor's dtype by wrapping, as tinygrad (int32 | 0xFFFFFFFF is -1): exact for
      # and/or/xor, whose result's bits in the dtype depend only on the operands' bits in it
      y = truncate(self.dtype, int(y))
    a, b = self._broadcasted(y, name, reverse)
    if dtypes.is_float(a.dtype):
      raise TypeError(f"Tensor.{name}: needs int or bool tensors, got {a.dtype}")
    return a._alu(op, b)

  def __and__(self, y): return self._bitop(Ops.AND, y, "and")
  def __rand__(self, y): return self._bitop(Ops.AND, y, "and", True)
  def __or__(self, y): return self._bitop(Ops.OR, y, "or")
  def __ror__(self, y): return self._bitop(Ops.OR, y, "or", True)
  def __xor__(self, y): return self._bitop(Ops.XOR, y, "xor")
  def __rxor__(self, y): return self._bitop(Ops.XOR, y, "xor", True)

  def logical_not(self) -> Any:
    return self.cast(dtypes.bool)._alu(Ops.CMPNE, type(self)(UOp.const(dtypes.bool, True))._broadcast_to(self.shape))

  def __invert__(self) -> Any:
    if self.dtype == dtypes.bool:
      return self.logical_not()
    if dtypes.is_float(self.dtype):
      raise TypeError(f"Tensor.invert: needs int or bool tensors, got {self.dtype}")
    return self ^ (-1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype))

  # python operators
  def __add__(self, y): return self.add(y)
  def __radd__(self, y): return self.add(y, True)
  def __sub__(self, y): return self.sub(y)
  def __rsub__(self, y): return self.sub(y, True)
  def __mul__(self, y): return self.mul(y)
  def __rmul__(self, y): return self.mul(y, True)
  def __truediv__(self, y): return self.div(y)
  def __rtruediv__(self, y): return self.div(y, True)
  def __floordiv__(self, y): return self.floordiv(y)
  def __rfloordiv__(self, y): return self.floordiv(y, True)
  def __mod__(self, y): return self.mod(y)
  def __rmod__(self, y): return self.mod(y, True)
  def __pow__(self, y): return self.pow(y)
  def __rpow__(self, y): return self.pow(y, True)
  def __matmul__(self, y): return self.matmul(y)
  def __rmatmul__(self, y): return type(self)(y).matmul(self) if not isinstance(y, type(self)) else y.matmul(self)
  def __neg__(self): return self.neg()
  def __pos__(self): return self
  def __abs__(self): return self.abs()

  # unary math
  def neg(self) -> Any:
    return self.logical_not() if self.dtype == dtypes.bool else self._alu(Ops.NEG)

  def exp2(self) -> Any:
    return self._float()._alu(Ops.EXP2)

  def log2(self) -> Any:
    return self._float()._alu(Ops.LOG2)

  def _via_float32(self, fn) -> Any:
    """fn(x) in float32 for a half x: constants and intermediates rounded to half cost several ulps."""
    x = self._float()
    return fn(x.float()).half() if x.dtype == dtypes.float16 else fn(x)

  def exp(self) -> Any:
    return self._via_float32(lambda x: (x * (1 / _LN2)).exp2())

  def log(self) -> Any:
    return self._via_float32(lambda x: x.log2() * _LN2)

  def sqrt(self) -> Any:
    return self._float()._alu(Ops.SQRT)

  def rsqrt(self) -> Any:
    return self.sqrt().reciprocal()

  def reciprocal(self) -> Any:
    return self._float()._alu(Ops.RECIP)

  def sin(self) -> Any:
    return _sin_cos(self._float(), cos=False)

  def cos(self) -> Any:
    return _sin_cos(self._float(), cos=True)

  def tan(self) -> Any:
    return self._via_float32(lambda x: x.sin() / x.cos())

  def square(self) -> Any:
    return self * self

  def trunc(self) -> Any:
    return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self

  def floor(self) -> Any:
    if not dtypes.is_float(self.dtype):
      return self
    t = self.trunc()
    return (self < t).where(t - 1, t)

  def ceil(self) -> Any:
    if not dtypes.is_float(self.dtype):
      return self
    t = self.trunc()
    return (self > t).where(t + 1, t)

  def abs(self) -> Any:
    if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype):
      return self
    ret = self._alu(Ops.MAX, self.neg())
    # MAX of 0.0 and -0.0 may give either: |-0.0| and |0.0| are 0.0
    return (self == 0).where(0.0, ret) if dtypes.is_float(self.dtype) else ret

  def sign(self) -> Any:
    if self.dtype == dtypes.bool:
      return self
    if dtypes.is_unsigned(self.dtype):
      return (self > 0).cast(self.dtype)
    ret = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
    return (self != self).where(self, ret) if dtypes.is_float(self.dtype) else ret  # sign(nan) is nan

  def relu(self) -> Any:
    # not maximum(0), whose tie at 0 shares the gradient: relu'(0) is 0 (torch, tinygrad); nan stays nan
    return self.maximum(0) if self.dtype == dtypes.bool else (self <= 0).where(0, self)

  def sigmoid(self) -> Any:
    # from e = exp(-|x|) <= 1: 1 / (1 + exp(-x)) overflowed below -88 (float32), and its gradient was inf * 0 = nan
    def fn(x: Any) -> Any:
      pos = x >= 0
      e = (pos.where(-x, x) * (1 / _LN2)).exp2()
      return pos.where(1 / (1 + e), e / (1 + e))
    return self._via_float32(fn)

  def tanh(self) -> Any:
    # tanh|x| = -m / (2 + m) with m = expm1(-2|x|) in (-1, 0]: 2 * sigmoid(2x) - 1 cancelled for small x (tanh(1e-30)
    # gave 0), and nothing overflows (expm1(2|x|) did past 44, a nan gradient). -|x| is a where, not abs, so that
    # its derivative at 0 is 1 and tanh'(0) = 1
    def fn(x: Any) -> Any:
      pos = x > 0
      m = _expm1(2.0 * pos.where(-x, x))
      mag = -m / (2.0 + m)
      return pos.where(mag, -mag)
    return self._via_float32(fn)

  def gelu(self, approximate: str = "tanh") -> Any:
    """The tanh approximation by default (tinygrad's gelu); approximate="none" is torch's exact x * Phi(x)."""
    x = self._float()
    if approximate == "none":
      return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())
    if approximate != "tanh":
      raise RuntimeError(f"Tensor.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())

  def leaky_relu(self, neg_slope: float = 0.01) -> Any:
    return (self > 0).where(self, self * neg_slope)  # the slope at 0 is neg_slope, as torch's

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
