"""DTypes are interned by their constructor: a hand-made, unpickled or copied dtype is the one object with its fields,
so equality is identity and hashing the object's (both in C: no Python __hash__/__eq__ call), and no two different
dtypes compare equal."""
import copy
import dataclasses
import itertools
import pickle

import numpy as np

from compiler.dtype import DType, PtrDType, dtypes


def _some() -> list[DType]:
  return [dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool, dtypes.float32.vec(4), dtypes.float32.vec(8),
          dtypes.float32.ptr(16), dtypes.float32.ptr(17), dtypes.float32.ptr(), dtypes.int8, dtypes.uint8,
          dtypes.float32.vec(4).ptr(), dtypes.void]


def test_equality_is_the_fields():
  ds = _some()
  for a, b in itertools.product(ds, ds):
    assert (a == b) == (a is b) and (a != b) == (a is not b)
  hand = DType(dtypes.float32.priority, 4, "float32", "f")
  assert hand == dtypes.float32 and dtypes.float32 == hand and hash(hand) == hash(dtypes.float32)
  assert DType(dtypes.float32.priority, 4, "float32", "e") != dtypes.float32  # same name, other fields


def test_made_again_is_the_same_object():
  assert DType(dtypes.float32.priority, 4, "float32", "f") is dtypes.float32
  assert DType(dtypes.float32.priority, 16, "float32x4", None, 4, dtypes.float32) is dtypes.float32.vec(4)
  p = dtypes.float32.ptr(16)
  assert p is dtypes.float32.ptr(16) is PtrDType(*(getattr(p, f.name) for f in dataclasses.fields(p)))
  assert dataclasses.replace(dtypes.float32.ptr(16), size=17) is dtypes.float32.ptr(17)
  for d in _some():
    assert pickle.loads(pickle.dumps(d)) is d and copy.copy(d) is d and copy.deepcopy(d) is d


def test_hash_and_compare_are_objects_own():
  # hashed in every UOp's hash-consing key: a Python-level __hash__ was ~0.5M calls in a GPT step's first call
  for cls in (DType, PtrDType):
    assert cls.__hash__ is object.__hash__ and cls.__eq__ is object.__eq__ and cls.__ne__ is object.__ne__


def test_not_equal_to_other_kinds():
  for other in (np.dtype("float32"), np.float32, "float32", None, 11):
    assert dtypes.float32 != other and not dtypes.float32 == other
