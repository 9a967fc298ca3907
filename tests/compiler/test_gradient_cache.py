"""The gradient cache: a backward pass of a loss of a structure seen before makes the very graph the "gradient"
rewrite makes, over this call's buffers; whatever makes the structure differ (an arg, -0.0, a dtype, the targets, the
root's gradient) is a miss; it keeps no node alive; while recording, every backward pass is the traced rewrite."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from compiler import Tensor, dtypes
from compiler.gradient_cache import GRADIENTS, GradientCache
from compiler.uop import UOp
from vztrace.reader import TraceReader

rng = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
  monkeypatch.setenv("BACKEND", "interp")
  GRADIENTS.clear()
  yield
  GRADIENTS.clear()


def _data(*shape: int) -> np.ndarray:
  return rng.standard_normal(shape).astype(np.float32)


def _mlp(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
  y = Tensor(np.array([1, 0, 2, 1], dtype=np.int32))
  return (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y)


def _mixed(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
  """max (ties), where, exp/log/sqrt, pad/shrink/permute/flip, a cast and broadcasting: most rules in one loss."""
  h = (x @ w1).maximum(x.sum(axis=1, keepdim=True)).flip(0).pad(((1, 0), (0, 2)))[1:, :-2].permute(1, 0)
  z = (h > 0).where(h.exp(), (h * h + 1).sqrt().log()) * w1[:1].permute(1, 0)
  return (z.max(axis=0).cast(dtypes.float16).cast(dtypes.float32) * w2[:, 0].sum() - 0.5).mean()


def _params() -> list[Tensor]:
  return [Tensor(_data(4, 5)), Tensor(_data(5, 3), requires_grad=True), Tensor(_data(3, 3), requires_grad=True)]


def _uncached(monkeypatch, loss: Tensor, targets: list[Tensor]) -> list[UOp]:
  monkeypatch.setenv("GRADIENT_CACHE", "0")
  try:
    return [g.uop for g in loss.gradient(*targets)]
  finally:
    monkeypatch.delenv("GRADIENT_CACHE")


@pytest.mark.parametrize("model", [_mlp, _mixed])
def test_a_hit_makes_the_graph_of_the_rewrite_over_the_new_buffers(monkeypatch, model):
  first = _params()
  model(*first).gradient(*first[1:])
  hits = GRADIENTS.hits
  new = _params()
  loss = model(*new)
  got = [g.uop for g in loss.gradient(*new[1:])]
  assert GRADIENTS.hits == hits + 1
  want = _uncached(monkeypatch, loss, new[1:])
  assert all(g is w for g, w in zip(got, want))  # hash-consed: the same nodes, not just equal numbers
  assert got[0] is not [g.uop for g in model(*first).gradient(*first[1:])][0]  # the new buffers', not the old


def test_backward_fills_grads_of_a_hit_with_the_new_values():
  for _ in range(3):
    x, w1, w2 = _params()
    _mlp(x, w1, w2).backward()
    h = x.numpy() @ w1.numpy()
    z = np.maximum(h, 0) @ w2.numpy()
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(4), [1, 0, 2, 1]] -= 1
    np.testing.assert_allclose(w2.grad.numpy(), np.maximum(h, 0).T @ p / 4, rtol=1e-4, atol=1e-6)
  assert GRADIENTS.hits == 2


@pytest.mark.parametrize("a_fn,b_fn", [
  (lambda a: (a * 2.0).sum(), lambda a: (a * 3.0).sum()),      # an arg
  (lambda a: (a * 0.0).sum(), lambda a: (a * -0.0).sum()),     # 0.0 == -0.0, but they are different constants
  (lambda a: a.sum(), lambda a: (a.cast(dtypes.float16) * 1.0).cast(dtypes.float32).sum()),  # dtypes, ops
])
def test_another_structure_is_a_miss_with_its_own_gradient(monkeypatch, a_fn, b_fn):
  for fn in (a_fn, b_fn):
    a = Tensor(_data(3))
    loss = fn(a)
    (got,) = loss.gradient(a)
    (want,) = _uncached(monkeypatch, loss, [a])
    assert got.uop is want
  assert GRADIENTS.hits == 0 and GRADIENTS.misses == 2


def test_negative_zero_gradient_keeps_its_sign():
  a = Tensor(_data(3))
  (a * 0.0).sum().gradient(a)
  (g,) = (a * -0.0).sum().gradient(a)
  assert np.all(np.signbit(g.numpy()))


def test_the_targets_and_the_roots_gradient_are_part_of_the_key():
  a, b = Tensor(_data(3)), Tensor(_data(3))
  loss = (a * b).sum()
  (ga,) = loss.gradient(a)
  (gb,) = loss.gradient(b)
  np.testing.assert_array_equal(ga.numpy(), b.numpy())
  np.testing.assert_array_equal(gb.numpy(), a.numpy())
  y = a * b
  (g2,) = y.gradient(a, gradient=Tensor(np.full(3, 2.0, np.float32)))
  (g3,) = y.gradient(a, gradient=Tensor(np.full(3, 3.0, np.float32)))
  np.testing.assert_allclose(g2.numpy(), 2 * b.numpy())
  np.testing.assert_allclose(g3.numpy(), 3 * b.numpy())
  (gc_,) = y.gradient(a, gradient=Tensor(3.0).expand(3))
  np.testing.assert_allclose(gc_.numpy(), 3 * b.numpy())
  assert GRADIENTS.hits >= 1  # the second buffer-fed root gradient


def test_a_target_the_loss_does_not_depend_on_still_raises():
  a, b = Tensor(_data(3)), Tensor(_data(3))
  for _ in range(2):
    with pytest.raises(RuntimeError, match="not in the graph"):
      (a * 2.0).sum().gradient(b)


def test_the_cache_keeps_no_node_alive():
  x, w1, w2 = _params()
  _mlp(x, w1, w2).backward()
  grad = w1.grad
  refs = [weakref.ref(t.uop) for t in (x, w1, w2, grad)]
  del x, w1, w2, grad
  gc.collect()
  assert len(GRADIENTS.entries) == 1
  assert all(r() is None for r in refs)


def test_lru_keeps_the_most_recent():
  c = GradientCache(size=2)
  for k in "abc":
    c.put(k, ((), ()))
  assert c.get("a") is None and c.get("c") is not None and len(c.entries) == 2


def test_off_switch(monkeypatch):
  monkeypatch.setenv("GRADIENT_CACHE", "0")
  for _ in range(2):
    x, w1, w2 = _params()
    _mlp(x, w1, w2).backward()
  assert GRADIENTS.hits == GRADIENTS.misses == 0 and not GRADIENTS.entries


def test_every_backward_is_traced_while_recording(trace):
  for _ in range(2):
    x, w1, w2 = _params()
    _mlp(x, w1, w2).backward()
  from compiler.trace import recorder
  recorder.disable()
  recs = list(TraceReader(trace))
  rws = [r for r in recs if r["t"] == "rw_begin" and r["name"] == "gradient"]
  per_rw = [sum(1 for r in recs if r["t"] == "match" and r["rw"] == rw["id"]) for rw in rws]
  assert len(rws) == 2 and per_rw[0] == per_rw[1] > 10
  assert GRADIENTS.hits == 0
