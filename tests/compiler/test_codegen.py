"""Codegen on hand-built kernel ASTs: results vs numpy, UPCAST/UNROLL/THREAD variants, IR shape, errors."""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.codegen_helpers import (
  TH,
  UN,
  UP,
  G,
  R,
  broadcast,
  buf,
  elementwise,
  matmul,
  pad1d,
  reduce_cols,
  reduce_rows,
  run,
  sink,
  softmax_rows,
  split,
)

from compiler.codegen import CodegenError, get_program
from compiler.dtype import dtypes
from compiler.runtime.compiled import compile_kernel
from compiler.uop import AxisType, KernelInfo, Ops, UOp

rng = np.random.default_rng(0)


def f32(*shape):
  return rng.standard_normal(shape).astype(np.float32)


def check_elementwise(ast, m, n):
  a, b = f32(m * n), f32(m * n)
  out = run(ast, np.zeros(m * n, np.float32), a, b)[0]
  np.testing.assert_allclose(out, np.maximum(a * b + 1, 0), rtol=1e-6, atol=1e-6)


def check_matmul(ast, m, n, k):
  a, b = f32(m * k), f32(k * n)
  out = run(ast, np.zeros(m * n, np.float32), a, b)[0]
  np.testing.assert_allclose(out.reshape(m, n), a.reshape(m, k) @ b.reshape(k, n), rtol=1e-4, atol=1e-4)


def check_rows(ast, m, k, op=Ops.ADD):
  a = f32(m * k)
  out = run(ast, np.zeros(m, np.float32), a)[0]
  ref = a.reshape(m, k).sum(1) if op is Ops.ADD else a.reshape(m, k).max(1)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_elementwise():
  check_elementwise(elementwise(3, 17), 3, 17)


def test_broadcast_stride0():
  a, b = f32(4 * 9), f32(9)
  out = run(broadcast(4, 9), np.zeros(36, np.float32), a, b)[0]
  np.testing.assert_allclose(out.reshape(4, 9), a.reshape(4, 9) + b)


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
def test_reduce_rows(op):
  check_rows(reduce_rows(5, 13, op), 5, 13, op)


def test_reduce_cols_strided():
  a = f32(7 * 6)
  out = run(reduce_cols(6, 7), np.zeros(6, np.float32), a)[0]
  np.testing.assert_allclose(out, a.reshape(7, 6).sum(0), rtol=1e-5)


def test_matmul():
  check_matmul(matmul(5, 7, 9), 5, 7, 9)


def test_padding_valid_reads_zero():
  a = f32(10)
  out = run(pad1d(10, 3), np.full(16, 99, np.float32), a)[0]
  np.testing.assert_allclose(out, np.pad(a, 3) * 2)


def test_two_reduces_in_one_kernel():
  a = f32(3 * 8)
  out = run(softmax_rows(3, 8), np.zeros(24, np.float32), a)[0].reshape(3, 8)
  x = a.reshape(3, 8)
  e = np.exp2(x - x.max(1, keepdims=True))
  np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5)


def test_full_reduce_to_scalar():
  r = UOp.range(100, 0, R)
  ast = sink(buf(0, 1).index(UOp.const(dtypes.int32, 0)).store(buf(1, 100).index(r).load().reduce(r)))
  a = f32(100)
  assert get_program(ast).par_size is None
  np.testing.assert_allclose(run(ast, np.zeros(1, np.float32), a)[0], [a.sum()], rtol=1e-5)


def test_reduce_of_constant_counts_iterations():
  i, r = UOp.range(3, 0, G), UOp.range(11, 1, R)
  ast = sink(buf(0, 3, dtypes.int32).index(i).store(UOp.const(dtypes.int32, 1).reduce(r)))
  np.testing.assert_array_equal(run(ast, np.zeros(3, np.int32))[0], [11, 11, 11])


def test_int_matmul():
  m, n, k = 3, 4, 5
  a = rng.integers(-9, 9, m * k).astype(np.int32)
  b = rng.integers(-9, 9, k * n).astype(np.int32)
  out = run(matmul(m, n, k, dtypes.int32), np.zeros(m * n, np.int32), a, b)[0]
  np.testing.assert_array_equal(out.reshape(m, n), a.reshape(m, k) @ b.reshape(k, n))


# ---- the optimizer's rewrites of the same kernel give the same results

@pytest.mark.parametrize("axis,k,inner,outer", [
  (1, 4, UP, None), (1, 2, UP, None), (0, 4, UP, None), (0, 2, UN, None), (0, 2, None, TH), (1, 16, UP, TH)])
def test_elementwise_variants(axis, k, inner, outer):
  base = elementwise(8, 32)
  ast = split(base, axis, k, inner or G, outer)
  check_elementwise(ast, 8, 32)


@pytest.mark.parametrize("splits", [
  [(1, 4, UP)], [(0, 4, UP)], [(2, 4, UN)], [(1, 4, UP), (0, 2, UP)], [(1, 4, UP), (2, 4, UN)],
  [(1, 8, UP), (0, 4, UP), (2, 2, UN)], [(0, 2, G, TH), (1, 4, UP)], [(2, 12, UN)]])
def test_matmul_variants(splits):
  ast = matmul(8, 16, 12)
  for s in splits:
    ast = split(ast, s[0], s[1], s[2], s[3] if len(s) > 3 else None)
  check_matmul(ast, 8, 16, 12)


@pytest.mark.parametrize("axis,k,inner", [(1, 4, UN), (1, 13, UN), (0, 5, UP), (1, 13, UP)])
def test_reduce_variants(axis, k, inner):
  check_rows(split(reduce_rows(5, 52, Ops.MAX), axis, k, inner), 5, 52, Ops.MAX)
  check_rows(split(reduce_rows(5, 52), axis, k, inner), 5, 52)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_padding_variants_upcast_across_the_edge(k):
  ast = split(pad1d(10, 3), 0, k, UP) if 16 % k == 0 else pad1d(10, 3)
  a = f32(10)
  np.testing.assert_allclose(run(ast, np.full(16, 99, np.float32), a)[0], np.pad(a, 3) * 2)


def test_softmax_variants():
  ast = split(split(softmax_rows(3, 8), 1, 4, UP), 2, 4, UN)
  a = f32(24)
  out = run(ast, np.zeros(24, np.float32), a)[0].reshape(3, 8)
  e = np.exp2(a.reshape(3, 8) - a.reshape(3, 8).max(1, keepdims=True))
  np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5)


# ---- IR shape

def _verify(ir: str) -> None:
  llvm.parse_assembly(ir).verify()


def test_ir_verifies_and_is_vectorized_when_upcast():
  prg = get_program(split(elementwise(4, 32), 1, 4, UP))
  _verify(prg.src)
  assert "load <4 x float>" in prg.src and "store <4 x float>" in prg.src
  assert "noalias" in prg.src and "ptr" in prg.src
  scalar = get_program(elementwise(4, 32)).src
  assert "<4 x float>" not in scalar


def test_matmul_upcast_gives_vector_accumulator():
  prg = get_program(split(matmul(8, 16, 12), 1, 4, UP))
  _verify(prg.src)
  assert "phi <4 x float>" in prg.src and "fadd reassoc contract <4 x float>" in prg.src


def test_upcast_of_strided_axis_stays_scalar():
  prg = get_program(split(elementwise(8, 4), 0, 4, UP))  # lanes 4 elements apart
  _verify(prg.src)
  assert "<4 x float>" not in prg.src and prg.src.count("store float") == 4


def test_masked_load_never_reads_out_of_bounds_address():
  src = get_program(pad1d(10, 3)).src
  assert "select i1" in src  # the index is clamped before the load


def test_flops_count():
  assert get_program(matmul(4, 6, 8)).flops() == 2 * 4 * 6 * 8
  assert get_program(split(matmul(4, 8, 8), 1, 4, UP)).flops() == 2 * 4 * 8 * 8
  assert get_program(elementwise(3, 5)).flops() == 3 * 15


# ---- errors name the kernel and the node

def test_error_names_kernel_and_node():
  x = UOp(Ops.RESHAPE, dtypes.float32, (buf(1, 4).index(UOp.const(dtypes.int32, 0)).load(),), (4,))
  ast = UOp.sink(buf(0, 4).index(UOp.const(dtypes.int32, 0)).store(x), arg=KernelInfo("bad_kernel"))
  with pytest.raises(CodegenError, match=r"kernel 'bad_kernel'.*RESHAPE"):
    get_program(ast)


def test_unreduced_reduce_range_is_an_error():
  r = UOp.range(4, 0, R)
  ast = UOp.sink(buf(0, 4).index(r).store(buf(1, 4).index(r).load()), arg=KernelInfo("loose"))
  with pytest.raises(CodegenError, match=r"kernel 'loose'.*not closed by a REDUCE.*RANGE"):
    get_program(ast)


def test_int_only_op_on_float_is_an_error():
  i = UOp.range(4, 0, G)
  x = buf(1, 4).index(i).load()
  ast = UOp.sink(buf(0, 4).index(i).store(UOp(Ops.XOR, dtypes.float32, (x, x))), arg=KernelInfo("fx"))
  with pytest.raises(CodegenError, match=r"kernel 'fx'.*XOR"):
    get_program(ast)


def test_not_a_sink_is_an_error():
  with pytest.raises(CodegenError, match="SINK"):
    get_program(UOp.const(dtypes.float32, 1.0))


def test_a_fill_that_stores_to_a_global_buffer_is_an_error():
  """A STAGE fill (END) or a grouped reduce's store (BARRIER) writes a scratch: a global buffer's stores are the SINK's,
  where expansion makes their lanes (a lane of an END's global STORE would never be made)."""
  i, c = UOp.range(4, 0, G), UOp.range(4, 1, AxisType.LOCAL)
  fill = UOp(Ops.END, dtypes.void, (buf(2, 4).index(c).store(buf(1, 4).index(c).load()), c))
  local = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(4), (), 0)
  read = UOp(Ops.INDEX, local.dtype, (UOp(Ops.AFTER, local.dtype, (local, fill)), i)).load()
  ast = UOp.sink(buf(0, 4).index(i).store(read), arg=KernelInfo("gfill"))
  with pytest.raises(CodegenError, match=r"kernel 'gfill'.*END of a STORE to a global buffer"):
    get_program(ast)


def test_expanding_a_symbolic_axis_is_an_error():
  n = UOp.variable("n", 1, 8)
  r = UOp(Ops.RANGE, dtypes.int32, (n,), (0, AxisType.UPCAST))
  ast = UOp.sink(buf(0, 8).index(r).store(UOp.const(dtypes.float32, 1.0)), arg=KernelInfo("symup"))
  with pytest.raises(CodegenError, match=r"kernel 'symup'.*constant size"):
    compile_kernel(ast)


def test_gated_store_writes_only_where_valid():
  """A store whose INDEX has a valid (as PADTO makes): the padded iterations write nothing."""
  i = UOp.range(12, 0, G)
  valid = i < 10
  ast = sink(buf(0, 10).index(i, valid).store(buf(1, 12).index(i, valid).load() + 1.0), name="E_gated")
  a = f32(12)
  out = np.zeros(10, np.float32)
  compile_kernel(ast)([out, a])
  np.testing.assert_allclose(out, a[:10] + 1)
  ast4 = split(ast, 0, 4, UP)  # per-lane gates
  out4 = np.zeros(10, np.float32)
  compile_kernel(ast4)([out4, a])
  np.testing.assert_allclose(out4, a[:10] + 1)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.sampled_from(["mm", "ew", "rows", "pad"]),
       st.lists(st.tuples(st.integers(0, 2), st.sampled_from([2, 4]), st.sampled_from([UP, UN, G]),
                          st.sampled_from([None, TH])), max_size=3))
def test_random_splits_keep_results(kind, splits):
  """Any chain of range splits (the optimizer's shift_to) with any axis kinds computes the same thing."""
  base = {"mm": lambda: matmul(8, 8, 16), "ew": lambda: elementwise(8, 16), "rows": lambda: reduce_rows(8, 16),
          "pad": lambda: pad1d(10, 3)}[kind]()
  ast = base
  for axis, k, inner, outer in splits:
    rngs = [u for u in ast.toposort() if u.op is Ops.RANGE]
    cands = [r for r in rngs if r.arg[0] == axis and r.src[0].arg % k == 0 and r.arg[1] in (G, R, TH)]
    if not cands:
      continue
    r = cands[0]
    reduce_axis = r.arg[1] is R
    if reduce_axis and inner is UP:
      inner = UN
    if not reduce_axis and inner is UN:
      inner = UP
    ast = split(ast, axis, k, R if (reduce_axis and inner is G) else inner, None if reduce_axis else outer)
  arrays = {"mm": [np.zeros(64, np.float32), f32(128), f32(128)], "ew": [np.zeros(128, np.float32), f32(128), f32(128)],
            "rows": [np.zeros(8, np.float32), f32(128)], "pad": [np.zeros(16, np.float32), f32(10)]}[kind]
  want = run(base, *arrays)[0]
  np.testing.assert_allclose(run(ast, *arrays)[0], want, rtol=1e-5, atol=1e-5)


def test_nested_reduce():
  """out[i] = sum_r1 a[i, r1] * (sum_r2 b[r1, r2]): an accumulator inside another's loop."""
  i, r1, r2 = UOp.range(3, 0, G), UOp.range(5, 1, R), UOp.range(7, 2, R)
  inner = buf(2, 35).index(r1 * 7 + r2).load().reduce(r2)
  ast = sink(buf(0, 3).index(i).store((buf(1, 15).index(i * 5 + r1).load() * inner).reduce(r1)), name="r_nested")
  a, b = f32(15), f32(35)
  out = run(ast, np.zeros(3, np.float32), a, b)[0]
  np.testing.assert_allclose(out, a.reshape(3, 5) @ b.reshape(5, 7).sum(1), rtol=1e-5)
  out2 = run(split(ast, 2, 7, UN), np.zeros(3, np.float32), a, b)[0]
  np.testing.assert_allclose(out2, out, rtol=1e-5)


def test_same_range_reduced_twice_in_sequence():
  """sum_r (a[r] - max_r a[r]): the second reduce needs the first's result, so the range loops twice."""
  r = UOp.range(9, 0, R)
  a = buf(1, 9).index(r).load()
  mx = a.reduce(r, op=Ops.MAX)
  ast = sink(buf(0, 1).index(UOp.const(dtypes.int32, 0)).store((a - mx).reduce(r)), name="r_twice")
  x = f32(9)
  prg = get_program(ast)
  assert sum(1 for u in prg.uops if u.op is Ops.RANGE) == 2
  np.testing.assert_allclose(run(ast, np.zeros(1, np.float32), x)[0], [(x - x.max()).sum()], rtol=1e-5, atol=1e-6)


def test_llvm_loop_vectorizer_only_on_innermost_loops():
  src = get_program(matmul(4, 6, 8)).src
  _verify(src)
  # the i and j loops contain another loop: marked; the reduce loop (innermost) is left to LLVM's vectorizer
  assert src.count("!llvm.loop !") == 2 and '!{!"llvm.loop.vectorize.enable", i1 false}' in src
  i = UOp.range(16, 0, G)
  flat = get_program(sink(buf(0, 16).index(i).store(buf(1, 16).index(i).load() + 1.0))).src
  assert "!llvm.loop" not in flat  # a single loop is innermost


def test_upcast_lanes_casting_from_different_dtypes():
  """out[i] = int64(a[i]) for i < 2 else int64(b[i-2]) (a cat of int32 and int16), UPCAST over i: the lanes are
  CASTs of different source dtypes and must not become one vector CAST (a regression: invalid IR)."""
  i = UOp.range(4, 0, G)
  lo, hi = i < 2, (i < 2).logical_not()
  a = buf(1, 2, dtypes.int32).index(i, lo).load().cast(dtypes.int64)
  b = buf(2, 2, dtypes.int16).index(i - 2, hi).load().cast(dtypes.int64)
  ast = sink(buf(0, 4, dtypes.int64).index(i).store(lo.where(a, UOp.const(dtypes.int64, 0)) +
                                                    hi.where(b, UOp.const(dtypes.int64, 0))), name="E_cat")
  x, y = np.array([7, -3], np.int32), np.array([1000, -5], np.int16)
  out = run(split(ast, 0, 4, UP), np.zeros(4, np.int64), x, y)[0]
  np.testing.assert_array_equal(out, [7, -3, 1000, -5])
