"""Issue 14, item 5: memory in proportion to what a trace holds. A small file of millions of tiny records is read
without making them all at once (validate, the viewer's index), and one trace's index is capped."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import hostile_traces as H

from viz_server import store as store_mod
from viz_server.store import TraceStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEAK = textwrap.dedent("""
  import resource, sys
  sys.path.insert(0, "tests")
  if sys.argv[1] == "validate":
    from compiler.trace.cli import main
    main(["validate", sys.argv[2]])
  else:
    from viz_server.store import TraceStore
    (tr,) = TraceStore().add_path(sys.argv[2])
    assert len(tr.nodes) >= int(sys.argv[3]), len(tr.nodes)
  print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10)
""")


def _peak_mb(*args: str) -> int:
  res = subprocess.run([sys.executable, "-c", PEAK, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stderr
  return int(res.stdout.split()[-1])


def test_two_batches_of_2_20_nodes_read_in_bounded_memory(tmp_path):
  path = H.tiny_records(tmp_path / "t.vztrace", 1 << 20, 2)
  assert path.stat().st_size < 100 << 10
  assert _peak_mb("validate", str(path)) < 250  # was 0.9 GB: each batch made as 2**20 dicts at once
  assert _peak_mb("index", str(path), str(1 << 20)) < 350  # the index itself: ~60 bytes a node (capped at 2M)


def test_the_index_of_one_trace_is_capped(tmp_path, monkeypatch):
  monkeypatch.setattr(store_mod, "MAX_INDEX_RECORDS", 25_000)
  (tr,) = TraceStore().add_path(H.tiny_records(tmp_path / "t.vztrace", 20_000, 3))
  assert tr.status == "damaged" and "too big for the viewer" in tr.damage["reason"]
  assert 20_000 <= len(tr.nodes) <= 25_000 and tr.indexed <= 25_000
