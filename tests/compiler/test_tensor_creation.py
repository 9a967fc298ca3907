"""The creation theme against numpy: zeros, ones, full, empty, arange, eye and the seeded random constructors."""
import numpy as np
import pytest
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
