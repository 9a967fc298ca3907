"""Bounded replay (issue 30: a GPT step's `add bufferize` replay held ~1 GB): the run keeps a checkpoint every few
thousand nodes it made and only a few segments of steps; a step asked for again is replayed from its checkpoint,
counted: one segment a question, with the same graphs, ids, changes and births as a replay that kept everything."""
import random

import pytest
from support.server_helpers import longest_rewrite, write_noisy_simplify

from viz_server import replay as replay_mod
from viz_server.replay import FRESH_BASE, Replay
from viz_server.store import TraceStore


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
  (tr,) = TraceStore().add_path(write_noisy_simplify(tmp_path_factory.mktemp("t") / "t.vztrace"))
  return tr


def _answers(rp: Replay, k: int) -> tuple:
  info = rp.step(k)
  members = rp.members(k)
  fields = None if info is None else (info.added, info.changed, info.removed, info.pairs, info.replaced, info.by,
                                      info.note)
  return (rp.root(k), fields, sorted(members), [rp.created(n, k) for n in sorted(members)],
          [rp.node(n) for n in sorted(members)])


def test_steps_replayed_from_checkpoints_are_the_first_runs_and_a_question_replays_one_segment(noisy, monkeypatch):
  rw = longest_rewrite(noisy)
  n = rw.matches
  monkeypatch.setattr(replay_mod, "SEGMENT_NODES", 10**9)  # one segment, never replayed again
  whole = Replay(noisy, rw)
  want = [_answers(whole, k) for k in range(n + 1)]
  assert whole.replays == 0 and len(whole._cps) == 1 and any(w[1] and w[1][1] for w in want)  # (changed nodes occur)
  assert any(x >= FRESH_BASE for w in want for x in w[2])
  monkeypatch.setattr(replay_mod, "SEGMENT_NODES", 40)
  monkeypatch.setattr(replay_mod, "SEGMENTS_KEPT", 1)
  rp = Replay(noisy, rw)
  rp.ensure(n)
  cps = rp._cp_steps
  assert len(cps) > 8 and len(rp._segs) <= 1
  longest = max(b - a for a, b in zip(cps, cps[1:]))
  most = max(len(w[1][0]) + len(w[1][1]) for w in want[1:])  # (nodes a step adds at most: a bound on those it makes)
  order = list(range(n + 1)) * 2
  random.Random(7).shuffle(order)
  for k in order:
    steps, made = rp.replays, rp.remade
    assert _answers(rp, k) == want[k], k
    assert rp.replays - steps <= longest and rp.remade - made <= 40 + most, k  # one segment at most
  assert rp.replays > 4 * longest  # (the order made it replay segments again)
  assert len(rp._segs) <= 1


def test_the_run_forgets_what_it_no_longer_refers_to(noisy, monkeypatch):
  rw = longest_rewrite(noisy)
  monkeypatch.setattr(replay_mod, "SEGMENT_NODES", 40)
  rp = Replay(noisy, rw)
  rp.ensure(rw.matches)
  run, first = rp._run, rp._first_fresh[-1]
  assert run.counter > 4 * len(run.fresh)  # (the nodes made in all: far more than the run holds)
  kept = set(rp._cps[-1].kept)  # what the run referred to at its last checkpoint (the nodes below included)
  assert kept <= set(run.fresh) and all(x in kept or x - FRESH_BASE >= first for x in run.fresh)  # and those made since
  since = [rp.step(s) for s in range(rp._cp_steps[-1] + 1, rw.matches + 1)]
  added = sum(len(s.added) + len(s.changed) for s in since)
  assert len(run.born) <= len(run.ref) + added  # births: of the graph at the checkpoint and its segment's additions
