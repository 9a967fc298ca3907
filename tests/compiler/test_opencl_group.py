"""GROUP / GROUPTOP on the OpenCL target (issue 33): a reduce split across a work-group through __local memory and a
barrier, then reduced again; values against numpy, refusals with their reasons, the rendered source."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.codegen.errors import CodegenError
from compiler.codegen.opencl import cl_program
from compiler.dtype import dtypes
from compiler.opt import Kernel, Opt, OptOps
from compiler.opt.kernel import KernelOptError
from compiler.opt.target import cl_target, host_target
from compiler.runtime.buffer import Buffer
from compiler.runtime.interpreter import InterpretedKernel
from compiler.runtime.opencl import ClKernel, get_device
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import Tensor
from compiler.uop import AxisType, Ops, UOp

CL = cl_target("test", 256, 1 << 15)
RNG = np.random.default_rng(33)


def _schedule_item(fn, *arrays: np.ndarray):
  (si,) = create_schedule([fn(*[Tensor(a) for a in arrays]).uop])[0]
  return si


def _buffers(si) -> list[Buffer]:
  out = [Buffer(b.dtype, b.size) for b in si.bufs]
  for o, b in zip(out, si.bufs):
    o.ensure_allocated(zero=True)
    if b.allocated:
      o.np[:] = b.np
  return out


def run_cl(fn, arrays: list[np.ndarray], opts: list[Opt]) -> tuple[np.ndarray, Kernel, object]:
  """fn's kernel with opts on the CL target, run on the OpenCL device: (its output, the Kernel, the ClProgram)."""
  si = _schedule_item(fn, *arrays)
  k = Kernel(si.ast, CL).apply_opts(opts)
  prg = cl_program(k.get_optimized_ast())
  out = _buffers(si)
  ClKernel(prg, get_device())(out)
  return out[0].np.reshape(fn(*[Tensor(a) for a in arrays]).shape), k, prg


@pytest.mark.parametrize("op", [OptOps.GROUP, OptOps.GROUPTOP])
@pytest.mark.parametrize("amt", [2, 8, 16, 64, 256])
@pytest.mark.parametrize("red", ["sum", "max"])
def test_grouped_reduce_over_a_long_axis(op, amt, red):
  x = RNG.uniform(-1, 1, (3, 1024)).astype(np.float32)
  got, k, prg = run_cl(lambda t: getattr(t, red)(axis=1), [x], [Opt(op, 0, amt)])
  assert k.axis_types == [AxisType.LOOP, AxisType.GROUP_REDUCE, AxisType.REDUCE]
  assert prg.local_dims() == [amt, 1] and prg.global_dims() == [amt, 3]
  np.testing.assert_allclose(got, getattr(np, red)(x, axis=1), rtol=1e-5, atol=1e-5)


def test_whole_axis_grouped_and_half_values():
  """GROUP of the whole axis (no reduce loop left: each work-item one value) on halves (a __local half buffer)."""
  x = RNG.uniform(-1, 1, (5, 64)).astype(np.float16)
  got, k, prg = run_cl(lambda t: t.max(axis=1), [x], [Opt(OptOps.GROUP, 0, 0)])
  assert k.axis_types == [AxisType.LOOP, AxisType.GROUP_REDUCE]
  assert "__local ushort" in prg.src and "__local half*" in prg.src
  np.testing.assert_array_equal(got, x.max(axis=1))


def test_matvec_with_group_and_local():
  """A matvec: LOCAL 4 rows a work-group, GROUPTOP 16 of the dot product: 64 work-items, one __local slot each."""
  a, v = RNG.uniform(-1, 1, (32, 512)).astype(np.float32), RNG.uniform(-1, 1, (512,)).astype(np.float32)
  got, k, prg = run_cl(lambda m, x: (m * x).sum(axis=1), [a, v], [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUPTOP, 0, 16)])
  assert k.axis_types == [AxisType.LOOP, AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.REDUCE]
  assert k.colors() == ["blue", "cyan", "green", "red"]
  assert [p for p in k.colored_name() if p[1] != "BLACK"][1:] == [("8", "blue"), ("4", "cyan"), ("16", "green"),
                                                                  ("32", "red")]
  assert prg.local_dims() == [16, 4, 1] and prg.global_dims() == [16, 4, 8]
  assert "__local float temp0[64];" in prg.src
  np.testing.assert_allclose(got, a @ v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("upcast", [2, 4])
def test_group_with_upcast_outputs(upcast):
  """UPCAST of the output axis after and before a GROUP: one __local slot per work-item and lane."""
  x = RNG.uniform(-1, 1, (8, 256)).astype(np.float32)
  for opts in ([Opt(OptOps.GROUP, 0, 8), Opt(OptOps.UPCAST, 0, upcast)],
               [Opt(OptOps.UPCAST, 0, upcast), Opt(OptOps.GROUPTOP, 0, 32), Opt(OptOps.UNROLL, 0, 4)]):
    got, k, prg = run_cl(lambda t: t.sum(axis=1), [x], opts)
    assert AxisType.UPCAST in k.axis_types and AxisType.GROUP_REDUCE in k.axis_types
    assert f"[{k.full_shape[k.axis_types.index(AxisType.GROUP_REDUCE)] * upcast}];" in prg.src
    assert prg.src.count("barrier(") == 1  # (one for the lanes' stores together)
    np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_rendered_source_has_local_buffer_and_barrier():
  x = RNG.uniform(-1, 1, (4, 128)).astype(np.float32)
  _, _, prg = run_cl(lambda t: t.sum(axis=1), [x], [Opt(OptOps.GROUP, 0, 16)])
  src = prg.src
  assert "__local float temp0[16];" in src and "get_local_id(0);  /* GROUP_REDUCE */" in src
  # every work-item stores its partial, the barrier, the second reduce, and only group index 0 stores the output
  store, barrier, gate = src.index("temp0[ridx"), src.index("barrier(CLK_LOCAL_MEM_FENCE);"), src.index("== 0)")
  assert store < barrier < gate and src.count("barrier(") == 1
  # the __local array is declared at the kernel's scope, before any work-item id or loop
  body = src.split("{\n", 1)[1].splitlines()
  assert body[0].strip().startswith("__local float temp0")


def test_interpreter_reduces_a_group_axis_as_a_loop():
  """The interpreter (and the LLVM backend) take a GROUP_REDUCE range as any reduce range: the same values."""
  x = RNG.uniform(-1, 1, (4, 128)).astype(np.float32)
  si = _schedule_item(lambda t: t.sum(axis=1), x)
  ast = Kernel(si.ast, CL).apply_opts([Opt(OptOps.GROUPTOP, 0, 8)]).get_optimized_ast()
  out = _buffers(si)
  InterpretedKernel(ast)(out)
  np.testing.assert_allclose(out[0].np, x.sum(axis=1), rtol=1e-5, atol=1e-5)


def _k(shape=(4, 1020), target=CL) -> Kernel:
  return Kernel(_schedule_item(lambda t: t.sum(axis=1), RNG.uniform(-1, 1, shape).astype(np.float32)).ast, target)


@pytest.mark.parametrize("opt, reason", [
  (Opt(OptOps.GROUP, 0, 7), "GROUP: 7 does not divide the axis of size 1020"),
  (Opt(OptOps.GROUPTOP, 0, 8), "GROUPTOP: 8 does not divide the axis of size 1020"),
  (Opt(OptOps.GROUP, 0, 1), "GROUP of amount 1 is meaningless"),
  (Opt(OptOps.GROUP, 1, 4), "invalid axis 1 for GROUP"),
  (Opt(OptOps.GROUP, 0, 510), "GROUP: a work-group of 510 work-items exceeds the target's 256"),
])
def test_group_refusals_name_the_reason(opt, reason):
  k = _k()
  with pytest.raises(KernelOptError, match=reason):
    k.apply_opt(opt)
  assert k.applied_opts == [] and k.full_shape == (4, 1020)


def test_group_refused_for_shared_memory_dims_and_locals():
  k = Kernel(_k().ast, cl_target("small", 1024, 64))
  with pytest.raises(KernelOptError, match="exceeds maximum shared memory size: needs 80, max 64"):
    k.apply_opt(Opt(OptOps.GROUP, 0, 20))
  k.apply_opt(Opt(OptOps.GROUP, 0, 15))  # (15 work-items' floats: 60 of the 64 bytes)
  with pytest.raises(KernelOptError, match="exceeds maximum shared memory size: needs 120, max 64"):
    k.apply_opt(Opt(OptOps.UPCAST, 0, 2))  # (a lane more of every work-item's slot)
  k2 = _k()
  k2.apply_opt(Opt(OptOps.UNROLL, 0, 4))
  with pytest.raises(KernelOptError, match="must be a reduce axis to group"):
    k2.apply_opt(Opt(OptOps.GROUP, 1, 2))  # (the unrolled axis)
  x = RNG.uniform(-1, 1, (2, 3, 4, 64)).astype(np.float32)
  k3 = Kernel(_schedule_item(lambda t: t.sum(axis=3), x).ast, CL)
  with pytest.raises(KernelOptError, match="GROUP: the kernel would need 4 work-item dimensions, at most 3"):
    k3.apply_opt(Opt(OptOps.GROUP, 0, 4))
  k4 = _k()
  k4.apply_opt(Opt(OptOps.NOLOCALS))
  with pytest.raises(KernelOptError, match="GROUP: not using locals"):
    k4.apply_opt(Opt(OptOps.GROUP, 0, 4))
  with pytest.raises(KernelOptError, match="no local memory"):
    _k(target=host_target()).apply_opt(Opt(OptOps.GROUP, 0, 4))


def test_nolocals_refused_after_group():
  k = _k()
  k.apply_opt(Opt(OptOps.GROUP, 0, 4))
  with pytest.raises(KernelOptError, match="can't have no locals with locals"):
    k.apply_opt(Opt(OptOps.NOLOCALS))


def test_group_axis_past_three_dimensions_is_a_codegen_error():
  """A hand-built AST whose GROUP axis would be a fourth work-item dimension: refused by the renderer, not looped."""
  g = [UOp.range(2, i, AxisType.GLOBAL, dtypes.int32) for i in range(3)]
  grp = UOp.range(4, 3, AxisType.GROUP_REDUCE, dtypes.int32)
  out, inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(8), (), 0), UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(32), (), 1)
  flat = (g[0] * 2 + g[1]) * 2 + g[2]
  ast = UOp.sink(out.index(flat).store(inp.index(flat * 4 + grp).load().reduce(grp)))
  with pytest.raises(CodegenError, match="GROUP axis must be a work-item id"):
    cl_program(ast)
