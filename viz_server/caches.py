"""What the views keep for their steps across requests, each bounded: laid-out steps (LAYOUTS) and encoded graph
answers (ANSWERS), keyed by a view's key; viz_server.views drops a view's with forget_view when the view goes."""
from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections import OrderedDict
from typing import Any

from viz_server.layout import Layout

LAYOUT_CACHE_NODES = 600_000  # node positions kept in cached layouts (LAYOUT_BYTES each with edge routes: ~115 MB)...
POINTS_PER_NODE = 3  # ...a route point counting as a third of one: the long edges of a GPT step's 2,942-node
# `add bufferize` hold ~460k points (~48 MB a layout), which a bound by positions alone never saw


def weight(lay: Layout) -> int:
  """What a layout counts against LAYOUT_CACHE_NODES: its node positions and its route points."""
  return len(lay.pos) + sum(map(len, lay.edges.values())) // POINTS_PER_NODE  # (map: every derived step's put)
ANSWER_CACHE_BYTES = 32 << 20  # encoded graph answers kept (a 2,000-node graph's is ~0.45 MB; one up to 8 MB)
LAYOUT_BYTES = 200  # bytes a unit of weight() holds, about: counted object by object, the cached layouts of a GPT
# step's `add bufferize` hold ~180 a unit, those of tests/viewer's noisy simplify ~150


class _LayoutCache:
  """Layouts keyed by (view, step): two LRUs, each bounded by the number of node positions it holds, so the
  expensive full layouts are not pushed out by the cheap derived ones (which are rebuilt from them in ms)."""

  def __init__(self, budget: int) -> None:
    self.budget = budget // 2
    self.used = [0, 0]  # full, derived
    # key -> (layout, its weight)
    self.pools: tuple[OrderedDict[tuple, tuple[Layout, int]], ...] = (OrderedDict(), OrderedDict())
    self.lock = threading.Lock()

  def get(self, key: tuple) -> Layout | None:
    with self.lock:
      for pool in self.pools:
        got = pool.get(key)
        if got is not None:
          pool.move_to_end(key)
          return got[0]
      return None

  def put(self, key: tuple, lay: Layout, derived: bool = False, w: int | None = None) -> None:
    """Keep lay; derived: it was derived from the step before (the cheap pool); w: its weight where it is less than
    weight(lay) says (a derived layout shares its base's routes, viz_server.stepgraphs)."""
    i, w = int(derived), weight(lay) if w is None else w
    with self.lock:
      pool = self.pools[i]
      if key in pool:
        return
      pool[key] = (lay, w)
      self.used[i] += w
      while self.used[i] > self.budget and len(pool) > 1:
        self.used[i] -= pool.popitem(last=False)[1][1]

  def drop(self, prefix: tuple) -> None:
    with self.lock:
      for i, pool in enumerate(self.pools):
        for key in [k for k in pool if k[:len(prefix)] == prefix]:
          self.used[i] -= pool.pop(key)[1]


LAYOUTS = _LayoutCache(LAYOUT_CACHE_NODES)


class _AnswerCache:
  """Encoded answers keyed by (view, step, compact) (and the boot answers' heads, by their app's key), an LRU bounded
  by their bytes: an ended rewrite's answers never change, and building and encoding one is most of what a page load
  asking for a graph the server laid out already waits for (2,695 nodes: ~35 ms quiet, 70-110 ms on the loaded 2-core
  machine, issue 18)."""

  def __init__(self, budget: int) -> None:
    self.budget = budget
    self.used = 0
    self.pool: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()  # key -> (answer, its bytes)
    self.lock = threading.Lock()

  def get(self, key: tuple) -> Any:
    with self.lock:
      got = self.pool.get(key)
      if got is None:
        return None
      self.pool.move_to_end(key)
      return got[0]

  def put(self, key: tuple, data: Any, nbytes: int | None = None) -> None:
    """Keep data (bytes, or what holds nbytes bytes: a boot head with its rewrite and step)."""
    n = len(data) if nbytes is None else nbytes
    if n > self.budget // 4:  # one huge answer must not empty the cache
      return
    with self.lock:
      if key in self.pool:
        return
      self.pool[key] = (data, n)
      self.used += n
      while self.used > self.budget:
        self.used -= self.pool.popitem(last=False)[1][1]

  def drop(self, prefix: tuple) -> None:
    with self.lock:
      for key in [k for k in self.pool if k[:len(prefix)] == prefix]:
        self.used -= self.pool.pop(key)[1]


ANSWERS = _AnswerCache(ANSWER_CACHE_BYTES)


def held_bytes() -> int:
  """About the bytes the cached layouts and answers hold: what views.Views counts against its one budget (views and
  caches together) besides the views' own estimates."""
  return sum(LAYOUTS.used) * LAYOUT_BYTES + ANSWERS.used


def forget_view(key: tuple) -> None:
  """Drop what the caches keep for a view (viz_server.views calls it when a view goes)."""
  LAYOUTS.drop(key)
  ANSWERS.drop(key)


RELEASE_BYTES = 16 << 20  # a view going that held this much (its estimate) hands the freed heap back to the system


def _libc(name: str) -> object:
  try:
    return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
  except (OSError, AttributeError):  # not glibc: freed memory stays the process's, as it did
    return None


_TRIM, _MALLOPT = _libc("malloc_trim"), _libc("mallopt")
M_ARENA_MAX = -8  # glibc's mallopt parameter
ARENAS = 2  # glibc heaps the serving process's threads share


def limit_arenas(n: int = ARENAS) -> bool:
  """Let the threads made from now on share n glibc heaps (the default is 8 a core): the server makes a thread per
  request, each could get a heap of its own, and what a heap freed stayed with it (the server's RSS after every
  rewrite of a GPT step's trace was opened: 247 MB, 227-237 MB with two). Whether glibc took it."""
  return _MALLOPT is not None and _MALLOPT(M_ARENA_MAX, n) == 1  # type: ignore[operator]
RELEASES = [0]  # times release_memory trimmed (tests count them)


def release_memory() -> None:
  """Return the heap that dropped views freed to the system (glibc's malloc_trim; ~10-50 ms on a 1 GB heap). Without
  it the process kept its peak: dropping a 580 MB view of a GPT step's `add bufferize` left RSS at 300 MB, trimmed
  110 MB (the rest of a freed view sits in pages the allocator still holds a live object in)."""
  if _TRIM is not None:
    _TRIM(0)  # type: ignore[operator]
    RELEASES[0] += 1
