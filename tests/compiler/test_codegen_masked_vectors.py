"""Contiguous lanes whose loads are masked each by a condition of its own (a padded row read at x - 1: a conv's
window along x) load as one vector under a vector mask: llvm.masked.load on LLVM (the lanes off the mask read
nothing, so the first lane's address may lie before the buffer), a select a lane on OpenCL; the values are the
interpreter's."""
from __future__ import annotations

import numpy as np
from support.opt_helpers import masked_ast

from compiler.codegen import get_program
from compiler.codegen.opencl import cl_program
from compiler.dtype import dtypes
from compiler.opt import Kernel, Opt, OptOps
from compiler.opt.target import cl_target
from compiler.runtime.buffer import Buffer
from compiler.runtime.compiled import compile_kernel
from compiler.runtime.opencl import cl_kernel


def _want(a: np.ndarray) -> np.ndarray:
  """out[i, j] = a[i, j - 1] (0 at j = 0) + a[i, j], in float64."""
  a64 = a.astype(np.float64)
  return a64 + np.pad(a64, ((0, 0), (1, 0)))[:, :-1]


def test_lanes_masked_apart_are_one_masked_vector_load():
  m, n = 3, 48
  a = np.random.default_rng(0).standard_normal((m, n)).astype(np.float32)
  ast = masked_ast(m, n)
  opt = Kernel(ast).apply_opts([Opt(OptOps.UPCAST, 1, 16)]).get_optimized_ast()
  src = get_program(opt).src
  # the shifted read is one masked vector (lane 0 off the mask in the first of each row's three vectors), no gather
  assert "@llvm.masked.load.v16f32" in src and "insertelement <16 x float>" not in src
  out = np.zeros(m * n, np.float32)
  compile_kernel(opt)([out, a.reshape(-1).copy()])  # (row 0's first vector starts at a[-1]: off the mask)
  np.testing.assert_allclose(out.reshape(m, n), _want(a), rtol=1e-6)
  cl_opt = Kernel(ast, cl_target("test", 256, 65536)).apply_opts([Opt(OptOps.UPCAST, 1, 16)]).get_optimized_ast()
  assert "?" in cl_program(cl_opt).src
  got = Buffer(dtypes.float32, m * n, np.zeros(m * n, np.float32))
  src_buf = Buffer(dtypes.float32, m * n, a.reshape(-1).copy())
  cl_kernel(cl_opt)([got, src_buf])
  np.testing.assert_allclose(got.np.reshape(m, n), _want(a), rtol=1e-6)
