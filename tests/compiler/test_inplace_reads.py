"""A lazy value means what it meant when it was built: an in-place write (assign, an optimizer's step) never changes a
value built before it; backward() fills .grad without an optimizer; random numbers drawn inside a TinyJit advance."""
from __future__ import annotations

import numpy as np
import pytest

import compiler.tensor as tensor_mod
from compiler import Tensor, TinyJit, nn


@pytest.fixture
def kernels_run(monkeypatch):
  """The number of kernels each schedule Tensor.realize runs, in order."""
  counts: list[int] = []
  run = tensor_mod.run_schedule

  def counting(schedule, *args, **kwargs):
    counts.append(len(schedule))
    return run(schedule, *args, **kwargs)
  monkeypatch.setattr(tensor_mod, "run_schedule", counting)
  return counts


def _f32(*values) -> Tensor:
  return Tensor(np.array(values, np.float32)).realize()


# ---- assign


def test_a_reader_built_before_an_assign_reads_the_old_value(backend):
  a = _f32(1.0, 2.0)
  b = a * 3
  a.assign(_f32(5.0, 6.0)).realize()
  np.testing.assert_array_equal(b.numpy(), [3.0, 6.0])
  np.testing.assert_array_equal(a.numpy(), [5.0, 6.0])


def test_a_chain_of_assigns_each_reader_reads_the_value_of_its_time(backend):
  a = _f32(1.0, 2.0)
  before = a * 3
  a.assign(_f32(5.0, 6.0)).realize()
  middle = a * 3  # built between the two writes: the middle value
  a.assign(a + 10).realize()
  reader_of_reader = middle + 1
  a.assign(a * 2).realize()
  after = a * 3
  np.testing.assert_array_equal(before.numpy(), [3.0, 6.0])
  np.testing.assert_array_equal(middle.numpy(), [15.0, 18.0])
  np.testing.assert_array_equal(reader_of_reader.numpy(), [16.0, 19.0])
  np.testing.assert_array_equal(after.numpy(), [90.0, 96.0])
  np.testing.assert_array_equal(a.numpy(), [30.0, 32.0])


def test_a_reader_of_a_reader_and_of_a_realized_reader(backend):
  a = _f32(1.0, 2.0)
  b = a * 3
  c = b + 1
  d = (a - 1).realize() * 2  # a realized node read by a lazy one: its buffer is not overwritten
  a.assign(_f32(7.0, 7.0)).realize()
  np.testing.assert_array_equal(c.numpy(), [4.0, 7.0])
  np.testing.assert_array_equal(b.numpy(), [3.0, 6.0])
  np.testing.assert_array_equal(d.numpy(), [0.0, 2.0])


def test_a_reader_built_after_the_assign_reads_the_new_value_and_the_assign_runs_once(backend):
  a = _f32(1.0, 2.0)
  a.assign(a * 2)
  b = a + 1  # reads the assign: the new value
  np.testing.assert_array_equal(b.numpy(), [3.0, 5.0])
  np.testing.assert_array_equal(a.numpy(), [2.0, 4.0])  # (ran inside b's realize: not a second time)
  a.assign(a * 2)
  c = a + 1
  a.realize()
  np.testing.assert_array_equal(c.numpy(), [5.0, 9.0])
  np.testing.assert_array_equal(a.numpy(), [4.0, 8.0])


def test_a_reader_of_a_value_realized_into_the_overwritten_buffer(backend):
  a = _f32(1.0, 2.0)
  a.assign(a + 1)
  b = a * 10  # reads the first assign, realized below into a's buffer, which the second assign overwrites
  a.realize()
  a.assign(a * 0).realize()
  np.testing.assert_array_equal(b.numpy(), [20.0, 30.0])
  np.testing.assert_array_equal(a.numpy(), [0.0, 0.0])


def test_no_reader_left_no_extra_kernel(kernels_run):
  a = _f32(1.0, 2.0)
  b = a * 3
  del b
  a.assign(a + 1).realize()
  assert kernels_run == [1]
  b = a * 3
  kernels_run.clear()
  a.assign(a + 1).realize()
  assert kernels_run == [2]  # the reader, computed first, in the same schedule
  np.testing.assert_array_equal(b.numpy(), [6.0, 9.0])


# ---- optimizers

OPTIMIZERS = {
  "sgd": lambda ps: nn.optim.SGD(ps, lr=0.5),
  "sgd_momentum": lambda ps: nn.optim.SGD(ps, lr=0.1, momentum=0.9),
  "sgd_nesterov_wd": lambda ps: nn.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1),
  "adam": lambda ps: nn.optim.Adam(ps, lr=0.1),
  "adamw": lambda ps: nn.optim.AdamW(ps, lr=0.1, weight_decay=0.1),
}

RNG = np.random.default_rng(27)
X = RNG.standard_normal((6, 3)).astype(np.float32)
Y = RNG.standard_normal((6, 2)).astype(np.float32)
W0 = RNG.standard_normal((3, 2)).astype(np.float32)
B0 = RNG.standard_normal(2).astype(np.float32)


def _loss64(w: np.ndarray, b: np.ndarray) -> float:
  """The model's loss at these weights, in float64."""
  d = X.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64) - Y
  return float((d * d).mean())


def _loss(w: Tensor, b: Tensor) -> Tensor:
  d = Tensor(X) @ w + b - Tensor(Y)
  return (d * d).mean()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_loss_read_after_the_step_is_the_loss_before_it(name, backend):
  w, b = Tensor(W0.copy()), Tensor(B0.copy())
  opt = OPTIMIZERS[name]([w, b])
  for _ in range(3):
    w_before, b_before = w.numpy().copy(), b.numpy().copy()
    opt.zero_grad()
    loss = _loss(w, b)
    loss.backward()
    opt.step()
    got = loss.item()
    assert not np.allclose(w.numpy(), w_before)  # the step did write the weights
    assert got == pytest.approx(_loss64(w_before, b_before), rel=1e-5)
    assert loss.item() == got  # and it stays


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_step_with_the_loss_alive_updates_the_weights_as_one_without(name):
  def train(keep: bool) -> tuple[list[float], np.ndarray, np.ndarray]:
    w, b = Tensor(W0.copy()), Tensor(B0.copy())
    opt = OPTIMIZERS[name]([w, b])
    losses = []
    for _ in range(3):
      opt.zero_grad()
      loss = _loss(w, b)
      loss.backward()
      if keep:
        opt.step()
        losses.append(loss.item())
      else:
        losses.append(_loss64(w.numpy(), b.numpy()))
        del loss
        opt.step()
    return losses, w.numpy(), b.numpy()
  kept, dropped = train(True), train(False)
  np.testing.assert_allclose(kept[0], dropped[0], rtol=1e-5)
  np.testing.assert_array_equal(kept[1], dropped[1])
  np.testing.assert_array_equal(kept[2], dropped[2])


def test_a_step_computes_the_loss_in_its_own_schedule_and_nothing_when_no_reader_lives(kernels_run):
  w, b = Tensor(W0.copy()), Tensor(B0.copy())
  opt = nn.optim.Adam([w, b], lr=0.1)
  opt.zero_grad()
  loss = _loss(w, b)
  loss.backward()
  outs = opt.schedule_step()
  together = len(Tensor.schedule(loss, *outs))
  alone = len(Tensor.schedule(*outs))
  assert together > alone
  Tensor.realize(*outs)  # what opt.step() does
  assert kernels_run == [together]  # the loss's kernels join the step's schedule: no more than realizing both
  opt.zero_grad()
  loss = _loss(w, b)
  loss.backward()
  outs = opt.schedule_step()
  alone = len(Tensor.schedule(*outs))
  del loss  # no reader left: the step alone
  kernels_run.clear()
  Tensor.realize(*outs)
  assert kernels_run == [alone]


def test_jitted_step_returns_the_loss_of_the_weights_before_it(backend):
  w, b = Tensor(W0.copy()), Tensor(B0.copy())
  opt = nn.optim.SGD([w, b], lr=0.1, momentum=0.9)

  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    d = x @ w + b - y
    loss = (d * d).mean()
    loss.backward()
    opt.step()
    return loss
  rng = np.random.default_rng(3)
  for _ in range(5):  # plain, capture, then replays
    x, y = rng.standard_normal((6, 3)).astype(np.float32), rng.standard_normal((6, 2)).astype(np.float32)
    w0, b0 = w.numpy().astype(np.float64), b.numpy().astype(np.float64)
    got = step(Tensor(x), Tensor(y)).item()
    d = x @ w0 + b0 - y
    assert got == pytest.approx(float((d * d).mean()), rel=1e-5)
    assert not np.allclose(w.numpy(), w0)


# ---- backward without an optimizer


def test_backward_fills_grad_of_layer_weights_without_an_optimizer(backend):
  Tensor.manual_seed(1)
  l1, l2 = nn.Linear(3, 4), nn.Linear(4, 2)
  frozen = Tensor(np.ones((6, 3), np.float32), requires_grad=False)
  x = Tensor(X)
  h = l1(x * frozen).relu()
  loss = (l2(h) * l2(h)).mean()
  loss.backward()
  assert frozen.grad is None and loss.grad is None
  assert h.grad is not None and h.grad.shape == h.shape  # an intermediate tensor too (tinygrad)
  params = [l1.weight, l1.bias, l2.weight, l2.bias]
  values = [p.numpy().astype(np.float64) for p in params]

  def loss64(vals: list[np.ndarray]) -> float:
    hh = np.maximum(X @ vals[0].T + vals[1], 0)
    o = hh @ vals[2].T + vals[3]
    return float((o * o).mean())
  eps = 1e-6
  for p, v, i in ((p, v, i) for i, (p, v) in enumerate(zip(params, values))):
    assert p.grad is not None and p.requires_grad is None
    fd = np.zeros_like(v)
    for k in np.ndindex(v.shape):
      hi, lo = [u.copy() for u in values], [u.copy() for u in values]
      hi[i][k] += eps
      lo[i][k] -= eps
      fd[k] = (loss64(hi) - loss64(lo)) / (2 * eps)
    np.testing.assert_allclose(p.grad.numpy(), fd, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(x.grad.numpy(), (h.grad.numpy() * (h.numpy() > 0)) @ l1.weight.numpy(), rtol=1e-5,
                             atol=1e-6)


def test_an_optimizer_still_marks_and_updates_unmarked_parameters():
  layer = nn.Linear(3, 2)
  opt = nn.optim.SGD([layer.weight, layer.bias], lr=0.1)
  assert layer.weight.requires_grad is True
  w0 = layer.weight.numpy().copy()
  layer(Tensor(X)).sum().backward()
  g = layer.weight.grad.numpy().copy()
  opt.step()
  np.testing.assert_allclose(layer.weight.numpy(), w0 - 0.1 * g, rtol=1e-6)


# ---- random numbers in TinyJit


def _sampler(data: Tensor) -> Tensor:
  idx = Tensor.randint(4, low=0, high=10)
  return (data[idx] + Tensor.rand(4) + Tensor.randn(4) * 0.5 + Tensor.uniform(4, low=-2.0, high=-1.0)).realize()


def test_random_numbers_in_a_jitted_function_are_the_plain_run_s(backend):
  def run(fn) -> list[np.ndarray]:
    Tensor.manual_seed(7)
    data = Tensor(np.arange(10, dtype=np.float32) * 100).realize()
    return [fn(data).numpy().copy() for _ in range(5)]
  plain, jitted = run(_sampler), run(TinyJit(_sampler))
  for p, j in zip(plain, jitted):
    np.testing.assert_array_equal(j, p)
  assert len({tuple(j.tolist()) for j in jitted}) == 5  # each replay drew anew


def test_a_jitted_step_samples_a_new_batch_each_call():
  Tensor.manual_seed(0)
  data = Tensor(np.arange(1000, dtype=np.float32)).realize()
  got = TinyJit(lambda d: d[Tensor.randint(8, low=0, high=1000)].sum().realize())
  sums = [got(data).item() for _ in range(6)]
  assert len(set(sums)) == 6
  first = got(data).numpy()  # an array handed out keeps its values when the next replay draws into the buffers
  value = first.item()
  got(data)
  assert first.item() == value


def test_a_value_built_before_a_jit_capture_keeps_its_value_over_the_replays():
  w = Tensor(W0.copy())
  opt = nn.optim.SGD([w], lr=0.1)

  @TinyJit
  def step(x: Tensor) -> Tensor:
    opt.zero_grad()
    loss = (x @ w).square().mean()
    loss.backward()
    opt.step()
    return loss
  step(Tensor(X))
  probe = (w * 1).sum()  # lazy, reads w: the capture's step overwrites w under it
  want = float(w.numpy().astype(np.float64).sum())
  for _ in range(4):
    step(Tensor(X))
  assert probe.item() == pytest.approx(want, rel=1e-6)
