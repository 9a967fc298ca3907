"""The creation theme against numpy: zeros, ones, full, empty, arange, eye and the seeded random constructors."""
import numpy as np
import pytest
from support.api_helpers import check
from support.tensor_values import check_value, randf

from compiler import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("backend")


def test_zeros_ones_full_empty():
  check_value(Tensor.zeros(2, 3), np.zeros((2, 3)), dtype=dtypes.float32)
  check_value(Tensor.ones((4,), dtype=dtypes.int32), np.ones(4), dtype=dtypes.int32)
  check_value(Tensor.full((2, 2), 7), np.full((2, 2), 7), dtype=dtypes.int32)
  check_value(Tensor.full((2,), 1.5), [1.5, 1.5], dtype=dtypes.float32)
  check_value(Tensor.full((), True), np.array(True), dtype=dtypes.bool)
  assert Tensor.empty(3, 0).shape == (3, 0) and Tensor.empty(3, 0).numpy().shape == (3, 0)
  x = Tensor(randf(2, 5))
  check_value(x.zeros_like(), np.zeros((2, 5)), dtype=dtypes.float32)
  check_value(x.ones_like(dtype=dtypes.int8), np.ones((2, 5)), dtype=dtypes.int8)
  check_value(x.full_like(3.0), np.full((2, 5), 3.0))


@pytest.mark.parametrize("args", [(5,), (2, 11, 3), (10, 0, -2), (0.5, 2.0, 0.25), (3, 3)])
def test_arange(args):
  t = Tensor.arange(*args)
  check_value(t, np.arange(*args))
  assert t.dtype == (dtypes.float32 if any(isinstance(a, float) for a in args) else dtypes.int32)
  with pytest.raises(ValueError):
    Tensor.arange(0, 5, 0)


def test_eye():
  check_value(Tensor.eye(3), np.eye(3), dtype=dtypes.float32)
  check_value(Tensor.eye(2, 4, dtype=dtypes.int32), np.eye(2, 4))


def test_rand_seeded():
  Tensor.manual_seed(7)
  a = Tensor.rand(100).numpy()
  b = Tensor.randn(4, 5).numpy()
  Tensor.manual_seed(7)
  np.testing.assert_array_equal(Tensor.rand(100).numpy(), a)
  np.testing.assert_array_equal(Tensor.randn(4, 5).numpy(), b)
  assert a.dtype == np.float32 and 0 <= a.min() and a.max() < 1 and a.std() > 0.1
  assert not np.array_equal(Tensor.rand(100).numpy(), a)
  assert Tensor.rand(2, 3, dtype=dtypes.float16).dtype == dtypes.float16
  x = Tensor(randf(3, 3))
  assert x.rand_like().shape == (3, 3) and x.randn_like().dtype == dtypes.float32
  r = Tensor.randint(50, low=3, high=6).numpy()
  assert r.min() >= 3 and r.max() < 6


def test_linspace_and_initializers():
  check((Tensor.linspace(0, 1, 5), np.linspace(0, 1, 5)),
        (Tensor.linspace(-1.5, 2.25, 37), np.linspace(-1.5, 2.25, 37)),
        (Tensor.linspace(2, 3, 1), np.array([2.0])), (Tensor.linspace(5, -5, 0), np.zeros(0)),
        (Tensor.linspace(-3, 7, 4, dtype=dtypes.int32), np.array([-3, 0, 3, 7])), rtol=1e-6, atol=1e-6)
  assert Tensor.linspace(0, 1, 3).dtype == dtypes.float32
  Tensor.manual_seed(3)
  n = Tensor.normal(4000, mean=3.0, std=2.0).numpy()
  assert abs(n.mean() - 3) < 0.15 and abs(n.std() - 2) < 0.15
  bound = np.sqrt(3) * np.sqrt(2 / (1 + 0.01 ** 2)) / np.sqrt(27)
  k = Tensor.kaiming_uniform(64, 3, 3, 3).numpy()
  assert k.shape == (64, 3, 3, 3) and np.abs(k).max() <= bound and np.abs(k).max() > 0.9 * bound
  g = Tensor.glorot_uniform(30, 50).numpy()
  assert np.abs(g).max() <= np.sqrt(6 / 80) and np.abs(g).max() > 0.9 * np.sqrt(6 / 80)
  kn = Tensor.kaiming_normal(200, 50).numpy()
  assert abs(kn.std() - np.sqrt(2 / (1 + 0.01 ** 2)) / np.sqrt(50)) < 0.01
  s = Tensor.scaled_uniform(10, 10).numpy()
  assert np.abs(s).max() <= 0.1
  with pytest.raises(ValueError, match="linspace"):
    Tensor.linspace(0, 1, -1)
