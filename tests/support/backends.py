"""The backends the compiler's value tests run on: the numpy reference interpreter, the LLVM JIT every user runs by
default, and OpenCL (BACKEND=cl, on Debian's pocl here: `make pocl`).

pocl builds each new kernel in 0.4-2 s, so the whole matrix on CL (~900 tests) would double the suite: by default a
test module runs on CL when it sets `ON_CL = True` (the value and semantics tests: test_tensor_values.py,
test_max_semantics.py, test_opencl.py), and `TINYVIZ_TEST_CL=all` (`make test-cl`) puts CL under every test that
uses the `backend` fixture (tests/compiler/conftest.py)."""
from __future__ import annotations

import os

CPU_BACKENDS = ["interp", "llvm"]
ALL_BACKENDS = [*CPU_BACKENDS, "cl"]


def backends_for(on_cl: bool) -> list[str]:
  """The backends a test module runs on: CL too where the module asks for it or TINYVIZ_TEST_CL=all."""
  return ALL_BACKENDS if on_cl or os.environ.get("TINYVIZ_TEST_CL") == "all" else CPU_BACKENDS
