"""Movement ops and basic indexing against numpy, including empty and size-1 dims, and their errors."""
import numpy as np
import pytest
from support.gradcheck import check_gradient

from compiler import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("backend")


def check(t: Tensor, expected):
  expected = np.asarray(expected)
  got = t.numpy()
  assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
  np.testing.assert_array_equal(got, expected)


rng = np.random.default_rng(99)
X = rng.standard_normal((3, 4, 5)).astype(np.float32)
XI = rng.integers(-50, 50, (3, 4, 5)).astype(np.int32)


@pytest.mark.parametrize("x", [X, XI, XI > 0], ids=["float", "int", "bool"])
@pytest.mark.parametrize("shape", [(60,), (4, 15), (5, -1, 2), (3, 1, 4, 5, 1), (-1,)])
def test_reshape(x, shape):
  check(Tensor(x).reshape(shape), x.reshape(shape))
  check(Tensor(x).reshape(*shape), x.reshape(shape))


def test_reshape_chains_and_views():
  t = Tensor(X)
  check(t.reshape(12, 5).reshape(3, 20).reshape(60), X.reshape(60))
  check(t.reshape(5, 12).permute(1, 0).reshape(3, 4, 5), X.reshape(5, 12).T.reshape(3, 4, 5))
  check(t.view(-1, 5), X.reshape(-1, 5))
  check(t.flatten(), X.flatten())
  check(t.flatten(1), X.reshape(3, 20))
  check(t.flatten(0, 1), X.reshape(12, 5))
  check(t.unflatten(1, (2, 2)), X.reshape(3, 2, 2, 5))
  check(Tensor(np.float32(2.0)).reshape(1, 1), np.full((1, 1), 2.0))
  check(Tensor(np.zeros((0, 4), np.float32)).reshape(2, 0, 2), np.zeros((2, 0, 2)))


@pytest.mark.parametrize("shape,want", [((None, 20), (3, 20)), ((None, None, 5), (3, 4, 5)), ((None, -1), (3, 20)),
                                        ((None, 2, 2, 5), (3, 2, 2, 5)), ([None, 4, 5], (3, 4, 5))])
def test_reshape_none_keeps_the_dim(backend, shape, want):
  check(Tensor(X).reshape(shape), X.reshape(want))
  check(Tensor(X).reshape(*shape), X.reshape(want))


def test_reshape_none_errors():
  with pytest.raises(IndexError, match=r"Tensor\.reshape.*None.*\(3, 4, 5\)"):
    Tensor(X).reshape(60, None, None, None)
  with pytest.raises(ValueError, match=r"Tensor\.reshape.*\(3, 4, 5\)"):
    Tensor(X).reshape(None, 5, 5)
  with pytest.raises(TypeError, match="ints"):
    Tensor(X).reshape(3, "a", 5)


@pytest.mark.parametrize("bad", [(7,), (-1, 7), (-1, -1), (2, -2, 15)])
def test_reshape_errors(bad):
  with pytest.raises(ValueError, match=r"Tensor\.reshape.*\(3, 4, 5\)"):
    Tensor(X).reshape(bad)


@pytest.mark.parametrize("order", [(2, 0, 1), (0, 2, 1), (-1, 0, 1), (0, 1, 2)])
def test_permute(order):
  check(Tensor(X).permute(order), X.transpose(order))


def test_transpose_and_T():
  check(Tensor(X).transpose(0, 2), X.swapaxes(0, 2))
  check(Tensor(X).transpose(-1, -2), X.swapaxes(-1, -2))
  check(Tensor(X).T, X.T)
  check(Tensor(X[0]).T, X[0].T)
  check(Tensor(X[0, 0]).T, X[0, 0].T)
  for bad in [(0, 1), (0, 1, 1), (0, 1, 3)]:
    with pytest.raises(ValueError, match="permute"):
      Tensor(X).permute(bad)


@pytest.mark.parametrize("src,dst", [((1, 5), (4, 5)), ((3, 1, 1), (3, 2, 4)), ((5,), (2, 3, 5)), ((1,), (0,)),
                                     ((), (2, 2)), ((2, 1), (-1, 3))])
def test_expand(src, dst):
  x = rng.standard_normal(src).astype(np.float32)
  want = np.broadcast_to(x, tuple(s if d == -1 else d for s, d in zip((1,) * (len(dst) - len(src)) + src, dst)))
  check(Tensor(x).expand(dst), want)


def test_expand_errors():
  with pytest.raises(ValueError, match=r"Tensor\.expand.*\(3, 4, 5\)"):
    Tensor(X).expand(3, 8, 5)
  with pytest.raises(ValueError, match="expand"):
    Tensor(X).expand(4, 5)


def test_squeeze_unsqueeze():
  x = rng.standard_normal((1, 3, 1, 2)).astype(np.float32)
  check(Tensor(x).squeeze(), x.squeeze())
  check(Tensor(x).squeeze(0), x.squeeze(0))
  check(Tensor(x).squeeze(-2), x.squeeze(-2))
  check(Tensor(x).squeeze(1), x)
  check(Tensor(x).unsqueeze(0), x[None])
  check(Tensor(x).unsqueeze(-1), x[..., None])
  check(Tensor(x).unsqueeze(2), np.expand_dims(x, 2))
  with pytest.raises(ValueError, match="unsqueeze"):
    Tensor(x).unsqueeze(6)


PADS = [((1, 2), (0, 0), (3, 1)), ((0, 0), (2, 2), (0, 0)), (None, (1, 0), None)]


@pytest.mark.parametrize("pads", PADS)
@pytest.mark.parametrize("value", [0.0, 2.5, -np.inf])
def test_pad(pads, value):
  np_pads = [(0, 0) if p is None else p for p in pads]
  check(Tensor(X).pad(pads, value=value), np.pad(X, np_pads, constant_values=value))


def test_pad_flat_negative_int_bool():
  check(Tensor(X).pad((1, 2)), np.pad(X, ((0, 0), (0, 0), (1, 2))))
  check(Tensor(X).pad((1, 2, 0, 3)), np.pad(X, ((0, 0), (0, 3), (1, 2))))
  check(Tensor(X).pad(((-1, 1), None, (0, -2))), np.pad(X[1:, :, :3], ((0, 1), (0, 0), (0, 0))))
  check(Tensor(XI).pad((2, 2), value=7), np.pad(XI, ((0, 0), (0, 0), (2, 2)), constant_values=7))
  b = XI > 0
  check(Tensor(b).pad(((1, 1), None, None)), np.pad(b, ((1, 1), (0, 0), (0, 0))))
  check(Tensor(b).pad(((1, 1), None, None), value=True), np.pad(b, ((1, 1), (0, 0), (0, 0)), constant_values=True))
  check(Tensor(np.zeros((0, 2), np.float32)).pad(((1, 1), None), value=3.0), np.full((2, 2), 3.0))
  for bad in [((1, 1),), (1, 2, 3), ((-5, 0), None, None)]:
    with pytest.raises(ValueError, match="pad"):
      Tensor(X).pad(bad)


def np_circular(a: np.ndarray, pairs) -> np.ndarray:
  """torch's circular pad: the negative pads cut first, the positive ones wrap around what is left."""
  core = a[tuple(slice(-min(b, 0), s + min(e, 0)) for (b, e), s in zip(pairs, a.shape))]
  return np.pad(core, [(max(b, 0), max(e, 0)) for b, e in pairs], mode="wrap")


@pytest.mark.parametrize("pairs", [((-1, 0), (0, 0), (0, 0)), ((0, 0), (-2, -1), (1, -3)), ((1, -1), None, (-2, 3)),
                                   ((-3, 0), (0, 4), None)])
def test_pad_circular_negative(backend, pairs):
  np_pairs = [(0, 0) if p is None else p for p in pairs]
  check(Tensor(X).pad(pairs, mode="circular"), np_circular(X, np_pairs))
  flat = tuple(v for p in reversed(np_pairs) for v in p)
  check(Tensor(XI).pad(flat, mode="circular"), np_circular(XI, np_pairs))


def test_pad_circular_negative_gradient_and_errors():
  g = np.random.default_rng(2)
  check_gradient(lambda t: t.pad(((-1, 2), (1, -2)), mode="circular"), g.standard_normal((3, 4)), rng=g)
  with pytest.raises(ValueError, match=r"circular.*wraps around.*\(2, 4, 5\)"):
    Tensor(X).pad(((-1, 3), None, None), mode="circular")
  with pytest.raises(ValueError, match=r"pad.*removes more"):
    Tensor(X).pad(((-2, -2), None, None), mode="circular")


def test_shrink_flip():
  check(Tensor(X).shrink(((1, 3), None, (2, 5))), X[1:3, :, 2:5])
  check(Tensor(X).shrink(((1, 1), None, None)), X[1:1])
  check(Tensor(X).flip(0), X[::-1])
  check(Tensor(X).flip((0, -1)), X[::-1, :, ::-1])
  check(Tensor(X).flip(), X[::-1, ::-1, ::-1])
  with pytest.raises(ValueError, match="shrink"):
    Tensor(X).shrink(((0, 4), None, None))
  with pytest.raises(ValueError, match="flip"):
    Tensor(X).flip(3)


INDICES = [
  1, -1, (slice(None), 2), (Ellipsis, 0), (slice(1, None), slice(None, None, 2)), (slice(None, None, -1),),
  (slice(None, None, -2), slice(3, 0, -1), slice(None, None, 3)), (None, 0, None, slice(1, 3)),
  (1, Ellipsis, None), (slice(1, 5, 2), Ellipsis, slice(-3, None)), (slice(5, 1),), (0, 0, 0), (slice(-10, 10, 4),),
  (Ellipsis,), (slice(None), None, slice(None, None, -3)),
]


@pytest.mark.parametrize("idx", INDICES, ids=[repr(i) for i in INDICES])
def test_getitem(idx):
  check(Tensor(X)[idx], X[idx])


def test_getitem_errors():
  t = Tensor(X)
  with pytest.raises(IndexError, match="out of bounds"):
    t[3]
  with pytest.raises(IndexError, match=r"too many num_indices=4 for self.ndim=3.*\(3, 4, 5\)"):
    t[0, 0, 0, 0]
  with pytest.raises(IndexError, match=r"indices can only have a single ellipsis.*\(3, 4, 5\)"):
    t[..., ...]
  # Tensor and list indices are advanced indexing (tests/compiler/test_tensor_indexing.py)
  with pytest.raises(TypeError):
    t[1.5]
  with pytest.raises(TypeError):
    t["a"]
  with pytest.raises(ValueError):
    t[::0]


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_stack(dim):
  a, b, c = X, X * 2, rng.standard_normal((3, 4, 5)).astype(np.float32)
  check(Tensor.cat(Tensor(a), Tensor(b), Tensor(c), dim=dim), np.concatenate([a, b, c], dim))
  check(Tensor.stack(Tensor(a), Tensor(b), dim=dim), np.stack([a, b], dim))
  check(Tensor.stack([Tensor(a), Tensor(b)], dim=3), np.stack([a, b], 3))
  check(Tensor(a).cat(Tensor(b), dim=dim), np.concatenate([a, b], dim))


def test_cat_dtypes_and_empty():
  i, f = Tensor(XI[0]), Tensor(X[0])
  out = Tensor.cat(i, f, dim=0)
  assert out.dtype == dtypes.float32
  check(out, np.concatenate([XI[0], X[0]], 0).astype(np.float32))
  b = XI[0] > 0
  check(Tensor.cat(Tensor(b), Tensor(~b)), np.concatenate([b, ~b]))
  check(Tensor.cat(Tensor(X[:, :0]), Tensor(X), dim=1), X)
  with pytest.raises(ValueError, match=r"Tensor\.cat"):
    Tensor.cat(Tensor(X), Tensor(X[:, :2, :2]), dim=1)
  with pytest.raises(ValueError, match="stack"):
    Tensor.stack(Tensor(X), Tensor(X[0]))
  with pytest.raises(TypeError):  # cat is a method (self is the first tensor), as in tinygrad
    Tensor.cat()
  with pytest.raises(ValueError, match="at least one"):
    Tensor.cat([])


@pytest.mark.parametrize("reps", [(2, 1, 1), (1, 3, 2), (2, 1, 1, 2), (1, 0, 1)])
def test_repeat(reps):
  check(Tensor(X).repeat(reps), np.tile(X, reps))
  with pytest.raises(ValueError, match="repeat"):
    Tensor(X).repeat(2, 2)


def test_movement_then_compute_fuses_correctly():
  t = Tensor(X)
  y = (t.permute(2, 0, 1)[1:, ::2] * 2 + t.sum(1).T[1:, None, :1]).pad(((0, 1), None, (1, 1)), value=-1.0).flip(1)
  ref = X.transpose(2, 0, 1)[1:, ::2] * 2 + X.sum(1).T[1:, None, :1]
  ref = np.pad(ref, ((0, 1), (0, 0), (1, 1)), constant_values=-1.0)[:, ::-1]
  np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-5)
