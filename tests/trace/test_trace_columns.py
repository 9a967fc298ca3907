"""A flush's node columns (compiler.trace.recorder.node_columns), made from the nodes' keys and args: each field
spelled out, each text made once per object (kept alive, so that its id is not another's), and values that do not fit
a column are an error, not a wrong number."""
import struct

import pytest

from compiler import UOp
from compiler.trace.recorder import TraceIds, node_columns


class _Codes:
  """A code table as the recorder keeps one: an object's code is the index of its text among the texts seen."""

  def __init__(self) -> None:
    self.texts: list[str] = []
    self.by_id: dict[int, int] = {}
    self.calls = 0

  def __call__(self, obj) -> int:
    self.calls += 1
    text = repr(obj)
    if text not in self.texts:
      self.texts.append(text)
    return self.texts.index(text)


def _u32(raw: bytes) -> list[int]:
  return list(struct.unpack(f"<{len(raw) // 4}I", raw))


def _keys(*roots: UOp) -> tuple[list[bytes], list, TraceIds]:
  rows: list[bytes] = []
  args: list = []
  ids = TraceIds(rows.append, add_arg=args.append)
  for r in roots:
    ids.id_of(r)
  return rows, args, ids


def test_columns_spell_out_each_node():
  a = UOp.variable("a", 0, 9)
  x = UOp.sink(*[(a * 4 + 3) // 4 + i for i in range(20)])  # (a SINK of more sources than a key has a packer for)
  rows, args, ids = _keys(x)
  nodes = x.toposort()
  assert [ids.get(u) for u in nodes] == list(range(len(rows)))
  ar = _Codes()
  dtype_codes = [100 + i for i in range(len(ids.dtypes))]
  op, dtype, arg, nsrc, src = node_columns(rows, args, dtype_codes, ar.by_id, ar, [])
  assert _u32(op) == [int(u.op) for u in nodes]
  assert [ids.dtypes[c - 100] for c in _u32(dtype)] == [u.dtype for u in nodes]
  assert [ar.texts[c] for c in _u32(arg)] == [repr(u.arg) for u in nodes]
  assert _u32(nsrc) == [len(u.src) for u in nodes]
  assert _u32(src) == [ids.get(s) for u in nodes for s in u.src]


def test_the_code_of_an_object_seen_before_is_looked_up_not_made_again():
  x = UOp.variable("a", 0, 9) + 1
  rows, args, ids = _keys(x)
  ar = _Codes()
  kept: list = []
  for _ in range(2):
    node_columns(rows, args, [0] * len(ids.dtypes), ar.by_id, ar, kept)
  assert ar.calls == len({id(a) for a in args}) == len(kept)  # each object coded once, and kept while its id counts


@pytest.mark.parametrize("bad", [1 << 32, -1])
def test_a_code_outside_u32_is_an_overflow(bad):
  rows, args, _ = _keys(UOp.variable("a", 0, 3) + 1)
  with pytest.raises(OverflowError):
    node_columns(rows, args, [bad] * 8, {}, _Codes(), [])
  with pytest.raises(OverflowError):
    node_columns(rows, args, [0] * 8, {}, lambda obj: bad, [])


def test_an_error_in_a_code_callback_propagates():
  def boom(obj):
    raise RuntimeError("no code for you")
  rows, args, _ = _keys(UOp.variable("a", 0, 3))
  with pytest.raises(RuntimeError, match="no code for you"):
    node_columns(rows, args, [0], {}, boom, [])


def test_a_none_arg_takes_the_code_of_none_without_a_lookup_of_its_own():
  # (most nodes' arg is None: the flush tells them by their arg number, 0, and looks None up once a batch)
  a = UOp.variable("a", 0, 9)
  x = a
  for _ in range(50):
    x = x * a
  rows, args, ids = _keys(x)
  nodes = x.toposort()

  class Counting(dict):
    gets = 0

    def get(self, *key):
      Counting.gets += 1
      return super().get(*key)
  ar = _Codes()
  _, _, arg, _, _ = node_columns(rows, args, [0] * len(ids.dtypes), Counting(), ar, [])
  assert [ar.texts[c] for c in _u32(arg)] == [repr(u.arg) for u in nodes]
  given = sum(u.arg is not None for u in nodes)
  assert given < 5 < len(nodes) - given
  assert Counting.gets <= 2 * (1 + given)  # (per node: once each of the 51 nodes)
