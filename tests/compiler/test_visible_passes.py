"""The passes that form a kernel and expand its lanes are rewrites whose matches are steps of the trace (issue 13):
`expand` works node by node, the kernel's store opens in `rangeify` and `number globals` numbers each global."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from support.opt_helpers import elementwise_ast, masked_ast, matmul_ast, sum_ast, two_reduce_ast, two_store_ast

from compiler.codegen import CodegenError
from compiler.codegen.expander import MAX_LANES, expand_ctx, group_stores, pm_expand
from compiler.codegen.ranges import EXPAND_AXES, axis_type, const_size, free_ranges
from compiler.codegen.simplify import symbolic_then_index_fold
from compiler.dtype import dtypes
from compiler.opt import Kernel, KernelOptError, Opt, OptOps, hand_coded_optimizations
from compiler.rewrite import graph_rewrite
from compiler.schedule.cache import SCHEDULES
from compiler.symbolic import fold_alu
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.uop import AxisType, KernelInfo, Ops, UOp, toposort
from vztrace.reader import TraceReader


def _trace(path, fn):
  recorder.enable(path, announce=False)
  try:
    out = fn()
  finally:
    recorder.disable()
  return out, list(TraceReader(path))


def _rule_names(recs: list[dict], pass_name: str) -> list[list[str]]:
  """Per rewrite called pass_name, the rule of each of its matches in order."""
  pats = {r["id"]: r["name"] for r in recs if r["t"] == "pattern"}
  rws = [r["id"] for r in recs if r["t"] == "rw_begin" and r["name"] == pass_name]
  return [[pats[m["pat"]] for m in recs if m["t"] == "match" and m["rw"] == rw] for rw in rws]


def _opted(ast: UOp, opts: list[Opt]) -> UOp:
  k = Kernel(ast)
  for o in opts:
    k.apply_opt(o)
  return k.get_optimized_ast()


def _expand(ast: UOp) -> UOp:
  sink = symbolic_then_index_fold(ast)
  return graph_rewrite(sink, pm_expand, ctx=expand_ctx(sink), name="expand", bottom_up=True)


# ---- expand

UPCAST_UNROLL = [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 4)]


def test_expand_is_a_step_per_node_in_the_trace(tmp_path):
  ast = _opted(matmul_ast(8, 8, 16), UPCAST_UNROLL)
  _, recs = _trace(tmp_path / "e.vztrace", lambda: _expand(ast))
  (rules,) = _rule_names(recs, "expand")
  counts = {n: rules.count(n) for n in set(rules)}
  # three expanded axes, one contracted reduce, one SINK taking 4 * 2 lane stores; the rest are nodes of the lanes
  # (the loads' with their INDEX lanes: expand_load)
  assert counts.pop("range_lanes") == 3 and counts.pop("contract_reduce") == 1 and counts.pop("sink_stores") == 1
  assert set(counts) == {"expand_node", "expand_load"} and counts["expand_node"] > 8
  assert rules[-1] == "sink_stores"  # the SINK last: bottom-up, the values of its stores are lanes already


def _chain(op: Ops, vals: list[UOp]) -> UOp:
  out = vals[0]
  for v in vals[1:]:
    out = UOp(op, out.dtype, (out, v))
  return out


def _folded_lane(x: UOp) -> UOp:
  """x, or where it is int index math of two constants, plus 0 or times 1, what the index fold's first rule answers
  (expansion makes those lanes folded: `expander._index_lane`)."""
  if x.op not in (Ops.ADD, Ops.MUL) or x.dtype not in dtypes.ints:
    return x
  a, b = x.src
  if a.op is Ops.CONST and b.op is Ops.CONST:
    return fold_alu(x)
  unit = 0 if x.op is Ops.ADD else 1
  return b if a.op is Ops.CONST and a.arg == unit else a if b.op is Ops.CONST and b.arg == unit else x


def _substituted(u: UOp, env: dict[UOp, UOp]) -> UOp:
  """u with the ranges in env replaced by constants; a REDUCE over UPCAST/UNROLL ranges becomes, in its range order,
  the values its input takes in each of their iterations: REDUCE(CONTRACT(values), *loops), or their chain."""
  memo: dict[UOp, UOp] = {}

  def go(x: UOp) -> UOp:
    if x in env:
      return env[x]
    if x not in memo:
      unr = [r for r in x.src[1:] if x.op is Ops.REDUCE and axis_type(r) in EXPAND_AXES]
      if not unr:
        memo[x] = _folded_lane(x.replace(src=tuple(go(s) for s in x.src)))
      else:
        loops = tuple(r for r in x.src[1:] if r not in unr)
        vals = [_substituted(x.src[0], {**env, **{r: UOp.const(r.dtype, i) for r, i in zip(unr, c)}})
                for c in itertools.product(*(range(const_size(r)) for r in unr))]
        memo[x] = _chain(x.arg, vals) if not loops else \
            UOp(Ops.REDUCE, x.dtype, (UOp(Ops.CONTRACT, vals[0].dtype, tuple(vals)), *loops), x.arg)
    return memo[x]
  return go(u)


def _lanes_by_substitution(sink: UOp) -> UOp:
  """What expanding means: each store once per iteration of its UPCAST/UNROLL ranges (row-major in axis order), those
  to consecutive addresses one vector store (vectorize's first step, `group_stores`, which expansion takes)."""
  free = free_ranges(sink)
  stores = []
  for st in sink.src:
    ex = sorted((r for r in free[st] if axis_type(r) in EXPAND_AXES), key=lambda r: r.arg[0])
    for c in itertools.product(*(range(const_size(r)) for r in ex)):
      stores.append(_substituted(st, {r: UOp.const(r.dtype, i) for r, i in zip(ex, c)}))
  lanes = sink.replace(src=tuple(stores))
  grouped = group_stores(expand_ctx(sink), lanes)
  return lanes if grouped is None else grouped


def _kernels() -> list[UOp]:
  out = [
    _opted(matmul_ast(8, 8, 16), UPCAST_UNROLL),
    _opted(matmul_ast(8, 12, 6), [Opt(OptOps.UNROLL, 0, 3), Opt(OptOps.UPCAST, 1, 3)]),
    _opted(sum_ast(8, 16), [Opt(OptOps.UNROLL, 0, 0)]),  # the whole reduce unrolled: a chain, no loop left
    _opted(sum_ast(8, 16, Ops.MAX), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4)]),
    _opted(elementwise_ast(8, 8), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2)]),
    _opted(masked_ast(4, 8), [Opt(OptOps.UPCAST, 1, 8)]),
    _opted(two_store_ast(4, 8), [Opt(OptOps.UPCAST, 1, 4)]),
    _opted(two_reduce_ast(4, 8), [Opt(OptOps.UNROLL, 0, 4)]),
    _opted(sum_ast(4, 16), [Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.UNROLL, 0, 2)]),  # two unrolled axes, one reduce
  ]
  for ast in (matmul_ast(16, 16, 16), sum_ast(16, 32), elementwise_ast(16, 32), two_reduce_ast(8, 16)):
    out.append(hand_coded_optimizations(Kernel(ast)).get_optimized_ast())
  return out


@pytest.mark.parametrize("k", range(13))
def test_expand_gives_each_store_once_per_lane(k):
  ast = _kernels()[k]
  assert any(u.op is Ops.RANGE and axis_type(u) in EXPAND_AXES for u in toposort(ast)), "nothing to expand"
  got = _expand(ast)
  assert got is _lanes_by_substitution(symbolic_then_index_fold(ast))
  assert not any(u.op is Ops.UNROLL or (u.op is Ops.RANGE and axis_type(u) in EXPAND_AXES) for u in toposort(got))


def test_expanded_kernels_compute_what_they_did(tmp_path):
  from support.opt_helpers import buffers_for, run_ast

  from compiler.runtime import compile_kernel
  for ast in _kernels():
    bufs = buffers_for(ast)
    want = run_ast(ast, [b.copy() for b in bufs])
    got = [b.copy() for b in bufs]
    compile_kernel(ast)(got)
    for w, g in zip(want, got):
      np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_too_many_lanes_fails_before_any_lane_is_built(tmp_path):
  r = UOp.range(2 * MAX_LANES, 0, AxisType.UPCAST, dtypes.int32)
  g = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(2 * MAX_LANES), (), 0)
  ast = UOp.sink(g.index(r).store(UOp.const(dtypes.float32, 1.0)), arg=KernelInfo("wide"))
  with pytest.raises(CodegenError, match=rf"kernel 'wide'.*{2 * MAX_LANES} lanes"):
    _trace(tmp_path / "w.vztrace", lambda: _expand(ast))
  recs = list(TraceReader(tmp_path / "w.vztrace"))
  assert _rule_names(recs, "expand") == []


# ---- build kernel, number globals

@pytest.fixture()
def fresh_schedules(monkeypatch):
  monkeypatch.setenv("SCHEDULE_CACHE", "0")  # a cache hit would skip the passes
  SCHEDULES.clear()


def _rand(*shape: int) -> np.ndarray:
  return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def test_kernel_forms_and_numbers_its_globals_in_steps(tmp_path, fresh_schedules):
  a, b, c = _rand(4, 4), _rand(4, 4), _rand(4)
  sched, recs = _trace(tmp_path / "k.vztrace", lambda: (Tensor(a) + Tensor(b) * Tensor(c)).schedule())
  (rangeify,) = _rule_names(recs, "open kernel + rangeify")
  assert rangeify[0] == "open_kernel" and rangeify.count("open_kernel") == 1 and len(rangeify) > 4
  (numbering,) = _rule_names(recs, "number globals")
  assert numbering == ["number_global"] * 4 + ["name_kernel"]  # output and three inputs, then the name
  (si,) = sched
  assert sorted(u.arg for u in toposort(si.ast) if u.op is Ops.DEFINE_GLOBAL) == [0, 1, 2, 3]


def test_a_dropped_read_leaves_the_kernel_of_the_program_without_it(tmp_path, fresh_schedules):
  """A read that is all padding drops out; the globals after it move down a slot, and one of them then equals the
  dropped read's old global (same size): the kernel is the one `zeros + b * c + d` gets, reading b, c, d."""
  a, b, c, d = (Tensor(_rand(4, 4) + i) for i in range(4))
  pad_only = a.pad(((4, 0), (0, 0)))[0:4]  # every element is padding: reads nothing of a
  (si,) = (pad_only + b * c + d).schedule()
  (plain,) = (Tensor.zeros(4, 4) + b * c + d).schedule()
  assert si.ast.replace(arg=None) is plain.ast.replace(arg=None)
  assert si.bufs[1:] == plain.bufs[1:] and len(si.bufs) == 4
  (out,) = [pad_only + b * c + d]
  np.testing.assert_allclose(out.numpy(), b.numpy() * c.numpy() + d.numpy(), rtol=1e-6)


def test_the_kernel_is_named_from_its_numbered_ast(fresh_schedules):
  """Names as before: the reference's style from the ranges, one per distinct AST, the same AST the same name."""
  x = Tensor(_rand(8, 4))
  # (over the first axis: the max and the sum stay kernels of their own, both r_4_8)
  first, again = ([si.name for si in x.softmax(0).schedule()] for _ in range(2))
  assert first == again and len(set(first)) == 3
  assert [n.split("n")[0] for n in first] == ["r_4_8", "r_4_8", "E_8_4"]


def test_every_opt_kernel_still_expands(tmp_path):
  """Random UPCAST/UNROLL opts on the helpers' kernels: expansion agrees with lane substitution on each."""
  rng = np.random.default_rng(3)
  n = 0
  for ast in (matmul_ast(8, 8, 8), sum_ast(8, 12), elementwise_ast(6, 8), two_reduce_ast(4, 6)):
    for _ in range(12):
      k = Kernel(ast)
      for _ in range(rng.integers(1, 4)):
        op = [OptOps.UPCAST, OptOps.UNROLL][rng.integers(2)]
        try:
          k.apply_opt(Opt(op, int(rng.integers(0, 3)), int(rng.choice([0, 2, 3, 4]))))
        except KernelOptError:
          pass
      opt = k.get_optimized_ast()
      assert _expand(opt) is _lanes_by_substitution(symbolic_then_index_fold(opt))
      n += 1
  assert n == 48


def test_index_math_narrows_to_int32_node_by_node(tmp_path, fresh_schedules):
  big = Tensor([1.0, 2.0, 3.0]).pad(((2**31, 0),))[2**31:]  # an int64 view whose kernel indexes [0, 3)
  (si,), recs = _trace(tmp_path / "n.vztrace", big.schedule)
  (rules,) = _rule_names(recs, "narrow index")
  assert len(rules) > 1 and set(rules) == {"to_int32"}
  assert not any(u.dtype == dtypes.int64 for u in toposort(si.ast))
  assert any(u.op is Ops.RANGE and u.dtype == dtypes.int32 for u in toposort(si.ast))


def test_a_vector_store_is_made_without_its_lanes_stores():
  """Lane stores to consecutive addresses become one vector store as the SINK is expanded (`sink_stores`): none of
  its lanes is made as a STORE or INDEX node (GPT step's cold first call made 25k of them, each dropped by vectorize
  and each named by a recording)."""
  from compiler.codegen.program import pm_expand_fold
  ast = _opted(elementwise_ast(8, 8), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2)])
  sink = symbolic_then_index_fold(ast)
  got = graph_rewrite(sink, pm_expand_fold, ctx=expand_ctx(sink), bottom_up=True)
  out = next(u for u in toposort(got) if u.op is Ops.DEFINE_GLOBAL and u.arg == 0)
  assert [st.src[1].dtype.count for st in got.src] == [4, 4]  # (row i, row i + 1: 4 consecutive columns each)
  assert all(u.dtype.base.count == 4 for u in toposort(got) if u.op is Ops.INDEX and u.src[0] is out)
  assert sum(u.op is Ops.STORE for u in toposort(got)) == 2
