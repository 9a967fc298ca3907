"""Expansion of UPCAST/UNROLL axes, and vectorization of the lanes it makes.

`pm_expand`, node by node (each rule's match is a step of the trace): an UPCAST or UNROLL RANGE becomes
`UNROLL(0, 1, ..., n-1)` (its lanes, arg `((axis, n),)`); a node with UNROLL sources becomes an UNROLL of its
lanes, one copy per combination of their axes (row-major in axis-id order), each copy reading the matching lane
of every source (an int ADD or MUL lane that the index fold would turn at once into a constant or one of its
sources made as that: `_index_lane`); a REDUCE over UNROLL ranges accumulates the lanes of its input over those
axes in order: `REDUCE(CONTRACT(v0, v1, ...), *loop ranges)`, or just `v0 op v1 op ...` when no loop is left. A
global INDEX is not copied on its own: a LOAD of it is copied with a lane of it each (`expand_load`), and a STORE to
it stays whole until the SINK (`sink_stores`), which takes each store's lanes in lane order, those to consecutive
addresses one vector store (vectorize's first step, `group_lane_stores`, made there from the lanes' indices and
values, so that such a lane is never a STORE or INDEX node). No UNROLL is left once the SINK is rewritten.

`pm_vectorize`: lane stores to consecutive addresses become one vector store of `VECTORIZE(values)` (REDUCE values
those lanes would gather, or hold in more registers, first regrouped along their loads: `regroup_accumulators`; done
once by the SINK's expansion, again here on what that left: the same two steps `group_stores` took before); then
VECTORIZE is pushed down through ops that are the same in every lane, so contiguous loads become vector
loads, lanes of a REDUCE one vector accumulator, a value shared by all lanes a broadcast. Anything else stays
per-lane scalars (a gather). A scalar REDUCE over unrolled values that are contiguous loads (a row's max or sum,
unrolled by the optimizer) accumulates them in vectors of up to 16 lanes, combined across lanes after the loop
(`vector_accumulators`, `horizontal`)."""
from __future__ import annotations

import functools
import itertools
import math
import operator
from typing import Any, Callable

from compiler.codegen.errors import CodegenError, kernel_name
from compiler.codegen.ranges import EXPAND_AXES, axis_type, const_size, free_ranges
from compiler.codegen.simplify import index_linear_form
from compiler.dtype import DType, PtrDType, dtypes
from compiler.host import vector_bytes
from compiler.rewrite import PatternMatcher, UPat
from compiler.uop import FastOps, GroupOp, Ops, UOp, exec_alu, toposort

MAX_LANES = 4096  # per store and per reduce: more than this many unrolled copies is a runaway opt, not a kernel
MAX_VEC = 16  # widest vector codegen forms

Axes = tuple[tuple[int, int], ...]  # an UNROLL's (axis id, size) per axis, in axis-id order


def _check_lanes(kname: str, rngs: list[UOp]) -> None:
  sizes = []
  for r in rngs:
    n = const_size(r)
    if n is None:
      raise CodegenError(kname, f"{axis_type(r).name} axis needs a constant size", r)
    sizes.append(n)
  if math.prod(sizes) > MAX_LANES:
    raise CodegenError(kname, f"expanding {math.prod(sizes)} lanes (more than {MAX_LANES})", rngs[0])


def check_expansion(kname: str, sink: UOp) -> None:
  """Every store's and every reduce's lanes have constant sizes and are at most MAX_LANES, checked before any copy
  is made (a runaway opt fails at once instead of building its lanes first)."""
  free = free_ranges(sink)
  for st in sink.src:
    _check_lanes(kname, sorted((r for r in free[st] if axis_type(r) in EXPAND_AXES), key=lambda r: r.arg[0]))
  for u in toposort(sink):
    if u.op is FastOps.REDUCE:
      unr = [r for r in u.src[1:] if axis_type(r) in EXPAND_AXES]
      if unr:
        _check_lanes(kname, unr)


def _combos(axes: Axes) -> list[dict[int, int]]:
  return [dict(zip((a for a, _ in axes), idx)) for idx in itertools.product(*(range(n) for _, n in axes))]


@functools.cache
def _lane_of(sub: Axes, axes: Axes) -> tuple[int, ...]:
  """For each lane of `axes` (row-major), the lane of an UNROLL over the axes `sub` (a subset) that it reads."""
  out = []
  for combo in _combos(axes):
    i = 0
    for a, n in sub:
      i = i * n + combo[a]
    out.append(i)
  return tuple(out)


def _unroll(lanes: list[UOp], axes: Axes) -> UOp:
  return UOp(FastOps.UNROLL, lanes[0].dtype, tuple(lanes), axes)


def _lanes_over(u: UOp, axes: Axes) -> list[UOp]:
  """u's value in each lane of `axes`: its own lanes where it is an UNROLL, else itself in every lane."""
  if u.op is not FastOps.UNROLL:
    return [u] * math.prod(n for _, n in axes)
  return [u.src[i] for i in _lane_of(u.arg, axes)]


def _union(srcs: tuple[UOp, ...]) -> Axes:
  return tuple(sorted({ax for s in srcs if s.op is FastOps.UNROLL for ax in s.arg}))


def range_lanes(ctx: dict, r: UOp) -> UOp | None:
  """An UPCAST/UNROLL RANGE: its iterations as constant lanes."""
  if axis_type(r) not in EXPAND_AXES:
    return None
  n = const_size(r)
  if n is None:
    raise CodegenError(ctx["kname"], f"{axis_type(r).name} axis needs a constant size", r)
  return _unroll([UOp.const(r.dtype, i) for i in range(n)], ((r.arg[0], n),))


_UNIT = {Ops.ADD: 0, Ops.MUL: 1}  # the int ops whose lanes expand_node folds as it makes them, and their units


def expand_node(x: UOp) -> UOp:
  """A node with UNROLL sources: one copy per lane of their axes, each reading its lane of every source."""
  axes = _union(x.src)
  per_src = [_lanes_over(s, axes) for s in x.src]
  op, dt, arg = x.op, x.dtype, x.arg
  if op in _UNIT and dt in dtypes.ints:
    return _unroll([_index_lane(op, dt, srcs, arg) for srcs in zip(*per_src)], axes)
  return _unroll([UOp(op, dt, srcs, arg) for srcs in zip(*per_src)], axes)  # (x.replace, without kwargs)


def _index_lane(op: Ops, dt: DType, srcs: tuple[UOp, ...], arg: Any) -> UOp:
  """A lane of int index math. Where the index fold's first rule to match it would answer a constant or one of its
  sources (`fold_alu` of two constants, `add_zero`, `mul_one`: an upcast offset's lane 0, its sums with other offsets),
  that answer, made without the lane's node: 6.2k of GPT step's 92k lane nodes were such sums, made to be folded."""
  a, b = srcs
  if a.op is FastOps.CONST:
    if b.op is FastOps.CONST:
      return UOp.const(dt, exec_alu(op, dt, (a.arg, b.arg)))
    if a.arg == _UNIT[op]:
      return b
  elif b.op is FastOps.CONST and b.arg == _UNIT[op]:
    return a
  return UOp(op, dt, srcs, arg)


def chain(op: Ops, vals: list[UOp]) -> UOp:
  out = vals[0]
  for v in vals[1:]:
    out = out.alu(op, v)
  return out


def contract_reduce(red: UOp) -> UOp | None:
  """A REDUCE over UNROLL ranges: per lane of the axes it keeps, its input's lanes over the reduced ones in order."""
  unr = [r for r in red.src[1:] if r.op is FastOps.UNROLL]
  if not unr:
    return None
  loops = tuple(r for r in red.src[1:] if r.op is not FastOps.UNROLL)
  v = red.src[0]
  reduced = tuple(ax for r in unr for ax in r.arg)  # in the REDUCE's order: the order values accumulate in
  kept = tuple(ax for ax in (v.arg if v.op is FastOps.UNROLL else ()) if ax not in reduced)
  # kept axes outer, so each kept lane's values are consecutive (_lane_of maps this order to v's own)
  all_lanes = _lanes_over(v, kept + reduced)
  per = math.prod(n for _, n in reduced)
  out = []
  for k in range(len(all_lanes) // per):
    vals = all_lanes[k * per:(k + 1) * per]
    dt = vals[0].dtype
    if vals[0].op is FastOps.CONTRACT:  # already unrolled over other axes: keep one flat list of values
      vals = [x for c in vals for x in c.src]
    out.append(chain(red.arg, vals) if not loops else
               UOp(FastOps.REDUCE, red.dtype, (UOp(FastOps.CONTRACT, dt, tuple(vals)), *loops), red.arg))
  return out[0] if not kept else _unroll(out, kept)


def _lane_stores(st: UOp) -> list[LaneStore]:
  """A SINK source's lanes as stores: a global STORE's made from its INDEX's and value's lanes (none of them a STORE
  node yet), an UNROLL's its lanes, any other store itself."""
  if st.op is FastOps.UNROLL:
    return [_node_lane(x, by_fields=True) for x in st.src]
  if st.op is not FastOps.STORE or not _is_global_index(st.src[0]):
    return [_node_lane(st, by_fields=True)]
  ix, v = st.src
  axes = _union((*ix.src, v))  # (the STORE's axes: those of its INDEX's lanes and of its value)
  if not axes:
    return [_node_lane(st, by_fields=True)]
  key = (st.arg, ix.dtype, ix.arg)  # (_lane_key's fields, the store's made once: a tuple a lane, no call)
  return [((*key, srcs, val), srcs, val, st, None)
          for srcs, val in zip(zip(*(_lanes_over(s, axes) for s in ix.src)), _lanes_over(v, axes))]


def sink_stores(ctx: dict, sink: UOp) -> UOp:
  """The SINK: each store's lanes in lane order, those to consecutive addresses already one vector store
  (`group_lane_stores`, vectorize's first step, made here so that no lane of them is a STORE node)."""
  lanes = [ln for s in sink.src for ln in _lane_stores(s)]
  return sink.replace(src=_grouped(lanes, group_lane_stores(lanes, ctx["vector_bytes"])))


def _is_global_index(u: UOp) -> bool:
  return u.op is FastOps.INDEX and u.src[0].op is FastOps.DEFINE_GLOBAL


def _sink_has_lanes(sink: UOp) -> bool:
  for s in sink.src:
    if s.op is FastOps.UNROLL or (s.op is FastOps.STORE and (_has_unroll(s) or _has_unroll(s.src[0]))):
      return True
  return False


def _has_unroll(u: UOp) -> bool:
  for s in u.src:  # (a loop, not any() over a generator: asked of every node the expander walks)
    if s.op is FastOps.UNROLL:
      return True
  return False


def merge_unroll(x: UOp) -> UOp:
  """An UNROLL whose lanes are UNROLLs (a tensor core's C elements, compiler/opt/tc.py, of a value upcast along other
  axes): one UNROLL over both sets of axes."""
  inner = _union(x.src)
  axes = tuple(sorted(set(x.arg) | set(inner)))
  outer_lane, inner_lane = _lane_of(x.arg, axes), _lane_of(inner, axes)
  per_src = [_lanes_over(s, inner) for s in x.src]
  return _unroll([per_src[o][i] for o, i in zip(outer_lane, inner_lane)], axes)


def expand_load(x: UOp) -> UOp:
  """A LOAD of a global INDEX with UNROLL sources: one copy per lane, each of that lane's INDEX (a global INDEX is not
  copied on its own: a STORE's lanes need only its sources' lanes, `sink_stores`)."""
  ix = x.src[0]
  axes = _union(ix.src)
  return _unroll([UOp(FastOps.LOAD, x.dtype, (UOp(FastOps.INDEX, ix.dtype, srcs, ix.arg),), x.arg)
                  for srcs in zip(*(_lanes_over(s, axes) for s in ix.src))], axes)


def _loads_lanes(u: UOp) -> bool:
  return u.src[0].op is FastOps.INDEX and _has_unroll(u.src[0])


def _expands(u: UOp) -> bool:
  """Whether expand_node copies u: a node with UNROLL sources, but not a global INDEX nor a STORE of one (their
  lanes are made where they are read: expand_load, sink_stores)."""
  for s in u.src:  # (_has_unroll's loop, inlined: asked of every node the expander walks)
    if s.op is FastOps.UNROLL:
      break
  else:
    return False
  if u.op is FastOps.INDEX:
    return u.src[0].op is not FastOps.DEFINE_GLOBAL
  return u.op is not FastOps.STORE or not _is_global_index(u.src[0])


pm_expand = PatternMatcher([
  (UPat(Ops.RANGE, name="r"), range_lanes),
  (UPat(Ops.REDUCE, custom=_has_unroll, name="red"), contract_reduce),
  (UPat(Ops.SINK, custom=_sink_has_lanes, name="sink"), sink_stores),
  (UPat(Ops.UNROLL, custom=_has_unroll, name="x"), merge_unroll),
  (UPat(Ops.LOAD, custom=_loads_lanes, name="x"), expand_load),
  (UPat(custom=_expands, name="x"), expand_node),
], name="expand")


# ---- vectorize

@functools.cache
def vec_ptr(base: DType, n: int) -> PtrDType:
  return base.scalar().vec(n).ptr()  # (remembered: ptr() builds the dtype before interning it)


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


# One scalar store of a SINK, made or not: (key, its INDEX's sources, its value, the STORE it is or is a lane of, the
# STORE node where it is one). key tells two lanes apart as the STORE nodes they are or would be: the node itself
# (vectorize's SINK, all of whose stores are nodes) or its fields (expansion's, `_lane_key`)
LaneStore = tuple[Any, tuple[UOp, ...], UOp, UOp, "UOp | None"]


def _lane_key(st: UOp, ix: tuple[UOp, ...], val: UOp) -> tuple:
  return (st.arg, st.src[0].dtype, st.src[0].arg, ix, val)


def _node_lane(st: UOp, by_fields: bool = False) -> LaneStore:
  """A SINK's STORE node as a lane (any other source: a lane no store groups, its val not a scalar's), keyed by its
  fields beside lanes that are not nodes yet (expansion's SINK), else by the node itself."""
  if st.op is not FastOps.STORE:
    return (st, (), st, st, st)
  ix, val = st.src[0].src, st.src[1]
  return (_lane_key(st, ix, val) if by_fields else st, ix, val, st, st)


def lane_store(lane: LaneStore, val: UOp | None = None) -> UOp:
  """The STORE node of a lane (of value val, where given)."""
  _, ix, v, st, node = lane
  if val is None and node is not None:
    return node
  index = UOp(FastOps.INDEX, st.src[0].dtype, ix, st.src[0].arg)
  return UOp(FastOps.STORE, st.dtype, (index, v if val is None else val), st.arg)


_KEEP = object()  # (group_lane_stores' answer for a lane it leaves as it is)


def _grouped(lanes: list[LaneStore], replace: dict[Any, UOp | None]) -> tuple[UOp, ...]:
  """The SINK's sources: each lane's new store, or the lane itself, none where a vector store took it."""
  new = [replace.get(ln[0], _KEEP) for ln in lanes]
  return tuple(lane_store(ln) if r is _KEEP else r for ln, r in zip(lanes, new) if r is not None)


def group_stores(ctx: dict, sink: UOp) -> UOp | None:
  """The SINK's scalar stores to consecutive addresses of one buffer -> vector stores (`group_lane_stores`)."""
  lanes = [_node_lane(st) for st in sink.src]
  replace = group_lane_stores(lanes, ctx["vector_bytes"])
  return sink.replace(src=_grouped(lanes, replace)) if replace else None


def group_lane_stores(lanes: list[LaneStore], vbytes: int) -> dict[Any, UOp | None]:
  """Scalar stores to consecutive addresses of one buffer (same gate) -> vector stores, in address order, of at most
  MAX_VEC lanes cut into register_pieces: {lane's key: its new store, or None where a vector store took it}."""
  groups: dict[tuple, list[tuple[int, LaneStore]]] = {}
  for ln in lanes:
    ix = ln[1]
    if not ix or ln[2].dtype.count != 1:
      continue
    terms, c = index_linear_form(ix[1])
    key = (ix[0], frozenset(terms.items()), ix[2] if len(ix) > 2 else None)
    groups.setdefault(key, []).append((c, ln))
  replace: dict[Any, UOp | None] = {}
  pieces: list[list[tuple[int, LaneStore]]] = []
  for (buf, _, _gate), items in groups.items():
    items.sort(key=lambda t: t[0])
    runs: list[list[tuple[int, LaneStore]]] = []
    for c, ln in items:
      if runs and c == runs[-1][-1][0] + 1 and len(runs[-1]) < MAX_VEC:
        runs[-1].append((c, ln))
      else:
        runs.append([(c, ln)])
    lanes_per_reg = max(1, vbytes // buf.dtype.base.scalar().itemsize)
    pieces.extend(piece for whole in runs for piece in register_pieces(whole, lanes_per_reg))
  lane_of = regroup_accumulators([tuple(ln[2] for _, ln in run) for run in pieces], vbytes)
  for run in pieces:
    first = run[0][1]
    n = len(run)
    if n == 1:
      if first[2] in lane_of:  # a lane of a vector accumulator stored alone (a store strided along its lanes)
        replace[first[0]] = lane_store(first, lane_of[first[2]])
      continue
    val = UOp(FastOps.VECTORIZE, first[2].dtype.vec(n), tuple(lane_of.get(ln[2], ln[2]) for _, ln in run))
    vix = UOp(FastOps.INDEX, vec_ptr(first[1][0].dtype.base, n), first[1])
    replace[first[0]] = UOp(FastOps.STORE, dtypes.void, (vix, val))
    for _, ln in run[1:]:
      replace[ln[0]] = None
  return replace


def register_pieces(run: list, lanes: int) -> list[list]:
  """A run of `lanes`-wide registers' worth of stores, as the vectors codegen forms: whole when its length is a power
  of two or fits one register, else registers' worth and the rest (10 floats with AVX2: 8 + 2). Across blocks (an
  accumulator) LLVM keeps a vector whose length is not a power of two in one scalar register a lane, unless its next
  power of two is a legal type: a <10 x float> accumulator with AVX2 was rebuilt lane by lane every iteration (MLP's
  logits kernel 38 -> 9 us as 8 + 2), while with AVX-512 it is one masked register (8 + 2 there took more registers:
  conv2d's 14-column remainder as 8 + 4 + 2 spilled, 0.68 -> 1.03 ms)."""
  n = len(run)
  if n & (n - 1) == 0 or n <= lanes:
    return [run]
  return [run[at:at + lanes] for at in range(0, n, lanes)]


_PUSH = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.CONTRACT}


def _alike(x: UOp, y: UOp) -> int:
  if x is y:
    return 3
  if x.op is not y.op:
    return 0
  if x.op is FastOps.LOAD and x.src[0].src[0] is not y.src[0].src[0]:
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
  if s0.op is FastOps.CONST:
    return None
  # every lane the same op, dtype, arg and arity, not all one node: a loop, not any() and all() over generators (asked
  # of every VECTORIZE the pass walks, each lane's fields read from locals). dtypes are interned: `is` answers first
  op, dt, arg, arity, one = s0.op, s0.dtype, s0.arg, len(s0.src), True
  for s in vec.src:
    if s.op is not op or (s.dtype is not dt and s.dtype != dt) or s.arg != arg or len(s.src) != arity:
      return None
    if s is not s0:
      one = False
  if one:
    return None
  if s0.op in _PUSH:
    lanes = [_align(s0, s) for s in vec.src] if s0.op in GroupOp.Commutative else [s.src for s in vec.src]
    # lanes of a CAST or comparison agree on the result dtype but may read different source dtypes
    if any(x.dtype is not y.dtype and x.dtype != y.dtype for ln in lanes[1:] for x, y in zip(ln, lanes[0])):
      return None
    srcs = tuple(UOp(FastOps.VECTORIZE, s0.src[i].dtype.vec(n), tuple(ln[i] for ln in lanes))
                 for i in range(len(s0.src)))
    return UOp(s0.op, s0.dtype.vec(n), srcs, s0.arg)
  if s0.op is FastOps.REDUCE:
    if any(s.src[1:] != s0.src[1:] for s in vec.src):
      return None
    if vector_accumulators(s0) is not None and _gathers_across(vec.src):
      return None  # each lane's reduce walks contiguous loads: vector accumulators, not a gather per value
    v = UOp(FastOps.VECTORIZE, s0.src[0].dtype.vec(n), tuple(s.src[0] for s in vec.src))
    return UOp(FastOps.REDUCE, s0.dtype.vec(n), (v, *s0.src[1:]), s0.arg)
  if s0.op is FastOps.LOAD and len(s0.src) == 1:
    return vector_load(vec)
  return None


def vector_load(vec: UOp) -> UOp | None:
  """VECTORIZE of scalar loads of one buffer at consecutive addresses -> one vector load. Lanes gated by conditions
  of their own (a padded window read along x: a conv's weight gradient) give a masked vector load,
  INDEX(buf, first index, VECTORIZE(lanes' conditions)), which reads only its valid lanes (lowerer's `masked_load`);
  lanes that all read one address under different conditions (a weight every lane of a padded conv reads) give one
  scalar load, read where any lane is valid, broadcast and selected per lane. Other addresses stay a gather."""
  ixs = [s.src[0] for s in vec.src]
  ix0, n = ixs[0], len(ixs)
  if any(ix.src[0] is not ix0.src[0] for ix in ixs):
    return None
  offs = offsets([ix.src[1] for ix in ixs])
  gates = [ix.src[2] if len(ix.src) > 2 else None for ix in ixs]
  one_gate = all(g is gates[0] for g in gates)
  if offs == list(range(n)):
    if not one_gate and vec.dtype.scalar() == dtypes.bool:
      return None  # (a bool is loaded as a byte and compared: no masked vector of it)
    vix = UOp(FastOps.INDEX, vec_ptr(ix0.src[0].dtype.base, n), ix0.src if one_gate else (*ix0.src[:2], _lanes(gates)))
    return UOp(FastOps.LOAD, vec.dtype, (vix,))
  if one_gate or offs is None or any(offs):
    return None
  any_valid = None if None in gates else functools.reduce(operator.or_, gates)
  gated = ix0.replace(src=ix0.src[:2] + (() if any_valid is None else (any_valid,)))
  ld = UOp(FastOps.LOAD, vec.src[0].dtype, (gated,))
  return _lanes(gates).where(UOp(FastOps.VECTORIZE, vec.dtype, (ld,) * n), UOp.const(vec.dtype, 0))


def _lanes(gates: list[UOp | None]) -> UOp:
  """The lanes' conditions as one bool vector (an ungated lane is always valid)."""
  return UOp(Ops.VECTORIZE, dtypes.bool.vec(len(gates)), tuple(UOp.const(dtypes.bool, True) if g is None else g
                                                                for g in gates))


def _gathers_across(reds: tuple[UOp, ...]) -> bool:
  """Whether one vector of these REDUCEs' lanes (stores side by side: a weight gradient's or A B^T's outputs) would
  gather some unrolled value lane by lane (their loads are contiguous along the reduce, not across the outputs)."""
  vals = [r.src[0].src if r.src[0].op is FastOps.CONTRACT else (r.src[0],) for r in reds]
  return any(vector_of(tuple(v[p] for v in vals)) is None for p in range(len(vals[0])))


def _load_offsets(red: UOp) -> dict[tuple, list[int]]:
  """The constant offsets of the loads under a REDUCE's values, per (buffer, non-constant terms of the index)."""
  out: dict[tuple, list[int]] = {}
  for u in toposort(red.src[0], lambda u: u.op is not FastOps.LOAD):  # (not into the index math)
    if u.op is FastOps.LOAD and u.src[0].op is FastOps.INDEX:
      terms, c = index_linear_form(u.src[0].src[1])
      out.setdefault((u.src[0].src[0], frozenset(terms.items())), []).append(c)
  return {k: sorted(v) for k, v in out.items()}


def _chains(at: dict[tuple[int, ...], UOp], d: tuple[int, ...]) -> list[list[UOp]] | None:
  """The REDUCEs of `at` (by their loads' offsets) as chains along step d, each cut into vectors of the widest
  VECTOR_ACC width that divides it; None when some chain has no such width."""
  out = []
  for p in sorted(at):
    if tuple(a - b for a, b in zip(p, d)) in at:
      continue  # not a chain's start
    chain = [at[p]]
    while (p := tuple(a + b for a, b in zip(p, d))) in at:
      chain.append(at[p])
    w = next((w for w in VECTOR_ACC if len(chain) % w == 0), None)
    if w is None:
      return None
    out.extend(chain[k:k + w] for k in range(0, len(chain), w))
  return out


MAX_STEP_KEYS = 4  # the most (buffer, index terms) of a reduce's loads _regroup tries steps over (2**n - 1 of them)


def _regroup(reds: list[UOp]) -> list[list[UOp]] | None:
  """Reds (one loop nest, one op) as vectors along one step of their loads' offsets (every load of some buffers at
  the next address, the others at the same one) that gather no value, the fewest vectors; None when no step covers
  them all."""
  sig = {r: _load_offsets(r) for r in reds}
  first = sig[reds[0]]
  keys = sorted(first, key=lambda k: first[k])  # (a canonical order: the first reduce's offsets)
  if len(keys) > MAX_STEP_KEYS or any({k: len(v) for k, v in s.items()} != {k: len(v) for k, v in first.items()}
                                      for s in sig.values()):
    return None
  at = {tuple(c for k in keys for c in sig[r][k]): r for r in reds}
  if len(at) != len(reds):
    return None  # two reduces whose loads read the same addresses: no step tells them apart
  best = None
  for moved in itertools.product((0, 1), repeat=len(keys)):
    d = tuple(m for m, k in zip(moved, keys) for _ in first[k])
    groups = _chains(at, d) if any(moved) else None
    if groups is not None and (best is None or len(groups) < len(best)) and \
        not any(_gathers_across(tuple(g)) for g in groups):
      best = groups
  return best


def regroup_accumulators(runs: list[tuple[UOp, ...]], vbytes: int) -> dict[UOp, UOp]:
  """Scalar REDUCEs that vector stores would put side by side (each of `runs` a store's lanes) regrouped as vector
  accumulators along the step their loads are contiguous in, so their lanes are put in store order once, after the
  loop: {REDUCE: GEP(vector of REDUCEs, lane)}. Where the stores' vectors would gather values lane by lane every reduce
  step (a conv's input gradient before col2im, stored window innermost while dY is contiguous along x: 96 permutes an
  iteration with AVX-512) or take more registers of `vbytes` (AVX2's 3-lane runs of that window, SSE's scalar stores
  along x), and the regrouped ones take no more registers (an 8-wide x in 16 lanes: twice the accumulators spill)."""
  pool: dict[tuple, list[tuple[UOp, ...]]] = {}
  for vals in runs:
    r0 = vals[0]
    if r0.op is not FastOps.REDUCE or r0.dtype.count != 1 or r0.dtype.scalar() == dtypes.bool or \
        any(v.op is not FastOps.REDUCE or v.src[1:] != r0.src[1:] or v.arg != r0.arg or v.dtype != r0.dtype
            for v in vals):
      continue
    if vector_accumulators(r0) is None:
      pool.setdefault((r0.src[1:], r0.arg, r0.dtype), []).append(vals)
  out: dict[UOp, UOp] = {}
  for (_, _, dt), stored in pool.items():
    lanes = max(1, vbytes // dt.itemsize)
    gathers = any(len(v) > 1 and _gathers_across(v) for v in stored)
    if not gathers and all(len(v) >= lanes for v in stored):
      continue  # whole registers that gather nothing (a matmul's, a forward conv's): nothing to gain
    groups = _regroup(list(dict.fromkeys(r for vals in stored for r in vals)))
    if groups is None:
      continue
    regs, before = (sum(-(-len(g) // lanes) for g in gs) for gs in (groups, stored))
    if regs > before or (regs == before and not gathers):
      continue
    for g in groups:
      vec = UOp(FastOps.VECTORIZE, dt.vec(len(g)), tuple(g))
      out.update((r, UOp(FastOps.GEP, dt, (vec,), k)) for k, r in enumerate(g))
  return out


def vector_of(lanes: tuple[UOp, ...]) -> UOp | None:
  """The lanes as one vector value built by vector ops down to vector loads, broadcasts and constants; None when
  some source would have to be gathered lane by lane."""
  s0 = lanes[0]
  vec = UOp(FastOps.VECTORIZE, s0.dtype.vec(len(lanes)), lanes)
  if all(s is s0 for s in lanes) or all(s.op is FastOps.CONST for s in lanes):
    return vec
  if s0.op is FastOps.REDUCE:
    return None
  step = push_vectorize(vec)
  if step is None or step.op is FastOps.LOAD:
    return step
  srcs = []
  for s in step.src:
    v = vector_of(s.src) if s.op is FastOps.VECTORIZE else s
    if v is None and s.dtype.scalar() == dtypes.bool:
      v = s  # a mask whose lanes simplified apart (a padded window's bounds): put together lane by lane, index math
    if v is None:
      return None
    srcs.append(v)
  return step.replace(src=tuple(srcs))


def select_max(a: UOp, b: UOp) -> UOp:
  """`a < b ? b : a`: x86's max instruction (IEEE maximum, which keeps a NaN from either side and orders -0 below +0,
  takes five or six); it drops a NaN b and keeps a on a tie of zeros, so a float max built of it also combines NaN
  masks and the values' bits (`max_or_nan`)."""
  return (a < b).where(b, a)


_SIGNED = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


def signed_bits(v: UOp) -> UOp:
  """A float's bits as the signed int of its size (its sign bit the int's)."""
  return v.bitcast(_SIGNED[v.dtype.scalar().itemsize].vec(v.dtype.count))


Tree = Callable[[Callable[[UOp, UOp], UOp], Any], UOp]  # (combine, values) -> the values combined as a balanced tree


def max_or_nan(tree: Tree, values: Any, seen: Any, bits: Any) -> UOp:
  """The IEEE maximum of values from select_max: NaN where any of the NaN masks `seen` is set (so a NaN anywhere
  still gives NaN), and a zero max's sign the sign bit of the AND of `bits` (the values' signed_bits, and-ed): +0.0
  when a +0.0 was among them (a zero max means nothing positive was), else -0.0, whatever order select_max met the
  zeros in. Each combined by tree: `halves` for the lanes of one vector, lowerer's `pairwise` for a list of values."""
  top = tree(select_max, values)
  signs = tree(operator.and_, bits)
  zero = (signs & dtypes.min(signs.dtype.scalar())).bitcast(top.dtype)
  top = top.eq(0.0).where(zero, top)
  return tree(operator.or_, seen).where(UOp.const(top.dtype, math.nan), top)


def horizontal(op: Ops, v: UOp) -> UOp:
  """The lanes of vector v combined by op, halving the width each step (a log-depth tree of vector ops). A float
  max combines with select_max (one instruction) and is NaN where any lane is NaN (or-ed lane masks), its zero's
  sign from the lanes' bits (max_or_nan)."""
  if op is Ops.MAX and dtypes.is_float(v.dtype):
    return max_or_nan(halves, v, v.ne(v), signed_bits(v))
  return halves(lambda a, b: a.alu(op, b), v)


def halves(combine: Callable[[UOp, UOp], UOp], v: UOp) -> UOp:
  """The lanes of vector v (a power of two of them) combined as a tree: its low half with its high half, lane by
  lane as vector ops, until one lane is left."""
  n = v.dtype.count
  while n > 1:
    half = n // 2
    lo, hi = (UOp(Ops.GEP, v.dtype.scalar().vec(half) if half > 1 else v.dtype.scalar(), (v,),
                  tuple(range(k, k + half)) if half > 1 else k) for k in (0, half))
    v, n = combine(lo, hi), half
  return v


VECTOR_ACC = (16, 8, 4)  # lanes of a vector accumulator, widest first


def vector_accumulators(red: UOp) -> UOp | None:
  """A scalar REDUCE(CONTRACT(v0..vn-1)) over an unrolled axis whose values are contiguous loads (a row's max or
  sum): REDUCE(CONTRACT(vector(v0..vw-1), vector(vw..)), ...) of w-lane vector accumulators, combined across their
  lanes after the loop. Unrolling such a reduce otherwise gives one scalar chain per value."""
  c = red.src[0]
  if red.dtype.count != 1 or c.op is not FastOps.CONTRACT or red.dtype.scalar() == dtypes.bool:
    return None
  n = len(c.src)
  w = next((w for w in VECTOR_ACC if n % w == 0 and w <= MAX_VEC), None)
  if w is None:
    return None
  vecs = [vector_of(c.src[k:k + w]) for k in range(0, n, w)]
  if any(v is None or v.op is FastOps.VECTORIZE for v in vecs):
    return None
  vdt = red.dtype.vec(w)
  acc = UOp(FastOps.REDUCE, vdt, (UOp(FastOps.CONTRACT, vdt, tuple(vecs)), *red.src[1:]), red.arg)
  return horizontal(red.arg, acc)


pm_vectorize = PatternMatcher([
  (UPat(Ops.SINK, name="sink"), group_stores),
  (UPat(Ops.VECTORIZE, name="vec"), push_vectorize),
  (UPat(Ops.REDUCE, name="red"), vector_accumulators),
], name="vectorize")


def expand_ctx(sink: UOp) -> dict:
  """The context of the expand and vectorize passes on a simplified kernel (its lanes checked first)."""
  kname = kernel_name(sink)
  check_expansion(kname, sink)
  return {"kname": kname, "vector_bytes": vector_bytes()}
