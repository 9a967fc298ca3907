"""Tensor creation, elementwise ops, dtype promotion, reductions and errors, checked against numpy."""
import numpy as np
import pytest

from compiler import Tensor, dtypes
from compiler.uop import Ops


def check(t: Tensor, expected, rtol: float = 1e-5, atol: float = 1e-6, dtype=None):
  expected = np.asarray(expected)
  got = t.numpy()
  assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
  if dtype is not None:
    assert t.dtype == dtype, f"dtype {t.dtype} != {dtype}"
    assert got.dtype == dtype.np
  if got.dtype == np.bool_ or np.issubdtype(got.dtype, np.integer):
    np.testing.assert_array_equal(got, expected.astype(got.dtype))
  else:
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


rng = np.random.default_rng(1234)


def randf(*shape):
  return rng.standard_normal(shape).astype(np.float32)


def randi(*shape, lo=-20, hi=20):
  return rng.integers(lo, hi, shape).astype(np.int32)


# ---- creation

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
  check(Tensor([1.7, -1.7], dtype=dtypes.int32), [1, -1], dtype=dtypes.int32)
  check(Tensor(3, dtype=dtypes.float32) + 1, 4.0, dtype=dtypes.float32)


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


def test_zeros_ones_full_empty():
  check(Tensor.zeros(2, 3), np.zeros((2, 3)), dtype=dtypes.float32)
  check(Tensor.ones((4,), dtype=dtypes.int32), np.ones(4), dtype=dtypes.int32)
  check(Tensor.full((2, 2), 7), np.full((2, 2), 7), dtype=dtypes.int32)
  check(Tensor.full((2,), 1.5), [1.5, 1.5], dtype=dtypes.float32)
  check(Tensor.full((), True), np.array(True), dtype=dtypes.bool)
  assert Tensor.empty(3, 0).shape == (3, 0) and Tensor.empty(3, 0).numpy().shape == (3, 0)
  x = Tensor(randf(2, 5))
  check(x.zeros_like(), np.zeros((2, 5)), dtype=dtypes.float32)
  check(x.ones_like(dtype=dtypes.int8), np.ones((2, 5)), dtype=dtypes.int8)
  check(x.full_like(3.0), np.full((2, 5), 3.0))


@pytest.mark.parametrize("args", [(5,), (2, 11, 3), (10, 0, -2), (0.5, 2.0, 0.25), (3, 3)])
def test_arange(args):
  t = Tensor.arange(*args)
  check(t, np.arange(*args))
  assert t.dtype == (dtypes.float32 if any(isinstance(a, float) for a in args) else dtypes.int32)
  with pytest.raises(ValueError):
    Tensor.arange(0, 5, 0)


def test_eye():
  check(Tensor.eye(3), np.eye(3), dtype=dtypes.float32)
  check(Tensor.eye(2, 4, dtype=dtypes.int32), np.eye(2, 4))


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
  check(a, x + 1)
  b = Tensor(x)
  c, d = b * 2, b * 2  # one hash-consed node behind two tensors
  assert c.uop is d.uop
  c.realize(d)
  check(c, x * 2)
  check(d, x * 2)


# ---- elementwise binary ops with broadcasting

SHAPE_PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (1, 4, 1)), ((), (3,)), ((0, 3), (1, 3)), ((1,), (1, 1)),
               ((5, 1), ())]

BINARY = {
  "add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
  "mul": (lambda a, b: a * b, np.multiply), "maximum": (lambda a, b: a.maximum(b), np.maximum),
  "minimum": (lambda a, b: a.minimum(b), np.minimum),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
def test_binary_float(name, shapes):
  f, ref = BINARY[name]
  a, b = randf(*shapes[0]), randf(*shapes[1])
  check(f(Tensor(a), Tensor(b)), ref(a, b), dtype=dtypes.float32)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_int(name):
  f, ref = BINARY[name]
  a, b = randi(3, 4), randi(4)
  check(f(Tensor(a), Tensor(b)), ref(a, b), dtype=dtypes.int32)


@pytest.mark.parametrize("shapes", SHAPE_PAIRS[:4])
def test_true_division(shapes):
  a, b = randf(*shapes[0]), randf(*shapes[1]) + 3
  check(Tensor(a) / Tensor(b), a / b, rtol=1e-6)
  ai, bi = randi(*shapes[0]), randi(*shapes[1], lo=1, hi=9)
  check(Tensor(ai) / Tensor(bi), ai / bi, dtype=dtypes.float32)


def test_floordiv_mod_match_numpy():
  a = np.array([7, -7, 7, -7, 0, 9, -9, 5], dtype=np.int32)
  b = np.array([2, 2, -2, -2, 3, 3, 3, -5], dtype=np.int32)
  check(Tensor(a) // Tensor(b), a // b, dtype=dtypes.int32)
  check(Tensor(a) % Tensor(b), a % b, dtype=dtypes.int32)
  check(Tensor(a) // 3, a // 3)
  check(Tensor(a) % -3, a % -3)
  check(17 // Tensor(b), 17 // b)
  af, bf = np.array([7.5, -7.5, 2.0, -0.5], np.float32), np.array([2.0, 2.0, -1.5, 0.25], np.float32)
  check(Tensor(af) // Tensor(bf), af // bf)
  check(Tensor(af) % Tensor(bf), af % bf)
  au = np.array([7, 200, 3], np.uint8)
  check(Tensor(au) // 3, au // 3, dtype=dtypes.uint8)
  check(Tensor(au) % 7, au % 7, dtype=dtypes.uint8)


def test_scalars_either_side_and_promotion():
  f, i, b = Tensor(randf(3)), Tensor(randi(3)), Tensor(np.array([True, False, True]))
  assert (f + 1).dtype == dtypes.float32 and (1 + f).dtype == dtypes.float32
  assert (i + 1).dtype == dtypes.int32 and (i * 2.5).dtype == dtypes.float32
  assert (b + 1).dtype == dtypes.int32 and (b + True).dtype == dtypes.bool
  assert (Tensor([1, 2], dtype=dtypes.int8) + 1).dtype == dtypes.int8
  assert (Tensor([1, 2], dtype=dtypes.float16) + 1.5).dtype == dtypes.float16
  assert (Tensor([1], dtype=dtypes.int8) + Tensor([1], dtype=dtypes.int32)).dtype == dtypes.int32
  assert (Tensor([1], dtype=dtypes.uint8) + Tensor([1], dtype=dtypes.int8)).dtype == dtypes.int16
  assert (Tensor([1], dtype=dtypes.int32) + Tensor([1.0], dtype=dtypes.float16)).dtype == dtypes.float16
  fa, ia = f.numpy(), i.numpy()
  check(2 - f, 2 - fa)
  check(3 / f, 3 / fa, rtol=1e-5)
  check(i * 2.5, ia * 2.5)
  check(1 - i, 1 - ia)
  check(b + 1, np.array([2, 1, 2]))
  check(b * True, np.array([True, False, True]))


def test_bool_arithmetic_is_logical():
  a, c = np.array([True, False, True, False]), np.array([True, True, False, False])
  check(Tensor(a) + Tensor(c), a | c, dtype=dtypes.bool)
  check(Tensor(a) * Tensor(c), a & c, dtype=dtypes.bool)
  check(Tensor(a) & Tensor(c), a & c)
  check(Tensor(a) | Tensor(c), a | c)
  check(Tensor(a) ^ Tensor(c), a ^ c)
  check(~Tensor(a), ~a)
  check(-Tensor(a), ~a)
  check(Tensor(a).maximum(Tensor(c)), np.maximum(a, c))
  check(Tensor(a).minimum(Tensor(c)), np.minimum(a, c))


def test_int_bitwise():
  a, c = randi(5), randi(5)
  check(Tensor(a) & Tensor(c), a & c)
  check(Tensor(a) | 6, a | 6)
  check(Tensor(a) ^ Tensor(c), a ^ c)
  check(~Tensor(a), ~a)
  u = np.array([0, 1, 250], np.uint8)
  check(~Tensor(u), ~u, dtype=dtypes.uint8)
  with pytest.raises(TypeError, match="xor"):
    Tensor(randf(2)) ^ 1


@pytest.mark.parametrize("op,ref", [("__lt__", np.less), ("__le__", np.less_equal), ("__gt__", np.greater),
                                    ("__ge__", np.greater_equal), ("__eq__", np.equal), ("__ne__", np.not_equal)])
def test_comparisons(op, ref):
  a, b = randi(3, 4, lo=-2, hi=2), randi(4, lo=-2, hi=2)
  check(getattr(Tensor(a), op)(Tensor(b)), ref(a, b), dtype=dtypes.bool)
  check(getattr(Tensor(a.astype(np.float32)), op)(0.5), ref(a.astype(np.float32), 0.5), dtype=dtypes.bool)
  nan = np.array([np.nan, 1.0], np.float32)
  check(getattr(Tensor(nan), op)(1.0), ref(nan, 1.0))


# ---- unary ops

UNARY = {
  "neg": (lambda t: -t, np.negative, None), "exp": (Tensor.exp, np.exp, None), "exp2": (Tensor.exp2, np.exp2, None),
  "log": (Tensor.log, np.log, "pos"), "log2": (Tensor.log2, np.log2, "pos"), "sqrt": (Tensor.sqrt, np.sqrt, "pos"),
  "rsqrt": (Tensor.rsqrt, lambda x: 1 / np.sqrt(x), "pos"), "sin": (Tensor.sin, np.sin, None),
  "cos": (Tensor.cos, np.cos, None), "abs": (Tensor.abs, np.abs, None), "sign": (Tensor.sign, np.sign, None),
  "reciprocal": (Tensor.reciprocal, np.reciprocal, "pos"), "relu": (Tensor.relu, lambda x: np.maximum(x, 0), None),
  "sigmoid": (Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x)), None), "tanh": (Tensor.tanh, np.tanh, None),
  "gelu": (Tensor.gelu, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), None),
  "square": (Tensor.square, np.square, None), "floor": (Tensor.floor, np.floor, None),
  "ceil": (Tensor.ceil, np.ceil, None), "trunc": (Tensor.trunc, np.trunc, None),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(7,), (2, 3, 4), (), (0, 2)])
def test_unary_float(name, shape):
  f, ref, dom = UNARY[name]
  x = randf(*shape) * 3
  if dom == "pos":
    x = np.abs(x) + 0.1
  check(f(Tensor(x)), ref(x).astype(np.float32), rtol=2e-5, atol=1e-5, dtype=dtypes.float32)


def test_unary_on_ints_gives_float():
  x = np.array([1, 2, 4], np.int32)
  check(Tensor(x).sqrt(), np.sqrt(x), dtype=dtypes.float32)
  check(Tensor(x).exp(), np.exp(x).astype(np.float32), rtol=1e-5, dtype=dtypes.float32)
  check(Tensor(x).log2(), np.log2(x), dtype=dtypes.float32)
  check(-Tensor(x), -x, dtype=dtypes.int32)
  check(Tensor(x).relu(), x, dtype=dtypes.int32)
  check(Tensor(np.array([-3, 0, 5], np.int32)).abs(), [3, 0, 5], dtype=dtypes.int32)
  check(Tensor(np.array([-3, 0, 5], np.int32)).sign(), [-1, 0, 1], dtype=dtypes.int32)


def test_special_values():
  x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30], np.float32)
  with np.errstate(all="ignore"):
    check(Tensor(x).exp(), np.exp(x))
    check(Tensor(x).relu(), np.maximum(x, 0))
    check(Tensor(np.abs(x)).sqrt(), np.sqrt(np.abs(x)))
    check(Tensor(x).sigmoid(), 1 / (1 + np.exp(-x)))


def test_where_clip_cast_pow():
  c, a, b = np.array([True, False, True]), randf(3), randf(1)
  check(Tensor(c).where(Tensor(a), Tensor(b)), np.where(c, a, b))
  check(Tensor(c).where(1.5, Tensor(b)), np.where(c, 1.5, b))
  check(Tensor(c).where(1, 0), np.where(c, 1, 0), dtype=dtypes.int32)
  check(Tensor(c).where(1, 2.5), np.where(c, 1, 2.5), dtype=dtypes.float32)
  check((Tensor(a) > 0).where(Tensor(a), 0), np.where(a > 0, a, 0), dtype=dtypes.float32)
  ci, ia = randi(3) > 0, randi(3)
  check(Tensor(ci).where(Tensor(ia), Tensor(a)), np.where(ci, ia, a), dtype=dtypes.float32)
  x = randf(10) * 4
  check(Tensor(x).clip(-1, 2), np.clip(x, -1, 2))
  check(Tensor(x).clip(max_=0), np.minimum(x, 0))
  with pytest.raises(RuntimeError, match="clip"):  # tinygrad's type
    Tensor(x).clip()
  check(Tensor(x).cast(dtypes.int32), x.astype(np.int32), dtype=dtypes.int32)
  check(Tensor(x).cast(dtypes.bool), x.astype(bool), dtype=dtypes.bool)
  check(Tensor(x).cast(dtypes.float16), x.astype(np.float16), rtol=1e-3, dtype=dtypes.float16)
  check(Tensor(x) ** 2, x ** 2, rtol=1e-5)
  check(Tensor(x) ** -1, 1 / x, rtol=1e-5)
  check(Tensor(np.abs(x)) ** 0.5, np.sqrt(np.abs(x)), rtol=1e-5)
  check(2 ** Tensor(x), 2 ** x, rtol=1e-5)
  with pytest.raises(TypeError):
    Tensor(c).where("a", 1)


def test_broadcast_error_names_op_and_shapes():
  a, b = Tensor(randf(3, 4)), Tensor(randf(5))
  with pytest.raises(ValueError, match=r"Tensor\.add.*\(3, 4\).*\(5,\)"):
    a + b
  with pytest.raises(ValueError, match=r"Tensor\.where"):
    Tensor(np.ones((2,), bool)).where(a, 1.0)
  with pytest.raises(TypeError, match="add"):
    a + "x"
  # nothing half-built: the operands are still usable
  check(a + 1, a.numpy() + 1)


# ---- reductions

REDUCE_AXES = [None, 0, -1, (0, 2), (-1, 1), ()]


@pytest.mark.parametrize("axis", REDUCE_AXES)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["sum", "max", "min", "mean", "prod"])
def test_reduce_float(name, axis, keepdim):
  x = randf(2, 3, 4)
  ref = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean, "prod": np.prod}[name]
  check(getattr(Tensor(x), name)(axis, keepdim=keepdim), ref(x, axis=axis, keepdims=keepdim), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["sum", "max", "min", "prod"])
def test_reduce_int_and_bool(name):
  x = randi(3, 5, lo=-4, hi=5)
  ref = getattr(np, name)
  check(getattr(Tensor(x), name)(1), ref(x, axis=1), dtype=dtypes.int32)
  b = x > 0
  got = getattr(Tensor(b), name)(0)
  check(got, ref(b, axis=0))
  assert got.dtype == (dtypes.bool if name in ("max", "min") else dtypes.int32)
  u = np.array([[3, 250], [7, 0]], np.uint8)
  check(getattr(Tensor(u), name)(0), ref(u, axis=0).astype(np.uint32 if name in ("sum", "prod") else np.uint8))


def test_reduce_dtypes():
  assert Tensor([1, 2], dtype=dtypes.int8).sum().dtype == dtypes.int32
  assert Tensor([1, 2], dtype=dtypes.uint8).sum().dtype == dtypes.uint32
  assert Tensor([1, 2], dtype=dtypes.int64).sum().dtype == dtypes.int64
  assert Tensor([1, 2], dtype=dtypes.float16).sum().dtype == dtypes.float16
  check(Tensor([100, 100, 100], dtype=dtypes.int8).sum(), 300)
  assert Tensor([1, 2], dtype=dtypes.int8).max().dtype == dtypes.int8
  check(Tensor([-128, 5], dtype=dtypes.int8).min(), -128)
  check(Tensor([127, -128], dtype=dtypes.int8).max(), 127)
  assert Tensor([1, 2]).mean().dtype == dtypes.float32
  check(Tensor([1, 2]).sum(dtype=dtypes.float32), 3.0, dtype=dtypes.float32)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
def test_var_std(axis):
  x = randf(4, 6)
  check(Tensor(x).var(axis), x.var(axis=axis, ddof=1), rtol=1e-4)
  check(Tensor(x).std(axis, keepdim=True), x.std(axis=axis, ddof=1, keepdims=True), rtol=1e-4)
  check(Tensor(x).var(axis, correction=0), x.var(axis=axis), rtol=1e-4)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_argmax_argmin(axis):
  x = randi(4, 6, lo=0, hi=4)  # ties: the first index wins, as numpy
  check(Tensor(x).argmax(axis), np.argmax(x, axis=axis), dtype=dtypes.int32)
  check(Tensor(x).argmin(axis), np.argmin(x, axis=axis), dtype=dtypes.int32)
  xf = randf(3, 5)
  check(Tensor(xf).argmax(axis, keepdim=True),
        np.argmax(xf, axis=axis, keepdims=True) if axis is not None else np.argmax(xf).reshape(1, 1))
  check(Tensor(x > 1).argmax(1), np.argmax(x > 1, axis=1))


def test_reduce_empty_and_size_one():
  check(Tensor.zeros(3, 0).sum(1), np.zeros(3), dtype=dtypes.float32)
  check(Tensor.zeros(0, 3).sum(0), np.zeros(3))
  check(Tensor(np.zeros((0, 3), np.float32)).prod(0), np.ones(3))
  check(Tensor(np.zeros((2, 0, 3), np.float32)).sum((0, 2)), np.zeros(0))
  check(Tensor(np.zeros((0,), np.float32)).mean(), np.array(np.nan))
  x = randf(1, 5, 1)
  check(Tensor(x).sum(0), x.sum(0))
  check(Tensor(x).max((0, 2)), x.max((0, 2)))
  check(Tensor(np.float32(3.5)).sum(), np.float32(3.5))
  check(Tensor(5).max(), 5)


def test_any_all():
  x = np.array([[0, 1], [0, 0]], np.int32)
  check(Tensor(x).any(1), x.any(1), dtype=dtypes.bool)
  check(Tensor(x).all(), x.all(), dtype=dtypes.bool)


def test_reduce_axis_errors():
  x = Tensor(randf(2, 3))
  with pytest.raises(ValueError, match=r"Tensor\.sum: axis 2 is out of range for shape \(2, 3\)"):
    x.sum(2)
  with pytest.raises(ValueError, match="max"):
    x.max(-3)
  with pytest.raises(ValueError, match="repeated"):
    x.sum((0, 0))
  with pytest.raises(TypeError):
    x.sum(1.5)
  with pytest.raises(ValueError, match="argmax"):
    Tensor.zeros(2, 0).argmax(1)


# ---- regressions found by differential fuzzing against numpy

def test_minimum_and_clip_propagate_nan():
  x = np.array([np.nan, 1.0, -2.0], np.float32)
  check(Tensor(x).minimum(0.5), np.minimum(x, 0.5))
  check(Tensor(x).clip(-1.5, 1.5), np.clip(x, -1.5, 1.5))
  i = np.array([np.iinfo(np.int32).min, 3, -4], np.int32)
  check(Tensor(i).minimum(Tensor(np.array([0, 2, 7], np.int32))), np.minimum(i, [0, 2, 7]), dtype=dtypes.int32)
  u = np.array([0, 200, 255], np.uint8)
  check(Tensor(u).minimum(Tensor(np.array([255, 100, 0], np.uint8))), np.minimum(u, [255, 100, 0]), dtype=dtypes.uint8)


def test_pow_negative_bases_and_zero_exponents():
  a = np.array([-2, -2, -8, 0, 0, 0, 1, np.inf, -np.inf, np.nan, -1.5], np.float32)
  b = np.array([3, 2, 1 / 3, 0, -1, 2, np.nan, 0, 3, 0, 4], np.float32)
  with np.errstate(all="ignore"):
    check(Tensor(a) ** Tensor(b), a ** b)
    check(Tensor(a) ** 65, (a.astype(np.float64) ** 65).astype(np.float32), rtol=1e-4)  # past repeated squaring


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 17, 30])
def test_integer_power_of_ints_stays_exact(n):
  x = np.array([3, -2, 0, 1, -1], np.int64)
  check(Tensor(x) ** n, x ** n, dtype=dtypes.int64)
  f = randf(5)
  check(Tensor(f) ** n, f.astype(np.float64) ** n, rtol=1e-5)


@pytest.mark.parametrize("name,ref", [("exp", np.exp), ("log", np.log), ("tanh", np.tanh), ("cos", np.cos),
                                      ("tan", np.tan), ("sigmoid", lambda x: 1 / (1 + np.exp(-x.astype(np.float64))))])
def test_half_transcendentals_within_one_ulp(name, ref):
  lo, hi = {"log": (0.01, 9), "cos": (-300, 300), "tan": (-1.5, 1.5)}.get(name, (-9, 9))
  x = np.linspace(lo, hi, 999).astype(np.float16)
  got = getattr(Tensor(x), name)().numpy()
  want = ref(x).astype(np.float16)
  assert got.dtype == np.float16
  err = np.abs(got.astype(np.float64) - want.astype(np.float64))
  # cos near its zeros: the float32 pi/2 - x keeps an absolute error of ~1e-5 that is many ulps of a tiny result
  ulps = err / np.maximum(np.spacing(np.abs(want)), np.spacing(np.float16(0.25)) if name == "cos" else 0)
  assert ulps.max() <= 1, f"{name}: {ulps.max()} ulps at x={x[ulps.argmax()]}"


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


def test_argmax_argmin_with_nan_pick_the_first_nan():
  x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, -1.0, 0.5, 9.0]], np.float32)
  check(Tensor(x).argmax(1), np.argmax(x, 1), dtype=dtypes.int32)
  check(Tensor(x).argmin(1), np.argmin(x, 1), dtype=dtypes.int32)
  check(Tensor(x).argmax(), np.argmax(x), dtype=dtypes.int32)


def test_float_mod_by_infinity():
  a = np.array([2.0, -2.0, 0.0, 2.0, -2.0, np.inf, 3.0, np.nan, np.nan], np.float32)
  b = np.array([np.inf, np.inf, np.inf, -np.inf, -np.inf, np.inf, 0.0, np.inf, -np.inf], np.float32)
  with np.errstate(all="ignore"):
    check(Tensor(a) % Tensor(b), a % b)


def test_half_mean_var_std_do_not_overflow():
  x = (rng.standard_normal(100000) * 3 + 3).astype(np.float16)  # its sum (3e5) is past half's max (65504)
  x64 = x.astype(np.float64)
  check(Tensor(x).mean(), x64.mean().astype(np.float16), rtol=1e-3, dtype=dtypes.float16)
  check(Tensor(x).var(), x64.var(ddof=1).astype(np.float16), rtol=1e-3, dtype=dtypes.float16)
  check(Tensor(x).std(), x64.std(ddof=1).astype(np.float16), rtol=1e-3, dtype=dtypes.float16)
  check(Tensor(x.reshape(100, 1000)).mean(1, keepdim=True), x64.reshape(100, 1000).mean(1, keepdims=True), rtol=1e-3)


def test_sign_of_nan_is_nan():
  x = np.array([np.nan, -np.inf, -2.0, 0.0, 3.0], np.float32)
  check(Tensor(x).sign(), np.sign(x))


def test_python_ints_widen_or_raise_instead_of_wrapping():
  check(Tensor([2 ** 40, -3]), [2 ** 40, -3], dtype=dtypes.int64)
  check(Tensor(2 ** 40), 2 ** 40, dtype=dtypes.int64)
  check(Tensor.full((2,), 2 ** 33), [2 ** 33] * 2, dtype=dtypes.int64)
  check(Tensor([1, 2]), [1, 2], dtype=dtypes.int32)  # the default int when they fit
  with pytest.raises(OverflowError, match="doesn't fit int64"):
    Tensor([2 ** 63])
  with pytest.raises(OverflowError, match=r"Tensor\.add: the Python int 1099511627776 is out of range for int32"):
    Tensor([1, 2]) + 2 ** 40
  with pytest.raises(OverflowError, match=r"Tensor\.mul: .* -1 .* uint8"):
    Tensor(np.array([5], np.uint8)) * -1
  check(Tensor(np.array([5], np.uint8)) - 3, [2], dtype=dtypes.uint8)
