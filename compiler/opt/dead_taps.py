"""Dead reduce taps: the last steps of a sum's REDUCE range where every term is zero, cut off the range.

A conv's input gradient reads the output gradient back through `_pool`'s repeat: a k-wide window over i inputs
repeats them e = ceil(k * (i + 1) / i) times, one more than k, and the last repeat reads only padding (a 5x5 conv on
24x24 sums 6x6 taps, 11 of the 36 zero everywhere). A term is zero unless its load's valid (or a WHERE's condition
with a zero else) holds, a product unless one of its factors' does (0 * inf is nan); after `index given valid` those
are linear clauses (`x - kx < 20`, `-1 < x - kx`, `x + 24 * kx < 125`), and at kx = 5 two of them ask x < 5 and x >
4 of one loop variable. Such a step adds zeros only, so the range ends before it: the kernel sums 25 taps, not 36.
"""
from __future__ import annotations

from compiler.dtype import dtypes
from compiler.rewrite import PatternMatcher, UPat
from compiler.symbolic import _clauses, linear_form
from compiler.uop import Ops, UOp, toposort

Support = tuple[tuple[UOp, ...], ...]  # alternatives: u is zero unless all the clauses of one of them hold
UNKNOWN: Support = ((),)  # (no clause known: never dead)


def _support(u: UOp, memo: dict[UOp, Support]) -> Support:
  """Where u can be other than 0: alternatives of clauses, u is exactly 0 unless every clause of one holds (what
  loads' valids and WHEREs with a zero else say)."""
  if u in memo:
    return memo[u]
  out = UNKNOWN
  if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and len(u.src[0].src) > 2 and u.src[0].src[2].dtype == dtypes.bool:
    out = (tuple(_clauses(u.src[0].src[2])),)  # a load whose valid is false reads 0
  elif u.op is Ops.WHERE and u.src[2].op is Ops.CONST and u.src[2].arg == 0:
    cond = tuple(_clauses(u.src[0]))
    out = tuple((*cond, *alt) for alt in _support(u.src[1], memo))
  elif u.op is Ops.MUL:
    # a * b is exactly 0 where both are (0 * inf is nan: one zero factor is not enough), so it can be other than 0
    # where either can: the alternatives of both
    out = (*_support(u.src[0], memo), *_support(u.src[1], memo))
  elif u.op is Ops.CAST:
    out = _support(u.src[0], memo)
  elif u.op is Ops.REDUCE and u.arg is Ops.ADD:  # a sum is zero where every term is: the clauses free of its ranges
    inner = set(u.src[1:])
    out = tuple(tuple(c for c in alt if not inner & set(toposort(c))) for alt in _support(u.src[0], memo))
  memo[u] = out
  return out


def _dead_at(clauses: tuple[UOp, ...], r: UOp, at: int) -> bool:
  """Whether the clauses that read r, with r = at, contradict each other over the (constant) ranges they read: each
  linear `a < b` in one range x bounds x, and some x is left no value."""
  lo: dict[UOp, int] = {}
  hi: dict[UOp, int] = {}
  for c in clauses:
    if c.op is not Ops.CMPLT or c.src[0].dtype == dtypes.bool or r not in toposort(c):
      continue
    (ta, ka), (tb, kb) = linear_form(c.src[0]), linear_form(c.src[1])
    terms = dict(ta)
    for t, v in tb.items():
      terms[t] = terms.get(t, 0) - v
    k = ka - kb + terms.pop(r, 0) * at  # sum(terms) + k < 0, i.e. sum(terms) <= -k - 1
    terms = {t: v for t, v in terms.items() if v}
    if not terms:
      if k >= 0:
        return True
      continue
    if len(terms) != 1:
      continue
    (x, a), = terms.items()
    if x.op is not Ops.RANGE or x.src[0].op is not Ops.CONST:
      continue
    m = -k - 1
    lo.setdefault(x, 0)
    hi.setdefault(x, x.src[0].arg - 1)
    if a > 0:
      hi[x] = min(hi[x], m // a)
    else:
      lo[x] = max(lo[x], -(m // -a))
    if lo[x] > hi[x]:
      return True
  return False


def dead_tail_ranges(ast: UOp) -> dict[UOp, UOp]:
  """{RANGE: the same RANGE with its dead last steps cut off} for the REDUCE(ADD) ranges of ast that have some: each
  step cut adds only zeros to every sum over the range. Empty when there are none."""
  memo: dict[UOp, tuple[UOp, ...]] = {}
  users: dict[UOp, list[UOp]] = {}
  for u in toposort(ast):
    if u.op is Ops.REDUCE:
      for r in u.src[1:]:
        users.setdefault(r, []).append(u)
  out: dict[UOp, UOp] = {}
  for r, reds in users.items():
    if r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST or any(red.arg is not Ops.ADD for red in reds):
      continue
    n = r.src[0].arg
    supports = [_support(red.src[0], memo) for red in reds]
    while n > 1 and all(_dead_at(alt, r, n - 1) for s in supports for alt in s):
      n -= 1
    if n < r.src[0].arg:
      out[r] = r.replace(src=(UOp.const(r.src[0].dtype, n),))
  return out


def _cut(ctx: dict[UOp, UOp], r: UOp) -> UOp | None:
  return ctx.get(r)


# the RANGEs of `dead_tail_ranges` replaced by their shorter selves (ctx: that dict)
pm_dead_taps = PatternMatcher([(UPat(Ops.RANGE, name="r"), _cut)], name="dead reduce taps")
