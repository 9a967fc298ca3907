"""The GPU heuristics (compiler.opt.heuristic_gpu) and BEAM on the OpenCL device (issue 33): the opts the heuristics
choose for a matvec (GROUP + LOCAL), a long row reduce (GROUPTOP), a matmul (float4 + LOCAL), the values on pocl
against numpy; none that would compute a hoisted row reduce once per output; BEAM timed on the device."""
from __future__ import annotations

import numpy as np

from compiler.codegen.opencl import cl_program
from compiler.engine import cl_beam_search
from compiler.opt import Kernel, Opt, OptOps, hand_coded_optimizations, search
from compiler.opt.heuristic_gpu import reduces_span_outputs
from compiler.opt.search import kernel_actions
from compiler.opt.target import cl_target
from compiler.runtime.buffer import Buffer
from compiler.runtime.opencl import ClKernel, get_device
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import Tensor
from compiler.uop import AxisType

CL = cl_target("test", 256, 1 << 15)  # float4, work-groups of up to 256, 32 KiB of local memory
RNG = np.random.default_rng(34)
every_action = kernel_actions  # (the unpatched action list)


def _item(fn, *arrays: np.ndarray):
  (si,) = create_schedule([fn(*[Tensor(a) for a in arrays]).uop])[0]
  return si


def run_on_cl(si, k: Kernel) -> np.ndarray:
  """The kernel k (of schedule item si) run on the OpenCL device: its output buffer's values."""
  out = [Buffer(b.dtype, b.size) for b in si.bufs]
  for o, b in zip(out, si.bufs):
    o.ensure_allocated(zero=True)
    if b.allocated:
      o.np[:] = b.np
  ClKernel(cl_program(k.get_optimized_ast()), get_device())(out)
  return out[0].np


def _ops(k: Kernel) -> list[OptOps]:
  return [o.op for o in k.applied_opts]


def test_matvec_gets_group_local_and_upcast():
  a, v = RNG.uniform(-1, 1, (64, 256)).astype(np.float32), RNG.uniform(-1, 1, 256).astype(np.float32)
  si = _item(lambda m, x: m @ x, a, v)
  k = hand_coded_optimizations(Kernel(si.ast, CL))
  assert k.applied_opts == [Opt(OptOps.GROUP, 0, 8), Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.UPCAST, 0, 4)]
  assert k.colors() == ["blue", "cyan", "green", "red", "yellow"]
  np.testing.assert_allclose(run_on_cl(si, k), a.astype(np.float64) @ v, rtol=1e-5, atol=1e-5)


def test_long_row_reduce_into_few_outputs_is_grouptop():
  x = RNG.uniform(-1, 1, (6, 4096)).astype(np.float32)
  si = _item(lambda t: t.max(axis=1), x)
  k = hand_coded_optimizations(Kernel(si.ast, CL))
  assert k.applied_opts == [Opt(OptOps.GROUPTOP, 0, 16)]
  assert k.axis_types == [AxisType.LOOP, AxisType.GROUP_REDUCE, AxisType.REDUCE]
  np.testing.assert_array_equal(run_on_cl(si, k), x.max(axis=1))


def test_matmul_gets_float4_rows_and_a_work_group():
  """A 64x48 @ 48x64 matmul: a float4 along the columns, 4 rows, the reduce unrolled by 4, then a work-group of 8 row
  tiles by 16 column tiles (the column tiles whole: a third split would need a 4th work-item dimension)."""
  a, b = RNG.uniform(-1, 1, (64, 48)).astype(np.float32), RNG.uniform(-1, 1, (48, 64)).astype(np.float32)
  si = _item(lambda x, y: x @ y, a, b)
  k = hand_coded_optimizations(Kernel(si.ast, CL))
  assert k.applied_opts == [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4),
                            Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.LOCAL, 1, 16)]
  prg = cl_program(k.get_optimized_ast())
  assert "float4 acc" in prg.src and prg.local_dims() == [16, 8, 1] and prg.global_dims() == [16, 8, 2]
  np.testing.assert_allclose(run_on_cl(si, k).reshape(64, 64), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_no_group_or_local_where_a_row_reduce_is_hoisted():
  """Softmax's row max and sum in the division's kernel are computed once per row, outside the column loop: a GROUP
  or LOCAL would compute them once per output (6.8 s instead of 10 ms on pocl). The heuristics leave them out, BEAM
  does not try GROUP there; a conv's four output axes leave no work-item dimension for a LOCAL."""
  x = RNG.uniform(-1, 1, (32, 512)).astype(np.float32)
  sched = create_schedule([Tensor(x).softmax(axis=1).uop])[0]
  assert len(sched) == 2
  for si in sched:
    assert not reduces_span_outputs(Kernel(si.ast, CL))
    k = hand_coded_optimizations(Kernel(si.ast, CL))
    assert not {OptOps.GROUP, OptOps.GROUPTOP, OptOps.LOCAL} & set(_ops(k)), k.applied_opts
    assert not {o.op for o in kernel_actions(Kernel(si.ast, CL))} & {OptOps.GROUP, OptOps.GROUPTOP}
  conv = _item(lambda t, w: t.conv2d(w), np.ones((2, 4, 10, 10), np.float32), np.ones((8, 4, 3, 3), np.float32))
  assert OptOps.LOCAL not in _ops(hand_coded_optimizations(Kernel(conv.ast, CL)))


def test_beam_on_cl_searches_work_groups_and_caches(monkeypatch, tmp_path):
  """BEAM=2 on a small row sum, timed on the device: LOCAL, GROUP and GROUPTOP are among the actions on a target with
  locals, and (the search kept to them: each candidate is a build of the device's compiler, about a second on pocl)
  the candidates it times include a GROUP; its result's values are numpy's, and a second search of the same kernel
  on the same target is the cache's (nothing built)."""
  monkeypatch.setenv("BEAM_CACHE_DIR", str(tmp_path))
  x = RNG.uniform(-1, 1, (3, 9)).astype(np.float32)
  si = _item(lambda t: t.sum(axis=1), x)
  every = kernel_actions(Kernel(si.ast, CL))
  assert {OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP} <= {o.op for o in every}
  groups = {OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP}
  monkeypatch.setattr(search, "kernel_actions", lambda k: [o for o in every_action(k) if o.op in groups])
  log: list[dict] = []
  k = cl_beam_search(Kernel(si.ast, CL), None, 2, use_cache=True, progress=False, max_rounds=1, log=log)
  assert any(r["round"] == 0 and r["opts"] == [["UNROLL", 0, 0], ["LOCAL", 0, 3]] for r in log)  # the heuristics'
  assert any(r["round"] == 1 and r["opts"] == [["GROUP", 0, 0]] and r["time"] > 0 for r in log)
  np.testing.assert_allclose(run_on_cl(si, k), x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)

  def no_search(*_):
    raise AssertionError("searched again")
  monkeypatch.setattr("compiler.engine._cl_evaluator", no_search)
  assert cl_beam_search(Kernel(si.ast, CL), None, 2, use_cache=True, progress=False).applied_opts == k.applied_opts
