"""Tensor constructors: linspace and the random initializers (tinygrad's names and defaults)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from compiler.dtype import dtypes


def _dims(shape: tuple, name: str) -> tuple[int, ...]:
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
    shape = tuple(shape[0])
  if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in shape):
    raise ValueError(f"Tensor.{name}: shape must be non-negative ints, got {shape!r}")
  return tuple(int(s) for s in shape)


def _fan_in(shape: tuple[int, ...], name: str) -> int:
  if not shape:
    raise ValueError(f"Tensor.{name}: needs at least one dim")
  return math.prod(shape[1:])


class CreationMixin:
  __slots__ = ()

  def _marked(self, requires_grad: bool | None) -> Any:
    """self with requires_grad set where a creation function was given one (tinygrad passes it to Tensor())."""
    return self if requires_grad is None else self.requires_grad_(requires_grad)

  @classmethod
  def linspace(cls, start: float, stop: float, steps: int, dtype: Any = None,
               requires_grad: bool | None = None) -> Any:
    """steps evenly spaced values from start to stop, both included (the last is stop exactly, as numpy)."""
    if not isinstance(steps, (int, np.integer)) or steps < 0:
      raise ValueError(f"Tensor.linspace: steps must be a non-negative int, got {steps!r}")
    dt = cls.zeros(0, dtype=dtype).dtype if dtype is not None else dtypes.default_float
    if dt == dtypes.bool:  # as tinygrad: evenly spaced bools mean nothing
      raise ValueError(f"Tensor.linspace: dtype bool is not supported (linspace({start}, {stop}, {steps}))")
    return cls._linspace(start, stop, int(steps), dt)._marked(requires_grad)

  @classmethod
  def _linspace(cls, start: float, stop: float, steps: int, dt: Any) -> Any:
    if steps == 0:
      return cls.zeros(0, dtype=dt)
    if steps == 1:
      return cls.full((1,), start, dtypes.default_float).cast(dt)
    step = (stop - start) / (steps - 1)
    ar = cls.arange(steps, dtype=dtypes.int32)
    # from whichever end is nearer, so both ends are exact and the rounding is symmetric (as torch)
    lo = start + ar.cast(dtypes.default_float) * step
    hi = stop - (steps - 1 - ar).cast(dtypes.default_float) * step
    return (ar < steps // 2).where(lo, hi).cast(dt)

  @classmethod
  def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, dtype: Any = None,
             requires_grad: bool | None = None) -> Any:
    return (cls.randn(*_dims(shape, "normal"), dtype=dtype) * std + mean)._marked(requires_grad)

  @classmethod
  def scaled_uniform(cls, *shape: Any, dtype: Any = None, requires_grad: bool | None = None) -> Any:
    """Uniform in [-1, 1) over sqrt(numel)."""
    s = _dims(shape, "scaled_uniform")
    return (cls.uniform(*s, low=-1.0, high=1.0, dtype=dtype) * (math.prod(s) ** -0.5))._marked(requires_grad)

  @classmethod
  def glorot_uniform(cls, *shape: Any, dtype: Any = None, requires_grad: bool | None = None) -> Any:
    """Uniform in +-sqrt(6 / (fan_in + fan_out)) (fan_out = shape[0], fan_in = the rest, as tinygrad)."""
    s = _dims(shape, "glorot_uniform")
    bound = math.sqrt(6 / (s[0] + _fan_in(s, "glorot_uniform"))) if s and (s[0] + _fan_in(s, "")) else 0.0
    return cls.uniform(*s, low=-bound, high=bound, dtype=dtype, requires_grad=requires_grad)

  @classmethod
  def kaiming_uniform(cls, *shape: Any, a: float = 0.01, dtype: Any = None, requires_grad: bool | None = None) -> Any:
    """Uniform in +-sqrt(3) * gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2)) (torch's kaiming_uniform_)."""
    s = _dims(shape, "kaiming_uniform")
    fan = _fan_in(s, "kaiming_uniform")
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan) if fan else 0.0
    return cls.uniform(*s, low=-bound, high=bound, dtype=dtype, requires_grad=requires_grad)

  @classmethod
  def kaiming_normal(cls, *shape: Any, a: float = 0.01, dtype: Any = None, requires_grad: bool | None = None) -> Any:
    """Normal with std gain / sqrt(fan_in)."""
    s = _dims(shape, "kaiming_normal")
    fan = _fan_in(s, "kaiming_normal")
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan) if fan else 0.0
    return cls.normal(*s, mean=0.0, std=std, dtype=dtype, requires_grad=requires_grad)
