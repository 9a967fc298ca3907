"""Shared test set-up."""
import pytest

from compiler.trace import recorder


@pytest.fixture(autouse=True)
def _tensor_tests_use_the_interpreter(request, monkeypatch):
  # the Tensor op tests check the scheduler against numpy through the reference interpreter; test_llvm_tensor.py
  # re-runs the same tests compiled (the user-facing default backend)
  if request.module.__name__ in ("test_tensor", "test_tensor_movement", "test_tensor_nn"):
    monkeypatch.setenv("BACKEND", "interp")


@pytest.fixture
def trace(tmp_path):
  """Record into tmp_path/t.vztrace for the test (yields the path; recording ends after it)."""
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  yield path
  recorder.disable()
