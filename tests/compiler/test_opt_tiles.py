"""Register tiles of every target model, compiled by LLVM and run, against the interpreter on odd sizes: tiles
that do not divide a size, remainders, sizes of 1, and kernels too small to tile."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.opt_helpers import (
  buffers_for,
  matmul_ast,
  row_reduce_ast,  # noqa: E402
  sum_ast,
)

from compiler.opt import Kernel, hand_coded_optimizations
from compiler.opt.target import AVX2, AVX512, SSE
from compiler.runtime.compiled import compile_kernel
from compiler.runtime.interpreter import interpret
from compiler.uop import AxisType, Ops

TARGETS = {"sse": SSE, "avx2": AVX2, "avx512": AVX512}
SIZES = [(1, 1, 1), (7, 17, 63), (17, 65, 7), (63, 64, 65), (65, 63, 17), (96, 384, 33), (130, 48, 1), (64, 1, 9)]


def _check(ast, target, reduce_len: int = 1) -> Kernel:
  """Heuristic opts for `target`, compiled and run, against the interpreter (to rounding: the sum order differs
  by about an ulp of the result per reduced term)."""
  k = hand_coded_optimizations(Kernel(ast, replace(target, threads=2)))
  bufs = buffers_for(ast, seed=1)
  want = [b.copy() for b in bufs]
  interpret(ast, want)
  got = [b.copy() for b in bufs]
  compile_kernel(k.get_optimized_ast())(got)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1, reduce_len))
  return k


@pytest.mark.parametrize("tname", TARGETS)
@pytest.mark.parametrize("m,n,kk", SIZES)
def test_matmul_tiles_match_the_interpreter(tname: str, m: int, n: int, kk: int):
  _check(matmul_ast(m, n, kk), TARGETS[tname], kk)


@pytest.mark.parametrize("tname", TARGETS)
def test_tiled_and_swapped_matmul_matches_the_interpreter(tname: str):
  k = _check(matmul_ast(96, 96, 40), TARGETS[tname], 40)
  assert k.upcasted >= 2  # really tiled: rows and columns


@pytest.mark.parametrize("tname", TARGETS)
@pytest.mark.parametrize("m,kk", [(1, 1), (7, 65), (63, 17), (1025, 3)])
def test_reduce_tiles_match_the_interpreter(tname: str, m: int, kk: int):
  _check(sum_ast(m, kk), TARGETS[tname], kk)


@pytest.mark.parametrize("n", [5, 7, 10, 13])
def test_a_short_output_axis_no_vector_divides_is_upcast_whole(n: int):
  # a layer of 10 outputs: each row's 10 accumulators side by side, not 10 scalar loops
  k = _check(matmul_ast(64, n, 256), AVX512, 256)
  assert n in [s for s, t in zip(k.full_shape, k.axis_types) if t.name == "UPCAST"]




@pytest.mark.parametrize("tname", TARGETS)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
@pytest.mark.parametrize("m,kk", [(256, 1024), (7, 65), (63, 36), (1, 1024), (5, 8 * 13)])
def test_a_unit_stride_reduce_is_unrolled_into_vectors(tname: str, op: Ops, m: int, kk: int):
  # no 4 scalar accumulators and no rows upcast around it: unrolled by two cache lines (or one, or a vector) for
  # codegen's vector accumulators, the remainder peeled when none divides the row
  tgt = TARGETS[tname]
  k = _check(row_reduce_ast(m, kk, op), tgt, kk)
  assert AxisType.UPCAST not in k.axis_types
  unrolled = [s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.UNROLL]
  amts = (2 * tgt.line_floats, tgt.line_floats, tgt.vector_floats)
  # when none divides the row, the largest shorter than it with the remainder peeled (PEEL)
  want = next(([a] for a in amts if kk % a == 0), None) or next(([a] for a in amts if a < kk), [])
  assert unrolled == want
  if want and kk // want[0] > 1:  # (one tile and a remainder: straight-line code, no loop to carry vectors)
    assert f"phi <{min(16, want[0])} x float>" in compile_kernel(k.get_optimized_ast()).program.src
