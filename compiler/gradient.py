"""Reverse-mode derivatives of tensor graphs: one rule per op in `pm_gradient`, run as the traced "gradient" rewrite.

The backward pass is a bottom-up `graph_rewrite` over a chain of markers, `NOOP(x, prev, arg="gradient")`, one per
forward node on a path from the root to a target, in reverse topological order (the root's marker deepest, so it is
rewritten first). A rule matches the marker of one op, reads the gradient flowing into `x` from `ctx`, adds its
sources' shares to `ctx` and rewrites the marker to `GROUP(prev, *shares)`: each differentiated op is one match in the
trace, with the file:line of its rule, and the final graph holds the whole backward graph.
"""
from __future__ import annotations

import math
from typing import Callable

from compiler import gradient_cache
from compiler.device import copy_to, default_device, device_of
from compiler.dtype import dtypes
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.schedule.shape import shape_of
from compiler.trace import recorder
from compiler.trace.recorder import trace_context
from compiler.uop import GroupOp, Ops, UOp, toposort

Grads = tuple[UOp | None, ...]
_MARK = "gradient"
_LN2 = math.log(2)


# ---- tensor-level node builders (constants are broadcast to full shape: the tensor graph has no implicit broadcast)

def _full(like: UOp, value: float | bool, shape: tuple[int, ...] | None = None, dtype=None) -> UOp:
  shape = shape_of(like) if shape is None else shape
  c = UOp.const(dtype or like.dtype, value)
  if not shape:
    return c
  return UOp(Ops.EXPAND, c.dtype, (UOp(Ops.RESHAPE, c.dtype, (c,), (1,) * len(shape)),), shape)


def _c(like: UOp, value: float) -> UOp:
  """A constant of like's dtype and shape."""
  return _full(like, value)


def _mop(u: UOp, op: Ops, arg) -> UOp:
  return UOp(op, u.dtype, (u,), arg)


def _where(cond: UOp, x: UOp, y: UOp) -> UOp:
  return UOp(Ops.WHERE, x.dtype, (cond, x, y))


def _reduce(u: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
  """REDUCE_AXIS keeping the reduced dims; a half sum accumulates in float32 (as the front end's sum)."""
  if not axes:
    return u
  if op is Ops.ADD and u.dtype == dtypes.float16:
    return UOp(Ops.REDUCE_AXIS, dtypes.float32, (u.cast(dtypes.float32),), (op, axes)).cast(u.dtype)
  return UOp(Ops.REDUCE_AXIS, u.dtype, (u,), (op, axes))


def _expand(u: UOp, shape: tuple[int, ...]) -> UOp:
  return u if shape_of(u) == shape else _mop(u, Ops.EXPAND, shape)


def _unbroadcast(g: UOp, shape: tuple[int, ...]) -> UOp:
  """The gradient of an EXPAND to `g`'s shape from `shape`: summed over the expanded axes."""
  gs = shape_of(g)
  if len(gs) != len(shape):
    raise ValueError(f"gradient: EXPAND from {shape} to {gs} changes the number of dims")
  return _reduce(g, Ops.ADD, tuple(i for i, (s, n) in enumerate(zip(shape, gs)) if s == 1 and n != 1))


# ---- the derivative rules: each gets the forward node x and the gradient g flowing into it, returns its sources'

def _is_zero(u: UOp) -> bool:
  """A broadcast constant 0 (the front end's scalar: CONST under RESHAPE/EXPAND)."""
  while u.op in (Ops.RESHAPE, Ops.EXPAND):
    u = u.src[0]
  return u.op is Ops.CONST and u.arg == 0


def _where_grads(x: UOp, g: UOp) -> Grads:
  """g to the chosen source. relu's `(a <= 0).where(0, a)` chooses by its output (x <= 0 exactly where a <= 0, nan
  and -0.0 included), so its backward reads x, which the next layer keeps anyway, and a need not stay in memory (a
  conv's output and its relu were two buffers of the step, each the layer's activation size)."""
  cond, t, f = x.src
  if _is_zero(t) and cond.op is Ops.OR and sorted(s.op.name for s in cond.src) == ["CMPEQ", "CMPLT"] and \
      all(s.src[0] is f and _is_zero(s.src[1]) for s in cond.src):
    cond = cond.substitute({f: x})
  zero = _c(g, 0.0)
  return None, _where(cond, g, zero), _where(cond, zero, g)


def _max_grads(x: UOp, g: UOp) -> Grads:
  """All of g to the larger source, half to each at a tie (torch's maximum); a where, not g times 0 or 1, which was
  nan for an infinite g."""
  a, b = x.src
  zero = _c(g, 0.0)
  half = g * _c(g, 0.5)
  eq = a.eq(b)
  return (_where(a.alu(Ops.CMPLT, b), zero, _where(eq, half, g)),
          _where(b.alu(Ops.CMPLT, a), zero, _where(eq, half, g)))


def _reduce_grads(x: UOp, g: UOp) -> Grads:
  a = x.src[0]
  op, axes = x.arg
  shape = shape_of(a)
  g_in = _expand(g.cast(a.dtype) if g.dtype != a.dtype else g, shape)
  if op is Ops.ADD:
    return (g_in,)
  if op is Ops.MAX:  # shared equally among the maxima, as tinygrad
    mask = a.eq(_expand(x, shape)).cast(a.dtype)
    return (mask / _expand(_reduce(mask, Ops.ADD, axes), shape) * g_in,)
  if op is Ops.MUL:  # the product of the others, also where some of the factors are zero
    is_zero = a.eq(_c(a, 0.0))
    zeros = _expand(_reduce(is_zero.cast(a.dtype), Ops.ADD, axes), shape)
    others_nonzero = _expand(_reduce(_where(is_zero, _c(a, 1.0), a), Ops.MUL, axes), shape)
    one_zero_here = is_zero & zeros.eq(_c(a, 1.0))
    share = _where(zeros.eq(_c(a, 0.0)), _expand(x, shape) / a, _where(one_zero_here, others_nonzero, _c(a, 0.0)))
    return (share * g_in,)
  raise NotImplementedError(f"gradient: no derivative for REDUCE_AXIS {op}")


def _permute_grads(x: UOp, g: UOp) -> Grads:
  inverse = tuple(sorted(range(len(x.arg)), key=lambda i: x.arg[i]))
  return (_mop(g, Ops.PERMUTE, inverse),)


def _pad_grads(x: UOp, g: UOp) -> Grads:
  shape = shape_of(x.src[0])
  return (_mop(g, Ops.SHRINK, tuple((b, b + s) for (b, _), s in zip(x.arg, shape))),)


def _shrink_grads(x: UOp, g: UOp) -> Grads:
  shape = shape_of(x.src[0])
  return (_mop(g, Ops.PAD, tuple((b, s - e) for (b, e), s in zip(x.arg, shape))),)


def _cast_grads(x: UOp, g: UOp) -> Grads:
  return (g.cast(x.src[0].dtype) if dtypes.is_float(x.src[0].dtype) else None,)


def _pow_grads(x: UOp, g: UOp) -> Grads:
  """torch's pow_backward_self and pow_backward_exponent: g * b * a**(b - 1), 0 where b == 0, and g * a**b * ln a, 0
  where a == 0 and b >= 0 (inf, -inf and nan where those are: b * 0**(b - 1) at a zero base, ln of a negative one).
  Each where's unused branch gets safe inputs (b = 1, a = 1): its 0 * inf would be nan in a second derivative."""
  a, b = x.src
  zero_b = b.eq(_c(b, 0.0))
  safe_b = _where(zero_b, _c(b, 1.0), b)
  da = _where(zero_b, _c(g, 0.0), g * (safe_b * a.alu(Ops.POW, safe_b - _c(b, 1.0))))
  zero_a = a.eq(_c(a, 0.0)) & (_c(b, 0.0).alu(Ops.CMPLT, b) | b.eq(_c(b, 0.0)))  # (b >= 0: false for nan)
  safe_a = _where(zero_a, _c(a, 1.0), a)
  return da, g * _where(zero_a, _c(x, 0.0), x * (safe_a.log2() * _c(a, _LN2)))


def _copy_back(x: UOp, g: UOp) -> UOp:
  """A COPY's gradient: g, on the device the COPY's source lives on (copied back where g is elsewhere)."""
  dev = device_of(x.src[0]) or default_device()
  return g if device_of(g) in (None, dev) else copy_to(g, dev)


def _flow(ctx: dict[UOp, UOp], x: UOp, prev: UOp, derivative: Callable[[UOp], Grads]) -> UOp | None:
  """Shares of x's gradient go to its (float) sources in ctx; the marker becomes GROUP(prev, *shares)."""
  g = ctx.get(x)
  if g is None:  # nothing flows into x (it is only reached through non-differentiable ops)
    return None
  shares = derivative(g)
  for s, share in zip(x.src, shares):
    if share is None or not dtypes.is_float(s.dtype):
      continue
    ctx[s] = share if s not in ctx else ctx[s] + share
  return UOp(Ops.GROUP, dtypes.void, (prev, *(s for s in shares if s is not None)))


def _no_rule(ctx: dict[UOp, UOp], x: UOp, prev: UOp) -> UOp | None:
  if x not in ctx:
    return None
  raise NotImplementedError(f"gradient: no derivative rule for {x.op} (dtype {x.dtype}, shape {shape_of(x)})")


def _marker(op: Ops | set | None) -> UPat:
  return UPat(Ops.NOOP, arg=_MARK, src=(UPat(op, name="x"), UPat.var("prev")))


# piecewise constant or not real-valued: no gradient flows through (tinygrad's rule for comparisons)
_NO_GRADIENT = GroupOp.Comparison | {Ops.TRUNC, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR,
                                     Ops.BITCAST, Ops.ASSIGN}


def _d(op: Ops | set | None, fn: Callable, name: str | None = None) -> tuple[UPat, Callable, str]:
  """The derivative rule of op(s): fn on op's marker, named "d/dx OP" (the trace points at fn's line for its
  matches)."""
  ops = op.name if isinstance(op, Ops) else "|".join(o.name for o in sorted(op or (), key=lambda o: o.value))
  return (_marker(op), fn, name or f"d/dx {ops}")


# one rule per op, named for it ("d/dx MUL"); each lambda is where the trace points for its matches
pm_gradient = PatternMatcher([
  _d(Ops.ADD, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (g, g))),
  _d(Ops.SUB, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (g, -g))),
  _d(Ops.MUL, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (g * x.src[1], g * x.src[0]))),
  _d(Ops.FDIV, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (g / x.src[1], -(g / x.src[1]) * x))),
  _d(Ops.NEG, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (-g,))),
  _d(Ops.MAX, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: _max_grads(x, g))),
  _d(Ops.EXP2, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (g * x * _c(x, _LN2),))),
  _d(Ops.LOG2, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (g / (x.src[0] * _c(x, _LN2)),))),
  _d(Ops.SIN, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (g * (_c(x, math.pi / 2) - x.src[0]).sin(),))),
  _d(Ops.SQRT, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (g / (x * _c(x, 2.0)),))),
  _d(Ops.RECIP, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (-g * x * x,))),
  _d(Ops.POW, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: _pow_grads(x, g))),
  _d(Ops.WHERE, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: _where_grads(x, g))),
  _d(Ops.CAST, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: _cast_grads(x, g))),
  _d(Ops.REDUCE_AXIS, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: _reduce_grads(x, g))),
  _d(Ops.RESHAPE, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (_mop(g, Ops.RESHAPE, shape_of(x.src[0])),))),
  _d(Ops.EXPAND, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (_unbroadcast(g, shape_of(x.src[0])),))),
  _d(Ops.PERMUTE, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: _permute_grads(x, g))),
  _d(Ops.PAD, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: _pad_grads(x, g))),
  _d(Ops.SHRINK, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: _shrink_grads(x, g))),
  _d(Ops.FLIP, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (_mop(g, Ops.FLIP, x.arg),))),
  _d(Ops.CONTIGUOUS, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (g,))),
  _d(Ops.COPY, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (_copy_back(x, g),))),
  _d(_NO_GRADIENT, lambda ctx, x, prev: _flow(ctx, x, prev, lambda g: (None,) * len(x.src)),
     "d/dx = 0: comparison, integer or bit op"),
  _d(None, _no_rule, "d/dx missing: an op with no derivative rule"),
], name="gradient")


def _path_to_targets(root: UOp, targets: set[UOp]) -> list[UOp]:
  """Nodes under root with a target below them (targets included), sources first; DETACH stops the walk."""
  order = toposort(root, gate=lambda u: u.op is not Ops.DETACH)
  on_path: dict[UOp, bool] = {}
  for u in order:
    on_path[u] = u in targets or (u.op is not Ops.DETACH and any(on_path.get(s, False) for s in u.src))
  return [u for u in order if on_path[u] and u.src and u.op is not Ops.DETACH]


def _rewrite_gradients(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """The gradients of the targets root reads; one read only through ops with no gradient (comparisons, as
  copysign's sign or pow's special cases) gets zeros, as torch: a zero derivative is no missing one."""
  grads: dict[UOp, UOp] = {root: root_grad}
  prev = UOp(Ops.GROUP, dtypes.void, ())
  path = _path_to_targets(root, targets)
  for u in reversed(path):
    prev = UOp(Ops.NOOP, dtypes.void, (u, prev), _MARK)
  with trace_context("gradient", kind="gradient"):
    graph_rewrite(UOp.sink(prev), pm_gradient, ctx=grads, bottom_up=True)
  read = {s for u in path for s in u.src} | {root}
  return {t: grads[t] if t in grads else _c(t, 0.0) for t in targets if t in grads or t in read}


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """The gradients of root (weighted by root_grad) for the targets it depends on, by the "gradient" rewrite; while
  not recording, a loss of a structure differentiated before reuses that rewrite's result (gradient_cache)."""
  if recorder.RECORDER is not None or not gradient_cache.GRADIENTS.enabled():
    return _rewrite_gradients(root, root_grad, targets)
  key, order = gradient_cache.loss_structure(root, root_grad, targets)
  hit = gradient_cache.GRADIENTS.get(key)
  if hit is not None:
    return gradient_cache.replay(order, *hit)
  grads = _rewrite_gradients(root, root_grad, targets)
  made = gradient_cache.record(order, grads)
  if made is not None:
    gradient_cache.GRADIENTS.put(key, made)
  return grads
