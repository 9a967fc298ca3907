"""BEAM's opts are confirmed in the schedule's sequence before a schedule runs (compiler.engine.confirm_schedule):
where BEAM's winner differs from the hand-coded kernel, each is timed in its place in the schedule's run, on scratch
copies of the buffers, and BEAM's kept only where it wins there; the disk cache then holds that choice ("sequence")
and the kernel's trace context the confirmation's outcome. Timings are injected where a decision is asserted."""
from __future__ import annotations

import json

import numpy as np
import pytest

from compiler import engine, realize
from compiler.opt import Kernel, hand_coded_optimizations
from compiler.opt.beam_cache import cache_get, cache_key
from compiler.runtime.candidates import time_in_sequence
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import Tensor
from compiler.trace import recorder
from vztrace.reader import TraceReader


def _softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch, fresh_caches):
  """A private BEAM cache, BEAM=2, and no kernel decided or compiled before the test."""
  monkeypatch.setenv("BEAM_CACHE_DIR", str(tmp_path / "beam"))
  monkeypatch.delenv("IGNORE_BEAM_CACHE", raising=False)
  monkeypatch.delenv("NOOPT", raising=False)
  monkeypatch.setenv("BEAM", "2")
  monkeypatch.setenv("BACKEND", "llvm")
  monkeypatch.setattr(engine, "_decided", {})
  monkeypatch.setattr(realize, "_runners", {})


def test_each_variant_is_timed_in_its_place_alternating_by_round():
  ran, now = [], [0.0]

  def step(name: str, cost: float):
    def run() -> None:
      # the kernel after "a" pays for the cache "a" leaves: 5 units, 1 when run alone
      now[0] += cost * (5 if ran and ran[-1] == "a" else 1)
      ran.append(name)
    return run

  times = time_in_sequence([[step("a", 1)], [step("heur", 2), step("beam", 1)], [step("c", 1)]], 3,
                           clock=lambda: now[0])
  # one warm-up round per variant, then three rounds each, alternating, every step in order every round
  assert ran == ["a", "heur", "c", "a", "beam", "c"] * 4
  assert times == [[[]], [[10.0] * 3, [5.0] * 3], [[]]]
  # short runs: more rounds, until each variant's add up to min_time (or max_rounds)
  ran.clear()
  times = time_in_sequence([[step("a", 1)], [step("heur", 2), step("beam", 1)]], 3, clock=lambda: now[0],
                           min_time=30, max_rounds=50)
  assert times == [[[]], [[10.0] * 6, [5.0] * 6]]
  times = time_in_sequence([[step("a", 1)], [step("heur", 2), step("beam", 1)]], 3, clock=lambda: now[0],
                           min_time=1e9, max_rounds=4)
  assert [len(t) for t in times[1]] == [4, 4]


def _modelled_evaluator(monkeypatch) -> None:
  """BEAM's search and its lone confirmation priced, deterministically: the hand-coded kernel 1 s, every other
  candidate 0.5 s (BEAM's winner is then the first kernel it tried, the plain one, which the lone pair keeps)."""
  def evaluator(k, bufs):
    heur = hand_coded_optimizations(k.copy()).get_optimized_ast()
    return None, lambda cand: 1.0 if cand is heur else 0.5
  monkeypatch.setattr(engine, "_evaluator", evaluator)


def _sequence_costs(monkeypatch, beam_cost: float) -> list[list]:
  """Replace the sequence's clock: every kernel really runs (its output is the schedule's), a contested kernel's
  hand-coded variant takes 1 s, BEAM's `beam_cost` s. Returns the steps it was given, per call."""
  calls: list[list] = []

  def timer(steps, rounds, clock, min_time, max_rounds):
    now = [0.0]
    calls.append(steps)

    def timed(run, cost):
      def go() -> None:
        run()
        now[0] += cost
      return go
    fake = [[timed(run, 1.0 if v == 0 else beam_cost) for v, run in enumerate(vs)] for vs in steps]
    return time_in_sequence(fake, rounds, lambda: now[0], min_time, max_rounds)
  monkeypatch.setattr(engine, "sequence_timer", timer)
  return calls


def _contested(x: np.ndarray) -> list:
  """The softmax kernels whose lone-confirmed BEAM opts (the search called on the kernel alone) differ from the
  heuristics'."""
  sched, _ = create_schedule([Tensor(x).softmax(-1).uop])
  out = []
  for si in sched:
    lone = engine.timed_beam_search(Kernel(si.ast), amt=2, use_cache=False, progress=False)
    if lone.applied_opts != hand_coded_optimizations(Kernel(si.ast)).applied_opts:
      out.append(si.ast)
  return out


@pytest.mark.parametrize("beam_cost, beam_kept", [(1.5, False), (0.5, True)])
def test_the_sequence_decides_where_the_lone_pair_kept_beam(monkeypatch, tmp_path, beam_cost, beam_kept):
  _modelled_evaluator(monkeypatch)
  x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
  contested = _contested(x)
  assert contested  # the lone pair keeps BEAM's opts for these
  calls = _sequence_costs(monkeypatch, beam_cost)
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  try:
    out = Tensor(x).softmax(-1).numpy()
  finally:
    recorder.disable()
  np.testing.assert_allclose(out, _softmax(x), rtol=1e-5, atol=1e-6)
  assert len(calls) == 1
  recs = list(TraceReader(path))
  names = {r["id"]: r["name"] for r in recs if r["t"] == "ctx_begin" and r["kind"] == "kernel"}
  for ast in contested:
    k, heur = Kernel(ast), hand_coded_optimizations(Kernel(ast))
    beam = engine.timed_beam_search(Kernel(ast), amt=2, use_cache=False, progress=False, confirm=False)
    want = beam if beam_kept else heur
    entry = cache_get(cache_key(ast, k.target, 2))
    assert entry is not None and entry.confirmed == "sequence"
    assert entry.opts == want.applied_opts and entry.beam_opts == beam.applied_opts
    # the kernel ran with the confirmed opts, and its trace context says why
    ck = realize._runners[("llvm", ast)][0]
    assert list(ck.opts) == want.applied_opts
    rows = [r for r in recs if r["t"] == "beam" and r.get("confirm") == "sequence" and names.get(r["ctx"]) == k.name]
    assert [(r["variant"], r["chosen"]) for r in rows] == [("heuristic", not beam_kept), ("beam", beam_kept)]
    assert [r["times"] for r in rows] == [[1.0] * 3, [beam_cost] * 3]
    assert rows[0]["round"] == max(r["round"] for r in recs if r["t"] == "beam" and r["ctx"] == rows[0]["ctx"])
  # a later run decides from the cache: no search, no confirmation
  monkeypatch.setattr(engine, "_decided", {})
  monkeypatch.setattr(realize, "_runners", {})
  monkeypatch.setattr(engine, "_evaluator", lambda k, bufs: pytest.fail("searched again"))
  np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), _softmax(x), rtol=1e-5, atol=1e-6)
  assert len(calls) == 1


def test_confirmation_runs_on_scratch_buffers_and_an_in_place_update_runs_once(monkeypatch):
  _modelled_evaluator(monkeypatch)
  calls = _sequence_costs(monkeypatch, 1.5)
  x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
  keep = x.copy()
  w = Tensor(x).realize()
  w.assign((w.softmax(-1) + w) * 2).realize()
  assert calls and any(len(vs) == 2 for vs in calls[-1])  # a contested kernel was timed, rounds on end
  np.testing.assert_array_equal(x, keep)
  np.testing.assert_allclose(w.numpy(), (_softmax(keep) + keep) * 2, rtol=1e-5, atol=1e-5)


def test_real_beam_on_a_softmax_through_realize(tmp_path):
  """Real searches, real timings: correct outputs, every kernel's opts confirmed in sequence in the cache."""
  x = np.random.default_rng(2).standard_normal((32, 128)).astype(np.float32)
  keep = x.copy()
  np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), _softmax(keep), rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(x, keep)
  entries = [json.loads(p.read_text()) for p in (tmp_path / "beam").glob("*.json")]
  assert entries and all(e["confirmed"] == "sequence" for e in entries)
  ran = {ast.arg.name: [o.to_json() for o in ck.opts] for (_, ast), (ck, _) in realize._runners.items()}
  assert sorted(ran) == sorted(e["kname"] for e in entries)
  for e in entries:
    assert ran[e["kname"]] == e["opts"]
