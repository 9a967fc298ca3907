"""Batched comparisons against numpy, shared by the tests/compiler/test_tensor_*.py files."""
from __future__ import annotations

import numpy as np


def check(*pairs, rtol: float = 1e-5, atol: float = 1e-6, exact: bool = False) -> None:
  """(Tensor, numpy reference) pairs, realized in one schedule; exact also compares dtypes' kinds and signed zeros."""
  ts = [t for t, _ in pairs]
  ts[0].realize(*ts[1:])
  for k, (t, ref) in enumerate(pairs):
    got, ref = t.numpy(), np.asarray(ref)
    assert got.shape == ref.shape, f"pair {k}: shape {got.shape} != {ref.shape}"
    if exact:
      assert got.dtype.kind == ref.dtype.kind or ref.size == 0, f"pair {k}: dtype {got.dtype} vs {ref.dtype}"
      np.testing.assert_array_equal(got, ref, err_msg=f"pair {k}")
      if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(ref), err_msg=f"pair {k}: sign of zero")
    else:
      np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                                 err_msg=f"pair {k}")


def specials(*shape: int, seed: int = 0) -> np.ndarray:
  """float32 normals with nan, inf, -inf, -0.0 and 0.0 sprinkled in (where the size allows)."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(shape).astype(np.float32)
  flat = x.reshape(-1)
  for i, v in enumerate([np.nan, np.inf, -np.inf, -0.0, 0.0][:flat.size // 3]):
    flat[(i * 7) % flat.size] = v
  return x
