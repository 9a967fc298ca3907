"""Repeat calls cost less memory traffic: a released array is reused by the next Buffer of its dtype and size, and
a kernel output the kernel writes whole is not zeroed first. Never at the price of a value: an array someone still
holds is not reused, a plain first use still reads zeros, and leftover contents never reach a result."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from compiler import Tensor
from compiler.dtype import dtypes
from compiler.realize import run_schedule, whole_outputs
from compiler.runtime import buffer as bufmod
from compiler.runtime.buffer import Buffer, array_address
from compiler.schedule.rangeify import create_schedule
from compiler.uop import AxisType, Ops, UOp

pytestmark = pytest.mark.usefixtures("fresh_caches")


def test_a_released_array_is_taken_by_the_next_buffer_of_its_kind():
  b = Buffer(dtypes.float32, 1000).ensure_allocated()
  b.np[:] = 7
  arr = weakref.ref(b.np)
  del b
  assert arr() is not None  # kept for reuse
  other = Buffer(dtypes.float32, 999).ensure_allocated()  # another size: not that array
  assert other.np is not arr()
  c = Buffer(dtypes.float32, 1000).ensure_allocated()
  assert c.np is arr() and c.addr == array_address(c.np)
  assert not c.np.any()  # a plain first use reads zeros


def test_an_output_written_whole_keeps_the_old_contents_until_its_kernel_runs():
  b = Buffer(dtypes.int32, 64).ensure_allocated()
  b.np[:] = 5
  del b
  c = Buffer(dtypes.int32, 64).ensure_allocated(zero=False)
  assert (c.np == 5).all()  # no pass over the memory just to overwrite it


def test_an_array_held_elsewhere_is_not_reused():
  b = Buffer(dtypes.float32, 256).ensure_allocated()
  b.np[:] = 3
  held = b.np  # a caller kept the buffer's array
  view = Buffer(dtypes.float32, 256).ensure_allocated()
  part = view.np[10:20]  # ... or a view of it
  del b, view
  c = Buffer(dtypes.float32, 256).ensure_allocated(zero=False)
  d = Buffer(dtypes.float32, 256).ensure_allocated(zero=False)
  for x in (c, d):
    x.np[:] = -1
  assert (held == 3).all() and not part.any()


def test_copyin_fills_a_pooled_array_with_the_cast_values():
  b = Buffer(dtypes.int8, 6).ensure_allocated()
  arr = weakref.ref(b.np)
  del b
  c = Buffer(dtypes.int8, 6, np.array([[1.9, -2.5, 300.0], [-129.0, 0.0, 127.0]]))
  assert c.np is arr()
  with np.errstate(all="ignore"):
    want = np.array([[1.9, -2.5, 300.0], [-129.0, 0.0, 127.0]]).astype(np.int8).ravel()
  np.testing.assert_array_equal(c.np, want)


def _poison(dtype: np.dtype, *sizes: int) -> None:
  """Fill the pool with arrays of NaN (or -1) of these sizes, which any kernel output will be given."""
  for n in sizes:
    for _ in range(bufmod.POOL_PER_KIND):
      bufmod._give(np.full(n, np.nan if dtype.kind == "f" else -1, dtype))


@pytest.mark.parametrize("case", ["elementwise", "permuted", "reduce", "matmul", "softmax", "scalar", "assign"])
def test_leftover_contents_never_reach_a_result(case):
  rng = np.random.default_rng(1)
  a = rng.standard_normal((8, 16)).astype(np.float32)
  b = rng.standard_normal((16, 4)).astype(np.float32)
  _poison(np.dtype(np.float32), 1, 4, 8, 16, 32, 64, 128)
  ta, tb = Tensor(a), Tensor(b)
  if case == "elementwise":
    got, want = (ta * 2 + 1).relu(), np.maximum(a * 2 + 1, 0)
  elif case == "permuted":
    got, want = ta.permute(1, 0) * 3, a.T * 3
  elif case == "reduce":
    got, want = ta.sum(axis=0), a.sum(axis=0)
  elif case == "matmul":
    got, want = ta @ tb, a @ b
  elif case == "softmax":
    e = np.exp(a - a.max(-1, keepdims=True))
    got, want = ta.softmax(-1), e / e.sum(-1, keepdims=True)
  elif case == "scalar":
    got, want = ta.max(), a.max()
  else:
    ta.realize()
    ta.assign(ta * 2)
    got, want = ta, a * 2
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_the_schedulers_outputs_are_written_whole():
  a = Tensor(np.ones((4, 8, 3), np.float32))
  for out in (a * 2, a.permute(2, 0, 1) + 1, a.sum(axis=1), a.sum(), a.max(axis=2).exp(), a.softmax(-1)):
    sched, _ = create_schedule([out.uop])
    for si in sched:
      outs = sum(1 for st in si.ast.src if st.op is Ops.STORE)
      assert whole_outputs(si.ast) == frozenset(range(outs)), si.name


def _store_ast(idx: UOp, size: int, gate: UOp | None = None) -> UOp:
  g = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), (), 0)
  st = UOp(Ops.STORE, dtypes.void, (g.index(idx), UOp.const(dtypes.float32, 1.0), *(() if gate is None else (gate,))))
  return UOp.sink(st)


def test_a_store_that_may_skip_elements_is_not_whole():
  r0, r1 = UOp.range(4, 0), UOp.range(8, 1)
  assert whole_outputs(_store_ast(r0 * 8 + r1, 32)) == {0}
  assert whole_outputs(_store_ast(r1 + r0 * 8, 32)) == {0}  # term order does not matter
  assert whole_outputs(_store_ast(r0 * 8 + r1, 33)) == frozenset()  # one element never written
  assert whole_outputs(_store_ast(r0 * 16 + r1, 64)) == frozenset()  # every other row
  assert whole_outputs(_store_ast(r0 * 4 + r1, 32)) == frozenset()  # overlapping rows
  assert whole_outputs(_store_ast(r0 * 8 + r1, 32, gate=r1 < 4)) == frozenset()  # a gated store
  red = UOp.range(8, 1, AxisType.REDUCE)
  assert whole_outputs(_store_ast(r0 * 8 + red, 32)) == frozenset()  # not an output loop
  assert whole_outputs(_store_ast(UOp.const(dtypes.index, 0), 1)) == {0}


def test_a_kernel_reading_its_own_fresh_output_slot_gets_zeros():
  # one Buffer in two slots of a kernel: written whole as the output, but read as an input too, so it is zeroed
  x = Tensor(np.arange(8, dtype=np.float32))
  sched, _ = create_schedule([(x + 1).uop])
  si = sched[0]
  out = si.bufs[0]
  _poison(np.dtype(np.float32), 8)
  aliased = type(si)(si.ast, (out, out))
  run_schedule([aliased])
  np.testing.assert_array_equal(out.np, np.ones(8, np.float32))  # 0 + 1 everywhere, not NaN + 1
  del sched, si, aliased
  gc.collect()


def _last_plan(ck) -> tuple:
  """The plan the kernel made last for a call on Buffers."""
  return list(ck._fast.values())[-1]


def _ck():
  from support.opt_helpers import elementwise_ast

  from compiler.runtime.compiled import compile_kernel
  return compile_kernel(elementwise_ast(4, 16))  # out[i, j] = a[i, j] * b[j] + 1


def test_a_kernel_called_on_buffers_checks_them_as_on_arrays():
  ck = _ck()
  f32 = dtypes.float32
  a, b = np.arange(64, dtype=np.float32), np.full(16, 2, np.float32)
  out, ba, bb = Buffer(f32, 64).ensure_allocated(), Buffer(f32, 64, a), Buffer(f32, 16, b)
  ck([out, ba, bb])
  np.testing.assert_array_equal(out.np, a * 2 + 1)
  with pytest.raises(TypeError, match="buffer 1 must be float32"):
    ck([out, Buffer(dtypes.int32, 64).ensure_allocated(), bb])
  with pytest.raises(IndexError, match="buffer 2 has 8 elements"):
    ck([out, ba, Buffer(f32, 8).ensure_allocated()])
  with pytest.raises(ValueError, match="takes 3 buffers"):
    ck([out, ba])
  ck([ba, ba, bb])  # in place: the output is an input, so not the noalias plan of the first call
  np.testing.assert_array_equal(ba.np, a * 2 + 1)
  assert _last_plan(ck)[0] is ck._alias_fxn


def test_buffers_at_a_reused_address_give_their_own_values():
  ck = _ck()
  rng = np.random.default_rng(0)
  addrs = set()
  for _ in range(4):  # the pool hands the same arrays back: the same addresses, the remembered plan
    a, b = rng.standard_normal(64).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    bufs = [Buffer(dtypes.float32, 64).ensure_allocated(zero=False), Buffer(dtypes.float32, 64, a),
            Buffer(dtypes.float32, 16, b)]
    ck(bufs)
    np.testing.assert_array_equal(bufs[0].np, (a.reshape(4, 16) * b + 1).ravel())
    addrs.add(tuple(x.addr for x in bufs))
    del bufs
  assert len(addrs) <= 2  # (out and a may trade arrays)


def test_the_plan_of_buffers_at_the_same_addresses_but_other_sizes_is_made_anew():
  # out grows over the start of `a` at the very same addresses: the remembered no-alias plan would be wrong
  ck = _ck()
  block = np.zeros(200, np.float32)
  b = Buffer(dtypes.float32, 16, np.full(16, 2, np.float32))

  def view(start: int, n: int) -> Buffer:
    buf = Buffer(dtypes.float32, n)
    buf._set(block[start:start + n])
    return buf
  a = view(64, 64)
  ck([view(0, 64), a, b])
  assert _last_plan(ck)[0] is ck.fxn
  ck([view(0, 80), a, b])
  assert _last_plan(ck)[0] is ck._alias_fxn


def test_strides_of_a_store_index_read_by_its_linear_form():
  from compiler.dtype import dtypes
  from compiler.realize import _strides
  from compiler.uop import AxisType, Ops, UOp
  c = lambda v: UOp.const(dtypes.int32, v)  # noqa: E731
  r0, r1 = (UOp(Ops.RANGE, dtypes.int32, (c(n),), (i, AxisType.LOOP)) for i, n in ((0, 8), (1, 4)))
  assert sorted(_strides(r0 * c(4) + r1)) == [(1, 4), (4, 8)]
  assert _strides(c(0)) == []
  assert _strides(r0 * c(4) + r1 + c(1)) is None  # an offset: not from element 0
  assert _strides(r0 * r1) is None
  up = UOp(Ops.RANGE, dtypes.int32, (c(4),), (2, AxisType.UPCAST))
  assert _strides(r0 * c(4) + up) is None


def test_the_pool_keeps_as_many_of_a_kind_as_one_schedule_took(monkeypatch):
  # a schedule that took 20 arrays of one kind gets all 20 back from the pool the next time, not POOL_PER_KIND
  monkeypatch.setenv("NO_MEMORY_PLANNER", "1")  # (every intermediate its own array)
  x = Tensor(np.ones((16, 16), np.float32)).realize()

  def run() -> np.ndarray:
    y = x
    for _ in range(20):
      y = (y * 0.5 + y.max(axis=1, keepdim=True)).contiguous()
    return y.numpy().copy()  # (a view held would keep its array from the next run)

  first = run()
  gc.collect()
  kind = (np.dtype(np.float32), 256)
  pooled = [weakref.ref(a) for a in bufmod._pool.get(kind, [])]
  assert len(pooled) >= 20 > bufmod.POOL_PER_KIND
  again = run()
  gc.collect()
  assert np.array_equal(first, again)
  assert all(r() is not None for r in pooled)  # every array the second run took came from the pool and went back
  assert {id(a) for a in bufmod._pool[kind]} == {id(r()) for r in pooled}


def test_the_pools_bytes_follow_the_need_up_to_the_machines_cap(monkeypatch):
  monkeypatch.setattr(bufmod, "POOL_BYTES", 1 << 20)
  monkeypatch.setattr(bufmod, "_pool_cap", [3 << 20])
  kind = (dtypes.float32, 1 << 18)  # 1 MiB arrays
  assert bufmod.pool_limit() == 1 << 20
  bufmod.note_schedule_need({kind: 2})
  assert bufmod.pool_limit() == 2 << 20
  bufmod.note_schedule_need({kind: 1})  # a high-water mark: a smaller schedule lowers nothing
  assert bufmod.pool_limit() == 2 << 20
  for _ in range(3):
    bufmod._give(np.zeros(1 << 18, np.float32))
  assert len(bufmod._pool[(np.dtype(np.float32), 1 << 18)]) == 2
  bufmod.note_schedule_need({kind: 8})
  assert bufmod.pool_limit() == 3 << 20  # the cap, whatever the program needs
  bufmod.clear_pool()
  assert bufmod.pool_limit() == 1 << 20  # a fresh start forgets the need


def test_the_pool_keeps_what_every_schedule_took_and_evicts_the_oldest_when_capped(monkeypatch):
  # two programs side by side (bench_real: MNIST's 160 MB arena among GPT's and ResNet's): the pool was sized by the
  # biggest schedule alone and refused the arena another program's arrays left no room for, so MNIST's every call
  # faulted 160 MB in again (1.2 s a call instead of 0.86)
  monkeypatch.setattr(bufmod, "POOL_BYTES", 1 << 20)
  monkeypatch.setattr(bufmod, "_pool_cap", [8 << 20])
  big, small = (dtypes.uint8, 2 << 20), (dtypes.uint8, 3 << 19)  # program A's 2 MiB arena, B's 1.5 MiB one
  bufmod.note_schedule_need({big: 1})
  bufmod.note_schedule_need({small: 1})
  assert bufmod.pool_limit() == (2 << 20) + (3 << 19)  # both programs' memory at once
  a, b = np.zeros(2 << 20, np.uint8), np.zeros(3 << 19, np.uint8)
  ids = id(a), id(b)
  bufmod._give(a)
  bufmod._give(b)
  del a, b
  assert (id(bufmod._take(np.dtype(np.uint8), 2 << 20)), id(bufmod._take(np.dtype(np.uint8), 3 << 19))) == ids
  monkeypatch.setattr(bufmod, "_pool_cap", [3 << 20])  # room for one: the one given back last stays
  bufmod._give(np.zeros(2 << 20, np.uint8))
  c = np.zeros(3 << 19, np.uint8)
  kept = id(c)
  bufmod._give(c)
  del c
  assert id(bufmod._take(np.dtype(np.uint8), 3 << 19)) == kept
  assert bufmod._take(np.dtype(np.uint8), 2 << 20) is None and bufmod._pool_bytes[0] == 0
  # the bytes follow the schedules that ran lately: one that stopped running leaves the sum (a program of many shapes
  # would otherwise grow the pool to the cap)
  bufmod.clear_pool()
  monkeypatch.setattr(bufmod, "_pool_cap", [64 << 20])
  monkeypatch.setattr(bufmod, "POOL_SCHEDULES", 2)
  for n in (4, 2, 3, 2):  # 4 MiB, 2 MiB, 3 MiB, 2 MiB again (a schedule that ran before: the newest again)
    bufmod.note_schedule_need({(dtypes.uint8, n << 20): 1})
  assert bufmod.pool_limit() == 5 << 20
  bufmod.clear_pool()


def test_buffers_count_the_bytes_they_hold_and_their_peak():
  gc.collect()
  base = bufmod.memory_in_use()
  bufmod.reset_peak()
  a = Buffer(dtypes.float32, 1000).ensure_allocated()
  b = Buffer(dtypes.int8, 24, np.arange(24))
  assert bufmod.memory_in_use() == base + 4024
  del a
  assert bufmod.memory_in_use() == base + 24 and bufmod.memory_peak() == base + 4024
  c = Buffer.borrow(dtypes.float32, np.ones(10, np.float32))  # a caller's array counts while a buffer reads it
  assert bufmod.memory_in_use() == base + 64
  del b, c
  assert bufmod.memory_in_use() == base and bufmod.memory_peak() == base + 4024
