"""What the viewer keeps while a rewrite is looked at and after it went, counted (issue 30: the viewer grew to 1.0-1.56
GB on a GPT step's trace): a replay's dependents hold no dead entries and a node's births no list, the layouts kept for
good grow as the square root of the steps, and dropped views hand the heap back."""
import gc
import math
import sys
import weakref

import pytest
from support.server_helpers import longest_rewrite, write_noisy_simplify

from viz_server import caches, stepgraphs, views
from viz_server.replay import Replay
from viz_server.stepgraphs import BLOCK, StepGraphs, stride
from viz_server.store import TraceStore


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
  (tr,) = TraceStore().add_path(write_noisy_simplify(tmp_path_factory.mktemp("t") / "t.vztrace"))
  return tr


def test_replay_keeps_only_live_dependents_and_the_steps_that_made_each_node(noisy):
  rw = longest_rewrite(noisy)
  rp, n = Replay(noisy, rw), rw.matches
  for k in (n, 0, n // 2, n):  # forwards, back (undoing every match), and on
    rp.members(k)
    rp.members(max(k - 1, 0))
  live = {d for deps in rp._deps.values() for d in deps}
  assert all(rp._rdeps.values()) and set(rp._rdeps) == live  # an entry per node something resolved depends on
  born: dict[int, list[int]] = {}
  for s in range(1, n + 1):
    info = rp.step(s)
    for x in (*info.added, *info.changed):
      born.setdefault(x, []).append(s)
  assert born and any(len(v) > 1 for v in born.values())  # nodes added again occur
  for k in (0, n // 3, n):
    for x in rp.members(k):
      want = max((s for s in born.get(x, ()) if s <= k), default=0)
      assert rp.created(x, k) == want, (x, k)
  assert sum(type(v) is list for v in rp._born.values()) == sum(len(v) > 1 for v in born.values())


def test_layouts_kept_for_good_grow_as_the_square_root_of_the_steps(noisy, monkeypatch):
  for steps in (1, 31, 32, 1_024, 1_025, 4_097, 100_000, 10**7):
    every = stride(steps)
    assert every >= BLOCK and steps // every + 1 <= math.isqrt(steps) + 2 and (every == BLOCK or every ** 2 < 2 * steps)
  assert stride(888) == BLOCK  # (a GPT step's longest rewrite: far jumps as they were)
  monkeypatch.setattr(stepgraphs, "BLOCK", 2)  # a 2-step block: this rewrite's stride is its square root
  rw = longest_rewrite(noisy)
  view = StepGraphs(noisy, rw, Replay(noisy, rw))
  every, n = view.stride(), rw.matches
  assert every == math.isqrt(n - 1) + 1 > 2
  view.layout(n)
  assert sorted(view._kept) == [(0, k) for k in range(0, n + 1, every)] and len(view._kept) <= math.isqrt(n) + 2


def test_views_that_go_hand_the_heap_back_once_enough_went(noisy, monkeypatch):
  assert caches._TRIM is not None and caches.limit_arenas()  # (glibc, as on Debian: elsewhere both do nothing)
  rws = sorted(noisy.rewrites.values(), key=lambda r: r.id)[:3]
  vs = views.Views(None, max_views=1)  # type: ignore[arg-type]
  before = caches.RELEASES[0]
  monkeypatch.setattr(views, "RELEASE_BYTES", 10**12)
  for rw in rws:
    vs.get(noisy, rw).layout(3)
  assert caches.RELEASES[0] == before and len(vs) == 1  # two views went, holding far less than the threshold
  monkeypatch.setattr(views, "RELEASE_BYTES", 1)
  vs.get(noisy, rws[0])
  vs.drop(noisy.id, rws[0].id)
  assert caches.RELEASES[0] == before + 2  # one view went on get, one on drop: each handed the heap back


def test_a_view_the_prefetch_worker_laid_out_goes_with_its_place_in_the_lru(noisy):
  # the worker kept the last view it laid out in its frame while it waited for the next wish: after every rewrite of a
  # GPT step's trace was opened, the dropped ~600 MB view of its longest rewrite was still alive (RSS 660 MB)
  rws = sorted(noisy.rewrites.values(), key=lambda r: -r.matches)[:2]
  vs = views.Views(None, max_views=1)  # type: ignore[arg-type]
  v = vs.get(noisy, rws[0])
  vs.prefetch(v, 1)
  assert vs.wait_idle(60) and v.cached(2)  # (the worker laid step 2 out)
  gone, v = weakref.ref(v), None
  vs.get(noisy, rws[1])  # pushes the first view out of the LRU
  gc.collect()
  assert gone() is None and len(vs) == 1


def _objects_bytes(roots: list, seen: set[int]) -> int:
  """The bytes of the objects reachable from roots through containers and instance attributes, each counted once (and
  none in seen, which gets them)."""
  total, todo = 0, list(roots)
  while todo:
    o = todo.pop()
    if id(o) in seen or o is None or isinstance(o, (type, bool)):
      continue
    seen.add(id(o))
    total += sys.getsizeof(o)
    if isinstance(o, dict):
      todo += [*o.keys(), *o.values()]
    elif isinstance(o, (list, tuple, set, frozenset)):
      todo += o
    elif hasattr(o, "__dict__"):
      total += sys.getsizeof(vars(o))
      todo += vars(o).values()
  return total


def test_the_cached_layouts_estimate_is_close_to_the_objects_they_hold(noisy, monkeypatch):
  monkeypatch.setattr(caches, "LAYOUTS", caches._LayoutCache(caches.LAYOUT_CACHE_NODES))
  monkeypatch.setattr(caches, "ANSWERS", caches.answer_cache())  # (what other tests cached)
  rw = longest_rewrite(noisy)
  view = StepGraphs(noisy, rw, Replay(noisy, rw))
  view.layout(rw.matches)
  seen: set[int] = set()
  _objects_bytes([view._kept, view.replay, view.looks], seen)  # (what the view's estimate counts; shared by the cache)
  held = _objects_bytes(list(caches.LAYOUTS.pools), seen)
  assert 0.5 < caches.held_bytes() / held < 2, (caches.held_bytes(), held)
