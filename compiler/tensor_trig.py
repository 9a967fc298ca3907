"""sin and cos of any float: an exact reduction modulo pi/2 (Payne-Hanek style, in float64 Tensor ops), then the
SIN op on |angle| <= pi/4 only, so no backend has to reduce a large argument.

x * 2/pi is summed from products of x with 26-bit pieces of 2/pi: each product is exact in float64 (a float32
significand has 24 bits) and so is its remainder modulo 4, so the pieces whose weight is a multiple of 4 vanish
exactly and the fraction keeps all its bits however large x is. The remainders are added with error-free sums
(TwoSum: adds only, which the LLVM renderer's `contract` flag leaves alone)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from compiler.dtype import dtypes

if TYPE_CHECKING:
  from compiler.tensor import Tensor

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


def _quarter_turns(ax: Tensor, parts: list[Tensor]) -> tuple[Tensor, Tensor]:
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


def _split_f32(x: Tensor) -> list[Tensor]:
  """float64 x as three float32-representable parts (exact while |x| is inside float32's normal range)."""
  x1 = x.cast(dtypes.float32).cast(dtypes.float64)
  r = x - x1
  x2 = r.cast(dtypes.float32).cast(dtypes.float64)
  return [x1, x2, r - x2]


def sin_cos(x: Tensor, cos: bool) -> Tensor:
  """sin(x) or cos(x) for a float tensor, accurate over the whole range of float16/float32 (float64: |x| < 2**128,
  beyond which the backend's SIN reduces)."""
  from compiler.uop import Ops
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
