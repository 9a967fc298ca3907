"""First calls (issue 29): the compiler's shortcuts (a fused pass, a kernel built before) make the graph the passes
one by one make, node for node."""
from __future__ import annotations

import contextlib
import enum
import gc

import numpy as np
import pytest
from support.tensor_values import conv_grads_and_softmax

from compiler import Tensor, engine, realize, uop
from compiler.codegen import expander, program
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


def _lowered_counting_foldable_lanes(ast: UOp, monkeypatch) -> tuple[UOp, int]:
  """lower_ast's graph and how many int ADD/MUL nodes it made of two constants, or of x and 0 (ADD) or 1 (MUL): each a
  node the index fold turns into a constant or x as soon as it is made."""
  made = [0]
  call = uop.UOpMetaClass.__call__
  unit = {Ops.ADD: 0, Ops.MUL: 1}

  def counting(cls, op, dtype=dtypes.void, src=(), arg=None):
    if op in unit and dtype in dtypes.ints and uop._UCACHE.get((op, dtype, src, None)) is None:
      consts = [s.arg for s in src if s.op is Ops.CONST]
      made[0] += len(consts) == 2 or unit[op] in consts
    return call(cls, op, dtype, src, arg)
  with monkeypatch.context() as m:
    m.setattr(uop.UOpMetaClass, "__call__", counting)
    out = program.lower_ast(ast)
  return out, made[0]


def test_a_lane_the_index_fold_would_fold_at_once_is_made_folded(monkeypatch):
  # an upcast offset's lanes summed with constants (a lane's offset times a stride, plus another axis's), its lane 0
  # added to a row, were int ADD and MUL nodes that the index fold's fold_alu, add_zero or mul_one then replaced: 6.2k
  # of GPT step's 92k lane nodes. expand_node makes what the fold would answer: the same graph, none of those nodes
  asts = [engine.optimize(a) for a in _kernel_asts(monkeypatch)]
  plain = lambda op, dt, srcs, arg: UOp(op, dt, srcs, arg)  # noqa: E731  (a lane copied, folded after: as before)
  before = after = 0
  for ast in asts:
    got, n = _lowered_counting_foldable_lanes(ast, monkeypatch)  # (first: the other's nodes not alive to be found)
    after += n
    del got
    with monkeypatch.context() as m:
      m.setattr(expander, "_index_lane", plain, raising=False)
      want, n = _lowered_counting_foldable_lanes(ast, monkeypatch)
    before += n
    got = program.lower_ast(ast)
    assert got is want, f"kernel {ast.arg.name}: folding lanes as they are made changed the graph"
  assert before > 20, "these kernels have too few such lanes to count"
  assert after == 0


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


def _i32(*src: UOp, op: Ops = Ops.ADD) -> UOp:
  return UOp(op, dtypes.int32, src)


def test_fold_by_bounds_works_out_no_bounds_of_a_sum_whose_operand_is_known_to_vary():
  # (symbolic.fold_by_bounds: the expander's int lanes are mostly sums over a loop index whose bounds are known; the
  # other operand's graph and the sum's own bounds are then not worked out: GPT step's first call 24.5k -> 3.5k nodes,
  # with the bounds walk's own stops)
  from compiler.symbolic import fold_by_bounds
  c = lambda v: UOp.const(dtypes.int32, v)  # noqa: E731
  r = UOp.range(977, 0, AxisType.LOOP, dtypes.int32)
  assert (r.vmin, r.vmax) == (0, 976)
  x = UOp.variable("fold_by_bounds_x", 0, 1000, dtypes.int32)
  deep = _i32(_i32(_i32(x, c(7), op=Ops.MUL), c(3), op=Ops.IDIV), c(5), op=Ops.MOD)
  sums = [_i32(r, deep), _i32(deep, r), _i32(r, deep, op=Ops.SUB), _i32(deep, r, op=Ops.SUB)]
  for u in sums:
    assert fold_by_bounds(u) is None
  assert all(u._mm is None for u in (*sums, deep, x)), "bounds worked out that fold_by_bounds did not need"
  # what the bounds would have said: each sum spans values, overflowing ones too (they span the type)
  big = UOp.variable("fold_by_bounds_big", 0, 2**31 - 1, dtypes.int32)
  assert big.vmax == 2**31 - 1
  over = [_i32(big, c(1)), _i32(c(-5), big, op=Ops.SUB), _i32(big, big)]
  assert all(fold_by_bounds(u) is None for u in over)
  assert all(u.vmin != u.vmax for u in (*sums, *over))
  # operands that do not vary (or whose bounds are not known yet) still fold by the sum's bounds
  y = UOp.variable("fold_by_bounds_y", 0, 9, dtypes.int32)
  zero = _i32(y, c(10), op=Ops.IDIV)  # (0 for every y)
  assert fold_by_bounds(_i32(zero, c(4))) is c(4)
  assert fold_by_bounds(_i32(_i32(y, c(20), op=Ops.IDIV), _i32(c(3), zero), op=Ops.SUB)) is c(-3)
  flag = UOp(Ops.CMPLT, dtypes.bool, (r, c(1000)))  # (bool: its bounds are always worked out)
  assert fold_by_bounds(flag) is UOp.const(dtypes.bool, True)
  # a lane: its row (a sum over the range, its bounds not worked out either) plus a constant
  row = _i32(_i32(r, c(4), op=Ops.MUL), _i32(deep, c(2)))
  assert fold_by_bounds(_i32(r, c(4), op=Ops.MUL)) is None and fold_by_bounds(row) is None
  lanes = [_i32(row, c(k)) for k in (1, 2, 3)]
  assert all(fold_by_bounds(u) is None for u in lanes)
  assert all(u._mm is None for u in (row, row.src[1], *lanes))
  assert all(u.vmin < u.vmax for u in lanes)


def _linear_form_by_toposort(u: UOp) -> tuple[dict[UOp, int], int]:
  """linear_form as it was written over toposort(u, gate=_is_linear): the order its terms must keep."""
  from compiler.symbolic import _is_linear
  from compiler.uop import toposort
  coeff, terms, k = {u: 1}, {}, 0
  for x in reversed(toposort(u, gate=_is_linear)):
    c = coeff.pop(x, 0)
    if c == 0:
      continue
    if x.op is Ops.CONST:
      k += c * x.arg
    elif not _is_linear(x):
      terms[x] = terms.get(x, 0) + c
    elif x.op is Ops.MUL:
      v, cst = (x.src[0], x.src[1]) if x.src[1].op is Ops.CONST else (x.src[1], x.src[0])
      coeff[v] = coeff.get(v, 0) + c * cst.arg
    else:
      for s, sign in zip(x.src, (-1,) if x.op is Ops.NEG else (1, -1) if x.op is Ops.SUB else (1, 1)):
        coeff[s] = coeff.get(s, 0) + c * sign
  return {t: c for t, c in terms.items() if c != 0}, k


def test_linear_form_walks_its_sums_without_a_gated_toposort(monkeypatch):
  # (symbolic.linear_form: toposort's walk written out, the linear test a node once and no gate's call; the terms in
  # the order the gated toposort met them, which decides the IR of the sums built from them)
  import random

  from compiler import symbolic
  c = lambda v: UOp.const(dtypes.int32, v)  # noqa: E731
  r0, r1 = UOp.range(8, 0, AxisType.LOOP, dtypes.int32), UOp.range(5, 1, AxisType.LOOP, dtypes.int32)
  x = UOp.variable("linear_form_x", 0, 9, dtypes.int32)
  q = _i32(_i32(r0, c(36), op=Ops.MUL), r1, op=Ops.IDIV)
  shared = _i32(_i32(r1, c(4), op=Ops.MUL), x)
  rnd, exprs = random.Random(0), [r0, c(7), UOp.const(dtypes.bool, True), q, _i32(r0, op=Ops.NEG)]
  pool = [r0, r1, x, q, shared, c(3), c(-2)]
  for _ in range(300):
    op = rnd.choice([Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG])
    a, b = rnd.choice(pool), rnd.choice(pool)
    u = _i32(a, op=op) if op is Ops.NEG else _i32(a, c(rnd.randint(-3, 3)) if op is Ops.MUL and rnd.random() < 0.7
                                                  else b, op=op)
    pool.append(u)
    exprs.append(u)
  want = [_linear_form_by_toposort(u) for u in exprs]
  monkeypatch.setattr(symbolic, "toposort", lambda *a, **kw: pytest.fail("linear_form walked by toposort"))
  for u, (terms, k) in zip(exprs, want):
    got_terms, got_k = symbolic.linear_form(u)
    assert list(got_terms.items()) == list(terms.items()) and got_k == k and type(got_k) is type(k)


def test_bounds_of_a_deep_graph_walk_it_once_without_toposort(monkeypatch):
  # (uop._bounds: toposort's gated walk written out, sources first below the nodes with no bounds yet only)
  from compiler import uop
  c = lambda v: UOp.const(dtypes.int32, v)  # noqa: E731
  x = UOp.variable("bounds_chain_x", 0, 3, dtypes.int32)
  chain, want = [x], [(0, 3)]
  for i in range(5000):  # (deeper than the interpreter's stack)
    chain.append(_i32(chain[-1], c(i % 3), op=Ops.MAX if i % 2 else Ops.ADD))
    lo, hi = want[-1]
    want.append((max(lo, i % 3), max(hi, i % 3)) if i % 2 else (lo + i % 3, hi + i % 3))
  known = chain[2500]
  assert (known.vmin, known.vmax) == want[2500]
  monkeypatch.setattr(uop, "toposort", lambda *a, **kw: pytest.fail("bounds walked by toposort"))
  worked: list[UOp] = []
  one = uop._source_bounds
  monkeypatch.setattr(uop, "_source_bounds", lambda u: worked.append(u) or one(u))
  assert (chain[-1].vmin, chain[-1].vmax) == want[-1]
  assert worked == chain[2501:] and [u._mm for u in chain] == want


def _bounds_as_they_were(u: UOp, mm: dict[UOp, tuple]) -> tuple:
  """A node's bounds from its sources' (mm), as uop._bounds_one worked them out before the walk stopped at the nodes
  whose sources do not decide them: every source's first."""
  from compiler import uop
  op, s = u.op, u.src
  if op is Ops.CONST:
    return (u.arg, u.arg)
  if op is Ops.DEFINE_VAR:
    return (u.arg[1], u.arg[2])
  got = [mm[x] for x in s]
  if op is Ops.RANGE:
    return (0, got[0][1] - 1)
  dt = u.dtype.scalar()
  lo, hi = dtypes.min(dt), dtypes.max(dt)
  if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
    a = s[0]
    if a.dtype.scalar() == dtypes.bool or not dtypes.is_int(a.dtype):
      return (False, True)
    (amin, amax), (bmin, bmax) = got
    if op is Ops.CMPLT and (amax < bmin or amin >= bmax):
      return (amax < bmin, amax < bmin)
    if op is not Ops.CMPLT and (amax < bmin or amin > bmax or amin == amax == bmin == bmax):
      v = (op is Ops.CMPNE) == (amax < bmin or amin > bmax)
      return (v, v)
    return (False, True)
  if not (dtypes.is_int(dt) or dt == dtypes.bool):
    return (lo, hi)
  res = uop._int_bounds(op, s, got, dt)
  if res is None or res[0] < lo or res[1] > hi:
    return (lo, hi)
  return (bool(res[0]), bool(res[1])) if dt == dtypes.bool else res


def test_bounds_stop_at_nodes_their_sources_do_not_decide():
  # (uop._own_bounds: a float's, a comparison of floats', an int op's that _int_bounds knows nothing of; the walk goes
  # no further down: GPT step's first call worked out the bounds of 2k nodes below those, for folds that can't fold)
  import random

  from compiler import uop
  i32, f32, b = dtypes.int32, dtypes.float32, dtypes.bool
  c = lambda v: UOp.const(i32, v)  # noqa: E731
  x = UOp.variable("own_bounds_x", 0, 50, i32)
  deep = _i32(_i32(x, c(3), op=Ops.MUL), c(7), op=Ops.MOD)
  f = UOp(Ops.CAST, f32, (deep,))
  stops = [UOp(Ops.CMPLT, b, (f, UOp.const(f32, 2.0))), UOp(Ops.CMPNE, b, (UOp(Ops.CMPLT, b, (deep, c(3))),
                                                                             UOp.const(b, True))),
           _i32(deep, c(5), op=Ops.XOR), UOp(Ops.CAST, i32, (f,)), f]
  assert [(u.vmin, u.vmax) for u in stops] == [(False, True), (False, True), (-2**31, 2**31 - 1),
                                                (-2**31, 2**31 - 1), (dtypes.min(f32), dtypes.max(f32))]
  assert deep._mm is None and x._mm is None, "bounds worked out below a node whose sources do not decide them"
  # every op outside _INT_BOUNDS_OPS is one _int_bounds knows nothing of
  for op in set(Ops) - uop._INT_BOUNDS_OPS:
    assert uop._int_bounds(op, (c(3), c(2), c(1)), [(3, 3), (2, 2), (1, 1)], i32) is None, op
  # the same bounds as every source's first, node for node, over random graphs of ints, floats and bools
  rnd = random.Random(1)
  for trial in range(40):
    ints = [UOp.variable(f"own_bounds_{trial}_{k}", rnd.randint(-9, 0), rnd.randint(0, 9), i32) for k in range(3)]
    ints += [UOp.range(rnd.randint(1, 9), k, AxisType.LOOP, i32) for k in range(2)] + [c(rnd.randint(-4, 4))]
    floats, bools = [UOp.const(f32, 1.5)], [UOp.const(b, False)]
    for _ in range(30):
      a, d, k = rnd.choice(ints), rnd.choice(ints), c(rnd.randint(1, 5))
      kind = rnd.randrange(6)
      if kind == 0:
        ints.append(_i32(a, d, op=rnd.choice([Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.XOR, Ops.OR])))
      elif kind == 1:
        ints.append(_i32(a, k, op=rnd.choice([Ops.IDIV, Ops.MOD, Ops.AND, Ops.SHL, Ops.SHR])))
      elif kind == 2:
        floats.append(UOp(rnd.choice([Ops.ADD, Ops.MUL]), f32, (UOp(Ops.CAST, f32, (a,)), rnd.choice(floats))))
      elif kind == 3:
        bools.append(UOp(rnd.choice([Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ]), b, rnd.choice([(a, d), (rnd.choice(floats),
                     rnd.choice(floats)), (rnd.choice(bools), rnd.choice(bools))])))
      elif kind == 4:
        ints.append(UOp(Ops.WHERE, i32, (rnd.choice(bools), a, d)))
      else:
        ints.append(UOp(Ops.CAST, i32, (rnd.choice(floats + bools),)))
    root = UOp.sink(*ints, *floats, *bools)
    asked = [u._min_max for u in (*ints, *floats, *bools)[::-1]]  # (top-down: each node's walk, the last made first)
    assert all(asked)
    mm: dict[UOp, tuple] = {}
    for u in uop.toposort(root)[:-1]:
      mm[u] = _bounds_as_they_were(u, mm)
      if u._mm is not None:
        assert u._mm == mm[u], (u, u._mm, mm[u])
