"""The real programs of bench_real (issue 29), written once in tinygrad's API and run by tinyviz or by tinygrad itself,
with PyTorch twins of the same models (same parameter names, so one set of weights loads into both).

A program is one callable that runs a step and returns its loss (or output) realized: `build(name, lib, size, jit)`
makes it with fresh seeded weights and a fixed batch of random data of the real program's shape (no download):
- mnist: beautiful_mnist's CNN (tinygrad's examples/beautiful_mnist.py) and a training step with Adam;
- gpt_fwd / gpt_step: a GPT-2-shaped transformer: its forward (logits), and a training step with Adam;
- resnet: residual blocks (conv3x3-BN-relu-conv3x3-BN + skip, relu): forward + backward (gradients, no update).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ContextManager

import numpy as np

PROGRAMS = {"gpt_fwd": "GPT forward", "gpt_step": "GPT train step", "resnet": "ResNet blocks fwd+bwd",
            "mnist": "MNIST train step"}
TRAINING = ("gpt_step", "mnist")  # the programs that update their weights (their loss falls on a fixed batch)


@dataclass(frozen=True)
class Lib:
  """A library with tinygrad's API: tinyviz's `compiler` package or tinygrad. train(): the context of a training
  step (BatchNorm's batch statistics): `Tensor.train()`, in tinygrad 0.14 `Context(TRAINING=1)`."""
  name: str
  Tensor: Any
  nn: Any
  TinyJit: Any
  train: Callable[[], ContextManager]


def tinyviz() -> Lib:
  from compiler import Tensor, TinyJit, nn
  return Lib("tinyviz", Tensor, nn, TinyJit, Tensor.train)


def tinygrad() -> Lib | None:
  """tinygrad, where installed (an optional extra of the bench, never a dependency)."""
  try:
    from tinygrad import Context, Tensor, TinyJit, nn
  except ImportError:
    return None
  return Lib("tinygrad", Tensor, nn, TinyJit, lambda: Context(TRAINING=1))


@dataclass(frozen=True)
class Size:
  """The shapes of the four programs."""
  mnist_batch: int = 512
  mnist_chans: tuple[int, int] = (32, 64)
  gpt_batch: int = 4
  gpt_seq: int = 128
  gpt_dim: int = 256
  gpt_heads: int = 4
  gpt_layers: int = 4
  gpt_vocab: int = 1024
  res_batch: int = 16
  res_chans: int = 64
  res_hw: int = 32
  res_blocks: int = 3


FULL = Size()  # issue 29's shapes
QUICK = Size(mnist_batch=32, gpt_batch=2, gpt_seq=32, gpt_dim=64, gpt_layers=2, gpt_vocab=256, res_batch=4,
             res_chans=16, res_hw=16)
TINY = Size(mnist_batch=4, mnist_chans=(4, 8), gpt_batch=2, gpt_seq=8, gpt_dim=16, gpt_heads=2, gpt_layers=1,
            gpt_vocab=32, res_batch=2, res_chans=4, res_hw=8, res_blocks=2)
SIZES = {"full": FULL, "quick": QUICK, "tiny": TINY}


# ---- the models, in tinygrad's API (`lib` gives the Tensor class and nn)
class MnistCNN:
  """beautiful_mnist's Model; chans (32, 64) as there."""

  def __init__(self, lib: Lib, chans: tuple[int, int] = (32, 64)):
    T, nn = lib.Tensor, lib.nn
    c1, c2 = chans
    self.layers: list[Callable[[Any], Any]] = [
      nn.Conv2d(1, c1, 5), T.relu,
      nn.Conv2d(c1, c1, 5), T.relu,
      nn.BatchNorm(c1), T.max_pool2d,
      nn.Conv2d(c1, c2, 3), T.relu,
      nn.Conv2d(c2, c2, 3), T.relu,
      nn.BatchNorm(c2), T.max_pool2d,
      lambda x: x.flatten(1), nn.Linear(c2 * 3 * 3, 10)]

  def __call__(self, x: Any) -> Any:
    return x.sequential(self.layers)


class Attention:
  def __init__(self, lib: Lib, dim: int, heads: int):
    self.heads = heads
    self.c_attn, self.c_proj = lib.nn.Linear(dim, 3 * dim), lib.nn.Linear(dim, dim)

  def __call__(self, x: Any) -> Any:
    b, t, d = x.shape
    q, k, v = [y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.c_attn(x).chunk(3, dim=-1)]
    return self.c_proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))


class MLP:
  def __init__(self, lib: Lib, dim: int):
    self.c_fc, self.c_proj = lib.nn.Linear(dim, 4 * dim), lib.nn.Linear(4 * dim, dim)

  def __call__(self, x: Any) -> Any:
    return self.c_proj(self.c_fc(x).gelu())


class Block:
  def __init__(self, lib: Lib, dim: int, heads: int):
    self.ln_1, self.ln_2 = lib.nn.LayerNorm(dim), lib.nn.LayerNorm(dim)
    self.attn, self.mlp = Attention(lib, dim, heads), MLP(lib, dim)

  def __call__(self, x: Any) -> Any:
    x = x + self.attn(self.ln_1(x))
    return x + self.mlp(self.ln_2(x))


class GPT:
  """GPT-2's shape (pre-norm blocks, learned positions, tanh gelu, causal attention), parameters named as its."""

  def __init__(self, lib: Lib, vocab: int, dim: int, heads: int, layers: int, seq: int):
    nn = lib.nn
    self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
    self.h = [Block(lib, dim, heads) for _ in range(layers)]
    self.ln_f, self.lm_head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

  def __call__(self, idx: Any) -> Any:
    x = self.wte(idx) + self.wpe(type(idx).arange(idx.shape[1], dtype=idx.dtype))
    for blk in self.h:
      x = blk(x)
    return self.lm_head(self.ln_f(x))


class ResBlock:
  """ResNet's basic block at a fixed width: relu(bn2(conv2(relu(bn1(conv1(x))))) + x)."""

  def __init__(self, lib: Lib, chans: int):
    nn = lib.nn
    self.conv1 = nn.Conv2d(chans, chans, 3, padding=1, bias=False)
    self.bn1 = nn.BatchNorm(chans)
    self.conv2 = nn.Conv2d(chans, chans, 3, padding=1, bias=False)
    self.bn2 = nn.BatchNorm(chans)

  def __call__(self, x: Any) -> Any:
    return (self.bn2(self.conv2(self.bn1(self.conv1(x)).relu())) + x).relu()


class ResNet:
  def __init__(self, lib: Lib, chans: int, blocks: int):
    self.blocks = [ResBlock(lib, chans) for _ in range(blocks)]

  def __call__(self, x: Any) -> Any:
    return x.sequential(self.blocks)


# ---- the programs
def data(name: str, size: Size, seed: int = 0) -> tuple[np.ndarray, ...]:
  """The program's fixed batch, random of the real program's shape: (inputs, targets) or (inputs,)."""
  rng = np.random.default_rng(seed)
  if name == "mnist":
    return (rng.standard_normal((size.mnist_batch, 1, 28, 28)).astype(np.float32),
            rng.integers(0, 10, size.mnist_batch).astype(np.int32))
  if name in ("gpt_fwd", "gpt_step"):
    shape = (size.gpt_batch, size.gpt_seq)
    idx = rng.integers(0, size.gpt_vocab, shape).astype(np.int32)
    return (idx,) if name == "gpt_fwd" else (idx, rng.integers(0, size.gpt_vocab, shape).astype(np.int32))
  if name == "resnet":
    return (rng.standard_normal((size.res_batch, size.res_chans, size.res_hw, size.res_hw)).astype(np.float32),)
  raise ValueError(f"real_models: no program {name!r} (one of {', '.join(PROGRAMS)})")


def model(name: str, lib: Lib, size: Size) -> Any:
  if name == "mnist":
    return MnistCNN(lib, size.mnist_chans)
  if name in ("gpt_fwd", "gpt_step"):
    return GPT(lib, size.gpt_vocab, size.gpt_dim, size.gpt_heads, size.gpt_layers, size.gpt_seq)
  if name == "resnet":
    return ResNet(lib, size.res_chans, size.res_blocks)
  raise ValueError(f"real_models: no program {name!r} (one of {', '.join(PROGRAMS)})")


def loss_of(name: str, out: Any, *targets: Any) -> Any:
  """The program's loss from the model's output: cross-entropy for the classifiers, mean square for resnet."""
  return out.square().mean() if name == "resnet" else out.sparse_categorical_crossentropy(targets[0])


@dataclass
class Program:
  """A program ready to run: `step()` runs one call (realized) and returns the loss (the logits for gpt_fwd)."""
  name: str
  lib: str
  model: Any
  step: Callable[[], Any]
  jit: bool = False

  def __call__(self) -> Any:
    return self.step()


def is_param(t: Any) -> bool:
  """A parameter, not a buffer (BatchNorm's statistics): tinyviz's requires_grad, tinygrad 0.14's is_param."""
  return t.is_param if hasattr(t, "is_param") else t.requires_grad is not False


def build(name: str, lib: Lib, size: Size, jit: bool = False, seed: int = 0) -> Program:
  """The program with weights from `seed` (equal for equal seeds, whatever the library's RNG did before) on its
  fixed batch; jit: the step is a lib.TinyJit as a tinygrad user writes it (inputs as arguments)."""
  T, nn = lib.Tensor, lib.nn
  T.manual_seed(seed)
  m = model(name, lib, size)
  inputs = [T(a) for a in data(name, size, seed)]
  state = nn.state.get_parameters(m)
  if name == "gpt_fwd":
    def fn(idx: Any) -> Any:  # (inference: no gradient, so no lib.train())
      return m(idx).realize()
  elif name == "resnet":
    params = [p for p in state if is_param(p)]
    buffers = [p for p in state if not is_param(p)]  # BatchNorm's running statistics

    def fn(x: Any) -> Any:
      with lib.train():
        for p in params:
          p.grad = None
        loss = loss_of(name, m(x)).backward()
        return loss.realize(*[p.grad for p in params], *buffers)
  else:
    opt = nn.optim.Adam(state)  # (beautiful_mnist's: the BatchNorm statistics are its buffers, realized with it)

    def fn(x: Any, y: Any) -> Any:
      with lib.train():
        opt.zero_grad()
        loss = loss_of(name, m(x), y).backward()
        return loss.realize(*opt.schedule_step())  # (today's beautiful_mnist: the loss in the step's schedule)
  run = lib.TinyJit(fn) if jit else fn
  return Program(name, lib.name, m, lambda: run(*inputs), jit)


def numpy_state(m: Any, lib: Lib) -> dict[str, np.ndarray]:
  """The model's tensors by name, as numpy arrays."""
  return {k: v.numpy() for k, v in lib.nn.state.get_state_dict(m).items()}


# ---- PyTorch twins: the same modules and parameter names (BatchNorm's counter aside), torch's own layers
def torch_model(name: str, size: Size, state: dict[str, np.ndarray] | None) -> Any:
  """The program's model in PyTorch with the given weights (get_state_dict's names; every float tensor must load),
  or torch's own initial ones (state None)."""
  import torch
  import torch.nn.functional as F
  from torch import nn

  class TAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
      super().__init__()
      self.heads, self.c_attn, self.c_proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
      b, t, d = x.shape
      q, k, v = [y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.c_attn(x).chunk(3, -1)]
      return self.c_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))

  class TMLP(nn.Module):
    def __init__(self, dim: int):
      super().__init__()
      self.c_fc, self.c_proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
      return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

  class TBlock(nn.Module):
    def __init__(self, dim: int, heads: int):
      super().__init__()
      self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
      self.attn, self.mlp = TAttention(dim, heads), TMLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
      x = x + self.attn(self.ln_1(x))
      return x + self.mlp(self.ln_2(x))

  class TGPT(nn.Module):
    def __init__(self, s: Size):
      super().__init__()
      self.wte, self.wpe = nn.Embedding(s.gpt_vocab, s.gpt_dim), nn.Embedding(s.gpt_seq, s.gpt_dim)
      self.h = nn.ModuleList(TBlock(s.gpt_dim, s.gpt_heads) for _ in range(s.gpt_layers))
      self.ln_f, self.lm_head = nn.LayerNorm(s.gpt_dim), nn.Linear(s.gpt_dim, s.gpt_vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
      x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
      for blk in self.h:
        x = blk(x)
      return self.lm_head(self.ln_f(x))

  class TResBlock(nn.Module):
    def __init__(self, c: int):
      super().__init__()
      self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
      self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
      return F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))) + x)

  class TResNet(nn.Module):
    def __init__(self, s: Size):
      super().__init__()
      self.blocks = nn.Sequential(*[TResBlock(s.res_chans) for _ in range(s.res_blocks)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
      return self.blocks(x)

  class TMnist(nn.Module):
    def __init__(self, s: Size):
      super().__init__()
      c1, c2 = s.mnist_chans
      self.layers = nn.Sequential(  # the indices of MnistCNN.layers, so the names match
        nn.Conv2d(1, c1, 5), nn.ReLU(), nn.Conv2d(c1, c1, 5), nn.ReLU(), nn.BatchNorm2d(c1), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 3), nn.ReLU(), nn.Conv2d(c2, c2, 3), nn.ReLU(), nn.BatchNorm2d(c2), nn.MaxPool2d(2),
        nn.Flatten(1), nn.Linear(c2 * 3 * 3, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
      return self.layers(x)

  m = {"mnist": TMnist, "gpt_fwd": TGPT, "gpt_step": TGPT, "resnet": TResNet}[name](size)
  return m if state is None else _load_torch_state(m, name, state)


def _load_torch_state(m: Any, name: str, state: dict[str, np.ndarray]) -> Any:
  """m with every float tensor of its state_dict taken from state (a KeyError names the ones state lacks)."""
  import torch
  own = m.state_dict()
  loaded = {k: torch.from_numpy(state[k].copy()).reshape(v.shape) for k, v in own.items() if v.is_floating_point()}
  missing = sorted(k for k in own if own[k].is_floating_point() and k not in state)
  if missing:
    raise KeyError(f"torch_model({name!r}): no weights for {missing}")
  m.load_state_dict(loaded, strict=False)
  return m


def torch_program(name: str, size: Size, state: dict[str, np.ndarray] | None, seed: int = 0) -> Program:
  """The program in PyTorch eager, from the given weights (torch_model's), on the same fixed batch."""
  import torch
  import torch.nn.functional as F
  m = torch_model(name, size, state)
  inputs = [torch.from_numpy(a.astype(np.int64) if a.dtype.kind == "i" else a) for a in data(name, size, seed)]
  if name == "gpt_fwd":
    m.train(False)

    def fn() -> Any:
      with torch.no_grad():
        return m(inputs[0])
    return Program(name, "torch", m, fn)
  m.train()
  params = list(m.parameters())
  opt = torch.optim.Adam(params) if name in TRAINING else None

  def step() -> Any:
    out = m(inputs[0])
    if name == "resnet":
      loss = out.square().mean()
    else:
      loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), inputs[1].reshape(-1))
    if opt is not None:
      opt.zero_grad()
    else:
      for p in params:
        p.grad = None
    loss.backward()
    if opt is not None:
      opt.step()
    return loss.detach()
  return Program(name, "torch", m, step)
