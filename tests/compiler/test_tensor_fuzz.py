"""The differential fuzz of bench/fuzz_tensor_ops.py in CI: a few hundred random op chains with a fixed seed
against numpy, on every backend (OpenCL on pocl: a few programs here, more under `make test-cl`, whose kernels each
cost a device build); every wrong value or exception fails the test with its reproducer."""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.fuzz_tensor_ops import OPS, compare, fuzz, reproducer  # noqa: E402

# (op, kind of failure) the fuzz may report while a fix is pending; empty: every finding so far is fixed
KNOWN: set[tuple[str, str]] = set()


def _known(prog, why: str) -> bool:
  return any(op in prog.ops and why.startswith(kind) for op, kind in KNOWN)


CL_PROGRAMS = 200 if os.environ.get("TINYVIZ_TEST_CL") == "all" else 40


@pytest.mark.parametrize("backend,programs,seed", [("interp", 400, 12), ("llvm", 150, 12), ("cl", CL_PROGRAMS, 12)])
def test_fuzz_tensor_ops(backend, programs, seed, monkeypatch):
  monkeypatch.setenv("BACKEND", backend)
  counts, failures = fuzz(programs, seed)
  assert sum(sum(c.values()) for c in counts.values()) > programs  # programs ran, most with several ops
  unknown = [(o, p, w) for o, p, w in failures if not _known(p, w)]
  assert not unknown, "\n\n".join(f"{o}: {w}\n{reproducer(p)}" for o, p, w in unknown[:5])


def test_fuzz_covers_the_api():
  """Every op family the issue lists has a generator (so the CI fuzz exercises it)."""
  for name in ("gather", "scatter", "scatter_reduce", "index", "cumsum", "cummax", "cummin", "cumprod", "sort", "topk",
               "argsort", "logsumexp", "logcumsumexp", "cross_entropy", "interpolate", "einsum", "silu", "elu", "mish",
               "erf", "asin", "atanh", "round", "copysign", "lerp", "lshift", "isclose", "roll", "tril", "one_hot",
               "masked_fill", "cat", "stack", "split", "chunk", "unbind", "repeat_interleave"):
    assert name in OPS, name


def test_compare_catches_what_it_must():
  """The oracle comparison itself: NaN, inf, sign of zero (when asked), dtype kind and shape all count."""
  class P:
    ops, sign_exact = ["neg"], True
  f = np.float32
  assert compare(np.array([1, np.nan], f), np.array([1, 2], f), P) is not None
  assert compare(np.array([np.inf], f), np.array([-np.inf], f), P) is not None
  assert compare(np.array([0.0], f), np.array([-0.0], f), P) is not None
  assert compare(np.array([1], np.int32), np.array([1], f), P) is not None
  assert compare(np.array([1, 2], f), np.array([[1, 2]], f), P) is not None
  assert compare(np.array([1, np.nan, -np.inf], f), np.array([1 + 1e-7, np.nan, -np.inf], f), P) is None
  P.sign_exact = False
  assert compare(np.array([0.0], f), np.array([-0.0], f), P) is None
