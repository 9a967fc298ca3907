"""Index-math cleanup after expansion: constant folding, identities and div/mod folding over linear forms.

`compiler.symbolic.symbolic` runs once before expansion; after it, `pm_index_fold` re-runs a few of its rules (the same
functions) plus `_fold_divmod`: the few codegen relies on to see that
per-lane addresses are contiguous, e.g. `(r*4+3)//4 -> r` and `(r*4+3)%4 -> 3`."""
from __future__ import annotations

from compiler.dtype import dtypes
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.symbolic import (
  add_zero,
  div_one,
  fold_alu,
  fold_by_bounds,
  linear_form,
  mod_small,
  mul_one,
  pm_index_given_valid,
  symbolic,
  where_const,
)
from compiler.uop import FastOps, GroupOp, Ops, UOp

LinearForm = tuple[dict[UOp, int], int]




def index_linear_form(u: UOp) -> LinearForm:
  """A scalar int u as sum(coeff * term) + const (`compiler.symbolic.linear_form`); any other u is its own term.
  Remembered on u (the expander asks it of every lane's index, again for each group of lanes): the caller must not
  change the dict."""
  got = u.__dict__.get("_linear_form")
  if got is not None:
    return got
  if not (dtypes.is_int(u.dtype) and u.dtype.count == 1):
    got = u.__dict__["_linear_form"] = ({u: 1}, 0)
    return got
  # a lane's index is its row's plus a constant: the row's form (remembered on the row) shifted, not the whole sum
  # walked again for each lane; linear_form(u) exactly (its terms in the same order: a constant adds none)
  row, shift = u, 0
  add_op, const_op = FastOps.ADD, FastOps.CONST
  while row.op is add_op and const_op in (row.src[0].op, row.src[1].op) and "_linear_form" not in row.__dict__:
    c, row = (row.src[1], row.src[0]) if row.src[1].op is const_op else (row.src[0], row.src[1])
    shift += c.arg
  terms, const = row.__dict__.get("_linear_form") or row.__dict__.setdefault("_linear_form", linear_form(row))
  got = u.__dict__["_linear_form"] = (terms, const + shift)
  return got


def build(terms: dict[UOp, int], const: int, dtype) -> UOp:
  """The UOp of a linear form."""
  out: UOp | None = None
  for t, c in terms.items():
    x = t if c == 1 else t * UOp.const(dtype, c)
    out = x if out is None else out + x
  if out is None:
    return UOp.const(dtype, const)
  return out if const == 0 else out + UOp.const(dtype, const)


def _fold_divmod(x: UOp) -> UOp | None:
  """(q*c + rest) // c -> q + rest//c and (q*c + rest) % c -> rest % c, for non-negative parts."""
  a, d = x.src
  c = d.arg
  if not isinstance(c, int) or c <= 0 or a.vmin < 0:
    return None
  terms, const = index_linear_form(a)
  qt = {t: k // c for t, k in terms.items() if k % c == 0}
  rt = {t: k for t, k in terms.items() if k % c != 0}
  qc, rc = divmod(const, c)
  if not qt and qc == 0:
    return None
  q, rest = build(qt, 0, a.dtype), build(rt, rc, a.dtype)
  if q.vmin < 0 or rest.vmin < 0:
    return None
  if x.op is Ops.MOD:
    return rest % d
  return build(qt, qc, a.dtype) + rest // d


_int = tuple(dtypes.ints) + (dtypes.bool,)

# the few folds codegen needs after expansion (the full `symbolic` runs once before it), sharing symbolic's rules
pm_index_fold = PatternMatcher([
  (UPat(tuple(GroupOp.ALU), dtype=_int, src=UPat(Ops.CONST), name="u"), fold_alu),
  # (the root's dtype is its operand's, said on the root too: the matcher then skips the rules on every float node)
  (UPat(Ops.ADD, _int, [UPat.var("x", _int), UPat.const(None, 0).named("c")]), add_zero),
  (UPat(Ops.MUL, _int, [UPat.var("x", _int), UPat.const(None, 1)]), mul_one),
  (UPat(Ops.IDIV, dtypes.ints, (UPat.var("x", dtypes.ints), UPat.const(None, 1))), div_one),
  (UPat(Ops.WHERE, src=(UPat.cvar("c", dtypes.bool), UPat.var("t"), UPat.var("f"))), where_const),
  (UPat(Ops.MOD, dtypes.ints, (UPat.var("x", dtypes.ints), UPat.cvar("d"))), mod_small),
  (UPat((Ops.IDIV, Ops.MOD), dtype=dtypes.ints, src=(UPat.var(), UPat(Ops.CONST)), name="x"), _fold_divmod),
  (UPat(tuple(GroupOp.ALU), dtype=_int, name="u"), fold_by_bounds),
], name="index fold", optional=True)


def symbolic_then_index_fold(sink: UOp) -> UOp:
  """The passes "symbolic" then "index fold": codegen's simplification of a kernel before expansion."""
  return graph_rewrite(graph_rewrite(graph_rewrite(sink, pm_index_given_valid), symbolic), pm_index_fold)
