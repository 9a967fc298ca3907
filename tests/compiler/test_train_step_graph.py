"""The loss a training step builds: sparse_categorical_crossentropy without smoothing or ignore_index builds neither
(no 0 * mean term, no all-true mask), so the step's graph, its gradient and its schedule are smaller; the values
are torch's, also where a 0 * mean term was nan."""
import numpy as np
import pytest
from support.api_helpers import check

from compiler import Tensor
from compiler.uop import Ops, toposort

pytestmark = pytest.mark.usefixtures("backend")

rng = np.random.default_rng(5)


def np_log_softmax(x):
  m = x.max(-1, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_plain_labels(reduction):
  x = rng.standard_normal((3, 4, 6)).astype(np.float32)
  y = rng.integers(0, 6, (3, 4)).astype(np.int32)
  picked = -np.take_along_axis(np_log_softmax(x), y[..., None], -1)[..., 0]
  ref = picked if reduction == "none" else picked.sum() if reduction == "sum" else picked.mean()
  check((Tensor(x).sparse_categorical_crossentropy(Tensor(y), reduction=reduction), ref), rtol=1e-5, atol=1e-6)


def test_a_minus_inf_logit_of_another_class_is_probability_zero():
  x = np.array([[-np.inf, 1.0, 0.0], [2.0, -np.inf, -1.0]], np.float32)
  lsm = np_log_softmax(np.where(np.isinf(x), -1e30, x))
  loss = Tensor(x).sparse_categorical_crossentropy(Tensor(np.array([1, 0], np.int32)), reduction="none")
  check((loss, -lsm[[0, 1], [1, 0]]))


def test_the_gradient_of_the_plain_loss():
  x = rng.standard_normal((5, 4)).astype(np.float32)
  y = rng.integers(0, 4, 5).astype(np.int32)
  t = Tensor(x, requires_grad=True)
  t.sparse_categorical_crossentropy(Tensor(y)).backward()
  p = np.exp(np_log_softmax(x))
  p[np.arange(5), y] -= 1
  check((t.grad, p / 5), rtol=1e-5, atol=1e-6)


def test_the_training_steps_loss_is_one_kernel_fewer():
  # the MLP step's forward: the loss and the logits' softmax statistics; no kernel of a mean times zero
  x = Tensor(rng.standard_normal((8, 6)).astype(np.float32))
  w = Tensor(rng.standard_normal((6, 5)).astype(np.float32))
  loss = (x @ w).sparse_categorical_crossentropy(Tensor(rng.integers(0, 5, 8).astype(np.int32)))
  smoothed = (x @ w).sparse_categorical_crossentropy(Tensor(rng.integers(0, 5, 8).astype(np.int32)),
                                                     label_smoothing=0.1)
  # counted in REDUCEs: a reduction read once by another shares its kernel (bufferize's `nested_reduces`)
  assert _reduces(loss) < _reduces(smoothed)


def _reduces(t: Tensor) -> int:
  return sum(1 for si in t.schedule() for u in toposort(si.ast) if u.op is Ops.REDUCE)
