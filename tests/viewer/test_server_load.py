"""Issue 14, the load bench's tail (bench/bench_server_load.py): what made requests of four clients wait on each
other. Computed steps are read without the replay's lock (a far cursor move held it for ms while every node of every
other graph answer asked for it); a far step's members are walked from its root, not reached by moving the shared
cursor; and the serving process's garbage collector no longer walks every cached layout every ~15 requests."""
from __future__ import annotations

import gc
import random
import threading

import pytest
from support.server_helpers import longest_rewrite, write_noisy_simplify

from viz_server import replay as replay_mod
from viz_server.__main__ import GC_THRESHOLDS, tune_gc
from viz_server.app import create_app
from viz_server.replay import Replay
from viz_server.store import TraceStore


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
  path = write_noisy_simplify(tmp_path_factory.mktemp("t") / "t.vztrace")
  (tr,) = TraceStore().add_path(path)
  return path, tr


def test_computed_steps_are_read_while_another_thread_holds_the_replay_lock(noisy):
  _, tr = noisy
  rw = longest_rewrite(tr)
  rp = Replay(tr, rw)
  rp.ensure(rw.matches)
  far = rw.matches // 2
  rp.members(0)
  assert far > replay_mod.NEAR
  done = threading.Event()
  got = {}

  def reader():
    got["root"], got["size"], got["step"] = rp.root(far), rp.size(far), rp.step(far)
    got["created"] = [rp.created(n, far) for n in sorted(rp.members(far))]
    done.set()

  with rp.lock:  # as a request moving the cursor far holds it
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    finished = done.wait(timeout=30)
  t.join(timeout=30)
  assert finished, "reading a computed step waited for the replay's lock"
  assert got["root"] == rp.roots[far] and got["size"] == len(got["created"]) == rp.sizes[far]


def test_far_members_are_the_graph_at_that_step_and_leave_the_cursor(noisy):
  _, tr = noisy
  rw = longest_rewrite(tr)
  forward = Replay(tr, rw)
  graphs = [forward.members(k) for k in range(rw.matches + 1)]  # each a cursor move of one step
  jumpy = Replay(tr, rw)
  jumpy.ensure(rw.matches)
  jumpy.members(0)
  order = list(range(rw.matches + 1))
  random.Random(3).shuffle(order)
  far_reads = 0
  for k in order:
    cur = jumpy.cur
    assert jumpy.members(k) == graphs[k], k
    if abs(k - cur) > replay_mod.NEAR:
      far_reads += 1
      assert jumpy.cur == cur, k  # a far read does not move the cursor
    else:
      assert jumpy.cur == k
  assert far_reads > len(order) // 2


def test_serving_graph_answers_triggers_no_full_collection(noisy):
  path, tr = noisy
  rw = longest_rewrite(tr)
  app = create_app([path], follow=False)
  client = app.test_client()
  tid = next(iter(app.extensions["tinyviz"]["store"].traces))
  urls = [f"/api/traces/{tid}/rewrites/{rw.id}/graph?step={k}" for k in range(rw.matches + 1)]
  for u in urls:  # layouts computed and cached: what stays is answers built and dropped
    assert client.get(u).status_code == 200
  old = gc.get_threshold()
  try:
    tune_gc()
    assert gc.get_threshold() == GC_THRESHOLDS
    full = gc.get_stats()[2]["collections"]
    rng = random.Random(4)
    for _ in range(400):
      assert client.get(rng.choice(urls)).status_code == 200
    assert gc.get_stats()[2]["collections"] == full
  finally:
    gc.set_threshold(*old)
    gc.unfreeze()
