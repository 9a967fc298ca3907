"""Issue 14, item 5: memory in proportion to what a trace holds. A small file of millions of tiny records is read
without making them all at once (validate, the viewer's index), and one trace's index is capped."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from support import hostile_traces as H

from viz_server import store as store_mod
from viz_server.store import TraceStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEAK = textwrap.dedent("""
  import sys
  sys.path.insert(0, "tests")
  if sys.argv[1] == "validate":
    from compiler.trace.cli import main
    main(["validate", sys.argv[2]])
  else:
    from viz_server.store import TraceStore
    (tr,) = TraceStore().add_path(sys.argv[2])
    assert len(tr.nodes) >= int(sys.argv[3]), len(tr.nodes)
  # VmHWM, not getrusage's ru_maxrss: Linux keeps ru_maxrss across exec, so a child of a big pytest worker would
  # report the worker's size
  hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
  print(int(hwm.split()[1]) >> 10)
""")


def _peak_mb(*args: str) -> int:
  res = subprocess.run([sys.executable, "-c", PEAK, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stderr
  return int(res.stdout.split()[-1])


def test_two_batches_of_2_20_nodes_read_in_bounded_memory(tmp_path):
  path = H.tiny_records(tmp_path / "t.vztrace", 1 << 20, 2)
  assert path.stat().st_size < 100 << 10
  assert _peak_mb("validate", str(path)) < 250  # was 0.9 GB: each batch made as 2**20 dicts at once
  assert _peak_mb("index", str(path), "90000") < 250  # the index: ~60 bytes a node, and 1 record a file byte


def test_the_index_of_one_trace_is_capped(tmp_path, monkeypatch):
  monkeypatch.setattr(store_mod, "MAX_INDEX_RECORDS", 25_000)
  monkeypatch.setattr(store_mod, "INDEX_FLOOR", 0)
  monkeypatch.setattr(store_mod, "RECORDS_PER_BYTE", 1000)
  (tr,) = TraceStore().add_path(H.tiny_records(tmp_path / "t.vztrace", 20_000, 3))
  assert tr.status == "damaged" and "too big for the viewer" in tr.damage["reason"]
  assert 20_000 <= len(tr.nodes) <= 25_000 and tr.indexed <= 25_000


def test_a_small_file_of_many_records_is_indexed_in_proportion_to_its_size(tmp_path):
  """Columns of equal values compress to almost nothing: the index takes at most RECORDS_PER_BYTE records a byte."""
  path = H.tiny_records(tmp_path / "t.vztrace", 1 << 18, 2)
  (tr,) = TraceStore().add_path(path)
  assert tr.status == "damaged" and "per byte" in tr.damage["reason"]
  assert tr.indexed <= max(store_mod.INDEX_FLOOR, store_mod.RECORDS_PER_BYTE * path.stat().st_size)
  assert len(tr.nodes) < 1 << 18


def test_source_texts_kept_per_trace_are_bounded(tmp_path, monkeypatch):
  monkeypatch.setattr(store_mod, "TEXT_BUDGET", 3 << 20)
  (tr,) = TraceStore().add_path(H.big_kernel(tmp_path / "k.vztrace", 6, 2 << 20))
  texts = [s["text"] for s in tr.contexts[0].sources]
  assert len(texts) == 6 and sum(map(len, texts)) == 3 << 20
  assert all(len(t) <= store_mod.SOURCE_KEEP_CHARS for t in texts)
  assert all(s["chars"] == 2 << 20 for s in tr.contexts[0].sources)
