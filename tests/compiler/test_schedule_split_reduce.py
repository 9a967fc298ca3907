"""A long reduce to few outputs is scheduled as partial reduces over disjoint slices plus their sum
(compiler/schedule/split.py), so the optimizer's THREAD split gives each thread its own slice of the input."""
import numpy as np
import pytest

from compiler import Tensor
from compiler.schedule import split


@pytest.fixture
def low_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
  # the real thresholds need 16M-element inputs; the rule is the same at a small size
  monkeypatch.setattr(split, "SPLIT_REDUCE_MIN", 1 << 12)
  monkeypatch.setattr(split, "SPLIT_REDUCE_RATIO", 1 << 9)


def test_a_long_sum_is_two_kernels_partials_over_its_longest_axis_within_float_tolerance(low_thresholds: None) -> None:
  a = np.random.default_rng(0).standard_normal((3, 40, 24, 7)).astype(np.float32)
  s = Tensor(a).sum(axis=(1, 2))  # 960 products per output: split along the longer reduce axis (40), in 2 parts
  names = [si.name for si in s.schedule()]
  assert names == ["r_3_2_7_20_24", "r_3_7_2"]  # (outputs 3 x part x 7, each a sum of 20 x 24; then the parts)
  got = Tensor(a).sum(axis=(1, 2)).numpy()
  ref = a.astype(np.float64).sum(axis=(1, 2))
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(a).sum(axis=(1, 2)).max())
  m = Tensor(a).max(axis=(0, 1, 2)).numpy()  # a max is split too, and exact
  np.testing.assert_array_equal(m, a.max(axis=(0, 1, 2)))


def test_a_short_reduce_or_one_no_part_divides_stays_one_kernel(low_thresholds: None) -> None:
  a = np.ones((128, 63), np.float32)
  assert len(Tensor(a).sum(axis=1).schedule()) == 1  # 63 per output: under the ratio
  b = np.ones((1, 4099), np.float32)  # 4099 per output, prime: no part divides it
  assert len(Tensor(b).sum(axis=1).schedule()) == 1
  np.testing.assert_array_equal(Tensor(b).sum(axis=1).numpy(), [4099.0])
