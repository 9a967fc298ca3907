"""What the views keep for their steps across requests, each bounded: laid-out steps (LAYOUTS) and encoded graph
answers (ANSWERS), keyed by a view's key; viz_server.views drops a view's with forget_view when the view goes."""
from __future__ import annotations

import ctypes
import ctypes.util

from viz_server.layout import Layout
from viz_server.lru import LRU

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
  """Layouts keyed by (view, step): two LRUs, each bounded by the weight of the layouts it holds (half the budget
  each), so the expensive full layouts are not pushed out by the cheap derived ones (which are rebuilt from them in
  ms)."""

  def __init__(self, budget: int) -> None:
    self.pools = (LRU(budget // 2), LRU(budget // 2))  # full, derived

  @property
  def used(self) -> list[int]:
    return [pool.used for pool in self.pools]

  def get(self, key: tuple) -> Layout | None:
    for pool in self.pools:
      got = pool.get(key)
      if got is not None:
        return got
    return None

  def put(self, key: tuple, lay: Layout, derived: bool = False, w: int | None = None) -> None:
    """Keep lay; derived: it was derived from the step before (the cheap pool); w: its weight where it is less than
    weight(lay) says (a derived layout shares its base's routes, viz_server.stepgraphs)."""
    self.pools[int(derived)].put(key, lay, weight(lay) if w is None else w)

  def drop(self, prefix: tuple) -> None:
    for pool in self.pools:
      pool.drop(prefix)


LAYOUTS = _LayoutCache(LAYOUT_CACHE_NODES)


def answer_cache() -> LRU:
  """Encoded answers (JSON bytes, weighed by their length) keyed by (view, step, compact), and the boot answers' heads
  by their app's key, bounded by ANSWER_CACHE_BYTES: an ended rewrite's answers never change, and building and
  encoding one is most of what a page load asking for a graph the server laid out already waits for (2,695 nodes:
  ~35 ms quiet, 70-110 ms on the loaded 2-core machine, issue 18). One answer over a quarter of it is not kept."""
  return LRU(ANSWER_CACHE_BYTES, ANSWER_CACHE_BYTES // 4)


ANSWERS = answer_cache()


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
