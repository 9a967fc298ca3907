"""Optimizers (tinygrad's names and updates): SGD with momentum / nesterov / weight decay, Adam, AdamW.

`step()` builds every parameter's update (and the optimizer's state) lazily and realizes them in one schedule, so the
updates of all parameters are scheduled together."""
from __future__ import annotations

import numpy as np

from compiler.dtype import dtypes
from compiler.tensor import Tensor


def _zeros_like(t: Tensor) -> Tensor:
  """Optimizer state in a buffer of its own (equal realized graphs share one; this state is written in place)."""
  return Tensor(np.zeros(t.shape, t.dtype.np), dtype=t.dtype, device=t.device).realize()  # (on t's device)


class Optimizer:
  """Holds the parameters (those that require grad) and the buffers realized along with them."""

  def __init__(self, params: list[Tensor], lr: float):
    params = list(dict.fromkeys(params))  # a tensor listed twice is updated once
    for p in params:
      # unmarked float tensors become parameters (tinygrad); an unmarked int or bool one (a counter, a mask) can't
      # have a gradient, so it stays a buffer, realized with the step
      if p.requires_grad is None and dtypes.is_float(p.dtype):
        p.requires_grad_(True)
    self.params = [p for p in params if p.requires_grad]
    self.buffers = [p for p in params if not p.requires_grad]
    if not self.params:
      raise ValueError("Optimizer: no parameter requires grad")
    self.lr = float(lr)

  def zero_grad(self) -> None:
    for p in self.params:
      p.grad = None

  def step(self) -> None:
    """Update every parameter from its .grad, in one schedule."""
    Tensor.realize(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    """Assign the updates lazily; returns the tensors to realize."""
    missing = [p.shape for p in self.params if p.grad is None]
    if missing:
      raise RuntimeError(f"{type(self).__name__}.step: no .grad for parameters of shapes {missing} (call backward "
                         "first)")
    # the gradients are realized too: their graphs read the weights that the step overwrites in place
    return self._step() + self.buffers + [p.grad for p in self.params]

  def _step(self) -> list[Tensor]:
    raise NotImplementedError


class SGD(Optimizer):
  """p -= lr * g, g = grad + weight_decay * p; with momentum b = momentum * b + g, and g = b (or g + momentum * b,
  nesterov) — torch's update (its first b is g, as here from b = 0)."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
               nesterov: bool = False):
    super().__init__(params, lr)
    if nesterov and momentum <= 0:
      raise ValueError("SGD: nesterov needs a momentum > 0")
    self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
    self.b = [_zeros_like(p) for p in self.params] if momentum else []

  def _step(self) -> list[Tensor]:
    for i, p in enumerate(self.params):
      g = p.grad.detach()
      if self.weight_decay:
        g = g + self.weight_decay * p.detach()
      if self.momentum:
        self.b[i].assign(self.momentum * self.b[i] + g)
        g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
      p.assign(p.detach() - self.lr * g)
    return self.params + self.b


class AdamW(Optimizer):
  """Adam with decoupled weight decay: p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 0.01):
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.weight_decay = b1, b2, eps, weight_decay
    self.m = [_zeros_like(p) for p in self.params]
    self.v = [_zeros_like(p) for p in self.params]
    # b1**t and b2**t as tensors: as Python numbers each step would compile new kernels
    first = self.params[0]
    self.b1_t = Tensor(np.ones(1, first.dtype.np), dtype=first.dtype, device=first.device).realize()
    self.b2_t = Tensor(np.ones(1, first.dtype.np), dtype=first.dtype, device=first.device).realize()

  def _step(self) -> list[Tensor]:
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    for p, m, v in zip(self.params, self.m, self.v):
      g = p.grad.detach()
      m.assign(self.b1 * m + (1 - self.b1) * g)
      v.assign(self.b2 * v + (1 - self.b2) * g * g)
      m_hat = m / (1 - self.b1_t.cast(p.dtype).reshape(()))
      v_hat = v / (1 - self.b2_t.cast(p.dtype).reshape(()))
      up = m_hat / (v_hat.sqrt() + self.eps)
      if self.weight_decay:
        up = up + self.weight_decay * p.detach()
      p.assign(p.detach() - self.lr * up)
    return self.params + self.m + self.v + [self.b1_t, self.b2_t]


class Adam(AdamW):
  """Adam: AdamW without weight decay."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    super().__init__(params, lr, b1, b2, eps, weight_decay=0.0)
