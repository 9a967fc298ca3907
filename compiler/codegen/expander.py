"""Expansion of UPCAST/UNROLL axes.

`pm_expand`: a store that depends on UPCAST (or free UNROLL) ranges becomes one store per lane (the ranges
substituted by constants); a REDUCE over UNROLL (or UPCAST) ranges accumulates the per-lane values of its
input in order: `REDUCE(CONTRACT(v0, v1, ...), *loop ranges)`, or just `v0 op v1 op ...` when no loop is left.

`pm_vectorize`: lane stores to consecutive addresses become one vector store of `VECTORIZE(values)`; then
VECTORIZE is pushed down through ops that are the same in every lane, so contiguous loads become vector
loads, lanes of a REDUCE one vector accumulator, a value shared by all lanes a broadcast. Anything else stays
per-lane scalars (a gather)."""
from __future__ import annotations

import itertools
import math

from compiler.codegen.errors import CodegenError, kernel_name
from compiler.codegen.ranges import EXPAND_AXES, axis_type, const_size, free_ranges
from compiler.codegen.simplify import index_linear_form
from compiler.dtype import DType, PtrDType, dtypes
from compiler.rewrite import PatternMatcher, UPat
from compiler.uop import GroupOp, Ops, UOp, toposort

MAX_LANES = 4096  # per store: more than this many unrolled copies is a runaway opt, not a kernel
MAX_VEC = 16  # widest vector codegen forms


def _sizes(kname: str, rngs: list[UOp]) -> list[int]:
  out = []
  for r in rngs:
    n = const_size(r)
    if n is None:
      raise CodegenError(kname, f"{axis_type(r).name} axis needs a constant size", r)
    out.append(n)
  if math.prod(out) > MAX_LANES:
    raise CodegenError(kname, f"expanding {math.prod(out)} lanes (more than {MAX_LANES})", rngs[0])
  return out


def _lanes(kname: str, rngs: list[UOp]) -> list[dict[UOp, UOp]]:
  sizes = _sizes(kname, rngs)
  combos = itertools.product(*(range(n) for n in sizes))
  return [{r: UOp.const(r.dtype, i) for r, i in zip(rngs, idx)} for idx in combos]


def substitute_lanes(root: UOp, lanes: list[dict[UOp, UOp]]) -> list[UOp]:
  """root with each lane's substitution applied; one graph walk, and only nodes that depend on the ranges rebuilt."""
  rngs = set(lanes[0]) if lanes else set()
  order = [u for u in toposort(root, gate=lambda x: x.op is not Ops.RANGE)]
  dep: set[UOp] = set()
  for u in order:
    if u in rngs or any(s in dep for s in u.src):
      dep.add(u)
  todo = [u for u in order if u in dep and u not in rngs]
  out = []
  for lane in lanes:
    new = dict(lane)
    for u in todo:
      new[u] = u.replace(src=tuple(new.get(s, s) for s in u.src))
    out.append(new.get(root, root))
  return out


def chain(op: Ops, vals: list[UOp]) -> UOp:
  out = vals[0]
  for v in vals[1:]:
    out = out.alu(op, v)
  return out


def expand_sink(ctx: dict, sink: UOp) -> UOp | None:
  kname = ctx["kname"]
  free = free_ranges(sink)
  new: list[UOp] = []
  changed = False
  for st in sink.src:
    ex = sorted((r for r in free[st] if axis_type(r) in EXPAND_AXES), key=lambda r: r.arg[0])
    if not ex:
      new.append(st)
      continue
    changed = True
    new.extend(substitute_lanes(st, _lanes(kname, ex)))
  return sink.replace(src=tuple(new)) if changed else None


def expand_reduce(ctx: dict, red: UOp) -> UOp | None:
  unr = [r for r in red.src[1:] if axis_type(r) in EXPAND_AXES]
  if not unr:
    return None
  loops = tuple(r for r in red.src[1:] if r not in unr)
  v = red.src[0]
  vals = substitute_lanes(v, _lanes(ctx["kname"], unr))
  if v.op is Ops.CONTRACT:  # already unrolled over other axes: keep one flat list of values
    vals = [x for c in vals for x in c.src]
  if not loops:
    return chain(red.arg, vals)
  return UOp(Ops.REDUCE, red.dtype, (UOp(Ops.CONTRACT, v.dtype, tuple(vals)), *loops), red.arg)


pm_expand = PatternMatcher([
  (UPat(Ops.SINK, name="sink"), expand_sink),
  (UPat(Ops.REDUCE, name="red"), expand_reduce),
], name="expand")


# ---- vectorize

def vec_ptr(base: DType, n: int) -> PtrDType:
  return base.scalar().vec(n).ptr()


def offsets(idxs: list[UOp]) -> list[int] | None:
  """Constant offsets of each index from the first one, when they differ only by a constant."""
  terms0, c0 = index_linear_form(idxs[0])
  out = []
  for ix in idxs:
    terms, c = index_linear_form(ix)
    if terms != terms0:
      return None
    out.append(c - c0)
  return out


def group_stores(sink: UOp) -> UOp | None:
  """Scalar stores to consecutive addresses of one buffer (same gate) -> vector stores, in address order."""
  groups: dict[tuple, list[tuple[int, UOp]]] = {}
  for st in sink.src:
    ix = st.src[0]
    if st.src[1].dtype.count != 1 or st.op is not Ops.STORE:
      continue
    terms, c = index_linear_form(ix.src[1])
    key = (ix.src[0], frozenset(terms.items()), ix.src[2] if len(ix.src) > 2 else None)
    groups.setdefault(key, []).append((c, st))
  replace: dict[UOp, UOp | None] = {}
  for (buf, _, _gate), items in groups.items():
    items.sort(key=lambda t: t[0])
    runs: list[list[tuple[int, UOp]]] = []
    for c, st in items:
      if runs and c == runs[-1][-1][0] + 1 and len(runs[-1]) < MAX_VEC:
        runs[-1].append((c, st))
      else:
        runs.append([(c, st)])
    for run in runs:
      if len(run) < 2:
        continue
      first = run[0][1]
      n = len(run)
      val = UOp(Ops.VECTORIZE, first.src[1].dtype.vec(n), tuple(st.src[1] for _, st in run))
      ix = first.src[0]
      vix = UOp(Ops.INDEX, vec_ptr(buf.dtype.base, n), ix.src)
      replace[first] = UOp(Ops.STORE, dtypes.void, (vix, val))
      for _, st in run[1:]:
        replace[st] = None
  if not replace:
    return None
  new = [replace.get(st, st) for st in sink.src]
  return sink.replace(src=tuple(s for s in new if s is not None))


_PUSH = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.CONTRACT}


def _alike(x: UOp, y: UOp) -> int:
  if x is y:
    return 3
  if x.op is not y.op:
    return 0
  if x.op is Ops.LOAD and x.src[0].src[0] is not y.src[0].src[0]:
    return 1
  return 2


def _align(s0: UOp, s: UOp) -> tuple[UOp, ...]:
  """The sources of a commutative lane in the order that matches lane 0's (simplification may have swapped them)."""
  a, b = s.src
  keep = _alike(s0.src[0], a) + _alike(s0.src[1], b)
  swap = _alike(s0.src[0], b) + _alike(s0.src[1], a)
  return (b, a) if swap > keep else (a, b)


def push_vectorize(vec: UOp) -> UOp | None:
  s0 = vec.src[0]
  n = len(vec.src)
  if all(s is s0 for s in vec.src) or s0.op is Ops.CONST:
    return None
  if any(s.op is not s0.op or s.dtype != s0.dtype or s.arg != s0.arg or len(s.src) != len(s0.src) for s in vec.src):
    return None
  if s0.op in _PUSH:
    lanes = [_align(s0, s) for s in vec.src] if s0.op in GroupOp.Commutative else [s.src for s in vec.src]
    # lanes of a CAST or comparison agree on the result dtype but may read different source dtypes
    if any(x.dtype != y.dtype for ln in lanes[1:] for x, y in zip(ln, lanes[0])):
      return None
    srcs = tuple(UOp(Ops.VECTORIZE, s0.src[i].dtype.vec(n), tuple(ln[i] for ln in lanes)) for i in range(len(s0.src)))
    return UOp(s0.op, s0.dtype.vec(n), srcs, s0.arg)
  if s0.op is Ops.REDUCE:
    if any(s.src[1:] != s0.src[1:] for s in vec.src):
      return None
    v = UOp(Ops.VECTORIZE, s0.src[0].dtype.vec(n), tuple(s.src[0] for s in vec.src))
    return UOp(Ops.REDUCE, s0.dtype.vec(n), (v, *s0.src[1:]), s0.arg)
  if s0.op is Ops.LOAD and len(s0.src) == 1:
    ixs = [s.src[0] for s in vec.src]
    ix0 = ixs[0]
    if any(ix.src[0] is not ix0.src[0] or ix.src[2:] != ix0.src[2:] for ix in ixs):
      return None
    offs = offsets([ix.src[1] for ix in ixs])
    if offs != list(range(n)):
      return None
    vix = UOp(Ops.INDEX, vec_ptr(ix0.src[0].dtype.base, n), ix0.src)
    return UOp(Ops.LOAD, s0.dtype.vec(n), (vix,))
  return None


pm_vectorize = PatternMatcher([
  (UPat(Ops.SINK, name="sink"), group_stores),
  (UPat(Ops.VECTORIZE, name="vec"), push_vectorize),
], name="vectorize")


def expand_ctx(ast: UOp) -> dict:
  return {"kname": kernel_name(ast)}
