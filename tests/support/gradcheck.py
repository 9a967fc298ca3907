"""Gradient checks shared by the gradient and nn tests: the gradient rewrite against central finite differences."""
from __future__ import annotations

from typing import Callable

import numpy as np

from compiler.tensor import Tensor


def input_array(rng: np.random.Generator, shape: tuple[int, ...], kind: str = "any") -> np.ndarray:
  """float64 test data: `any` normal, `pos` in [0.5, 2.5), `away0` at least 0.3 from zero (kinks, poles)."""
  x = np.asarray(rng.standard_normal(shape))
  if kind == "pos":
    return np.asarray(rng.random(shape) * 2 + 0.5)
  if kind == "away0":
    return np.asarray(np.sign(x + (x == 0)) * (np.abs(x) + 0.3))
  return x


def check_gradient(fn: Callable[..., Tensor], *arrays: np.ndarray, rng: np.random.Generator,
                   directions: int = 3, h: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-7) -> list[np.ndarray]:
  """The gradients of sum(fn(*arrays) * w) for a random w, checked against central differences along random
  directions (all perturbed evaluations in one schedule); returns the gradients."""
  ts = [Tensor(a, requires_grad=True) for a in arrays]
  out = fn(*ts)
  w = np.asarray(rng.standard_normal(out.shape))
  grads = (out * Tensor(w)).sum().gradient(*ts)
  Tensor.realize(*grads)
  got = [g.numpy() for g in grads]
  for g, a in zip(got, arrays):
    assert g.shape == a.shape and g.dtype == a.dtype, (g.shape, a.shape, g.dtype)
  dirs = [[np.asarray(rng.standard_normal(a.shape)) for a in arrays] for _ in range(directions)]
  evals = [(fn(*(Tensor(np.asarray(a + sign * h * d)) for a, d in zip(arrays, v))) * Tensor(w)).sum()
           for v in dirs for sign in (1, -1)]
  Tensor.realize(*evals)
  vals = [e.numpy() for e in evals]
  for k, v in enumerate(dirs):
    fd = (vals[2 * k] - vals[2 * k + 1]) / (2 * h)
    analytic = sum(float((g * d).sum()) for g, d in zip(got, v))
    np.testing.assert_allclose(analytic, fd, rtol=rtol, atol=atol + 1e-6 * abs(fd))
  return got
