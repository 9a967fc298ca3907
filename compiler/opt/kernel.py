"""`Kernel`: a kernel AST seen as a list of axes (its RANGEs) that `apply_opt` splits, retypes, pads and swaps.

The axes are the RANGE nodes of the AST in a canonical order: threads, globals (GLOBAL/LOOP), locals, grouped
reduces, reduces, then upcasted/unrolled axes; inside a kind by axis id. Loop order is axis-id order, so a split
keeps the id of its outer part (it stays where it was) and gives the new part the next free id (it goes last in
its kind), like the reference's `shift_to`. Every opt is one named, traced `graph_rewrite` of the AST.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

from compiler.opt.dead_taps import dead_tail_ranges, pm_dead_taps
from compiler.opt.stage import MAX_SCRATCH, StageRefused, blocked_store, pm_stage, staged_store
from compiler.opt.target import Target, host_target
from compiler.opt.tc import (
  TENSOR_CORES,
  AppliedTC,
  TCRefused,
  fragment_split,
  match_axes,
  refusal_after,
  use_tc,
  wmma_ast,
)
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.symbolic import linear_form, pm_index_given_valid, symbolic
from compiler.trace import recorder
from compiler.uop import AxisType, FastOps, KernelInfo, Ops, UOp, substitute, toposort


class OptOps(Enum):
  UPCAST = auto(); UNROLL = auto(); LOCAL = auto(); GROUP = auto(); GROUPTOP = auto()  # noqa: E702
  PADTO = auto(); SWAP = auto(); NOLOCALS = auto(); THREAD = auto(); PEEL = auto()  # noqa: E702
  STAGE = auto()  # the CPU's counterpart of LOCAL memory: a reused tile of an input copied to a contiguous scratch
  BLOCK = auto()  # a reduce axis in blocks looped outside the outputs, which accumulate across them
  TC = auto()  # a matmul reshaped around a tensor core's fragment (compiler/opt/tc.py); arg (tc_select, tc_opt)

  def __lt__(self, x: OptOps) -> bool:
    return self.value < x.value

  def __repr__(self) -> str:
    return f"OptOps.{self.name}"


@dataclass(frozen=True, order=True)
class Opt:
  """One optimization: `op` on `axis` (a position in the kernel's axes, or in its reduce axes for UNROLL/GROUP)
  with `arg` (an amount, 0 meaning the whole axis; for SWAP the other axis; for TC (tc_select, tc_opt))."""
  op: OptOps
  axis: int | None = None
  arg: int | tuple[int, int] | None = None

  def __repr__(self) -> str:
    return f"Opt(op={self.op!r}, axis={self.axis}, arg={self.arg})"

  def short(self) -> str:
    """The name the UI shows: `UPCAST(1, 16)` (a rewrite list shows several of these side by side)."""
    return f"{self.op.name}({self.axis}, {self.arg})"

  def to_json(self) -> list:
    return [self.op.name, self.axis, list(self.arg) if isinstance(self.arg, tuple) else self.arg]

  @staticmethod
  def from_json(x: Any) -> Opt:
    """The Opt of a `[op name, axis, arg]` list read from a file; ValueError on anything else."""
    if not (isinstance(x, list) and len(x) == 3 and isinstance(x[0], str) and x[0] in OptOps.__members__):
      raise ValueError(f"not an opt: {x!r:.80}")
    if x[0] == "TC" and isinstance(x[2], list) and len(x[2]) == 2 and all(type(v) is int for v in x[2]) and \
       -1 <= x[2][0] < 64 and 0 <= x[2][1] <= 2 and (x[1] is None or type(x[1]) is int and 0 <= x[1] < 64):
      return Opt(OptOps.TC, x[1], (x[2][0], x[2][1]))
    if not all(v is None or (type(v) is int and 0 <= v < 1 << 20) for v in x[1:]):
      raise ValueError(f"opt axis/arg must be small non-negative ints or null: {x!r:.80}")
    return Opt(OptOps[x[0]], x[1], x[2])


class KernelOptError(Exception):
  """An opt that does not apply to this kernel; the message says why."""


def check(cond: bool, msg: str) -> None:
  if not cond:
    raise KernelOptError(msg)


# ---- axis kinds

# where each kind of axis goes in the canonical order (same rank: ordered by axis id)
AXIS_RANK: dict[AxisType, int] = {
  AxisType.THREAD: 0, AxisType.GLOBAL: 1, AxisType.LOOP: 1, AxisType.LOCAL: 2, AxisType.GROUP_REDUCE: 3,
  AxisType.REDUCE: 4, AxisType.UNROLL: 5, AxisType.UPCAST: 5, AxisType.BLOCK: 1,
}
REDUCE_KINDS = frozenset({AxisType.GROUP_REDUCE, AxisType.REDUCE, AxisType.UNROLL})
# the reference's colors: global blue (threads bright blue), local cyan, group green, reduce red,
# unrolled reduce magenta, upcast yellow; LOOP is how a CPU kernel's global axes may arrive, shown as global
AXIS_COLORS: dict[AxisType, str] = {
  AxisType.THREAD: "BLUE", AxisType.GLOBAL: "blue", AxisType.LOOP: "blue", AxisType.LOCAL: "cyan",
  AxisType.GROUP_REDUCE: "green", AxisType.REDUCE: "red", AxisType.UNROLL: "magenta", AxisType.UPCAST: "yellow",
  AxisType.BLOCK: "green",
}
OPT_AXIS_TYPE: dict[OptOps, AxisType] = {
  OptOps.UPCAST: AxisType.UPCAST, OptOps.UNROLL: AxisType.UNROLL, OptOps.LOCAL: AxisType.LOCAL,
  OptOps.GROUP: AxisType.GROUP_REDUCE, OptOps.GROUPTOP: AxisType.GROUP_REDUCE, OptOps.THREAD: AxisType.THREAD,
}
MAX_UPCAST, MAX_UNROLL = 16, 32


def axis_key(r: UOp) -> tuple[int, int]:
  return (AXIS_RANK[r.arg[1]], r.arg[0])


def range_size(r: UOp) -> int | UOp:
  """The size of a RANGE: an int, or the UOp of a symbolic size."""
  end = r.src[0]
  return end.arg if end.op is FastOps.CONST else end


# ---- the rewrite that applies an opt: RANGEs substituted, REDUCE range lists fixed, padded accesses guarded

@dataclass
class _OptSub:
  ranges: dict[UOp, UOp] = field(default_factory=dict)  # old RANGE -> its replacement expression
  reduce: dict[UOp, tuple[UOp, ...]] = field(default_factory=dict)  # old RANGE -> the RANGEs a REDUCE loops over
  guards: dict[UOp, UOp] = field(default_factory=dict)  # padded old RANGE -> (old RANGE < old size)
  # a THREAD split of `thread[0]` into the THREAD range `thread[1]`: the stores that do not loop over the split
  # axis (a peeled remainder's) are stored by thread 0 alone
  thread: tuple[UOp, UOp] | None = None


def _conjuncts(valid: UOp) -> list[UOp]:
  out, stack = [], [valid]
  while stack:
    v = stack.pop()
    if v.op is Ops.AND:
      stack.extend(v.src)
    else:
      out.append(v)
  return out


def _subst_range(ctx: _OptSub, r: UOp) -> UOp | None:
  return ctx.ranges.get(r)


def _reduce_ranges(ctx: _OptSub, red: UOp) -> UOp | None:
  if not any(s in ctx.reduce for s in red.src[1:]):
    return None
  rngs = [n for s in red.src[1:] for n in ctx.reduce.get(s, (s,)) if n.op is Ops.RANGE]
  if not rngs:  # nothing left to reduce over: a reduce of one element is that element
    return red.src[0]
  return red.replace(src=(red.src[0], *sorted(dict.fromkeys(rngs), key=axis_key)))


def _guard_index(ctx: _OptSub, idx: UOp) -> UOp | None:
  if not ctx.guards:
    return None
  have = _conjuncts(idx.src[2]) if len(idx.src) > 2 else []
  new = [g for r, g in ctx.guards.items() if r in idx.ranges and g not in have]
  if not new:
    return None
  valid = idx.src[2] if len(idx.src) > 2 else None
  for g in new:
    valid = g if valid is None else valid & g
  return idx.replace(src=(idx.src[0], idx.src[1], valid))


def _thread_gate(ctx: _OptSub, st: UOp) -> UOp | None:
  """A store that does not loop over the axis a THREAD splits runs in every thread: only thread 0 stores it (the
  gate is outside its loops: a remainder's handful of values is computed by each thread, stored by one)."""
  if ctx.thread is None or ctx.thread[0] in st.ranges:
    return None
  if st.src[0].src[0].op is not Ops.DEFINE_GLOBAL:  # a STAGE fill: every thread fills a scratch of its own
    return None
  out = _gate_to_thread0(st, ctx.thread[1])
  return None if out is st else out


pm_apply_opt = PatternMatcher([
  (UPat(Ops.STORE, name="st"), _thread_gate),
  (UPat(Ops.REDUCE, name="red"), _reduce_ranges),
  (UPat(Ops.INDEX, name="idx"), _guard_index),
  (UPat(Ops.RANGE, name="r"), _subst_range),
], name="apply opt")


@dataclass(frozen=True)
class _Peel:
  """A PEEL of `rng`: its main part (`main`: outer * amt + tile) and its remainder (`tail`: q * amt + rest),
  with the RANGEs each part's REDUCE loops over in place of `rng`."""
  rng: UOp
  main: UOp
  tail: UOp
  main_parts: tuple[UOp, ...]
  tail_parts: tuple[UOp, ...]
  reduce: bool
  thread: UOp | None = None  # the THREAD range of a THREAD split the axis does not divide (see _thread_peel)


def _peel_stores(ctx: _Peel, sink: UOp) -> UOp | None:
  """An output axis: every store over it once for the main part, then once more for the remainder."""
  if ctx.reduce or not any(ctx.rng in st.ranges for st in sink.src):
    return None
  mains = [substitute(st, {ctx.rng: ctx.main}) for st in sink.src]
  tails = [substitute(st, {ctx.rng: ctx.tail}) for st in sink.src if ctx.rng in st.ranges]
  if ctx.thread is not None:  # a THREAD split: what does not loop over the threads is stored by thread 0
    mains = [_gate_to_thread0(st, ctx.thread) for st in mains]
    tails = [_gate_to_thread0(st, ctx.thread) for st in tails]
  return sink.replace(src=(*mains, *tails))


def _gate_to_thread0(st: UOp, thread: UOp) -> UOp:
  if thread in st.ranges:
    return st
  ix, gate = st.src[0], thread.eq(0)
  valid = ix.src[2] & gate if len(ix.src) > 2 else gate
  return st.replace(src=(ix.replace(src=(ix.src[0], ix.src[1], valid)), *st.src[1:]))


def _peel_reduce(ctx: _Peel, red: UOp) -> UOp | None:
  """A reduce axis: the REDUCE over the main part combined (by the reduce's own op) with one over the remainder."""
  if not ctx.reduce or ctx.rng not in red.src[1:]:
    return None
  others = [s for s in red.src[1:] if s is not ctx.rng]

  def part(expr: UOp, parts: tuple[UOp, ...]) -> UOp:
    v = substitute(red.src[0], {ctx.rng: expr})
    rngs = sorted([*others, *parts], key=axis_key)
    return UOp(Ops.REDUCE, red.dtype, (v, *rngs), red.arg) if rngs else v
  return part(ctx.main, ctx.main_parts).alu(red.arg, part(ctx.tail, ctx.tail_parts))


pm_peel = PatternMatcher([
  (UPat(Ops.SINK, name="sink"), _peel_stores),
  (UPat(Ops.REDUCE, name="red"), _peel_reduce),
], name="peel")


def _zero_preserving(value: UOp, padded: UOp) -> bool:
  """True when `value` is 0 wherever the loads that depend on `padded` read 0 (so padding a sum is safe)."""
  zero: dict[UOp, bool] = {}
  for u in toposort(value):
    s = [zero[x] for x in u.src]
    if u.op is Ops.LOAD:
      zero[u] = padded in u.ranges
    elif u.op is Ops.CONST:
      zero[u] = u.arg == 0
    elif u.op is Ops.MUL or u.op is Ops.AND:
      zero[u] = s[0] or s[1]
    elif u.op in (Ops.ADD, Ops.SUB, Ops.MAX, Ops.OR, Ops.XOR):
      zero[u] = s[0] and s[1]
    elif u.op in (Ops.NEG, Ops.CAST, Ops.SQRT, Ops.SIN, Ops.TRUNC):
      zero[u] = s[0]
    elif u.op is Ops.WHERE:
      zero[u] = s[1] and s[2]
    elif u.op is Ops.REDUCE:
      zero[u] = s[0] and u.arg is Ops.ADD
    else:  # EXP2, LOG2, RECIP, FDIV, IDIV, comparisons, ...: f(0) is not 0
      zero[u] = False
  return zero[value]


# ---- the kernel

class Kernel:
  """A kernel AST with the axes view the optimizer works on; `apply_opt` changes it, `get_optimized_ast` returns it."""

  def __init__(self, ast: UOp, target: Target | None = None):
    if not isinstance(ast, UOp) or ast.op is not Ops.SINK:
      raise ValueError(f"a Kernel needs a SINK of STOREs, got {getattr(ast, 'op', type(ast).__name__)}")
    if not ast.src or any(s.op is not Ops.STORE for s in ast.src):
      raise ValueError(f"a kernel SINK must have STOREs as sources, got {[s.op.name for s in ast.src]}")
    self.target = target if target is not None else host_target()
    self.info: KernelInfo = ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()
    # the name the scheduler gave (None: an AST built by hand): a kernel keeps it through its opts, so every surface
    # (DEBUG, the trace's runs, the viewer, show, compare) names it alike; `name` is its shape after the opts
    self.scheduled_name: str | None = ast.arg.name if isinstance(ast.arg, KernelInfo) else None
    self.applied_opts: list[Opt] = []
    self.dont_use_locals: bool = not self.target.has_local
    # axis ids of the remainder RANGEs PEEL made: in the AST, not among the axes opts address (see _peel)
    self.peeled: frozenset[int] = frozenset()
    self._new_peeled: frozenset[int] = frozenset()
    self.tensor_core: AppliedTC | None = None  # what a TC opt applied (compiler/opt/tc.py)
    self._new_tc: AppliedTC | None = None
    self._set_ast(_normalize(ast))
    # the scheduler tells apart different kernels of the same shape with a suffix (r_64_64n1): keep it
    rest = self.info.name[len(self.name):] if self.info.name.startswith(self.name) else ""
    self.suffix = rest if re.fullmatch(r"n\d+", rest) else ""

  def copy(self) -> Kernel:
    ret = Kernel.__new__(Kernel)
    ret.__dict__.update(self.__dict__)
    ret.applied_opts = self.applied_opts[:]
    return ret

  def _set_ast(self, ast: UOp) -> None:
    self.ast = ast
    nodes = toposort(ast)
    # the loops that fill a STAGE scratch (closed by an END) are not axes of the kernel
    self.stage_rngs: frozenset[UOp] = frozenset(r for u in nodes if u.op is FastOps.END for r in u.src[1:])
    every = sorted((u for u in nodes if u.op is FastOps.RANGE), key=axis_key)
    self.rngs: list[UOp] = [r for r in every if r.arg[0] not in self.peeled and r not in self.stage_rngs]
    self.remainders: list[UOp] = [r for r in every if r.arg[0] in self.peeled and r not in self.stage_rngs]
    self._max_axis_id = max((r.arg[0] for r in every), default=-1)
    self.reduceops: list[UOp] = [u for u in nodes if u.op is FastOps.REDUCE]
    self.stores: list[UOp] = list(ast.src)
    self.bufs: list[UOp] = sorted({u for u in nodes if u.op is FastOps.DEFINE_GLOBAL}, key=lambda b: b.arg)
    # every memory access: the INDEX of each LOAD and STORE
    self.accesses: list[UOp] = list(dict.fromkeys(u.src[0] for u in nodes if u.op in (FastOps.LOAD, FastOps.STORE)))
    self.vars: list[UOp] = [u for u in nodes if u.op is FastOps.DEFINE_VAR]

  # ---- the shape
  @property
  def full_shape(self) -> tuple[int | UOp, ...]:
    return tuple(range_size(r) for r in self.rngs)

  @property
  def axis_types(self) -> list[AxisType]:
    return [r.arg[1] for r in self.rngs]

  @property
  def shape_len(self) -> int:
    return len(self.rngs)

  def _count(self, below_rank: int) -> int:
    return sum(1 for r in self.rngs if AXIS_RANK[r.arg[1]] < below_rank)

  @property
  def global_dims(self) -> int:
    """Thread and global axes, which come first."""
    return self._count(2)

  @property
  def local_dims(self) -> int:
    return self._count(3) - self._count(2)

  @property
  def first_reduce(self) -> int:
    return self._count(3)

  @property
  def group_for_reduces(self) -> int:
    return self._count(4) - self._count(3)

  @property
  def first_upcast(self) -> int:
    return self._count(5)

  @property
  def upcasted(self) -> int:
    return self.shape_len - self.first_upcast

  @property
  def reduceop(self) -> UOp | None:
    return self.reduceops[0] if self.reduceops else None

  def upcast_size(self) -> int:
    """Elements per thread of the upcasted and unrolled axes together."""
    return math.prod(s for s in self.full_shape[self.first_upcast:] if isinstance(s, int))

  # ---- display
  def colors(self) -> list[str]:
    return [AXIS_COLORS[t] for t in self.axis_types]

  def shape_strs(self) -> list[str]:
    return [str(s) if isinstance(s, int) else s.render() for s in self.full_shape]

  def colored_shape(self) -> list[tuple[str, str]]:
    """(size text, color) for each axis."""
    return list(zip(self.shape_strs(), self.colors()))

  @property
  def kernel_type(self) -> str:
    kind = "r" if self.reduceops else "E"
    return kind + (str(len(self.stores)) if len(self.stores) > 1 else "")

  @property
  def name(self) -> str:
    """tinygrad style: r_64_4_128 (r: has a reduce, E: elementwise), one number per axis."""
    rest = [f"p{range_size(r)}" for r in getattr(self, "remainders", [])]
    return "_".join([self.kernel_type, *(self.shape_strs() or ["1"]), *rest]) + getattr(self, "suffix", "")

  def colored_name(self) -> list[tuple[str, str | None]]:
    """The name as (text, color) pieces, each axis size in its axis color (None: uncolored)."""
    out: list[tuple[str, str | None]] = [(self.kernel_type, None)]
    for text, color in self.colored_shape():
      out += [("_", "BLACK"), (text, color)]
    for r in self.remainders:  # a peeled remainder: p<size>, in the color of its tile
      out += [("_", "BLACK"), (f"p{range_size(r)}", AXIS_COLORS[r.arg[1]])]
    return out + ([(self.suffix, "BLACK")] if self.suffix else [])

  def __repr__(self) -> str:
    return f"<Kernel {self.name} opts={self.applied_opts}>"

  # ---- opts
  def real_axis(self, opt: Opt) -> int:
    if opt.axis is None:
      return -1
    if opt.op in (OptOps.UNROLL, OptOps.STAGE, OptOps.BLOCK):
      return self.first_reduce + opt.axis
    if opt.op in (OptOps.GROUP, OptOps.GROUPTOP):
      return self.first_reduce + self.group_for_reduces + opt.axis
    return opt.axis

  def apply_opt(self, opt: Opt, append_opt: bool = True) -> None:
    """Apply `opt` or raise KernelOptError (the kernel is then unchanged); both are recorded in the trace."""
    if not isinstance(opt, Opt):
      raise TypeError(f"apply_opt takes an Opt, got {type(opt).__name__}")
    try:
      new_ast, dont_use_locals = self._plan_tc(opt) if opt.op is OptOps.TC or self.tensor_core else self._plan(opt)
    except KernelOptError as e:
      self._record(opt, ok=False, reason=str(e))
      raise
    self.peeled, self._new_peeled = self.peeled | self._new_peeled, frozenset()
    if self._new_tc is not None:
      self.tensor_core, self._new_tc = self._new_tc, None
    if new_ast is not self.ast:
      self._set_ast(new_ast)
    self.dont_use_locals = dont_use_locals
    if append_opt:
      self.applied_opts.append(opt)
    self._record(opt, ok=True, reason=None)

  def apply_opts(self, opts: list[Opt]) -> Kernel:
    for opt in opts:
      self.apply_opt(opt)
    return self

  def _record(self, opt: Opt, ok: bool, reason: str | None) -> None:
    if recorder.RECORDER is None:
      return
    arg = opt.arg if opt.arg is None or type(opt.arg) is int else repr(opt.arg)
    axis = opt.axis if opt.axis is None or type(opt.axis) is int else None
    shape = [s if isinstance(s, int) else s.render() for s in self.full_shape]
    recorder.record("opt", op=opt.op.name, axis=axis, arg=arg, ok=ok, reason=reason, shape=shape,
                    colors=self.colors(), kname=self.name)

  def _plan(self, opt: Opt) -> tuple[UOp, bool]:
    """(the AST after `opt`, dont_use_locals after it); raises KernelOptError and changes nothing."""
    op, tgt = opt.op, self.target
    if op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.NOLOCALS):
      check(tgt.has_local, f"{op.name}: target {tgt.name} has no local memory (STAGE stages a tile on a CPU)")
      check(op is OptOps.NOLOCALS or not self.dont_use_locals, f"{op.name}: not using locals (NOLOCALS)")
    if op is OptOps.NOLOCALS:
      check(opt.axis is None and opt.arg is None, "NOLOCALS takes no axis or arg")
      check(not self.dont_use_locals, "NOLOCALS: already not using locals")
      check(self.local_dims == 0 and self.group_for_reduces == 0, "NOLOCALS: can't have no locals with locals")
      return self.ast, True

    check(type(opt.axis) is int, f"{op.name} needs an int axis, got {opt.axis!r}")
    # a staged kernel's scratch is filled from the axes as they are: only a THREAD split (of loops outside the
    # fill, each thread its own scratch) may follow
    check(not self.stage_rngs or op is OptOps.THREAD, f"{op.name}: only THREAD may follow STAGE")
    check(AxisType.BLOCK not in self.axis_types or op is OptOps.THREAD, f"{op.name}: only THREAD may follow BLOCK")
    axis = self.real_axis(opt)
    check(0 <= opt.axis and axis < self.shape_len, f"invalid axis {opt.axis} for {op.name} on {self.shape_strs()}")
    rng = self.rngs[axis]
    size = range_size(rng)

    if op is OptOps.SWAP:
      check(type(opt.arg) is int, f"SWAP needs the other axis as arg, got {opt.arg!r}")
      other = opt.arg
      check(axis < other < self.global_dims, f"swap is only for globals with axis < arg, got axis={axis}, "
            f"arg={other}, global_dims={self.global_dims}")
      check(AXIS_RANK[rng.arg[1]] == AXIS_RANK[self.rngs[other].arg[1]], "swap is only for axes of the same kind")
      return self._swap(axis, other, opt), self.dont_use_locals

    check(opt.arg is None or type(opt.arg) is int, f"arg should be an int, got {opt.arg!r}")
    check(opt.arg is not None, f"{op.name} needs an amount")
    if not isinstance(size, int):
      raise KernelOptError(f"{op.name}: can't change the symbolic axis {size.render()}")
    amt = opt.arg if opt.arg != 0 else size
    check(amt > 1, f"{op.name} of amount {amt} is meaningless")
    if op is OptOps.PEEL:
      return self._peel(axis, amt, opt), self.dont_use_locals
    if op not in (OptOps.PADTO, OptOps.THREAD):
      check(size % amt == 0, f"{op.name}: {amt} does not divide the axis of size {size}")
    kind = rng.arg[1]

    if op in (OptOps.STAGE, OptOps.BLOCK):
      check(kind is AxisType.REDUCE, f"{op.name} blocks a reduce axis (not an unrolled one)")
      return (self._stage if op is OptOps.STAGE else self._block)(rng, amt, opt), self.dont_use_locals
    if self.group_for_reduces and op in (OptOps.LOCAL, OptOps.UPCAST):
      self._check_shared(amt)
    if op is OptOps.LOCAL:
      check(axis < self.global_dims and kind is not AxisType.THREAD, "local is for globals")
      self._check_work_group(op, amt)
    elif op in (OptOps.GROUP, OptOps.GROUPTOP):
      check(tgt.has_shared, f"{op.name}: target {tgt.name} has no shared memory")
      check(self.first_reduce + self.group_for_reduces <= axis < self.first_upcast and kind is AxisType.REDUCE,
            "must be a reduce axis to group")
      reduce_axes = [r for red in self.reduceops for r in red.src[1:]]
      check(len(reduce_axes) == len(set(reduce_axes)), "can't group with parallel reduces")
      self._check_shared(amt)
      self._check_work_group(op, amt)
    elif op is OptOps.UNROLL:
      check(axis < self.first_upcast and kind in REDUCE_KINDS, "unroll is for reduce axes not already upcasted")
      check(amt <= MAX_UNROLL, f"don't unroll more than {MAX_UNROLL}")
    elif op is OptOps.UPCAST:
      check(axis < self.first_reduce and kind is not AxisType.BLOCK, "upcast is for non-reduce axes")
      check(amt <= MAX_UPCAST, f"don't upcast more than {MAX_UPCAST}")
    elif op is OptOps.THREAD:
      check(tgt.threads > 1 or tgt.max_threads > 1, f"target {tgt.name} runs no threads")
      check(kind in (AxisType.GLOBAL, AxisType.LOOP), "threads are for global axes")
      check(not any(r.arg[1] is AxisType.THREAD for r in self.rngs), "the kernel already has a THREAD axis")
      check(any(rng in st.ranges for st in self.stores), "a THREAD axis must be one some store loops over")
      check(amt <= tgt.max_threads, f"don't use more than {tgt.max_threads} threads")
      if size % amt != 0:
        check(amt < size, f"THREAD: {amt} threads for an axis of size {size}")
        check(not self.stage_rngs, f"THREAD after STAGE: {amt} does not divide the axis of size {size}")
        return self._thread_peel(rng, amt, opt), self.dont_use_locals
    elif op is OptOps.PADTO:
      return self._padto(axis, amt, opt), self.dont_use_locals
    else:
      raise KernelOptError(f"unknown opt {op}")
    top = op in (OptOps.GROUPTOP, OptOps.THREAD)  # a thread takes a contiguous block
    return self._shift_to(rng, amt, OPT_AXIS_TYPE[op], top, opt), self.dont_use_locals

  def _check_shared(self, amt: int) -> None:
    """A grouped reduce keeps one value per work-item of the work-group and per upcast lane in local memory: after
    an opt of `amt` (a GROUP, or a LOCAL or UPCAST once the kernel has one) it must fit the target's."""
    acc = self.reduceop.dtype.itemsize if self.reduceop is not None else 4
    kinds = (AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.UPCAST)
    smem = amt * acc * math.prod(s for s, t in zip(self.full_shape, self.axis_types) if t in kinds and
                                 isinstance(s, int))
    check(smem <= self.target.shared_max, f"exceeds maximum shared memory size: needs {smem}, max "
          f"{self.target.shared_max}")

  def _check_work_group(self, op: OptOps, amt: int) -> None:
    """A work-group is the LOCAL and GROUP axes' work-items, at most the target's `local_max`; a GROUP axis is a
    work-item id (a loop could not share its partials), so the kernel's axes fit the target's `work_dims` (either
    limit 0: not reported)."""
    kinds = (AxisType.LOCAL, AxisType.GROUP_REDUCE)
    items = amt * math.prod(s for s, t in zip(self.full_shape, self.axis_types) if t in kinds and isinstance(s, int))
    check(self.target.local_max == 0 or items <= self.target.local_max, f"{op.name}: a work-group of {items} "
          f"work-items exceeds the target's {self.target.local_max}")
    if op in (OptOps.GROUP, OptOps.GROUPTOP) and self.target.work_dims:
      dims = 1 + sum(1 for t in self.axis_types if t in (*kinds, AxisType.GLOBAL, AxisType.LOOP))
      check(dims <= self.target.work_dims, f"{op.name}: the kernel would need {dims} work-item dimensions, at most "
            f"{self.target.work_dims}")

  def _plan_tc(self, opt: Opt) -> tuple[UOp, bool]:
    """_plan of a TC opt, or of an opt after one (refused on the fragment's axes: compiler.opt.tc.refusal_after)."""
    if self.tensor_core is not None:
      axes = [self.real_axis(opt), *([opt.arg] if opt.op is OptOps.SWAP else [])]
      rngs = [self.rngs[a] for a in axes if type(a) is int and 0 <= a < self.shape_len]
      check((why := refusal_after(self.tensor_core, opt.op.name, rngs)) is None, str(why))
    return (self._tc(opt), self.dont_use_locals) if opt.op is OptOps.TC else self._plan(opt)

  def _tc(self, opt: Opt) -> UOp:
    """TC (compiler/opt/tc.py): the first of the target's tensor cores (or `tc_select`) whose fragment the kernel's
    matmul fits, padded where TC_OPT=2 allows, its N, M and K split around the fragment; TC=2 on a target without
    tensor cores uses every known one (the shape only)."""
    use = use_tc()
    check(not self.applied_opts, "tensor core opts must be first")
    check(use != 0, "tensor cores are off (TC=0)")
    cores = self.target.tensor_cores
    if not cores and use == 2:
      cores = TENSOR_CORES
    check(bool(cores), f"TC: target {self.target.name} has no tensor cores (TC=2 applies the shape without the WMMA)")
    check(type(opt.axis) is int and opt.axis >= 0, f"TC needs an axis (which matmul choice), got {opt.axis!r}")
    arg = opt.arg
    check(isinstance(arg, tuple) and len(arg) == 2 and all(type(v) is int for v in arg),
          f"TC needs arg (tc_select, tc_opt), got {arg!r}")
    select, level = arg
    check(-1 <= select < len(cores), f"TC: tc_select {select} is not one of the target's {len(cores)} tensor cores")
    check(0 <= level <= 2, f"TC: tc_opt must be 0, 1 or 2, got {level}")
    if use == 1:
      check(self.target.has_local and not self.dont_use_locals, "TC: the WMMA needs a work-group (not NOLOCALS)")
    reasons = []
    for tc in cores if select == -1 else cores[select:select + 1]:
      try:
        axes = match_axes(self.rngs, self.first_reduce, self.reduceops, tc, opt.axis, level, axis_stride)
        k = self.copy()
        for ax, dim in axes.pads:
          k.apply_opt(Opt(OptOps.PADTO, ax, dim), append_opt=False)
      except (TCRefused, KernelOptError) as e:
        reasons.append(str(e))
        continue
      lane_kind = AxisType.LOCAL if self.target.has_local else k.rngs[axes.m].arg[1]
      ranges, reduce, applied = fragment_split(k.rngs, axes, tc, use, k._next_axis_id(), lane_kind)
      if use == 1:  # the warp's lanes are work-items: a work-item dimension of their own
        whole = sum(1 for a, d in ((axes.n, tc.dims[0]), (axes.m, tc.dims[1])) if k.full_shape[a] == d)
        dims = k.global_dims - whole + 1
        most = self.target.work_dims
        check(not most or dims <= most, f"TC: the kernel would need {dims} work-item dimensions, at most {most}")
      self._new_tc = applied
      return graph_rewrite(k.ast, pm_apply_opt, ctx=_OptSub(ranges=ranges, reduce=reduce), name=f"apply {opt.short()}")
    raise KernelOptError("no tensor core available: " + "; ".join(reasons))

  # ---- AST changes
  def _next_axis_id(self) -> int:
    return self._max_axis_id + 1

  def _rewrite(self, sub: _OptSub, opt: Opt) -> UOp:
    return graph_rewrite(self.ast, pm_apply_opt, ctx=sub, name=f"apply {opt.short()}")

  def _shift_to(self, rng: UOp, amt: int, kind: AxisType, top: bool, opt: Opt) -> UOp:
    """Take `amt` out of `rng` into a new axis of `kind` (from the bottom, or the top)."""
    size = range_size(rng)
    assert isinstance(size, int)
    new = UOp.range(amt, self._next_axis_id(), kind, rng.dtype)
    if amt == size:
      expr, parts = new, (new,)
    else:
      outer = UOp.range(size // amt, rng.arg[0], rng.arg[1], rng.dtype)
      expr = new * (size // amt) + outer if top else outer * amt + new
      parts = (outer, new)
    thread = (rng, new) if kind is AxisType.THREAD else None
    return self._rewrite(_OptSub(ranges={rng: expr}, reduce={rng: parts}, thread=thread), opt)

  def _swap(self, a: int, b: int, opt: Opt) -> UOp:
    # loop order is axis-id order: renumber the axes of this kind with fresh ids in the swapped order
    rank = AXIS_RANK[self.rngs[a].arg[1]]
    pos = [i for i, r in enumerate(self.rngs) if AXIS_RANK[r.arg[1]] == rank]
    order = pos[:]
    ia, ib = pos.index(a), pos.index(b)
    order[ia], order[ib] = order[ib], order[ia]
    nid = self._next_axis_id()
    mapping = {self.rngs[i]: self.rngs[i].replace(arg=(nid + j, self.rngs[i].arg[1])) for j, i in enumerate(order)}
    return self._rewrite(_OptSub(ranges=mapping, reduce={k: (v,) for k, v in mapping.items()}), opt)

  def _stage(self, rng: UOp, amt: int, opt: Opt) -> UOp:
    """STAGE (compiler.opt.stage): a reused tile of an input copied to a scratch at most half of L2 in size."""
    check(not self.vars, "STAGE does not work with symbolic shapes")
    try:
      new = staged_store(self.rngs, self.global_dims, self.ast, rng, amt, self._next_axis_id(),
                         min(self.target.l2_bytes // 2, MAX_SCRATCH), axis_stride)
    except StageRefused as e:
      raise KernelOptError(f"STAGE: {e}") from None
    return graph_rewrite(self.ast, pm_stage, ctx=new, name=f"apply {opt.short()}")

  def _block(self, rng: UOp, amt: int, opt: Opt) -> UOp:
    """BLOCK (compiler.opt.stage.blocked_store): the reduce axis in blocks looped outside the outputs."""
    check(not self.vars, "BLOCK does not work with symbolic shapes")
    try:
      new = blocked_store(self.rngs, self.global_dims, self.ast, rng, amt, self._next_axis_id())
    except StageRefused as e:
      raise KernelOptError(f"BLOCK: {e}") from None
    return graph_rewrite(self.ast, pm_stage, ctx=new, name=f"apply {opt.short()}")

  def _padto(self, axis: int, amt: int, opt: Opt) -> UOp:
    rng = self.rngs[axis]
    size = range_size(rng)
    assert isinstance(size, int)
    check(not self.vars, "PADTO does not work with symbolic shapes")
    check(axis < self.first_upcast, "cannot pad upcasted")
    padded = -(-size // amt) * amt
    check(padded != size, f"nothing was padded: {size} is a multiple of {amt}")
    check(size > amt // 4, f"pad adds more than quadruple the work: {size} to {padded}")
    if rng.arg[1] in REDUCE_KINDS:
      red = next(r for r in self.reduceops if rng in r.src[1:])
      check(red.arg is Ops.ADD, f"cannot pad a {red.arg.name} reduce: padding 0 is not neutral")
      check(_zero_preserving(red.src[0], rng), "cannot pad: the reduced value is not 0 where the loads are padded")
    new = UOp.range(padded, rng.arg[0], rng.arg[1], rng.dtype)
    sub = _OptSub(ranges={rng: new}, reduce={rng: (new,)}, guards={rng: rng < size})
    return self._rewrite(sub, opt)

  def _peel(self, axis: int, amt: int, opt: Opt) -> UOp:
    """Tile the axis by `amt` (UPCAST an output axis, UNROLL a reduce axis) over its first floor(size/amt)*amt
    elements, and handle the size % amt left by a copy of the work over just them, tiled by that remainder: an
    output axis gets a second STORE of each store over it, a reduce axis a second REDUCE combined with the first.
    No masks: both parts are exact. The remainder's RANGE stays out of the axes later opts address."""
    rng = self.rngs[axis]
    size, kind = range_size(rng), rng.arg[1]
    assert isinstance(size, int)
    check(kind in (AxisType.GLOBAL, AxisType.LOOP, AxisType.REDUCE), f"PEEL is for global and reduce axes, not "
          f"{kind.name}")
    reduce = kind is AxisType.REDUCE
    tile, most = (AxisType.UNROLL, MAX_UNROLL) if reduce else (AxisType.UPCAST, MAX_UPCAST)
    check(amt <= most, f"don't peel more than {most}")
    check(amt < size, f"PEEL: a tile of {amt} does not fit in the axis of size {size}")
    check(size % amt != 0, f"PEEL: {amt} divides the axis of size {size}: use {'UNROLL' if reduce else 'UPCAST'}")
    if reduce:
      ops = {r.arg for r in self.reduceops if rng in r.src[1:]}
      check(ops <= {Ops.ADD, Ops.MAX, Ops.MUL}, f"PEEL: can't combine {sorted(o.name for o in ops)} reduces")
    nid = self._next_axis_id()
    inner = UOp.range(amt, nid, tile, rng.dtype)
    return self._split_rest(rng, amt, inner, lambda outer: outer * amt + inner, tile, reduce, None, opt)

  def _thread_peel(self, rng: UOp, n: int, opt: Opt) -> UOp:
    """A THREAD split of an axis n does not divide: thread t takes the block t*q..t*q+q-1 (q = size // n), and the
    size % n left is a loop of its own (peeled: a remainder, out of the axes opts address) that thread 0 stores."""
    nid = self._next_axis_id()
    t = UOp.range(n, nid, AxisType.THREAD, rng.dtype)
    q = range_size(rng) // n
    return self._split_rest(rng, n, t, lambda inner: t * q + inner, rng.arg[1], False, t, opt)

  def _split_rest(self, rng: UOp, amt: int, new: UOp, main: Any, rest_kind: AxisType, reduce: bool,
                  thread: UOp | None, opt: Opt) -> UOp:
    """rng (size s) as its first floor(s/amt)*amt elements, `main(outer)` with `outer` the axis of s // amt keeping
    rng's id (just `new` when that is 1), and the s % amt left: q*amt + a RANGE of `rest_kind` over them (the id
    after `new`'s; none for one element)."""
    size = range_size(rng)
    assert isinstance(size, int)
    q, rem = divmod(size, amt)
    outer = UOp.range(q, rng.arg[0], rng.arg[1], rng.dtype) if q > 1 else None
    tail = UOp.range(rem, new.arg[0] + 1, rest_kind, rng.dtype) if rem > 1 else None
    start = UOp.const(rng.dtype, q * amt)
    ctx = _Peel(rng, main(outer) if outer is not None else new, start + tail if tail is not None else start,
                (outer, new) if outer is not None else (new,), (tail,) if tail is not None else (), reduce, thread)
    out = graph_rewrite(self.ast, pm_peel, ctx=ctx, name=f"apply {opt.short()}")
    self._new_peeled = frozenset({tail.arg[0]} if tail is not None else ())  # taken by apply_opt on success
    return out

  # ---- output
  def get_optimized_ast(self, name_override: str | None = None) -> UOp:
    """The AST with the opts applied, its SINK named (the scheduler's name, else the shape's) and listing the opts."""
    info = KernelInfo(name=name_override or self.scheduled_name or self.name, opts=tuple(self.applied_opts),
                      dont_use_locals=self.dont_use_locals)
    ast = self.ast if self.tensor_core is None or self.tensor_core.use != 1 else wmma_ast(self.ast, self.tensor_core)
    return ast.replace(arg=info)


# ---- normalization on the way in

def _drop_one(ctx: dict[UOp, UOp], r: UOp) -> UOp | None:
  return ctx.get(r)


def _drop_one_reduce(ctx: dict[UOp, UOp], red: UOp) -> UOp | None:
  if not any(s in ctx for s in red.src[1:]):
    return None
  keep = [s for s in red.src[1:] if s not in ctx]
  return red.replace(src=(red.src[0], *keep)) if keep else red.src[0]


pm_simplify_ones = PatternMatcher([
  (UPat(Ops.REDUCE, name="red"), _drop_one_reduce),
  (UPat(Ops.RANGE, name="r"), _drop_one),
], name="simplify ones")


def _retype_reduce(ctx: dict[UOp, UOp], red: UOp) -> UOp | None:
  if not any(s in ctx for s in red.src[1:]):
    return None
  return red.replace(src=(red.src[0], *(ctx.get(s, s) for s in red.src[1:])))


pm_reduce_axes = PatternMatcher([
  (UPat(Ops.REDUCE, name="red"), _retype_reduce),
  (UPat(Ops.RANGE, name="r"), _drop_one),
], name="reduce axes")


def _normalize(ast: UOp) -> UOp:
  """Axes of size 1 are dropped and a REDUCE's ranges are typed REDUCE; a no-op (and no trace) when nothing to do."""
  nodes = toposort(ast)
  ones = {u: UOp.const(u.dtype, 0) for u in nodes if u.op is FastOps.RANGE and u.src[0].op is FastOps.CONST
          and u.src[0].arg == 1}
  if ones:
    ast = graph_rewrite(ast, pm_simplify_ones, ctx=ones)
    nodes = toposort(ast)
  retype = {r: r.replace(arg=(r.arg[0], AxisType.REDUCE)) for u in nodes if u.op is FastOps.REDUCE
            for r in u.src[1:] if r.op is FastOps.RANGE and r.arg[1] not in REDUCE_KINDS}
  if retype:
    ast = graph_rewrite(ast, pm_reduce_axes, ctx=retype)
  # div/mod pinned by a load's valid as linear forms, so the opts see the load's strides (a conv's input gradient)
  if any(u.op is FastOps.INDEX and len(u.src) > 2 and any(v.op is FastOps.MOD for v in toposort(u.src[2]))
         for u in nodes):
    ast = graph_rewrite(ast, pm_index_given_valid)
    if cut := dead_tail_ranges(ast):  # (the clauses that show a tap dead are the linear ones it made)
      ast = graph_rewrite(ast, pm_dead_taps, ctx=cut)
  split = _div_mod_split(toposort(ast))
  if split is not None:
    ast = graph_rewrite(graph_rewrite(ast, pm_split_div_mod, ctx=split), symbolic)
  return ast


pm_split_div_mod = pm_apply_opt.named("split div mod reduce")  # (then "symbolic": (o * c + i) // c is o)


def _div_mod_split(nodes: list[UOp]) -> _OptSub | None:
  """The innermost REDUCE range read as r // c and r % c for one c dividing it (a reshape merged two axes: GPT's
  attention output [b, h, t, dh] read by c_proj as one reduce of h * dh), split into r_outer * c + r_inner, both
  REDUCE, the inner part innermost: each load then walks the parts with plain strides (dh with stride 1), where it
  walked r by gathers (c_proj 45 GFLOP/s, a dot tile's 90 once split). None when there is no such range."""
  reduces = [u for u in nodes if u.op is FastOps.RANGE and u.arg[1] is AxisType.REDUCE]
  if not reduces:
    return None
  r = max(reduces, key=axis_key)
  size = range_size(r)
  divs = {u.src[1].arg for u in nodes
          if u.op in (FastOps.IDIV, FastOps.MOD) and u.src[0] is r and u.src[1].op is FastOps.CONST}
  if not isinstance(size, int) or len(divs) != 1 or not isinstance(c := next(iter(divs)), int) or \
      not 1 < c < size or size % c:
    return None
  new_id = 1 + max(u.arg[0] for u in nodes if u.op is FastOps.RANGE)
  outer, inner = UOp.range(size // c, r.arg[0], r.arg[1], r.dtype), UOp.range(c, new_id, r.arg[1], r.dtype)
  return _OptSub(ranges={r: outer * c + inner}, reduce={r: (outer, inner)})


# ---- strides: how an access's address moves along each axis

def linear_terms(idx: UOp) -> tuple[dict[UOp, int], set[UOp]]:
  """idx as sum(coef * RANGE) + rest: (coefs of the ranges it is affine in, ranges it depends on otherwise).

  Built on `compiler.symbolic.linear_form`; a CAST is looked through (it does not change how the address steps).
  Remembered on idx (the heuristics ask it of every access again for each axis and choice they weigh: a third of a
  training step's hand-coded optimizing): the caller must not change the dict or the set."""
  got = idx.__dict__.get("_linear_terms")
  if got is None:
    got = idx.__dict__["_linear_terms"] = _linear_terms(idx)
  return got


def _linear_terms(idx: UOp) -> tuple[dict[UOp, int], set[UOp]]:
  lin: dict[UOp, int] = {}
  rest: set[UOp] = set()
  todo = [(idx, 1)]
  while todo:
    u, scale = todo.pop()
    for t, c in linear_form(u)[0].items():
      if t.op is Ops.RANGE:
        lin[t] = lin.get(t, 0) + scale * c
      elif t.op is Ops.CAST:
        todo.append((t.src[0], scale * c))
      elif t.op is not Ops.DEFINE_VAR:
        rest |= set(t.ranges)
  return lin, rest


def axis_stride(idx: UOp, rng: UOp) -> int | None:
  """How far idx moves when rng steps by one: 0 if it does not depend on rng, None if not affine in it."""
  lin, rest = linear_terms(idx)
  if rng in rest:
    return None
  return lin.get(rng, 0)


def access_strides(k: Kernel, access: UOp) -> list[int | None]:
  """The stride of one INDEX along each of the kernel's axes (see axis_stride)."""
  lin, rest = linear_terms(access.src[1])
  return [None if r in rest else lin.get(r, 0) for r in k.rngs]


def masked_axes(k: Kernel) -> set[int]:
  """Axes that appear in a load's valid or a WHERE's condition: where padding or stacking masks the data. Not the
  ranges a condition reads only through loaded values (relu's `x <= 0` on a conv's sum: no mask upcasting makes
  constant, and its 6 x 6 outputs upcast whole took MNIST's conv4 27 -> 42 ms)."""
  conds = [a.src[2] for a in k.accesses if len(a.src) > 2]
  conds += [u.src[0] for u in toposort(k.ast) if u.op is FastOps.WHERE]
  used = {r for c in conds for r in toposort(c, gate=lambda u: u.op not in (FastOps.LOAD, FastOps.REDUCE))
          if r.op is FastOps.RANGE}
  return {i for i, r in enumerate(k.rngs) if r in used}
