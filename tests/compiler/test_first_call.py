"""First calls (issue 29): the compiler's shortcuts (a fused pass, a kernel built before) make the graph the passes
one by one make, node for node."""
from __future__ import annotations

import contextlib
import enum
import gc

import numpy as np
import pytest
from support.tensor_values import conv_grads_and_softmax

from compiler import Tensor, engine, realize
from compiler.codegen import program
from compiler.codegen.expander import pm_expand
from compiler.codegen.simplify import index_linear_form, pm_index_fold
from compiler.dtype import dtypes
from compiler.runtime.interpreter import InterpretedKernel
from compiler.symbolic import linear_form
from compiler.uop import AxisType, Ops, UOp


def _kernel_asts(monkeypatch) -> list[UOp]:
  """The kernel ASTs of a padded conv's forward and backward (lane indices with // and %, gated loads) and a
  matmul's softmax, realized on a backend that keeps them and runs the interpreter."""
  asts: list[UOp] = []

  def spy(ast: UOp) -> InterpretedKernel:
    asts.append(ast)
    return InterpretedKernel(ast)
  realize.register_backend("first_call_spy", spy)
  monkeypatch.setenv("BACKEND", "first_call_spy")
  Tensor.realize(*conv_grads_and_softmax(seed=0, out_channels=8))
  return asts


def _lowered(ast: UOp, two_passes: bool = False) -> tuple[UOp, list[str]]:
  """lower_ast's graph and the passes it ran; with two_passes, "expand + index fold" run as the two passes it fuses,
  one after the other."""
  names: list[str] = []
  inner = program.graph_rewrite

  def graph_rewrite(sink, pm, *args, **kw):
    if two_passes and pm is program.pm_expand_fold:
      return graph_rewrite(graph_rewrite(sink, pm_expand, *args, **kw), pm_index_fold)
    names.append(kw.get("name") or pm.name)
    return inner(sink, pm, *args, **kw)
  program.graph_rewrite = graph_rewrite
  try:
    return program.lower_ast(ast), names
  finally:
    program.graph_rewrite = inner


def test_expansion_folded_as_it_goes_is_the_two_passes_graph(monkeypatch):
  asts = [engine.optimize(a) for a in _kernel_asts(monkeypatch)]
  expanded = [a for a in asts if any(u.op is Ops.RANGE and u.arg[1] in (AxisType.UPCAST, AxisType.UNROLL)
                                     for u in a.toposort())]
  assert len(expanded) >= 3, "the heuristics upcast too few of these kernels to compare anything"
  for ast in asts:
    fast, fast_passes = _lowered(ast)
    slow, slow_passes = _lowered(ast, two_passes=True)
    assert "expand + index fold" in fast_passes and "expand + index fold" not in slow_passes
    assert {"expand", "index fold"} <= set(slow_passes)
    assert fast is slow, f"kernel {ast.arg.name}: the fused pass made another graph"


def test_a_lane_index_has_the_linear_form_of_its_whole_sum():
  def add(a: UOp, b: UOp) -> UOp:
    return UOp(Ops.ADD, dtypes.int32, (a, b))
  i32 = lambda v: UOp.const(dtypes.int32, v)  # noqa: E731
  r0, r1 = UOp.range(8, 0, AxisType.LOOP, dtypes.int32), UOp.range(5, 1, AxisType.LOOP, dtypes.int32)
  # a row with a non-linear term and the lane's own constant inside it, a sum of constants, a lone range
  row = add(add(UOp(Ops.IDIV, dtypes.int32, (add(r0 * i32(36), r1 * i32(4)), i32(3))), r1 * i32(2)), i32(4))
  for lane in (row, add(row, i32(3)), add(i32(3), row), add(row, i32(4)), add(i32(4), i32(4)), add(r0, i32(0))):
    want = linear_form(lane)
    got = index_linear_form(lane)
    assert (list(got[0].items()), got[1]) == (list(want[0].items()), want[1])


def _layers(seed: int) -> tuple[Tensor, list[Tensor]]:
  """Three layers of one shape over weights of their own (the second's and third's kernels: one structure over other
  buffers), with their gradients."""
  rng = np.random.default_rng(seed)
  x = Tensor(rng.standard_normal((6, 16)).astype(np.float32))
  ws = [Tensor(rng.standard_normal((16, 16)).astype(np.float32), requires_grad=True) for _ in range(3)]
  for w in ws:
    x = (x @ w).relu()
  loss = x.sum()
  loss.backward()
  return loss, [w.grad for w in ws]


def test_a_kernel_built_before_is_bound_to_the_buffers_of_this_one(monkeypatch):
  from compiler.schedule.cache import KERNELS, SCHEDULES
  monkeypatch.setenv("BACKEND", "interp")
  outs, asts = {}, {}
  for memo in ("1", "0"):  # (SCHEDULE_CACHE=0: neither schedules nor kernels remembered, every kernel built)
    monkeypatch.setenv("SCHEDULE_CACHE", memo)
    SCHEDULES.clear()
    KERNELS.clear()
    loss, grads = _layers(0)
    asts[memo] = [si.ast for si in loss.schedule(*grads)]
    if memo == "1":
      assert KERNELS.hits >= 1, "the third layer's kernels were built again"
    outs[memo] = [t.numpy().copy() for t in (loss, *grads)]
  assert all(a is b for a, b in zip(asts["1"], asts["0"], strict=True))
  for got, want in zip(outs["1"], outs["0"]):
    np.testing.assert_array_equal(got, want)


def test_codegen_runs_with_the_collector_off_and_restores_it(monkeypatch):
  # (program.collector_paused: a young collection every 700 new nodes, a full one every ~100 of those)
  asts = _kernel_asts(monkeypatch)[:2]
  seen: list[bool] = []
  render = program.render_llvm

  def spy(*args, **kw):
    seen.append(gc.isenabled())
    return render(*args, **kw)
  monkeypatch.setattr(program, "render_llvm", spy)
  program._PROGRAMS.clear()
  program.get_program(asts[0])
  assert seen == [False] and gc.isenabled()
  gc.disable()
  try:
    program.get_program(asts[1])
    assert seen == [False, False] and not gc.isenabled(), "a collector the caller turned off stays off"
  finally:
    gc.enable()


def test_a_realize_schedules_and_runs_with_the_collector_off_and_restores_it(monkeypatch):
  # (Tensor._realize_all: the scheduler's and the compile-ahead's nodes, weak references and tuples ran young and full
  # collections over the whole process, ~0.05 s of GPT step's first call)
  from compiler import tensor
  seen: list[tuple[str, bool]] = []
  schedule, run = tensor.create_schedule, tensor.run_schedule

  def spy_schedule(*args, **kw):
    seen.append(("schedule", gc.isenabled()))
    return schedule(*args, **kw)

  def spy_run(*args, **kw):
    seen.append(("run", gc.isenabled()))
    return run(*args, **kw)
  monkeypatch.setattr(tensor, "create_schedule", spy_schedule)
  monkeypatch.setattr(tensor, "run_schedule", spy_run)
  x = Tensor(np.arange(6, dtype=np.float32)) * 2
  np.testing.assert_array_equal(x.numpy(), np.arange(6, dtype=np.float32) * 2)
  assert seen == [("schedule", False), ("run", False)] and gc.isenabled()
  gc.disable()
  try:
    seen.clear()
    (Tensor(np.ones(3, dtype=np.float32)) + 1).realize()
    assert seen == [("schedule", False), ("run", False)] and not gc.isenabled(), "a collector turned off stays off"
  finally:
    gc.enable()


def test_hoisting_past_placed_nodes_keeps_the_linear_order(monkeypatch):
  # the linearizer's hoist walks no placed node's sources: the same program, node for node, as the whole-graph walk
  from compiler.codegen import linearizer
  from compiler.codegen.errors import kernel_name
  lowered = [(program.lower_ast(a), kernel_name(a)) for a in map(engine.optimize, _kernel_asts(monkeypatch))]
  walked = {"stopped": 0, "whole": 0}
  real = linearizer.toposort

  def stopped(root: UOp, gate=None, stop=None) -> list[UOp]:
    out = real(root, gate, stop)
    walked["stopped"] += len(out) if stop is not None else 0
    return out

  def whole(root: UOp, gate=None, stop=None) -> list[UOp]:
    out = real(root, gate)  # (hoist leaves out what is placed itself)
    walked["whole"] += len(out) if stop is not None else 0
    return out
  monkeypatch.setattr(linearizer, "toposort", stopped)
  fast = [linearizer.linearize(s, k).uops for s, k in lowered]
  monkeypatch.setattr(linearizer, "toposort", whole)
  assert [linearizer.linearize(s, k).uops for s, k in lowered] == fast
  assert 0 < walked["stopped"] < walked["whole"], walked


def test_a_stopped_toposort_is_the_gated_one_less_the_stopped_nodes(monkeypatch):
  # hoist's walk (at every loop level) stops at the placed nodes by a lookup, not a gate's call a node: the gated
  # toposort less the placed nodes, in the same order, whichever are placed; and it leaves the SINK's cached order be
  import random

  from compiler.uop import toposort
  rnd = random.Random(0)
  for ast in map(engine.optimize, _kernel_asts(monkeypatch)):
    sink = program.lower_ast(ast)
    nodes = toposort(sink)
    for share in (0.0, 0.1, 0.5):
      placed = {u: 0 for u in nodes[:-1] if rnd.random() < share}
      want = [u for u in toposort(sink, gate=lambda x, p=placed: x not in p) if u not in placed]
      assert toposort(sink, stop=placed) == want
      assert toposort(sink) == nodes


def test_an_access_s_linear_terms_are_worked_out_once():
  # the heuristics ask every access's strides again for each axis and choice they weigh: the terms are remembered on
  # the index node (the same objects each time), and are those of its linear form
  from compiler.opt.kernel import linear_terms
  r0, r1 = UOp.range(8, 0), UOp.range(4, 1)
  idx = (r0 * 4 + r1.cast(dtypes.int64).cast(dtypes.int32) * 2 + 3) % 64 + r1
  got = linear_terms(idx)
  assert linear_terms(idx) is got
  assert got[0] == {r1: 1} and got[1] == {r0, r1}


def test_bounds_read_the_sources_bounds_from_their_slots(monkeypatch):
  # a node's bounds from its sources' known ones without vmin/vmax's property calls (fold_by_bounds asks them of
  # every int lane), the same numbers
  r0, r1 = UOp.range(8, 0), UOp.range(5, 1)
  exprs = [r0 + r1, r0 - r1, r0 * -3, -r0, r0.maximum(r1), r0 // 3, (r0 - 4) % 3, r0 % 3, r0 < r1, r0.ne(9),
           (r0 < 4).where(r0, r1 * 2), r0.cast(dtypes.int64)]
  for x in (r0, r1):
    assert (x.vmin, x.vmax) == (0, x.src[0].arg - 1)
  monkeypatch.setattr(UOp, "vmin", property(lambda self: pytest.fail("bounds read through vmin")))
  got = [e._min_max for e in exprs]
  assert got == [(0, 11), (-4, 7), (-21, 0), (-7, 0), (0, 7), (0, 2), (-2, 2), (0, 2), (False, True), (True, True),
                 (0, 8), (0, 7)]


@contextlib.contextmanager
def _counted_ops_lookups():
  """Counts `Ops.X` member lookups (each ~95 ns through EnumType's __getattr__ hook on Python 3.11) while open."""
  members, n = set(Ops.__members__), [0]

  class Counting(enum.EnumType):
    def __getattribute__(cls, name):
      if name in members:
        n[0] += 1
      return type.__getattribute__(cls, name)
  Ops.__class__ = Counting
  try:
    yield n
  finally:
    Ops.__class__ = enum.EnumType


def test_codegen_per_node_code_looks_no_ops_up(monkeypatch):
  # the per-node helpers compare with uop.FastOps' members: these kernels' lowering, linearizing and rendering looked
  # Ops.X up 47 times a linearized node before, 1.4 now (the rules' patterns are built once, at import)
  asts = _kernel_asts(monkeypatch)
  with _counted_ops_lookups() as n:
    lks = [program.linear_kernel(ast, wide_index=True) for ast in asts]
    srcs = [program.render_llvm(lk.kname, lk.fname, lk.lin, lk.nbufs, list(lk.vars), debug=False) for lk in lks]
  assert type(Ops) is enum.EnumType and all(srcs)
  assert n[0] < 3 * sum(len(lk.lin.uops) for lk in lks)


def test_commutative_order_hashes_operands_only_where_their_kinds_and_ops_tie():
  # (symbolic._ordered_before: order_key's comparison, each operand's structural hash, a walk of its graph, asked only
  # where the first fields tie)
  import itertools

  from compiler import symbolic
  f32 = dtypes.float32
  x, y = UOp.variable("x", 0, 9), UOp.variable("y", 0, 9)
  r0, r1 = UOp.range(8, 0), UOp.range(4, 1)
  fx, fy = x.cast(f32), y.cast(f32)
  nodes = [x, y, r0, r1, x + r0, r1 * y, fx * fy, fx + fy, fy * fx, UOp.const(f32, 2.0), UOp.const(dtypes.int32, 3)]
  for b, a in itertools.product(nodes, nodes):
    assert symbolic._ordered_before(b, a) == (symbolic.order_key(b) < symbolic.order_key(a))
  p, q = UOp.variable("p", 0, 5).cast(f32), UOp.variable("q", 0, 5).cast(f32)
  prod_, sum_ = p * q, (p + q) * UOp.const(f32, 3.0)
  u = UOp(Ops.ADD, f32, (sum_, prod_ + UOp.const(f32, 1.0)))  # a MUL and an ADD: their ops decide
  symbolic.commutative_order(u)
  assert "_shash" not in sum_.__dict__ and "_shash" not in u.src[1].__dict__
