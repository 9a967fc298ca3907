"""Losses, scaled_dot_product_attention, interpolate, conv_transpose2d, einsum, linspace and initializers against
numpy references (torch's formulas written out) on both backends."""
import numpy as np
import pytest
from api_helpers import backend, check  # noqa: F401

from compiler import Tensor, dtypes

rng = np.random.default_rng(13)


def randf(*s):
  return rng.standard_normal(s).astype(np.float32)


def np_log_softmax(x, axis):
  m = x.max(axis, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def _reduce(v, reduction):
  return v if reduction == "none" else v.sum() if reduction == "sum" else v.mean()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 3), (1, 1)])
def test_cross_entropy_nll(reduction, shape):
  x = randf(*shape)
  y = rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(np.int32)
  lsm = np_log_softmax(x, 1)
  picked = np.take_along_axis(lsm, np.expand_dims(y, 1), 1).squeeze(1)
  w = rng.random(shape[1]).astype(np.float32) + 0.5
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
  probs = np.exp(np_log_softmax(randf(*shape), 1))
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
  x = randf(2, 4, 5)
  y = rng.integers(0, 5, (2, 4)).astype(np.int32)
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
  q, k, v = randf(2, 3, 4, 8), randf(2, 3, 6, 8), randf(2, 3, 6, 5)
  bmask = rng.random((4, 6)) > 0.3
  bmask[:, 0] = True
  fmask = randf(4, 6)
  q2 = randf(5, 8)
  check((Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v)), np_sdpa(q, k, v)),
        (Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), Tensor(bmask)), np_sdpa(q, k, v, bmask)),
        (Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), Tensor(fmask)), np_sdpa(q, k, v, fmask)),
        (Tensor(q2).scaled_dot_product_attention(Tensor(q2), Tensor(q2), is_causal=True),
         np_sdpa(q2, q2, q2, causal=True)), rtol=1e-4, atol=1e-5)
  with pytest.raises(NotImplementedError, match="dropout"):
    Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), dropout_p=0.1)


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
  x = randf(2, 3, 5, 4)
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
  ((3, 2), (2, 0), (1, 2), (0, 1), 1)])
def test_conv_transpose2d(stride, padding, dilation, output_padding, groups):
  x, w, b = randf(2, 4, 3, 5), randf(4, 3, 3, 2), randf(3 * groups)
  ref = np_conv_transpose(x, w, stride, padding, dilation, output_padding, groups)
  got = Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), groups=groups, stride=stride, dilation=dilation,
                                   padding=padding, output_padding=output_padding)
  got0 = Tensor(x).conv_transpose2d(Tensor(w), groups=groups, stride=stride, dilation=dilation, padding=padding,
                                    output_padding=output_padding)
  check((got, ref + b.reshape(1, -1, 1, 1)), (got0, ref), rtol=1e-4, atol=1e-4)


def test_conv_transpose_1d_and_3d():
  x, w = randf(2, 4, 5), randf(4, 3, 3)
  ref = np_conv_transpose(x[:, :, None], w[:, :, None], (1, 2), (0, 1), (1, 1), (0, 1), 2)[:, :, 0]
  x3, w3 = randf(1, 2, 2, 3, 2), randf(2, 2, 2, 1, 2)
  ref3 = sum(np_conv_transpose(x3[:, :, d], w3[:, :, kd], (1, 1), (0, 0), (1, 1), (0, 0), 1)[:, :, None] *
             (np.arange(3) == d + kd)[None, None, :, None, None] for d in range(2) for kd in range(2))
  check((Tensor(x).conv_transpose2d(Tensor(w), groups=2, stride=2, padding=1, output_padding=1), ref),
        (Tensor(x3).conv_transpose2d(Tensor(w3)), ref3), rtol=1e-4, atol=1e-4)


def test_conv_transpose2d_errors():
  with pytest.raises(ValueError, match=r"conv_transpose2d.*\(1, 3, 4, 4\).*\(4, 2, 3, 3\)"):
    Tensor.ones(1, 3, 4, 4).conv_transpose2d(Tensor.ones(4, 2, 3, 3))
  with pytest.raises(ValueError, match="output_padding"):
    Tensor.ones(1, 4, 4, 4).conv_transpose2d(Tensor.ones(4, 2, 3, 3), output_padding=1)


@pytest.mark.parametrize("formula,shapes", [
  ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]),
  ("i,i->", [(4,), (4,)]), ("i,j->ij", [(3,), (2,)]), ("...ij,jk->...ik", [(5, 2, 3), (3, 4)]),
  ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]), ("ji", [(2, 3)]), ("b...,b->...", [(2, 3, 1), (2,)]),
  ("ij,j->i", [(0, 3), (3,)]), ("ij , jk -> ki", [(1, 1), (1, 5)]), ("ii->", [(3, 3)]), ("ii->i", [(4, 4)]),
  ("iji,j->ij", [(2, 3, 2), (3,)]),
])
def test_einsum(formula, shapes):
  ops = [randf(*s) for s in shapes]
  check((Tensor.einsum(formula, *[Tensor(o) for o in ops]), np.einsum(formula, *ops)),
        (Tensor.einsum(formula, [Tensor(o) for o in ops]), np.einsum(formula, *ops)), rtol=1e-5, atol=1e-5)


def test_einsum_errors():
  with pytest.raises(ValueError, match=r"einsum.*'j'.*\(2, 3\)"):
    Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 4))
  with pytest.raises(ValueError, match="einsum"):
    Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3))
  with pytest.raises(ValueError, match=r"einsum.*'i'.*sizes 2 and 3"):
    Tensor.einsum("ii->i", Tensor.ones(2, 3))


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
