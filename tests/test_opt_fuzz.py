"""Fuzz: random valid opt sequences applied to random kernels never change what the kernel computes."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_opt_helpers import buf, buffers_for, evaluate, outputs_of, sink

from compiler.opt import Kernel, KernelOptError, Opt, OptOps, Target, hand_coded_optimizations
from compiler.runtime.interpreter import interpret
from compiler.uop import AxisType, Ops, UOp

SIZES = [2, 3, 4, 5, 6, 8, 12]
CPU = Target(threads=2)


@st.composite
def kernels(draw) -> UOp:
  """out[globals] = [reduce_r] combine(loads of inputs laid out over random subsets/orders of the axes)."""
  shape = draw(st.lists(st.sampled_from(SIZES), min_size=1, max_size=2))
  gl = [UOp.range(s, i, AxisType.GLOBAL) for i, s in enumerate(shape)]
  red_op = draw(st.sampled_from([None, Ops.ADD, Ops.ADD, Ops.MAX]))
  red = [UOp.range(draw(st.sampled_from([2, 3, 4, 8, 16])), len(gl), AxisType.REDUCE)] if red_op else []
  axes = gl + red
  loads = []
  for slot in range(1, draw(st.integers(1, 3)) + 1):
    order = draw(st.permutations(axes))
    used = [r for r in order if r in red or draw(st.booleans())] or order[:1]
    idx, stride = UOp.const(gl[0].dtype, 0), 1
    for r in reversed(used):
      idx, stride = idx + r * stride, stride * r.src[0].arg
    valid = None
    if draw(st.integers(0, 3)) == 0:  # a masked read, as a pad makes
      r = draw(st.sampled_from(used))
      valid = r.alu(Ops.CMPLT, max(1, r.src[0].arg - 1))
    loads.append(buf(slot, stride).index(idx, valid).load())
  value = loads[0]
  for x in loads[1:]:
    value = value.alu(draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX, Ops.SUB])), x)
  if draw(st.booleans()):
    value = value * 2.0 + 1.0
  if red_op:
    value = value.reduce(*red, op=red_op)
  out_idx, stride = UOp.const(gl[0].dtype, 0), 1
  for r in reversed(gl):
    out_idx, stride = out_idx + r * stride, stride * r.src[0].arg
  return sink(buf(0, math.prod(shape)).index(out_idx).store(value))


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


def apply_allowed(k: Kernel, seq: list[tuple[OptOps, int, int]]) -> Kernel:
  """k with each (op, axis, arg) of seq applied that it accepts, the refused ones skipped (SWAP's arg: axis + 1)."""
  for op, axis, arg in seq:
    try:
      k.apply_opt(Opt(op, axis, axis + 1 if op is OptOps.SWAP else arg))
    except KernelOptError:
      continue
  return k


def check_compiled(ast: UOp, k: Kernel, threads: int | None = None) -> None:
  """k's optimized AST, JIT-compiled and run on `threads` cores (None: all), computes what the evaluator gives ast."""
  from compiler.runtime import compile_kernel
  bufs = buffers_for(ast)
  compile_kernel(k.get_optimized_ast())(bufs, threads=threads)
  for x, y in zip(evaluate(ast), [bufs[i] for i in outputs_of(ast)], strict=True):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4, err_msg=str(k.applied_opts))


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
