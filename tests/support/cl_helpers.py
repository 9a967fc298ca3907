"""Recording a program on BACKEND=cl (Debian's pocl): the traces the OpenCL kernel tests read."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from compiler.tensor import Tensor
from compiler.trace import recorder


def record_cl_matmul_relu(path: Path) -> np.ndarray:
  """A (16, 32) @ (32, 24) matmul and a relu, realized on the OpenCL backend while recording into `path`; the
  result, checked against float64 numpy."""
  rng = np.random.default_rng(5)
  x, w = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 24)).astype(np.float32)
  old = os.environ.get("BACKEND")
  os.environ["BACKEND"] = "cl"
  recorder.enable(path, announce=False)
  try:
    out = (Tensor(x) @ Tensor(w)).contiguous().relu().numpy()  # (contiguous: two kernels, a reduce and an elementwise)
  finally:
    recorder.disable()
    if old is None:
      del os.environ["BACKEND"]
    else:
      os.environ["BACKEND"] = old
  np.testing.assert_allclose(out, np.maximum(x.astype(np.float64) @ w, 0), rtol=1e-5, atol=1e-5)
  return out


def record_cl_device_matvec(path: Path) -> np.ndarray:
  """A (1, 64) @ (64, 32) matvec on the CL device (DEV-less: `device="CL"` tensors, copied there and back) whose
  kernel gets LOCAL and GROUP explicitly (NOOPT's kernel plus [LOCAL(0, 8), GROUP(0, 16)], whatever the heuristics
  would pick), recorded into `path`; the result, checked against float64 numpy."""
  from compiler import realize
  from compiler.engine import cl_runner
  from compiler.opt import Kernel, Opt, OptOps
  from compiler.opt.target import cl_target
  from compiler.runtime.opencl import cl_kernel, get_device

  def grouped(ast):
    if ast.op is not ast.op.SINK or not any(u.op.name == "REDUCE" for u in ast.toposort()):
      return cl_kernel(ast)
    lim = get_device().limits
    k = Kernel(ast, cl_target(lim.name, lim.max_work_group_size, lim.local_mem_bytes))
    k.apply_opts([Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.GROUP, 0, 16)])
    ck = cl_kernel(k.get_optimized_ast())
    ck.opts = tuple(k.applied_opts)
    return ck

  rng = np.random.default_rng(6)
  x, w = rng.standard_normal((1, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
  realize.register_backend("cl", grouped)
  recorder.enable(path, announce=False)
  try:
    out = (Tensor(x, device="CL") @ Tensor(w, device="CL")).to("CPU").numpy()
  finally:
    recorder.disable()
    realize.register_backend("cl", cl_runner)
  np.testing.assert_allclose(out, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
  return out
