"""The scheduler's Tensor op tests again, every kernel compiled by the LLVM backend (with the optimizer's
heuristics) instead of interpreted: the same numpy references must hold."""
from __future__ import annotations

import pytest
from test_tensor import *  # noqa: F403
from test_tensor_movement import *  # noqa: F403
from test_tensor_nn import *  # noqa: F403


@pytest.fixture(autouse=True)
def _llvm_backend(monkeypatch):
  monkeypatch.setenv("BACKEND", "llvm")
