"""Kernel.apply_opt: shapes, axis kinds and colors after each opt, refusals with reasons, unchanged results."""
from __future__ import annotations

import numpy as np
import pytest
from support.opt_helpers import (
  ALL_KERNELS,
  buf,
  check_refused,  # noqa: E402
  elementwise_ast,
  evaluate,
  masked_ast,
  matmul_ast,
  sink,
  stack_ast,
  sum_ast,
  two_reduce_ast,
)
from support.server_helpers import recording

from compiler.opt import Kernel, KernelOptError, Opt, OptOps, Target
from compiler.opt.kernel import access_strides, axis_stride
from compiler.trace import recorder
from compiler.uop import AxisType, KernelInfo, Ops, UOp
from vztrace.reader import TraceReader

CPU = Target(threads=2)
GPU_LIKE = Target(name="LOCALS", has_local=True, has_shared=True, shared_max=1 << 15, threads=1)
A = AxisType


def K(ast: UOp, target: Target = CPU) -> Kernel:
  return Kernel(ast, target)


def same_results(a: UOp, b: UOp) -> None:
  for x, y in zip(evaluate(a), evaluate(b), strict=True):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


def test_initial_axes_are_ordered_globals_then_reduces():
  i, j, r = UOp.range(4, 2, A.REDUCE), UOp.range(8, 0, A.GLOBAL), UOp.range(6, 1, A.GLOBAL)
  ast = sink(buf(0, 48).index(j * 6 + r).store(buf(1, 192).index(j * 24 + r * 4 + i).load().reduce(i)))
  k = K(ast)
  assert k.full_shape == (8, 6, 4)
  assert k.axis_types == [A.GLOBAL, A.GLOBAL, A.REDUCE]
  assert (k.first_reduce, k.first_upcast, k.global_dims, k.upcasted) == (2, 3, 2, 0)
  assert k.name == "r_8_6_4"


def test_reduce_ranges_typed_loop_become_reduce_and_ones_are_dropped():
  i, one, r = UOp.range(8, 0, A.LOOP), UOp.range(1, 1, A.LOOP), UOp.range(4, 2, A.LOOP)
  ast = sink(buf(0, 8).index(i + one).store(buf(1, 32).index(i * 4 + r + one).load().reduce(r, one)))
  k = K(ast)
  assert k.full_shape == (8, 4) and k.axis_types == [A.LOOP, A.REDUCE]
  assert k.colors() == ["blue", "red"]
  same_results(ast, k.get_optimized_ast())


def test_upcast_unroll_shapes_and_kinds():
  k = K(matmul_ast(16, 12, 32))
  k.apply_opt(Opt(OptOps.UPCAST, 0, 4))
  assert k.full_shape == (4, 12, 32, 4) and k.axis_types == [A.LOOP, A.LOOP, A.REDUCE, A.UPCAST]
  k.apply_opt(Opt(OptOps.UPCAST, 1, 3))
  assert k.full_shape == (4, 4, 32, 4, 3)
  k.apply_opt(Opt(OptOps.UNROLL, 0, 8))
  assert k.full_shape == (4, 4, 4, 4, 3, 8)
  assert k.axis_types == [A.LOOP, A.LOOP, A.REDUCE, A.UPCAST, A.UPCAST, A.UNROLL]
  assert k.colors() == ["blue", "blue", "red", "yellow", "yellow", "magenta"]
  assert (k.first_reduce, k.first_upcast, k.upcasted) == (2, 3, 3)
  assert k.name == "r_4_4_4_4_3_8"
  assert k.applied_opts == [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.UNROLL, 0, 8)]


def test_amt_zero_takes_the_whole_axis():
  k = K(matmul_ast(4, 12, 8))
  k.apply_opt(Opt(OptOps.UNROLL, 0, 0))
  assert k.full_shape == (4, 12, 8) and k.axis_types == [A.LOOP, A.LOOP, A.UNROLL]
  k.apply_opt(Opt(OptOps.UPCAST, 0, 0))
  assert k.full_shape == (12, 8, 4) and k.axis_types == [A.LOOP, A.UNROLL, A.UPCAST]
  # the reduce still reduces over its unrolled range
  red = k.reduceops[0]
  assert [r.arg[1] for r in red.src[1:]] == [A.UNROLL]
  same_results(matmul_ast(4, 12, 8), k.get_optimized_ast())


def test_split_keeps_outer_position_and_loop_order():
  k = K(matmul_ast(8, 12, 16))
  ids = [r.arg[0] for r in k.rngs]
  k.apply_opt(Opt(OptOps.UPCAST, 0, 2))
  # the outer part keeps its id (so its loop stays where it was); the new axis gets the next free id
  assert [r.arg[0] for r in k.rngs[:3]] == ids and k.rngs[3].arg[0] == max(ids) + 1


def test_thread_splits_from_the_top():
  k = K(elementwise_ast(8, 16))
  k.apply_opt(Opt(OptOps.THREAD, 0, 2))
  assert k.full_shape == (2, 4, 16) and k.axis_types == [A.THREAD, A.LOOP, A.LOOP]
  assert k.colors()[0] == "BLUE"
  # thread t takes rows 4t..4t+3: the thread range is the high part of the row index
  store = k.stores[0].src[0]
  assert axis_stride(store.src[1], k.rngs[0]) == 4 * 16 and axis_stride(store.src[1], k.rngs[1]) == 16
  same_results(elementwise_ast(8, 16), k.get_optimized_ast())
  with pytest.raises(KernelOptError, match="already has a THREAD"):
    k.apply_opt(Opt(OptOps.THREAD, 1, 2))


def test_swap_exchanges_two_globals():
  k = K(elementwise_ast(6, 16))
  k.apply_opt(Opt(OptOps.SWAP, 0, 1))
  assert k.full_shape == (16, 6) and k.axis_types == [A.LOOP, A.LOOP]
  assert access_strides(k, k.stores[0].src[0]) == [1, 16]
  same_results(elementwise_ast(6, 16), k.get_optimized_ast())
  # two axes of the same size swap too (their RANGE nodes would otherwise be the same object)
  k2 = K(elementwise_ast(8, 8))
  k2.apply_opt(Opt(OptOps.SWAP, 0, 1))
  assert access_strides(k2, k2.stores[0].src[0]) == [1, 8]
  same_results(elementwise_ast(8, 8), k2.get_optimized_ast())


def test_padto_pads_and_guards():
  k = K(matmul_ast(7, 12, 20))
  k.apply_opt(Opt(OptOps.PADTO, 0, 8))
  k.apply_opt(Opt(OptOps.PADTO, 2, 32))
  assert k.full_shape == (8, 12, 32) and k.axis_types == [A.LOOP, A.LOOP, A.REDUCE]
  k.apply_opt(Opt(OptOps.UPCAST, 0, 4))  # a padded axis can then be split evenly
  assert k.full_shape == (2, 12, 32, 4)
  assert all(len(a.src) == 3 for a in k.accesses if k.rngs[0] in a.ranges)
  same_results(matmul_ast(7, 12, 20), k.get_optimized_ast())


def test_padto_refusals():
  with pytest.raises(KernelOptError, match="MAX reduce"):
    K(sum_ast(4, 10, Ops.MAX)).apply_opt(Opt(OptOps.PADTO, 1, 16))
  with pytest.raises(KernelOptError, match="not 0 where"):
    K(sum_ast(4, 10, fn=lambda a: a.exp2())).apply_opt(Opt(OptOps.PADTO, 1, 16))
  with pytest.raises(KernelOptError, match="not 0 where"):  # a + 1 is 1 on the padding
    K(sum_ast(4, 10, fn=lambda a: a + 1.0)).apply_opt(Opt(OptOps.PADTO, 1, 16))
  with pytest.raises(KernelOptError, match="quadruple"):
    K(matmul_ast(5, 4, 4)).apply_opt(Opt(OptOps.PADTO, 0, 32))
  with pytest.raises(KernelOptError, match="nothing was padded"):
    K(matmul_ast(8, 4, 4)).apply_opt(Opt(OptOps.PADTO, 0, 8))
  k = K(matmul_ast(8, 4, 4))
  k.apply_opt(Opt(OptOps.UPCAST, 0, 0))
  with pytest.raises(KernelOptError, match="upcasted"):
    k.apply_opt(Opt(OptOps.PADTO, 2, 16))
  # a safe reduce pads fine: (a * 2) is 0 on the padding
  k = K(sum_ast(4, 10, fn=lambda a: a * 2.0))
  k.apply_opt(Opt(OptOps.PADTO, 1, 16))
  same_results(sum_ast(4, 10, fn=lambda a: a * 2.0), k.get_optimized_ast())


def test_cpu_refuses_locals_with_a_reason():
  k = K(matmul_ast(8, 8, 16))
  for opt in [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 4), Opt(OptOps.GROUPTOP, 0, 4), Opt(OptOps.NOLOCALS)]:
    with pytest.raises(KernelOptError, match="no local memory"):
      k.apply_opt(opt)
  assert k.applied_opts == [] and k.full_shape == (8, 8, 16)


def test_locals_on_a_target_that_has_them():
  k = K(matmul_ast(8, 8, 32), GPU_LIKE)
  k.apply_opt(Opt(OptOps.LOCAL, 1, 4))
  assert k.full_shape == (8, 2, 4, 32) and k.axis_types == [A.LOOP, A.LOOP, A.LOCAL, A.REDUCE]
  k.apply_opt(Opt(OptOps.GROUPTOP, 0, 8))
  assert k.full_shape == (8, 2, 4, 8, 4)
  assert k.axis_types == [A.LOOP, A.LOOP, A.LOCAL, A.GROUP_REDUCE, A.REDUCE]
  assert k.colors() == ["blue", "blue", "cyan", "green", "red"]
  # GROUPTOP takes the high part of k: the group range has stride 4 in the reduce index
  a_idx = next(a for a in k.accesses if a.src[0].arg == 1).src[1]
  assert axis_stride(a_idx, k.rngs[3]) == 4 and axis_stride(a_idx, k.rngs[4]) == 1
  with pytest.raises(KernelOptError, match="locals with locals"):
    k.apply_opt(Opt(OptOps.NOLOCALS))
  same_results(matmul_ast(8, 8, 32), k.get_optimized_ast())
  k2 = K(matmul_ast(8, 8, 32), GPU_LIKE)
  k2.apply_opt(Opt(OptOps.GROUP, 0, 4))
  assert k2.full_shape == (8, 8, 4, 8) and k2.axis_types[2] is A.GROUP_REDUCE
  a_idx = next(a for a in k2.accesses if a.src[0].arg == 1).src[1]
  assert axis_stride(a_idx, k2.rngs[2]) == 1
  k3 = K(matmul_ast(8, 8, 32), GPU_LIKE)
  k3.apply_opt(Opt(OptOps.NOLOCALS))
  assert k3.dont_use_locals and k3.get_optimized_ast().arg.dont_use_locals
  with pytest.raises(KernelOptError, match="not using locals"):
    k3.apply_opt(Opt(OptOps.LOCAL, 0, 2))


@pytest.mark.parametrize("opt, reason", [
  (Opt(OptOps.UPCAST, 0, 32), "more than 16"),
  (Opt(OptOps.UNROLL, 0, 64), "more than 32"),
  (Opt(OptOps.UPCAST, 0, 3), "does not divide"),
  (Opt(OptOps.UPCAST, 0, 1), "meaningless"),
  (Opt(OptOps.UPCAST, 2, 4), "non-reduce"),
  (Opt(OptOps.UNROLL, 5, 4), "invalid axis"),
  (Opt(OptOps.UPCAST, -1, 4), "invalid axis"),
  (Opt(OptOps.UPCAST, None, 4), "int axis"),
  (Opt(OptOps.UPCAST, 0, None), "needs an amount"),
  (Opt(OptOps.UPCAST, 0, 2.0), "should be an int"),
  (Opt(OptOps.SWAP, 1, 0), "axis < arg"),
  (Opt(OptOps.SWAP, 0, 2), "axis < arg"),
  (Opt(OptOps.THREAD, 2, 2), "global"),
  (Opt(OptOps.THREAD, 0, 128), "more than 64"),
])
def test_invalid_opts_raise_and_leave_the_kernel_unchanged(opt, reason):
  k = K(matmul_ast(256, 32, 256))
  k.apply_opt(Opt(OptOps.UNROLL, 0, 2))
  check_refused(k, opt, reason)




def test_apply_opt_rejects_non_opts():
  with pytest.raises(TypeError):
    K(matmul_ast(4, 4, 4)).apply_opt(("UPCAST", 0, 4))


def test_names_keep_the_schedulers_suffix():
  ast = matmul_ast(8, 8, 8)
  k = K(ast.replace(arg=KernelInfo("r_8_8_8n2")))
  k.apply_opt(Opt(OptOps.UPCAST, 0, 2))
  assert k.name == "r_4_8_8_2n2" and k.colored_name()[-1] == ("n2", "BLACK")
  assert K(ast.replace(arg=KernelInfo("r_8_8_8x"))).name == "r_8_8_8"
  zero = UOp.const(ast.src[0].src[0].src[1].dtype, 0)
  scalar = sink(buf(0, 1).index(zero).store(UOp.const(buf(0, 1).dtype.base, 1.0)))
  assert K(scalar).name == "E_1"


def test_kernel_rejects_non_kernels():
  with pytest.raises(ValueError, match="SINK"):
    Kernel(UOp.const(matmul_ast(2, 2, 2).dtype, 0))


def test_copy_is_independent():
  k = K(matmul_ast(8, 8, 8))
  k2 = k.copy()
  k2.apply_opt(Opt(OptOps.UPCAST, 0, 4))
  assert k.full_shape == (8, 8, 8) and k.applied_opts == [] and k2.full_shape == (2, 8, 8, 4)


def test_colored_shape_and_name():
  k = K(matmul_ast(16, 8, 32))
  k.apply_opt(Opt(OptOps.UPCAST, 1, 4))
  k.apply_opt(Opt(OptOps.UNROLL, 0, 4))
  assert k.colored_shape() == [("16", "blue"), ("2", "blue"), ("8", "red"), ("4", "yellow"), ("4", "magenta")]
  assert "".join(t for t, _ in k.colored_name()) == k.name == "r_16_2_8_4_4"
  assert [c for t, c in k.colored_name() if t not in ("_", "r")] == k.colors()
  assert K(elementwise_ast(4, 4)).name == "E_4_4"
  # the optimized AST keeps the name its AST came with (the scheduler's: one name on every surface), and the shape's
  # name when it came with none
  ast = k.get_optimized_ast()
  assert ast.arg == KernelInfo(name="matmul", opts=(Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 4)))
  assert ast.src == k.ast.src
  nameless = K(matmul_ast(16, 8, 32).replace(arg=None))
  nameless.apply_opt(Opt(OptOps.UPCAST, 1, 4))
  assert nameless.get_optimized_ast().arg.name == nameless.name == "r_16_2_32_4"


def test_opt_json_round_trip_and_validation():
  o = Opt(OptOps.UNROLL, 1, 4)
  assert Opt.from_json(o.to_json()) == o
  for bad in [["EVAL", 0, 1], ["UPCAST", "0", 1], ["UPCAST", 0], "UPCAST", ["UPCAST", True, 4], ["UPCAST", 0, -4]]:
    with pytest.raises(ValueError):
      Opt.from_json(bad)


@pytest.mark.parametrize("name", sorted(ALL_KERNELS))
def test_every_valid_single_opt_keeps_results(name):
  base = ALL_KERNELS[name]()
  want = evaluate(base)
  tried = 0
  for op in [OptOps.UPCAST, OptOps.UNROLL, OptOps.THREAD, OptOps.PADTO, OptOps.SWAP]:
    for axis in range(4):
      for arg in [0, 2, 3, 4, 8, 16] if op is not OptOps.SWAP else [1, 2, 3]:
        k = K(base)
        try:
          k.apply_opt(Opt(op, axis, arg))
        except KernelOptError:
          continue
        tried += 1
        for x, y in zip(evaluate(k.get_optimized_ast()), want, strict=True):
          np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5, err_msg=f"{name} {k.applied_opts}")
  assert tried >= 3


def test_two_reduces_keep_their_own_ranges():
  k = K(two_reduce_ast(4, 8))
  assert k.axis_types == [A.LOOP, A.REDUCE, A.REDUCE]
  k.apply_opt(Opt(OptOps.UNROLL, 1, 4))
  sizes = sorted(tuple(r.src[0].arg for r in red.src[1:]) for red in k.reduceops)
  assert sizes == [(2, 4), (8,)]
  same_results(two_reduce_ast(4, 8), k.get_optimized_ast())


def test_masked_axes_results():
  for ast in (masked_ast(4, 12), stack_ast(8)):
    k = K(ast)
    k.apply_opt(Opt(OptOps.UPCAST, 0, 0 if ast is not None and k.full_shape[0] <= 4 else 2))
    same_results(ast, k.get_optimized_ast())


def test_opts_are_traced(tmp_path):
  with recording(tmp_path / "t.vztrace") as path, recorder.trace_context("kernel r", kind="kernel") as cid:
    k = K(matmul_ast(8, 8, 16))
    k.apply_opt(Opt(OptOps.UPCAST, 0, 4))
    with pytest.raises(KernelOptError):
      k.apply_opt(Opt(OptOps.GROUPTOP, 0, 4))
  recs = list(TraceReader(path))
  opts = [r for r in recs if r["t"] == "opt"]
  assert [(o["op"], o["axis"], o["arg"], o["ok"], o["ctx"]) for o in opts] == \
    [("UPCAST", 0, 4, True, cid), ("GROUPTOP", 0, 4, False, cid)]
  assert opts[0]["shape"] == [2, 8, 16, 4] and opts[0]["colors"] == ["blue", "blue", "red", "yellow"]
  assert opts[0]["kname"] == "r_2_8_16_4" and opts[0]["reason"] is None
  assert "no local memory" in opts[1]["reason"] and opts[1]["shape"] == [2, 8, 16, 4]
  rws = [r for r in recs if r["t"] == "rw_begin"]
  assert [r["name"] for r in rws] == ["apply UPCAST(0, 4)"]
  assert any(r["t"] == "match" and r["rw"] == rws[0]["id"] for r in recs)
