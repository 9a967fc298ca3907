"""Masked vector loads (expander's `vector_load`, lowerer's `masked_load`, LLVM's `llvm.masked.load`, OpenCL's lane
selects): lanes of a padded row read side by side, each only where its own condition holds, so no lane reads
outside its buffer and an invalid lane is +0.0 whatever memory holds; lanes that all read one address under
different conditions are one load broadcast and selected. Checked bit for bit against the interpreter at a row's
edges (all lanes invalid, all valid, mixed, the first lane's address before the buffer, the last one's past it),
with -0.0 and NaN read through and NaN next to invalid lanes, on LLVM and OpenCL; and a padded conv and its input
gradient (NESTED_REDUCE=1) under the heuristics against numpy in float64."""
from __future__ import annotations

import numpy as np
import pytest
from support.opt_helpers import buf, sink
from support.tensor_values import same_bits

from compiler.codegen.opencl import cl_program
from compiler.codegen.program import get_program
from compiler.dtype import dtypes
from compiler.engine import optimize
from compiler.opt import Kernel, Opt, OptOps, Target
from compiler.opt.target import cl_target
from compiler.runtime import compile_kernel
from compiler.runtime.buffer import Buffer
from compiler.runtime.interpreter import interpret
from compiler.runtime.opencl import cl_kernel
from compiler.tensor import Tensor
from compiler.uop import Ops, UOp

N, LO, HI = 16, 2, 10  # out[i] reads b[i - LO] where LO <= i < HI: b holds HI - LO values


def _edge_ast() -> UOp:
  """out0[i] = b[i - 2] where 2 <= i < 10, else 0; out1[i] = out0[i] + a[0] under the same condition (a broadcast
  read: one address, each lane's own condition)."""
  i = UOp.range(N, 0)
  valid = i.alu(Ops.CMPLT, LO).logical_not() & i.alu(Ops.CMPLT, HI)
  b = buf(3, HI - LO).index(i - LO, valid).load()
  a = buf(2, 1).index(UOp.const(i.dtype, 0), valid).load()
  return sink(buf(0, N).index(i).store(b), buf(1, N).index(i).store(b + a), name="edges")


def _inputs() -> list[np.ndarray]:
  b = np.array([-0.0, 1.5, -2.0, np.nan, 3.0, -0.0, 4.0, np.nan], np.float32)  # signed zeros and NaNs at the edges
  return [np.full(N, 7.0, np.float32), np.full(N, 7.0, np.float32), np.array([np.nan], np.float32), b]


def _masked_loads(uops) -> list[UOp]:
  return [u for u in uops if u.op is Ops.LOAD and len(u.src) > 1]


@pytest.mark.parametrize("lanes", [4, 16])
def test_masked_lanes_at_a_rows_edges_as_the_interpreter(lanes):
  """UPCAST 4: the four vectors are mixed (two invalid lanes, the first at index -2), all valid, mixed, all invalid
  (every address past b); UPCAST 16: one vector, its mask constant. A masked-off lane is +0.0 (b's -0.0 and NaN
  pass where valid) and a's NaN reaches only the valid lanes."""
  ast = Kernel(_edge_ast(), Target(threads=1, vector_floats=8, cpu="test-cpu")).apply_opts(
    [Opt(OptOps.UPCAST, 0, lanes)]).get_optimized_ast()
  want = _inputs()
  interpret(ast, want)
  uops = get_program(ast).uops
  assert [str(u.dtype) for u in _masked_loads(uops)] == [f"float32x{lanes}"]  # b's
  assert [str(u.dtype) for u in uops if u.op is Ops.LOAD and u.src[0].src[0].arg == 2] == ["float32"]  # a's: one
  assert "@llvm.masked.load.v%df32" % lanes in get_program(ast).src
  got = _inputs()
  compile_kernel(ast)(got)
  ref = np.where((np.arange(N) >= LO) & (np.arange(N) < HI), np.pad(_inputs()[3], (LO, N - HI)), np.float32(0))
  same_bits(want[0], ref)
  assert not np.signbit(want[0][:LO]).any() and not np.isnan(want[1][:LO]).any()
  for k in (0, 1):
    same_bits(got[k], want[k])


def test_masked_lanes_on_opencl_as_the_interpreter():
  """The same kernel as OpenCL C (no masked vector load there: each lane read under its own condition)."""
  ast = Kernel(_edge_ast(), cl_target("test", 256, 65536)).apply_opts([Opt(OptOps.UPCAST, 0, 4)]).get_optimized_ast()
  assert [str(u.dtype) for u in _masked_loads(cl_program(ast).uops)] == ["float32x4"]
  want = _inputs()
  interpret(ast, want)
  bufs = [Buffer(dtypes.float32, a.size, data=a) for a in _inputs()]
  cl_kernel(ast)(bufs)
  for k in (0, 1):
    same_bits(bufs[k].np, want[k])


def test_padded_conv_and_its_input_gradient_match_numpy(monkeypatch):
  """A 3x3 conv with padding 1 (its input rows read by 12-lane masked loads) and its input gradient joined with the
  per-window gradient (NESTED_REDUCE=1: the window sum's reads are masked lanes and broadcast weights), each kernel
  under the heuristics, against numpy in float64."""
  monkeypatch.setenv("NESTED_REDUCE", "1")
  monkeypatch.setenv("SCHEDULE_CACHE", "0")
  rng = np.random.default_rng(0)
  xn, wn, gn = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 12, 12), (4, 3, 3, 3), (2, 4, 12, 12)))
  x = Tensor(xn, requires_grad=True)
  y = x.conv2d(Tensor(wn), padding=1)
  (y * Tensor(gn)).sum().backward()
  masked = [len(_masked_loads(get_program(optimize(si.ast)).uops)) for si in y.schedule() + x.grad.schedule()]
  assert any(masked), masked  # (which kernels get them is the heuristics' choice of upcasts)
  xp = np.pad(xn.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # (b, c, 12, 12, 3, 3)
  want_y = np.einsum("bcyxij,ocij->boyx", win, wn.astype(np.float64))
  gp = np.pad(gn.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  gwin = np.lib.stride_tricks.sliding_window_view(gp, (3, 3), axis=(2, 3))[..., ::-1, ::-1]  # the flipped kernel
  want_dx = np.einsum("boyxij,ocij->bcyx", gwin, wn.astype(np.float64))
  np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(x.grad.numpy(), want_dx, rtol=1e-5, atol=1e-5)
