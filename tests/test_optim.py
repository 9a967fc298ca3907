"""Optimizers against a numpy implementation of the same update over several steps."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import Tensor, nn


@pytest.fixture(autouse=True)
def _interp(monkeypatch):
  monkeypatch.setenv("BACKEND", "interp")


RNG = np.random.default_rng(0)
X = RNG.standard_normal((6, 4)).astype(np.float32)
Y = RNG.standard_normal((6, 2)).astype(np.float32)
W0 = RNG.standard_normal((4, 2)).astype(np.float32)
B0 = RNG.standard_normal((2,)).astype(np.float32)


def _np_grads(w, b):
  err = X @ w + b - Y
  return 2 * X.T @ err / err.size, 2 * err.sum(0) / err.size


def _np_sgd(steps, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
  ps = [W0.astype(np.float64), B0.astype(np.float64)]
  bufs = [np.zeros_like(p) for p in ps]
  for _ in range(steps):
    for i, g in enumerate(_np_grads(*ps)):
      g = g + weight_decay * ps[i]
      if momentum:
        bufs[i] = momentum * bufs[i] + g
        g = g + momentum * bufs[i] if nesterov else bufs[i]
      ps[i] = ps[i] - lr * g
  return ps


def _np_adamw(steps, lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0):
  ps = [W0.astype(np.float64), B0.astype(np.float64)]
  m, v = [np.zeros_like(p) for p in ps], [np.zeros_like(p) for p in ps]
  for t in range(1, steps + 1):
    for i, g in enumerate(_np_grads(*ps)):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      mh, vh = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
      ps[i] = ps[i] - lr * (mh / (np.sqrt(vh) + eps) + weight_decay * ps[i])
  return ps


def _run(make_opt, steps):
  w, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
  opt = make_opt([w, b])
  x, y = Tensor(X), Tensor(Y)
  for _ in range(steps):
    opt.zero_grad()
    loss = (x @ w + b - y).square().mean()
    loss.backward()
    opt.step()
  return w.numpy(), b.numpy()


@pytest.mark.parametrize("kw", [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True},
                                {"momentum": 0.5, "weight_decay": 0.1}, {"weight_decay": 0.2}])
def test_sgd_matches_numpy(kw):
  got = _run(lambda ps: nn.optim.SGD(ps, lr=0.05, **kw), 5)
  for g, want in zip(got, _np_sgd(5, 0.05, **kw)):
    np.testing.assert_allclose(g, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name,kw", [("Adam", {}), ("AdamW", {"weight_decay": 0.1}), ("Adam", {"b1": 0.8, "b2": 0.9})])
def test_adam_matches_numpy(name, kw):
  got = _run(lambda ps: getattr(nn.optim, name)(ps, lr=0.01, **kw), 5)
  for g, want in zip(got, _np_adamw(5, 0.01, **kw)):
    np.testing.assert_allclose(g, want, rtol=2e-5, atol=2e-6)


def test_step_needs_grads_and_zero_grad_clears_them():
  w = Tensor(W0.copy(), requires_grad=True)
  opt = nn.optim.SGD([w], lr=0.1)
  with pytest.raises(RuntimeError, match="backward"):
    opt.step()
  (Tensor(X) @ w).sum().backward()
  assert w.grad is not None
  opt.zero_grad()
  assert w.grad is None
  with pytest.raises(ValueError, match="nesterov"):
    nn.optim.SGD([w], nesterov=True)


def test_optimizer_marks_params_and_keeps_buffers():
  p, frozen = Tensor(W0.copy()), Tensor(B0.copy()).requires_grad_(False)
  opt = nn.optim.Adam([p, frozen])
  assert p.requires_grad is True and opt.params == [p] and opt.buffers == [frozen]
