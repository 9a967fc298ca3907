"""A compiled kernel reuses the plan of its last run (pointers, alias check, chunks) only for the very same arrays;
new arrays, an in-place call after a plain one, and freed arrays each get a fresh plan, and no buffer is kept alive."""
from __future__ import annotations

import gc
import weakref

import numpy as np
from support.opt_helpers import elementwise_ast

from compiler.runtime.compiled import compile_kernel


def _ck():
  return compile_kernel(elementwise_ast(4, 16))  # out[i, j] = a[i, j] * b[j] + 1


def test_repeat_calls_on_new_arrays_write_the_new_arrays():
  ck = _ck()
  rng = np.random.default_rng(0)
  for _ in range(3):
    a, b = rng.standard_normal(64).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    out = np.zeros(64, np.float32)
    ck([out, a, b])
    ck([out, a, b])  # the reused plan
    np.testing.assert_array_equal(out, (a.reshape(4, 16) * b + 1).ravel())


def test_in_place_after_a_plain_call_uses_the_aliasing_variant():
  ck = _ck()
  a, b = np.arange(64, dtype=np.float32), np.full(16, 2, np.float32)
  out = np.zeros(64, np.float32)
  ck([out, a, b])
  want = a * 2 + 1
  ck([a, a, b])  # output overlaps an input: not the noalias plan of the call before
  np.testing.assert_array_equal(a, want)
  assert ck._last[2][0] is ck._alias_fxn


def test_the_cached_plan_keeps_no_buffer_alive():
  ck = _ck()
  a, b, out = np.ones(64, np.float32), np.ones(16, np.float32), np.zeros(64, np.float32)
  ck([out, a, b])
  ref = weakref.ref(a)
  del a
  gc.collect()
  assert ref() is None
  a2 = np.full(64, 3, np.float32)  # may get the freed array's id: must not match the dead weak reference
  ck([out, a2, b])
  np.testing.assert_array_equal(out, np.full(64, 4, np.float32))


def _split_kernel():
  """A kernel split across two threads (out = a * b + 1 over 1024 x 1024) and its arrays: (kernel, a, b, out)."""
  from compiler.opt import Kernel, Opt, OptOps, Target
  k = Kernel(elementwise_ast(1024, 1024), Target(threads=2))
  k.apply_opt(Opt(OptOps.THREAD, 0, 2))
  ck = compile_kernel(k.get_optimized_ast())
  a, b, out = np.ones(1 << 20, np.float32), np.full(1024, 2, np.float32), np.zeros(1 << 20, np.float32)
  return ck, a, b, out


def test_a_kernel_measured_too_short_for_threads_runs_on_one_and_back():
  ck, a, b, out = _split_kernel()
  assert len(ck._chunks(None, [out, a, b], 2)) == 2  # enough work for two threads by the static estimate
  ck._observe(1e-6, 2)  # a run that took a microsecond on two threads: not worth waking one
  assert ck._serial and ck._last is None and len(ck._chunks(None, [out, a, b], 2)) == 1
  ck._observe(1e-6, 1)
  assert ck._serial
  ck([out, a, b], threads=2)
  np.testing.assert_array_equal(out, np.full(1 << 20, 3, np.float32))
  ck._observe(1.0, 1)  # a long run on one thread: split again
  assert not ck._serial and len(ck._chunks(None, [out, a, b], 2)) == 2


def test_a_split_slower_by_the_clock_than_one_thread_is_dropped_and_tried_again_later():
  from compiler.runtime.compiled import SPLIT_RETRY
  ck, a, b, out = _split_kernel()
  chunks = lambda: len(ck._chunks(None, [out, a, b], 2))  # noqa: E731
  ck._observe(5e-3, 2)  # a split run with the work for two threads (10 ms of CPU): the next tries one thread
  assert ck._serial and chunks() == 1
  ck._observe(1e-3, 1)  # one thread took 1 ms, the split 5 ms (a loaded machine): one thread it is
  assert ck._serial
  for _ in range(SPLIT_RETRY - 2):
    ck._observe(1e-3, 1)
  assert ck._serial
  ck._observe(1e-3, 1)  # the SPLIT_RETRY-th on one thread: a split again, to see
  assert not ck._serial and chunks() == 2
  ck._observe(3e-4, 2)  # the load went away: 0.3 ms split, judged alone (the 5 ms split of the busy time is dropped)
  assert not ck._serial and chunks() == 2
  ck([out, a, b], threads=2)
  np.testing.assert_array_equal(out, np.full(1 << 20, 3, np.float32))


def test_a_long_kernel_on_one_thread_tries_a_split_every_serial_retry_runs_and_its_next_run_counts():
  # MNIST's step runs each kernel once: a 300 ms weight gradient made serial by a busy warm-up stayed on one thread
  # for SPLIT_RETRY steps, and the run after each switch (a new plan of the same arrays) was dropped as a first touch
  from compiler.runtime.compiled import LONG_RUN_S, SERIAL_RETRY, SPLIT_RETRY
  ck, a, b, out = _split_kernel()
  bufs = [out, a, b]
  ck._observe(3 * LONG_RUN_S, 2)  # a split run: the next tries one thread
  ck._observe(2 * LONG_RUN_S, 1)  # one thread faster (a busy machine): one thread
  assert ck._serial and SERIAL_RETRY < SPLIT_RETRY
  for _ in range(SERIAL_RETRY - 2):
    ck._observe(2 * LONG_RUN_S, 1)
  assert ck._serial
  ck._observe(2 * LONG_RUN_S, 1)  # the SERIAL_RETRY-th run on one thread: a split again (a short kernel: SPLIT_RETRY)
  assert not ck._serial
  plan = ck._plan(bufs, [], None, None)
  assert len(plan[2]) == 2 and plan[4] == [True]  # the switch's plan: its first run is a sample
  assert ck._plan(bufs, [], None, None) is plan
  ck([out, a, b])
  np.testing.assert_array_equal(out, np.full(1 << 20, 3, np.float32))
