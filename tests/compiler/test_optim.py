"""Optimizers against a numpy implementation of the same update over several steps."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import Tensor, nn
from compiler.runtime.buffer import buffer_of
from compiler.uop import Ops


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


def _buffer(t: Tensor):
  """The Buffer a realized tensor reads."""
  u = t.uop
  while u.op is Ops.RESHAPE:
    u = u.src[0]
  return buffer_of(u)


def _np_mlp_grads(x, y, ps):
  """d/dp of mean((relu(x @ w1 + b1) @ w2 + b2 - y)**2), in float64."""
  w1, b1, w2, b2 = ps
  h = x @ w1 + b1
  a = np.maximum(h, 0)
  err = a @ w2 + b2 - y
  dz = 2 * err / err.size
  da = dz @ w2.T * (h > 0)
  return [x.T @ da, da.sum(0), a.T @ dz, dz.sum(0)]


@pytest.mark.parametrize("backend", ["interp", "llvm"])
def test_adam_step_is_one_fused_kernel_per_parameter(monkeypatch, backend):
  """Issue 15: the step's kernels (forward, backward, update) are at most one per parameter plus a few; each
  parameter's gradient, m, v and weight are stored by one kernel, the weights in their own buffers."""
  monkeypatch.setenv("BACKEND", backend)
  rng = np.random.default_rng(1)
  x_np, y_np = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
  init = [rng.standard_normal(s).astype(np.float32) for s in [(6, 5), (5,), (5, 3), (3,)]]
  ps = [Tensor(a.copy(), requires_grad=True) for a in init]
  opt = nn.optim.Adam(ps, lr=0.01)
  x, y = Tensor(x_np), Tensor(y_np)
  bufs = [_buffer(p) for p in ps]
  want = [a.astype(np.float64) for a in init]
  m, v = [np.zeros_like(w) for w in want], [np.zeros_like(w) for w in want]
  for t in range(1, 4):
    opt.zero_grad()
    ((x @ ps[0] + ps[1]).relu() @ ps[2] + ps[3] - y).square().mean().backward()
    outs = opt.schedule_step()
    sched = outs[0].schedule(*outs[1:])
    writers = [si for si in sched for b in bufs if b in si.bufs[:len(si.ast.src)]]
    assert len(writers) == len(ps) and len(set(map(id, writers))) == len(ps)
    for si in writers:
      assert len(si.ast.src) == 4  # the gradient, m, v and the weight
    # + the 3 kernels of the hidden layer's forward and backward (h, the output error, da) and one for b1**t, b2**t
    assert len(sched) <= len(ps) + 4
    Tensor.realize(*outs)
    for i, g in enumerate(_np_mlp_grads(x_np.astype(np.float64), y_np, want)):
      m[i] = 0.9 * m[i] + 0.1 * g
      v[i] = 0.999 * v[i] + 0.001 * g * g
      want[i] = want[i] - 0.01 * (m[i] / (1 - 0.9 ** t)) / (np.sqrt(v[i] / (1 - 0.999 ** t)) + 1e-8)
    for p, w in zip(ps, want):
      np.testing.assert_allclose(p.numpy(), w, rtol=2e-5, atol=2e-6)
    assert [_buffer(p) for p in ps] == bufs  # updated in place


class _MnistShaped:
  """beautiful_mnist's model, scaled down: convolutions, BatchNorm, max pooling and a Linear as a layer list."""

  def __init__(self):
    self.layers = [nn.Conv2d(1, 4, 3), Tensor.relu, nn.Conv2d(4, 4, 3), Tensor.relu, nn.BatchNorm(4),
                   Tensor.max_pool2d, lambda x: x.flatten(1), nn.Linear(4 * 4 * 4, 10)]

  def __call__(self, x: Tensor) -> Tensor:
    return x.sequential(self.layers)


def test_beautiful_mnist_shaped_training_lowers_the_loss():
  # nn.optim.Adam(nn.state.get_parameters(model)) on a model with a BatchNorm: its int32 num_batches_tracked is a
  # buffer (updated with the step), not a parameter (requires_grad_ on it raised)
  Tensor.manual_seed(0)
  rng = np.random.default_rng(5)
  model = _MnistShaped()
  opt = nn.optim.Adam(nn.state.get_parameters(model), lr=0.01)
  bn = model.layers[4]
  assert id(bn.num_batches_tracked) in map(id, opt.buffers) and id(bn.num_batches_tracked) not in map(id, opt.params)
  x, y = Tensor(rng.standard_normal((8, 1, 12, 12)).astype(np.float32)), Tensor(rng.integers(0, 10, 8).astype(np.int32))
  losses = []
  with Tensor.train():
    for _ in range(6):
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y).backward()
      opt.step()
      losses.append(loss.item())
  assert all(np.isfinite(losses)) and losses[-1] < 0.8 * losses[0], losses
  assert bn.num_batches_tracked.numpy().tolist() == [6]


@pytest.mark.parametrize("make", [lambda ps: nn.optim.SGD(ps, lr=0.01), lambda ps: nn.optim.SGD(ps, 0.01, 0.9),
                                  lambda ps: nn.optim.Adam(ps), lambda ps: nn.optim.AdamW(ps)])
def test_every_optimizer_takes_a_batchnorm_model(make):
  bn = nn.BatchNorm(3)
  opt = make(nn.state.get_parameters(bn))
  assert set(map(id, opt.params)) == {id(bn.weight), id(bn.bias)}
  assert {id(t) for t in opt.buffers} == {id(bn.running_mean), id(bn.running_var), id(bn.num_batches_tracked)}
  x = Tensor(np.random.default_rng(2).standard_normal((4, 3, 2, 2)).astype(np.float32))
  with Tensor.train():
    opt.zero_grad()
    (bn(x) + Tensor(np.arange(3, dtype=np.float32).reshape(1, 3, 1, 1))).square().sum().backward()
    opt.step()
  assert bn.num_batches_tracked.numpy().tolist() == [1] and not np.allclose(bn.weight.numpy(), 1)
