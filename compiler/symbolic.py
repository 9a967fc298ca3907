"""The simplifier `symbolic`, composed of named matchers: constant folding, identities, index math, canonical order.

Integer rules are exact in the wrap-around arithmetic of the node's dtype (C semantics: `//` truncates toward zero,
`%` has the sign of the dividend, see `exec_alu`). Rules about `//`, `%` and `<` that reason about the value of a
sum check with vmin/vmax that the sum cannot wrap (`_known`) and has the sign they need. Float rules only fold what
IEEE arithmetic gives exactly (x*1, x/1, --x); `x*0` and `x-x` stay for floats because of NaN and inf. `x+0` is
folded for floats too: the result compares equal, only the sign of a zero result can differ.
"""
from __future__ import annotations

import math
import weakref
import zlib
from typing import Any

import numpy as np

from compiler.dtype import DType, PtrDType, dtypes, truncate
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.uop import FastOps, GroupOp, Ops, UOp, arg_str, exec_alu, register_simplifier, toposort

# ---- helpers


def _is_int(u: UOp) -> bool:
  """A scalar integer node (not bool, vector or pointer): what the index math rules apply to."""
  return u.dtype.count == 1 and not isinstance(u.dtype, PtrDType) and dtypes.is_int(u.dtype)


def _is_intlike(u: UOp) -> bool:
  return _is_int(u) or u.dtype == dtypes.bool


def _known(u: UOp) -> bool:
  """vmin/vmax say something: a node that may wrap around gets the whole range of its dtype, so this also says that
  its value is the exact (non-wrapped) value of its expression."""
  dt = u.dtype.scalar()
  return u.vmin != dtypes.min(dt) or u.vmax != dtypes.max(dt)


def _fits(dt: DType, v: int) -> bool:
  return dtypes.min(dt) <= v <= dtypes.max(dt)


def _const(dt: DType, v: Any) -> UOp:
  return UOp.const(dt, v)


# a node's structural hash and order key live in its own __dict__ (they die with it), as index_linear_form's forms:
# a WeakKeyDictionary's lookups are Python code that makes a weak reference each, and _shash's walk asked one of
# every node it passed (issue 29)
_SHASH_KEY, _ORDER_KEY = "_shash", "_order_key"
_DTYPE_CRC: dict = {}  # a dtype's crc32 of its repr, asked of every node hashed


def _arg_hash(arg: Any) -> int:
  # str/enum hashes change per process (PYTHONHASHSEED); the order of terms must not
  if arg is None:
    return 0
  if isinstance(arg, int):
    return hash(arg)
  return zlib.crc32(arg_str(arg).encode())


def _shash(u: UOp) -> int:
  """A structural hash that is the same in every process (so canonical order is too)."""
  h = u.__dict__.get(_SHASH_KEY)
  if h is not None:
    return h
  for x in toposort(u, gate=lambda y: _SHASH_KEY not in y.__dict__):
    d = x.__dict__
    if _SHASH_KEY not in d:
      crc = _DTYPE_CRC.get(x.dtype)
      if crc is None:
        crc = _DTYPE_CRC[x.dtype] = zlib.crc32(repr(x.dtype).encode())
      d[_SHASH_KEY] = hash((x.op.value, crc, _arg_hash(x.arg), tuple(s.__dict__[_SHASH_KEY] for s in x.src)))
  return u.__dict__[_SHASH_KEY]


def _order_head(u: UOp) -> tuple:
  """order_key's first three fields: variables by name, then ranges by axis, then other nodes by op, constants last."""
  op = u.op
  if op is FastOps.DEFINE_VAR:
    return (0, str(u.arg[0]), 0)
  if op is FastOps.RANGE:
    return (1, "", u.arg[0] if isinstance(u.arg, tuple) and isinstance(u.arg[0], int) else 0)
  if op is FastOps.CONST:
    return (3, "", 0)
  return (2, "", op.value)


def order_key(u: UOp) -> tuple:
  """The canonical order of operands: variables by name, then ranges by axis, then other nodes, constants last."""
  k = u.__dict__.get(_ORDER_KEY)
  if k is not None:
    return k
  # the id only breaks ties between different nodes with colliding hashes, so the order is total and sorting stable
  k = (*_order_head(u), _shash(u), id(u))
  u.__dict__[_ORDER_KEY] = k
  return k


def _ordered_before(b: UOp, a: UOp) -> bool:
  """order_key(b) < order_key(a), the structural hashes worked out only where the heads tie: most operand pairs differ
  in kind or op (a load times a constant, a sum of a product and a load), and a hash walks the node's whole graph the
  first time (codegen's "symbolic" asked it of every commutative node: 25 us a node, GPT step's first call)."""
  hb, ha = _order_head(b), _order_head(a)
  if hb != ha:
    return hb < ha
  return order_key(b) < order_key(a)


# ---- linear forms: an int expression as sum(coeff * term) + const

_SUMS = frozenset((Ops.ADD, Ops.SUB, Ops.NEG))
_SIGNS = {Ops.ADD: (1, 1), Ops.SUB: (1, -1), Ops.NEG: (-1,)}  # each source's sign in a sum


def _is_linear(u: UOp) -> bool:
  op = u.op
  return op in _SUMS or (op is FastOps.MUL and FastOps.CONST in (u.src[0].op, u.src[1].op))


def linear_form(u: UOp) -> tuple[dict[UOp, int], int]:
  """u as ({term: coefficient}, constant), looking through ADD, SUB, NEG and MUL by a constant.

  Coefficients are exact Python ints (not wrapped), so when `_known(u)` the form is u's exact value. Linear in the
  size of the graph even when sums share subterms."""
  mul, const = FastOps.MUL, FastOps.CONST
  if not _is_linear(u):  # (a term or a constant: no walk; 0 + arg: the walk's sum, a bool constant an int)
    return ({}, 0 + u.arg) if u.op is const else ({u: 1}, 0)
  # toposort(u, gate=_is_linear)'s walk and order (the terms come out in the order they are met), written out: the
  # gate is a test here, not a call a node, and each node's test is kept for the second loop (issue 29: codegen asks
  # the form of every index it folds)
  order: dict[UOp, bool] = {}  # node -> linear, sources before users
  stack: list[tuple[UOp, int]] = [(u, 0)]  # (node, 0: to visit, 1: done, linear, 2: done, a term)
  while stack:
    x, state = stack.pop()
    if x in order:
      continue
    if state:
      order[x] = state == 1
      continue
    op = x.op
    if op in _SUMS or (op is mul and const in (x.src[0].op, x.src[1].op)):
      stack.append((x, 1))
      for s in reversed(x.src):
        if s not in order:
          stack.append((s, 0))
    else:
      stack.append((x, 2))
  coeff: dict[UOp, int] = {u: 1}
  terms: dict[UOp, int] = {}
  k = 0
  for x, linear in reversed(order.items()):  # users before their sources: a coefficient is complete when reached
    c = coeff.pop(x, 0)
    if c == 0:
      continue
    if not linear:
      if x.op is const:
        k += c * x.arg
      else:
        terms[x] = terms.get(x, 0) + c
    elif x.op is mul:
      v, cst = (x.src[0], x.src[1]) if x.src[1].op is const else (x.src[1], x.src[0])
      coeff[v] = coeff.get(v, 0) + c * cst.arg
    else:
      for s, sign in zip(x.src, _SIGNS[x.op]):
        coeff[s] = coeff.get(s, 0) + c * sign
  return {t: c for t, c in terms.items() if c != 0}, k


def _add_term(terms: dict[UOp, int], t: UOp, c: int) -> dict[UOp, int]:
  terms[t] = terms.get(t, 0) + c
  return terms


# sums built by build_sum: already canonical, so fold_sum skips them without flattening them again
_canonical_sums: weakref.WeakSet = weakref.WeakSet()


def build_sum(dt: DType, terms: dict[UOp, int], k: int = 0) -> UOp:
  """The canonical UOp of a linear form: terms in `order_key` order, left-associated, the constant last."""
  items = []
  for t, c in terms.items():
    c = truncate(dt, c)
    if c != 0:
      items.append((order_key(t), t, c))
  items.sort(key=lambda x: x[0])
  out: UOp | None = None
  for _, t, c in items:
    term = t if c == 1 else UOp(FastOps.MUL, dt, (t, _const(dt, c)))
    out = term if out is None else UOp(FastOps.ADD, dt, (out, term))
    if out.op is FastOps.ADD:
      _canonical_sums.add(out)
  k = truncate(dt, k)
  if out is None:
    return _const(dt, k)
  if k != 0:
    out = UOp(FastOps.ADD, dt, (out, _const(dt, k)))
    _canonical_sums.add(out)
  return out


# ---- constant folding

_NOFOLD = object()


def _eval(op: Ops, dt: DType, in_dt: DType, vals: tuple) -> Any:
  """exec_alu with the cases C leaves undefined or Python can't do (huge shifts, complex powers) left unfolded."""
  if dtypes.is_int(in_dt) and op in (FastOps.SHL, FastOps.SHR, FastOps.POW):
    bits = 8 * in_dt.itemsize
    if op is FastOps.POW:
      return _NOFOLD if vals[1] < 0 else truncate(dt, pow(vals[0], vals[1], 1 << bits))
    if not 0 <= vals[1] < bits:
      return _NOFOLD
  if op is FastOps.POW:  # Python raises or goes complex where C's pow gives inf or NaN; numpy does what C does
    with np.errstate(all="ignore"):
      return truncate(dt, float(np.power(np.float64(vals[0]), np.float64(vals[1]))))
  try:
    return exec_alu(op, dt, vals)
  except (ArithmeticError, ValueError, TypeError):
    return _NOFOLD


def fold_alu(u: UOp) -> UOp | None:
  """An ALU op on constants is a constant."""
  if u.dtype.count != 1 or isinstance(u.dtype, PtrDType):
    return None
  v = _eval(u.op, u.dtype, u.src[0].dtype, tuple(s.arg for s in u.src))
  return None if v is _NOFOLD else _const(u.dtype, v)


def fold_cast(u: UOp, c: UOp) -> UOp | None:
  if u.dtype.count != 1 or isinstance(u.dtype, PtrDType):
    return None
  if isinstance(c.arg, float) and not math.isfinite(c.arg) and dtypes.is_int(u.dtype):
    return None  # undefined in C
  return _const(u.dtype, c.arg)


def fold_bitcast(u: UOp, c: UOp) -> UOp | None:
  src, dst = c.dtype, u.dtype
  if dst.count != 1 or isinstance(dst, PtrDType) or dtypes.bool in (src, dst) or src.itemsize != dst.itemsize:
    return None
  return _const(dst, np.array(c.arg, dtype=src.np).view(dst.np).item())


def fold_by_bounds(u: UOp) -> UOp | None:
  """An int/bool node whose vmin == vmax is that constant (this decides comparisons by bounds)."""
  dt = u.dtype
  if dt.count != 1 or not (dtypes.is_int(dt) or dt is dtypes.bool):  # (dtypes are interned: one bool)
    return None
  mm = u._mm
  if mm is None and dt is not dtypes.bool and u.op in _SUMS_OF_TWO and _sum_spans(u, 3):
    return None
  lo, hi = mm or u._min_max  # (one read: vmin and vmax are a property call each)
  return _const(dt, lo) if lo == hi else None


# int ops that take several values where an operand does (the widths add up; a sum that may overflow spans the type),
# so that fold_by_bounds needs not their bounds, nor the other operand's, to know they do not fold: the expander's
# lanes are mostly sums over a loop index whose bounds are known (issue 29)
_SUMS_OF_TWO = frozenset((Ops.ADD, Ops.SUB))


def _sum_spans(u: UOp, depth: int) -> bool:
  """The int sum u takes several values by what is known without working out bounds: an operand's known bounds span
  values, or, `depth` sums down at most, an operand sum's operand's do (a lane is its row plus a constant)."""
  for s in u.src:
    if (mm := s._mm) is not None:
      if mm[0] != mm[1]:
        return True
    elif depth > 1 and s.op in _SUMS_OF_TWO and s.dtype is u.dtype and _sum_spans(s, depth - 1):
      return True
  return False


constant_folding = PatternMatcher([
  (UPat(GroupOp.ALU, name="u", src=UPat(Ops.CONST)), fold_alu),
  (UPat(Ops.CAST, name="u", src=(UPat.cvar("c"),)), fold_cast),
  (UPat(Ops.BITCAST, name="u", src=(UPat.cvar("c"),)), fold_bitcast),
  (UPat(GroupOp.ALU | {Ops.CAST}, name="u"), fold_by_bounds),
], name="constant folding", optional=True)


# ---- identities

def _negative_zero(c: UOp) -> bool:
  return isinstance(c.arg, float) and c.arg == 0 and math.copysign(1.0, c.arg) < 0


def add_zero(x: UOp, c: UOp) -> UOp | None:
  # x + -0.0 is x for every float; x + 0.0 is not for x = -0.0 (it gives 0.0)
  return x if _is_intlike(x) or _negative_zero(c) else None


def mul_one(x: UOp) -> UOp:
  return x


def mul_zero(x: UOp) -> UOp | None:
  return _const(x.dtype, 0) if _is_intlike(x) else None  # NaN*0 and inf*0 are NaN


def sub_zero(x: UOp, c: UOp) -> UOp | None:
  # x - 0.0 is x for every float; x - -0.0 is x + 0.0, not x for x = -0.0
  return x if _is_intlike(x) or not _negative_zero(c) else None


def sub_self(x: UOp) -> UOp | None:
  return _const(x.dtype, 0) if _is_intlike(x) else None  # inf-inf is NaN


def div_one(x: UOp) -> UOp | None:
  return x


def mod_one(x: UOp) -> UOp | None:
  return _const(x.dtype, 0) if _is_int(x) else None


def double_neg(x: UOp) -> UOp:
  return x


def where_const(c: UOp, t: UOp, f: UOp) -> UOp:
  return t if c.arg else f


def where_same(x: UOp) -> UOp:
  return x


def where_bool(u: UOp, c: UOp, t: UOp, f: UOp) -> UOp | None:
  if u.dtype != dtypes.bool or c.dtype != dtypes.bool:
    return None
  return c if t.arg and not f.arg else c.ne(True) if f.arg and not t.arg else None


def lt_self(u: UOp, x: UOp) -> UOp:
  return _const(u.dtype, False)  # false for NaN too


def eq_self(u: UOp, x: UOp) -> UOp | None:
  return _const(u.dtype, u.op is Ops.CMPEQ) if _is_intlike(x) else None  # NaN != NaN


def max_self(x: UOp) -> UOp:
  return x


def max_by_bounds(x: UOp, y: UOp) -> UOp | None:
  if not _is_intlike(x):
    return None
  return x if x.vmin >= y.vmax else y if y.vmin >= x.vmax else None


def bitwise_const(u: UOp, x: UOp, c: UOp) -> UOp | None:
  """x&0, x|0, x^0, x&ones, x|ones for ints, and the same with False/True for bools."""
  if not _is_intlike(x):
    return None
  ones = truncate(x.dtype, -1)
  if c.arg == 0:
    return _const(x.dtype, 0) if u.op is Ops.AND else x
  if c.arg == ones and u.op is not Ops.XOR:
    return x if u.op is Ops.AND else c
  return None


def bitwise_self(u: UOp, x: UOp) -> UOp | None:
  if not _is_intlike(x):
    return None
  return _const(x.dtype, 0) if u.op is Ops.XOR else x


def bool_cmp_const(u: UOp, x: UOp, c: UOp) -> UOp | None:
  """x != False -> x, x == True -> x, x == False -> not x, for bool x."""
  if x.dtype != dtypes.bool or c.dtype != dtypes.bool:
    return None
  keep = bool(c.arg) == (u.op is Ops.CMPEQ)
  return x if keep else (x.ne(True) if u.op is Ops.CMPEQ else None)


def not_not(x: UOp) -> UOp:
  return x


def cast_noop(u: UOp, x: UOp) -> UOp | None:
  return x if u.dtype == x.dtype else None


# dtypes that hold every value of the key's dtype: a cast there and back is the identity
def _holds(outer: DType, inner: DType) -> bool:
  if dtypes.is_float(outer):
    mantissa = {dtypes.float16: 11, dtypes.float32: 24, dtypes.float64: 53}[outer.scalar()]
    if dtypes.is_float(inner):
      return outer.itemsize >= inner.itemsize
    return inner == dtypes.bool or (dtypes.is_int(inner) and 8 * inner.itemsize <= mantissa)
  if not (dtypes.is_int(outer) or outer == dtypes.bool) or not (dtypes.is_int(inner) or inner == dtypes.bool):
    return False
  return dtypes.min(outer) <= dtypes.min(inner) and dtypes.max(outer) >= dtypes.max(inner)


def cast_roundtrip(u: UOp, mid: UOp, x: UOp) -> UOp | None:
  if u.dtype != x.dtype or u.dtype.count != 1 or mid.dtype.count != 1 or isinstance(u.dtype, PtrDType):
    return None
  return x if _holds(mid.dtype, x.dtype) else None


_x, _y = UPat.var("x"), UPat.var("y")
_bool_x = UPat.var("x", dtypes.bool)

identities = PatternMatcher([
  (_x + UPat.const(None, 0).named("c"), add_zero),
  (_x * UPat.const(None, 1), mul_one),
  (_x * UPat.const(None, 0), mul_zero),
  (_x - UPat.const(None, 0).named("c"), sub_zero),
  (_x - _x, sub_self),
  (_x // UPat.const(None, 1), div_one),
  (_x / UPat.const(None, 1), div_one),
  (_x % UPat.const(None, 1), mod_one),
  (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(_x,)),)), double_neg),
  (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("t"), UPat.var("f"))), where_const),
  (UPat(Ops.WHERE, src=(UPat.var(), _x, _x)), where_same),
  (UPat(Ops.WHERE, name="u", src=(UPat.var("c"), UPat.cvar("t"), UPat.cvar("f"))), where_bool),
  (UPat(Ops.CMPLT, name="u", src=(_x, _x)), lt_self),
  (UPat((Ops.CMPNE, Ops.CMPEQ), name="u", src=(_x, _x)), eq_self),
  (_x.maximum(_x), max_self),
  (_x.maximum(_y), max_by_bounds),
  (UPat((Ops.AND, Ops.OR, Ops.XOR), name="u", src=[_x, UPat.cvar("c")]), bitwise_const),
  (UPat((Ops.AND, Ops.OR, Ops.XOR), name="u", src=(_x, _x)), bitwise_self),
  (_bool_x.ne(True).ne(True), not_not),
  (UPat((Ops.CMPNE, Ops.CMPEQ), name="u", src=[_bool_x, UPat.cvar("c", dtypes.bool)]), bool_cmp_const),
  (UPat(Ops.CAST, name="u", src=(_x,)), cast_noop),
  (UPat(Ops.CAST, name="u", src=(UPat(Ops.CAST, name="mid", src=(_x,)),)), cast_roundtrip),
], name="identities", optional=True)


# ---- index math (ints)

def neg_to_mul(u: UOp, x: UOp) -> UOp | None:
  """-x -> x*-1 for ints, so sums only have to know ADD and MUL."""
  return UOp(Ops.MUL, u.dtype, (x, _const(u.dtype, -1))) if _is_int(u) else None


def _recombine_divmod(terms: dict[UOp, int]) -> int | None:
  """x//c*c*m + x%c*m -> x*m (C: x == x//c*c + x%c for any sign), x's own linear form merged back in. Returns the
  constant that adds to the sum, or None when nothing recombined."""
  extra: int | None = None
  for t in list(terms):
    if t.op is not Ops.MOD or t not in terms or t.src[1].op is not Ops.CONST or t.src[1].arg == 0:
      continue
    m, d = terms[t], UOp(Ops.IDIV, t.dtype, t.src)
    if terms.get(d) != m * t.src[1].arg:
      continue
    del terms[t], terms[d]
    sub, k = linear_form(t.src[0])
    for s, v in sub.items():
      _add_term(terms, s, v * m)
    extra = (extra or 0) + k * m
  return extra


def fold_sum(u: UOp) -> UOp | None:
  """Canonical int sums: like terms merged (x*2+x*3 -> x*5, x+x -> x*2, x-x -> 0), constants combined at the end,
  terms in canonical order, (a+b)*c inside a sum distributed so its terms can merge, x//c*c+x%c -> x."""
  if not _is_int(u) or u in _canonical_sums:
    return None
  terms, k = linear_form(u)
  while (extra := _recombine_divmod(terms)) is not None:
    k += extra
  return build_sum(u.dtype, {t: v for t, v in terms.items() if v != 0}, k)


def mul_const_chain(u: UOp, x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """(x*c1)*c2 -> x*(c1*c2) (wraps like the original)."""
  return UOp(Ops.MUL, u.dtype, (x, _const(u.dtype, c1.arg * c2.arg))) if _is_int(u) else None


def mul_const_out(u: UOp, x: UOp, c: UOp, y: UOp) -> UOp | None:
  """(x*c)*y -> (x*y)*c so constants meet."""
  if not _is_int(u) or y.op is Ops.CONST:
    return None
  return UOp(Ops.MUL, u.dtype, (UOp(Ops.MUL, u.dtype, (x, y)), c))


def distribute_const(u: UOp, x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """(x+c1)*c2 -> x*c2 + c1*c2: the constant can then merge with the enclosing sum."""
  if not _is_int(u):
    return None
  terms, k = linear_form(x)
  return build_sum(u.dtype, {t: v * c2.arg for t, v in terms.items()}, (k + c1.arg) * c2.arg)


def divmod_neg_divisor(u: UOp, x: UOp, d: UOp) -> UOp | None:
  """x // -c -> -(x // c) and x % -c -> x % c (C semantics)."""
  if not _is_int(u) or d.arg >= 0 or not _fits(u.dtype, -d.arg):
    return None
  pos = _const(u.dtype, -d.arg)
  return UOp(Ops.MUL, u.dtype, (x // pos, _const(u.dtype, -1))) if u.op is Ops.IDIV else x % pos


def div_div(u: UOp, x: UOp, a: UOp, b: UOp) -> UOp | None:
  """(x//a)//b -> x//(a*b) for positive a, b (truncation composes)."""
  if not _is_int(u) or a.arg <= 0 or b.arg <= 0 or not _fits(u.dtype, a.arg * b.arg):
    return None
  return x // _const(u.dtype, a.arg * b.arg)


def mod_mod(u: UOp, x: UOp, a: UOp, b: UOp) -> UOp | None:
  """(x%a)%b -> x%b when b divides a (any signs: the remainders keep x's sign)."""
  if not _is_int(u) or a.arg == 0 or b.arg == 0 or a.arg % b.arg != 0:
    return None
  return x % b


def mod_small(x: UOp, d: UOp) -> UOp | None:
  """x % d -> x when |x| < |d|."""
  if not _is_int(x) or d.arg == 0:
    return None
  return x if -abs(d.arg) < x.vmin and x.vmax < abs(d.arg) else None


def div_self(u: UOp, x: UOp) -> UOp | None:
  if not _is_int(u):
    return None
  if u.op is Ops.MOD:
    return _const(u.dtype, 0)  # exec_alu's x%0 is 0 as well
  return _const(u.dtype, 1) if x.vmin > 0 or x.vmax < 0 else None


def divmod_sum(u: UOp, x: UOp, d: UOp) -> UOp | None:
  """(sum) // c and (sum) % c for a constant c > 0, e.g. (x*4+y)//4 -> x and (x*4+y)%4 -> y when 0<=y<4 and the
  sum is non-negative; (a*8+b)//4 -> a*2 + b//4; (x*4+2)//8 -> (x*2+1)//4; (x*4)%8 -> (x%2)*4."""
  dt, c = u.dtype, d.arg
  if not _is_int(u) or c <= 0 or not _known(x):
    return None
  terms, k = linear_form(x)
  is_div = u.op is Ops.IDIV
  if all(v % c == 0 for v in terms.values()) and k % c == 0:  # an exact multiple of c, any sign
    return build_sum(dt, {t: v // c for t, v in terms.items()}, k // c) if is_div else _const(dt, 0)
  # one sign: truncation is floor (or its mirror), so multiples of c split off
  s = 1 if x.vmin >= 0 else -1 if x.vmax <= 0 else 0
  if s != 0:
    quo: dict[UOp, int] = {}
    rem: dict[UOp, int] = {}
    changed = False
    for t, v in terms.items():
      q, r = divmod(s * v, c)
      if r == 0:
        quo[t] = q
        changed = True
      elif is_div:
        rem[t] = s * v
      else:
        rem[t] = r
        changed |= r != s * v
    qk, rk = divmod(s * k, c)
    changed |= qk != 0
    rsum = build_sum(dt, rem, rk)
    if (changed or rsum.vmax < c) and _known(rsum) and rsum.vmin >= 0:
      if is_div:
        out = {t: s * q for t, q in quo.items()}
        if rsum.vmax >= c:
          _add_term(out, rsum // d, s)
        return build_sum(dt, out, s * qk)
      if rsum.vmax >= c:
        return build_sum(dt, {rsum % d: s})
      return rsum if s == 1 else build_sum(dt, {t: -v for t, v in rem.items()}, -rk)
  g = math.gcd(c, k, *terms.values())
  if g > 1:  # (g*a) / (g*b) truncates like a / b, and (g*a) % (g*b) == g * (a % b)
    inner = build_sum(dt, {t: v // g for t, v in terms.items()}, k // g)
    dg = _const(dt, c // g)
    return inner // dg if is_div else build_sum(dt, {inner % dg: g})
  return None


def _cmp_linear(x: UOp, c: int, const_left: bool) -> UOp | None:
  """x < c (or c < x) for an int sum x = g*B + S + k: the constant k moves across, and when the floor of
  (c-k-1-S)/g is the same L for every value of S (e.g. x*4+y < 8 with 0<=y<4), x < c becomes B <= L."""
  if not _is_int(x) or not _known(x):
    return None
  dt = x.dtype
  terms, k = linear_form(x)
  if not terms:
    return None
  # c < x is not(x < c+1); below, the question is always "sum of terms < bound"
  bound = (c + 1 if const_left else c) - k
  g = math.gcd(*[v for v in terms.values() if abs(v) != 1])
  big = {t: v // g for t, v in terms.items() if g > 1 and v % g == 0}
  small = {t: v for t, v in terms.items() if t not in big}
  lo_s = hi_s = 0
  if big and small:
    s = build_sum(dt, small)
    lo_s, hi_s = (s.vmin, s.vmax) if _known(s) else (None, None)
  if big and lo_s is not None and (bound - 1 - hi_s) // g == (bound - 1 - lo_s) // g:
    inner, last = build_sum(dt, big), (bound - 1 - hi_s) // g  # inner < bound <=> inner <= last
  elif k != 0:
    inner, last = build_sum(dt, terms), bound - 1
  else:
    return None
  if not _known(inner) or not _fits(dt, last) or not _fits(dt, last + 1):
    return None
  return _const(dt, last) < inner if const_left else inner < _const(dt, last + 1)


def lt_linear(x: UOp, c: UOp) -> UOp | None:
  return _cmp_linear(x, c.arg, False)


def gt_linear(x: UOp, c: UOp) -> UOp | None:
  return _cmp_linear(x, c.arg, True)


def lt_div(x: UOp, d: UOp, c: UOp) -> UOp | None:
  """x//d < c -> x < c*d for d > 0 and c > 0 (also right for negative x: both sides are then true)."""
  if not _is_int(x) or d.arg <= 0 or c.arg <= 0 or not _fits(x.dtype, c.arg * d.arg):
    return None
  return x < _const(x.dtype, c.arg * d.arg)


def gt_div(x: UOp, d: UOp, c: UOp) -> UOp | None:
  """c < x//d -> (c+1)*d-1 < x for d > 0 and c >= 0."""
  if not _is_int(x) or d.arg <= 0 or c.arg < 0 or not _fits(x.dtype, (c.arg + 1) * d.arg - 1):
    return None
  return _const(x.dtype, (c.arg + 1) * d.arg - 1) < x


def eq_offset(u: UOp, x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """x+c1 != c2 -> x != c2-c1 (and ==): adding a constant is a bijection even with wrap-around."""
  if not _is_int(x):
    return None
  return UOp(u.op, u.dtype, (x, _const(x.dtype, c2.arg - c1.arg)))


def and_or_bounds(u: UOp, a: UOp, b: UOp) -> UOp | None:
  """(x<c1) & (x<c2) -> x<min(c1,c2), | gives max; the same for c<x. Valid masks often come out this way."""
  if a.src[0] is b.src[0] and a.src[1].op is Ops.CONST and b.src[1].op is Ops.CONST:  # x < c
    smaller_wins = u.op is Ops.AND
    ca, cb = a.src[1].arg, b.src[1].arg
  elif a.src[1] is b.src[1] and a.src[0].op is Ops.CONST and b.src[0].op is Ops.CONST:  # c < x
    smaller_wins = u.op is Ops.OR
    ca, cb = a.src[0].arg, b.src[0].arg
  else:
    return None
  if any(isinstance(v, float) and math.isnan(v) for v in (ca, cb)):
    return None
  return a if (ca <= cb) == smaller_wins else b


_c, _c1, _c2 = UPat.cvar("c"), UPat.cvar("c1"), UPat.cvar("c2")

index_simplify = PatternMatcher([
  (UPat(Ops.NEG, name="u", src=(_x,)), neg_to_mul),
  (UPat((Ops.ADD, Ops.SUB), name="u"), fold_sum),
  (UPat(Ops.MUL, name="u", src=[UPat(Ops.MUL, src=[_x, _c1]), _c2]), mul_const_chain),
  (UPat(Ops.MUL, name="u", src=[UPat(Ops.MUL, src=[_x, _c]), _y]), mul_const_out),
  (UPat(Ops.MUL, name="u", src=[UPat(Ops.ADD, src=[_x, _c1]), _c2]), distribute_const),
  (UPat((Ops.IDIV, Ops.MOD), name="u", src=(_x, UPat.cvar("d"))), divmod_neg_divisor),
  (UPat(Ops.IDIV, name="u", src=(UPat(Ops.IDIV, src=(_x, UPat.cvar("a"))), UPat.cvar("b"))), div_div),
  (UPat(Ops.MOD, name="u", src=(UPat(Ops.MOD, src=(_x, UPat.cvar("a"))), UPat.cvar("b"))), mod_mod),
  (UPat(Ops.MOD, src=(_x, UPat.cvar("d"))), mod_small),
  (UPat((Ops.IDIV, Ops.MOD), name="u", src=(_x, _x)), div_self),
  (UPat((Ops.IDIV, Ops.MOD), name="u", src=(_x, UPat.cvar("d"))), divmod_sum),
  (UPat(Ops.CMPLT, src=(UPat(Ops.IDIV, src=(_x, UPat.cvar("d"))), _c)), lt_div),
  (UPat(Ops.CMPLT, src=(_c, UPat(Ops.IDIV, src=(_x, UPat.cvar("d"))))), gt_div),
  (UPat(Ops.CMPLT, src=(_x, _c)), lt_linear),
  (UPat(Ops.CMPLT, src=(_c, _x)), gt_linear),
  (UPat((Ops.CMPNE, Ops.CMPEQ), name="u", src=[UPat(Ops.ADD, src=[_x, _c1]), _c2]), eq_offset),
  (UPat((Ops.AND, Ops.OR), name="u", src=[UPat(Ops.CMPLT, name="a"), UPat(Ops.CMPLT, name="b")]), and_or_bounds),
], name="index simplify", optional=True)


# ---- canonical order

def commutative_order(u: UOp) -> UOp | None:
  """Operands of commutative ops in `order_key` order (constants right) so that equal expressions hash-cons."""
  if u.op is FastOps.ADD and _is_int(u):
    return None  # fold_sum orders int sums (all terms, not just two)
  a, b = u.src
  return UOp(u.op, u.dtype, (b, a)) if _ordered_before(b, a) else None


canonical_order = PatternMatcher([
  (UPat(GroupOp.Commutative, name="u", src=(UPat(), UPat())), commutative_order),
], name="canonical order", optional=True)


symbolic = (constant_folding + identities + index_simplify + canonical_order).named("symbolic")


def symbolic_simplify(u: UOp) -> UOp:
  """u through `symbolic` as the pass "symbolic": what UOp.simplify runs."""
  return graph_rewrite(u, symbolic)


register_simplifier(symbolic_simplify)


def _clauses(valid: UOp) -> list[UOp]:
  """The conjuncts of a boolean AND tree."""
  out, todo = [], [valid]
  while todo:
    u = todo.pop()
    if u.op is Ops.AND and u.dtype == dtypes.bool:
      todo += u.src
    else:
      out.append(u)
  return out


def _divmod_given(clause: UOp) -> tuple[UOp, UOp, UOp, UOp] | None:
  """For a clause (X % d) < m, X = q*d + u with u's range in [m - d, d) (q, u linear: each coefficient rounded to the
  nearest multiple of d): where the clause holds, X // d is q and X % d is u (u < 0 would make X % d = u + d >= m).
  (X // d, q, X % d, u) or None."""
  if clause.op is not Ops.CMPLT or clause.src[0].op is not Ops.MOD or clause.src[1].op is not Ops.CONST:
    return None
  mod, m = clause.src[0], clause.src[1].arg
  x, d = mod.src
  if d.op is not Ops.CONST or not isinstance(d.arg, int) or not 0 < m < d.arg or x.vmin < 0 or \
      not dtypes.is_int(x.dtype) or x.dtype.count != 1:
    return None
  terms, const = linear_form(x)
  near = {t: (c + d.arg // 2) // d.arg for t, c in terms.items()}
  q = build_sum(x.dtype, {t: c for t, c in near.items() if c}, const // d.arg)
  u = build_sum(x.dtype, {t: c - near[t] * d.arg for t, c in terms.items() if c - near[t] * d.arg}, const % d.arg)
  if not near or not any(near.values()) or u.vmin < m - d.arg or u.vmax >= d.arg:
    return None
  return x // d, q, mod, u


def index_given_valid(ix: UOp) -> UOp | None:
  """INDEX(buf, idx, valid) whose valid has a clause (X % d) < m that pins X // d and X % d to linear forms (a pool's
  windows read back through their padded, reshaped repeat: a conv's input gradient, ((y + 24*i) // 25, (y + 24*i) % 25)
  under ((y + 24*i) % 25 < 20) is (i, y - i) under 0 <= y - i < 20): those forms in the index and the valid, so the
  load walks its axes with constant strides the optimizer can read (and no per-lane div/mod). Where the valid is
  false the load reads nothing, whatever its index; the new valid equals the old one everywhere."""
  if len(ix.src) < 3 or ix.src[2].dtype != dtypes.bool:
    return None
  idx, valid = ix.src[1], ix.src[2]
  sub: dict[UOp, UOp] = {}
  new_clauses = []
  for c in _clauses(valid):
    got = _divmod_given(c)
    if got is None:
      new_clauses.append(c)
      continue
    div, q, mod, u = got
    sub[div], sub[mod] = q, u
    m = c.src[1]
    new_clauses += [UOp(Ops.CMPLT, dtypes.bool, (UOp.const(u.dtype, -1), u)), UOp(Ops.CMPLT, dtypes.bool, (u, m))]
  if not sub:
    return None
  rest = [c.substitute(sub) for c in new_clauses]
  out = rest[0]
  for c in rest[1:]:
    out = UOp(Ops.AND, dtypes.bool, (out, c))
  return ix.replace(src=(ix.src[0], idx.substitute(sub), out, *ix.src[3:]))


# an index's div/mod pinned by its valid (a conv's input gradient): run on a kernel's AST before the optimizer reads its
# strides (compiler.opt.kernel.Kernel) and before codegen's simplifier
pm_index_given_valid = PatternMatcher([
  (UPat(Ops.INDEX, name="ix"), index_given_valid),
], name="index given valid")
