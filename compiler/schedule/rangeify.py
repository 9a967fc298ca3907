"""The scheduler: tensor graph -> ordered kernels, each phase a named graph_rewrite in one "schedule N" context.

`create_schedule` (at the end of this file) runs the phases, in the style of the reference's rangeify: "View Tensor
Graph" snapshot, "replace realized", "earliest rewrites", "add bufferize", "remove bufferize" (the cost rule), "split
kernels", a "View Kernel Graph" snapshot, then "fuse kernels" (an in-place write reading other kernels' outputs where
it stores joins them: one kernel with several STOREs).

"split kernels" makes each BUFFERIZE of the tensor graph a kernel AST storing one buffer, formed by named rewrites,
each step visible in the trace: "open kernel + rangeify" (its first step opens the store over the output's elements,
the others push tensor-level INDEXes down the graph, turning movement ops into index math over RANGEs), "symbolic +
kernel cleanup", "narrow index" (int64 index math to int32 where bounds allow) and "number globals" (the globals
left get slots 0..n-1, then the kernel its name).

A tensor-level INDEX is `INDEX(x, gate, *idxs)`: the value of tensor node `x` at the element `idxs` (one int
expression per dimension of x), read only where the bool `gate` holds. `pm_rangeify` pushes it through movement ops
(which rewrite the idxs), ALU ops (which it distributes over), REDUCE_AXIS (which opens REDUCE ranges) and stops at
buffers, where it becomes `LOAD(INDEX(DEFINE_GLOBAL(slot), flat_idx[, gate]))`.
"""
from __future__ import annotations

import contextlib
import itertools
import os
from dataclasses import dataclass, field, replace
from typing import Iterator, Mapping, MutableMapping

from compiler import rewrite
from compiler.device import default_device, device_of, devices_used
from compiler.dtype import DType, dtypes
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite, track_graph
from compiler.runtime.buffer import Buffer, buffer_of, new_buffer_uop
from compiler.schedule.assign import assign_target, forget_overwritten, kernel_order, writes_in_place
from compiler.schedule.bufferize import (
  bufferize_candidates,
  earliest_rewrites,
  is_buffer_view,
  pm_add_bufferize,
  pm_remove_bufferize,
)
from compiler.schedule.cache import (
  KERNELS,
  SCHEDULE_CACHE_SIZE,
  SCHEDULES,
  CachedSchedule,
  disk_get,
  disk_key,
  disk_put,
  kernel_key,
  structure_key,
)
from compiler.schedule.fuse import fuse_kernels, kernel_outputs
from compiler.schedule.naming import unique_kernel_name
from compiler.schedule.order import memory_order
from compiler.schedule.shape import Shape, prod, shape_of, strides_for
from compiler.schedule.simplify import simplify_kernel
from compiler.schedule.split import pm_split_reduce, split_enabled
from compiler.trace import recorder
from compiler.trace.recorder import trace_context
from compiler.uop import AxisType, FastOps, GroupOp, KernelInfo, Ops, UOp, toposort

TRUE = UOp.const(dtypes.bool, True)


def iconst(v: int, dtype: DType = dtypes.index) -> UOp:
  return UOp.const(dtype, v)


def tindex(x: UOp, idxs: tuple[UOp, ...] | list[UOp], gate: UOp = TRUE) -> UOp:
  """The tensor-level INDEX of x at idxs (see the module docstring)."""
  return UOp(FastOps.INDEX, x.dtype, (x, gate, *idxs))


def and_(a: UOp, b: UOp) -> UOp:
  if a.op is Ops.CONST and a.arg is True:
    return b
  if b.op is Ops.CONST and b.arg is True:
    return a
  return a.alu(Ops.AND, b)


def flat_index(idxs: tuple[UOp, ...] | list[UOp], shape: Shape, dtype: DType = dtypes.index) -> UOp:
  """Row-major flat index of idxs in shape (dims of size 1 contribute nothing)."""
  ret: UOp | None = None
  for i, st, s in zip(idxs, strides_for(shape), shape):
    if s == 1:
      continue
    term = i if st == 1 else i * st
    ret = term if ret is None else ret + term
  return ret if ret is not None else iconst(0, dtype)


def reshape_idxs(in_shape: Shape, out_shape: Shape, idxs: tuple[UOp, ...], dtype: DType = dtypes.index) -> list[UOp]:
  """Indices into in_shape for the element idxs of its reshape to out_shape (dims grouped where products agree)."""
  groups: list[tuple[list[int], list[int]]] = []
  i = j = 0
  while i < len(in_shape) or j < len(out_shape):
    gi, gj = ([i] if i < len(in_shape) else []), ([j] if j < len(out_shape) else [])
    pi = in_shape[i] if gi else 1
    pj = out_shape[j] if gj else 1
    i, j = i + len(gi), j + len(gj)
    while pi != pj:
      if pi < pj:
        gi.append(i)
        pi *= in_shape[i]
        i += 1
      else:
        gj.append(j)
        pj *= out_shape[j]
        j += 1
    groups.append((gi, gj))
  new: list[UOp] = [iconst(0, dtype)] * len(in_shape)
  for gi, gj in groups:
    if len(gi) == 1 and len(gj) == 1:
      new[gi[0]] = idxs[gj[0]]
      continue
    flat = flat_index([idxs[k] for k in gj], tuple(out_shape[k] for k in gj), dtype)
    sub = tuple(in_shape[k] for k in gi)
    total = 1
    for s in sub:
      total *= s
    for k, st, s in zip(gi, strides_for(sub), sub):
      if s == 1:
        continue
      v = flat if st == 1 else flat // st
      new[k] = v if st * s == total else v % s
  return new


@dataclass
class KernelContext:
  """Per-kernel state of the rangeify pass: buffer slots, the next free axis id and the index dtype."""
  next_axis: int
  idx: DType = dtypes.index  # of every RANGE and index expression (see index_dtype)
  slots: dict[UOp, int] = field(default_factory=dict)  # BUFFER/AFTER node -> DEFINE_GLOBAL slot

  def define_global(self, buf: UOp) -> UOp:
    slot = self.slots.setdefault(buf, len(self.slots))
    return UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(buf_size(buf)), (), slot)


def buf_size(buf: UOp) -> int:
  b = buf.src[0] if buf.op is Ops.AFTER else buf
  return b.arg[1]


# ---- the rules; each gets the INDEX node `i`, its tensor source `x`, and works on i.src[1] (gate), i.src[2:] (idxs)

def _idx_reshape(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  src = x.src[0]
  return tindex(src, reshape_idxs(shape_of(src), x.arg, i.src[2:], ctx.idx), i.src[1])


def _idx_permute(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  new: list[UOp] = [iconst(0, ctx.idx)] * len(x.arg)
  for k, p in enumerate(x.arg):
    new[p] = i.src[2 + k]
  return tindex(x.src[0], new, i.src[1])


def _idx_expand(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  src_shape = shape_of(x.src[0])
  new = [iconst(0, ctx.idx) if s == 1 and o != 1 else idx for s, o, idx in zip(src_shape, x.arg, i.src[2:])]
  return tindex(x.src[0], new, i.src[1])


def _idx_pad(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  src_shape = shape_of(x.src[0])
  valid, new = TRUE, []
  for idx, s, (b, a) in zip(i.src[2:], src_shape, x.arg):
    if b > 0:
      valid = and_(valid, iconst(b - 1, ctx.idx).alu(Ops.CMPLT, idx))
    if a > 0:
      valid = and_(valid, idx.alu(Ops.CMPLT, b + s))
    new.append(idx - b if b else idx)
  inner = tindex(x.src[0], new, and_(i.src[1], valid))
  return valid.where(inner, UOp.const(x.dtype, 0)) if valid is not TRUE else inner


def _idx_shrink(i: UOp, x: UOp) -> UOp:
  return tindex(x.src[0], [idx + b if b else idx for idx, (b, _) in zip(i.src[2:], x.arg)], i.src[1])


def _idx_flip(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  shp = shape_of(x)
  new = [iconst(s - 1, ctx.idx) - idx if f and s > 1 else idx for idx, f, s in zip(i.src[2:], x.arg, shp)]
  return tindex(x.src[0], new, i.src[1])


def _idx_elementwise(i: UOp, x: UOp) -> UOp:
  return x.replace(src=tuple(tindex(s, i.src[2:], i.src[1]) for s in x.src))


def _idx_reduce(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  src = x.src[0]
  src_shape = shape_of(src)
  new, rngs = list(i.src[2:]), []
  for a in x.arg[1]:
    if src_shape[a] > 1:
      r = UOp.range(src_shape[a], ctx.next_axis, AxisType.REDUCE, ctx.idx)
      ctx.next_axis += 1
      rngs.append(r)
      new[a] = r
    else:
      new[a] = iconst(0, ctx.idx)
  inner = tindex(src, new, i.src[1])
  return UOp(Ops.REDUCE, x.dtype, (inner, *rngs), x.arg[0]) if rngs else inner


def _idx_buffer(ctx: KernelContext, i: UOp, b: UOp) -> UOp:
  gate = i.src[1]
  return ctx.define_global(b).index(i.src[2], None if gate is TRUE else gate).load()


def _idx_const(c: UOp) -> UOp:
  return c


def _idx_passthrough(i: UOp, x: UOp) -> UOp:
  return tindex(x.src[0], i.src[2:], i.src[1])


def _tidx(pat: UPat) -> UPat:
  return UPat(Ops.INDEX, src=(pat,), allow_any_len=True, name="i")


pm_rangeify = PatternMatcher([
  (_tidx(UPat(Ops.RESHAPE, name="x")), _idx_reshape),
  (_tidx(UPat(Ops.PERMUTE, name="x")), _idx_permute),
  (_tidx(UPat(Ops.EXPAND, name="x")), _idx_expand),
  (_tidx(UPat(Ops.PAD, name="x")), _idx_pad),
  (_tidx(UPat(Ops.SHRINK, name="x")), _idx_shrink),
  (_tidx(UPat(Ops.FLIP, name="x")), _idx_flip),
  (_tidx(UPat(GroupOp.ALU | {Ops.CAST, Ops.BITCAST}, name="x")), _idx_elementwise),
  (_tidx(UPat(Ops.REDUCE_AXIS, name="x")), _idx_reduce),
  (_tidx(UPat((Ops.BUFFER, Ops.AFTER), name="b")), _idx_buffer),
  (UPat(Ops.INDEX, src=(UPat(Ops.CONST, name="c"), UPat())), _idx_const),
  (_tidx(UPat((Ops.CONTIGUOUS, Ops.DETACH), name="x")), _idx_passthrough),
], name="rangeify")


INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def index_dtype(x: UOp, out_buf: UOp) -> DType:
  """int32 when every node of the kernel's tensor graph and every buffer it touches has at most 2**31-1 elements,
  else int64. That bound proves int32 enough: each index expression rangeify builds (a flat index, a pad's
  shifted index and bounds, a flip, a reshape's div/mod, a range) lies in [-n, n] for n the element count of the
  node it indexes into."""
  out = dtypes.int64 if buf_size(out_buf) > INT32_MAX else dtypes.index
  for u in toposort(x, gate=lambda y: y.op not in (FastOps.BUFFER, FastOps.AFTER)):
    n = buf_size(u) if u.op in (FastOps.BUFFER, FastOps.AFTER) else prod(shape_of(u))
    if n > INT64_MAX:  # its index math would wrap even in int64: refuse before anything is compiled
      what = f"buffer of {n} elements" if u.op in (Ops.BUFFER, Ops.AFTER) else f"{u.op.name} of shape {shape_of(u)}"
      raise ValueError(f"{what}: {n} elements, more than 64-bit index math can address (2**63-1)")
    if n > INT32_MAX:
      out = dtypes.int64
  return out


def _pure_index_math(nodes: list[UOp]) -> set[UOp]:
  """The int64 nodes computed from RANGEs and constants alone (sources before users in `nodes`)."""
  pure: set[UOp] = set()
  for u in nodes:
    if u.dtype == dtypes.int64 and (u.op in (Ops.RANGE, Ops.CONST) or
                                    (u.op in GroupOp.ALU and all(s in pure for s in u.src))):
      pure.add(u)
  return pure


def narrowable(ast: UOp) -> bool:
  """Whether an int64-indexed kernel may run in int32: after simplification, vmin/vmax prove all its index math and
  buffers fit (`pad(((2**31, 0),))[2**31:]` indexes [0, 3)), and index math is never used as a value (stored, cast,
  or compared with loaded data): only INDEX, REDUCE and comparisons read it."""
  nodes = toposort(ast)
  pure = _pure_index_math(nodes)
  if not pure or any(u.op is Ops.DEFINE_GLOBAL and u.dtype.size > INT32_MAX for u in nodes):
    return False
  if any(not (-INT32_MAX - 1 <= u.vmin and u.vmax <= INT32_MAX) for u in pure):
    return False
  for u in nodes:
    if u not in pure and any(s in pure for s in u.src):
      compare = u.op in GroupOp.Comparison and all(s in pure for s in u.src)
      closes = u.op is Ops.REDUCE and u.src[0] not in pure  # a REDUCE reading index math as its value keeps int64
      if not (compare or closes or u.op is Ops.INDEX):
        return False
  return True


def to_int32(x: UOp) -> UOp:
  return x.replace(dtype=dtypes.int32)


# bottom-up on a narrowable kernel: every int64 RANGE and constant, then the int64 math over them (its sources are
# int32 by then), which is all its index math (`_pure_index_math`)
pm_narrow_index = PatternMatcher([
  (UPat((Ops.RANGE, Ops.CONST), custom=lambda x: x.dtype == dtypes.int64, name="x"), to_int32),
  (UPat(GroupOp.ALU, custom=lambda x: x.dtype == dtypes.int64 and all(s.dtype == dtypes.int32 for s in x.src),
        name="x"), to_int32),
], name="narrow index")


@dataclass(frozen=True)
class ReadOrder:
  """A DEFINE_GLOBAL's arg until "number globals": when its buffer was first met (0: the output). Simplification
  may drop every read of a buffer; the globals left get consecutive slots in this order."""
  n: int

  def __repr__(self) -> str:
    return f"read {self.n}"


class _KernelBuild(KernelContext):
  """Rangeify's context with the globals left unnumbered (ReadOrder): renumbering numbered ones in a rewrite would
  make a renumbered global equal another one's old node."""

  def define_global(self, buf: UOp) -> UOp:
    order = ReadOrder(self.slots.setdefault(buf, len(self.slots)))
    return UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(buf_size(buf)), (), order)


def open_kernel(ctx: _KernelBuild, b: UOp, x: UOp) -> UOp:
  """STORE(buffer, value) -> a store at every element: a LOOP range per dim of size > 1, the value indexed there."""
  shape, idt = shape_of(x), ctx.idx
  rngs, idxs = [], []
  for s in shape:
    if s > 1:
      r = UOp.range(s, len(rngs), AxisType.LOOP, idt)
      rngs.append(r)
      idxs.append(r)
    else:
      idxs.append(iconst(0, idt))
  ctx.next_axis = len(rngs)
  return ctx.define_global(b).index(flat_index(idxs, shape, idt)).store(tindex(x, idxs))


pm_open_kernel = PatternMatcher([
  (UPat(Ops.STORE, src=(UPat((Ops.BUFFER, Ops.AFTER), name="b"), UPat(name="x"))), open_kernel),
], name="open kernel")

# the kernel's first step, then rangeify's: one rewrite (the pass "open kernel + rangeify"), so it never walks the
# tensor graph below the value
pm_build_kernel = pm_open_kernel + pm_rangeify


def number_global(ctx: dict[int, int], g: UOp) -> UOp:
  return g.replace(arg=ctx[g.arg.n])


def name_kernel(sink: UOp) -> UOp:
  return sink.replace(arg=KernelInfo(name=unique_kernel_name(sink)))


# bottom-up: the SINK is named last, from its numbered AST
pm_number_globals = PatternMatcher([
  (UPat(Ops.DEFINE_GLOBAL, custom=lambda g: isinstance(g.arg, ReadOrder), name="g"), number_global),
  (UPat(Ops.SINK, custom=lambda s: s.arg is None, name="sink"), name_kernel),
], name="number globals")


def build_kernel(x: UOp, out_buf: UOp) -> tuple[UOp, list[UOp]]:
  """The kernel AST computing tensor node x into out_buf, and the buffers it reads (in slot order after 0); a kernel
  of a structure built before (cache.kernel_key: another layer's, over other buffers) is that AST, bound to these
  buffers. While recording, a structure's first build in the recording runs (and shows) the passes and a later one is
  a "kernel cache hit" snapshot of the AST; with switches on every build runs them (SKIP_MATCHES numbers matches)."""
  if rewrite.SWITCHES is not None or not KERNELS.enabled():
    return _build_kernel(x, out_buf)
  rec = recorder.RECORDER
  made_in = None if rec is None else rec.ids.base  # (the recording the passes were shown in)
  key, leaves = kernel_key(x, out_buf)
  hit = KERNELS.get(key)
  if hit is not None and (rec is None or hit[2] == made_in):
    ast, slots, _ = hit
    if rec is not None:
      track_graph(ast, "kernel cache hit")
    return ast, [leaves[i] for i in slots]
  ast, bufs = _build_kernel(x, out_buf)
  at = {b: i for i, b in enumerate(leaves)}
  if all(b in at for b in bufs):
    KERNELS.put(key, (ast, tuple(at[b] for b in bufs), made_in))
  return ast, bufs


def _build_kernel(x: UOp, out_buf: UOp) -> tuple[UOp, list[UOp]]:
  idt = index_dtype(x, out_buf)
  ctx = _KernelBuild(next_axis=0, idx=idt)
  # "open kernel + rangeify" starts from the tensor-level store of x
  ast = graph_rewrite(UOp.sink(UOp(Ops.STORE, dtypes.void, (out_buf, x))), pm_build_kernel, ctx=ctx)
  ast = simplify_kernel(ast)
  if idt is not dtypes.index and narrowable(ast):
    ast = graph_rewrite(ast, pm_narrow_index, bottom_up=True)
  bufs = sorted(ctx.slots, key=lambda b: ctx.slots[b])
  live = sorted({u.arg.n for u in ast.toposort() if u.op is FastOps.DEFINE_GLOBAL})
  ast = graph_rewrite(ast, pm_number_globals, ctx={old: new for new, old in enumerate(live)}, bottom_up=True)
  return ast, [bufs[old] for old in live[1:]]


# ---- the user's lines each kernel computes (while recording only)

# nodes that compute nothing themselves: a kernel lists no call site for them, nor for movement ops over them (a
# constant broadcast by one line is the same node for every line that broadcasts it: hash-consing)
_NO_SITE = {Ops.CONST, Ops.BUFFER, Ops.AFTER, Ops.KERNEL, Ops.BUFFERIZE, Ops.DEFINE_VAR}


class KernelSites:
  """The call sites (recorder.note_callsite) of the tensor nodes each kernel of one schedule computes, the kernel's
  fused ops included. The scheduler's rewrites make new nodes of the user's, and a new node has no call site:
  `origin` finds the user's node one stands for: a BUFFERIZE stands for what it holds, a kernel's output read above
  it for the node the kernel computes, a rule's result for what the rule matched (`matches`: the recorder's log of
  the schedule's matches, (before, after)), a node the rewriter rebuilt over new sources for the same op, dtype and
  arg over its sources' origins."""

  def __init__(self, matches: list[tuple[UOp, UOp]]) -> None:
    self.matches = matches
    self._made_by: dict[UOp, UOp] | None = None  # a rule's result -> what it matched (the first match that made it)
    self.origins: dict[UOp, UOp] = {}
    self.by_kernel: dict[UOp, list[tuple[str, int, str]]] = {}  # KERNEL node -> its call sites
    self.lists: list[list[tuple[str, int, str]]] = []  # the call sites of each kernel of the schedule, in run order
    self._busy: set[UOp] = set()

  def origin(self, y: UOp) -> UOp:
    o = self.origins.get(y)
    if o is not None:
      return o
    if recorder.CALLSITE_KEY in y.__dict__ or y in self._busy:  # (busy: a rule's result that leads back to it)
      return y
    self._busy.add(y)
    try:
      o = self._origin(y)
    except RecursionError:  # (a chain of rewrites deeper than the stack: y stands for itself)
      o = y
    finally:
      self._busy.discard(y)
    self.origins[y] = o
    return o

  def _origin(self, y: UOp) -> UOp:
    if y.op is Ops.BUFFERIZE:
      return self.origin(y.src[0])
    src = tuple([self.origin(s) for s in y.src])  # (a toposort's order: mostly found in `origins`)
    rebuilt = y if src == y.src else y.replace(src=src)
    if recorder.CALLSITE_KEY in rebuilt.__dict__:
      return rebuilt
    if self._made_by is None:
      made: dict[UOp, UOp] = {}
      for before, after in self.matches:
        made.setdefault(after, before)
      self._made_by = made
    # a node a rule made, or one rebuilt over such nodes (the matched node's sources changed by an earlier rule)
    before = self._made_by.get(y, self._made_by.get(rebuilt))
    return rebuilt if before is None else self.origin(before)

  def sites(self, nodes: list[UOp]) -> Iterator[tuple[int, tuple[str, int, str]]]:
    """(position, call site) of the nodes (sources first) that compute something and have one."""
    skip: set[UOp] = set()
    for i, y in enumerate(nodes):
      if y.op in _NO_SITE or (y.op in GroupOp.Movement and y.src[0] in skip) or is_buffer_view(y):
        skip.add(y)
      elif (site := recorder.callsite_of(self.origin(y))) is not None:
        yield i, site

  def add(self, kernel: UOp, b: UOp, out: UOp) -> None:
    """Note the call sites of kernel, split off from b = BUFFERIZE(value) and read as `out` by the nodes above."""
    sites: dict[tuple[str, int, str], None] = {}
    for _, site in self.sites(toposort(b.src[0], gate=lambda y: y.op not in _NO_SITE)):
      sites.pop(site, None)  # (in the order last computed: the output's site comes last)
      sites[site] = None
    self.by_kernel[kernel] = list(sites)
    self.origins[out] = self.origin(b.src[0])


def _split_bufferize(ctx: KernelSites | None, b: UOp) -> UOp:
  x = b.src[0]
  if x.op is Ops.CONTIGUOUS:
    x = x.src[0]
  shape = shape_of(b)
  size = prod(shape)
  target = assign_target(x)
  if x.op is Ops.ASSIGN:
    x = x.src[1]
  ast, inputs = build_kernel(x, target) if target is not None else (None, [])
  out_buf, tmp_kernel = target, None
  if ast is None or not writes_in_place(ast):  # reading other elements of the target: write a fresh buffer
    out_buf = new_buffer_uop(b.dtype, size, device=kernel_device(x))
    ast, inputs = build_kernel(x, out_buf)
    if target is not None:  # an assign keeps its target's buffer (as tinygrad): a second kernel copies the value in
      tmp_kernel = UOp(Ops.KERNEL, dtypes.void, (ast, *inputs), ast.arg.name)
      tmp = UOp(Ops.AFTER, b.dtype, (out_buf, tmp_kernel))
      out_buf = target
      ast, inputs = build_kernel(tmp if shape == (size,) else UOp(Ops.RESHAPE, b.dtype, (tmp,), shape), target)
  kernel = UOp(Ops.KERNEL, dtypes.void, (ast, *inputs), ast.arg.name)
  after = UOp(Ops.AFTER, b.dtype, (out_buf, kernel))
  out = after if shape == (size,) else UOp(Ops.RESHAPE, b.dtype, (after,), shape)
  if ctx is not None:
    if tmp_kernel is not None:  # an assign's value, computed apart, and its copy: both the assign's ops
      ctx.add(tmp_kernel, b, tmp_kernel)
    ctx.add(kernel, b, out)
  return out


pm_split_kernels = PatternMatcher([
  (UPat(Ops.BUFFERIZE, name="b"), _split_bufferize),
], name="split kernels")


# ---- the scheduler's driver: its passes in order, in one "schedule N" context

@dataclass(frozen=True)
class ScheduleItem:
  """One step to run: a kernel (its AST and its buffers in DEFINE_GLOBAL slot order, outputs first), or a copy
  between devices (tinygrad's COPY: `ast` a COPY node, arg (from device, to device), bufs (destination, source))."""
  ast: UOp
  bufs: tuple[Buffer, ...]
  # while recording: the trace context of the schedule that made it, so that the step's context names it (its kernels
  # may run after other contexts: a schedule run later, a cache hit, another thread's); no part of its identity
  ctx: int | None = field(default=None, compare=False)

  @property
  def is_copy(self) -> bool:
    return self.ast.op is Ops.COPY

  @property
  def name(self) -> str:
    if self.ast.op is Ops.COPY:
      return f"copy {self.bufs[0].nbytes}, {self.ast.arg[1]} <- {self.ast.arg[0]}"
    return self.ast.arg.name

  def __repr__(self) -> str:
    return f"ScheduleItem({self.name}, bufs={list(self.bufs)})"


_schedule_count = itertools.count()

pm_replace_realized = PatternMatcher([(UPat(name="x"), lambda ctx, x: ctx.get(x), "realized node -> its buffer view")],
                                     name="replace realized")


# the tensor-level views of the scheduled outputs: AFTER(buffer, kernel) becomes the plain buffer (top-down, so the
# kernel below an AFTER is never walked)
pm_buffer_views = PatternMatcher([(UPat(Ops.AFTER, name="x"), lambda x: x.src[0], "AFTER(buffer, kernel) -> buffer")],
                                 name="buffer views")


@contextlib.contextmanager
def _kernel_sites() -> Iterator[KernelSites | None]:
  """While recording: a KernelSites following the schedule's matches (inside its trace context: recording started)."""
  rec = recorder.RECORDER
  if not isinstance(rec, recorder.Recorder):
    yield None
    return
  saved, rec.match_log = rec.match_log, []
  try:
    yield KernelSites(rec.match_log)
  finally:
    rec.match_log = saved


# the device a graph of constants only is computed on (None: the default device, `DEV`): a COPY's target while
# its source is scheduled (`_lower_copies`)
_target_device: list[str | None] = [None]


def kernel_device(x: UOp) -> str:
  """The device a kernel computing x runs on (and its output lives on): its buffers', else the target device."""
  return device_of(x) or _target_device[0] or default_device()


def create_schedule(outputs: list[UOp], realized: Mapping[UOp, UOp] | None = None, *,
                    _copies: list[ScheduleItem] | None = None) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Steps (in dependency order) that compute the tensor-level `outputs`, and the map output -> buffer view.

  `realized` maps tensor nodes computed earlier to views of their buffers; they are read instead of recomputed. A
  graph of a shape scheduled before reuses that schedule (compiler.schedule.cache), seen in the trace as a
  "schedule cache hit" snapshot in place of the passes. Copies between devices come first, each source scheduled
  on its own device (`_lower_copies`; `_copies`: those steps, given by the call that lowered them to this call on the
  lowered outputs, which puts them first and names its schedule context as the one that made each COPY)."""
  if devices_used() and _copies is None:
    copies, lowered = _lower_copies(outputs, realized)
    if copies or lowered != outputs:
      schedule, views = create_schedule(lowered, realized, _copies=copies)
      return schedule, {o: views[x] for o, x in zip(outputs, lowered)}
  with trace_context(f"schedule {next(_schedule_count)}", kind="schedule") as sched_ctx, _kernel_sites() as sites:
    empty = {o: UOp(Ops.RESHAPE, o.dtype, (new_buffer_uop(o.dtype, 0, device=kernel_device(o)),), shape_of(o))
             for o in outputs if prod(shape_of(o)) == 0}
    sink = UOp.sink(*(empty.get(o, o) for o in outputs))
    track_graph(sink, "View Tensor Graph")
    if realized:
      sink = graph_rewrite(sink, pm_replace_realized, ctx=realized)
    key, inputs = structure_key(sink) if SCHEDULES.enabled() else (None, [])
    if key is not None and (_target_device[0] or os.environ.get("DEV")):  # (constants alone run on that device)
      key = (_target_device[0] or default_device(), key)
    cached = SCHEDULES.get(key) if key is not None else None
    dkey = disk_key(key) if cached is None and key is not None else None
    if dkey is not None and (cached := disk_get(dkey, len(inputs))) is not None:
      SCHEDULES.put(key, cached)
      SCHEDULES.disk_hits += 1
    if cached is not None:
      track_graph(sink, "schedule cache hit")
      kernels, views = cached.bind(inputs)
      if sites is not None:
        _sites_at_rows(sites, key, sink)
    else:
      kernels, views = _schedule(sink, sites)
      made = CachedSchedule.of(kernels, views, inputs) if key is not None else None
      if made is not None:
        SCHEDULES.put(key, made)
        if dkey is not None:
          disk_put(dkey, made)
        if sites is not None:
          _site_rows(sites, key, sink)
    if sites is not None:  # (none known for a hit on a schedule made before recording began)
      for i, (ast, _) in enumerate(kernels):
        recorder.note_kernel_callsites(ast.arg.name, sites.lists[i] if i < len(sites.lists) else [])
  if realized and isinstance(realized, MutableMapping):  # Tensor.assign overwrote buffers: their old values are gone
    forget_overwritten(realized, {b for k in kernels for b in kernel_outputs(k)})
  ref = recorder.context_ref(sched_ctx)
  schedule = [ScheduleItem(ast, tuple(buffer_of(b) for b in bufs), ref) for ast, bufs in kernels]
  copies = [replace(si, ctx=ref) if si.ctx is None else si for si in _copies or ()]  # (sources' kernels: theirs)
  return copies + schedule, dict(zip(outputs, views))


def _note_sites(sites: KernelSites, unfused: list[tuple[tuple[UOp, tuple[UOp, ...]], UOp]],
                kernels: list[tuple[UOp, tuple[UOp, ...]]]) -> None:
  """Each kernel's call sites (sites.lists): a kernel "fuse kernels" made lists those of the kernels it joined (the
  ones gone whose outputs it stores)."""
  kept = set(kernels)
  gone = [(k, sites.by_kernel.get(node, [])) for k, node in unfused if k not in kept]
  own = {k: sites.by_kernel.get(node, []) for k, node in unfused if k in kept}
  for k in kernels:
    got = own.get(k)
    if got is None:
      outs = set(kernel_outputs(k))
      got = list(dict.fromkeys(s for g, gs in gone if outs.intersection(kernel_outputs(g)) for s in gs))
    sites.lists.append(got)


# a cached schedule's kernels' call sites, as rows of its structure_key (its graph's nodes in toposort's order): a hit
# names this graph's lines, not those of the graph the schedule was made for (the same ops from other lines)
_SITE_ROWS: dict[tuple, list[list[int]]] = {}


def _site_rows(sites: KernelSites, key: tuple, sink: UOp) -> None:
  """Remember where in the graph (rows of its structure key) each kernel's call sites are."""
  row_of: dict[tuple[str, int, str], int] = {}
  for i, site in sites.sites(toposort(sink)):
    row_of.setdefault(site, i)
  if len(_SITE_ROWS) >= SCHEDULE_CACHE_SIZE:
    del _SITE_ROWS[next(iter(_SITE_ROWS))]
  _SITE_ROWS[key] = [[row_of[s] for s in got if s in row_of] for got in sites.lists]


def _sites_at_rows(sites: KernelSites, key: tuple, sink: UOp) -> None:
  """On a schedule cache hit: the call sites of this graph's nodes at the rows _site_rows remembered."""
  rows = _SITE_ROWS.get(key)
  if rows is None:
    return
  nodes = toposort(sink)
  for got in rows:
    found = (recorder.callsite_of(sites.origin(nodes[i])) for i in got)
    sites.lists.append(list(dict.fromkeys(s for s in found if s is not None)))


def _schedule(sink: UOp, sites: KernelSites | None = None) -> tuple[list[tuple[UOp, tuple[UOp, ...]]], list[UOp]]:
  """The scheduler's passes: kernels as (ast, BUFFER nodes in slot order) in dependency order, the outputs' views;
  with `sites` (while recording), each kernel's call sites noted for its kernel contexts."""
  # an assign's target is one; a kernel's output is not
  in_place = {u for u in toposort(sink) if u.op is FastOps.BUFFER}
  sink = graph_rewrite(sink, earliest_rewrites)
  if split_enabled():
    sink = graph_rewrite(sink, pm_split_reduce, ctx=set(), name="split reduces")
  sink = graph_rewrite(sink, pm_add_bufferize, ctx=bufferize_candidates(sink))
  sink = graph_rewrite(sink, pm_remove_bufferize, bottom_up=True)
  sink = graph_rewrite(sink, pm_split_kernels, ctx=sites, bottom_up=True)
  track_graph(sink, "View Kernel Graph")
  kernels, made_by = [], []
  afters = [u for u in toposort(sink, gate=lambda y: y.op is not FastOps.SINK or y is sink) if u.op is FastOps.AFTER]
  for u in kernel_order(afters):  # reads of a buffer before the in-place write that overwrites it
    if u.op is Ops.AFTER:
      kernel = u.src[1]
      ins = tuple(b.src[0] if b.op is Ops.AFTER else b for b in kernel.src[1:])
      kernels.append((kernel.src[0], (u.src[0], *ins)))
      made_by.append(kernel)
  unfused = kernels
  kernels = memory_order(fuse_kernels(kernels, in_place), in_place)
  if sites is not None:
    _note_sites(sites, list(zip(unfused, made_by)), kernels)
  views = []
  for view in graph_rewrite(sink, pm_buffer_views).src:
    if not is_buffer_view(view):
      raise RuntimeError(f"scheduler bug: an output became {view.op}, not a buffer view")
    views.append(view)
  return kernels, views


def _lower_copies(outputs: list[UOp], realized: Mapping[UOp, UOp] | None) -> tuple[list[ScheduleItem], list[UOp]]:
  """The COPY steps of the outputs' graphs (sources first), each source scheduled before its copy on its own
  device, and the outputs with each COPY replaced by a view of the buffer it fills. A COPY of constants only is no
  copy: its source is computed on the target device. Realized copies are remembered (a later graph reads them)."""
  memo = realized if isinstance(realized, MutableMapping) else {}
  stops = realized or {}
  sink = UOp.sink(*outputs)
  found = [u for u in toposort(sink, gate=lambda y: y.op is not Ops.BUFFER and y not in stops) if u.op is Ops.COPY
           and u not in stops]
  if not found:
    return [], outputs
  items: list[ScheduleItem] = []
  done: dict[UOp, UOp] = {}
  for c in found:
    src = graph_rewrite(c.src[0], pm_replace_realized, ctx=done) if done else c.src[0]
    src_dev, dst_dev = device_of(src), c.arg
    if src_dev is None or src_dev == dst_dev:  # constants (or a value already there): computed on the target
      saved, _target_device[0] = _target_device[0], dst_dev
      try:
        steps, views = create_schedule([src], realized)
      finally:
        _target_device[0] = saved
      items += steps
      done[c] = views[src]
    else:
      steps, views = create_schedule([src], realized)
      items += steps
      from_buf = views[src]
      while from_buf.op is Ops.RESHAPE:
        from_buf = from_buf.src[0]
      to_buf = new_buffer_uop(c.dtype, buf_size(from_buf), device=dst_dev)
      items.append(ScheduleItem(UOp(Ops.COPY, dtypes.void, (), (src_dev, dst_dev)),
                                (buffer_of(to_buf), buffer_of(from_buf))))
      shape = shape_of(c)
      done[c] = to_buf if shape == (buf_size(to_buf),) else UOp(Ops.RESHAPE, c.dtype, (to_buf,), shape)
    memo[c] = done[c]
  lowered = list(graph_rewrite(sink, pm_replace_realized, ctx=done).src)
  return items, lowered
