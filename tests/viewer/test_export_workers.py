"""The export's rewrites made in worker processes (viz_server/export/workers.py, issue 30): the packed data is the
in-process export's, byte for byte once encoded; a worker's messages stay within their bound; a worker that fails or
dies fails the export with its reason instead of leaving it waiting."""
from __future__ import annotations

import json
import multiprocessing
import os
import threading

import pytest
from support import hostile_traces as ht
from support.export_helpers import _rebuilding, rebuilding_chain
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
  monkeypatch.setattr(workers, "QUEUE_BYTES", 4_000)
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
  steps = [workers._dec(m) if m[:1] == b"s" else workers._dec(m)[1:] for m in q.got if m[:1] in b"se"]
  assert sum(map(len, steps)) == sum(n for _, n in todo) == 30
  for chunk in steps:  # a chunk is over the bound only by its last delta (one delta alone may be any size)
    sizes = [len(workers._part(d)) for d in chunk]
    assert sum(sizes[:-1]) <= workers.CHUNK_BYTES
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


def _two_passes_over_one_root(path):
  """Rewrite 0 matches nothing over a chain's SINK, rewrite 1 (the next pass) steps over that same graph, rewrite 2
  over a chain of its own: rewrites 0 and 1 have one step-0 graph."""
  steps = 4
  nodes, sink, matches = rebuilding_chain(20, steps, rw=1)
  b = sink + steps + 1  # (rewrite 2's chain: another shape, so no memo shares it)
  other = [ht.node(b, arg="x")] + [ht.node(b + i, "EXP2", [b + i - 1]) for i in range(1, 6)]
  return ht.write(path, [[ht.meta(), ht.ctx(0), *nodes, *other, ht.PATTERN,
                          ht.rw_begin(0, sink), ht.rw_end(0, sink, 0), ht.rw_begin(1, sink), *matches,
                          ht.rw_end(1, None, steps), ht.rw_begin(2, b + 5), ht.rw_end(2, b + 5, 0), ht.END]])


def test_the_passes_over_one_root_share_their_layout_in_one_worker(tmp_path):
  """workers.plan: the next pass over a graph a pass left unchanged goes to the worker that laid that graph out, whose
  memo renames the layout (round-robin sent it to the other worker, which laid it out again)."""
  path = _two_passes_over_one_root(tmp_path / "p.vztrace")
  here, work_here = _packed(path, 1)
  forked, work_forked = _packed(path, 2)
  assert forked == here
  assert work_here["graphs"] == 3 and work_here["shared"] == work_forked["shared"] == 1
  assert workers.plan([(7, 0), (7, 4), (9, 0), (9, 2), (11, 0)], 2) == [0, 0, 1, 1, 1]


def test_a_worker_waits_while_its_messages_would_hold_more_than_the_budget(monkeypatch):
  """_Budget: what a worker has put and the packer not taken stays within QUEUE_BYTES, or is one message."""
  monkeypatch.setattr(workers, "QUEUE_BYTES", 4_000)
  monkeypatch.setattr(workers, "POLL_S", 0.01)
  budget = workers._Budget(multiprocessing.get_context("fork"))
  budget.take(10_000, lambda: None)  # (one message over the budget: let through, none being held)
  budget.give(10_000)
  budget.take(3_000, lambda: None)
  waits: list[int] = []
  waited = threading.Event()

  def check() -> None:  # (called between the taker's waits: it is waiting)
    waits.append(budget.held.value)
    waited.set()

  put = threading.Thread(target=budget.take, args=(2_000, check))
  put.start()
  assert waited.wait(30)
  assert put.is_alive() and set(waits) == {3_000}  # (3,000 + 2,000 > 4,000: it waits)
  budget.give(3_000)
  put.join(5)
  assert not put.is_alive() and budget.held.value == 2_000


def test_a_message_is_json_text_and_nothing_else_is_loaded():
  """A message's parts are JSON text (the trace's strings among them): the packer gets a worker's objects as JSON gives
  them, and a part in another format is refused, never loaded (marshal's bytes, say, which can hold a code object)."""
  import marshal
  obj = {"nodes_moved": {7: (1.5, 2.0)}, "s": "\u00e9\0", "n": None}
  msg = workers._enc(b"s", [workers._part(obj)])
  assert workers._dec(msg) == [{"nodes_moved": {"7": [1.5, 2.0]}, "s": "\u00e9\0", "n": None}]
  code = marshal.dumps(compile("1", "<trace>", "eval"))
  with pytest.raises(ValueError):
    workers._dec(b"s" + len(code).to_bytes(4, "little") + code)
