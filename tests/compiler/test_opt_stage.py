"""STAGE (compiler.opt.stage): a reused input tile copied to a contiguous scratch, the reduce split into blocks
outside the rows; compiled and run against numpy / the interpreter, with and without THREAD, on matmul (square,
rectangular, blocks that do not divide), batched matmul, masked loads and conv2d; refusals; the trace; the
heuristic's choice on SSE / AVX2 / AVX-512 target models; BEAM's actions."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.opt_helpers import (
  apply_allowed,
  buf,
  buffers_for,
  check_compiled,
  kernels,
  loops_around_the_fill,  # noqa: E402
  matmul_ast,
  outputs_of,
  sink,
  sum_ast,
)
from support.server_helpers import recording

from compiler.codegen import get_program
from compiler.dtype import dtypes
from compiler.opt import Kernel, KernelOptError, Opt, OptOps, Target, hand_coded_optimizations
from compiler.opt.search import get_kernel_actions, kernel_actions
from compiler.opt.target import AVX2, AVX512, SSE
from compiler.runtime import compiled
from compiler.runtime.compiled import compile_kernel
from compiler.runtime.interpreter import interpret
from compiler.trace import recorder
from compiler.uop import AxisType, Ops, UOp, toposort
from vztrace.reader import TraceReader

CPU = Target(threads=2)
G, R = AxisType.LOOP, AxisType.REDUCE


def _run(k: Kernel, ast: UOp, threads: int = 1, reduce_len: int = 1) -> None:
  """k's optimized AST compiled and run on `threads` cores against the interpreter on the original AST."""
  bufs = buffers_for(ast, seed=3)
  want = [b.copy() for b in bufs]
  interpret(ast, want)
  got = [b.copy() for b in bufs]
  for i in outputs_of(ast):
    got[i][:] = np.nan  # the first block must overwrite, never read, what the output held
  compile_kernel(k.get_optimized_ast())(got, threads=threads)
  for i in outputs_of(ast):
    np.testing.assert_allclose(got[i], want[i], rtol=1e-5, atol=1e-5 * max(1, reduce_len))


def tiled_matmul(m: int, n: int, kk: int, cols: int = 8, rows: int = 4) -> tuple[UOp, Kernel]:
  """A matmul register-tiled as the heuristic does: columns and rows upcast, the column tiles outside the rows."""
  ast = matmul_ast(m, n, kk)
  k = Kernel(ast, CPU).apply_opts([Opt(OptOps.UPCAST, 1, cols), Opt(OptOps.UPCAST, 0, rows), Opt(OptOps.SWAP, 0, 1)])
  return ast, k


def _local(k: Kernel) -> UOp:
  return next(u for u in toposort(k.ast) if u.op is Ops.DEFINE_LOCAL)


def _staged_slot(k: Kernel) -> int:
  """The buffer the scratch is filled from."""
  fill = next(u for u in toposort(k.ast) if u.op is Ops.END).src[0]
  return next(u.arg for u in toposort(fill.src[1]) if u.op is Ops.DEFINE_GLOBAL)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m,n,kk,amt", [(64, 64, 64, 0), (64, 64, 64, 16), (96, 32, 40, 8), (48, 128, 24, 24),
                                        (40, 16, 96, 32), (8, 64, 128, 64)])
def test_staged_matmul_matches(m: int, n: int, kk: int, amt: int, threads: int):
  ast, k = tiled_matmul(m, n, kk)
  k.apply_opt(Opt(OptOps.STAGE, 0, amt))
  if threads > 1:
    k.apply_opt(Opt(OptOps.THREAD, 0, 2))  # each thread its own scratch (the column tiles split between them)
  # B's strip (8 columns), which the row tiles reuse; A's rows (4 rows) where the column tiles read more of them
  # (the loops are reordered: A's rows outside the column tiles)
  slot = 2 if (m // 4) * 8 >= (n // 8) * 4 else 1
  assert _staged_slot(k) == slot
  assert (AxisType.BLOCK in k.axis_types) == (amt not in (0, kk))
  assert _local(k).dtype.size == (amt or kk) * (8 if slot == 2 else 4)
  _run(k, ast, threads, kk)


def test_thread_split_of_the_rows_after_stage():
  ast, k = tiled_matmul(64, 32, 64)
  k.apply_opts([Opt(OptOps.STAGE, 0, 16), Opt(OptOps.THREAD, 2, 2)])  # axis 2: the rows (after the block axis)
  assert k.axis_types[0] is AxisType.THREAD
  _run(k, ast, 2, 64)


def test_without_the_swap_the_loops_are_reordered_for_the_staged_strip():
  ast = matmul_ast(32, 64, 48)
  k = Kernel(ast, CPU).apply_opts([Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.STAGE, 0, 16)])
  # rows were outside the column tiles: B's strip (8 rows x 8 columns read, against A's 8 x 4) is staged and the
  # column tiles move outside, then the blocks, then the rows
  assert _staged_slot(k) == 2 and k.full_shape[:3] == (8, 3, 8)
  _run(k, ast, 2, 48)


def test_a_row_strip_of_a_is_staged_where_the_columns_read_more_of_it():
  ast = matmul_ast(32, 256, 48)
  k = Kernel(ast, CPU).apply_opts([Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.STAGE, 0, 16)])
  assert _staged_slot(k) == 1  # 32 column tiles read A's rows, 8 row tiles B's columns
  _run(k, ast, 2, 48)


def test_the_block_axis_is_never_the_parallel_loop():
  # all columns in registers: the only loop outside the rows is the block axis, which must not be split
  ast = matmul_ast(64, 16, 64)
  k = Kernel(ast, CPU).apply_opts([Opt(OptOps.UPCAST, 1, 0), Opt(OptOps.STAGE, 0, 16)])
  assert k.axis_types[0] is AxisType.BLOCK
  prg = compile_kernel(k.get_optimized_ast()).program
  assert prg.par_size is None or all(u.arg[1] is not AxisType.BLOCK for u in prg.uops
                                     if u.op is Ops.RANGE and u.src[0] is prg.par_size)
  _run(k, ast, 2, 64)




@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_parallel_loop_opens_no_loop_around_a_fill_that_does_not_depend_on_it(threads: int, monkeypatch):
  # columns peeled (the remainder's store does not loop over the column tiles) and rows that divide: the row loop
  # is the one every store loops over, the parallel one, and B's strip does not depend on it. Opened first, around
  # the column tiles, it copied the strip again for every row tile (SSE matmul 1000, 1 thread: 4x slower); it stays
  # where the loop order puts it, in both nests (the main columns' and the remainder's), each bounded by the
  # kernel's (start, end), so the runtime's split still covers every row once
  monkeypatch.setattr(compiled, "MIN_WORK_PER_THREAD", 1)
  ast = matmul_ast(64, 8 * 5 + 3, 48)
  k = Kernel(ast, CPU).apply_opts([Opt(OptOps.PEEL, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.SWAP, 0, 1),
                                   Opt(OptOps.STAGE, 0, 0)])
  assert _staged_slot(k) == 2 and AxisType.THREAD not in k.axis_types
  prg = get_program(k.get_optimized_ast())
  loops, fill = loops_around_the_fill(k.get_optimized_ast())
  assert loops and all(r in fill.ranges for r in loops)
  rows = [u for u in prg.uops if u.op is Ops.RANGE and u.src[0] is prg.par_size]
  assert prg.par_extent() == 16 and len(rows) == 2 and all(r not in fill.ranges for r in rows)
  _run(k, ast, threads, 48)


def batched_matmul_ast(b: int, m: int, n: int, kk: int) -> UOp:
  z, i, j, r = UOp.range(b, 0, G), UOp.range(m, 1, G), UOp.range(n, 2, G), UOp.range(kk, 3, R)
  a = buf(1, b * m * kk).index(z * (m * kk) + i * kk + r).load()
  w = buf(2, b * kk * n).index(z * (kk * n) + r * n + j).load()
  return sink(buf(0, b * m * n).index(z * (m * n) + i * n + j).store((a * w).reduce(r)), name="bmm")


@pytest.mark.parametrize("threads", [1, 2])
def test_batched_matmul_in_the_heuristics_loop_order(threads: int):
  # the heuristic's order [column tiles, rows, batch]: B's strip depends on the batch, which STAGE moves outside the
  # rows ([columns, batch, block, rows])
  ast = batched_matmul_ast(4, 64, 64, 48)
  k = Kernel(ast, CPU).apply_opts([Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.SWAP, 0, 2),
                                   Opt(OptOps.STAGE, 0, 16)])
  assert _staged_slot(k) == 2 and k.full_shape[:4] == (8, 4, 3, 16)
  if threads > 1:
    k.apply_opt(Opt(OptOps.THREAD, 0, 2))
  _run(k, ast, threads, 48)


@pytest.mark.parametrize("threads", [1, 2])
def test_batched_matmul(threads: int):
  ast = batched_matmul_ast(3, 32, 32, 24)
  # batch, column tiles, rows: B's strip of one batch reused by its row tiles
  k = Kernel(ast, CPU).apply_opts([Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.SWAP, 1, 2),
                                   Opt(OptOps.STAGE, 0, 8)])
  assert _staged_slot(k) == 2
  if threads > 1:
    k.apply_opt(Opt(OptOps.THREAD, 0, 3))
  _run(k, ast, threads, 24)


def test_a_masked_load_is_staged_with_its_zeros():
  m, n, kk = 32, 32, 20
  i, j, r = UOp.range(m, 0, G), UOp.range(n, 1, G), UOp.range(kk, 2, R)
  a = buf(1, m * kk).index(i * kk + r).load()
  w = buf(2, kk * n).index(r * n + j, r.alu(Ops.CMPLT, kk - 3)).load()  # the last 3 rows of B read as 0 (a pad)
  ast = sink(buf(0, m * n).index(i * n + j).store((a * w).reduce(r)))
  k = Kernel(ast, CPU).apply_opts([Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.SWAP, 0, 1),
                                   Opt(OptOps.STAGE, 0, 10)])
  reads = [u for u in toposort(k.ast) if u.op is Ops.INDEX and u.src[0].op is Ops.AFTER]
  assert reads and all(len(u.src) == 2 for u in reads)  # the reads of the scratch carry no mask
  _run(k, ast, 2, kk)


def _conv_ast(padding: int) -> UOp:
  from compiler.schedule.rangeify import create_schedule
  from compiler.tensor import Tensor
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((2, 8, 12, 12)).astype(np.float32))
  w = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
  sched, _ = create_schedule([x.conv2d(w, padding=padding).uop])
  return next(si.ast for si in sched if any(u.op is Ops.REDUCE for u in toposort(si.ast)))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("padding", [0, 1])
def test_conv2d(padding: int, threads: int):
  ast = _conv_ast(padding)
  # 8 output channels x 2 output columns; the weights' strip (input channels x 3 x 3 x 8 channels) staged in blocks
  # of 4 input channels, the channel tiles moved outside the batch and the rows
  k = Kernel(ast, CPU).apply_opts([Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 3, 2), Opt(OptOps.STAGE, 0, 4)])
  assert _staged_slot(k) == 2 and AxisType.BLOCK in k.axis_types
  if threads > 1:
    k.apply_opt(Opt(OptOps.THREAD, 0, 2))
  _run(k, ast, threads, 72)


def test_refusals():
  ast, k = tiled_matmul(64, 64, 64)
  with pytest.raises(KernelOptError, match="does not divide"):
    k.copy().apply_opt(Opt(OptOps.STAGE, 0, 24))
  with pytest.raises(KernelOptError, match="exceeds"):  # a scratch beyond half of L2
    Kernel(ast, replace(CPU, l2_bytes=2048)).apply_opts(k.applied_opts + [Opt(OptOps.STAGE, 0, 0)])
  big_ast, big = tiled_matmul(64, 16, 1 << 16)  # a 2 MiB strip: beyond any stack's scratch, however large L2 is
  with pytest.raises(KernelOptError, match="exceeds 1048576"):
    Kernel(big_ast, replace(CPU, l2_bytes=64 << 20)).apply_opts(big.applied_opts + [Opt(OptOps.STAGE, 0, 0)])
  with pytest.raises(KernelOptError, match="no load"):  # a row sum: nothing is read again
    Kernel(sum_ast(64, 64), CPU).apply_opt(Opt(OptOps.STAGE, 0, 16))
  staged = k.copy()
  staged.apply_opt(Opt(OptOps.STAGE, 0, 16))
  for opt in (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.STAGE, 0, 8), Opt(OptOps.SWAP, 0, 2)):
    with pytest.raises(KernelOptError, match="only THREAD may follow STAGE"):
      staged.copy().apply_opt(opt)
  with pytest.raises(KernelOptError, match="global axes"):  # the block axis is not a global to split
    staged.copy().apply_opt(Opt(OptOps.THREAD, 1, 2))


def test_blocks_need_the_sum_stored_as_it_is():
  i, j, r = UOp.range(32, 0, G), UOp.range(32, 1, G), UOp.range(32, 2, R)
  a, w = buf(1, 1024).index(i * 32 + r).load(), buf(2, 1024).index(r * 32 + j).load()
  ast = sink(buf(0, 1024).index(i * 32 + j).store((a * w).reduce(r).maximum(0.0)))  # relu(matmul)
  opts = [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.SWAP, 0, 1)]
  with pytest.raises(KernelOptError, match="sum stored as it is"):
    Kernel(ast, CPU).apply_opts(opts + [Opt(OptOps.STAGE, 0, 8)])
  k = Kernel(ast, CPU).apply_opts(opts + [Opt(OptOps.STAGE, 0, 0)])  # one block: nothing accumulates
  _run(k, ast, 2, 32)


def test_stage_is_traced(tmp_path):
  with recording(tmp_path / "t.vztrace") as path, recorder.trace_context("kernel r", kind="kernel"):
    _, k = tiled_matmul(32, 32, 32)
    k.apply_opt(Opt(OptOps.STAGE, 0, 16))
    with pytest.raises(KernelOptError):
      k.apply_opt(Opt(OptOps.UPCAST, 0, 2))
  recs = list(TraceReader(path))
  opts = [(r["op"], r["ok"]) for r in recs if r["t"] == "opt"]
  assert opts[-2:] == [("STAGE", True), ("UPCAST", False)]
  stage = [r for r in recs if r["t"] == "opt" and r["op"] == "STAGE"][0]
  assert "green" in stage["colors"]  # the block axis, shown in the kernel panel
  assert "apply STAGE(0, 16)" in [r["name"] for r in recs if r["t"] == "rw_begin"]


def _heuristic(tgt: Target, m: int, n: int, kk: int) -> Kernel:
  return hand_coded_optimizations(Kernel(matmul_ast(m, n, kk), replace(tgt, threads=1)))


@pytest.mark.parametrize("tgt", [SSE, AVX2, AVX512], ids=["sse", "avx2", "avx512"])
def test_heuristic_stages_strips_larger_than_half_of_l1(tgt: Target):
  k = _heuristic(tgt, 1024, 1024, 1024)
  stage = [o for o in k.applied_opts if o.op is OptOps.STAGE]
  assert len(stage) == 1
  scratch = _local(k).dtype.size * 4
  assert tgt.l1_bytes < 2 * 1024 * scratch // (stage[0].arg or 1024) and scratch <= tgt.l2_bytes // 4
  small = _heuristic(tgt, 128, 128, 128)  # B's strip (128 x tile columns) stays in L1: nothing to copy
  assert not any(o.op is OptOps.STAGE for o in small.applied_opts)


def test_heuristic_blocks_a_long_reduce_to_the_l2_budget():
  k = _heuristic(replace(AVX2, l2_bytes=128 << 10), 256, 256, 4096)
  stage = next(o for o in k.applied_opts if o.op is OptOps.STAGE)
  assert 0 < stage.arg < 4096 and AxisType.BLOCK in k.axis_types
  assert _local(k).dtype.size * 4 <= (128 << 10) // 4


@pytest.mark.parametrize("tgt", [SSE, AVX2, AVX512], ids=["sse", "avx2", "avx512"])
def test_heuristic_staged_matmul_is_right(tgt: Target):
  m, n, kk = 128, 512, 768  # B over half of L2: the column tiles go outside the rows, B's strip is staged
  ast = matmul_ast(m, n, kk)
  k = hand_coded_optimizations(Kernel(ast, replace(tgt, threads=2, l1_bytes=16 << 10)))
  assert any(o.op is OptOps.STAGE for o in k.applied_opts)
  bufs = buffers_for(ast, seed=1)
  compile_kernel(k.get_optimized_ast())(bufs, threads=2)
  want = bufs[1].reshape(m, kk).astype(np.float64) @ bufs[2].reshape(kk, n)
  np.testing.assert_allclose(bufs[0].reshape(m, n), want, rtol=1e-4, atol=1e-3)


def test_beam_tries_stage():
  assert any(o.op is OptOps.STAGE for o in kernel_actions(Kernel(matmul_ast(8, 8, 8), CPU)))
  _, k = tiled_matmul(64, 64, 256)
  staged = [k2 for k2 in get_kernel_actions(k, include_0=False).values()
            if k2.applied_opts[-1].op is OptOps.STAGE]
  assert {k2.applied_opts[-1].arg for k2 in staged} >= {0, 64, 128}


stage_opts = st.lists(st.tuples(st.sampled_from([OptOps.UPCAST, OptOps.UNROLL, OptOps.SWAP, OptOps.STAGE,
                                                 OptOps.THREAD]),
                                st.integers(0, 3), st.sampled_from([0, 2, 3, 4, 8])), min_size=1, max_size=6)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(kernels(), stage_opts)
def test_random_opts_with_stage_keep_results_compiled(ast, seq):
  check_compiled(ast, apply_allowed(Kernel(ast, CPU), seq), threads=2)


@pytest.mark.parametrize("tname,m,n,kk", [("sse", 97, 384, 333), ("avx2", 97, 384, 333), ("avx2", 130, 768, 200),
                                          ("avx512", 130, 768, 200), ("sse", 200, 96, 1031)])
def test_heuristic_stages_odd_sizes_right(tname: str, m: int, n: int, kk: int):
  # sizes no tile divides (odd reduce lengths, rows of 97 and 130): the whole reduce is staged, tiles shrink
  tgt = {"sse": SSE, "avx2": AVX2, "avx512": AVX512}[tname]
  ast = matmul_ast(m, n, kk)
  k = hand_coded_optimizations(Kernel(ast, replace(tgt, threads=2, l1_bytes=16 << 10)))
  assert Opt(OptOps.STAGE, 0, kk) in k.applied_opts
  bufs = buffers_for(ast, seed=2)
  compile_kernel(k.get_optimized_ast())(bufs, threads=2)
  want = bufs[1].reshape(m, kk).astype(np.float64) @ bufs[2].reshape(kk, n)
  np.testing.assert_allclose(bufs[0].reshape(m, n), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.float64, dtypes.float16], ids=str)
def test_other_dtypes_stage_and_accumulate(dt):
  m = n = kk = 32
  i, j, r = UOp.range(m, 0, G), UOp.range(n, 1, G), UOp.range(kk, 2, R)
  a, w = buf(1, m * kk, dt).index(i * kk + r).load(), buf(2, kk * n, dt).index(r * n + j).load()
  ast = sink(buf(0, m * n, dt).index(i * n + j).store((a * w).reduce(r)))
  k = Kernel(ast, CPU).apply_opts([Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.SWAP, 0, 1),
                                   Opt(OptOps.STAGE, 0, 8)])
  assert _local(k).dtype.base == dt
  bufs = [(x * 3).astype(dt.np) for x in buffers_for(ast, seed=1)]
  want = [x.copy() for x in bufs]
  interpret(ast, want)
  compile_kernel(k.get_optimized_ast())(bufs, threads=2)
  tol = 0.05 if dt == dtypes.float16 else 1e-9  # half: each block's partial sum is rounded to half once more
  np.testing.assert_allclose(bufs[0].astype(np.float64), want[0].astype(np.float64), rtol=tol, atol=tol * 10)
