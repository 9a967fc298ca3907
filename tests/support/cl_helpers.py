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
    out = (Tensor(x) @ Tensor(w)).relu().numpy()
  finally:
    recorder.disable()
    if old is None:
      del os.environ["BACKEND"]
    else:
      os.environ["BACKEND"] = old
  np.testing.assert_allclose(out, np.maximum(x.astype(np.float64) @ w, 0), rtol=1e-5, atol=1e-5)
  return out
