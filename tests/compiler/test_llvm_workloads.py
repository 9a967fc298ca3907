"""The scheduler's kernels for the bench workloads, compiled (with and without the optimizer's heuristics) and run
side by side with the reference interpreter; and the Tensor front end end-to-end on the llvm backend."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from workloads import WORKLOADS  # noqa: E402

from compiler.engine import optimize  # noqa: E402
from compiler.runtime.compiled import compile_kernel  # noqa: E402
from compiler.runtime.interpreter import interpret  # noqa: E402
from compiler.schedule.rangeify import create_schedule  # noqa: E402

SCALES = {"elementwise": 0.01, "matmul": 0.1, "softmax": 0.1, "mlp": 0.1, "conv2d": 0.3}


def _run_schedule(sched, run_kernel) -> dict[int, np.ndarray]:
  arrays: dict[int, np.ndarray] = {}
  for si in sched:
    bufs = []
    for b in si.bufs:
      if id(b) not in arrays:
        arrays[id(b)] = b.np.copy()
      bufs.append(arrays[id(b)])
    run_kernel(si.ast, bufs)
  return arrays


@pytest.mark.parametrize("opt", [True, False], ids=["heuristic", "noopt"])
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_kernels_match_interpreter(name, opt):
  w = WORKLOADS[name](scale=SCALES.get(name, 0.1))
  sched, _ = create_schedule([w.lazy().uop])
  assert sched, "no kernels"
  ref = _run_schedule(sched, interpret)
  got = _run_schedule(sched, lambda ast, bufs: compile_kernel(optimize(ast) if opt else ast)(bufs))
  for key in ref:
    np.testing.assert_allclose(got[key], ref[key], rtol=1e-4, atol=1e-5)
  out = got[id(sched[-1].bufs[0])].reshape(w.expected().shape)
  np.testing.assert_allclose(out, w.expected(), rtol=w.rtol, atol=w.rtol)


def test_tensor_front_end_on_llvm_backend(monkeypatch):
  monkeypatch.setenv("BACKEND", "llvm")
  from compiler.tensor import Tensor
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((9, 13)).astype(np.float32), rng.standard_normal((13, 7)).astype(np.float32)
  out = ((Tensor(a) @ Tensor(b)).relu() + 1).sum(axis=1).numpy()
  np.testing.assert_allclose(out, (np.maximum(a @ b, 0) + 1).sum(1), rtol=1e-4)
