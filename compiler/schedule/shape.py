"""Shapes of tensor-level UOps, derived from the movement/reduce args (see "Kernel ASTs from the scheduler")."""
from __future__ import annotations

import math

from compiler.uop import FastOps, GroupOp, Ops, UOp, toposort

Shape = tuple[int, ...]

# ops whose shape is their first source's
_SAME_AS_SRC = {Ops.CONTIGUOUS, Ops.DETACH, Ops.CAST, Ops.BITCAST, Ops.BUFFERIZE, Ops.AFTER, Ops.COPY,
                Ops.ASSIGN} | GroupOp.ALU
_KEY = "_tensor_shape"


def _shape_one(u: UOp) -> Shape | None:
  op, arg = u.op, u.arg
  if op is FastOps.BUFFER:
    return (arg[1],)
  if op in (FastOps.CONST, FastOps.DEFINE_VAR):
    return ()
  if op in (FastOps.RESHAPE, FastOps.EXPAND):
    return tuple(arg)
  src = u.src[0].__dict__.get(_KEY) if u.src else None
  if src is None:
    return None
  if op is FastOps.PERMUTE:
    return tuple(src[i] for i in arg)
  if op is FastOps.PAD:
    return tuple(s + b + a for s, (b, a) in zip(src, arg))
  if op is FastOps.SHRINK:
    return tuple(e - b for b, e in arg)
  if op is FastOps.FLIP:
    return src
  if op is FastOps.REDUCE_AXIS:
    return tuple(1 if i in arg[1] else s for i, s in enumerate(src))
  if op in _SAME_AS_SRC:
    if op is FastOps.WHERE:
      return u.src[1].__dict__.get(_KEY)
    return src
  return None


def shape_of(u: UOp) -> Shape:
  """The shape of a tensor-level UOp; raises ValueError for nodes that have none (kernel-level nodes)."""
  d = u.__dict__
  got = d.get(_KEY)
  if got is not None:
    return got
  # the usual case, a node just built on sources whose shapes are known: its own rule, no walk (a training step
  # asks ~200 times a step, and the walk with its gate was most of that)
  got = _shape_one(u)
  if got is not None:
    d[_KEY] = got
    return got
  for x in toposort(u, gate=lambda y: _KEY not in y.__dict__ and y.op not in (FastOps.BUFFER, FastOps.KERNEL)):
    if _KEY in x.__dict__:
      continue
    s = _shape_one(x)
    if s is not None:
      x.__dict__[_KEY] = s
  got = u.__dict__.get(_KEY)
  if got is None:
    raise ValueError(f"{u.op} node has no tensor shape")
  return got


def prod(xs) -> int:
  return math.prod(xs)


def strides_for(shape: Shape) -> Shape:
  """Row-major strides in elements."""
  out, acc = [], 1
  for s in reversed(shape):
    out.append(acc)
    acc *= s
  return tuple(reversed(out))
