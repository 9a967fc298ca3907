"""hand_coded_optimizations on the CPU target: register tiles, unrolled reduces, vectors, threads."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.opt_helpers import (
  buffers_for,
  elementwise_ast,
  evaluate,
  loops_around_the_fill,
  matmul_ast,
  stack_ast,
  sum_ast,
  tile,  # noqa: E402
)

from compiler.opt import Kernel, Opt, OptOps, Target, hand_coded_optimizations
from compiler.opt.target import AVX2, AVX512, SSE
from compiler.runtime.compiled import compile_kernel
from compiler.uop import AxisType

A = AxisType
CPU2 = Target(threads=2, vector_floats=8)




def test_matmul_gets_a_register_tile_of_vectors_and_threads():
  # AVX2-like: 8-float vectors, 16 registers: one 64-byte line of columns (2 vectors) x 6 rows = 12 accumulators,
  # the 512 % 6 rows left peeled; column tiles outside row tiles, B's strip (512 x 16, over half of a 32 KiB L1)
  # staged contiguous (issue 16's 6x16 tile with B contiguous), threads over the columns
  k = hand_coded_optimizations(Kernel(matmul_ast(512, 512, 512), CPU2))
  assert tile(k) == {1: 16, 512: 6}
  assert k.axis_types[0] is A.THREAD and k.full_shape[0] == 2
  assert k.applied_opts == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PEEL, 0, 6), Opt(OptOps.SWAP, 0, 1),
                            Opt(OptOps.STAGE, 0, 512), Opt(OptOps.THREAD, 0, 2)]
  # AVX-512-like: 16-float vectors, 32 registers: 8 rows x two vectors = 16 accumulators
  k = hand_coded_optimizations(Kernel(matmul_ast(512, 512, 512), Target(threads=2, vector_floats=16, vector_regs=32)))
  assert tile(k) == {1: 16, 16: 2, 512: 8} and A.UNROLL not in k.axis_types  # columns j16 + 16*j2
  assert k.full_shape == (2, 8, 64, 512, 16, 8, 2)
  # SSE-like: 4-float vectors: 4 vectors of columns leave room for 2 rows; 8 accumulators fill half the registers,
  # so the reduce is not unrolled (4 times the B vectors live: 6.7 -> 10.4 ms with TARGET_ISA=sse on Zen 4)
  k = hand_coded_optimizations(Kernel(matmul_ast(512, 512, 512), Target(threads=1, vector_floats=4, vector_regs=16)))
  assert tile(k) == {1: 16, 512: 2} and A.UNROLL not in k.axis_types
  assert k.applied_opts == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.SWAP, 0, 1),
                            Opt(OptOps.STAGE, 0, 512)]


def test_tile_sizes_follow_divisibility():
  # columns: one line (16 floats) whether or not it divides them, the remainder peeled (not 8 or 4 that divide);
  # rows: the most the registers hold (6), peeled where 6 does not divide them (256)
  k = hand_coded_optimizations(Kernel(matmul_ast(256, 40, 64), CPU2))
  assert tile(k) == {1: 16, 40: 6} and k.applied_opts[:2] == [Opt(OptOps.PEEL, 1, 16), Opt(OptOps.PEEL, 0, 6)]
  k = hand_coded_optimizations(Kernel(matmul_ast(144, 36, 64), CPU2))
  assert tile(k) == {1: 16, 36: 6}
  k = hand_coded_optimizations(Kernel(matmul_ast(162, 36, 64), CPU2))
  assert tile(k) == {1: 16, 36: 6}
  # too small to tile: the output has fewer than 1024 elements
  assert tile(hand_coded_optimizations(Kernel(matmul_ast(16, 32, 64), CPU2))) == {1: 8}


def test_columns_take_a_vector_where_a_lines_remainder_is_not_whole_vectors():
  # 30 columns: 16 + 14 left 14 for the scalar remainder (conv2d's output rows, 6.7x slower on Zen 3); 3x8 + 6 leaves 6,
  # and 8 accumulators fit 8 rows that divide 256; with 40 the line's remainder (8) is one vector: the line stays
  k = hand_coded_optimizations(Kernel(matmul_ast(256, 30, 256), CPU2))
  assert tile(k) == {1: 8, 30: 8} and k.applied_opts[:2] == [Opt(OptOps.PEEL, 1, 8), Opt(OptOps.UPCAST, 0, 8)]
  k = hand_coded_optimizations(Kernel(matmul_ast(256, 31, 256), CPU2))
  assert k.applied_opts[0] == Opt(OptOps.PEEL, 1, 8)
  # with 16-float vectors (AVX-512) the line is one vector: unchanged
  k = hand_coded_optimizations(Kernel(matmul_ast(256, 30, 256), Target(threads=2, vector_floats=16, vector_regs=32)))
  assert k.applied_opts[0] == Opt(OptOps.PEEL, 1, 16)


def test_elementwise_gets_a_vector_along_the_unit_stride_axis_not_a_tile():
  k = hand_coded_optimizations(Kernel(elementwise_ast(1024, 4096), CPU2))
  # (no THREAD: its rows are the first loop, which the runtime splits chunk by chunk itself)
  assert k.applied_opts == [Opt(OptOps.UPCAST, 1, 8)]
  assert k.colors() == ["blue", "blue", "yellow"]


def test_small_kernels_are_not_threaded():
  k = hand_coded_optimizations(Kernel(elementwise_ast(8, 16), CPU2))
  assert A.THREAD not in k.axis_types
  k1 = hand_coded_optimizations(Kernel(matmul_ast(512, 512, 512), Target(threads=1)))
  assert A.THREAD not in k1.axis_types


def test_masked_small_axes_are_upcast_first():
  k = hand_coded_optimizations(Kernel(stack_ast(64), CPU2))
  assert k.applied_opts[0] == Opt(OptOps.UPCAST, 0, 0)
  assert k.axis_types[-len(k.applied_opts):] == [A.UPCAST] * len(k.applied_opts)


def test_transposed_sum_unrolls_and_vectorizes_the_contiguous_output_axis():
  k = hand_coded_optimizations(Kernel(sum_ast(4096, 4096), CPU2))
  assert Opt(OptOps.UNROLL, 0, 4) in k.applied_opts and Opt(OptOps.UPCAST, 0, 8) in k.applied_opts


def test_small_reduce_is_fully_unrolled_and_results_hold():
  ast = sum_ast(8, 24)
  k = hand_coded_optimizations(Kernel(ast, CPU2))
  assert k.applied_opts[0] == Opt(OptOps.UNROLL, 0, 0) and A.REDUCE not in k.axis_types
  np.testing.assert_allclose(evaluate(k.get_optimized_ast())[0], evaluate(ast)[0], rtol=1e-5)


@pytest.mark.parametrize("target", [SSE, AVX2, AVX512], ids=["SSE", "AVX2", "AVX512"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [1000, 1008, 840])
def test_b_is_staged_once_per_column_tile_where_the_columns_are_peeled(target, threads, n):
  # peeled columns (a remainder store that does not loop over the column tiles) with rows that divide made the row
  # loop the one every store loops over, which codegen opens first: B's strip was copied again for every row tile
  # (matmul 1000, AVX-512, 1 thread: 18 ms; rows peeled too: 8.4 ms). Every loop around the copy, but a THREAD split
  # (each thread has its own scratch), must be one the copied tile depends on: where no row tile that fits leaves a
  # remainder (SSE's 2 rows; 840 rows on AVX2, which 2..6 divide) codegen keeps the row loop inside the column tiles
  # (compiler/codegen/linearizer.py): 1 thread on Zen 5, SSE 1000 61.0 -> 14.6 ms, AVX2 840 16.5 -> 8.3 ms
  from compiler.codegen import get_program
  tgt = dataclasses.replace(target, threads=threads)
  k = hand_coded_optimizations(Kernel(matmul_ast(n, n, n), tgt))
  # (and on two threads something is split: a THREAD axis, or a loop every store loops over)
  assert threads == 1 or get_program(k.get_optimized_ast()).par_size is not None, k.applied_opts
  found = loops_around_the_fill(k.get_optimized_ast())
  assert found is not None or Opt(OptOps.STAGE, 0, n) not in k.applied_opts
  if found is not None:
    loops, fill = found
    assert all(r in fill.ranges for r in loops if r.arg[1] is not A.THREAD), k.applied_opts


@pytest.mark.parametrize("tgt,n,want", [
  # AVX2: 6 peeled rows leave 83 row tiles and 31 column tiles (500 = 31 x 16 + 4), which two threads divide
  # neither of: 5 rows that divide 500 (the row loop every store's), or for 499 4 peeled rows (124 row tiles)
  (AVX2, 500, [Opt(OptOps.PEEL, 1, 16), Opt(OptOps.UPCAST, 0, 5), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.STAGE, 0, 500),
               Opt(OptOps.THREAD, 1, 2)]),
  (AVX2, 499, [Opt(OptOps.PEEL, 1, 16), Opt(OptOps.PEEL, 0, 4), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.STAGE, 0, 499),
               Opt(OptOps.THREAD, 1, 2)]),
  # SSE: only 2 rows fit, 249 row tiles and 31 column tiles: the split peels an axis' rest, which cannot follow
  # STAGE, so the threads go first
  (SSE, 499, [Opt(OptOps.PEEL, 1, 16), Opt(OptOps.PEEL, 0, 2), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.THREAD, 0, 2),
              Opt(OptOps.STAGE, 0, 499)]),
])
def test_odd_matmuls_still_split_across_threads(tgt: Target, n: int, want: list[Opt]):
  # B (n x n floats) outgrows half of L2: column tiles outside the rows, with rows chosen so two threads split them
  tgt = dataclasses.replace(tgt, threads=2, l2_bytes=512 << 10)
  k = hand_coded_optimizations(Kernel(matmul_ast(n, n, n), tgt))
  assert k.applied_opts == want
  bufs = buffers_for(k.ast, seed=2)
  compile_kernel(k.get_optimized_ast())(bufs, threads=2)
  np.testing.assert_allclose(bufs[0].reshape(n, n), bufs[1].reshape(n, n) @ bufs[2].reshape(n, n), rtol=1e-4,
                             atol=1e-3)
  one = hand_coded_optimizations(Kernel(matmul_ast(n, n, n), dataclasses.replace(tgt, threads=1)))
  assert not any(o.op is OptOps.THREAD for o in one.applied_opts)
  if tgt.vector_floats == 8:  # one thread keeps the most rows the registers hold (6, peeled)
    assert Opt(OptOps.PEEL, 0, 6) in one.applied_opts
