"""Compound ops (matmul, linear, softmax, layernorm, conv2d, pooling) and the bench workloads against numpy."""
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import Tensor, dtypes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.workloads import WORKLOADS  # noqa: E402

rng = np.random.default_rng(7)


def randf(*shape):
  return rng.standard_normal(shape).astype(np.float32)


def close(t: Tensor, ref, rtol=1e-4, atol=1e-5):
  got = t.numpy()
  assert got.shape == np.shape(ref), f"shape {got.shape} != {np.shape(ref)}"
  np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
                                   ((2, 1, 3, 4), (5, 4, 2)), ((1, 4), (4, 1)), ((3, 0), (0, 2))])
def test_matmul(sa, sb):
  a, b = randf(*sa), randf(*sb)
  close(Tensor(a) @ Tensor(b), a @ b)
  close(Tensor(a).dot(Tensor(b)), a @ b)


def test_matmul_int_and_errors():
  a, b = rng.integers(-5, 5, (3, 4)).astype(np.int32), rng.integers(-5, 5, (4, 2)).astype(np.int32)
  out = Tensor(a) @ Tensor(b)
  assert out.dtype == dtypes.int32
  np.testing.assert_array_equal(out.numpy(), a @ b)
  with pytest.raises(RuntimeError, match=r"Tensor\.matmul.*\(3, 4\).*\(3, 4\)"):  # tinygrad's type
    Tensor(a) @ Tensor(a)
  with pytest.raises(RuntimeError, match="matmul"):
    Tensor(a) @ Tensor(3)
  with pytest.raises(RuntimeError, match="matmul"):
    Tensor(randf(2, 3, 4)) @ Tensor(randf(3, 4, 5))
  with pytest.raises(TypeError, match="matmul"):
    Tensor(a).dot(np.ones((4, 2)))


def test_linear():
  x, w, b = randf(5, 3), randf(3, 4), randf(4)
  close(Tensor(x).linear(Tensor(w), Tensor(b)), x @ w + b)
  close(Tensor(x).linear(Tensor(w)), x @ w)


def _np_softmax(x, axis):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_log_softmax(axis):
  x = randf(4, 6, 3) * 5
  close(Tensor(x).softmax(axis), _np_softmax(x, axis))
  close(Tensor(x).log_softmax(axis), np.log(_np_softmax(x, axis)), atol=1e-4)
  close(Tensor(np.array([1000.0, 0.0], np.float32)).softmax(), [1.0, 0.0])  # no overflow
  close(Tensor(np.array([1, 2, 3], np.int32)).softmax(), _np_softmax(np.array([1.0, 2, 3]), -1))


@pytest.mark.parametrize("axis", [-1, (1, 2)])
def test_layernorm(axis):
  x = randf(3, 4, 5)
  mu = x.mean(axis, keepdims=True)
  ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis, keepdims=True) + 1e-5)
  close(Tensor(x).layernorm(axis), ref, rtol=1e-3, atol=1e-4)


def np_conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
  x = np.pad(x, ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1])))
  bs, _, h, wd = x.shape
  cout, cpg, kh, kw = w.shape
  oh, ow = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1, (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
  out = np.zeros((bs, cout, oh, ow), np.float64)
  for o in range(cout):
    g = o // (cout // groups)
    for ky in range(kh):
      for kx in range(kw):
        ys, xs = ky * dilation[0], kx * dilation[1]
        rows = slice(ys, ys + stride[0] * (oh - 1) + 1, stride[0])
        cols = slice(xs, xs + stride[1] * (ow - 1) + 1, stride[1])
        patch = x[:, g * cpg:(g + 1) * cpg, rows, cols]
        out[:, o] += np.einsum("bchw,c->bhw", patch, w[o, :, ky, kx])
  return out.astype(np.float32)


CONV_CASES = [
  dict(), dict(stride=2), dict(padding=1), dict(dilation=2), dict(groups=2), dict(stride=(2, 1), padding=(1, 2)),
  dict(stride=3, padding=2, dilation=2, groups=2), dict(stride=7),
]


@pytest.mark.parametrize("kw", CONV_CASES, ids=[str(c) for c in CONV_CASES])
def test_conv2d(kw):
  groups = kw.get("groups", 1)
  x, w, b = randf(2, 4, 9, 8), randf(6, 4 // groups, 3, 2), randf(6)
  pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
  ref = np_conv2d(x, w, pair(kw.get("stride", 1)), pair(kw.get("padding", 0)), pair(kw.get("dilation", 1)), groups)
  close(Tensor(x).conv2d(Tensor(w), **kw), ref, rtol=1e-4, atol=1e-4)
  close(Tensor(x).conv2d(Tensor(w), Tensor(b), **kw), ref + b.reshape(1, -1, 1, 1), rtol=1e-4, atol=1e-4)


def test_conv2d_errors():
  # shape mismatches are RuntimeErrors (tinygrad, torch); a bad argument value is a ValueError
  x = Tensor(randf(1, 4, 5, 5))
  with pytest.raises(RuntimeError, match=r"conv2d.*\(1, 4, 5, 5\).*\(6, 2, 3, 3\).*groups=3"):
    x.conv2d(Tensor(randf(6, 2, 3, 3)), groups=3)
  with pytest.raises(RuntimeError, match=r"conv2d.*\(1, 4, 5, 5\).*\(6, 4, 3\)"):
    x.conv2d(Tensor(randf(6, 4, 3)))
  with pytest.raises(RuntimeError, match="doesn't fit"):
    x.conv2d(Tensor(randf(2, 4, 7, 7)))
  with pytest.raises(ValueError, match="stride"):
    x.conv2d(Tensor(randf(2, 4, 3, 3)), stride=0)
  with pytest.raises(RuntimeError, match=r"bias.*\(3,\).*\(2,\)"):
    x.conv2d(Tensor(randf(2, 4, 3, 3)), Tensor(randf(3)))
  with pytest.raises(RuntimeError, match="crops more"):
    x.conv2d(Tensor(randf(2, 4, 1, 1)), padding=-3)


@pytest.mark.parametrize("padding,crop", [
  (-1, ((1, 1), (1, 1))),  # every side cropped by 1
  ((-1, 2), ((1, 1), (-2, -2))),  # per dim: rows cropped, columns padded
  ((1, -2, 0, -1), ((0, 1), (-1, 2))),  # torch's flat order (left, right, top, bottom): mixed
])
def test_conv2d_negative_padding_crops(padding, crop):
  # a negative pad removes input rows/columns, as tinygrad (crop gives what each side loses; negative = a pad)
  x, w = randf(2, 3, 7, 6), randf(4, 3, 2, 3)
  xs = x[:, :, max(0, crop[0][0]):x.shape[2] - max(0, crop[0][1]), max(0, crop[1][0]):x.shape[3] - max(0, crop[1][1])]
  xs = np.pad(xs, ((0, 0), (0, 0), (max(0, -crop[0][0]), max(0, -crop[0][1])), (max(0, -crop[1][0]),
                                                                               max(0, -crop[1][1]))))
  close(Tensor(x).conv2d(Tensor(w), padding=padding), np_conv2d(xs, w), rtol=1e-4, atol=1e-4)


def _np_pool(x, k, s, pad, fill, fn):
  x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
  oh, ow = (x.shape[2] - k) // s + 1, (x.shape[3] - k) // s + 1
  out = np.empty(x.shape[:2] + (oh, ow), np.float32)
  for i in range(oh):
    for j in range(ow):
      out[:, :, i, j] = fn(x[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
  return out


@pytest.mark.parametrize("k,s,pad", [(2, None, 0), (3, 1, 1), (3, 2, 0), (2, 3, 1)])
def test_pools(k, s, pad):
  x = randf(2, 3, 7, 7)
  st = k if s is None else s
  close(Tensor(x).max_pool2d(k, s, padding=pad), _np_pool(x, k, st, pad, -np.inf, np.max))
  close(Tensor(x).avg_pool2d(k, s, padding=pad), _np_pool(x, k, st, pad, 0.0, np.mean))
  xi = rng.integers(-9, 9, (1, 2, 6, 6)).astype(np.int32)
  np.testing.assert_array_equal(Tensor(xi).max_pool2d(2).numpy(), _np_pool(xi, 2, 2, 0, 0, np.max).astype(np.int32))
  with pytest.raises(ValueError, match="kernel_size"):
    Tensor(x).max_pool2d(0)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workloads_match_numpy(name):
  w = WORKLOADS[name](scale=0.125)
  close(w.lazy(), w.expected(), rtol=w.rtol, atol=1e-4)


def test_conv_and_pool_argument_errors():
  x = Tensor(randf(1, 3, 5, 5))
  with pytest.raises(TypeError, match=r"Tensor\.conv2d: weight and bias must be Tensors, got ndarray"):
    x.conv2d(randf(2, 3, 3, 3))
  with pytest.raises(ValueError, match=r"Tensor\.max_pool2d: needs an input of at least 2 dims, got shape \(5,\)"):
    Tensor(randf(5)).max_pool2d()
  with pytest.raises(ValueError, match=r"Tensor\.avg_pool2d: stride"):
    x.avg_pool2d(2, stride=(1, 1, 1))
  # numpy ints are ints
  close(x.max_pool2d(np.int64(2), stride=np.int32(2)), x.max_pool2d(2).numpy())
