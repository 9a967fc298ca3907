"""Tensors realized from equal graphs: hash-consing makes their graphs one node, and realizing gives them one buffer.
Writing one (`assign`, `+=`) must not change the others, as in torch, where they are separate tensors."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import Tensor
from compiler.runtime.buffer import buffer_of

X = np.array([1.0, 2.0, 3.0], dtype=np.float32)


def _zeros() -> Tensor:
  return Tensor(np.zeros(3, dtype=np.float32))


MAKERS = {
  "add": lambda x: x + 1,
  "mul_by_one": lambda x: (x * 1).contiguous(),  # folds to x itself: the realized graph is x's own buffer
  "contiguous": lambda x: x.contiguous(),
  "exp": lambda x: x.exp(),
}


@pytest.mark.parametrize("name", MAKERS)
@pytest.mark.parametrize("together", [False, True], ids=["separately", "together"])
def test_assign_to_one_of_two_equal_tensors_leaves_the_other(name, together):
  x = Tensor(X.copy())
  a, b = MAKERS[name](x), MAKERS[name](x)
  if together:
    a.realize(b)
  else:
    a.realize()
    b.realize()
  want = MAKERS[name](Tensor(X.copy())).numpy()
  a.assign(_zeros()).realize()
  np.testing.assert_array_equal(a.numpy(), np.zeros(3, np.float32))
  np.testing.assert_array_equal(b.numpy(), want)
  np.testing.assert_array_equal(x.numpy(), X)


def test_in_place_add_to_one_of_two_equal_tensors():
  x = Tensor(X.copy())
  a, b = x + 1, x + 1
  a.realize()
  b.realize()
  a += 5
  a.realize()
  np.testing.assert_array_equal(a.numpy(), X + 6)
  np.testing.assert_array_equal(b.numpy(), X + 1)


def test_an_unshared_buffer_is_still_written_in_place():
  a = (Tensor(X.copy()) + 1).realize()
  before = buffer_of(a.uop)
  a.assign(_zeros()).realize()
  assert buffer_of(a.uop) is before
  np.testing.assert_array_equal(a.numpy(), np.zeros(3, np.float32))

