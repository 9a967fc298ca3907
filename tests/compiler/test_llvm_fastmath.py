"""Issue 12 (LLVM backend): which fast-math flags the renderer may use. `contract` on elementwise math let LLVM
fuse a*b - c into an fma, which changes the answer by the rounding of a*b: all of it where c is that product
rounded (a value one kernel stored and the next recomputes), so std over one element gave inf where the
interpreter and numpy give nan. Fusion is now allowed only into reduce accumulations."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.codegen import get_program
from compiler.tensor import Tensor


@pytest.fixture(autouse=True)
def _llvm(monkeypatch):
  monkeypatch.setenv("BACKEND", "llvm")


def test_std_over_one_element_is_nan():
  got = Tensor(np.arange(1, 7, dtype=np.float32).reshape(6, 1)).log().std(axis=1).numpy()
  assert np.isnan(got).all(), got


def test_a_stored_value_recomputed_cancels_exactly():
  x = np.linspace(0.5, 40.0, 257, dtype=np.float32)
  y = Tensor(x).log().contiguous().realize()
  np.testing.assert_array_equal((Tensor(x).log() - y).numpy(), np.zeros_like(x))
  np.testing.assert_array_equal((Tensor(x) * 3.7 - (Tensor(x) * 3.7).contiguous().realize()).numpy(), 0 * x)


def test_elementwise_float_math_carries_no_fast_math_flags():
  a, b, c = (Tensor(np.ones(64, np.float32)) for _ in range(3))
  src = get_program((a * b - c).schedule()[0].ast).src
  assert "fmul float" in src or "fmul <" in src
  assert "contract" not in src and "reassoc" not in src


def test_a_reduce_may_still_fuse_its_products():
  a = Tensor(np.ones((16, 16), np.float32))
  src = get_program((a @ a).schedule()[0].ast).src
  assert "fadd reassoc contract" in src and "fmul contract" in src
