"""Tensor.assign writes into the tensor's buffer: no read-after-overwrite hazards, in a kernel or across kernels, and
optimizer steps update the weights in place."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import Tensor, nn
from compiler.runtime.buffer import buffer_of

pytestmark = pytest.mark.usefixtures("backend")


def _buf(t: Tensor):
  u = t.uop
  while u.op.name == "RESHAPE":
    u = u.src[0]
  return buffer_of(u)


def _w(n: int = 6) -> tuple[Tensor, np.ndarray]:
  a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
  return Tensor(a.copy()), a


def test_elementwise_update_is_in_place_and_equals_a_copy():
  w, a = _w()
  before = _buf(w)
  w.assign(w * 2 + 1).realize()
  np.testing.assert_allclose(w.numpy(), a * 2 + 1, rtol=1e-6)
  assert _buf(w) is before


@pytest.mark.parametrize("name,fn,ref", [
  ("flip", lambda w: w.flip(0), lambda a: a[::-1]),
  ("cumsum", lambda w: w.cumsum(0), lambda a: np.cumsum(a)),
  ("minus mean", lambda w: w - w.mean(), lambda a: a - a.mean()),
  ("shift", lambda w: w[1:].pad(((0, 1),)), lambda a: np.append(a[1:], 0)),
  ("matmul", lambda w: (w.reshape(2, 3) @ w.reshape(2, 3).T @ w.reshape(2, 3)).reshape(6),
   lambda a: (a.reshape(2, 3) @ a.reshape(2, 3).T @ a.reshape(2, 3)).reshape(6)),
])
def test_a_kernel_reading_other_elements_of_w_gives_the_copy_result(name, fn, ref):
  w, a = _w()
  w.assign(fn(w)).realize()
  np.testing.assert_allclose(w.numpy(), ref(a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("order", ["w first", "reader first"])
def test_reads_of_the_old_values_run_before_the_write(order):
  w, a = _w()
  old, total = w * 3, w.sum()
  w.assign(w + 1)
  sched = w.schedule(old, total)
  writer = next(i for i, si in enumerate(sched) if si.bufs[0] is _buf_of_view(w))
  assert all(i < writer for i, si in enumerate(sched) if _buf_of_view(w) in si.bufs[1:])
  Tensor.realize(*((w, old, total) if order == "w first" else (old, total, w)))
  np.testing.assert_allclose(old.numpy(), a * 3, rtol=1e-6)
  np.testing.assert_allclose(total.numpy(), a.sum(), rtol=1e-5)
  np.testing.assert_allclose(w.numpy(), a + 1, rtol=1e-6)


def _buf_of_view(t: Tensor):
  u = t.uop.src[0] if t.uop.op.name == "ASSIGN" else t.uop
  while u.op.name == "RESHAPE":
    u = u.src[0]
  return buffer_of(u)


def test_sequential_assigns_and_swap():
  a, an = _w(4)
  b, bn = _w(5)
  b = b[:4].contiguous().realize()
  bn = bn[:4]
  a.assign(b)
  b.assign(a)  # a is already b's old values: b keeps them
  Tensor.realize(a, b)
  np.testing.assert_array_equal(a.numpy(), bn)
  np.testing.assert_array_equal(b.numpy(), bn)


def test_overwritten_buffer_is_not_reused_for_an_equal_graph():
  z = Tensor.zeros(3).contiguous().realize()
  z.assign(z + 1).realize()
  fresh = Tensor.zeros(3).contiguous().realize()  # the same graph as z's first value: not z's (overwritten) buffer
  np.testing.assert_array_equal(fresh.numpy(), np.zeros(3))
  np.testing.assert_array_equal(z.numpy(), np.ones(3))


def test_reading_old_and_new_in_one_kernel_is_refused():
  w, _ = _w()
  alias = Tensor(w.uop)  # another tensor on the same buffer (its old values, read lazily)
  w.assign(w + 1)
  with pytest.raises(RuntimeError, match="old and the new"):
    (alias + w).realize()


def test_assign_checks_shape_and_dtype():
  w, _ = _w()
  with pytest.raises(ValueError, match="shape"):
    w.assign(Tensor.zeros(5))
  with pytest.raises(ValueError, match="float64"):
    w.assign(Tensor(np.zeros(6)))


def test_sgd_step_updates_weights_in_place_one_kernel_each():
  layer = nn.Linear(4, 3)
  bufs = [_buf(layer.weight), _buf(layer.bias)]
  opt = nn.optim.SGD([layer.weight, layer.bias], lr=0.1)
  x = Tensor(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
  w0, b0 = layer.weight.numpy().copy(), layer.bias.numpy().copy()
  layer(x).sum().backward()
  outs = opt.schedule_step()
  sched = outs[0].schedule(*outs[1:])
  writers = [si for si in sched if set(si.bufs[:len(si.ast.src)]) & set(bufs)]  # outputs: the first slots
  assert len(writers) == 2  # one fused update kernel per parameter, into its own buffer
  Tensor.realize(*outs)
  assert [_buf(layer.weight), _buf(layer.bias)] == bufs
  np.testing.assert_allclose(layer.weight.numpy(), w0 - 0.1 * np.broadcast_to(x.numpy().sum(0), w0.shape), rtol=1e-5)
  np.testing.assert_allclose(layer.bias.numpy(), b0 - 0.1 * 5, rtol=1e-5)


def test_grad_after_a_step_holds_the_step_s_gradient():
  w = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
  opt = nn.optim.SGD([w], lr=0.5)
  (w * w).sum().backward()
  opt.step()  # w is overwritten in place; .grad still reads as the gradient at the old w
  np.testing.assert_allclose(w.numpy(), [0.0, 0.0])
  np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])
  (w * w).sum().backward()  # accumulates onto it, as torch without zero_grad
  np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])
