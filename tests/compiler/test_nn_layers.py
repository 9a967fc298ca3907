"""nn layers against numpy: forward values, training-mode statistics, and gradients through them."""
from __future__ import annotations

import numpy as np
import pytest
from support.gradcheck import check_gradient

from compiler import Tensor, nn


@pytest.fixture(autouse=True)
def _interp(monkeypatch):
  monkeypatch.setenv("BACKEND", "interp")


def _f64(layer):
  """The layer's parameters as float64 (so gradients can be checked against finite differences)."""
  for k, t in nn.state.get_state_dict(layer).items():
    if t.dtype.name == "float32":
      setattr(layer, k, Tensor(t.numpy().astype(np.float64)))
  return layer


def test_linear_matches_numpy_and_its_gradients():
  rng = np.random.default_rng(0)
  layer = nn.Linear(5, 3)
  assert layer.weight.shape == (3, 5) and layer.bias.shape == (3,)
  assert np.abs(layer.weight.numpy()).max() <= 1 / np.sqrt(5)
  x = rng.standard_normal((4, 5)).astype(np.float32)
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), x @ layer.weight.numpy().T + layer.bias.numpy(), rtol=1e-5,
                             atol=1e-6)
  _f64(layer)
  w, b = layer.weight.numpy(), layer.bias.numpy()
  check_gradient(lambda x_, w_, b_: x_.linear(w_.T, b_), x.astype(np.float64), w, b, rng=rng)
  assert nn.Linear(5, 3, bias=False).bias is None


def test_conv2d_matches_numpy():
  rng = np.random.default_rng(1)
  conv = nn.Conv2d(2, 4, 3, padding=1, stride=2)
  x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
  w, b = conv.weight.numpy(), conv.bias.numpy()
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  want = np.zeros((2, 4, 3, 3), np.float32)
  for i in range(3):
    for j in range(3):
      want[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3], w) + b
  np.testing.assert_allclose(conv(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
  with pytest.raises(ValueError, match="groups"):
    nn.Conv2d(3, 4, 3, groups=2)


def test_batchnorm_train_and_eval():
  rng = np.random.default_rng(2)
  bn = nn.BatchNorm2d(3, momentum=0.1)
  x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32) * 2 + 1
  with Tensor.train():
    y = bn(x_t := Tensor(x)).numpy()
  mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
  want = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
  np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
  n = x.size // 3
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var * n / (n - 1), rtol=1e-5)
  assert bn.num_batches_tracked.numpy().tolist() == [1]
  rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
  y_eval = bn(x_t).numpy()  # not training: the running statistics
  np.testing.assert_allclose(y_eval, (x - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + 1e-5), rtol=1e-4,
                             atol=1e-5)
  np.testing.assert_array_equal(bn.running_mean.numpy(), rm)  # eval leaves them alone


def test_layernorm_groupnorm_rmsnorm():
  rng = np.random.default_rng(3)
  x = rng.standard_normal((2, 4, 3))
  ln = _f64(nn.LayerNorm(3))
  ln.weight, ln.bias = Tensor(rng.standard_normal(3)), Tensor(rng.standard_normal(3))
  xh = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(ln(Tensor(x)).numpy(), xh * ln.weight.numpy() + ln.bias.numpy(), rtol=1e-9)
  check_gradient(lambda t: ln(t), x, rng=rng)
  gn = _f64(nn.GroupNorm(2, 4))
  g = x.reshape(2, 2, 6)
  gh = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
  np.testing.assert_allclose(gn(Tensor(x)).numpy(), gh, rtol=1e-9, atol=1e-12)
  check_gradient(lambda t: gn(t), x, rng=rng)
  rms = _f64(nn.RMSNorm(3))
  np.testing.assert_allclose(rms(Tensor(x)).numpy(), x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6), rtol=1e-9)
  check_gradient(lambda t: rms(t), x, rng=rng)
  with pytest.raises(ValueError, match="channels"):
    nn.GroupNorm(3, 4)


def test_embedding_lookup_and_gradient():
  emb = nn.Embedding(5, 3)
  idx = np.array([[0, 4, 4], [2, 1, 0]], dtype=np.int32)
  np.testing.assert_allclose(emb(Tensor(idx)).numpy(), emb.weight.numpy()[idx])
  emb.weight.requires_grad_()
  emb(Tensor(idx)).sum().backward()
  np.testing.assert_allclose(emb.weight.grad.numpy(), np.bincount(idx.ravel(), minlength=5)[:, None] * np.ones(3))
  with pytest.raises(TypeError, match="integer"):
    emb(Tensor(np.array([1.0])))


def test_new_ops_gradients_against_finite_differences():
  rng = np.random.default_rng(4)
  x = rng.standard_normal((3, 5))
  check_gradient(lambda t: t.softmin(1), x, rng=rng)
  check_gradient(lambda t: t.normalize(), x, rng=rng)
  check_gradient(lambda t: t.normalize(p=3.0, dim=0), x, rng=rng)
  img = rng.standard_normal((2, 3, 6, 5))
  check_gradient(lambda t, w: t.conv2d(w, padding=(-1, 1, 1, -2)), img, rng.standard_normal((4, 3, 2, 2)), rng=rng)
  q, k, v = rng.standard_normal((1, 4, 3, 4)), rng.standard_normal((1, 2, 5, 4)), rng.standard_normal((1, 2, 5, 3))
  check_gradient(lambda a, b, c: a.scaled_dot_product_attention(b, c, enable_gqa=True), q, k, v, rng=rng)
  # unpooling the pooled maxima: a mask of the maxima (the indices are constants of the graph)
  _, idx = Tensor(img).max_pool2d(return_indices=True)
  check_gradient(lambda t: t.max_pool2d().max_unpool2d(idx, output_size=img.shape), img, rng=rng)


def test_normalize_of_a_zero_vector_has_a_finite_gradient():
  x = Tensor(np.zeros((2, 3)), requires_grad=True)
  x.normalize().sum().backward()
  np.testing.assert_array_equal(x.normalize().numpy(), np.zeros((2, 3)))
  assert np.isfinite(x.grad.numpy()).all()


def test_batchnorm_counter_is_not_a_parameter():
  bn = nn.BatchNorm(2)
  assert bn.num_batches_tracked.requires_grad is False and bn.running_mean.requires_grad is False
  opt = nn.optim.SGD(nn.state.get_parameters(bn))
  assert [id(p) for p in opt.params] == [id(bn.weight), id(bn.bias)]
