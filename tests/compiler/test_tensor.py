"""The Tensor's core against numpy: construction from numpy arrays and Python data, dtypes, laziness, realize,
item/tolist, integer widening, and bad arguments' errors naming the op and the shapes (each theme's ops:
test_tensor_<theme>.py)."""
import numpy as np
import pytest
from support.tensor_values import check_value, randf, rng

from compiler import Tensor, dtypes
from compiler.uop import Ops

pytestmark = pytest.mark.usefixtures("backend")


@pytest.mark.parametrize("npdt", [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.int32, np.int64,
                                  np.uint32, np.bool_])
def test_numpy_roundtrip(npdt):
  a = (rng.standard_normal((3, 4)) * 10).astype(npdt)
  t = Tensor(a)
  assert t.dtype == dtypes.from_np(npdt) and t.shape == (3, 4)
  np.testing.assert_array_equal(t.numpy(), a)
  np.testing.assert_array_equal((t + 0).numpy() if npdt != np.bool_ else t.logical_not().logical_not().numpy(), a)


def test_tensor_copies_its_input():
  a = np.arange(4, dtype=np.float32)
  t = Tensor(a)
  a[0] = 100
  assert t.numpy()[0] == 0


@pytest.mark.parametrize("data,dt", [([1, 2, 3], dtypes.int32), ([1.0, 2, 3], dtypes.float32),
                                     ([True, False], dtypes.bool), ([[1, 2], [3, 4]], dtypes.int32),
                                     ([], dtypes.float32), (3, dtypes.int32), (2.5, dtypes.float32),
                                     (True, dtypes.bool)])
def test_python_data_dtype(data, dt):
  t = Tensor(data)
  assert t.dtype == dt
  np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=dt.np))


def test_dtype_argument_and_names():
  assert Tensor([1, 2], dtype=dtypes.float16).dtype == dtypes.float16
  assert Tensor([1, 2], dtype="int8").dtype == dtypes.int8
  assert Tensor(np.zeros(2), dtype=np.float32).dtype == dtypes.float32
  check_value(Tensor([1.7, -1.7], dtype=dtypes.int32), [1, -1], dtype=dtypes.int32)
  check_value(Tensor(3, dtype=dtypes.float32) + 1, 4.0, dtype=dtypes.float32)


def test_creation_errors():
  with pytest.raises(ValueError, match="ragged"):
    Tensor([[1, 2], [3]])
  with pytest.raises(TypeError):
    Tensor("abc")
  with pytest.raises(TypeError):
    Tensor(np.zeros(2, dtype=np.complex64))
  with pytest.raises(TypeError):
    Tensor([1], dtype="nonsense")
  with pytest.raises(ValueError, match="negative"):
    Tensor.zeros(2, -1)


def test_laziness_and_item_tolist():
  x = Tensor(randf(3))
  y = x * 2
  assert y.uop.op is Ops.MUL  # nothing ran yet
  np.testing.assert_allclose(y.tolist(), (x.numpy() * 2).tolist())
  assert y.uop.op in (Ops.BUFFER, Ops.RESHAPE)  # realized into a buffer
  assert Tensor([[4.5]]).item() == 4.5
  assert isinstance(Tensor(3).item(), int)
  with pytest.raises(ValueError, match="item"):
    Tensor([1, 2]).item()
  with pytest.raises(TypeError):
    bool(Tensor([1]))


def test_realize_the_same_tensor_or_node_twice():
  x = randf(3)
  a = Tensor(x) + 1
  a.realize(a)  # a regression: the second visit looked up the already rebound node
  check_value(a, x + 1)
  b = Tensor(x)
  c, d = b * 2, b * 2  # one hash-consed node behind two tensors
  assert c.uop is d.uop
  c.realize(d)
  check_value(c, x * 2)
  check_value(d, x * 2)


def test_bad_arguments_name_the_op_and_shapes():
  x = Tensor(randf(2, 3))
  with pytest.raises(TypeError, match=r"Tensor\.sum: axis must be an int"):
    x.sum(1.5)
  with pytest.raises(ValueError, match=r"Tensor\.pad: .*\(2, 3\)"):
    x.pad(((1,), (2, 3)))
  with pytest.raises(ValueError, match=r"Tensor indexing: slice step must not be 0.*\(2, 3\)"):
    x[::0]
  with pytest.raises(ValueError, match=r"Tensor\.softmax: axis 4 .*\(2, 3\)"):
    x.softmax(4)
  with pytest.raises(ValueError, match=r"Tensor\.unflatten: .*\(2, 3\)"):
    x.unflatten(1, (2, 2))
  with pytest.raises(RuntimeError, match=r"Tensor\.matmul: batch dims of shapes \(2, 2, 3\) and \(3, 3, 2\)"):
    Tensor(randf(2, 2, 3)) @ Tensor(randf(3, 3, 2))


def test_python_ints_widen_or_raise_instead_of_wrapping():
  check_value(Tensor([2 ** 40, -3]), [2 ** 40, -3], dtype=dtypes.int64)
  check_value(Tensor(2 ** 40), 2 ** 40, dtype=dtypes.int64)
  check_value(Tensor.full((2,), 2 ** 33), [2 ** 33] * 2, dtype=dtypes.int64)
  check_value(Tensor([1, 2]), [1, 2], dtype=dtypes.int32)  # the default int when they fit
  with pytest.raises(OverflowError, match="doesn't fit int64"):
    Tensor([2 ** 63])
  with pytest.raises(OverflowError, match=r"Tensor\.add: the Python int 1099511627776 is out of range for int32"):
    Tensor([1, 2]) + 2 ** 40
  with pytest.raises(OverflowError, match=r"Tensor\.mul: .* -1 .* uint8"):
    Tensor(np.array([5], np.uint8)) * -1
  check_value(Tensor(np.array([5], np.uint8)) - 3, [2], dtype=dtypes.uint8)
