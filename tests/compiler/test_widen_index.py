"""Codegen's "widen index" pass (compiler/codegen/widen.py, issue 29): the LLVM backend's loop counters and index math
in int64, every value what it was in int32 (a node stays int32 where its int64 bounds leave int32's)."""
from __future__ import annotations

import numpy as np

from compiler import Tensor, engine
from compiler.codegen import program
from compiler.codegen.widen import pm_widen_index
from compiler.dtype import dtypes
from compiler.rewrite import graph_rewrite
from compiler.uop import AxisType, Ops, UOp, toposort


def _ast(t: Tensor) -> UOp:
  return engine.optimize(t.schedule()[-1].ast)


def _rng() -> np.random.Generator:
  return np.random.default_rng(0)


def test_llvm_loops_and_addresses_are_int64():
  a = Tensor(_rng().standard_normal((24, 40)).astype(np.float32))
  b = Tensor(_rng().standard_normal((40, 16)).astype(np.float32))
  prg = program.get_program(_ast((a @ b).relu()))
  ranges = [u for u in prg.uops if u.op is Ops.RANGE]
  assert ranges and all(r.dtype == dtypes.int64 for r in ranges)
  assert prg.par_size is not None and prg.par_size.dtype == dtypes.int64  # (the runtime passes int64 bounds)
  assert "phi i32" not in prg.src and "sext" not in prg.src
  assert all(ix.dtype == dtypes.int64 for slot, ix, _ in prg.accesses)


def test_only_the_llvm_pipeline_widens():
  a = Tensor(_rng().standard_normal((24, 40)).astype(np.float32))
  ast = _ast(a.sum(axis=1))
  assert all(u.dtype == dtypes.int32 for u in toposort(program.lower_ast(ast)) if u.op is Ops.RANGE)  # (OpenCL's)
  wide = program.lower_ast(ast, wide_index=True)
  assert all(u.dtype == dtypes.int64 for u in toposort(wide) if u.op is Ops.RANGE)


def _store_of(values, n: int) -> tuple[UOp, UOp]:
  """SINK(STORE(INDEX(buf, r), values(r))) over an int32 loop r of n: a kernel's lowered graph, made by hand (the
  Tensor API computes an arange ahead, as a buffer)."""
  r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (0, AxisType.LOOP))
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.int32.ptr(n), (), 0)
  st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, dtypes.int32.ptr(n), (buf, r)), values(r)))
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (r, st)),)), r


def _widened(sink: UOp) -> UOp:
  return graph_rewrite(sink, pm_widen_index, ctx=set(), bottom_up=True)


def test_int32_values_of_index_math_are_stored_as_int32():
  # a value made of the loop counter that fits int32: int64 in the kernel, stored through a cast back to int32
  out = _widened(_store_of(lambda r: r * 3 + 7, 1000)[0])
  st = next(u for u in toposort(out) if u.op is Ops.STORE)
  ix, v = st.src[0], st.src[1]
  assert ix.src[1].op is Ops.RANGE and ix.src[1].dtype == dtypes.int64
  assert v.op is Ops.CAST and v.dtype == dtypes.int32 and v.src[0].op is Ops.ADD and v.src[0].dtype == dtypes.int64
  assert (v.src[0].vmin, v.src[0].vmax) == (7, 3 * 999 + 7)


def test_values_that_wrap_in_int32_stay_int32():
  # 40000 * r wraps int32 from r = 53688 on: computed in int64 it would not, so that product stays int32 (over the
  # counter cast back), the value the int32 kernel computed
  out = _widened(_store_of(lambda r: r * 40000, 70000)[0])
  st = next(u for u in toposort(out) if u.op is Ops.STORE)
  v = st.src[1]
  assert v.op is Ops.MUL and v.dtype == dtypes.int32
  assert v.src[0].op is Ops.CAST and v.src[0].src[0].op is Ops.RANGE and v.src[0].src[0].dtype == dtypes.int64
  loop = next(u for u in toposort(out) if u.op is Ops.END)
  assert loop.src[0] is st.src[0].src[1]  # (the loop closes the widened counter the address reads)


def test_gathers_by_loaded_int32_indices():
  # an embedding lookup: index math over a loaded int32 (sign-extended into the int64 address math), and a masked
  # read at a padded edge (its condition compares int64 indices)
  rng = _rng()
  table = rng.standard_normal((50, 12)).astype(np.float32)
  idx = rng.integers(0, 50, (7, 5)).astype(np.int32)
  got = Tensor(table)[Tensor(idx)].pad(((0, 0), (1, 2), (0, 0))).sum(axis=1).numpy()
  want = np.pad(table[idx], ((0, 0), (1, 2), (0, 0))).sum(axis=1)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
