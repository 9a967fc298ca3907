"""Fuzz: random valid opt sequences applied to random kernels never change what the kernel computes."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.opt_helpers import (  # noqa: E402
  apply_allowed,
  buffers_for,
  check_compiled,
  evaluate,
  kernels,
  outputs_of,
)

from compiler.opt import Kernel, OptOps, Target, hand_coded_optimizations
from compiler.runtime.interpreter import interpret
from compiler.uop import UOp

CPU = Target(threads=2)




opts = st.lists(st.tuples(st.sampled_from([OptOps.UPCAST, OptOps.UNROLL, OptOps.THREAD, OptOps.PADTO, OptOps.SWAP]),
                          st.integers(0, 3), st.sampled_from([0, 2, 3, 4, 8])), min_size=1, max_size=6)


def interpreted(ast: UOp) -> list[np.ndarray]:
  """The outputs by the project's reference interpreter (the tests' own evaluator judges the unoptimized AST)."""
  bufs = buffers_for(ast)
  interpret(ast, bufs)
  return [bufs[i] for i in outputs_of(ast)]


def check_same(a: UOp, b: UOp, what: object) -> None:
  for x, y in zip(evaluate(a), interpreted(b), strict=True):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5, err_msg=str(what))






@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(kernels(), opts)
def test_random_opts_keep_results(ast, seq):
  k = apply_allowed(Kernel(ast, CPU), seq)
  check_same(ast, k.get_optimized_ast(), k.applied_opts)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(kernels())
def test_heuristics_keep_results(ast):
  k = hand_coded_optimizations(Kernel(ast, Target(threads=2, vector_floats=4)))
  check_same(ast, k.get_optimized_ast(), k.applied_opts)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(kernels(), opts)
def test_random_opts_keep_results_compiled(ast, seq):
  check_compiled(ast, apply_allowed(Kernel(ast, CPU), seq))
