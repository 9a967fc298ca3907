"""The TC opt (compiler/opt/tc.py): a matmul reshaped around a tensor core's fragment. TC=2 (the shape, a plain
multiply-add) on the LLVM backend, TC=1 on OpenCL (pocl) with the WMMA emulated in the kernel source with the real
element layout; values against float64 numpy, the refusals with their reasons, the layouts against the PTX ISA's
fragment figures, and the trace."""
from __future__ import annotations

import numpy as np
import pytest
from support.server_helpers import recording

from compiler.codegen.opencl import cl_program
from compiler.opt import Kernel, KernelOptError, Opt, OptOps
from compiler.opt.heuristic import hand_coded_optimizations
from compiler.opt.search import kernel_actions
from compiler.opt.target import cl_target, host_target
from compiler.opt.tc import NV_1688_FLOAT, NV_16816_HALF
from compiler.runtime.buffer import Buffer
from compiler.runtime.compiled import compile_kernel
from compiler.runtime.interpreter import InterpretedKernel, InterpreterError
from compiler.runtime.opencl import ClKernel, get_device
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.uop import AxisType, Ops, toposort
from vztrace.reader import TraceReader

CL = cl_target("test", 256, 1 << 15)
RNG = np.random.default_rng(33)


def _item(fn, *arrays: np.ndarray):
  (si,) = create_schedule([fn(*[Tensor(a) for a in arrays]).uop])[0]
  return si


def _run(si, ast, device: str) -> np.ndarray:
  out = [Buffer(b.dtype, b.size) for b in si.bufs]
  for o, b in zip(out, si.bufs):
    o.ensure_allocated(zero=True)
    if b.allocated:
      o.np[:] = b.np
  if device == "cl":
    ClKernel(cl_program(ast), get_device())(out)
  elif device == "interp":
    InterpretedKernel(ast)(out)
  else:
    compile_kernel(ast)(out)
  return out[0].np.copy()


def _matmul(shape_a, shape_b, dt, target, opts, device):
  """(result as float64, float64 reference, the Kernel) of a @ b with `opts` applied on `target`."""
  a, b = RNG.uniform(-1, 1, shape_a).astype(dt), RNG.uniform(-1, 1, shape_b).astype(dt)
  si = _item(lambda x, y: x @ y, a, b)
  k = Kernel(si.ast, target).apply_opts(opts)
  ref = a.astype(np.float64) @ b.astype(np.float64)
  return _run(si, k.get_optimized_ast(), device).reshape(ref.shape).astype(np.float64), ref, k


def _close(got: np.ndarray, ref: np.ndarray, dt, k_len: int) -> None:
  """Float sums of k_len products (exact for halves) within float32's error; a half result within its rounding."""
  tol = k_len * 2.0 ** -23 * np.abs(ref).max() + 1e-6
  if dt == np.float16:
    tol += 2.0 ** -11 * np.abs(ref)
  assert np.all(np.abs(got - ref) <= tol), np.abs(got - ref).max()


def _wmmas(ast) -> list:
  return [u for u in toposort(ast) if u.op is Ops.WMMA]


def test_tc2_shape_only_on_llvm_square_and_padded(monkeypatch):
  """TC=2 on the host CPU (no tensor cores): the fragment's axes (lanes as a loop, C's elements upcast, the fragment's
  K unrolled) and a plain multiply-add; TC_OPT=2 pads sizes the fragment does not divide."""
  monkeypatch.setenv("TC", "2")
  got, ref, k = _matmul((40, 16), (16, 32), np.float32, host_target(), [Opt(OptOps.TC, 0, (-1, 0))], "llvm")
  assert k.tensor_core.tc is NV_1688_FLOAT and k.tensor_core.use == 2 and not _wmmas(k.get_optimized_ast())
  assert k.full_shape == (5, 2, 32, 2, 4, 8) and k.axis_types[2:] == [AxisType.LOOP, AxisType.REDUCE,
                                                                      AxisType.UPCAST, AxisType.UNROLL]
  _close(got, ref, np.float32, 16)
  got, ref, k = _matmul((33, 13), (13, 20), np.float32, host_target(), [Opt(OptOps.TC, 0, (-1, 2))], "llvm")
  assert k.full_shape == (3, 3, 32, 2, 4, 8)  # 33 -> 48 rows (M: 16s), 20 -> 24 columns (N: 8s), 13 -> 16 of K
  _close(got, ref, np.float32, 13)


def test_tc2_batched_matmul_through_the_interpreter(monkeypatch):
  """The TC=2 kernel is plain loads, multiplies and a sum: the interpreter (the oracle) runs it."""
  monkeypatch.setenv("TC", "2")
  got, ref, k = _matmul((3, 16, 8), (3, 8, 8), np.float32, host_target(), [Opt(OptOps.TC, 0, (-1, 0))], "interp")
  assert k.full_shape == (3, 32, 4, 8)  # (both fragments whole: no outer N or M axis)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dt, shape_a, shape_b, level, extra", [
  (np.float32, (37, 21), (21, 19), 2, []),  # every axis padded: 19 -> 24 rows of 8, 37 -> 48 of 16, 21 -> 24 of K
  (np.float16, (32, 32), (32, 64), 0, [Opt(OptOps.UPCAST, 0, 2)]),  # two fragments a work-item
])
def test_tc1_wmma_on_cl(dt, shape_a, shape_b, level, extra):
  """TC=1 on OpenCL: the fragment's reduce is a WMMA, emulated through __local memory by a work-group of one warp."""
  got, ref, k = _matmul(shape_a, shape_b, dt, CL, [Opt(OptOps.TC, 0, (-1, level)), *extra], "cl")
  tc = NV_16816_HALF if dt == np.float16 else NV_1688_FLOAT
  assert k.tensor_core.tc is tc and len(_wmmas(k.get_optimized_ast())) == 1
  prg = cl_program(k.get_optimized_ast())
  assert f"__local float wmma_{tc.name}_a[{16 * tc.dims[2]}];" in prg.src and prg.local_dims()[0] == 32
  assert prg.src.count("barrier(CLK_LOCAL_MEM_FENCE)") == 2  # (in the helper: after the writes, after the reads)
  _close(got, ref, dt, shape_a[1])


def test_tc1_batched_matmul_on_cl_and_work_dims():
  """A batched matmul: the batch, the column fragments and the warp fill the 3 work-item dimensions; one more outer
  axis is refused, since the warp's lanes must be work-items."""
  got, ref, k = _matmul((2, 8, 16), (2, 16, 32), np.float32, CL, [Opt(OptOps.TC, 0, (-1, 0))], "cl")
  _close(got, ref, np.float32, 16)
  si = _item(lambda x, y: x @ y, np.ones((2, 16, 8), np.float32), np.ones((2, 8, 32), np.float32))
  with pytest.raises(KernelOptError, match="4 work-item dimensions, at most 3"):
    Kernel(si.ast, CL).apply_opt(Opt(OptOps.TC, 0, (-1, 0)))


def test_refusals(monkeypatch):
  mm = _item(lambda x, y: x @ y, np.ones((16, 8), np.float32), np.ones((8, 16), np.float32)).ast

  def refused(ast, opt, match, target=CL):
    k = Kernel(ast, target)
    before = k.ast
    with pytest.raises(KernelOptError, match=match):
      k.apply_opt(opt)
    assert k.ast is before and k.tensor_core is None
  tc = Opt(OptOps.TC, 0, (-1, 0))
  refused(_item(lambda x: x.sum(axis=1), np.ones((16, 8), np.float32)).ast, tc, "a sum of products")
  refused(_item(lambda x: x + 1, np.ones((16, 8), np.float32)).ast, tc, "one reduce, got 0")
  refused(_item(lambda x, y: x @ y, np.ones((16, 8), np.int32), np.ones((8, 16), np.int32)).ast, tc,
          "the reduce is int32, the tensor core accumulates float32")
  refused(_item(lambda x, y: x @ y, np.ones((16, 8), np.float32), np.ones((8, 12), np.float32)).ast, tc,
          r"not multiples of \[8, 16, 8\] \(TC_OPT=2 pads\)")
  refused(mm, Opt(OptOps.TC, 1, (-1, 0)), "TC axis 1 out of range: the kernel has 1")
  refused(mm, Opt(OptOps.TC, 0, (2, 0)), "tc_select 2 is not one of the target's 2")
  refused(mm, tc, "target CPU has no tensor cores", host_target())
  k = Kernel(mm, CL).apply_opts([Opt(OptOps.UPCAST, 0, 2)])
  with pytest.raises(KernelOptError, match="must be first"):
    k.apply_opt(tc)
  k = Kernel(mm, CL).apply_opts([tc])
  lane = k.axis_types.index(AxisType.LOCAL)
  for opt, why in ((Opt(OptOps.UPCAST, k.first_upcast, 2), "fragment axis"), (Opt(OptOps.LOCAL, 0, 2), "warp of 32"),
                   (Opt(OptOps.PADTO, lane, 64), "fragment axis")):
    with pytest.raises(KernelOptError, match=why):
      k.apply_opt(opt)
  monkeypatch.setenv("TC", "0")
  refused(mm, tc, r"off \(TC=0\)")


def test_layouts_are_ptx_fragments():
  """Spot checks against the PTX ISA's figures (lane 5: group 1, thread_in_group 1; lane 30: group 7, 2)."""
  h, f = NV_16816_HALF, NV_1688_FLOAT
  assert [h.a(5, e) for e in (0, 1, 2, 3, 4, 7)] == [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (9, 11)]
  assert [h.b(5, e) for e in range(4)] == [(2, 1), (3, 1), (10, 1), (11, 1)]
  assert [h.c(30, e) for e in range(4)] == [(7, 4), (7, 5), (15, 4), (15, 5)]
  assert [f.a(30, e) for e in range(4)] == [(7, 2), (15, 2), (7, 6), (15, 6)] and [f.b(30, e) for e in (0, 1)] == \
      [(2, 7), (6, 7)]
  assert h.positions("b")[5 * 4:5 * 4 + 4] == (2 * 8 + 1, 3 * 8 + 1, 10 * 8 + 1, 11 * 8 + 1)


def test_interpreter_refuses_a_wmma():
  si = _item(lambda x, y: x @ y, np.ones((16, 8), np.float32), np.ones((8, 16), np.float32))
  k = Kernel(si.ast, CL).apply_opts([Opt(OptOps.TC, 0, (-1, 0))])
  with pytest.raises(InterpreterError, match="can't evaluate a tensor core's WMMA"):
    InterpretedKernel(k.get_optimized_ast())


def test_heuristics_and_beam_actions(monkeypatch):
  """The heuristics give a matmul the fragment first (emulated tensor cores only when TC is set) and then a tile of
  fragments; BEAM's actions hold TC where the target has tensor cores."""
  mm = _item(lambda x, y: x @ y, np.ones((64, 32), np.float32), np.ones((32, 64), np.float32)).ast
  monkeypatch.delenv("TC", raising=False)
  assert not any(o.op is OptOps.TC for o in hand_coded_optimizations(Kernel(mm, CL)).applied_opts)
  monkeypatch.setenv("TC", "1")
  k = hand_coded_optimizations(Kernel(mm, CL))
  assert k.applied_opts == [Opt(OptOps.TC, 0, (-1, 0)), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4)]
  assert any(o.op is OptOps.TC for o in kernel_actions(Kernel(mm, CL)))
  assert not any(o.op is OptOps.TC for o in kernel_actions(Kernel(mm, host_target())))


def test_tc_in_the_trace_and_opts(tmp_path):
  si = _item(lambda x, y: x @ y, np.ones((16, 8), np.float32), np.ones((8, 16), np.float32))
  with recording(tmp_path / "t.vztrace") as path, recorder.trace_context("kernel tc", kind="kernel"):
    k = Kernel(si.ast, CL).apply_opts([Opt(OptOps.TC, 0, (-1, 0))])
    ast = k.get_optimized_ast()
  recs = list(TraceReader(path))
  (rec,) = [r for r in recs if r["t"] == "opt"]
  assert (rec["op"], rec["arg"], rec["ok"], rec["kname"]) == ("TC", "(-1, 0)", True, "r_2_32_4_8")
  assert rec["colors"] == ["blue", "cyan", "yellow", "magenta"]
  assert [r["name"] for r in recs if r["t"] == "rw_begin"] == ["apply TC(0, (-1, 0))", "tensor core wmma"]
  assert ast.arg.opts == (Opt(OptOps.TC, 0, (-1, 0)),)
  assert Opt.from_json(ast.arg.opts[0].to_json()) == ast.arg.opts[0]
