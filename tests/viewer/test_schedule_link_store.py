"""A trace's schedule links (`ctx_begin.schedule`, minor version 6) come from strangers: the store passes on one that
names a schedule context begun before, and ignores (as an anomaly) one to a missing, later or non-schedule context."""
from __future__ import annotations

from support import hostile_traces as ht

from viz_server.store import TraceStore, context_entry


def _linked(cid: int, kind: str, link, parent: int | None = 0) -> dict:
  return {**ht.ctx(cid, kind, parent), "schedule": link}


def test_the_store_keeps_only_links_to_earlier_schedules(tmp_path):
  recs = [ht.meta(), ht.ctx(0), ht.ctx(1, "schedule", 0), _linked(2, "kernel", 1), _linked(3, "kernel", 99),
          _linked(4, "copy", 2), _linked(5, "kernel", 6), ht.ctx(6, "schedule", 0), _linked(7, "schedule", 1),
          _linked(8, "memory", 6), _linked(9, "kernel", 9), ht.END]
  (tr,) = TraceStore().add_path(ht.write(tmp_path / "links.vztrace", [recs]))
  assert tr.damage is None
  got = {c.id: context_entry(tr, c)["schedule"] for c in tr.contexts.values()}
  assert got == {0: None, 1: None, 2: 1, 3: None, 4: None, 5: None, 6: None, 7: None, 8: 6, 9: None}
  assert sum("as its schedule" in a for a in tr.anomalies) == 5
