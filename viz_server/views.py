"""The per-rewrite objects the API serves from (replay + layouts), cached with a bound on how many are kept."""
from __future__ import annotations

import threading
from collections import OrderedDict

from viz_server.graphview import LAYOUTS, GraphView
from viz_server.replay import Replay
from viz_server.store import Rewrite, Trace, TraceStore

MAX_VIEWS = 64  # rewrites with a live replay state; an evicted one is rebuilt (deterministically) on demand
PREFETCH = 12  # layouts computed ahead of the step last asked for, in the background (stepping is sequential)


class Views:
  """GraphView per (trace, rewrite), LRU-bounded; a live rewrite's view is rebuilt when it went stale."""

  def __init__(self, store: TraceStore, max_views: int = MAX_VIEWS, prefetch: int = PREFETCH) -> None:
    self.store = store
    self.max_views = max_views
    self.prefetch_steps = prefetch
    self._views: OrderedDict[tuple[int, int], GraphView] = OrderedDict()
    self._lock = threading.Lock()
    self._want: tuple[GraphView, int, int] | None = None  # the latest prefetch wish: (view, first step, last step)
    self._wake = threading.Condition()
    self._worker: threading.Thread | None = None

  def prefetch(self, view: GraphView, k: int) -> None:
    """Compute the layouts of the steps after k in the background (a newer wish replaces an older one)."""
    if self.prefetch_steps <= 0:
      return
    last = min(view.rw.matches, k + self.prefetch_steps)
    if last <= k:
      return
    with self._wake:
      self._want = (view, k + 1, last)
      if self._worker is None:
        self._worker = threading.Thread(target=self._run, name="tinyviz-prefetch", daemon=True)
        self._worker.start()
      self._wake.notify()

  def _run(self) -> None:
    while True:
      with self._wake:
        while self._want is None:
          self._wake.wait()
        view, step, last = self._want
        self._want = None if step >= last else (view, step + 1, last)
      try:
        view.layout(step)
      except Exception:  # a prefetch is only a guess; the request that needs the step will report the error
        pass

  def get(self, tr: Trace, rw: Rewrite) -> GraphView:
    key = (tr.id, rw.id)
    with self._lock:
      v = self._views.get(key)
      if v is not None and not v.replay.stale and not (v.replay.max_row is None and rw.ended):
        self._views.move_to_end(key)
        return v
      if v is not None:
        LAYOUTS.drop(v.key)
    view = GraphView(tr, rw, Replay(tr, rw))
    with self._lock:
      self._views[key] = view
      self._views.move_to_end(key)
      while len(self._views) > self.max_views:
        _, old = self._views.popitem(last=False)
        LAYOUTS.drop(old.key)
    return view
