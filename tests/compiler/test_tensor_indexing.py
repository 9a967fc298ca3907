"""Advanced indexing, gather, scatter, scatter_reduce, masks, one_hot, tril/triu, roll, diagonals, unfold, split
family, meshgrid against numpy (torch's rules where they differ), with gradients, on both backends."""
import numpy as np
import pytest
from support.api_helpers import check, specials
from support.gradcheck import check_gradient

from compiler import Tensor

pytestmark = pytest.mark.usefixtures("backend")

rng = np.random.default_rng(3)


def torch_index(a: np.ndarray, idx: tuple) -> np.ndarray:
  """a[idx] by torch's (and tinygrad's) rule: the ints select first, then numpy's rule for the index arrays left
  (numpy itself counts an int as an index array when placing the broadcast dims)."""
  k = next((j for j, i in enumerate(idx) if i is Ellipsis), len(idx))
  n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
  idx = idx[:k] + (slice(None),) * (a.ndim - n_real) + idx[k + 1:]
  ints = tuple(i if isinstance(i, int) else slice(None) for i in idx if i is not None)
  return a[ints][tuple(i for i in idx if not isinstance(i, int))]


IDX = [
  ([0, 1],), (slice(None), [2, 0]), ([1, 0], slice(None), [3, -1]), (slice(None), [[0], [1]], [1, 2, 3]),
  (Ellipsis, [0, 0]), (None, [1], None, 0), ([-1], 1), (1, slice(None), [2, 3]), ([[1]], slice(1, None), 0),
  ([0, 1, 1], [2, 1, 0], [3, 2, 1]), (slice(None), []), ([1, 0], 2, [0, 3]), (slice(None), [0, 2], None, [1, 1]),
  (0, [[2, 0]], slice(None, None, -2)),
]


@pytest.mark.parametrize("idx", IDX, ids=[repr(i) for i in IDX])
def test_getitem_advanced(idx):
  a = specials(2, 3, 4)
  np_idx = tuple(np.array(i, dtype=np.int64) if isinstance(i, list) else i for i in idx)
  ti = tuple(Tensor(i) if isinstance(i, list) and i else i for i in idx)
  ref = torch_index(a, np_idx)
  check((Tensor(a)[ti], ref), (Tensor(a)[idx], ref), exact=True)


def test_getitem_int_next_to_index_tensor_selects_first():
  """An int and an index tensor separated by a slice: torch and tinygrad give (3, 2) where numpy gives (2, 3)."""
  t = Tensor.arange(24).reshape(2, 3, 4)
  want = np.array([[12, 14], [16, 18], [20, 22]])
  # a 0-d index tensor selects like an int, as in torch
  check((t[1, :, Tensor([0, 2])], want), (t[Tensor(1), :, Tensor([0, 2])], want), (t[1, :, [0, 2]], want),
        (t[[1], :, Tensor([0, 2])], np.array([[12, 16, 20], [14, 18, 22]])), exact=True)


def test_getitem_advanced_dtypes_and_errors():
  b = rng.integers(-5, 5, (3, 1, 2)).astype(np.int32)
  m = rng.random((3, 4)) > 0.5
  check((Tensor(b)[[2, 0]], b[[2, 0]]), (Tensor(m)[:, [3, 3, 0]], m[:, [3, 3, 0]]),
        (Tensor(b)[Tensor([[0, 1], [2, 2]]), 0], b[np.array([[0, 1], [2, 2]]), 0]),
        (Tensor(np.zeros((0, 3), np.float32))[:, [1]], np.zeros((0, 1), np.float32)), exact=True)
  x = Tensor(b)
  with pytest.raises(IndexError, match="integers"):
    x[Tensor([0.5])]
  with pytest.raises(IndexError, match="boolean"):
    x[[True, False, True]]
  with pytest.raises(IndexError, match=r"too many num_indices=4 for self.ndim=3.*\(3, 1, 2\)"):
    x[[0], 0, 0, 0]
  with pytest.raises(IndexError, match="indices can only have a single ellipsis"):
    x[..., [0], ...]
  with pytest.raises(IndexError, match=r"\(2,\), \(3,\).*broadcast"):
    x[Tensor([0, 1]), :, Tensor([0, 1, 0])]


# the values a selection must pass exactly: -inf (ties with MAX's fill), nan, -0.0 (a sum from +0.0 loses its sign)
SPECIAL = np.array([-np.inf, np.nan, -0.0, 0.0, 2.0, np.inf])
SPECIAL_IDX = np.array([0, 0, 1, 2, 3, 2, 4, 5])
W = np.arange(1.0, 9.0)


@pytest.mark.parametrize("select", ["gather", "tensor", "list", "2d"])
def test_selection_of_special_values_is_exact_with_exact_gradient(select):
  """Each element's gradient is the sum of the weights of the places that select it (torch's), whatever its value."""
  x = Tensor(SPECIAL, requires_grad=True)
  fns = {"gather": lambda: x.gather(0, Tensor(SPECIAL_IDX)), "tensor": lambda: x[Tensor(SPECIAL_IDX)],
         "list": lambda: x[SPECIAL_IDX.tolist()],
         "2d": lambda: x.reshape(1, 6)[Tensor([0]), Tensor(SPECIAL_IDX)].reshape(8)}
  y = fns[select]()
  g = (y * Tensor(W)).sum().gradient(x)[0]
  check((y, SPECIAL[SPECIAL_IDX]), (g, np.bincount(SPECIAL_IDX, W, minlength=6)), exact=True)


def test_gather_of_minus_inf_has_torch_gradient():
  x = Tensor([-np.inf, 2.0, 3.0], requires_grad=True)
  y = x.gather(0, Tensor([2, 1, 0, 1, 2]))
  check((y, np.array([3.0, 2.0, -np.inf, 2.0, 3.0])), (y.sum().gradient(x)[0], np.array([1.0, 2.0, 2.0])), exact=True)


def test_selection_gradients_against_finite_differences():
  g = np.random.default_rng(5)
  a = g.standard_normal((3, 4, 5))
  idx = g.integers(-3, 3, (2, 4, 2)).astype(np.int32)
  check_gradient(lambda t: t.gather(1, Tensor(np.abs(idx) % 4)), a, rng=g)
  check_gradient(lambda t: t[Tensor(idx[0, :, 0]), 1:, Tensor(idx[1, :, 1])], a, rng=g)
  check_gradient(lambda t: t[1, :, [0, 2, 2]], a, rng=g)
  check_gradient(lambda t: t.masked_select(Tensor(a > 0.3)), a, rng=g)
  check_gradient(lambda t: t.masked_select(Tensor(a > 0.3), size=70, fill_value=1.5), a, rng=g)


@pytest.mark.parametrize("shape,dim,ishape", [((3, 4), 1, (3, 2)), ((3, 4), 0, (2, 4)), ((2, 3, 4), -1, (2, 2, 5)),
                                              ((2, 3, 4), -2, (1, 3, 2)), ((1, 5), 1, (1, 1)), ((3, 0), 0, (2, 0))])
def test_gather(shape, dim, ishape):
  x = specials(*shape) if np.prod(shape) else np.zeros(shape, np.float32)
  n = shape[dim]
  idx = rng.integers(0, max(n, 1), ishape).astype(np.int32)
  xs = x[tuple(slice(0, s) if k != dim % len(shape) else slice(None) for k, s in enumerate(ishape))]
  ref = np.take_along_axis(xs, idx, dim) if idx.size else np.zeros(ishape, np.float32)
  xi = np.nan_to_num(x * 10, posinf=99, neginf=-99).astype(np.int32) if x.size else x.astype(np.int32)
  xi_s = xi[tuple(slice(0, s) if k != dim % len(shape) else slice(None) for k, s in enumerate(ishape))]
  refi = np.take_along_axis(xi_s, idx, dim) if idx.size else np.zeros(ishape, np.int32)
  check((Tensor(x).gather(dim, Tensor(idx)), ref), (Tensor(xi).gather(dim, Tensor(idx)), refi), exact=True)


def test_gather_bool_and_errors():
  m = np.array([[True, False], [False, True]])
  check((Tensor(m).gather(1, Tensor([[1, 1], [0, 1]])), np.array([[False, False], [False, True]])), exact=True)
  with pytest.raises(RuntimeError, match="gather"):
    Tensor(m).gather(0, Tensor([1, 0]))
  with pytest.raises(RuntimeError, match="integer"):
    Tensor(m).gather(0, Tensor([[1.0]]))
  with pytest.raises(RuntimeError, match=r"\(3, 2\).*\(2, 2\)"):
    Tensor(m).gather(1, Tensor(np.zeros((3, 2), np.int32)))


def np_scatter(x, dim, idx, src, reduce=None, include_self=True):
  """torch.scatter / scatter_reduce semantics, by loops."""
  out = x.astype(np.float64).copy()
  touched = np.zeros(x.shape, bool)
  acc: dict = {}
  for pos in np.ndindex(*idx.shape):
    tgt = list(pos)
    tgt[dim] = idx[pos]
    acc.setdefault(tuple(tgt), []).append(src[pos])
  for tgt, vals in acc.items():
    touched[tgt] = True
    base = [out[tgt]] if include_self else []
    if reduce is None:
      out[tgt] = vals[-1]
    elif reduce == "sum":
      out[tgt] = sum(base + vals)
    elif reduce == "prod":
      out[tgt] = np.prod(base + vals)
    elif reduce == "amax":
      out[tgt] = max(base + vals)
    elif reduce == "amin":
      out[tgt] = min(base + vals)
    elif reduce == "mean":
      out[tgt] = sum(base + vals) / len(base + vals)
  return out.astype(x.dtype)


@pytest.mark.parametrize("shape,dim,ishape", [((3, 5), 0, (2, 4)), ((3, 5), 1, (2, 3)), ((2, 3, 4), -1, (2, 2, 6)),
                                              ((4,), 0, (4,)), ((1, 1), 0, (1, 1)), ((3, 2), 1, (0, 2))])
def test_scatter_and_reduce(shape, dim, ishape):
  d = dim % len(shape)
  x = rng.standard_normal(shape).astype(np.float32)
  src = rng.standard_normal(ishape).astype(np.float32) + 3
  idx = rng.integers(0, shape[d], ishape).astype(np.int32)
  pairs = [(Tensor(x).scatter(dim, Tensor(idx), Tensor(src)), np_scatter(x, d, idx, src)),
           (Tensor(x).scatter(dim, Tensor(idx), 2.5), np_scatter(x, d, idx, np.full(ishape, 2.5))),
           (Tensor(x).scatter(dim, Tensor(idx), 2.0, reduce="add"), np_scatter(x, d, idx, np.full(ishape, 2.0), "sum"))]
  for r in ("sum", "prod", "mean", "amax", "amin"):
    for inc in (True, False):
      pairs.append((Tensor(x).scatter_reduce(dim, Tensor(idx), Tensor(src), r, include_self=inc),
                    np_scatter(x, d, idx, src, r, inc)))
  check(*pairs)


def test_scatter_ints_and_errors():
  x = np.arange(12, dtype=np.int32).reshape(3, 4)
  idx = np.array([[0, 2, 2, 1]], np.int32)
  src = np.array([[7, -8, 9, 10]], np.int32)
  check((Tensor(x).scatter(0, Tensor(idx), Tensor(src)), np_scatter(x, 0, idx, src)),
        (Tensor(x).scatter_reduce(0, Tensor(idx), Tensor(src), "amin"), np_scatter(x, 0, idx, src, "amin")),
        (Tensor(x).scatter_reduce(0, Tensor(idx), Tensor(src), "mean", include_self=False),
         np.array([[7, 1, 2, 3], [4, 5, 6, 10], [8, -8, 9, 11]], np.int32)), exact=True)
  with pytest.raises(TypeError, match="reduce"):
    Tensor(x).scatter(0, Tensor(idx), Tensor(src), reduce="add")
  with pytest.raises(RuntimeError, match="dtype"):
    Tensor(x).scatter(0, Tensor(idx), Tensor(src.astype(np.float32)))
  with pytest.raises(RuntimeError, match="reduce"):
    Tensor(x).scatter_reduce(0, Tensor(idx), Tensor(src), "max")


def test_masks():
  a = specials(3, 4)
  m = rng.random((3, 4)) > 0.5
  m1 = np.array([True, False, True, True])
  check((Tensor(a).masked_fill(Tensor(m), -7.0), np.where(m, np.float32(-7), a)),
        (Tensor(a).masked_fill(Tensor(m1), Tensor(2.0)), np.where(m1, np.float32(2), a)), exact=True)
  check((Tensor(a).masked_select(Tensor(m)), a[m]), exact=True)
  check((Tensor(a).masked_select(Tensor(m1)), a[np.broadcast_to(m1, a.shape)]), exact=True)
  check((Tensor(a).masked_select(Tensor(np.zeros((3, 4), bool))), np.zeros(0, np.float32)), exact=True)
  z = np.array([[0, 1, 0], [2, 0, 3]], np.int32)
  check((Tensor(z).nonzero(), np.argwhere(z)), (Tensor(a).nonzero(), np.argwhere(a)), exact=True)
  with pytest.raises(RuntimeError, match=r"masked_select.*bool.*\(2, 3\).*\(3, 4\)"):
    Tensor(a).masked_select(Tensor(z))
  with pytest.raises(ValueError, match=r"masked_select.*\(2,\).*\(3, 4\)"):
    Tensor(a).masked_select(Tensor([True, False]))


def test_one_hot_tri_roll():
  y = np.array([[0, 3], [2, 1]], np.int32)
  x = specials(3, 4)
  i8 = np.arange(24, dtype=np.int8).reshape(2, 3, 4)
  check((Tensor(y).one_hot(5), np.eye(5, dtype=np.int32)[y]), (Tensor(y).one_hot(), np.eye(4, dtype=np.int32)[y]),
        (Tensor(x).triu(), np.triu(x)), (Tensor(x).tril(-1), np.tril(x, -1)), (Tensor(i8).triu(2), np.triu(i8, 2)),
        (Tensor(i8).tril(5), np.tril(i8, 5)), (Tensor(x).roll(2, 1), np.roll(x, 2, 1)),
        (Tensor(x).roll(-5, -2), np.roll(x, -5, -2)), (Tensor(i8).roll((1, -1), (0, 2)), np.roll(i8, (1, -1), (0, 2))),
        (Tensor(x).roll(3), np.roll(x, 3)), (Tensor(np.zeros((0, 3), np.float32)).roll(1, 0), np.zeros((0, 3))),
        exact=True)
  with pytest.raises(RuntimeError, match="integer"):
    Tensor(x).one_hot(3)
  with pytest.raises(RuntimeError, match=r"tril.*\(4,\)"):
    Tensor([1, 2, 3, 4]).tril()


def test_repeat_interleave_split_chunk_unbind_meshgrid():
  x = specials(3, 4)
  check((Tensor(x).repeat_interleave(2), np.repeat(x, 2)), (Tensor(x).repeat_interleave(3, -1), np.repeat(x, 3, -1)),
        (Tensor(x).repeat_interleave(0, 0), np.repeat(x, 0, 0)), exact=True)
  for t, ref in zip(Tensor(x).split(3, 1), np.split(x, [3], 1)):
    check((t, ref), exact=True)
  for t, ref in zip(Tensor(x).split([1, 0, 2], 0), np.split(x, [1, 1], 0)):
    check((t, ref), exact=True)
  assert [t.shape for t in Tensor(x).chunk(3, -1)] == [(3, 2), (3, 2)]
  assert [t.shape for t in Tensor.ones(5, 2).chunk(3)] == [(2, 2), (2, 2), (1, 2)]
  parts = Tensor(x).unbind(1)
  check(*zip(parts, [x[:, i] for i in range(4)]), exact=True)
  a, b = np.array([1, 2, 3], np.int32), np.array([4.0, 5.0], np.float32)
  for ix in ("ij", "xy"):
    got = Tensor(a).meshgrid(Tensor(b), indexing=ix)
    check(*zip(got, np.meshgrid(a, b, indexing=ix)), exact=True)
  with pytest.raises(RuntimeError, match="split"):
    Tensor(x).split([1, 1], 0)
  with pytest.raises(RuntimeError, match="indexing"):
    Tensor(a).meshgrid(Tensor(b), indexing="ji")


def test_masked_select_and_nonzero_with_size():
  """size=N: the first N selected, then fill_value (tinygrad's), without realizing the count."""
  a = specials(3, 4)
  m = np.array([[True, False, True, False], [False, True, True, False], [False, False, False, True]])
  z = np.array([[0, 1, 0], [2, 0, 3]], np.int32)
  sel = a[m]
  check((Tensor(a).masked_select(Tensor(m), size=8, fill_value=-1.5), np.concatenate([sel, [-1.5] * 3])),
        (Tensor(a).masked_select(Tensor(m), size=3), sel[:3]), (Tensor(a).masked_select(Tensor(m), size=0), sel[:0]),
        (Tensor(z).masked_select(Tensor(z > 0), size=4, fill_value=7), np.array([1, 2, 3, 7], np.int32)),
        (Tensor(z).nonzero(size=5, fill_value=-1), np.concatenate([np.argwhere(z), [[-1, -1]] * 2])),
        (Tensor(z).nonzero(size=2), np.argwhere(z)[:2]), (Tensor(a).nonzero(size=20), np.concatenate(
          [np.argwhere(a), np.zeros((20 - np.count_nonzero(a), 2), np.int64)])), exact=True)
  assert Tensor(np.float32(2.0)).nonzero(size=3).shape == (3, 0)
  with pytest.raises(ValueError, match=r"masked_select.*size.*-1.*\(3, 4\)"):
    Tensor(a).masked_select(Tensor(m), size=-1)
  with pytest.raises(ValueError, match=r"nonzero.*size"):
    Tensor(z).nonzero(size=2.5)


def test_roll_tuple_shifts_without_dims():
  x = specials(3, 4)
  check((Tensor(x).roll((1,)), np.roll(x, 1)), (Tensor(x).roll([-5]), np.roll(x, -5)), exact=True)
  with pytest.raises(RuntimeError, match=r"roll.*\(1, 2\).*\(3, 4\)"):
    Tensor(x).roll((1, 2))


DIAGONALS = [(0, 0, 1), (1, 1, 2), (-1, 2, 1), (2, -1, 0), (-2, 0, 2), (5, 0, 1), (-4, 1, 2)]


@pytest.mark.parametrize("offset,dim1,dim2", DIAGONALS)
def test_diagonal(offset, dim1, dim2):
  a = specials(2, 3, 4)
  i = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
  check((Tensor(a).diagonal(offset, dim1, dim2), np.diagonal(a, offset, dim1, dim2)),
        (Tensor(i).diagonal(offset, dim1, dim2), np.diagonal(i, offset, dim1, dim2)), exact=True)


def test_diag_and_errors():
  v = specials(4)
  m = specials(3, 5)
  b = np.array([True, False, True])
  check(*((Tensor(v).diag(k), np.diag(v, k)) for k in (0, 2, -1)), *((Tensor(m).diag(k), np.diag(m, k))
                                                                   for k in (0, 3, -2, 7)),
        (Tensor(b).diag(), np.diag(b)), (Tensor(np.zeros(0, np.float32)).diag(), np.zeros((0, 0))), exact=True)
  with pytest.raises(ValueError, match=r"diag.*\(2, 3, 4\)"):
    Tensor(np.zeros((2, 3, 4))).diag()
  with pytest.raises(ValueError, match=r"diagonal.*\(4,\)"):
    Tensor(v).diagonal()
  with pytest.raises(ValueError, match=r"diagonal.*same dim 1.*\(3, 5\)"):
    Tensor(m).diagonal(0, 1, -1)
  with pytest.raises(IndexError, match=r"diagonal.*axis 2.*\(3, 5\)"):
    Tensor(m).diagonal(0, 0, 2)


def np_unfold(a: np.ndarray, dim: int, size: int, step: int) -> np.ndarray:
  """torch's Tensor.unfold: dim becomes the window count, a last dim the window."""
  d = dim % a.ndim
  w = np.lib.stride_tricks.sliding_window_view(a, size, axis=d)
  return np.take(w, np.arange(0, w.shape[d], step), axis=d)


@pytest.mark.parametrize("shape,dim,size,step", [((8,), 0, 2, 2), ((3, 3, 3), -1, 2, 3), ((2, 7, 3), 1, 3, 2),
                                                 ((4, 5), 0, 4, 1), ((5, 2), 0, 1, 7), ((2, 3), 1, 0, 1)])
def test_unfold(shape, dim, size, step):
  a = specials(*shape)
  check((Tensor(a).unfold(dim, size, step), np_unfold(a, dim, size, step)), exact=True)


def test_unfold_errors():
  t = Tensor(np.zeros((2, 3), np.float32))
  with pytest.raises(RuntimeError, match=r"maximum size for tensor at dimension 1 is 3 but size is 4.*\(2, 3\)"):
    t.unfold(1, 4, 1)
  with pytest.raises(RuntimeError, match="step must be > 0"):
    t.unfold(0, 1, 0)
  with pytest.raises(RuntimeError, match="size must be >= 0"):
    t.unfold(0, -1, 1)
  with pytest.raises(IndexError, match=r"unfold.*axis 2"):
    t.unfold(2, 1, 1)


def test_diagonal_diag_unfold_roll_gradients():
  g = np.random.default_rng(11)
  check_gradient(lambda t: t.diagonal(1, 2, 0), g.standard_normal((3, 2, 4)), rng=g)
  check_gradient(lambda t: t.diag(-1), g.standard_normal(3), rng=g)
  check_gradient(lambda t: t.diag(1), g.standard_normal((3, 4)), rng=g)
  check_gradient(lambda t: t.unfold(1, 3, 2), g.standard_normal((2, 7, 2)), rng=g)
  check_gradient(lambda t: t.roll((2,)), g.standard_normal((2, 3)), rng=g)
