"""Layers in tinygrad's style: plain objects holding Tensors, called on an input (`nn.Linear(4, 2)(x)`)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from compiler.dtype import dtypes
from compiler.nn import optim, state  # noqa: F401  (nn.optim.SGD, nn.state.safe_save as in tinygrad)
from compiler.tensor import Tensor

__all__ = ["BatchNorm", "BatchNorm2d", "Conv2d", "Embedding", "GroupNorm", "LayerNorm", "Linear", "RMSNorm", "optim",
           "state"]


def _fresh(shape: tuple[int, ...], value: float) -> Tensor:
  """A float32 tensor filled with value, in a buffer of its own (equal realized graphs share one buffer; parameters
  are updated in place, so each needs its own)."""
  return Tensor(np.full(shape, value, np.float32))


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
  return Tensor.uniform(*shape, low=-bound, high=bound).realize()


class Linear:
  """y = x @ weight.T + bias, weight (out_features, in_features), both uniform in +-1/sqrt(in_features) (torch)."""

  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features) if in_features else 0.0
    self.weight = _uniform((out_features, in_features), bound)
    self.bias = _uniform((out_features,), bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.linear(self.weight.T, self.bias)


def _pair(v: Any) -> tuple[int, int]:
  return (v, v) if isinstance(v, int) else tuple(v)


class Conv2d:
  """2-d convolution over (N, C, H, W); weight (out, in / groups, kh, kw), uniform in +-1/sqrt(fan_in) (torch)."""

  def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
               dilation: Any = 1, groups: int = 1, bias: bool = True):
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"Conv2d: channels {in_channels} -> {out_channels} don't divide into {groups} groups")
    self.kernel_size = _pair(kernel_size)
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    fan_in = in_channels // groups * math.prod(self.kernel_size)
    bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
    self.weight = _uniform((out_channels, in_channels // groups, *self.kernel_size), bound)
    self.bias = _uniform((out_channels,), bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                    padding=self.padding)


def _channel_view(t: Tensor, ndim: int) -> Tensor:
  """A per-channel (dim 1) vector shaped to broadcast against an ndim input."""
  return t.reshape((1, -1) + (1,) * (ndim - 2))


class BatchNorm:
  """Batch normalization over dim 1: batch statistics while Tensor.training (and the running ones updated, with
  the unbiased variance as torch), the running statistics otherwise."""

  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
               momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight = _fresh((sz,), 1.0) if affine else None
    self.bias = _fresh((sz,), 0.0) if affine else None
    self.num_batches_tracked = Tensor(np.zeros(1, np.int32), requires_grad=False)  # a buffer, never a parameter
    if track_running_stats:
      self.running_mean = _fresh((sz,), 0.0).requires_grad_(False)
      self.running_var = _fresh((sz,), 1.0).requires_grad_(False)

  def __call__(self, x: Tensor) -> Tensor:
    axes = tuple(i for i in range(x.ndim) if i != 1)
    if Tensor.training or not self.track_running_stats:
      mean = x.mean(axes)
      var = (x - _channel_view(mean, x.ndim)).square().mean(axes)
      if Tensor.training and self.track_running_stats:
        n = x.numel() // x.shape[1]
        m = self.momentum
        self.running_mean.assign((1 - m) * self.running_mean + m * mean.detach())
        self.running_var.assign((1 - m) * self.running_var + m * (var * (n / max(n - 1, 1))).detach())
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    else:
      mean, var = self.running_mean, self.running_var
    y = (x - _channel_view(mean, x.ndim)) * _channel_view((var + self.eps).rsqrt(), x.ndim)
    if self.weight is not None:
      y = y * _channel_view(self.weight, x.ndim) + _channel_view(self.bias, x.ndim)
    return y


BatchNorm2d = BatchNorm


class LayerNorm:
  """Normalizes over the last len(normalized_shape) dims, then weight * y + bias."""

  def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.eps = eps
    self.weight = _fresh(self.normalized_shape, 1.0) if elementwise_affine else None
    self.bias = _fresh(self.normalized_shape, 0.0) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    n = len(self.normalized_shape)
    if x.shape[-n:] != self.normalized_shape:
      raise ValueError(f"LayerNorm: input of shape {x.shape} doesn't end in {self.normalized_shape}")
    y = x.layernorm(tuple(range(x.ndim - n, x.ndim)), self.eps)
    return y if self.weight is None else y * self.weight + self.bias


class GroupNorm:
  """Normalizes each of num_groups groups of channels (dim 1) per sample, then a per-channel affine."""

  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups:
      raise ValueError(f"GroupNorm: {num_channels} channels don't divide into {num_groups} groups")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight = _fresh((num_channels,), 1.0) if affine else None
    self.bias = _fresh((num_channels,), 0.0) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels:
      raise ValueError(f"GroupNorm: input of shape {x.shape} doesn't have {self.num_channels} channels in dim 1")
    y = x.reshape(x.shape[0], self.num_groups, -1).layernorm(-1, self.eps).reshape(x.shape)
    if self.weight is None:
      return y
    return y * _channel_view(self.weight, x.ndim) + _channel_view(self.bias, x.ndim)


class RMSNorm:
  """x / sqrt(mean(x^2, last dim) + eps) * weight."""

  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight = _fresh((dim,), 1.0) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    y = x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()
    return y if self.weight is None else y * self.weight


class Embedding:
  """A lookup table: integer indices of any shape -> rows of weight (vocab_size, embed_size)."""

  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_size, self.embed_size = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size).realize()

  def __call__(self, idx: Tensor) -> Tensor:
    if not isinstance(idx, Tensor) or not dtypes.is_int(idx.dtype):
      raise TypeError(f"Embedding: indices must be an integer Tensor, got {getattr(idx, 'dtype', type(idx))}")
    hot = idx.unsqueeze(-1) == Tensor.arange(self.vocab_size, dtype=idx.dtype)
    return hot.cast(self.weight.dtype) @ self.weight
