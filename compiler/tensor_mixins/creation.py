"""Tensor constructors: full, zeros, ones, arange, eye, the host RNG's rand/randn/randint, linspace and the random
initializers (tinygrad's names and defaults)."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from compiler.device import default_device
from compiler.dtype import DType, dtypes
from compiler.realize import buffer_of_view, note_draw
from compiler.runtime.buffer import buffer_of
from compiler.tensor_mixins._args import (
  Scalar,
  check_shape,
  fitting_int,
  in_range,
  is_int,
  py_value,
  shape_arg,
  to_dtype,
)
from compiler.uop import Ops, UOp


def _dims(shape: tuple, name: str) -> tuple[int, ...]:
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
    shape = tuple(shape[0])
  if not all(is_int(s) and s >= 0 for s in shape):
    raise ValueError(f"Tensor.{name}: shape must be non-negative ints, got {shape!r}")
  return tuple(int(s) for s in shape)


def _fan_in(shape: tuple[int, ...], name: str) -> int:
  if not shape:
    raise ValueError(f"Tensor.{name}: needs at least one dim")
  return math.prod(shape[1:])


class CreationMixin:
  __slots__ = ()
  _rng: np.random.Generator = np.random.default_rng(0)  # the host RNG (manual_seed rebinds it on the class)

  # ---- creation
  @classmethod
  def full(cls, shape: Any, fill_value: Scalar, dtype: Any = None, requires_grad: bool | None = None,
           device: str | None = None) -> Any:
    shape = check_shape(shape_arg((shape,) if isinstance(shape, int) else tuple(shape), "Tensor.full"),
                         "Tensor.full")
    v = py_value(fill_value)
    dt = to_dtype(dtype) or fitting_int(dtypes.from_py(v), v, v, "Tensor.full")
    c = UOp.const(dt, in_range(v, dt, "Tensor.full"))
    if not shape:
      return cls(c)._on(device)._marked(requires_grad)
    return cls(UOp(Ops.RESHAPE, dt, (c,), (1,) * len(shape))).expand(shape)._on(device)._marked(requires_grad)

  def _on(self, device: str | None) -> Any:
    """Self on `device` (None: where it is; constants alone are on the default device until an op places them)."""
    return self if device is None else self.to(device)

  @classmethod
  def zeros(cls, *shape: Any, dtype: Any = None, requires_grad: bool | None = None, device: str | None = None) -> Any:
    return cls.full(shape_arg(shape, "Tensor.zeros"), 0, to_dtype(dtype) or dtypes.default_float, requires_grad,
                    device)

  @classmethod
  def ones(cls, *shape: Any, dtype: Any = None, requires_grad: bool | None = None, device: str | None = None) -> Any:
    return cls.full(shape_arg(shape, "Tensor.ones"), 1, to_dtype(dtype) or dtypes.default_float, requires_grad,
                    device)

  @classmethod
  def empty(cls, *shape: Any, dtype: Any = None, requires_grad: bool | None = None, device: str | None = None) -> Any:
    return cls.zeros(*shape, dtype=dtype, requires_grad=requires_grad, device=device)

  @classmethod
  def arange(cls, start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: Any = None,
             requires_grad: bool | None = None, device: str | None = None) -> Any:
    if stop is None:
      start, stop = 0, start
    start, stop, step = py_value(start), py_value(stop), py_value(step)
    if step == 0:
      raise ValueError("Tensor.arange: step must not be 0")
    is_float = any(isinstance(x, float) for x in (start, stop, step))
    n = max(0, math.ceil((stop - start) / step))
    last = start + (n - 1) * step if n else start
    dt = to_dtype(dtype) or (dtypes.default_float if is_float else
                             fitting_int(dtypes.default_int, min(start, last), max(start, last), "Tensor.arange"))
    for v in (start, last):  # both ends in range: the values between are too (and nothing huge is allocated)
      in_range(v, dt, "Tensor.arange")
    if is_float:
      return cls((start + np.arange(n) * step).astype(dt.np), dt, requires_grad, device=device)
    return cls((start + np.arange(n, dtype=np.int64) * step).astype(dt.np), dt, requires_grad, device=device)

  @classmethod
  def eye(cls, n: int, m: int | None = None, dtype: Any = None, requires_grad: bool | None = None,
          device: str | None = None) -> Any:
    m = n if m is None else m
    if n < 0 or m < 0:
      raise ValueError(f"Tensor.eye: negative size ({n}, {m})")
    dt = to_dtype(dtype) or dtypes.default_float
    eq = cls.arange(n, device=device).reshape(n, 1) == cls.arange(m, device=device).reshape(1, m)
    return eq.cast(dt)._marked(requires_grad)

  @classmethod
  def manual_seed(cls, seed: int = 0) -> None:
    cls._rng = np.random.default_rng(seed)

  @classmethod
  def _drawn(cls, draw: Callable[[], np.ndarray], dt: DType, requires_grad: bool | None,
             device: str | None = None) -> Any:
    """A tensor of the numbers `draw()` takes from the host RNG (cls._rng when called: manual_seed rebinds it);
    its host buffer is noted with the draw, so that a TinyJit replay draws new numbers into it as the function
    would; then copied to `device` (None: the default one) when that is not the CPU."""
    t = cls(draw(), dt, device="CPU")
    note_draw(buffer_of(buffer_of_view(t.uop)), draw)
    return t.to(device or default_device())._marked(requires_grad)

  @classmethod
  def rand(cls, *shape: Any, dtype: Any = None, requires_grad: bool | None = None, device: str | None = None) -> Any:
    """Uniform in [0, 1)."""
    shape = check_shape(shape_arg(shape, "Tensor.rand"), "Tensor.rand")
    dt = to_dtype(dtype) or dtypes.default_float
    return cls._drawn(lambda: cls._rng.random(shape, dtype=np.float64).astype(dt.np), dt, requires_grad, device)

  @classmethod
  def randn(cls, *shape: Any, dtype: Any = None, requires_grad: bool | None = None, device: str | None = None) -> Any:
    """Standard normal."""
    shape = check_shape(shape_arg(shape, "Tensor.randn"), "Tensor.randn")
    dt = to_dtype(dtype) or dtypes.default_float
    return cls._drawn(lambda: cls._rng.standard_normal(shape).astype(dt.np), dt, requires_grad, device)

  @classmethod
  def uniform(cls, *shape: Any, low: float = 0.0, high: float = 1.0, dtype: Any = None,
              requires_grad: bool | None = None, device: str | None = None) -> Any:
    return (cls.rand(*shape, dtype=dtype, device=device) * (high - low) + low)._marked(requires_grad)

  @classmethod
  def randint(cls, *shape: Any, low: int = 0, high: int = 10, dtype: Any = None,
              requires_grad: bool | None = None, device: str | None = None) -> Any:
    shape = check_shape(shape_arg(shape, "Tensor.randint"), "Tensor.randint")
    dt = to_dtype(dtype) or dtypes.default_int
    return cls._drawn(lambda: cls._rng.integers(low, high, shape).astype(dt.np), dt, requires_grad, device)

  def full_like(self, fill_value: Scalar, dtype: Any = None, requires_grad: bool | None = None) -> Any:
    return self.full(self.shape, fill_value, to_dtype(dtype) or self.dtype, requires_grad, self.device)

  def zeros_like(self, dtype: Any = None, requires_grad: bool | None = None) -> Any:
    return self.full_like(0, dtype, requires_grad)

  def ones_like(self, dtype: Any = None, requires_grad: bool | None = None) -> Any:
    return self.full_like(1, dtype, requires_grad)

  def rand_like(self, dtype: Any = None, requires_grad: bool | None = None) -> Any:
    return self.rand(self.shape, dtype=to_dtype(dtype) or (self.dtype if dtypes.is_float(self.dtype) else None),
                     requires_grad=requires_grad, device=self.device)

  def randn_like(self, dtype: Any = None, requires_grad: bool | None = None) -> Any:
    return self.randn(self.shape, dtype=to_dtype(dtype) or (self.dtype if dtypes.is_float(self.dtype) else None),
                      requires_grad=requires_grad, device=self.device)

  def _marked(self, requires_grad: bool | None) -> Any:
    """self with requires_grad set where a creation function was given one (tinygrad passes it to Tensor())."""
    return self if requires_grad is None else self.requires_grad_(requires_grad)

  @classmethod
  def linspace(cls, start: float, stop: float, steps: int, dtype: Any = None,
               requires_grad: bool | None = None, device: str | None = None) -> Any:
    """steps evenly spaced values from start to stop, both included (the last is stop exactly, as numpy)."""
    if not isinstance(steps, (int, np.integer)) or steps < 0:
      raise ValueError(f"Tensor.linspace: steps must be a non-negative int, got {steps!r}")
    dt = cls.zeros(0, dtype=dtype).dtype if dtype is not None else dtypes.default_float
    if dt == dtypes.bool:  # as tinygrad: evenly spaced bools mean nothing
      raise ValueError(f"Tensor.linspace: dtype bool is not supported (linspace({start}, {stop}, {steps}))")
    return cls._linspace(start, stop, int(steps), dt, device)._marked(requires_grad)

  @classmethod
  def _linspace(cls, start: float, stop: float, steps: int, dt: Any, device: str | None) -> Any:
    if steps == 0:
      return cls.zeros(0, dtype=dt, device=device)
    if steps == 1:
      return cls.full((1,), start, dtypes.default_float, device=device).cast(dt)
    step = (stop - start) / (steps - 1)
    ar = cls.arange(steps, dtype=dtypes.int32, device=device)
    # from whichever end is nearer, so both ends are exact and the rounding is symmetric (as torch)
    lo = start + ar.cast(dtypes.default_float) * step
    hi = stop - (steps - 1 - ar).cast(dtypes.default_float) * step
    return (ar < steps // 2).where(lo, hi).cast(dt)

  @classmethod
  def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, dtype: Any = None,
             requires_grad: bool | None = None, device: str | None = None) -> Any:
    return (cls.randn(*_dims(shape, "normal"), dtype=dtype, device=device) * std + mean)._marked(requires_grad)

  @classmethod
  def scaled_uniform(cls, *shape: Any, dtype: Any = None, requires_grad: bool | None = None,
                     device: str | None = None) -> Any:
    """Uniform in [-1, 1) over sqrt(numel)."""
    s = _dims(shape, "scaled_uniform")
    return (cls.uniform(*s, low=-1.0, high=1.0, dtype=dtype, device=device) * (math.prod(s) ** -0.5))._marked(
      requires_grad)

  @classmethod
  def glorot_uniform(cls, *shape: Any, dtype: Any = None, requires_grad: bool | None = None,
                     device: str | None = None) -> Any:
    """Uniform in +-sqrt(6 / (fan_in + fan_out)) (fan_out = shape[0], fan_in = the rest, as tinygrad)."""
    s = _dims(shape, "glorot_uniform")
    bound = math.sqrt(6 / (s[0] + _fan_in(s, "glorot_uniform"))) if s and (s[0] + _fan_in(s, "")) else 0.0
    return cls.uniform(*s, low=-bound, high=bound, dtype=dtype, requires_grad=requires_grad, device=device)

  @classmethod
  def kaiming_uniform(cls, *shape: Any, a: float = 0.01, dtype: Any = None, requires_grad: bool | None = None,
                      device: str | None = None) -> Any:
    """Uniform in +-sqrt(3) * gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2)) (torch's kaiming_uniform_)."""
    s = _dims(shape, "kaiming_uniform")
    fan = _fan_in(s, "kaiming_uniform")
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan) if fan else 0.0
    return cls.uniform(*s, low=-bound, high=bound, dtype=dtype, requires_grad=requires_grad, device=device)

  @classmethod
  def kaiming_normal(cls, *shape: Any, a: float = 0.01, dtype: Any = None, requires_grad: bool | None = None,
                     device: str | None = None) -> Any:
    """Normal with std gain / sqrt(fan_in)."""
    s = _dims(shape, "kaiming_normal")
    fan = _fan_in(s, "kaiming_normal")
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(fan) if fan else 0.0
    return cls.normal(*s, mean=0.0, std=std, dtype=dtype, requires_grad=requires_grad, device=device)
