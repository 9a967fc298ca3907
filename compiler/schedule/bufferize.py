"""Deciding what to materialize: early cleanups of the tensor graph, BUFFERIZE candidates, and the cost rule.

A BUFFERIZE(x) in the tensor graph means "x gets its own buffer, written by its own kernel". Candidates are added
where inlining could recompute work: outputs, `.contiguous()`, nodes read by more than one consumer or through an
EXPAND (read many times per element), and reductions that would otherwise be nested inside another reduction.
`pm_remove_bufferize` then drops the removable ones whose recomputation is cheap (like the reference's
`remove_bufferize`): no reduction inside, few buffers read and a small expression. Unlike the reference, a big shared
node computing an exp or a log that a reduction and another kernel read is kept (softmax computes exp once). A
reduction that one elementwise consumer reads broadcast along its trailing dims ("row reduction", `row_reduces`) is
removed by its own rule (`_inline_row_reduce`) and computed inside that consumer's kernel, once per row: softmax is
two kernels, exp(x - max) with the max and the division with the sum. A reduction whose every element one other
reduction reads once ("nested reduction", `nested_reduces`) is removed by `_inline_nested_reduce` and computed inside
that reduction's kernel, per element of its source: a conv's input gradient sums the per-window gradient (itself a
sum over the output channels) without writing it (MNIST's conv2: 655 MB at batch 512). Codegen runs the inner sum
only where the pad's condition holds ("gate reduce") and reads the padded rows with masked vector loads (expander's
`vector_load`). Joined, such a kernel is slower than the two (1.05x with AVX-512, 1.03-1.17x with AVX2, up to 2x with
SSE, which has no masked moves: LLVM splits them lane by lane), so by default only a nested reduction whose buffer would
take NESTED_MIN_BYTES or more is joined, and only for a CPU with masked vector moves (`host.masked_vector_moves`): a
step that writes and reads back hundreds of MB is slower still once memory is short, and holds what a training
program needs for its data. MNIST's step at batch 512 (its conv2's 625 MB per-window gradient joined), 1 thread, CPU
ms / peak MB: AVX-512 1283 / 974 -> 1259 / 382, AVX2 1830 / 975 -> 1872 / 382; on SSE it took 1.9x the time, so it
stays off there. `NESTED_REDUCE=1` joins every candidate, `NESTED_REDUCE=0` none (issue 29).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from compiler.dtype import dtypes
from compiler.host import masked_vector_moves
from compiler.rewrite import PatternMatcher, UPat
from compiler.schedule.shape import prod, shape_of
from compiler.uop import FastOps, GroupOp, Ops, UOp, toposort

# a removable candidate that reads more buffers than this is kept (recomputing it costs as many extra reads)
MAX_INLINE_BUFFERS = 3
# ... or that computes more ops than this when every use of a shared node is counted (inlining copies each use that
# reads it at another index, so chains like stencils would grow exponentially)
MAX_INLINE_OPS = 64
# ops that cost several memory passes' worth per element (the inline exp2 and log2 are ~10 vector instructions)
EXPENSIVE_OPS = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW}
# ... so a node computing one, read by a reduction and by another kernel, is computed once into a buffer when it has
# at least this many elements (below it the extra kernel's call costs more than the recomputation saves)
MIN_SHARED_EXPENSIVE = 16384
# a nested reduction is evaluated at every element of its reader's source, padded ones included (a pad's WHERE computes
# both sides): joined only while that is at most this many evaluations per element of its own (the pooling windows'
# gradient, read from a padded, repeated layout, is 1.4 to 2.8: MNIST's 5x5 convs 2.0 and 2.1, its 3x3 ones 2.6, 2.8)
MAX_NESTED_EVALS = 3
# the buffer of a nested reduction that is joined by default (NESTED_REDUCE unset, a CPU with masked vector moves)
NESTED_MIN_BYTES = 128 << 20


@dataclass(frozen=True)
class BufferizeOpts:
  removable: bool = True  # False: the user asked (contiguous/realize), it is an output, or the cost rule says so
  why: str = ""  # what keeps a buffer the user did not ask for (shown in the trace)
  row_reduce: bool = False  # a reduction its one reader computes once per row: inlined there (`row_reduces`)
  nested: bool = False  # a reduction another reduction reads once per element: computed inside it (`nested_reduces`)

  def __repr__(self) -> str:
    extra = ", row reduce" if self.row_reduce else ", nested" if self.nested else ""
    return f"BufferizeOpts(removable={self.removable}{', ' + self.why if self.why else ''}{extra})"


def is_buffer_view(u: UOp) -> bool:
  """u reads a whole buffer in order (a BUFFER, possibly reshaped): it needs no kernel to be realized."""
  while u.op is Ops.RESHAPE:
    u = u.src[0]
  return u.op in (Ops.BUFFER, Ops.AFTER)


def identity_element(op: Ops, dt) -> int | float | bool:
  if op is Ops.ADD:
    return 0
  if op is Ops.MUL:
    return 1
  return dtypes.min(dt)


def const_like(u: UOp, value, shape: tuple[int, ...]) -> UOp:
  """A constant tensor-level node of u's dtype with the given shape."""
  c = UOp.const(u.dtype, value)
  if not shape:
    return c
  return UOp(Ops.EXPAND, u.dtype, (UOp(Ops.RESHAPE, u.dtype, (c,), (1,) * len(shape)),), shape)


# ---- 1. earliest rewrites: movement op cleanups, empty tensors, float POW lowered

def _noop_mop(x: UOp) -> UOp | None:
  src = x.src[0]
  if x.op in (FastOps.RESHAPE, FastOps.EXPAND):
    return src if shape_of(src) == tuple(x.arg) else None
  if x.op is FastOps.PERMUTE:
    return src if tuple(x.arg) == tuple(range(len(x.arg))) else None
  if x.op is FastOps.PAD:
    return src if all(b == 0 and a == 0 for b, a in x.arg) else None
  if x.op is FastOps.SHRINK:
    return src if all(b == 0 and e == s for (b, e), s in zip(x.arg, shape_of(src))) else None
  if x.op is FastOps.FLIP:
    return src if not any(f and s > 1 for f, s in zip(x.arg, shape_of(src))) else None
  return None


def _merge_permute(x: UOp, y: UOp) -> UOp:
  return UOp(Ops.PERMUTE, x.dtype, (y.src[0],), tuple(y.arg[p] for p in x.arg))


def _merge_reshape(x: UOp, y: UOp) -> UOp:
  return UOp(Ops.RESHAPE, x.dtype, (y.src[0],), x.arg)


def _empty_reduce(r: UOp) -> UOp | None:
  src_shape = shape_of(r.src[0])
  if 0 not in src_shape:
    return None
  out = shape_of(r)
  return None if 0 in out else const_like(r, identity_element(r.arg[0], r.dtype), out)


def _empty_pad(p: UOp) -> UOp | None:
  return const_like(p, 0, shape_of(p)) if 0 in shape_of(p.src[0]) else None


def _contiguous_view(c: UOp, x: UOp) -> UOp | None:
  return x if is_buffer_view(x) else None


# Lowerings of tensor ops that stay one node until here for their derivative rule (a float POW: "d/dx POW"), by op.
# The front end owns their formulas and imports the scheduler, never the other way: compiler/tensor.py registers them.
FRONT_END_LOWERINGS: dict[Ops, Callable[[UOp], UOp]] = {}


def _lower_pow(x: UOp) -> UOp | None:
  """A float POW as the front end's exp2/log2 formula with pow's special cases: the kernels never see a float POW, and
  the cost rule below sees its EXP2 and LOG2."""
  if not dtypes.is_float(x.dtype):
    return None
  lower = FRONT_END_LOWERINGS.get(Ops.POW)
  if lower is None:
    raise RuntimeError(f"schedule: a float POW ({x.dtype}, shape {shape_of(x)}) needs the front end's lowering, which "
                       "importing compiler.tensor registers")
  return lower(x)


earliest_rewrites = PatternMatcher([
  (UPat(GroupOp.Movement, name="x"), _noop_mop),
  (UPat(Ops.RESHAPE, src=(UPat(Ops.RESHAPE, name="y"),), name="x"), _merge_reshape),
  (UPat(Ops.PERMUTE, src=(UPat(Ops.PERMUTE, name="y"),), name="x"), _merge_permute),
  (UPat(Ops.DETACH, src=(UPat.var("x"),)), lambda x: x, "DETACH(x) -> x"),
  (UPat(Ops.CONTIGUOUS, src=(UPat(Ops.CONTIGUOUS, name="x"),)), lambda x: x, "CONTIGUOUS(CONTIGUOUS) -> CONTIGUOUS"),
  (UPat(Ops.CONTIGUOUS, src=(UPat.var("x"),), name="c"), _contiguous_view),
  (UPat(Ops.CAST, src=(UPat.var("x"),), name="c"), lambda c, x: x if c.dtype == x.dtype else None,
   "CAST(x) to x's dtype -> x"),
  (UPat(Ops.REDUCE_AXIS, name="r"), _empty_reduce),
  (UPat(Ops.PAD, name="p"), _empty_pad),
  (UPat(Ops.POW, name="x"), _lower_pow, "POW(a, b) -> exp2(log2|a| * b) with pow's special cases"),
], name="earliest rewrites")


# ---- 2. candidates

def _expands(m: UOp) -> bool:
  return m.op is Ops.EXPAND and any(s != o for s, o in zip(shape_of(m.src[0]), m.arg))


def _one_expression(u: UOp, consumers: set[UOp], children: dict[UOp, list[UOp]]) -> bool:
  """u's consumers are elementwise ops that read it at one index (through one chain of movement ops, if any) and
  whose values all flow, each through a chain of single-use elementwise ops, into one of them: relu's
  `(x <= 0).where(0, x)` reads x three times, once per op, but is one expression of x, which its kernel computes once
  (a conv's output stored relu'd, where x alone was stored and relu recomputed inside every reduction that read it,
  25 times an element in a 5x5 conv)."""
  while len(children[u]) == 1 and children[u][0].op in GroupOp.Movement:
    u = children[u][0]
  if set(children[u]) != consumers or any(c.op not in GroupOp.ALU for c in consumers):
    return False
  heads = set()
  for c in consumers:
    n = c
    while len(children[n]) == 1 and children[n][0].op in GroupOp.ALU:
      n = children[n][0]
    heads.add(n)
  return len(heads) == 1


def bufferize_candidates(sink: UOp) -> dict[UOp, BufferizeOpts]:
  """The tensor nodes that get a BUFFERIZE, and whether the cost rule may remove it."""
  nodes = toposort(sink, gate=lambda u: u.op not in (FastOps.BUFFER, FastOps.AFTER))
  children: dict[UOp, list[UOp]] = {u: [] for u in nodes}
  for u in nodes:
    for s in u.src:
      children[s].append(u)
  outputs = {s for s in sink.src if not is_buffer_view(s)}
  # uses[u]: (consumer, read through an expand) for the nearest non-movement consumers of u
  uses: dict[UOp, set[tuple[UOp, bool]]] = {}
  for u in reversed(nodes):
    res: set[tuple[UOp, bool]] = set()
    for c in children[u]:
      if c.op in GroupOp.Movement and c not in outputs:
        e = _expands(c)
        res.update((cc, ex or e) for cc, ex in uses[c])
      else:
        res.add((c, False))
    uses[u] = res
  skip = {Ops.SINK, Ops.BUFFER, Ops.AFTER, Ops.CONST, Ops.DEFINE_VAR} | GroupOp.Movement
  multi: set[UOp] = set()
  for u in nodes:
    if u.op in skip:
      continue
    consumers = {c for c, _ in uses[u]}
    if (len(consumers) > 1 and not _one_expression(u, consumers, children)) or any(ex for _, ex in uses[u]):
      multi.add(u)
  shared_expensive = _shared_expensive(nodes, uses, multi)
  shared_expensive |= _broadcast_operands(nodes, uses, multi, shared_expensive | outputs)
  # a reduction whose value flows (through single-use elementwise ops) into another reduction is materialized, so
  # reductions never nest; the flow stops at nodes that are buffered anyway
  stops = outputs | multi
  feeds_reduce: dict[UOp, bool] = {}
  for u in reversed(nodes):
    feeds_reduce[u] = any(c.op is FastOps.REDUCE_AXIS or (c.op is not FastOps.CONTIGUOUS and c not in stops
                                                          and c.op is not FastOps.SINK and feeds_reduce[c])
                          for c in children[u])
  padded = _padded_reduces(nodes, children)
  ret: dict[UOp, BufferizeOpts] = {}
  for u in nodes:
    if u in outputs or u.op in (FastOps.CONTIGUOUS, FastOps.ASSIGN):  # an in-place write always gets its kernel
      ret[u] = BufferizeOpts(removable=False)
    elif u in shared_expensive:
      ret[u] = BufferizeOpts(removable=False, why="computed once")
    elif u in padded:
      ret[u] = BufferizeOpts(removable=False, why="padded parts of a sum")
    elif u in multi or (u.op is FastOps.REDUCE_AXIS and feeds_reduce[u]):
      ret[u] = BufferizeOpts(removable=True)
  for u in row_reduces(nodes, ret, children, outputs):
    ret[u] = BufferizeOpts(removable=True, row_reduce=True)
  mode = os.environ.get("NESTED_REDUCE", "")
  if mode != "0" and (mode != "" or masked_vector_moves()):
    for u in nested_reduces(nodes, ret, children, multi | outputs):
      if mode != "" or _nbytes(u) >= NESTED_MIN_BYTES:
        ret[u] = BufferizeOpts(removable=True, nested=True)
  return ret


def _padded_reduces(nodes: list[UOp], children: dict[UOp, list[UOp]]) -> set[UOp]:
  """The reductions whose one reader is an ADD they reach through movement ops with a PAD among them (a chunk's
  backward pads attention's dq, dk and dv into one [.., 3 d] gradient and adds them). Inlined, that ADD's kernel
  loops over the padded shape with every sum gated to its part: reductions of different layouts in one kernel, whose
  scalar tile fits none (GPT's step: 26% of its kernel time at 26 GFLOP/s). Each gets a kernel of its own, and so
  does the top of the ADD chain (the sum of the parts)."""
  ret = set()
  for u in nodes:
    if u.op is not FastOps.REDUCE_AXIS:
      continue
    c, pads = u, False
    while len(children[c]) == 1 and children[c][0].op in GroupOp.Movement:
      c = children[c][0]
      pads |= c.op is FastOps.PAD
    if pads and len(children[c]) == 1 and children[c][0].op is FastOps.ADD:
      ret.add(u)
      # ... and their sum one too: inlined into its readers (the projection's two gradient matmuls) every load of
      # their inner loop would be gated by the pads
      c = children[c][0]
      while len(children[c]) == 1 and children[c][0].op is FastOps.ADD:
        c = children[c][0]
      ret.add(c)
  return ret


def _trailing_broadcast(u: UOp, children: dict[UOp, list[UOp]], ret: dict[UOp, BufferizeOpts]) -> UOp | None:
  """The one consumer of reduction u when u reaches it through a chain of RESHAPEs and elementwise ops at u's
  elements (a sum's log) and one EXPAND that broadcasts trailing dims only: at the consumer's element (c_0, .., c_n),
  u's element is the row-major one of (c_0, .., c_p), p >= 1 (softmax's max, read as (rows, 1) -> (rows, cols)).
  None otherwise, or when a node of the chain is read twice or gets a buffer of its own."""
  n = prod(shape_of(u))
  c = u
  while True:
    if len(children[c]) != 1:
      return None
    c = children[c][0]
    if c in ret:
      return None
    if c.op is Ops.EXPAND:
      break
    if c.op is not Ops.RESHAPE and c.op not in GroupOp.ALU | {Ops.CAST}:
      return None
  src, dst = shape_of(c.src[0]), tuple(c.arg)
  p = next((d for d in range(len(src)) if src[d] != dst[d]), len(src))
  if p == 0 or any(s != 1 for s in src[p:]) or prod(src[:p]) != n or len(children[c]) != 1:
    return None
  cons = children[c][0]
  return cons if cons.op in GroupOp.ALU | {Ops.CAST} else None


def _same_kernel(c: UOp, children: dict[UOp, list[UOp]], ret: dict[UOp, BufferizeOpts], outputs: set[UOp]) -> bool:
  """Every node that c's value flows into up to its kernel's store is elementwise at c's shape (so that kernel's
  loops are c's dims in order, and a value that depends on the leading dims only is hoisted out of the inner ones)."""
  shape, seen, todo = shape_of(c), set(), [c]
  while todo:
    u = todo.pop()
    if u in seen:
      continue
    seen.add(u)
    if u in outputs or (u in ret and not ret[u].removable) or u.op is Ops.SINK:
      if u.op is Ops.ASSIGN:
        return False  # an in-place write may store elsewhere than at its element
      if u.op is Ops.REDUCE_AXIS:
        return False  # its kernel loops over its reduce axes too: the row reduction would run in them
      continue  # a kernel of its own at this shape: its store is where its value is
    if u is not c and (u.op not in GroupOp.ALU | {Ops.CAST} or shape_of(u) != shape):
      return False
    todo.extend(children[u])
  return True


def row_reduces(nodes: list[UOp], ret: dict[UOp, BufferizeOpts], children: dict[UOp, list[UOp]],
                outputs: set[UOp]) -> list[UOp]:
  """The removable reductions that one elementwise consumer reads broadcast along its trailing dims, in a kernel
  whose loops follow that consumer's dims: inlined there, the linearizer places the REDUCE loop inside the loops
  of the leading dims and before those of the broadcast ones, so it runs once per row, as its own kernel would,
  and the row it reads is still in L1 when the consumer reads it again. Softmax's max joins exp(x - max) and its
  sum joins the division: two kernels where there were four, and half the passes over memory."""
  reduces: dict[UOp, bool] = {}  # u computes a reduction in its kernel (other candidates are buffers)
  for u in nodes:
    reduces[u] = u.op is FastOps.REDUCE_AXIS or any(reduces.get(s, False) and s not in ret for s in u.src)
  found = []
  for u, opts in ret.items():
    if not opts.removable or u in outputs or u.op in GroupOp.Movement or not reduces[u]:
      continue
    cons = _trailing_broadcast(u, children, ret)
    if cons is not None and _same_kernel(cons, children, ret, outputs):
      found.append(u)
  return found


def _reading_reduce(u: UOp, children: dict[UOp, list[UOp]], ret: dict[UOp, BufferizeOpts]) -> UOp | None:
  """The reduction that reads each element of u at most once per element of its source: u's value reaches it through
  a chain of single reads, movement ops that are not EXPANDs (each maps an element to at most one of its source's)
  and elementwise ops, none of them buffered. None otherwise (a broadcast, a second reader, a buffer between)."""
  c = u
  while True:
    if len(children[c]) != 1:  # (x * x lists x twice)
      return None
    c = children[c][0]
    if c in ret or c.op is Ops.EXPAND:
      return None
    if c.op is Ops.REDUCE_AXIS:
      return c
    if c.op not in GroupOp.Movement | GroupOp.ALU | {Ops.CAST}:
      return None


def _nbytes(u: UOp) -> int:
  """The bytes of u's buffer (0 where its shape is symbolic: the rule needs a size to weigh)."""
  shape = shape_of(u)
  return prod(shape) * u.dtype.itemsize if all(isinstance(n, int) for n in shape) else 0


def nested_reduces(nodes: list[UOp], ret: dict[UOp, BufferizeOpts], children: dict[UOp, list[UOp]],
                   keep: set[UOp]) -> list[UOp]:
  """The reductions buffered only because they feed another reduction that reads each of their elements once
  (`_reading_reduce`), at most MAX_NESTED_EVALS evaluations per element: computed inside the reader's kernel, with
  an accumulator of their own reset for each element of its source. One level deep: a reader is not nested itself,
  nor inlined as a row reduction; `keep` (the outputs and the nodes read twice) keep their buffers."""
  found: list[UOp] = []
  readers: set[UOp] = set()
  for u in nodes:  # sources first: an inner reduction before its reader
    opts = ret.get(u)
    if u.op is not FastOps.REDUCE_AXIS or opts is None or not opts.removable or opts.row_reduce or u in keep:
      continue
    if u in readers:
      continue
    outer = _reading_reduce(u, children, ret)
    if outer is None or (outer in ret and ret[outer].row_reduce):
      continue
    if prod(shape_of(outer.src[0])) > MAX_NESTED_EVALS * prod(shape_of(u)):
      continue
    found.append(u)
    readers.add(outer)
  return found


def _shared_expensive(nodes: list[UOp], uses: dict[UOp, set[tuple[UOp, bool]]], multi: set[UOp]) -> set[UOp]:
  """The shared nodes whose expression computes an EXPENSIVE_OPS op and that a reduction and another consumer read
  (softmax's exp(x - max), read by the sum and by the division): inlined, both kernels would compute it. Writing it
  once costs a store per element; the other kernel reads it instead of what it is computed from."""
  expensive: dict[UOp, bool] = {}
  for u in nodes:  # sources first; a reduction or a buffer is computed in a kernel of its own
    expensive[u] = u.op in EXPENSIVE_OPS or any(expensive.get(s, False) for s in u.src
                                                if s.op not in (FastOps.REDUCE_AXIS, FastOps.BUFFER, FastOps.AFTER))
  ret = set()
  for u in multi:
    consumers = {c for c, _ in uses[u]}
    # (two sibling reductions share one kernel: a buffer would cost them a kernel and a pass to save one exp)
    reduces = any(c.op is FastOps.REDUCE_AXIS for c in consumers)
    if expensive[u] and reduces and any(c.op is not FastOps.REDUCE_AXIS for c in consumers) and \
        prod(shape_of(u)) >= MIN_SHARED_EXPENSIVE:
      ret.add(u)
  return ret


def _broadcast_operands(nodes: list[UOp], uses: dict[UOp, set[tuple[UOp, bool]]], multi: set[UOp],
                        keep: set[UOp]) -> set[UOp]:
  """The shared nodes read through an expand whose expression is more than a load: it computes an EXPENSIVE_OPS op
  or combines two or more buffers (another candidate, a reduction or a BUFFER; `keep`: the nodes that get a buffer
  anyway). Inlined, a matmul recomputes it for every column tile it reads it in (a dot tile's 4 columns: 64 times
  for GPT's gelu(h) = 0.5 h (1 + tanh), 36 -> 13 ms of the MLP's c_proj), and its tile loads two operands where it
  loaded one; written once, it is one plain load."""
  leaf = {Ops.REDUCE_AXIS, Ops.BUFFER, Ops.AFTER}
  expensive: dict[UOp, bool] = {}
  reads: dict[UOp, frozenset[UOp]] = {}
  for u in nodes:  # sources first; another shared node is read as a buffer (if inlined, it reads at least one)
    own = [s for s in u.src if s.op not in leaf and s not in keep]
    expensive[u] = u.op in EXPENSIVE_OPS or any(expensive.get(s, False) for s in own)
    reads[u] = frozenset(s for s in u.src if s.op in leaf or s in keep or s in multi).union(
      *(reads.get(s, frozenset()) for s in own if s not in multi))
  return {u for u in multi if u not in keep and any(ex for _, ex in uses[u]) and
          (expensive[u] or len(reads[u]) >= 2) and prod(shape_of(u)) >= MIN_SHARED_EXPENSIVE}


def _add_bufferize(ctx: dict[UOp, BufferizeOpts], x: UOp) -> UOp | None:
  if x.op is FastOps.BUFFERIZE or not any(s in ctx for s in x.src):
    return None
  return x.replace(src=tuple(UOp(FastOps.BUFFERIZE, s.dtype, (s,), ctx[s]) if s in ctx else s for s in x.src))


pm_add_bufferize = PatternMatcher([(UPat(name="x"), _add_bufferize)], name="add bufferize")


# ---- 3. the cost rule

def _remove_bufferize(b: UOp, src: UOp) -> UOp | None:
  if not b.arg.removable:
    return None
  buffers: set[UOp] = set()
  has_reduce = False

  def gate(u: UOp) -> bool:
    nonlocal has_reduce
    if u.op in (FastOps.BUFFER, FastOps.AFTER, FastOps.BUFFERIZE):
      buffers.add(u)
      return False
    if u.op is FastOps.REDUCE_AXIS:
      has_reduce = True
    return True
  order = toposort(src, gate=gate)
  if has_reduce or len(buffers) > MAX_INLINE_BUFFERS:
    return None
  ops: dict[UOp, int] = {}
  for u in order:  # ops of the expression tree (shared nodes counted once per use)
    ops[u] = (u.op in _COUNTED) + sum(ops.get(s, 0) for s in u.src)
  return None if ops[src] > MAX_INLINE_OPS else src


_COUNTED = GroupOp.ALU | {Ops.CAST, Ops.BITCAST}


def _inline_row_reduce(b: UOp, src: UOp) -> UOp | None:
  """A row reduction (`row_reduces`) joins the kernel of its one reader."""
  return src if b.arg.row_reduce else None


def _inline_nested_reduce(b: UOp, src: UOp) -> UOp | None:
  """A nested reduction (`nested_reduces`) joins the kernel of the reduction that reads it."""
  return src if b.arg.nested else None


pm_remove_bufferize = PatternMatcher([
  (UPat(Ops.BUFFERIZE, src=(UPat.var("src"),), name="b"), _inline_row_reduce),
  (UPat(Ops.BUFFERIZE, src=(UPat.var("src"),), name="b"), _inline_nested_reduce),
  (UPat(Ops.BUFFERIZE, src=(UPat.var("src"),), name="b"), _remove_bufferize),
], name="remove bufferize")

