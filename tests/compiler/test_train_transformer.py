"""A GPT-2-shaped transformer written as tinygrad users write it, trained with Adam: the real program that turned NaN
at its 4th step (gelu's gradient was NaN from |x| >= 10, silu's below -88.75). Its activations are pushed to where
float32 overflows inside the activations, and the gradients are checked against central differences in float64."""
from __future__ import annotations

import math

import numpy as np
import pytest
from support.gradcheck import check_gradient

from compiler import Tensor, nn


class Block:
  def __init__(self, d: int, heads: int, act: str):
    self.heads, self.act = heads, act
    self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
    self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
    self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

  def attention(self, x: Tensor) -> Tensor:
    b, t, d = x.shape
    q, k, v = [y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).chunk(3, dim=-1)]
    mask = Tensor.ones(t, t).tril().cast("bool")
    att = (q @ k.transpose(-2, -1) * (1 / math.sqrt(d // self.heads))).masked_fill(mask.logical_not(), -math.inf)
    return self.proj((att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))

  def __call__(self, x: Tensor) -> Tensor:
    x = x + self.attention(self.ln1(x))
    h = self.fc(self.ln2(x))
    return x + self.out(h.gelu() if self.act == "gelu" else h.silu())


class GPT:
  def __init__(self, vocab: int = 16, d: int = 32, heads: int = 2, layers: int = 2, seq: int = 8, act: str = "gelu"):
    self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
    self.blocks = [Block(d, heads, act) for _ in range(layers)]
    self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

  def __call__(self, idx: Tensor) -> Tensor:
    x = self.wte(idx) + self.wpe(Tensor.arange(idx.shape[1], dtype=idx.dtype))
    for blk in self.blocks:
      x = blk(x)
    return self.head(self.ln_f(x))


def _scale_mlp(model: GPT, factor: float) -> None:
  """Multiply the MLP input weights so the activation sees |x| well past 10 (and past 88 below zero)."""
  for blk in model.blocks:
    blk.fc.weight.assign(blk.fc.weight * factor).realize()


@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_training_stays_finite_with_large_activations(act):
  Tensor.manual_seed(0)
  rng = np.random.default_rng(0)
  model = GPT(act=act)
  _scale_mlp(model, 60.0)
  h = model.blocks[0].fc(model.blocks[0].ln2(model.wte(Tensor(rng.integers(0, 16, (2, 8)).astype(np.int32))))).numpy()
  assert np.abs(h).max() > 90, "the MLP input must reach where the activations' guards overflow"
  params = nn.state.get_parameters(model)
  opt = nn.optim.Adam(params, lr=3e-3)
  losses = []
  for _ in range(6):
    x = Tensor(rng.integers(0, 16, (2, 8)).astype(np.int32))
    y = Tensor(rng.integers(0, 16, (2, 8)).astype(np.int32))
    loss = model(x).sparse_categorical_crossentropy(y)
    opt.zero_grad()
    loss.backward()
    for p in params:
      g = p.grad.numpy()
      assert np.isfinite(g).all(), f"a NaN/inf gradient at step {len(losses)} for a parameter of shape {p.shape}"
    opt.step()
    losses.append(loss.item())
  assert all(np.isfinite(losses)), losses


@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_block_gradient_matches_finite_differences_where_float32_overflows(act):
  """One block in float64 with its MLP input at |x| up to ~100: gradients against central differences."""
  rng = np.random.default_rng(1)
  d, heads = 8, 2
  blk = Block(d, heads, act)
  for lin in (blk.qkv, blk.proj, blk.fc, blk.out):
    lin.weight = Tensor(lin.weight.numpy().astype(np.float64) * (40.0 if lin is blk.fc else 1.0))
    lin.bias = Tensor(lin.bias.numpy().astype(np.float64))
  for ln in (blk.ln1, blk.ln2):
    ln.weight, ln.bias = Tensor(np.ones(d)), Tensor(np.zeros(d))
  x = rng.standard_normal((1, 4, d))
  pre = blk.fc(blk.ln2(Tensor(x))).numpy()
  assert np.abs(pre).max() > 20
  check_gradient(blk, x, rng=rng, rtol=1e-4, atol=1e-6)
