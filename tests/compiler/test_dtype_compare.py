"""DType equality answers unequal hashes without building the field keys; a hand-made dtype still equals the interned
one with its fields, and no two different dtypes compare equal."""
import itertools

from compiler.dtype import DType, dtypes


def test_equality_is_the_fields():
  ds = [dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool, dtypes.float32.vec(4), dtypes.float32.vec(8),
        dtypes.float32.ptr(16), dtypes.float32.ptr(17), dtypes.float32.ptr(), dtypes.int8, dtypes.uint8]
  for a, b in itertools.product(ds, ds):
    assert (a == b) == (a is b)
  hand = DType(dtypes.float32.priority, 4, "float32", "f")
  assert hand == dtypes.float32 and dtypes.float32 == hand and hash(hand) == hash(dtypes.float32)
  assert DType(dtypes.float32.priority, 4, "float32", "e") != dtypes.float32  # same name and hash, other fields
