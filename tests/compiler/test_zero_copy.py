"""Repeat calls without copies: `.numpy()` is a read-only view of the result's buffer, `Tensor.from_numpy` lets the
kernels read the caller's array, and a TinyJit replay reads its inputs in place. Never at the price of a value: an
array handed out keeps its numbers whatever runs later (a kernel about to write memory someone still reads gets
memory of its own first), the caller's array is never written, and an array a kernel cannot read directly
(non-contiguous, another dtype or byte order, unaligned) is copied."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from compiler import Tensor, TinyJit
from compiler.realize import buffer_of_view
from compiler.runtime import buffer as bufmod
from compiler.runtime.buffer import array_address, buffer_of


def _buf(t: Tensor):
  return buffer_of(buffer_of_view(t.uop))


def _address(a: np.ndarray) -> int:
  return a.__array_interface__["data"][0]


def test_numpy_is_a_read_only_view_of_the_result():
  t = (Tensor(np.arange(12, dtype=np.float32)) * 2).reshape(3, 4)
  got = t.numpy()
  assert got.shape == (3, 4) and not got.flags.writeable
  assert _address(got) == _buf(t).addr  # no copy
  with pytest.raises(ValueError, match="read-only"):
    got[0, 0] = 5
  np.testing.assert_array_equal(t.numpy(), np.arange(12).reshape(3, 4) * 2)


def test_a_kept_result_keeps_its_values_when_its_tensor_is_assigned(backend):
  t = Tensor(np.arange(8, dtype=np.float32)).contiguous().realize()
  before = t.numpy()
  t.assign(t * 10 + 1).realize()  # written whole: into other memory, since `before` reads the old
  np.testing.assert_array_equal(before, np.arange(8))
  np.testing.assert_array_equal(t.numpy(), np.arange(8) * 10 + 1)


def test_a_buffer_about_to_be_written_in_part_moves_with_its_contents():
  from compiler.dtype import dtypes
  from compiler.runtime.buffer import Buffer
  b = Buffer(dtypes.int32, 6, np.arange(6, dtype=np.int32))
  view = b.numpy()
  addr = b.addr
  b.prepare_write(whole=False)  # a kernel writing some elements: the others must still read the old values
  assert b.addr != addr and b.np.flags.writeable
  b.np[:2] = -1
  np.testing.assert_array_equal(b.np, [-1, -1, 2, 3, 4, 5])
  np.testing.assert_array_equal(view, np.arange(6))
  del view
  addr = b.addr
  b.prepare_write(whole=False)  # nobody else reads it now: in place
  assert b.addr == addr


def test_memory_nobody_else_reads_is_written_in_place():
  t = Tensor(np.arange(8, dtype=np.float32)).contiguous().realize()
  addr = _buf(t).addr
  t.assign(t + 1).realize()
  t.numpy()  # (a view made and dropped)
  t.assign(t + 1).realize()
  assert _buf(t).addr == addr
  np.testing.assert_array_equal(t.numpy(), np.arange(8) + 2)


def test_a_view_keeps_its_memory_out_of_the_pool_until_it_is_gone():
  bufmod.clear_pool()
  kept = (Tensor(np.ones(4096, np.float32)) + 1).numpy()
  gc.collect()  # its tensor and buffer are gone: the memory is pooled, but still read by `kept`
  others = [(Tensor(np.full(4096, i, np.float32)) * 3).numpy() for i in range(4)]
  np.testing.assert_array_equal(kept, np.full(4096, 2))
  for i, o in enumerate(others):
    np.testing.assert_array_equal(o, np.full(4096, 3 * i))
  addrs = {_address(a) for a in [kept, *others]}
  assert len(addrs) == 5
  del kept, others
  again = (Tensor(np.ones(4096, np.float32)) * 5).numpy()  # now reused: no fresh pages
  assert _address(again) in addrs
  np.testing.assert_array_equal(again, np.full(4096, 5))


def test_from_numpy_reads_the_callers_array_and_never_writes_it(backend):
  a = np.arange(16, dtype=np.float32).reshape(4, 4)
  t = Tensor.from_numpy(a)
  assert _buf(t).addr == _address(a)  # no copy
  np.testing.assert_array_equal((t + 1).numpy(), a + 1)
  a[0, 0] = 100  # shared memory, as torch.from_numpy: the change shows
  assert (t * 1).numpy()[0, 0] == 100
  t.assign(t * 2).realize()
  t.assign(t.flip(0) + 0).realize()  # (reads other elements of the target)
  np.testing.assert_array_equal(a.ravel(), [100, *range(1, 16)])  # the caller's array is untouched
  want = np.arange(16, dtype=np.float32).reshape(4, 4) * 2
  want[0, 0] = 200
  np.testing.assert_array_equal(t.numpy(), want[::-1])


def _unaligned(x: np.ndarray) -> np.ndarray:
  raw = np.zeros(x.size * 4 + 1, np.uint8)
  a = raw[1:].view(np.float32).reshape(x.shape)
  assert not a.flags.aligned and a.flags.c_contiguous
  a[...] = x
  return a


@pytest.mark.parametrize("make", [
  lambda x: x[:, ::2],  # non-contiguous
  lambda x: np.asfortranarray(x),  # another order
  lambda x: x.astype(np.float64),  # another dtype than the tensor's (float32, below)
  _unaligned,
], ids=["strided", "fortran", "float64", "unaligned"])
def test_from_numpy_copies_what_a_kernel_cannot_read(make):
  x = np.arange(48, dtype=np.float32).reshape(4, 12) - 7
  arr = make(x)
  want = np.asarray(arr, dtype=np.float32) * 3 + 1
  t = Tensor.from_numpy(arr, dtype="float32")
  assert t.dtype.name == "float32" and _buf(t).addr != _address(arr)
  np.testing.assert_array_equal((t * 3 + 1).numpy(), want)
  jitted = TinyJit(lambda a: (a * 3 + 1).contiguous())
  for i in range(4):
    got = jitted(Tensor.from_numpy(arr + i if arr.flags.aligned else _unaligned(arr + i), dtype="float32")).numpy()
    np.testing.assert_array_equal(got, want + 3 * i)


def test_repeat_jit_calls_with_new_data_keep_every_result(backend):
  rng = np.random.default_rng(0)
  w = rng.standard_normal((32, 16)).astype(np.float32)
  jitted = TinyJit(lambda x, w: (x @ w).relu().softmax(-1))
  wt = Tensor(w)
  xs = [rng.standard_normal((8, 32)).astype(np.float32) for _ in range(6)]
  kept = []
  for i, x in enumerate(xs):
    inp = Tensor.from_numpy(x) if i % 2 else Tensor(x)
    kept.append(jitted(inp, wt).numpy())
  for x, got in zip(xs, kept):  # a replay never changed an earlier result
    e = np.exp(np.maximum(x @ w, 0) - np.maximum(x @ w, 0).max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_a_replay_reads_a_shared_input_as_it_is_at_the_call():
  a = np.ones(64, np.float32)
  jitted = TinyJit(lambda x: (x * 2).contiguous())
  for i in range(5):
    a[:] = i  # the caller refills its array between calls
    np.testing.assert_array_equal(jitted(Tensor.from_numpy(a)).numpy(), np.full(64, 2 * i))
  np.testing.assert_array_equal(a, np.full(64, 4))


def test_a_replays_output_passed_back_in_gives_the_plain_result():
  # y is the capture's own output buffer: the kernel writing it must not read it at other elements
  jitted = TinyJit(lambda x: (x.flip(0) + 1).contiguous())
  for i in range(4):
    x = np.arange(4096, dtype=np.float32) * (i + 1)
    y = jitted(Tensor(x))
    first = y.numpy()
    z = jitted(y).numpy()
    np.testing.assert_array_equal(first, x[::-1] + 1)
    np.testing.assert_array_equal(z, x + 2)


def test_an_input_assigned_in_a_replay_leaves_the_callers_array():
  @TinyJit
  def step(p: Tensor, g: Tensor) -> Tensor:
    p.assign(p - g).realize()
    return (p * 1).contiguous()
  p = Tensor(np.zeros(8, np.float32)).contiguous().realize()
  seen = []
  for _ in range(5):
    g = np.full(8, 1, np.float32)
    seen.append((p.numpy(), step(p, Tensor.from_numpy(g)).numpy()))
    np.testing.assert_array_equal(g, np.ones(8))
  for i, (before, after) in enumerate(seen):
    np.testing.assert_array_equal(before, np.full(8, -i))
    np.testing.assert_array_equal(after, np.full(8, -i - 1))


def test_output_slots_are_the_kernels_stores():
  from compiler.realize import get_runner, output_slots
  x = Tensor(np.ones((4, 8), np.float32))
  for si in x.softmax(-1).schedule():
    outs = {s for s, _ in output_slots(si.ast)}
    assert outs == set(get_runner(si.ast).program.outs)


def test_array_address_of_a_read_only_view():
  a = np.arange(8, dtype=np.float32)
  v = a.view()
  v.flags.writeable = False
  assert array_address(v) == _address(a)


def test_a_jitted_function_takes_numpy_arrays_and_never_writes_them(backend):
  @TinyJit
  def f(x: Tensor, scale: Tensor) -> Tensor:
    assert isinstance(x, Tensor) and isinstance(scale, Tensor)  # the function itself is given Tensors
    x.assign(x * scale).realize()  # (writes its argument: never the caller's array)
    return (x + 1).contiguous()
  rng = np.random.default_rng(1)
  kept = []
  for i in range(6):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    x_before = x.copy()
    arg = x if i % 3 else x[:, ::-1]  # a strided array is copied, not read in place
    s = np.full((4, 8), i, np.float32)
    kept.append((np.ascontiguousarray(arg) * i + 1, f(arg, scale=s).numpy()))
    np.testing.assert_array_equal(x, x_before)
  for want, got in kept:
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_numpy_argument_of_another_shape_or_dtype_is_an_error():
  from compiler.jit import JitError
  f = TinyJit(lambda x: (x * 2).contiguous())
  for _ in range(3):
    f(np.ones((2, 3), np.float32))
  with pytest.raises(JitError, match="shape"):
    f(np.ones((3, 2), np.float32))
  with pytest.raises(JitError, match="int32"):
    f(np.ones((2, 3), np.int32))
