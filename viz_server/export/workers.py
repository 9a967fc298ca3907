"""Each kept rewrite's step-0 graph and compact deltas, made by the viewer's own StepGraphs (its layouts, derivations
and deltas: ~80% of an export's time) in worker processes, handed back in the rewrites' order (issue 30: the export
packs them in one process, in order; the views are independent of each other).

Each worker makes its share of the list in the list's order (plan: the rewrites over one root go to one worker, so
its SharedLayouts renames their step-0 layout instead of computing it again; the others to the worker with the least
work planned so far), so the rewrite the packer wants next is always at the head of one worker's queue. A worker sends
a rewrite's step-0 graph, then its deltas in chunks of about CHUNK_BYTES, then its end; the messages a worker has put
and the packer not yet taken are at most QUEUE_BYTES (or one message, whatever its size: _Budget), so what waits is
bounded: J * (QUEUE_BYTES + CHUNK_BYTES), a single delta larger than a chunk being one message. Counted in bytes, not
messages, so a worker can run far ahead through small rewrites while the packer reads a long one from the other (a
bound of 16 messages let it run 8 small rewrites ahead, then wait as long as a 700-step gradient took the other).
A message is its kind's letter and its objects, each JSON text behind its length (_enc, _dec; the trace's strings
never go through pickle: a queue carries bytes), so the packer gets what the in-process path gives, equal once
encoded (tests/viewer/test_export_workers.py).
Workers are forked from the exporting process after it has read the trace (no thread runs there then: the export is
a command-line process, or the viewer's child running that command), so each starts with the trace read."""
from __future__ import annotations

import contextlib
import gc
import json
import multiprocessing
import os
import queue
import threading
import traceback
from typing import Any, Callable, Iterator

from viz_server import caches
from viz_server.export.layouts import SharedLayouts

MAX_JOBS = 8  # workers at most (each holds a copy-on-write of the trace's store and one rewrite's view)
CHUNK_BYTES = 256 << 10  # deltas per message: about this much JSON text
QUEUE_BYTES = 32 << 20  # the bytes of its messages a worker may have waiting (what bounds how far it runs ahead)
POLL_S = 5.0  # how often a packer waiting on a worker checks that the worker still lives
GC_EVERY = 16  # rewrites between two collections of the reference cycles they left (see quiet_gc)
# what plan weighs a rewrite by, in steps: a step-0 graph laid out afresh costs about this many steps' derivations (the
# demo: 19 ms a layout, 1.2 ms a step); one over a root its worker laid out already, about nothing
LAYOUT_STEPS = 16

Made = tuple[int, dict, Iterator[dict]]  # (rewrite id, its step-0 graph, its steps 1..n as compact deltas)


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
  """The export's work with the cyclic garbage collector off and what exists so far (the trace's store) frozen: the
  views and the packing allocate millions of short-lived rows and dicts, and collecting the young generation over
  and over while they live was 15-19% of an export's CPU (measured with the collector off), yet they make few cycles
  (the views none: reference counting frees them; the API's answers ~20 objects a rewrite): those are collected every
  GC_EVERY rewrites (collect_cycles), the frozen store not traversed. Forked workers inherit both settings. Restored
  on the way out."""
  was = gc.isenabled()
  gc.collect()
  gc.freeze()
  gc.disable()
  try:
    yield
  finally:
    gc.unfreeze()
    if was:
      gc.enable()


def collect_cycles(done: int) -> None:
  """After `done` rewrites: collect the cycles their views (and the API's answers) left, every GC_EVERY of them, when
  quiet_gc turned the collector off. The young generations only: what was made since the collection before (the
  export's columns, old by then, are not traversed again: a full collection each time grew with them)."""
  if done % GC_EVERY == 0 and not gc.isenabled():
    gc.collect(1)


class Laid:
  """The layouts the views computed whole and of those the ones renamed from an equal graph's (SharedLayouts' counts,
  summed over the workers)."""

  def __init__(self) -> None:
    self.by: dict[int, tuple[int, int]] = {}  # worker -> (laid, shared) as it last said

  @property
  def shared(self) -> int:
    return sum(s for _, s in self.by.values())


def default_jobs(rewrites: int) -> int:
  """Workers for an export of this many rewrites to lay out: one per CPU this process may use, at most MAX_JOBS, none
  (in-process) where fork is not there or a thread other than this one runs (a fork would copy its locks)."""
  if "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
    return 1
  cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
  return max(1, min(MAX_JOBS, cpus, rewrites // 2))


def plan(todo: list[tuple[Any, int]], jobs: int) -> list[int]:
  """The worker of each of todo's rewrites ((its root, its steps), in order): a root's first rewrite to the worker
  with the least work planned so far, every later one over that root to the same worker (the next pass over a graph
  a pass left unchanged has its step-0 graph: round-robin sent those to the other worker, whose memo had not seen it,
  and the demo's forked export computed 37 of the 41 layouts its in-process export renames). In order, so the
  workers' shares stay level along the list and neither runs far ahead of the packer."""
  load = [0] * jobs
  owner: dict[Any, int] = {}
  out = []
  for root, n in todo:
    w = owner.get(root) if isinstance(root, int) else None
    if w is None:
      w = min(range(jobs), key=load.__getitem__)
      load[w] += LAYOUT_STEPS
      if isinstance(root, int):
        owner[root] = w
    load[w] += 1 + n
    out.append(w)
  return out


def step0(view: Any) -> dict:
  """A rewrite's step-0 graph as the export packs it: compact (a straight edge without its points, which GraphPacker
  drops anyway: rounding every straight edge's points was 5% of a training step's export)."""
  return view.graph(0, compact=True)


def deltas(view: Any, n: int) -> Iterator[dict]:
  """Steps 1..n of a rewrite as compact deltas, each from the step before (the viewer's own answers, without its JSON
  round trip)."""
  for k in range(1, n + 1):
    d = view.delta(k - 1, k, compact=True)
    for key in ((k - 1,), ("cut", k - 1)):  # (step k-1's layout: no later step is derived from it; the view's
      caches.LAYOUTS.drop(view.key + key)   # block layouts stay, so the export holds a rewrite's 1/32 of them)
    yield d


def in_process(api: Any, todo: list[tuple[int, int]], laid: Laid) -> Iterator[Made]:
  """todo's rewrites made here, one at a time (each view let go once its deltas were read)."""
  shared = SharedLayouts()

  def counted(view: Any, n: int) -> Iterator[dict]:
    yield from deltas(view, n)
    laid.by[0] = (shared.laid, shared.shared)  # (as a worker's end message says it)

  for r, n in todo:
    view = api.view(r)
    view.lay_out = shared
    yield r, step0(view), counted(view, n)
    api.forget(r)  # (its replay and layouts: the export holds one rewrite's at a time)


def _part(obj: Any) -> bytes:
  """obj as JSON text behind its length (4 bytes): a message is its kind's letter and such parts, one after another."""
  got = json.dumps(obj, separators=(",", ":")).encode()
  return len(got).to_bytes(4, "little") + got


def _enc(kind: bytes, parts: list[bytes]) -> bytes:
  return kind + b"".join(parts)


def _dec(msg: bytes) -> list:
  """The objects of a message (_enc's parts), after its kind's letter."""
  view, at, out = memoryview(msg), 1, []
  while at < len(msg):
    n = int.from_bytes(view[at:at + 4], "little")
    out.append(json.loads(bytes(view[at + 4:at + 4 + n])))
    at += 4 + n
  return out


class _Budget:
  """The bytes of the messages a worker has put and the packer not yet taken (a count both processes share, and a
  condition the worker waits on while a message would take it over QUEUE_BYTES)."""

  def __init__(self, ctx: Any) -> None:
    self.cond = ctx.Condition()
    self.held = ctx.RawValue("q", 0)  # (read and written under cond's lock only)

  def take(self, n: int, check: Callable[[], None]) -> None:
    """Wait until n more bytes fit (always, when none are held), then count them; check is called between waits."""
    with self.cond:
      while self.held.value and self.held.value + n > QUEUE_BYTES:
        self.cond.wait(POLL_S)
        check()
      self.held.value += n

  def give(self, n: int) -> None:
    with self.cond:
      self.held.value -= n
      self.cond.notify()


class _Out:
  """A worker's side of its queue: a put within its _Budget that gives up, ending the worker, once the exporting
  process is gone (its parent-death signal is not inherited: a worker must not wait forever on a queue no one
  reads)."""

  def __init__(self, q: Any, budget: _Budget) -> None:
    self.q, self.budget, self.parent = q, budget, os.getppid()

  def _check(self) -> None:
    if os.getppid() != self.parent:
      os._exit(1)

  def put(self, msg: bytes) -> None:
    self._check()  # (each time, not only while waiting: a worker whose packer is gone stops at its next message)
    self.budget.take(len(msg), self._check)
    self.q.put(msg)  # (the queue is unbounded: the budget bounds it)


def _work(api: Any, todo: list[tuple[int, int]], out: Any) -> None:
  """A worker's work: its rewrites' graphs put on out as messages (g0, chunks of steps, end), or an error's
  traceback."""
  try:
    shared = SharedLayouts()
    for i, (r, n) in enumerate(todo, 1):
      view = api.view(r)
      view.lay_out = shared
      out.put(_enc(b"g", [_part(step0(view))]))
      parts: list[bytes] = []
      size = 0
      for d in deltas(view, n):
        got = _part(d)
        if parts and size + len(got) > CHUNK_BYTES:
          out.put(_enc(b"s", parts))
          parts, size = [], 0
        parts.append(got)
        size += len(got)
      out.put(_enc(b"e", [_part((shared.laid, shared.shared)), *parts]))  # (its counts first, then its deltas)
      api.forget(r)
      collect_cycles(i)
  except BaseException:  # (anything: the packer must hear of it, not wait)
    out.put(b"x" + traceback.format_exc().encode())


def _worker(api: Any, todo: list[tuple[int, int]], q: Any, budget: _Budget) -> None:
  """A forked worker's life: its work, then what it queued flushed to the pipe before it ends."""
  _work(api, todo, _Out(q, budget))
  q.close()
  q.join_thread()


class WorkerError(RuntimeError):
  """A worker failed or died; the message is its traceback or exit status."""


def _get(q: Any, proc: Any, budget: _Budget) -> bytes:
  while True:
    try:
      msg = q.get(timeout=POLL_S)
      budget.give(len(msg))
      return msg
    except queue.Empty:
      if not proc.is_alive():
        raise WorkerError(f"export worker {proc.pid} ended with status {proc.exitcode} before its rewrites were made"
                          ) from None


def forked(api: Any, todo: list[tuple[int, int]], jobs: int, laid: Laid, owners: list[int] | None = None
           ) -> Iterator[Made]:
  """todo's rewrites made by `jobs` forked workers, yielded in todo's order (see the module docstring); owners: each
  rewrite's worker (plan's; None: round-robin). Each yielded rewrite's deltas must be read to the end before the next
  is asked for."""
  owners = owners if owners is not None else [i % jobs for i in range(len(todo))]
  ctx = multiprocessing.get_context("fork")
  queues = [ctx.Queue() for _ in range(jobs)]
  budgets = [_Budget(ctx) for _ in range(jobs)]
  shares = [[t for t, o in zip(todo, owners) if o == w] for w in range(jobs)]
  procs = [ctx.Process(target=_worker, args=(api, shares[w], queues[w], budgets[w]), daemon=True)
           for w in range(jobs)]
  try:
    for p in procs:
      p.start()
    for (r, _), w in zip(todo, owners):
      msg = _get(queues[w], procs[w], budgets[w])
      if msg[:1] == b"x":
        raise WorkerError(msg[1:].decode(errors="replace"))
      yield r, _dec(msg)[0], _steps(queues[w], procs[w], budgets[w], w, laid)
  finally:
    for p in procs:
      if p.is_alive():
        p.terminate()
      p.join()
    for q in queues:
      q.cancel_join_thread()
      q.close()


def _steps(q: Any, proc: Any, budget: _Budget, w: int, laid: Laid) -> Iterator[dict]:
  while True:
    msg = _get(q, proc, budget)
    kind, body = msg[:1], msg[1:]
    if kind == b"x":
      raise WorkerError(body.decode(errors="replace"))
    got = _dec(msg)
    if kind == b"s":
      yield from got
      continue
    laid.by[w] = got[0]
    yield from got[1:]
    return
