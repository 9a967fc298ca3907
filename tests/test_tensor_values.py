"""Regression tests for wrong values and wrong errors of the Tensor front end (issue 12), on both backends:
the numpy reference interpreter and the compiled LLVM kernels."""
from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.tensor import Tensor


@pytest.fixture(params=["interp", "llvm"], autouse=True)
def backend(request, monkeypatch):
  monkeypatch.setenv("BACKEND", request.param)
  return request.param


def same(t: Tensor, want, dtype=None) -> None:
  """Equal values (nan where nan, the sign of zeros and infinities included) and, if given, the dtype."""
  got = t.numpy()
  want = np.asarray(want)
  assert got.shape == want.shape, (got.shape, want.shape)
  if dtype is not None:
    assert t.dtype == dtype, (t.dtype, dtype)
  if got.dtype.kind == "f":
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    ok = ~np.isnan(got)
    assert np.array_equal(got[ok], want[ok]), (got, want)
    assert np.array_equal(np.signbit(got[ok]), np.signbit(want[ok])), (got, want)
  else:
    assert np.array_equal(got, want), (got, want)


# ---- cat / stack: both call forms
def test_cat_method_form_keeps_self():
  a, b, c = Tensor([1, 2]), Tensor([3, 4]), Tensor([5])
  same(a.cat(b), [1, 2, 3, 4])
  same(a.cat(b, c), [1, 2, 3, 4, 5])
  same(Tensor.cat(a, b), [1, 2, 3, 4])
  same(Tensor.cat([a, b]), [1, 2, 3, 4])
  m, n = np.arange(6).reshape(2, 3), np.arange(4).reshape(2, 2)
  same(Tensor(m).cat(Tensor(n), Tensor(m), dim=1), np.concatenate([m, n, m], 1))
  same(Tensor(m).cat(Tensor(n), dim=-1), np.concatenate([m, n], -1))


def test_stack_method_form_keeps_self():
  a, b = Tensor([1, 2]), Tensor([3, 4])
  same(a.stack(b), [[1, 2], [3, 4]])
  same(a.stack(b, a, dim=1), [[1, 3, 1], [2, 4, 2]])
  same(Tensor.stack(a, b, dim=1), [[1, 3], [2, 4]])
  same(Tensor.stack([a, b], dim=-1), [[1, 3], [2, 4]])
  same(Tensor(np.float32(2.5)).stack(Tensor(np.float32(1))), np.float32([2.5, 1]))


def test_cat_stack_bad_arguments():
  a, b, c = Tensor([1, 2]), Tensor([3, 4]), Tensor([5, 6])
  with pytest.raises(ValueError, match="stack"):  # tinygrad's argfix: a sequence must be the only argument
    Tensor.stack((a, b), c)
  with pytest.raises(ValueError, match="cat"):
    Tensor.cat([a, b], c)
  with pytest.raises(TypeError, match="cat"):
    a.cat(3)
  with pytest.raises(IndexError, match="cat"):
    a.cat(b, dim=1)
  with pytest.raises(IndexError, match="stack"):
    a.stack(b, dim=2)
  with pytest.raises(IndexError, match="cat"):
    Tensor(1).cat(Tensor(2))
  assert not hasattr(Tensor, "cat_")


def test_cat_keeps_negative_zero():
  same(1 / Tensor.cat(Tensor([-0.0]), Tensor([1.0])), np.float32([-math.inf, 1]))
  same(Tensor([-0.0, 0.0]).cat(Tensor([-0.0]), Tensor([0.0, math.nan])), np.float32([-0.0, 0.0, -0.0, 0.0, math.nan]))
  same(Tensor([[-0.0]]).stack(Tensor([[0.0]]), dim=2), np.float32([[[-0.0, 0.0]]]))
