"""The trace's structural node index (NodeColumns.find) while another thread adds rows or looks nodes up: replay
builds it on a request's thread or the prefetch worker while the ingest thread appends, and a miss would give a trace
node a fresh id, so a step's graph would be wrong."""
from __future__ import annotations

import threading

from viz_server.nodes import NodeColumns


def _columns(n: int) -> NodeColumns:
  cols = NodeColumns()
  cols.add(0, "CONST", "int", "0", [])
  for i in range(1, n):
    cols.add(i, "ADD", "int", str(i), [i - 1])
  return cols


def test_no_reader_sees_the_index_half_built() -> None:
  cols = _columns(50)
  seen: list[object] = []
  key_at = cols._key_at

  def counting(row: int) -> tuple:
    seen.append(cols._struct)  # what a lookup on another thread would read now
    return key_at(row)

  cols._key_at = counting  # type: ignore[method-assign]
  assert cols.find("ADD", "int", "7", (6,)) == 7
  assert len(seen) == 50 and all(s is None for s in seen)  # (the old code published {} and filled it after)
  for i in range(1, 50):
    assert cols.find("ADD", "int", str(i), (i - 1,)) == i


def test_a_row_added_while_the_index_is_built_is_found_after() -> None:
  cols = _columns(40)
  key_at = cols._key_at
  adder: list[threading.Thread] = []

  def adding(row: int) -> tuple:
    if not adder:  # the first row's key: another thread adds a node now, before the build is published
      t = threading.Thread(target=cols.add, args=(40, "MUL", "int", "x", [39]))
      adder.append(t)
      t.start()
      while len(cols) < 41:  # (its row is complete once its id is in: it then waits for the index)
        pass
    return key_at(row)

  cols._key_at = adding  # type: ignore[method-assign]
  assert cols.find("CONST", "int", "0", ()) == 0
  adder[0].join()
  cols._key_at = key_at  # type: ignore[method-assign]
  assert cols.find("MUL", "int", "x", (39,)) == 40
  assert cols.find_like(40, (39,)) == 40
  cols.add(41, "MUL", "int", "y", [40])  # rows added once the index is built enter it
  assert cols.find("MUL", "int", "y", (40,)) == 41


def test_a_rewrites_graph_with_steps_builds_the_index_before_a_step_is_asked(tmp_path) -> None:
  """The page shows a rewrite's graph and steps next: its replays look nodes up, and the first step waited for the
  whole trace's index (~0.1 s of a GPT step's, issue 30's arrow-step p95). Answering the graph builds it on a thread
  of its own, once."""
  from support.server_helpers import write_noisy_simplify

  from viz_server.app import create_app
  app = create_app([write_noisy_simplify(tmp_path / "t.vztrace")], follow=False)
  store = app.extensions["tinyviz"]["store"]
  (tr,) = store.traces.values()
  rw = max(tr.rewrites.values(), key=lambda r: r.matches)
  assert rw.matches and tr.nodes._indexer is None and tr.nodes._struct is None
  assert app.test_client().get(f"/api/traces/{tr.id}/rewrites/{rw.id}/graph?step=0").status_code == 200
  indexer = tr.nodes._indexer
  assert indexer is not None, "the graph of a rewrite with steps left the index to its first step"
  indexer.join(60)
  assert tr.nodes._struct is not None and tr.nodes.index_ahead() is indexer  # (built once)
