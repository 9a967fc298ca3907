"""Tensor methods for training: requires_grad_, backward, gradient, detach, Tensor.training / Tensor.train()."""
from __future__ import annotations

import contextlib
from typing import Any, ClassVar, Iterator

from compiler.device import check_same_device
from compiler.dtype import dtypes
from compiler.gradient import compute_gradient
from compiler.realize import PENDING_ASSIGNS, SHARED_BUFFERS, buffer_of_view, live_tensors
from compiler.uop import Ops, UOp, toposort


class AutogradMixin:
  __slots__ = ()
  training: ClassVar[bool] = False

  def requires_grad_(self, requires_grad: bool | None = True) -> Any:
    """Mark this tensor: True, `backward()` fills its `.grad` (floats only, as torch) and an optimizer updates it;
    False, never; None (a new tensor's), backward fills it and an optimizer makes it True (tinygrad's three states)."""
    if requires_grad and not dtypes.is_float(self.dtype):
      raise RuntimeError(f"Tensor.requires_grad_: only floating point tensors can require gradients, got {self.dtype}")
    if requires_grad and buffer_of_view(self.uop) is None:
      # a lazy or constant tensor is hash-consed with every equal node (its CONST 2.0 is every 2.0 in any graph), and
      # gradients are per node: a parameter's values go into a buffer of its own, on its device (realized: a CL one
      # is a COPY until then)
      self.uop = type(self)(self.numpy(), dtype=self.dtype, device=self.device).realize().uop
    self.requires_grad = requires_grad
    return self

  def detach(self) -> Any:
    """The same values, with no gradient flowing back through them."""
    return type(self)(UOp(Ops.DETACH, self.dtype, (self.uop,)))

  def assign(self, x: Any) -> Any:
    """Give this tensor x's values (same shape and dtype), written into its buffer when it has one."""
    T = type(self)
    if not isinstance(x, T):
      x = T(x, dtype=self.dtype, device=self.device)
    check_same_device("assign", self.uop, x.uop)
    if x.shape != self.shape or x.dtype != self.dtype:
      raise ValueError(f"Tensor.assign: a {x.dtype} tensor of shape {x.shape} into a {self.dtype} tensor of shape "
                       f"{self.shape}")
    # a realized tensor is written in place (the scheduler orders the reads of its old values first); a lazy one
    # has no buffer yet, and one whose buffer other tensors share gets its own: both just take the new graph
    buf = buffer_of_view(self.uop)
    in_place = buf is not None and buf not in SHARED_BUFFERS
    self.uop = UOp(Ops.ASSIGN, self.dtype, (self.uop, x.uop)) if in_place else x.uop
    if in_place:
      PENDING_ASSIGNS.add(self.uop)
    return self

  def gradient(self, *targets: Any, gradient: Any = None, materialize_grads: bool = False) -> list:
    """The gradients of self with respect to targets (self must be a scalar unless `gradient` is given);
    `.grad` is not touched. A target self does not depend on is an error, unless materialize_grads (zeros)."""
    T = type(self)
    if not all(isinstance(t, T) for t in targets):
      raise TypeError(f"Tensor.gradient: targets must be Tensors, got {[type(t).__name__ for t in targets]}")
    if not dtypes.is_float(self.dtype):
      raise RuntimeError(f"Tensor.gradient: can't differentiate a {self.dtype} tensor")
    if gradient is None:
      if self.shape != ():
        raise RuntimeError(f"Tensor.gradient: without a gradient, only a scalar can be differentiated, not a tensor of "
                           f"shape {self.shape}")
      gradient = T(1.0, dtype=self.dtype)
    elif not isinstance(gradient, T):
      gradient = T(gradient, dtype=self.dtype)
    if gradient.shape != self.shape:
      raise ValueError(f"Tensor.gradient: gradient of shape {gradient.shape} for a tensor of shape {self.shape}")
    uops = [t.uop for t in targets]
    grads = compute_gradient(self.uop, gradient.cast(self.dtype).uop, set(uops))
    ret = []
    for t, u in zip(targets, uops):
      g = grads.get(u)
      if g is None:
        if not materialize_grads:
          raise RuntimeError(f"Tensor.gradient: a target of shape {t.shape} is not in the graph of this tensor "
                             f"(shape {self.shape})")
        ret.append(t.zeros_like())
      else:
        ret.append(T(g))
    return ret

  def backward(self, gradient: Any = None) -> Any:
    """Add the gradient of self to `.grad` of every live float tensor it depends on whose requires_grad is not
    False (tinygrad's rule: a layer's weights get theirs without an optimizer, and so do intermediate tensors; not
    self, whose gradient is the seed, nor a constant, one node with every equal constant of any graph)."""
    nodes = set(toposort(self.uop, gate=lambda u: u.op is not Ops.DETACH))
    nodes.discard(self.uop)
    params = [t for t in live_tensors() if t.requires_grad is not False and t.uop in nodes and t.uop.op is not Ops.CONST
              and dtypes.is_float(t.dtype)]
    if not params:
      raise RuntimeError(f"Tensor.backward: nothing this tensor (shape {self.shape}) depends on requires grad")
    for t, g in zip(params, self.gradient(*params, gradient=gradient, materialize_grads=True)):
      t.grad = g if t.grad is None else t.grad + g
    return self

  @classmethod
  @contextlib.contextmanager
  def train(cls, mode: bool = True) -> Iterator[None]:
    """`with Tensor.train():` sets Tensor.training inside the block (BatchNorm uses batch statistics)."""
    prev = cls.training
    cls.training = mode
    try:
      yield
    finally:
      cls.training = prev
