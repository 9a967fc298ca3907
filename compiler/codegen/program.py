"""From kernel AST to `Program` (LLVM IR + what the runtime needs), every stage a named, traced rewrite."""
from __future__ import annotations

import gc
import math
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Mapping

from compiler.codegen.errors import CodegenError, kernel_name
from compiler.codegen.expander import expand_ctx, pm_expand, pm_vectorize
from compiler.codegen.linearizer import Linear, linearize
from compiler.codegen.llvmir import render_llvm, symbol
from compiler.codegen.lowerer import gate_reduces, lower_ctx, pm_gate_reduce, pm_lower
from compiler.codegen.simplify import pm_index_fold, symbolic_then_index_fold
from compiler.codegen.verify import verify_ast
from compiler.codegen.widen import pm_widen_index
from compiler.dtype import DType, dtypes
from compiler.rewrite import graph_rewrite, track_graph
from compiler.trace import recorder
from compiler.uop import FastOps, GroupOp, Ops, UOp, exec_alu, toposort


@dataclass(frozen=True)
class Program:
  """One compiled-to-IR kernel. Buffers are passed by slot 0..nbufs-1; `vars` are the DEFINE_VARs in call order."""
  name: str
  fname: str
  src: str
  uops: tuple[UOp, ...]
  nbufs: int
  buf_dtypes: tuple[DType | None, ...]
  ins: tuple[int, ...]
  outs: tuple[int, ...]
  vars: tuple[UOp, ...]
  par_size: UOp | None
  flops_terms: tuple[tuple[int, tuple[UOp, ...]], ...]
  accesses: tuple[tuple[int, UOp, int], ...]  # (slot, index expression, vector width), gated stores and masked
  # vector loads left out
  _cache: dict = field(default_factory=dict, compare=False, repr=False)

  @property
  def var_names(self) -> tuple[str, ...]:
    return tuple(v.arg[0] for v in self.vars)

  def flops(self, var_vals: Mapping[str, int] | None = None) -> int:
    """ALU operations of one run (value math only, not index math), counted from the linearized loops."""
    key = ("flops", tuple(sorted((var_vals or {}).items())))
    if key not in self._cache:
      vv = dict(var_vals or {})
      self._cache[key] = sum(n * math.prod(eval_int(e, vv) for e in ends) for n, ends in self.flops_terms)
    return self._cache[key]

  def par_extent(self, var_vals: Mapping[str, int] | None = None) -> int | None:
    """Iterations of the parallel loop (what (start, end) split), None when there is none."""
    return None if self.par_size is None else eval_int(self.par_size, dict(var_vals or {}))

  def index_bounds(self, var_vals: Mapping[str, int] | None = None) -> dict[int, tuple[int, int]]:
    """Per buffer slot, the lowest and highest element index the kernel may touch (None when unknown)."""
    key = ("bounds", tuple(sorted((var_vals or {}).items())))
    if key in self._cache:
      return self._cache[key]
    sub = {v: UOp.const(v.dtype, (var_vals or {})[v.arg[0]]) for v in self.vars if v.arg[0] in (var_vals or {})}
    out: dict[int, tuple[int, int]] = {}
    for slot, idx, width in self.accesses:
      e = idx.substitute(sub) if sub else idx
      lo, hi = e.vmin, e.vmax + width - 1
      if (e.vmin, e.vmax) == (dtypes.min(e.dtype), dtypes.max(e.dtype)) or e.op is Ops.WHERE:
        continue  # unknown bounds, or a masked access whose mask the bounds don't see: no check possible
      plo, phi = out.get(slot, (lo, hi))
      out[slot] = (min(lo, plo), max(hi, phi))
    self._cache[key] = out
    return out


def eval_int(u: UOp, var_vals: dict[str, int]) -> int:
  """The value of an int expression over DEFINE_VARs."""
  vals: dict[UOp, int] = {}
  for x in toposort(u):
    if x.op is Ops.CONST:
      vals[x] = x.arg
    elif x.op is Ops.DEFINE_VAR:
      if x.arg[0] not in var_vals:
        raise KeyError(f"no value given for variable {x.arg[0]!r}")
      vals[x] = var_vals[x.arg[0]]
    elif x.op in GroupOp.ALU:
      vals[x] = exec_alu(x.op, x.dtype, tuple(vals[s] for s in x.src))
    else:
      raise ValueError(f"can't evaluate {x.op.name} as an int expression")
  return vals[u]


# expansion and the index fold of its lanes in one bottom-up walk: each lane is folded as it is made, from folded
# sources, where the two passes one after the other rebuilt every node above a folded lane index (GPT's training
# step: 96k lane nodes, 85k of them rebuilt, 1.3 of its 6 s of first call); its output is a fixed point of both. The
# pass "expand + index fold" of the trace: recording the two passes instead cost GPT's traced step ~150k more node
# visits, its rebuilt nodes named and their matches recorded
pm_expand_fold = pm_expand + pm_index_fold


def lower_ast(ast: UOp, wide_index: bool = False) -> UOp:
  """The codegen passes on a kernel AST up to the graph the linearizer takes ("View Output AST"); wide_index: the
  LLVM backend's, with its index math in int64 (compiler/codegen/widen.py)."""
  verify_ast(ast)
  sink = track_graph(ast, "View Base AST")
  sink = symbolic_then_index_fold(sink)  # the full simplifier runs before expansion multiplies the graph by the lanes
  ctx = expand_ctx(sink)
  # one pass traced or not: a trace shows the rewrites that run, and the switches number the matches of those
  sink = graph_rewrite(sink, pm_expand_fold, ctx=ctx, bottom_up=True)
  sink = graph_rewrite(sink, pm_vectorize, ctx=ctx)
  sink = graph_rewrite(sink, pm_lower, ctx=lower_ctx(sink, ctx["kname"]))
  sink = graph_rewrite(sink, pm_gate_reduce, ctx=gate_reduces(sink))
  sink = graph_rewrite(sink, pm_index_fold)
  if wide_index:
    sink = graph_rewrite(sink, pm_widen_index, ctx=set(), bottom_up=True)
  return track_graph(sink, "View Output AST")


@dataclass(frozen=True)
class LinearKernel:
  """A kernel AST lowered and linearized, with its buffers and variables: what every renderer (LLVM IR, OpenCL C)
  starts from."""
  kname: str
  fname: str  # the kernel's name as a symbol every renderer's language accepts
  lin: Linear
  bufs: dict[int, UOp]  # DEFINE_GLOBALs by slot
  vars: tuple[UOp, ...]  # DEFINE_VARs by name
  nbufs: int


def linear_kernel(ast: UOp, wide_index: bool = False) -> LinearKernel:
  kname = kernel_name(ast)
  lowered = lower_ast(ast, wide_index)
  lin = linearize(lowered, kname)
  bufs = {u.arg: u for u in toposort(ast) if u.op is FastOps.DEFINE_GLOBAL}
  vars_ = tuple(sorted((u for u in toposort(lowered) if u.op is FastOps.DEFINE_VAR), key=lambda v: v.arg[0]))
  if len({v.arg[0] for v in vars_}) != len(vars_):
    raise CodegenError(kname, "two DEFINE_VARs share a name", vars_[0])
  return LinearKernel(kname, symbol(kname), lin, bufs, vars_, max(bufs) + 1 if bufs else 0)


@contextmanager
def collector_paused() -> Iterator[None]:
  """A kernel's codegen with the cyclic garbage collector off, restored on the way out. Expansion makes ~100k UOps a
  big kernel (tuples, weak references) that reference counting frees, yet allocating them ran a young collection every
  700 and, every hundred of those, a full one over everything the process holds: 0.35 of the 0.47 CPU s the collector
  took in GPT step's first call (issue 29). What cycles codegen leaves (a traceback's frames) wait for the next
  collection."""
  was = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if was:  # (a nested or concurrent codegen found it off and leaves it to the outermost)
      gc.enable()


_PROGRAMS: OrderedDict[UOp, Program] = OrderedDict()
_MAX_CACHED = 512


def get_program(ast: UOp) -> Program:
  """Compile a kernel AST to a Program (cached by AST while tracing is off, so rewrites show in traces). Its LLVM IR
  has the line tables that map code to UOps only while tracing: the trace's sources are all that reads them, and
  without them (the same machine code) LLVM takes 3-5% less time, the IR a third fewer characters (issue 29)."""
  if recorder.RECORDER is None and ast in _PROGRAMS:
    _PROGRAMS.move_to_end(ast)
    return _PROGRAMS[ast]
  with collector_paused():
    prg = _program(ast)
  if recorder.RECORDER is None:
    _PROGRAMS[ast] = prg
    if len(_PROGRAMS) > _MAX_CACHED:
      _PROGRAMS.popitem(last=False)
  return prg


def _program(ast: UOp) -> Program:
  lk = linear_kernel(ast, wide_index=True)
  kname, fname, lin, bufs, vars_, nbufs = lk.kname, lk.fname, lk.lin, lk.bufs, lk.vars, lk.nbufs
  src = render_llvm(kname, fname, lin, nbufs, list(vars_), debug=recorder.RECORDER is not None)
  glob = [u for u in lin.uops if u.op in (FastOps.LOAD, FastOps.STORE) and u.src[0].src[0].op is FastOps.DEFINE_GLOBAL]
  ins = tuple(sorted({u.src[0].src[0].arg for u in glob if u.op is FastOps.LOAD}))
  outs = tuple(sorted({u.src[0].src[0].arg for u in glob if u.op is FastOps.STORE}))
  gated = {u.src[0] for u in lin.uops if len(u.src) > {FastOps.STORE: 2, FastOps.LOAD: 1}.get(u.op, 99)}
  accesses = tuple((u.src[0].arg, u.src[1], u.dtype.base.count) for u in lin.uops
                   if u.op is FastOps.INDEX and u not in gated and u.src[0].op is FastOps.DEFINE_GLOBAL)
  return Program(kname, fname, src, tuple(lin.uops), nbufs,
                 tuple(bufs[i].dtype.base if i in bufs else None for i in range(nbufs)), ins, outs, vars_,
                 None if lin.par is None else lin.par.src[0], flops_terms(lin), accesses)


def _value_side(uops: list[UOp]) -> set[UOp]:
  """Nodes computing stored/accumulated values, not addresses, bounds or load masks."""
  seen: set[UOp] = set()
  stack = [u.src[1] for u in uops if u.op in (FastOps.STORE, FastOps.PHI)]
  while stack:
    x = stack.pop()
    if x in seen or x.op in (FastOps.INDEX, FastOps.DEFINE_ACC):
      continue
    seen.add(x)
    srcs = x.src
    if x.op is FastOps.WHERE and srcs[1].op is FastOps.LOAD and srcs[2].op in (FastOps.CONST, FastOps.VECTORIZE):
      srcs = srcs[1:2]  # a masked load's select is not arithmetic
    elif x.op is FastOps.LOAD:
      srcs = srcs[:1]  # (nor is a masked vector load's mask)
    stack.extend(srcs)
  return seen


def flops_terms(lin: Linear) -> tuple[tuple[int, tuple[UOp, ...]], ...]:
  value = _value_side(lin.uops)
  open_ends: list[UOp] = []
  acc: dict[tuple[UOp, ...], int] = {}
  for u in lin.uops:
    if u.op is FastOps.RANGE:
      open_ends.append(u.src[0])
    elif u.op is FastOps.END:
      open_ends.pop()
    elif u in value and u.op in GroupOp.ALU:
      n = u.dtype.count * (2 if u.op is FastOps.MULACC else 1)
      key = tuple(open_ends)
      acc[key] = acc.get(key, 0) + n
    elif u.op is FastOps.WMMA:  # a lane's share of the fragment's multiply-adds (arg: compiler/opt/tc.py wmma_arg)
      (n, m, k), threads = u.arg[1], u.arg[2]
      key = tuple(open_ends)
      acc[key] = acc.get(key, 0) + 2 * n * m * k // threads
  return tuple((n, k) for k, n in acc.items())


def format_uops(uops: tuple[UOp, ...]) -> str:
  """A readable listing of a linearized kernel: one line per UOp, indented by loop depth."""
  # a traced compile lists every kernel (~0.04 s of GPT's traced step): each source's text, an inlined source's, and
  # each (op, dtype) head are spelled once, not once a use
  tok: dict[UOp, str] = {}  # a listed UOp's "%i"
  inl: dict[UOp, str] = {}  # an inlined source's text (a source used before it is listed, if any, is inlined too)
  heads: dict[tuple[Ops, DType], str] = {}
  lines, depth = [], 0
  for i, u in enumerate(uops):
    op = u.op
    if op is Ops.END or op is Ops.ENDIF:
      depth -= 1
    srcs = ", ".join([tok.get(s) or inl.get(s) or inl.setdefault(s, _inline(s)) for s in u.src])
    if (head := heads.get((op, u.dtype))) is None:
      dt = "" if u.dtype == dtypes.void else str(u.dtype)
      head = heads[(op, u.dtype)] = f"{op.name:<12s} {dt:<10s} ("
    arg = "" if u.arg is None else f"  {u.arg!r}"
    lines.append(f"{i:4d} {'  ' * depth}{head}{srcs}){arg}")
    if op is Ops.RANGE or op is Ops.IF:
      depth += 1
    tok[u] = f"%{i}"
  return "\n".join(lines)


def _inline(s: UOp) -> str:
  if s.op is Ops.CONST:
    return repr(s.arg)
  if s.op is Ops.DEFINE_GLOBAL:
    return f"data{s.arg}"
  if s.op is Ops.DEFINE_VAR:
    return str(s.arg[0])
  if s.op is Ops.VECTORIZE:
    return "<" + ",".join(_inline(x) for x in s.src) + ">"
  return s.op.name
