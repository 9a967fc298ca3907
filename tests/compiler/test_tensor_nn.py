"""The nn theme against numpy: compound ops (matmul, linear, softmax, layernorm, conv2d, pooling) and the bench
workloads; losses, scaled_dot_product_attention, interpolate, conv_transpose2d, einsum, linspace and initializers
(torch's formulas written out), on every backend. (The second half's random data comes from its own `api_rng`.)"""
import sys
from pathlib import Path

import numpy as np
import pytest
from support.api_helpers import check

from compiler import Tensor, dtypes

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.workloads import WORKLOADS  # noqa: E402

pytestmark = pytest.mark.usefixtures("backend")

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


# ---- the API half (losses, attention, interpolate, conv_transpose2d)
api_rng = np.random.default_rng(13)


def api_randf(*s):
  return api_rng.standard_normal(s).astype(np.float32)


def np_log_softmax(x, axis):
  m = x.max(axis, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def _reduce(v, reduction):
  return v if reduction == "none" else v.sum() if reduction == "sum" else v.mean()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 3), (1, 1)])
def test_cross_entropy_nll(reduction, shape):
  x = api_randf(*shape)
  y = api_rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(np.int32)
  lsm = np_log_softmax(x, 1)
  picked = np.take_along_axis(lsm, np.expand_dims(y, 1), 1).squeeze(1)
  w = api_rng.random(shape[1]).astype(np.float32) + 0.5
  wy = w[y]
  nll_w = -picked * wy
  nll_w_ref = nll_w.sum() / wy.sum() if reduction == "mean" else _reduce(nll_w, reduction)
  ignore = int(y.reshape(-1)[0])
  keep = (y != ignore).astype(np.float32)
  nll_i = -picked * keep
  with np.errstate(invalid="ignore"):  # every label ignored: 0 / 0, nan as torch
    nll_i_ref = nll_i.sum() / keep.sum() if reduction == "mean" else _reduce(nll_i, reduction)
  onehot = np.moveaxis(np.eye(shape[1], dtype=np.float32)[y], -1, 1)
  smooth = 0.9 * onehot + 0.1 / shape[1]
  probs = np.exp(np_log_softmax(api_randf(*shape), 1))
  with np.errstate(all="ignore"):
    check((Tensor(x).cross_entropy(Tensor(y), reduction=reduction), _reduce(-picked, reduction)),
          (Tensor(x).cross_entropy(Tensor(y), reduction=reduction, label_smoothing=0.1),
           _reduce(-(lsm * smooth).sum(1), reduction)),
          (Tensor(x).cross_entropy(Tensor(probs), reduction=reduction), _reduce(-(lsm * probs).sum(1), reduction)),
          (Tensor(lsm).nll_loss(Tensor(y), reduction=reduction), _reduce(-picked, reduction)),
          (Tensor(lsm).nll_loss(Tensor(y), Tensor(w), reduction=reduction), nll_w_ref),
          (Tensor(lsm).nll_loss(Tensor(y), ignore_index=ignore, reduction=reduction), nll_i_ref), rtol=1e-5, atol=1e-5)


def test_cross_entropy_infinite_logit():
  # a -inf logit of another class has probability 0, not nan (the one-hot product gave 0 * -inf)
  x = np.array([[-np.inf, 1.0, 0.0], [2.0, -np.inf, -1.0]], np.float32)
  lsm = np_log_softmax(np.where(np.isinf(x), -1e30, x), 1)
  check((Tensor(x).cross_entropy(Tensor([1, 0]), reduction="none"), -lsm[[0, 1], [1, 0]]))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_sparse_categorical_crossentropy(reduction):
  x = api_randf(2, 4, 5)
  y = api_rng.integers(0, 5, (2, 4)).astype(np.int32)
  lsm = np_log_softmax(x, -1)
  picked = np.take_along_axis(lsm, y[..., None], -1)[..., 0]
  keep = (y != 2)
  ls = 0.2
  unred = (1 - ls) * picked + ls * lsm.mean(-1)
  unred_i = np.where(keep, unred, 0)
  ref = -unred.mean() if reduction == "mean" else -_reduce(unred, reduction)
  ref_i = -unred_i.sum() / keep.sum() if reduction == "mean" else -_reduce(unred_i, reduction)
  check((Tensor(x).sparse_categorical_crossentropy(Tensor(y), label_smoothing=ls, reduction=reduction), ref),
        (Tensor(x).sparse_categorical_crossentropy(Tensor(y), ignore_index=2, label_smoothing=ls, reduction=reduction),
         ref_i), rtol=1e-5, atol=1e-5)


def test_binary_crossentropy():
  p = np.array([0.1, 0.9, 0.2, 0.0, 1.0, 0.5], np.float32)
  y = np.array([0, 1, 1, 0, 0, 1], np.float32)
  with np.errstate(divide="ignore"):
    bce = -(y * np.maximum(np.log(p), -100) + (1 - y) * np.maximum(np.log(1 - p), -100))
  z = np.array([-1, 2, -3, 100, -100, 0], np.float32)
  pw = np.float32(2.0)
  lsig = -np.logaddexp(0, -z.astype(np.float64))
  lsig_neg = -np.logaddexp(0, z.astype(np.float64))
  bcel = -(y * lsig + (1 - y) * lsig_neg)
  bcel_pw = -(pw * y * lsig + (1 - y) * lsig_neg)
  check((Tensor(p).binary_crossentropy(Tensor(y)), bce.mean()),
        (Tensor(p).binary_crossentropy(Tensor(y), reduction="none"), bce),
        (Tensor(z).binary_crossentropy_logits(Tensor(y), reduction="sum"), bcel.sum()),
        (Tensor(z).binary_crossentropy_logits(Tensor(y), reduction="none", pos_weight=Tensor(pw)), bcel_pw), rtol=1e-5)
  with pytest.raises(ValueError, match="reduction"):
    Tensor(p).binary_crossentropy(Tensor(y), reduction="avg")


def np_sdpa(q, k, v, mask=None, causal=False):
  s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
  if causal:
    mask = np.tril(np.ones(s.shape[-2:], bool))
  if mask is not None:
    s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
  e = np.exp(s - s.max(-1, keepdims=True))
  return (e / e.sum(-1, keepdims=True)) @ v


def test_scaled_dot_product_attention():
  q, k, v = api_randf(2, 3, 4, 8), api_randf(2, 3, 6, 8), api_randf(2, 3, 6, 5)
  bmask = api_rng.random((4, 6)) > 0.3
  bmask[:, 0] = True
  fmask = api_randf(4, 6)
  q2 = api_randf(5, 8)
  check((Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v)), np_sdpa(q, k, v)),
        (Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), Tensor(bmask)), np_sdpa(q, k, v, bmask)),
        (Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), Tensor(fmask)), np_sdpa(q, k, v, fmask)),
        (Tensor(q2).scaled_dot_product_attention(Tensor(q2), Tensor(q2), is_causal=True),
         np_sdpa(q2, q2, q2, causal=True)), rtol=1e-4, atol=1e-5)
  # dropout_p drops only while training (tinygrad)
  check((Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), dropout_p=0.1), np_sdpa(q, k, v)), rtol=1e-4,
        atol=1e-5)


def np_interp_axis(x, axis, n_out, mode, align):
  n_in = x.shape[axis]
  o = np.arange(n_out, dtype=np.float64)
  if mode == "linear":
    if align:
      src = o * ((n_in - 1) / (n_out - 1)) if n_out > 1 else o * 0
    else:
      src = np.maximum((o + 0.5) * n_in / n_out - 0.5, 0)
    src = np.minimum(src, n_in - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = (src - lo).reshape([-1 if k == axis % x.ndim else 1 for k in range(x.ndim)])
    a, b = np.take(x, lo, axis), np.take(x, hi, axis)
    return a + (b - a) * frac
  src = (o + 0.5) * n_in / n_out if mode == "nearest-exact" else o * n_in / n_out
  return np.take(x, np.minimum(np.floor(src).astype(int), n_in - 1), axis)


@pytest.mark.parametrize("mode,align", [("linear", False), ("linear", True), ("nearest", False),
                                        ("nearest-exact", False), ("bilinear", True)])
def test_interpolate(mode, align):
  x = api_randf(2, 3, 5, 4)
  pairs = []
  for size in [(7, 3), (5, 4), (1, 9), (2, 1), (10,)]:
    ref = x.astype(np.float64)
    for i in range(-1, -len(size) - 1, -1):
      ref = np_interp_axis(ref, i, size[i], "linear" if mode == "bilinear" else mode, align)
    pairs.append((Tensor(x).interpolate(size, mode=mode, align_corners=align), ref))
  check(*pairs, rtol=1e-5, atol=1e-5)


def test_interpolate_errors():
  x = Tensor.ones(1, 1, 2, 2)
  with pytest.raises(ValueError, match="align_corners"):
    x.interpolate((3, 3), mode="nearest", align_corners=True)
  with pytest.raises(ValueError, match="mode"):
    x.interpolate((3, 3), mode="cubic")
  with pytest.raises(ValueError, match="size"):
    x.interpolate((3, 3, 3, 3, 3))


def np_conv_transpose(x, w, stride, padding, dilation, output_padding, groups):
  """By definition: each input pixel scatters weight * value into the output, then padding is cut away."""
  bs, cin, h, wd = x.shape
  _, coutg, kh, kw = w.shape
  sh, sw = stride
  (ph, pw), (dh, dw), (oph, opw) = padding, dilation, output_padding
  full_h = (h - 1) * sh + dh * (kh - 1) + 1 + oph
  full_w = (wd - 1) * sw + dw * (kw - 1) + 1 + opw
  out = np.zeros((bs, coutg * groups, full_h, full_w), np.float64)
  cin_g = cin // groups
  for n in range(bs):
    for c in range(cin):
      g = c // cin_g
      for i in range(h):
        for j in range(wd):
          for a in range(kh):
            for b in range(kw):
              out[n, g * coutg:(g + 1) * coutg, i * sh + a * dh, j * sw + b * dw] += x[n, c, i, j] * w[c, :, a, b]
  return out[:, :, ph:full_h - ph, pw:full_w - pw]


@pytest.mark.parametrize("stride,padding,dilation,output_padding,groups", [
  ((1, 1), (0, 0), (1, 1), (0, 0), 1), ((2, 2), (1, 1), (1, 1), (1, 1), 1), ((2, 1), (0, 1), (2, 1), (1, 0), 2),
  ((3, 2), (2, 0), (1, 2), (0, 1), 1),
  ((2, 2), (3, 2), (1, 1), (0, 0), 1)])  # padding past (k - 1) * dilation: a crop
def test_conv_transpose2d(stride, padding, dilation, output_padding, groups):
  x, w, b = api_randf(2, 4, 3, 5), api_randf(4, 3, 3, 2), api_randf(3 * groups)
  ref = np_conv_transpose(x, w, stride, padding, dilation, output_padding, groups)
  got = Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), groups=groups, stride=stride, dilation=dilation,
                                   padding=padding, output_padding=output_padding)
  got0 = Tensor(x).conv_transpose2d(Tensor(w), groups=groups, stride=stride, dilation=dilation, padding=padding,
                                    output_padding=output_padding)
  check((got, ref + b.reshape(1, -1, 1, 1)), (got0, ref), rtol=1e-4, atol=1e-4)


def test_conv_transpose_1d_and_3d():
  x, w = api_randf(2, 4, 5), api_randf(4, 3, 3)
  ref = np_conv_transpose(x[:, :, None], w[:, :, None], (1, 2), (0, 1), (1, 1), (0, 1), 2)[:, :, 0]
  x3, w3 = api_randf(1, 2, 2, 3, 2), api_randf(2, 2, 2, 1, 2)
  ref3 = sum(np_conv_transpose(x3[:, :, d], w3[:, :, kd], (1, 1), (0, 0), (1, 1), (0, 0), 1)[:, :, None] *
             (np.arange(3) == d + kd)[None, None, :, None, None] for d in range(2) for kd in range(2))
  check((Tensor(x).conv_transpose2d(Tensor(w), groups=2, stride=2, padding=1, output_padding=1), ref),
        (Tensor(x3).conv_transpose2d(Tensor(w3)), ref3), rtol=1e-4, atol=1e-4)


def test_conv_transpose2d_errors():
  with pytest.raises(ValueError, match=r"conv_transpose2d.*\(1, 3, 4, 4\).*\(4, 2, 3, 3\)"):
    Tensor.ones(1, 3, 4, 4).conv_transpose2d(Tensor.ones(4, 2, 3, 3))
  with pytest.raises(ValueError, match="output_padding"):
    Tensor.ones(1, 4, 4, 4).conv_transpose2d(Tensor.ones(4, 2, 3, 3), output_padding=1)


def test_dropout_mask_statistics_and_identity_when_not_training():
  x = Tensor(api_randf(200, 300))
  assert x.dropout(0.3) is x  # not training: the input itself (tinygrad)
  Tensor.manual_seed(7)
  with Tensor.train():
    ones, y, zero = Tensor.ones(200, 300).dropout(0.3), x.dropout(0.5), x.dropout(1.0)
    assert x.dropout(0) is x
  o = ones.numpy()
  kept = o != 0
  np.testing.assert_array_equal(o[kept], np.float32(1 / 0.7))  # the kept ones scaled by 1 / (1 - p)
  # kept with probability 0.7: 60000 draws, 5 standard deviations of the count
  assert abs(kept.mean() - 0.7) < 5 * np.sqrt(0.7 * 0.3 / kept.size)
  yk = y.numpy() != 0
  np.testing.assert_allclose(y.numpy()[yk], x.numpy()[yk] * 2, rtol=1e-6)
  assert abs(yk.mean() - 0.5) < 5 * np.sqrt(0.25 / yk.size) and not zero.numpy().any()
  for p in (-0.1, 1.5):
    with pytest.raises(ValueError, match=r"dropout.*\(200, 300\)"):
      x.dropout(p)


def test_dropout_gradient_is_the_mask():
  Tensor.manual_seed(1)
  x = Tensor(api_randf(50, 40), requires_grad=True)
  with Tensor.train():
    y = x.dropout(0.25)
  y.sum().backward()
  keep = y.numpy() != 0
  np.testing.assert_allclose(x.grad.numpy(), keep / 0.75, rtol=1e-6)


def test_sequential():
  x = api_randf(3, 4)
  layers = [Tensor.relu, lambda t: t * 2, lambda t: t.sum(1)]
  check((Tensor(x).sequential(layers), (np.maximum(x, 0) * 2).sum(1)), (Tensor(x).sequential([]), x))


def test_softmin_and_normalize():
  x = api_randf(3, 5)
  z = x.copy()
  z[1] = 0  # a zero vector: divided by eps, so 0
  e = np.exp(-(x - x.min(1, keepdims=True)))
  norm = lambda v, p, d: np.linalg.norm(v.astype(np.float64), ord=p, axis=d, keepdims=True)  # noqa: E731
  check((Tensor(x).softmin(1), e / e.sum(1, keepdims=True)),
        (Tensor(x.astype(np.uint8)).softmin(), np.exp(-x.astype(np.uint8).astype(np.float64)) /
         np.exp(-x.astype(np.uint8).astype(np.float64)).sum(-1, keepdims=True)),
        (Tensor(z).normalize(), z / np.maximum(norm(z, 2, 1), 1e-12)),
        (Tensor(x).normalize(p=1, dim=0), x / norm(x, 1, 0)),
        (Tensor(x).normalize(p=3.0, dim=-1), x / np.sum(np.abs(x) ** 3, -1, keepdims=True) ** (1 / 3)),
        (Tensor(x).normalize(p=float("inf")), x / np.abs(x).max(1, keepdims=True)), rtol=1e-5, atol=1e-6)


def test_scaled_dot_product_attention_gqa():
  q, k, v = api_randf(2, 6, 3, 8), api_randf(2, 2, 5, 8), api_randf(2, 2, 5, 4)
  # key and value heads repeated to the query's (each kv head serves 3 query heads in a row, as torch)
  ref = np_sdpa(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1))
  check((Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), enable_gqa=True), ref), rtol=1e-4, atol=1e-5)
  with pytest.raises(RuntimeError, match=r"enable_gqa.*\(2, 4, 3, 8\)"):
    Tensor(api_randf(2, 4, 3, 8)).scaled_dot_product_attention(Tensor(api_randf(2, 3, 5, 8)),
                                                               Tensor(api_randf(2, 3, 5, 4)), enable_gqa=True)


def np_max_pool_indices(x, k, s, pad):
  """torch's max_pool2d(return_indices=True): the first maximum of each window, as a flat index into (H, W)."""
  n, c, h, w = x.shape
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
  oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
  vals, idx = np.zeros((n, c, oh, ow)), np.zeros((n, c, oh, ow), np.int64)
  for i in range(oh):
    for j in range(ow):
      win = xp[:, :, i * s:i * s + k, j * s:j * s + k].reshape(n, c, -1)
      a = win.argmax(-1)  # numpy's argmax: the first maximum
      vals[:, :, i, j] = win.max(-1)
      idx[:, :, i, j] = (i * s + a // k - pad) * w + (j * s + a % k - pad)
  return vals, idx


@pytest.mark.parametrize("k,s,pad", [(2, 2, 0), (3, 2, 1), (2, 1, 0)])
def test_max_pool2d_indices_and_max_unpool2d(k, s, pad):
  x = api_rng.integers(-3, 3, (2, 3, 5, 6)).astype(np.float32)  # small integers: ties inside windows
  vals, idx = np_max_pool_indices(x, k, s, pad)
  out, ind = Tensor(x).max_pool2d(k, s, padding=pad, return_indices=True)
  check((out, vals), (ind, idx), exact=True)
  # unpooling writes each max at its index (an element two windows picked is written once, as torch)
  ref = np.zeros(x.shape, np.float32).reshape(2, 3, -1)
  np.put_along_axis(ref, idx.reshape(2, 3, -1), vals.reshape(2, 3, -1).astype(np.float32), -1)
  check((out.max_unpool2d(ind, k, s, padding=pad, output_size=x.shape), ref.reshape(x.shape)), exact=True)
  if (k, s, pad) == (2, 2, 0):  # the output size max_pool2d's arguments invert
    check((out.max_unpool2d(ind), ref.reshape(x.shape)[:, :, :4, :6]), exact=True)


def test_max_unpool2d_errors():
  x = Tensor.ones(1, 1, 2, 2)
  with pytest.raises(RuntimeError, match=r"max_unpool2d.*\(1, 1, 2, 2\)"):
    x.max_unpool2d(Tensor.ones(1, 1, 2, 3, dtype=dtypes.int32))
  with pytest.raises(RuntimeError, match="max_unpool2d"):
    x.max_unpool2d(Tensor.ones(1, 1, 2, 2))


def test_linspace_bool_and_one_hot_as_tinygrad():
  for dt in (dtypes.bool, "bool"):
    with pytest.raises(ValueError, match="linspace.*bool"):
      Tensor.linspace(0, 1, 5, dtype=dt)
  y = np.array([[2, 0], [1, 4]], np.int32)
  check((Tensor(y).one_hot(-1), np.eye(5, dtype=np.int32)[y]), (Tensor(y).one_hot(6), np.eye(6, dtype=np.int32)[y]),
        exact=True)
  with pytest.raises(RuntimeError, match="one_hot"):
    Tensor([0.0, 1.0]).one_hot(-1)


def np_torch_uint8_linear(x, size, align):
  """torch's uint8 bilinear: per axis (last first), float64 triangle weights rounded to int16 fixed point, the sum
  rounded half up and clamped to [0, 255] after each axis."""
  out = x.astype(np.int64)
  for axis in range(-1, -len(size) - 1, -1):
    n_in, n_out = out.shape[axis], size[axis]
    if n_in == n_out:
      continue
    scale = ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0) if align else n_in / n_out
    d = 0.5 if align else 0.0
    taps = []
    for i in range(n_out):
      c = scale * (i + 0.5 - d)
      lo = max(int(c + d - 0.5), 0)
      ws = [max(0.0, 1 - abs(j + lo - c + 0.5 - d)) for j in range(min(int(c + 1.5 + d), n_in) - lo)]
      taps.append((lo, [v / sum(ws) for v in ws]))
    wmax = max(v for _, ws in taps for v in ws)
    prec = next(p for p in range(23) if p == 22 or int(0.5 + wmax * 2 ** (p + 1)) >= 2 ** 15)
    moved = np.moveaxis(out, axis, -1)
    res = np.zeros(moved.shape[:-1] + (n_out,), np.int64)
    for i, (lo, ws) in enumerate(taps):
      acc = sum(int(0.5 + v * 2 ** prec) * moved[..., lo + j] for j, v in enumerate(ws))
      res[..., i] = np.clip((acc + 2 ** (prec - 1)) >> prec, 0, 255)
    out = np.moveaxis(res, -1, axis)
  return out.astype(np.uint8)


@pytest.mark.parametrize("align", [False, True])
def test_interpolate_uint8_rounds_as_torch(align):
  # 0 and 255 halfway: 127.5 rounds to 128 (a cast of the float result truncated it to 127)
  check((Tensor(np.array([[[0, 255]]], np.uint8)).interpolate((1, 3)), np.array([[[0, 128, 255]]], np.uint8)),
        exact=True)
  x = api_rng.integers(0, 256, (2, 3, 7, 9)).astype(np.uint8)
  pairs = [(Tensor(x).interpolate(size, align_corners=align), np_torch_uint8_linear(x, size, align))
           for size in [(10, 20), (4, 5), (7, 30), (1, 1)]]
  check(*pairs, exact=True)
  # the rule rounds the exact value to nearest, the fixed point moving no value by more than one
  y = pairs[0][0].numpy().astype(np.float64)
  ref = x.astype(np.float64)
  for i, n in ((-1, 20), (-2, 10)):
    ref = np.floor(np_interp_axis(ref, i, n, "linear", align) + 0.5)
  assert np.abs(y - ref).max() <= 1


def test_creation_requires_grad_keyword():
  made = [Tensor.zeros(2, 3, requires_grad=True), Tensor.ones(2, requires_grad=True),
          Tensor.full((2,), 3.0, requires_grad=True), Tensor.empty(2, requires_grad=True),
          Tensor.rand(2, requires_grad=True), Tensor.randn(2, requires_grad=True),
          Tensor.uniform(2, low=-1, high=1, requires_grad=True), Tensor.normal(2, requires_grad=True),
          Tensor.kaiming_uniform(2, 3, requires_grad=True), Tensor.kaiming_normal(2, 3, requires_grad=True),
          Tensor.glorot_uniform(2, 3, requires_grad=True), Tensor.scaled_uniform(2, 3, requires_grad=True),
          Tensor.linspace(0, 1, 3, requires_grad=True), Tensor.eye(2, requires_grad=True),
          Tensor.arange(3.0, requires_grad=True), Tensor.ones(2).zeros_like(requires_grad=True)]
  assert all(t.requires_grad is True for t in made)
  (sum(t.sum() for t in made)).backward()
  for t in made:
    np.testing.assert_array_equal(t.grad.numpy(), np.ones(t.shape, np.float32))
  assert Tensor.randn(2, requires_grad=False).requires_grad is False and Tensor.ones(2).requires_grad is None
  with pytest.raises(RuntimeError, match="floating point"):
    Tensor.zeros(2, dtype=dtypes.int32, requires_grad=True)
