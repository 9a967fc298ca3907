"""What the viewer keeps while a rewrite is looked at and after it went, counted (issue 30: the viewer grew to 1.0-1.56
GB on a GPT step's trace): a replay's dependents hold no dead entries and a node's births no list, the layouts kept for
good grow as the square root of the steps, and dropped views hand the heap back."""
import math

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
  assert sorted(view._kept) == list(range(0, n + 1, every)) and len(view._kept) <= math.isqrt(n) + 2


def test_views_that_go_hand_the_heap_back_once_enough_went(noisy, monkeypatch):
  assert caches._TRIM is not None  # (glibc, as on Debian: elsewhere release_memory does nothing)
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
