"""Simplifying kernel ASTs: `compiler.symbolic` plus the scheduler's own cleanups (LOAD validity, invariant REDUCEs)."""
from __future__ import annotations

import math

from compiler.dtype import dtypes
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.symbolic import symbolic
from compiler.uop import Ops, UOp


def _drop_true_valid(i: UOp) -> UOp | None:
  return i.replace(src=i.src[:2]) if i.src[2].op is Ops.CONST and i.src[2].arg is True else None


def _dead_load(ld: UOp, i: UOp) -> UOp | None:
  if len(i.src) == 3 and i.src[2].op is Ops.CONST and i.src[2].arg is False:
    return UOp.const(ld.dtype, 0)
  return None


def _where_gated_load(v: UOp, ld: UOp, z: UOp) -> UOp | None:
  # the load already reads 0 where v is false (+0.0: a pad by -0.0 keeps its WHERE)
  idx = ld.src[0]
  zero = z.arg == 0 and not (isinstance(z.arg, float) and math.copysign(1.0, z.arg) < 0)
  return ld if zero and len(idx.src) == 3 and idx.src[2] is v else None


def _reduce_invariant(red: UOp) -> UOp | None:
  """A REDUCE over ranges its value does not depend on: MAX drops them, ADD multiplies by their trip count (one
  rounding instead of n, and no loop of 2**32 iterations for `Tensor.ones(1).expand(2**32).sum()`)."""
  if red.arg not in (Ops.ADD, Ops.MAX) or red.dtype.scalar() == dtypes.bool:
    return None
  used = set(red.src[0].ranges)
  free = [r for r in red.src[1:] if r not in used and r.src[0].op is Ops.CONST]
  if not free:
    return None
  keep = tuple(r for r in red.src[1:] if r not in free)
  val = red.src[0]
  if red.arg is Ops.ADD:
    n = math.prod(r.src[0].arg for r in free)
    val = val * UOp.const(val.dtype, float(n) if dtypes.is_float(val.dtype) else n)
  return red.replace(src=(val, *keep)) if keep else val


pm_kernel_cleanup = PatternMatcher([
  (UPat(Ops.REDUCE, name="red"), _reduce_invariant),
  (UPat(Ops.INDEX, src=(UPat(Ops.DEFINE_GLOBAL), UPat(), UPat()), name="i"), _drop_true_valid),
  (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="i"),), name="ld"), _dead_load),
  (UPat(Ops.WHERE, src=(UPat.var("v"), UPat(Ops.LOAD, name="ld"), UPat.cvar("z"))), _where_gated_load),
], name="kernel cleanup")


# the scheduler's simplifier of each kernel, the pass (and matcher) "symbolic + kernel cleanup"
pm_symbolic_cleanup = symbolic + pm_kernel_cleanup


def simplify_kernel(ast: UOp) -> UOp:
  """The kernel AST through the pass "symbolic + kernel cleanup"."""
  return graph_rewrite(ast, pm_symbolic_cleanup)
