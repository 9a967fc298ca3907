"""Simplifying kernel ASTs: `compiler.symbolic` plus the scheduler's own rules about LOAD validity."""
from __future__ import annotations

import functools

from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.uop import Ops, UOp


def _drop_true_valid(i: UOp) -> UOp | None:
  return i.replace(src=i.src[:2]) if i.src[2].op is Ops.CONST and i.src[2].arg is True else None


def _dead_load(ld: UOp, i: UOp) -> UOp | None:
  if len(i.src) == 3 and i.src[2].op is Ops.CONST and i.src[2].arg is False:
    return UOp.const(ld.dtype, 0)
  return None


def _where_gated_load(v: UOp, ld: UOp, z: UOp) -> UOp | None:
  # the load already reads 0 where v is false
  idx = ld.src[0]
  return ld if z.arg == 0 and len(idx.src) == 3 and idx.src[2] is v else None


pm_kernel_cleanup = PatternMatcher([
  (UPat(Ops.INDEX, src=(UPat(Ops.DEFINE_GLOBAL), UPat(), UPat()), name="i"), _drop_true_valid),
  (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="i"),), name="ld"), _dead_load),
  (UPat(Ops.WHERE, src=(UPat.var("v"), UPat(Ops.LOAD, name="ld"), UPat.cvar("z"))), _where_gated_load),
], name="kernel cleanup")


@functools.cache
def kernel_simplifier() -> PatternMatcher:
  """`compiler.symbolic.symbolic` plus the kernel cleanups, as one matcher."""
  from compiler.symbolic import symbolic
  return PatternMatcher([(r.pat, r.fn) for r in symbolic.rules + pm_kernel_cleanup.rules], name="simplify")


def simplify_kernel(ast: UOp) -> UOp:
  return graph_rewrite(ast, kernel_simplifier(), name="simplify")
