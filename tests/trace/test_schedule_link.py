"""Kernels under the schedule that made them, by record (issue 30): a kernel, copy or memory context's `ctx_begin`
names the schedule context that made what it runs (`schedule`, minor version 6), so a schedule's kernels that run
later, after other contexts, are still filed under it."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.realize import buffer_of_view, run_schedule
from compiler.runtime.buffer import buffer_of
from compiler.schedule.cache import SCHEDULES
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import Tensor
from compiler.trace import recorder
from viz_server.offline import OfflineApi
from viz_server.show import debug_lines
from vztrace.debuglines import schedule_line
from vztrace.format import TraceFormatError, validate_record
from vztrace.reader import TraceReader


def _values(view, shape) -> np.ndarray:
  return buffer_of(buffer_of_view(view)).numpy().reshape(shape)


def test_kernels_that_run_later_name_their_schedule(tmp_path, monkeypatch, capsys):
  rng = np.random.default_rng(0)
  a, b = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
  SCHEDULES.clear()  # (the second schedule is a cache hit of the first, as in a fresh program)
  path = recorder.enable(tmp_path / "later.vztrace", announce=False).path
  try:
    outs = [(Tensor(a) * 2).softmax(), (Tensor(b) * 2).softmax(), (Tensor(a) + 1).exp().sum(0)]
    made = [create_schedule([t.uop]) for t in outs]  # three schedules, then their kernels, last one first
    monkeypatch.setenv("DEBUG", "1")
    for steps, _ in reversed(made):
      run_schedule(steps)
  finally:
    recorder.disable()
  ref = [np.exp(2 * x - (2 * x).max(-1, keepdims=True)) for x in (a, b)]
  want = [r / r.sum(-1, keepdims=True) for r in ref] + [np.exp(a.astype(np.float64) + 1).sum(0)]
  for (_, views), t, w in zip(made, outs, want):
    np.testing.assert_allclose(_values(views[t.uop], t.shape), w, rtol=1e-5)
  recs = list(TraceReader(path))
  scheds = [r["id"] for r in recs if r.get("t") == "ctx_begin" and r["kind"] == "schedule"]
  hits = {r["ctx"] for r in recs if r.get("t") == "rw_begin" and r["name"] == "schedule cache hit"}
  assert len(scheds) == 3 and hits == {scheds[1]}
  kernels = [r for r in recs if r.get("t") == "ctx_begin" and r["kind"] == "kernel"]
  want_links = [s for (steps, _), s in reversed(list(zip(made, scheds))) for _ in steps]
  assert [k.get("schedule") for k in kernels] == want_links  # the hit's kernels under the hit's context
  assert [k["parent"] for k in kernels] == [0] * len(kernels) and len(set(want_links)) == 3
  # `show --debug 1` rebuilds DEBUG's lines (one per run_schedule, in run order) from the links
  live = capsys.readouterr().out.splitlines()
  assert live == [schedule_line(len(steps)) for steps, _ in reversed(made)]
  with OfflineApi(path) as api:
    assert list(debug_lines(api, 1)) == live


def test_a_step_made_in_an_earlier_recording_names_no_schedule(tmp_path):
  """A schedule made while one recording ran and run in the next: its context ids are the first one's, so the
  kernel's context names none (a schedule context of the second recording with the same id is another one)."""
  SCHEDULES.clear()
  recorder.enable(tmp_path / "first.vztrace", announce=False)
  try:
    t = Tensor(np.arange(6, dtype=np.float32)) * 3
    steps, views = create_schedule([t.uop])
  finally:
    recorder.disable()
  path = recorder.enable(tmp_path / "second.vztrace", announce=False).path
  try:
    create_schedule([(Tensor(np.ones(4, np.float32)) + 1).uop])  # (a schedule context here too)
    run_schedule(steps)
  finally:
    recorder.disable()
  np.testing.assert_array_equal(_values(views[t.uop], (6,)), np.arange(6) * 3)
  kernels = [r for r in TraceReader(path) if r.get("t") == "ctx_begin" and r["kind"] == "kernel"]
  assert kernels and all("schedule" not in k for k in kernels)


def test_the_format_takes_an_int_link():
  assert validate_record({"t": "ctx_begin", "id": 4, "parent": 0, "name": "E_4", "kind": "kernel", "ts": 1.0,
                          "schedule": 3})


@pytest.mark.parametrize("link", ["3", True, 3.0, None, [3], 1 << 64])
def test_the_format_refuses_a_link_that_is_no_int(link):
  with pytest.raises(TraceFormatError, match="schedule|int64"):
    validate_record({"t": "ctx_begin", "id": 4, "parent": 0, "name": "E_4", "kind": "kernel", "ts": 1.0,
                     "schedule": link})
