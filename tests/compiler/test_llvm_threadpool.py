"""The kernels' thread pool (compiler.runtime.threadpool): its chunks cover a job's range exactly once whoever runs
them, a worker that comes late claims nothing, the join cap holds, a busy pool refuses a second caller, and split
runs of compiled kernels give the single-thread run's numbers bit for bit."""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np
import pytest
from support.codegen_helpers import TH, UP, G, matmul, split

from compiler.runtime import threadpool
from compiler.runtime.compiled import compile_kernel
from compiler.runtime.threadpool import entry_for, get_pool, job_words

# a "kernel" of one pointer argument and an int64 (start, end): a Python callback that records what it ran
_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


class Recorder:
  """A kernel stand-in: records (thread, start, end) of every chunk it runs."""

  def __init__(self):
    self.runs: list[tuple[int, int, int]] = []
    self.fn = _CB(lambda _ptr, s, e: self.runs.append((threading.get_ident(), s, e)))
    self.addr = ctypes.cast(self.fn, ctypes.c_void_p).value


MAIN = threading.get_ident()


def _job(rec: Recorder, n: int, t: int, joiners: int) -> ctypes.Array:
  return job_words(entry_for(1, 0, True), rec.addr, n, t, joiners, [0])


@pytest.mark.parametrize("n,t", [(2, 2), (7, 3), (1000, 16), (5, 5)])
def test_chunks_cover_the_range_exactly_once(n, t):
  pool = get_pool(1)
  for _ in range(20):
    rec = Recorder()
    assert pool.run(_job(rec, n, t, 1))
    spans = sorted((s, e) for _, s, e in rec.runs)
    assert spans == [(n * i // t, n * (i + 1) // t) for i in range(t)]


def test_a_worker_runs_chunks_and_a_job_it_may_not_join_runs_on_the_caller():
  pool = get_pool(1)
  runs, helped = [], threading.Event()

  def chunk(_ptr: int, s: int, e: int) -> None:
    if threading.get_ident() == MAIN:
      helped.wait(10)  # (the GIL released: a worker's callback can run) until a worker took a chunk
    else:
      helped.set()
    runs.append((threading.get_ident(), s, e))
  fn = _CB(chunk)
  pool.run(job_words(entry_for(1, 0, True), ctypes.cast(fn, ctypes.c_void_p).value, 64, 64, 1, [0]))
  assert helped.is_set() and {tid for tid, _, _ in runs} - {MAIN} and len(runs) == 64
  rec = Recorder()
  for _ in range(10):
    pool.run(_job(rec, 64, 64, 0))  # no worker may join: the caller runs every chunk
  assert {tid for tid, _, _ in rec.runs} == {MAIN} and len(rec.runs) == 640


def test_a_late_worker_claims_nothing_of_a_finished_job():
  pool = get_pool(1)
  rec = Recorder()
  pool.run(_job(rec, 8, 4, 1))
  done = len(rec.runs)
  entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(entry_for(1, 0, True))
  entry(pool.addr, pool._gen)  # the finished job's generation: closed
  entry(pool.addr, pool._gen - 1)  # an older one
  entry(pool.addr, pool._gen + 1)  # one not published yet
  assert len(rec.runs) == done == 4


def test_a_second_caller_gets_no_workers_while_a_job_runs():
  pool = get_pool(1)
  hold, started = threading.Event(), threading.Event()

  def slow(_ptr: int, s: int, e: int) -> None:
    started.set()
    hold.wait(10)
  fn = _CB(slow)
  job = job_words(entry_for(1, 0, True), ctypes.cast(fn, ctypes.c_void_p).value, 1, 1, 0, [0])
  t = threading.Thread(target=pool.run, args=(job,))
  t.start()
  assert started.wait(10)
  try:
    assert not pool.run(_job(Recorder(), 4, 2, 1))
  finally:
    hold.set()
    t.join(10)
  assert pool.run(_job(Recorder(), 4, 2, 1))


def test_the_pool_measures_its_spin_and_hand_off():
  pool = get_pool(1)
  assert pool.spins >= 1 and pool.mask >= 0 and (pool.mask + 1) & pool.mask == 0  # a power of two, less one
  assert 0 < pool.handoff_s and pool.split_min_s == threadpool.SPLIT_MIN_HANDOFFS * pool.handoff_s


@pytest.mark.parametrize("threads", [2, 3])
def test_split_runs_give_the_single_thread_numbers_bit_for_bit(threads, monkeypatch):
  monkeypatch.setenv("THREADS", str(threads))
  n = 96
  ast = split(split(matmul(n, n, n), 1, 4, UP), 0, 8, G, TH)  # a THREAD axis of 8 over the rows
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal(n * n).astype(np.float32), rng.standard_normal(n * n).astype(np.float32)
  ck = compile_kernel(ast)
  assert ck.threads == threads
  ref = np.zeros(n * n, np.float32)
  ck([ref, a, b], threads=1)
  for _ in range(20):
    out = np.full(n * n, np.nan, np.float32)
    ck._serial = False  # (split every run, whatever the clock says)
    ck([out, a, b])
    np.testing.assert_array_equal(out, ref)


def test_a_forked_child_runs_split_kernels_with_a_pool_of_its_own():
  get_pool(1)
  n = 64
  ck = compile_kernel(split(split(matmul(n, n, n), 1, 4, UP), 0, 4, G, TH))
  a, b = np.ones(n * n, np.float32), np.ones(n * n, np.float32)
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:  # the child: the parent's workers are not here; a split run must still finish, and right
    ok = False
    try:
      out = np.zeros(n * n, np.float32)
      ck._serial = False
      ck([out, a, b], threads=2)
      ok = bool((out == n).all())
    finally:
      os.write(w, b"1" if ok else b"0")
      os._exit(0)
  os.close(w)
  got = os.read(r, 1)
  os.waitpid(pid, 0)
  assert got == b"1"


def test_workers_park_after_their_spin_and_wake_on_a_job_or_a_wake(monkeypatch):
  monkeypatch.setattr(threadpool, "SPIN_S", 1e-5)  # (a pool of its own that parks at once)
  pool = threadpool.KernelPool(1)
  cond = pool._cond
  with cond:
    assert cond.wait_for(lambda: pool._parked == 1, 10)
    parks = pool.parks
  pool.wake()  # a split run is expected: the worker spins again, then parks again
  with cond:
    assert cond.wait_for(lambda: pool.parks > parks and pool._parked == 1, 10)
    parks = pool.parks
  rec = Recorder()
  assert pool.run(_job(rec, 16, 4, 1))  # a job wakes it too; its chunks are all run, by whoever
  assert sorted(s for _, s, _ in rec.runs) == [0, 4, 8, 12]
  with cond:
    assert cond.wait_for(lambda: pool.parks > parks, 10)
