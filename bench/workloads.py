"""The workloads used throughout the project: each builds lazy Tensors and has a numpy reference.

`WORKLOADS[name]()` returns a `Workload`: `inputs` (numpy arrays), `build(*tensors) -> Tensor` and
`reference(*arrays) -> np.ndarray`. `scale` shrinks the sizes (for tests); 1.0 is the benchmark size. `jitted(w)`
is the workload under TinyJit past its first calls, as bench_jit.py and bench_kernels.py time it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from compiler.jit import TinyJit
from compiler.tensor import Tensor


@dataclass
class Workload:
  name: str
  inputs: list[np.ndarray]
  build: Callable[..., Tensor]
  reference: Callable[..., np.ndarray]
  rtol: float = 1e-4

  def tensors(self) -> list[Tensor]:
    return [Tensor(a) for a in self.inputs]

  def lazy(self) -> Tensor:
    """The output tensor, built on fresh input tensors (nothing computed yet)."""
    return self.build(*self.tensors())

  def expected(self) -> np.ndarray:
    return self.reference(*self.inputs)


def jitted(w: Workload) -> tuple[TinyJit, list[np.ndarray]]:
  """`TinyJit(w.build)` past its plain call, its capture and its first replay (each on fresh `Tensor(a)` inputs), so
  that a later call replays; and those three calls' outputs (to check against `w.expected()`)."""
  jit = TinyJit(w.build)
  return jit, [jit(*w.tensors()).numpy() for _ in range(3)]


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
  return rng.standard_normal(shape).astype(np.float32)


def _dim(n: int, scale: float, lo: int = 1) -> int:
  return max(lo, int(round(n * scale)))


def elementwise(scale: float = 1.0, seed: int = 0) -> Workload:
  """(a*b+1).relu() on 4M float32."""
  rng = np.random.default_rng(seed)
  n = _dim(4 * 1024 * 1024, scale)
  return Workload("elementwise", [_rand(rng, n), _rand(rng, n)], lambda a, b: (a * b + 1).relu(),
                  lambda a, b: np.maximum(a * b + 1, 0))


def matmul(scale: float = 1.0, seed: int = 0) -> Workload:
  """512x512 @ 512x512 float32."""
  rng = np.random.default_rng(seed)
  n = _dim(512, scale)
  return Workload("matmul", [_rand(rng, n, n), _rand(rng, n, n)], lambda a, b: a @ b, lambda a, b: a @ b)


def _np_softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def softmax(scale: float = 1.0, seed: int = 0) -> Workload:
  """softmax over the last axis of (256, 1024) float32."""
  rng = np.random.default_rng(seed)
  return Workload("softmax", [_rand(rng, _dim(256, scale), _dim(1024, scale))], lambda x: x.softmax(-1), _np_softmax)


def _np_log_softmax(x: np.ndarray) -> np.ndarray:
  m = x - x.max(-1, keepdims=True)
  return m - np.log(np.exp(m).sum(-1, keepdims=True))


def mlp(scale: float = 1.0, seed: int = 0) -> Workload:
  """log_softmax(relu(x(64,784) @ W1(784,256)) @ W2(256,10))."""
  rng = np.random.default_rng(seed)
  b, i, h = _dim(64, scale), _dim(784, scale), _dim(256, scale)
  x, w1, w2 = _rand(rng, b, i), _rand(rng, i, h) * (1 / np.sqrt(i)), _rand(rng, h, 10) * (1 / np.sqrt(h))
  return Workload("mlp", [x, w1.astype(np.float32), w2.astype(np.float32)],
                  lambda x, w1, w2: (x @ w1).relu().matmul(w2).log_softmax(-1),
                  lambda x, w1, w2: _np_log_softmax(np.maximum(x @ w1, 0) @ w2))


def _np_conv2d(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  """Valid cross-correlation, stride 1 (im2col with numpy)."""
  bs, cin, h, wd = x.shape
  cout, _, kh, kw = w.shape
  oh, ow = h - kh + 1, wd - kw + 1
  cols = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))  # (bs, cin, oh, ow, kh, kw)
  return np.einsum("bchwij,ocij->bohw", cols, w, optimize=True).astype(np.float32).reshape(bs, cout, oh, ow)


def conv2d(scale: float = 1.0, seed: int = 0, hw: int = 32, cout: int = 32, name: str = "conv2d") -> Workload:
  """conv2d of (8,16,hw,hw) with (cout,16,3,3), no padding, stride 1 (default: 32, 32)."""
  rng = np.random.default_rng(seed)
  bs, cin, hw, cout = _dim(8, scale), _dim(16, scale), _dim(hw, scale, lo=3), _dim(cout, scale)
  return Workload(name, [_rand(rng, bs, cin, hw, hw), _rand(rng, cout, cin, 3, 3)],
                  lambda x, w: x.conv2d(w), _np_conv2d)


WORKLOADS: dict[str, Callable[..., Workload]] = {
  "elementwise": elementwise, "matmul": matmul, "softmax": softmax, "mlp": mlp, "conv2d": conv2d,
}


def _matmul_n(n: int) -> Callable[..., Workload]:
  def make(scale: float = 1.0, seed: int = 0) -> Workload:
    w = matmul(scale=n / 512 * scale, seed=seed)
    w.name = f"matmul{n}"
    return w
  make.__doc__ = f"{n}x{n} @ {n}x{n} float32: no 16 divides {n}."
  return make


def conv2d_odd(scale: float = 1.0, seed: int = 0) -> Workload:
  """conv2d of (8,16,33,33) with (30,16,3,3): 31x31 outputs and 30 channels, sizes no vector divides."""
  return conv2d(scale, seed, hw=33, cout=30, name="conv2d_odd")


# sizes the register tiles do not divide (their remainders peeled): `bench_kernels.py --odd`
ODD_WORKLOADS: dict[str, Callable[..., Workload]] = {
  "matmul500": _matmul_n(500), "matmul499": _matmul_n(499), "matmul1000": _matmul_n(1000), "conv2d_odd": conv2d_odd,
}
