"""The app's views: one StepGraphs per rewrite looked at (its replay, labels and layouts), the routes' one way to them,
kept in an LRU bounded by their number and bytes, with the background worker that lays out the steps ahead of the
one last asked for (it gives way to requests through gate.REQUEST_GATE); a view that goes takes its cached layouts
and answers (viz_server.caches) along."""
from __future__ import annotations

import os
import threading
from collections import OrderedDict

from viz_server.caches import RELEASE_BYTES, forget_view, held_bytes, release_memory
from viz_server.diff import drawn_cache
from viz_server.gate import REQUEST_GATE
from viz_server.replay import Replay
from viz_server.stepgraphs import StepGraphs
from viz_server.store import Rewrite, Trace, TraceStore

MAX_VIEWS = 64  # rewrites with a live replay state; an evicted one is rebuilt (deterministically) on demand
# ... and the bytes they hold at most together with the layouts and answers cached for them (caches.held_bytes), as
# StepGraphs.est_bytes estimates a view: the viewer's memory is its store and this one number (issue 30: under 300 MB
# after visiting every rewrite of a GPT step's trace; three budgets summed to 320 MB). A view of an n-node graph holds
# ~2 KB a node (a 530 KB trace's rewrites took ~190 MB each, 4.7 GB after 24 opened, when only their number was
# bounded). TINYVIZ_VIEW_CACHE_MB sets it; the view being looked at is kept whatever its size.
VIEW_CACHE_BYTES = int(os.environ.get("TINYVIZ_VIEW_CACHE_MB", "128")) << 20
PREFETCH = 12  # layouts computed ahead of the step last asked for, in the background (stepping is sequential)
# (no far block boundaries ahead: a far jump lays its step out fresh, an anchor, at O(graph) whatever the steps
# skipped; computing the chain to them made the view hold every step's rebuilt nodes: docs, "Far jumps")


class Views:
  """StepGraphs per (trace, rewrite), an LRU bounded by their number and their estimated bytes (max_bytes, looked at
on every get: a view grows as its steps are laid out); a live rewrite's view is rebuilt when it went stale."""

  def __init__(self, store: TraceStore, max_views: int = MAX_VIEWS, prefetch: int = PREFETCH,
               max_bytes: int = VIEW_CACHE_BYTES) -> None:
    self.store = store
    self.max_views = max_views
    self.max_bytes = max_bytes
    self.prefetch_steps = prefetch
    self._views: OrderedDict[tuple[int, int], StepGraphs] = OrderedDict()
    self.drawn = drawn_cache()  # drawn diffs between points of ended traces (the ids here are this store's)
    self._lock = threading.Lock()
    self._want: tuple[StepGraphs, list[int], int, bool] | None = None  # the latest prefetch wish: (view, steps in
    # order, the anchor of their chain, whether they go back)
    self._wake = threading.Condition()  # the worker waits on it for a wish; wait_idle for the worker to finish
    self._working = False  # the worker is computing a step it took from the wish
    self._worker: threading.Thread | None = None
    self._freed = 0  # estimated bytes of the views dropped since the heap was last handed back
    if store is not None:  # (tests make views of a trace without a store)
      store.listeners.append(self._on_event)

  def _on_event(self, event: str, data: dict) -> None:
    if event == "removed":  # a trace the store let go: its views go too
      with self._lock:
        for key in [k for k in self._views if k[0] == data["trace"]]:
          forget_view(self._views.pop(key).key)

  def prefetch(self, view: StepGraphs, k: int, anchor: int = 0) -> None:
    """Compute in the background the layouts that stepping on from k in the direction of travel will need: the next
    PREFETCH steps on the anchor's chain (a newer wish replaces an older one; a layout being computed is finished
    first)."""
    if self.prefetch_steps <= 0:
      return
    n = view.rw.matches
    back = k < view.last_step
    view.last_step = k
    if back:
      wish = list(range(k - 1, max(-1, k - 1 - self.prefetch_steps), -1))
    else:
      wish = list(range(k + 1, min(n, k + self.prefetch_steps) + 1))
    wish = [s for s in wish  # (laid out and its delta made: nothing to do)
            if not view.cached(s, anchor) or not view.delta_kept(s + 1 if back else s - 1, s, anchor, back)]
    if not wish:  # nothing ahead of k: an older wish (from where the user was) is dropped, not finished
      with self._wake:
        self._want = None
      return
    with self._wake:
      self._want = (view, wish, anchor, back)
      if self._worker is None:
        self._worker = threading.Thread(target=self._run, name="tinyviz-prefetch", daemon=True)
        self._worker.start()
      self._wake.notify_all()

  def drop_wish(self, view: StepGraphs) -> None:
    """The page opened a graph of view (a far jump, a fresh load): the wish from where it was is dropped, or the worker
    would go on laying out steps (and deltas) there, moving the replay away from the step the page now shows."""
    with self._wake:
      if self._want is not None and self._want[0] is view:
        self._want = None
        self._wake.notify_all()

  def pending(self) -> list[int]:
    """The steps of the latest prefetch wish that the worker has not taken up yet."""
    with self._wake:
      return [] if self._want is None else list(self._want[1])

  def wait_idle(self, timeout: float | None = None) -> bool:
    """Block until the prefetch worker has computed every step wished for (False after `timeout` seconds)."""
    with self._wake:
      return self._wake.wait_for(lambda: self._want is None and not self._working, timeout)

  def _run(self) -> None:
    while True:
      with self._wake:
        while self._want is None:
          self._wake.wait()
        view, wish, anchor, back = self._want
        step = wish[0]
        self._want = (view, wish[1:], anchor, back) if len(wish) > 1 else None
        self._working = True
      try:
        # every step wished is one the page asks soon, a request a step (stepping wishes): the worker waits while a
        # request is served, not for a quiet after requests too (issue 30: waiting 15 ms after each of the page's, one
        # per ~35-60 ms, it fell behind the page by step ~40, and the page then waited for the server's whole step)
        with REQUEST_GATE.background():  # (and inside a step's replay and derivation)
          REQUEST_GATE.give_way()
          view.prepare(step, pause=REQUEST_GATE.give_way, anchor=anchor)
          # and the delta the page asks to step there (a step back: with `held`, as it asks one): its request then
          # sends bytes, instead of computing it beside the worker's next step
          view.prepare_delta(step + 1 if back else step - 1, step, anchor, held=back)
      except Exception:  # a prefetch is only a guess; the request that needs the step will report the error
        pass
      # the view must not outlive its place in the LRU while this thread waits for the next wish: held here, a GPT
      # step's dropped `add bufferize` view (~600 MB) stayed alive after every other rewrite was opened
      del view
      with self._wake:
        self._working = False
        self._wake.notify_all()

  def replay(self, tr: Trace, rw: Rewrite) -> Replay:
    """A rewrite's replay for a one-off question: the cached view's if there is a current one, else a new one that is
    not cached (searching many rewrites must not push the views being looked at out of the cache)."""
    with self._lock:
      v = self._views.get((tr.id, rw.id))
    if _current(v, rw):
      return v.replay
    return Replay(tr, rw)

  def get(self, tr: Trace, rw: Rewrite) -> StepGraphs:
    key = (tr.id, rw.id)
    with self._lock:
      v = self._views.get(key)
      current, freed = _current(v, rw), 0
      if current:
        self._views.move_to_end(key)
        freed = self._trim()
      elif v is not None:
        forget_view(v.key)
    if current:
      self._release(freed)
      return v  # type: ignore[return-value]
    view = StepGraphs(tr, rw, Replay(tr, rw))
    with self._lock:
      self._views[key] = view
      self._views.move_to_end(key)
      freed = self._trim()
    self._release(freed)
    return view

  def _release(self, freed: int) -> None:
    """Hand the heap back once views that held RELEASE_BYTES in all have gone (and nothing else holds them)."""
    with self._lock:
      self._freed += freed
      if self._freed < RELEASE_BYTES:
        return
      self._freed = 0
      alive = list(self._views.values())
    with self._wake:
      if self._want is not None and all(v is not self._want[0] for v in alive):
        self._want = None  # (a wish for a view that went would keep it alive)
    release_memory()

  def drop(self, t: int, r: int) -> None:
    """Let trace t's rewrite r's view and its cached layouts and answers go (the next get rebuilds them)."""
    with self._lock:
      got = self._views.pop((t, r), None)
    if got is not None:
      forget_view(got.key)
      freed, got = got.est_bytes(), None
      self._release(freed)

  def held_bytes(self) -> int:
    """The bytes the views kept hold, as StepGraphs.est_bytes estimates them now."""
    with self._lock:
      return sum(v.est_bytes() for v in self._views.values())

  def __len__(self) -> int:
    return len(self._views)

  def _trim(self) -> int:
    """Let the least recently used views go (with their cached layouts and answers) until at most max_views are kept
    and they and the caches hold at most max_bytes (the most recent one stays whatever its size); returns the bytes
    the views held. Called with the lock held; costs a few len() per view."""
    sizes = [v.est_bytes() for v in self._views.values()]
    views, i = sum(sizes), 0
    while len(self._views) > 1 and (len(self._views) > self.max_views or views + held_bytes() > self.max_bytes):
      _, old = self._views.popitem(last=False)
      views -= sizes[i]
      i += 1
      forget_view(old.key)
      with self._wake:
        if self._want is not None and self._want[0] is old:
          self._want = None  # (its layouts would be cached for a view nobody can ask for, and keep it alive)
    return sum(sizes[:i])


def _current(v: StepGraphs | None, rw: Rewrite) -> bool:
  """Whether a cached view still shows its rewrite as the store has it (a live rewrite grows; one that has ended
  since the view was made needs its last rows)."""
  return v is not None and not v.replay.stale and not (v.replay.max_row is None and rw.ended)
