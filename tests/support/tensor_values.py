"""One tensor's values (and dtype) against numpy, and seeded random data: the checks the Tensor theme tests
(tests/compiler/test_tensor*.py) share."""
from __future__ import annotations

from typing import Any

import numpy as np

from compiler import Tensor

rng = np.random.default_rng(1234)


def check_value(t: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6, dtype: Any = None) -> None:
  """t's values equal expected (ints and bools exactly, floats within rtol/atol, nan where nan); and its dtype."""
  expected = np.asarray(expected)
  got = t.numpy()
  assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
  if dtype is not None:
    assert t.dtype == dtype, f"dtype {t.dtype} != {dtype}"
    assert got.dtype == dtype.np
  if got.dtype == np.bool_ or np.issubdtype(got.dtype, np.integer):
    np.testing.assert_array_equal(got, expected.astype(got.dtype))
  else:
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


def randf(*shape: int) -> np.ndarray:
  return rng.standard_normal(shape).astype(np.float32)


def randi(*shape: int, lo: int = -20, hi: int = 20) -> np.ndarray:
  return rng.integers(lo, hi, shape).astype(np.int32)


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
  """Equal as bits where both are numbers (NaN payloads aside: any NaN for a NaN), signed zeros included."""
  assert got.dtype == want.dtype and got.shape == want.shape
  if got.dtype.kind == "f":
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(f"u{got.itemsize}"), want[ok].view(f"u{got.itemsize}"))
  else:
    np.testing.assert_array_equal(got, want)


def conv_grads_and_softmax(seed: int, out_channels: int) -> list[Any]:
  """A padded conv's input and weight gradients and a matmul's softmax (unrealized): a dozen kernels of lane indices
  with // and %, gated loads and reductions, the compile tests' small real program."""
  r = np.random.default_rng(seed)
  x = Tensor(r.standard_normal((2, 3, 9, 9)).astype(np.float32), requires_grad=True)
  w = Tensor(r.standard_normal((out_channels, 3, 3, 3)).astype(np.float32), requires_grad=True)
  x.conv2d(w, padding=1).relu().sum().backward()
  a = Tensor(r.standard_normal((16, 24)).astype(np.float32))
  b = Tensor(r.standard_normal((24, 20)).astype(np.float32))
  return [x.grad, w.grad, (a @ b).softmax(-1)]
