"""The export's rewrites made in worker processes (viz_server/export/workers.py, issue 30): the packed data is the
in-process export's, byte for byte once encoded; a worker's messages stay within their bound; a worker that fails or
dies fails the export with its reason instead of leaving it waiting."""
from __future__ import annotations

import json
import os

import pytest
from support.export_helpers import _rebuilding
from support.trace_tools_helpers import record_small

from viz_server.export import workers
from viz_server.export.collect import Work, collect_packed
from viz_server.offline import OfflineApi


def _packed(path, jobs: int) -> tuple[str, dict]:
  work = Work()
  with OfflineApi(path) as api:
    data = collect_packed(api, work=work, jobs=jobs)
  return json.dumps(data, separators=(",", ":")), vars(work)


def test_workers_pack_what_the_export_packs_in_process(trace, tmp_path, monkeypatch):
  monkeypatch.setattr(workers, "CHUNK_BYTES", 2_000)  # (several chunks a rewrite, and queues that fill)
  monkeypatch.setattr(workers, "QUEUE_MESSAGES", 2)
  for path in (record_small(trace), _rebuilding(tmp_path / "r.vztrace", depth=30, steps=12)):
    here, work_here = _packed(path, 1)
    forked, work_forked = _packed(path, 3)
    assert forked == here
    # (each worker shares step-0 layouts among its own rewrites only: fewer renamed, the same positions)
    assert work_forked.pop("shared") <= work_here.pop("shared")
    assert work_forked == work_here and work_here["steps"] >= 12


class _Queue:
  """What a worker puts, kept (a queue without its bound: the test counts what would wait in it)."""

  def __init__(self) -> None:
    self.got: list[bytes] = []

  def put(self, msg: bytes) -> None:
    self.got.append(msg)


def test_a_workers_messages_are_bounded_by_the_chunk_size(tmp_path, monkeypatch):
  monkeypatch.setattr(workers, "CHUNK_BYTES", 3_000)
  with OfflineApi(_rebuilding(tmp_path / "r.vztrace", depth=40, steps=30)) as api:
    todo = [(r, rw.matches) for r, rw in api.trace.rewrites.items()]
    q = _Queue()
    workers._work(api, todo, q)
  kinds = [m[:1] for m in q.got]
  assert kinds.count(b"g") == kinds.count(b"e") == len(todo) and b"x" not in kinds
  steps = [json.loads(m[1:]) if m[:1] == b"s" else json.loads(m[1:])[0] for m in q.got if m[:1] in b"se"]
  assert sum(map(len, steps)) == sum(n for _, n in todo) == 30
  for chunk in steps:  # a chunk is over the bound only by its last delta (one delta alone may be any size)
    texts = [len(json.dumps(d, separators=(",", ":"))) for d in chunk]
    assert sum(texts[:-1]) <= workers.CHUNK_BYTES
  assert len(steps) >= 4  # (the bound cut the rewrite's 30 steps)


def _failing(api, r):
  raise ZeroDivisionError(f"rewrite {r}")


def _dying(api, r):
  os._exit(3)


@pytest.mark.parametrize("fail, reason", [(_failing, "ZeroDivisionError: rewrite"), (_dying, "ended with status 3")])
def test_a_failing_worker_fails_the_export_with_its_reason(trace, monkeypatch, fail, reason):
  monkeypatch.setattr(workers, "POLL_S", 0.05)
  with OfflineApi(record_small(trace)) as api:
    monkeypatch.setattr(type(api), "view", fail)  # (the forked workers inherit it)
    with pytest.raises(workers.WorkerError, match=reason):
      collect_packed(api, jobs=2)
