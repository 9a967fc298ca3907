"""The scheduler: tensor graph -> ordered kernels, each phase a named graph_rewrite in one "schedule N" context.

Phases (in the style of the reference's rangeify): "View Tensor Graph" snapshot, "replace realized", "earliest
rewrites", "add bufferize", "remove bufferize" (the cost rule), "split kernels" (per kernel: "rangeify" turning
movement ops into index math over RANGEs, then "simplify"), a "View Kernel Graph" snapshot, then "fuse kernels" (an
in-place write reading other kernels' outputs where it stores joins them: one kernel with several STOREs).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Mapping, MutableMapping

from compiler.rewrite import PatternMatcher, UPat, graph_rewrite, track_graph
from compiler.runtime.buffer import Buffer, buffer_of, new_buffer_uop
from compiler.schedule.assign import forget_overwritten, kernel_order
from compiler.schedule.bufferize import (
  bufferize_candidates,
  earliest_rewrites,
  is_buffer_view,
  pm_add_bufferize,
  pm_remove_bufferize,
)
from compiler.schedule.cache import SCHEDULES, CachedSchedule, structure_key
from compiler.schedule.fuse import fuse_kernels, kernel_outputs
from compiler.schedule.rangeify import pm_split_kernels
from compiler.schedule.shape import prod, shape_of
from compiler.trace.recorder import trace_context
from compiler.uop import Ops, UOp, substitute, toposort

__all__ = ["ScheduleItem", "create_schedule", "shape_of"]


@dataclass(frozen=True)
class ScheduleItem:
  """One kernel to run: its AST and its buffers in DEFINE_GLOBAL slot order (outputs first)."""
  ast: UOp
  bufs: tuple[Buffer, ...]

  @property
  def name(self) -> str:
    return self.ast.arg.name

  def __repr__(self) -> str:
    return f"ScheduleItem({self.name}, bufs={list(self.bufs)})"


_schedule_count = itertools.count()

pm_replace_realized = PatternMatcher([(UPat(name="x"), lambda ctx, x: ctx.get(x))], name="replace realized")


def _to_view(u: UOp) -> UOp:
  """The tensor-level view of a scheduled output: AFTER(buffer, kernel) becomes the plain buffer."""
  afters = {x: x.src[0] for x in toposort(u, gate=lambda y: y.op is not Ops.AFTER) if x.op is Ops.AFTER}
  return substitute(u, afters)


def create_schedule(outputs: list[UOp], realized: Mapping[UOp, UOp] | None = None
                    ) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Kernels (in dependency order) that compute the tensor-level `outputs`, and the map output -> buffer view.

  `realized` maps tensor nodes computed earlier to views of their buffers; they are read instead of recomputed. A
  graph of a shape scheduled before reuses that schedule (compiler.schedule.cache), seen in the trace as a
  "schedule cache hit" snapshot in place of the passes."""
  with trace_context(f"schedule {next(_schedule_count)}", kind="schedule"):
    empty = {o: UOp(Ops.RESHAPE, o.dtype, (new_buffer_uop(o.dtype, 0),), shape_of(o))
             for o in outputs if prod(shape_of(o)) == 0}
    sink = UOp.sink(*(empty.get(o, o) for o in outputs))
    track_graph(sink, "View Tensor Graph")
    if realized:
      sink = graph_rewrite(sink, pm_replace_realized, ctx=realized, name="replace realized")
    key, inputs = structure_key(sink) if SCHEDULES.enabled() else (None, [])
    cached = SCHEDULES.get(key) if key is not None else None
    if cached is not None:
      track_graph(sink, "schedule cache hit")
      kernels, views = cached.bind(inputs)
    else:
      kernels, views = _schedule(sink)
      made = CachedSchedule.of(kernels, views, inputs) if key is not None else None
      if made is not None:
        SCHEDULES.put(key, made)
  if realized and isinstance(realized, MutableMapping):  # Tensor.assign overwrote buffers: their old values are gone
    forget_overwritten(realized, {b for k in kernels for b in kernel_outputs(k)})
  schedule = [ScheduleItem(ast, tuple(buffer_of(b) for b in bufs)) for ast, bufs in kernels]
  return schedule, dict(zip(outputs, views))


def _schedule(sink: UOp) -> tuple[list[tuple[UOp, tuple[UOp, ...]]], list[UOp]]:
  """The scheduler's passes: kernels as (ast, BUFFER nodes in slot order) in dependency order, the outputs' views."""
  in_place = {u for u in toposort(sink) if u.op is Ops.BUFFER}  # an assign's target is one; a kernel's output is not
  sink = graph_rewrite(sink, earliest_rewrites, name="earliest rewrites")
  sink = graph_rewrite(sink, pm_add_bufferize, ctx=bufferize_candidates(sink), name="add bufferize")
  sink = graph_rewrite(sink, pm_remove_bufferize, bottom_up=True, name="remove bufferize")
  sink = graph_rewrite(sink, pm_split_kernels, bottom_up=True, name="split kernels")
  track_graph(sink, "View Kernel Graph")
  kernels = []
  afters = [u for u in toposort(sink, gate=lambda y: y.op is not Ops.SINK or y is sink) if u.op is Ops.AFTER]
  for u in kernel_order(afters):  # reads of a buffer before the in-place write that overwrites it
    if u.op is Ops.AFTER:
      kernel = u.src[1]
      ins = tuple(b.src[0] if b.op is Ops.AFTER else b for b in kernel.src[1:])
      kernels.append((kernel.src[0], (u.src[0], *ins)))
  kernels = fuse_kernels(kernels, in_place)
  views = []
  for s in sink.src:
    view = _to_view(s)
    if not is_buffer_view(view):
      raise RuntimeError(f"scheduler bug: an output became {view.op}, not a buffer view")
    views.append(view)
  return kernels, views
