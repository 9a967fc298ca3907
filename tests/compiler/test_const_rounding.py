"""Rounding a constant to a float dtype is remembered (numpy's rounding cost ~5 us a constant): every part of the key
matters, so a remembered value is never another constant's."""
import math

import numpy as np

from compiler.dtype import dtypes, truncate


def _numpy(dt, v):
  with np.errstate(all="ignore"):
    return float(np.array(v, dtype=np.float64).astype(dt.np))


def test_remembered_values_are_each_constants_own():
  values = [0.1, -0.0, 0.0, 65520.0, 1e39, -1e39, math.inf, float("nan"), 3, True, np.float32(0.1), 2 ** 70, 0,
            np.float32(-0.0), np.float64(-0.0), np.float32(0.0)]  # numpy's -0.0 equals 0 but keeps its sign
  for _ in range(2):  # the second round is answered from the memo
    for v in values:
      for dt in (dtypes.float16, dtypes.float32, dtypes.float64):
        got, want = truncate(dt, v), _numpy(dt, v)
        assert (got == want or math.isnan(got) and math.isnan(want)) and math.copysign(1, got) == math.copysign(1, want)
  assert truncate(dtypes.float16, 0.1) != truncate(dtypes.float32, 0.1)  # the dtype is in the key
  assert math.copysign(1, truncate(dtypes.float32, -0.0)) == -1 and math.copysign(1, truncate(dtypes.float32, 0.0)) == 1
  assert truncate(dtypes.float32, np.float32(0.1)) == truncate(dtypes.float32, 0.1)  # equal values, equal results
