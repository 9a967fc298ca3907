"""Turns between requests and background layout work (`REQUEST_GATE`): viz_server.app marks every request, the views'
prefetch worker gives way between and inside chunks of work, and a request that waits for a layout the worker
computes says so."""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator


class RequestGate:
  """Background layout work gives way to requests: it waits while a request is being served (Python runs one thread
  at a time, so sharing would slow every request down), unless a request is waiting for that very work. Not for a
  quiet after requests too: the worker's work is the steps the page asks next, one request a step (issue 30: waiting
  15 ms after each, it fell behind the page)."""

  def __init__(self) -> None:
    self.cv = threading.Condition()
    self.serving = 0  # requests in progress
    self.waiting = 0  # requests waiting for a layout that a background thread computes
    self._local = threading.local()  # .background: this thread does background work (give_way pauses it)

  def begin(self) -> None:
    """A request starts (viz_server.app calls this for every request)."""
    with self.cv:
      self.serving += 1

  def end(self) -> None:
    with self.cv:
      self.serving -= 1
      self.cv.notify_all()  # (a waiter on `serving` sees it drop)

  @contextlib.contextmanager
  def request(self) -> Iterator[None]:
    self.begin()
    try:
      yield
    finally:
      self.end()

  @contextlib.contextmanager
  def wait_for_background(self) -> Iterator[None]:
    with self.cv:
      self.waiting += 1
      self.cv.notify_all()
    try:
      yield
    finally:
      with self.cv:
        self.waiting -= 1

  @contextlib.contextmanager
  def background(self) -> Iterator[None]:
    """Marks the calling thread's work as background for give_way (the views' prefetch worker)."""
    self._local.background = True
    try:
      yield
    finally:
      self._local.background = False

  def give_way(self) -> None:
    """Called between and inside chunks of work (a replay step, a derivation: 10-20 ms, more under load): on a
    background thread, waits while a request is being served, unless one waits for the background (a
    request that needs what the chunk holds, a lock or the layout, says so). Elsewhere a no-op. Python runs one
    thread at a time: a request served beside a busy worker took ~2x its CPU time (issue 30's arrow step)."""
    if self.serving and getattr(self._local, "background", False):
      with self.cv:
        while self.serving and not self.waiting:
          self.cv.wait()


REQUEST_GATE = RequestGate()
