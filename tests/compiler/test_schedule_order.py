"""The schedule's run order for memory (compiler/schedule/order.py, issue 29): counted, never timed."""
from __future__ import annotations

from compiler.dtype import dtypes
from compiler.schedule.order import memory_order, peak_bytes
from compiler.uop import Ops, UOp


def _buf(uid: int, size: int) -> UOp:
  return UOp(Ops.BUFFER, dtypes.float32, (), (uid, size))


def _kernel(name: str, outs: list[UOp], ins: list[UOp]) -> tuple[UOp, tuple[UOp, ...]]:
  """A kernel as the scheduler lists it: (AST with one STORE per output, (outputs, inputs)); a NOOP stands for each
  STORE, its arg the kernel's name."""
  return UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.NOOP, dtypes.void, (), name) for _ in outs)), (*outs, *ins)


def test_a_sum_runs_before_the_next_big_buffer_and_in_place_writes_keep_their_order():
  # the walk's order makes A and C (1000 floats each) before either sum reads them: 8004 bytes live at once; summing A
  # first lets it die before C is made. W is a buffer of the tensor graph: sum_a reads its old contents, so its
  # in-place writer stays after sum_a, though it would make no new bytes and so be picked first
  x, w = _buf(0, 1000), _buf(1, 1000)
  a, c, sa, sc = _buf(2, 1000), _buf(3, 1000), _buf(4, 1), _buf(5, 1)
  walk = [_kernel("make_a", [a], [x]), _kernel("make_c", [c], [x]), _kernel("sum_a", [sa], [a, w]),
          _kernel("sum_c", [sc], [c]), _kernel("write_w", [w], [x])]
  got = memory_order(walk, in_place={x, w})
  names = [k[0].src[0].arg for k in got]
  assert sorted(names) == sorted(k[0].src[0].arg for k in walk)
  assert names.index("sum_a") < names.index("make_c") and names.index("sum_a") < names.index("write_w"), names
  assert names.index("make_a") < names.index("sum_a") and names.index("make_c") < names.index("sum_c"), names
  made = {a, c, sa, sc}
  assert peak_bytes(walk, list(range(5)), made) == 8004
  assert peak_bytes(got, list(range(5)), made) == 4004
  # an order no better than the walk's is left as it was
  assert memory_order(got, in_place={x, w}) == got
