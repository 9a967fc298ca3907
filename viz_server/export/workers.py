"""Each kept rewrite's step-0 graph and compact deltas, made by the viewer's own StepGraphs (its layouts, derivations
and deltas: ~80% of an export's time) in worker processes, handed back in the rewrites' order (issue 30: the export
packs them in one process, in order; the views are independent of each other).

Worker w of J makes the w-th, (w+J)-th, ... rewrites of the list, so the rewrite the packer wants next is always at the
head of one worker's queue. A worker sends a rewrite's step-0 graph, then its deltas in chunks of about CHUNK_BYTES
of JSON text, then its end; each queue holds at most QUEUE_MESSAGES, so a worker runs at most that far ahead of the
packer and what waits is bounded: J * QUEUE_MESSAGES * CHUNK_BYTES (a single delta larger than a chunk is one
message). The messages are JSON text (the trace's strings never go through pickle: a queue carries bytes), so the
packer gets what the in-process path gives, equal once encoded (tests/viewer/test_export_workers.py).
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
from typing import Any, Iterator

from viz_server import caches
from viz_server.export.layouts import SharedLayouts

MAX_JOBS = 8  # workers at most (each holds a copy-on-write of the trace's store and one rewrite's view)
CHUNK_BYTES = 256 << 10  # deltas per message: about this much JSON text
QUEUE_MESSAGES = 16  # messages a worker may have waiting (what bounds how far it runs ahead of the packer)
POLL_S = 5.0  # how often a packer waiting on a worker checks that the worker still lives
GC_EVERY = 16  # rewrites between two collections of the reference cycles they left (see quiet_gc)

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


def _enc(kind: str, obj: Any) -> bytes:
  return kind.encode() + json.dumps(obj, separators=(",", ":")).encode()


class _Out:
  """A worker's side of its queue: a put that gives up, ending the worker, once the exporting process is gone (its
  parent-death signal is not inherited: a worker must not wait forever on a queue no one reads)."""

  def __init__(self, q: Any) -> None:
    self.q, self.parent = q, os.getppid()

  def put(self, msg: bytes) -> None:
    while True:
      if os.getppid() != self.parent:
        os._exit(1)
      try:
        return self.q.put(msg, timeout=POLL_S)
      except queue.Full:
        continue


def _work(api: Any, todo: list[tuple[int, int]], out: Any) -> None:
  """A worker's work: its rewrites' graphs put on out as messages (g0, chunks of steps, end), or an error's
  traceback."""
  try:
    shared = SharedLayouts()
    for i, (r, n) in enumerate(todo, 1):
      view = api.view(r)
      view.lay_out = shared
      out.put(_enc("g", step0(view)))
      parts: list[str] = []
      size = 0
      for d in deltas(view, n):
        text = json.dumps(d, separators=(",", ":"))
        if parts and size + len(text) > CHUNK_BYTES:
          out.put(b"s[" + ",".join(parts).encode() + b"]")
          parts, size = [], 0
        parts.append(text)
        size += len(text)
      out.put(b"e[[" + ",".join(parts).encode() + b"]," + json.dumps([shared.laid, shared.shared]).encode() + b"]")
      api.forget(r)
      collect_cycles(i)
  except BaseException:  # (anything: the packer must hear of it, not wait)
    out.put(b"x" + traceback.format_exc().encode())


def _worker(api: Any, todo: list[tuple[int, int]], q: Any) -> None:
  """A forked worker's life: its work, then what it queued flushed to the pipe before it ends."""
  _work(api, todo, _Out(q))
  q.close()
  q.join_thread()


class WorkerError(RuntimeError):
  """A worker failed or died; the message is its traceback or exit status."""


def _get(q: Any, proc: Any) -> bytes:
  while True:
    try:
      return q.get(timeout=POLL_S)
    except queue.Empty:
      if not proc.is_alive():
        raise WorkerError(f"export worker {proc.pid} ended with status {proc.exitcode} before its rewrites were made"
                          ) from None


def forked(api: Any, todo: list[tuple[int, int]], jobs: int, laid: Laid) -> Iterator[Made]:
  """todo's rewrites made by `jobs` forked workers, yielded in todo's order (see the module docstring). Each yielded
  rewrite's deltas must be read to the end before the next is asked for."""
  ctx = multiprocessing.get_context("fork")
  queues = [ctx.Queue(QUEUE_MESSAGES) for _ in range(jobs)]
  procs = [ctx.Process(target=_worker, args=(api, todo[w::jobs], queues[w]), daemon=True) for w in range(jobs)]
  try:
    for p in procs:
      p.start()
    for i, (r, _) in enumerate(todo):
      w = i % jobs
      q, proc = queues[w], procs[w]
      msg = _get(q, proc)
      if msg[:1] == b"x":
        raise WorkerError(msg[1:].decode(errors="replace"))
      yield r, json.loads(msg[1:]), _steps(q, proc, w, laid)
  finally:
    for p in procs:
      if p.is_alive():
        p.terminate()
      p.join()
    for q in queues:
      q.cancel_join_thread()
      q.close()


def _steps(q: Any, proc: Any, w: int, laid: Laid) -> Iterator[dict]:
  while True:
    msg = _get(q, proc)
    kind, body = msg[:1], msg[1:]
    if kind == b"x":
      raise WorkerError(body.decode(errors="replace"))
    got = json.loads(body)
    if kind == b"s":
      yield from got
      continue
    yield from got[0]
    laid.by[w] = tuple(got[1])
    return
