"""Repeat calls of a program reuse its schedule: found by the structure of its tensor graph, buffers as placeholders.

A schedule depends only on the graph's structure (ops, dtypes, args, shapes) and on which leaves are the same buffer,
never on a buffer's contents, so the graph with every BUFFER replaced by a placeholder numbered in order of first
appearance, names the schedule of every graph of that shape. A hit
binds the cached kernels (the very same ASTs, so their compiled runners are found too) to this call's buffers and to
fresh buffers for what the schedule creates (intermediates and outputs); it costs a walk of the graph instead of the
scheduler's passes. `SCHEDULE_CACHE=0` turns it off.

A fresh process finds the schedules an earlier one made on disk (`disk_get`/`disk_put`, in the compile cache's
folder: compiler.runtime.diskcache, its checks and its restricted unpickler): keyed by a hash of the structure key with
the knobs the passes read (SCHEDULE_ENV) and the compiler's version, and used only where its kernels' names can be this
process's (compiler.schedule.naming.claim_kernel_names). Not while tracing (the trace shows the passes), nor with
switches on, nor under CACHELEVEL=0 / DISABLE_COMPILER_CACHE=1.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Callable

from compiler import rewrite
from compiler.host import masked_vector_moves
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.runtime import diskcache
from compiler.runtime.buffer import new_buffer_uop
from compiler.schedule.naming import claim_kernel_names
from compiler.trace import recorder
from compiler.uop import FastOps, KernelInfo, Ops, UOp, cons_key, toposort

SCHEDULE_CACHE_SIZE = 256  # schedules kept (least recently used first out); each holds only its graphs, no buffers
# the environment the scheduler's passes read (a different value: another entry; and the target's masked vector moves,
# which bufferize's default for nested reductions reads)
SCHEDULE_ENV = ("NESTED_REDUCE", "NO_SPLIT_REDUCE")


def _placeholder(kind: str, k: int, like: UOp) -> UOp:
  """A stand-in for a buffer in a cached graph: a BUFFER node with no Buffer behind it (its arg is no buffer id)."""
  return UOp(Ops.BUFFER, like.dtype, (), (kind, k, *like.arg[1:]))  # (size, and a device other than the CPU)


# The outputs' views of a schedule over its buffers' placeholders ("cache placeholders", when it is stored) and over a
# call's buffers ("cache bind", on a hit): ctx maps each BUFFER to its stand-in.
pm_cache_placeholders = PatternMatcher([
  (UPat(Ops.BUFFER, name="b"), lambda ctx, b: ctx.get(b), "buffer -> placeholder"),
], name="cache placeholders")
pm_cache_bind = PatternMatcher([
  (UPat(Ops.BUFFER, name="b"), lambda ctx, b: ctx.get(b), "placeholder -> buffer"),
], name="cache bind")


def _views_with(pm: PatternMatcher, views: list[UOp] | tuple[UOp, ...], buffers: dict[UOp, UOp]) -> list[UOp]:
  return list(graph_rewrite(UOp.sink(*views), pm, ctx=buffers).src) if views else []


def _graph_rows(roots: list[UOp], leaf: Callable[[UOp], tuple | None]) -> tuple[tuple, list[UOp]]:
  """The rows of the graph under roots, sources first (toposort's order, roots in order), and its leaves: a node
  leaf() gives a row prefix for is a leaf (not walked below), its row that prefix and its number among the leaves;
  another node's row is its op, dtype, sources' row numbers and arg as cons_key tells args apart.

  A tuple of node rows, not a UOp graph: a key made of the graph's own nodes would keep them alive, and with them
  the tensor front end's record of which nodes were realized (a realized constant would stay a buffer read)."""
  index: dict[UOp, int] = {}  # node -> its row
  rows: list[tuple] = []
  leaves: list[UOp] = []
  stack: list[tuple[UOp, bool]] = [(r, False) for r in reversed(roots)]
  while stack:  # (a cache hit's cost is this loop: toposort's walk writing each node's row as it is numbered)
    u, expanded = stack.pop()
    if u in index:
      continue
    head = leaf(u)
    if head is not None:
      index[u] = len(rows)
      rows.append((*head, len(leaves)))
      leaves.append(u)
    elif not expanded:
      stack.append((u, True))
      stack.extend((s, False) for s in reversed(u.src) if s not in index)
    else:
      index[u] = len(rows)
      arg = u.arg
      srcs = tuple([index[s] for s in u.src])
      # cons_key (equal args of different kinds, 0.0 and -0.0, 1 and True, stay different), called for any arg but
      # the kinds it leaves as they are (as the recorder's TraceIds does)
      rows.append((u.op, u.dtype, srcs, arg) if arg is None or type(arg) is int else cons_key(u.op, u.dtype, srcs, arg))
  return tuple(rows), leaves


def _buffer_leaf(u: UOp) -> tuple | None:
  # (size, and a device other than the CPU)
  return (FastOps.BUFFER, u.dtype, u.arg[1:]) if u.op is FastOps.BUFFER else None


def structure_key(sink: UOp) -> tuple[tuple, list[UOp]]:
  """The graph's structure with its buffers as placeholders (the cache key), and the buffers in placeholder order."""
  return _graph_rows([sink], _buffer_leaf)


def _kernel_leaf(u: UOp) -> tuple | None:
  """A buffer the kernel reads or writes (a BUFFER, or an AFTER: never what wrote it, whose kernel is not walked)."""
  if u.op is not FastOps.BUFFER and u.op is not FastOps.AFTER:
    return None
  b = u.src[0] if u.op is FastOps.AFTER else u
  return (u.op, u.dtype, b.op, b.arg[1:] if isinstance(b.arg, tuple) else b.arg)


def kernel_key(x: UOp, out_buf: UOp) -> tuple[tuple, list[UOp]]:
  """The structure of the kernel computing x into out_buf, as structure_key's rows with its buffers (BUFFER and AFTER
  nodes, read or written: out_buf first, then in order of first appearance) as placeholders of their dtype and size,
  and those buffers: all that the kernel's AST depends on (compiler.schedule.rangeify.build_kernel)."""
  return _graph_rows([out_buf, x], _kernel_leaf)


@dataclass(frozen=True)
class CachedSchedule:
  """A schedule over placeholders: kernels as (ast, buffers), the outputs' views, and the buffers it creates."""
  kernels: tuple[tuple[UOp, tuple[UOp, ...]], ...]
  views: tuple[UOp, ...]
  created: tuple[UOp, ...]
  inputs: tuple[UOp, ...]  # the placeholders of structure_key's buffers, in its order

  @staticmethod
  def of(kernels: list[tuple[UOp, tuple[UOp, ...]]], views: list[UOp], inputs: list[UOp]) -> CachedSchedule | None:
    """Express a schedule made for `inputs` (the buffers of structure_key) over placeholders; None if an output
    names a buffer that is neither an input nor made by a kernel (such a schedule is not cached)."""
    to_ph = {b: _placeholder("in", i, b) for i, b in enumerate(inputs)}
    created: list[UOp] = []
    for _, bufs in kernels:
      for b in bufs:
        if b not in to_ph:
          to_ph[b] = _placeholder("new", len(created), b)
          created.append(to_ph[b])
    views = _views_with(pm_cache_placeholders, views, to_ph)
    if any(b.op is Ops.BUFFER and b.arg[0] not in ("in", "new") for v in views for b in toposort(v)):
      return None
    return CachedSchedule(tuple((ast, tuple(to_ph[b] for b in bufs)) for ast, bufs in kernels), tuple(views),
                          tuple(created), tuple(to_ph[b] for b in inputs))

  def bind(self, inputs: list[UOp]) -> tuple[list[tuple[UOp, tuple[UOp, ...]]], list[UOp]]:
    """The kernels and output views for this call's buffers, with fresh buffers for the ones the schedule creates."""
    if len(inputs) != len(self.inputs):
      raise ValueError(f"schedule cache: {len(inputs)} buffers bound to a schedule of {len(self.inputs)}")
    real = dict(zip(self.inputs, inputs))
    for ph in self.created:
      real[ph] = new_buffer_uop(ph.dtype, ph.arg[2], device=ph.arg[3] if len(ph.arg) > 3 else "CPU")
    kernels = [(ast, tuple([real[b] for b in bufs])) for ast, bufs in self.kernels]
    return kernels, _views_with(pm_cache_bind, self.views, real)


class ScheduleCache:
  """An LRU of CachedSchedules by structure_key."""

  def __init__(self, size: int = SCHEDULE_CACHE_SIZE) -> None:
    self.size = size
    # key -> [value, the tick of its last use]: a hit notes its use in place, where moving the entry to an
    # OrderedDict's end hashed the key (a tuple of every node's row, hashed anew each time) a second time
    self.entries: dict[tuple, list] = {}
    self._ticks = itertools.count()
    self.hits = self.misses = 0
    self.disk_hits = 0  # schedules a miss found on disk (disk_get), made by an earlier process

  @staticmethod
  def enabled() -> bool:
    return os.environ.get("SCHEDULE_CACHE", "1") != "0"

  def get(self, key: tuple) -> CachedSchedule | None:
    hit = self.entries.get(key)
    if hit is None:
      self.misses += 1
      return None
    hit[1] = next(self._ticks)
    self.hits += 1
    return hit[0]

  def put(self, key: tuple, value: CachedSchedule) -> None:
    self.entries[key] = [value, next(self._ticks)]
    while len(self.entries) > self.size:  # (the least recently used out: a walk of them, once a miss)
      del self.entries[min(self.entries, key=lambda k: self.entries[k][1])]

  def clear(self) -> None:
    self.entries.clear()
    self.hits = self.misses = self.disk_hits = 0


SCHEDULES = ScheduleCache()
# kernels built by kernel_key (compiler.schedule.rangeify.build_kernel), within a schedule and across: a model's
# layers build the same kernels over other buffers (GPT's training step: 403 builds, 87 kernels); an entry is (AST, its
# buffers' leaf numbers, the recording whose trace shows its passes: TraceIds.base, None when built unrecorded)
KERNELS = ScheduleCache(1024)


# ---- on disk

def disk_key(key: tuple) -> str | None:
  """The disk cache's name of the schedule of a graph with this structure_key; None where the disk is not used."""
  if recorder.RECORDER is not None or rewrite.SWITCHES is not None or not diskcache.enabled():
    return None
  try:
    text = diskcache.stable_bytes((key, tuple(os.environ.get(v) for v in SCHEDULE_ENV), masked_vector_moves()))
  except TypeError:
    return None
  return diskcache.full_key(b"schedule\n" + text)


def disk_put(dkey: str, cs: CachedSchedule) -> None:
  diskcache.put(dkey, (cs.kernels, cs.views, cs.created, cs.inputs))


def disk_get(dkey: str, nbufs: int) -> CachedSchedule | None:
  """The schedule stored under dkey for a graph of `nbufs` buffers, its kernels' names claimed in this process; None
  where there is none, or it is not a sound schedule (ignored: the caller schedules and stores it again)."""
  got = diskcache.get(dkey)
  if got is None:
    return None
  try:
    cs = CachedSchedule(*got)
    why = _unsound(cs, nbufs)
  except (TypeError, ValueError, AttributeError, IndexError) as e:
    why = f"{type(e).__name__}: {e}"
  if why is None and not claim_kernel_names([ast for ast, _ in cs.kernels]):
    why = "its kernels' names are other kernels' in this process"
  if why is not None:
    diskcache.ignore(dkey, f"schedule: {why}")
    return None
  return cs


def _placeholders(kind: str, phs: tuple) -> bool:
  return isinstance(phs, tuple) and all(isinstance(p, UOp) and p.op is Ops.BUFFER and isinstance(p.arg, tuple) and
                                        len(p.arg) == 3 and p.arg[:2] == (kind, i) and type(p.arg[2]) is int
                                        for i, p in enumerate(phs))


def _unsound(cs: CachedSchedule, nbufs: int) -> str | None:
  """Why a schedule read from disk cannot be bound (None: it can): the shapes of what bind and run need."""
  if not (_placeholders("in", cs.inputs) and _placeholders("new", cs.created)) or len(cs.inputs) != nbufs:
    return "its buffers are not placeholders of this graph's"
  known = set(cs.inputs) | set(cs.created)
  for ast, bufs in cs.kernels:
    if not (isinstance(ast, UOp) and ast.op is Ops.SINK and isinstance(ast.arg, KernelInfo)):
      return "a kernel is not a kernel AST"
    if not (isinstance(bufs, tuple) and all(b in known for b in bufs)):
      return "a kernel names an unknown buffer"
  if not (isinstance(cs.views, tuple) and all(isinstance(v, UOp) for v in cs.views)):
    return "an output is not a view"
  if any(b.op is Ops.BUFFER and b not in known for v in cs.views for b in toposort(v)):
    return "an output views an unknown buffer"
  return None
