"""Buffer memory in the trace and the timeline (issue 17): compiler/runtime/buffer.py records each buffer's memory
taken and released with its bytes; the timeline API gives bytes in use over time and the peak, `info` prints it."""
from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import hostile_traces as ht
from support.server_helpers import recording

from compiler.dtype import dtypes
from compiler.realize import buffer_of_view
from compiler.runtime import buffer
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.trace.cli import summarize
from viz_server import memory
from viz_server.app import create_app
from vztrace.memory import MemoryProfile, event
from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[2]


def _timeline(path: Path) -> dict:
  r = create_app([path], follow=False).test_client().get("/api/traces/0/timeline")
  assert r.status_code == 200, r.data[:300]
  return r.get_json()


@pytest.fixture(scope="module")
def program(tmp_path_factory):
  """1000 float32 in (4000 bytes), doubled into a second buffer (8000 in use), both dropped, then 10 float32."""
  path = tmp_path_factory.mktemp("mem") / "mem.vztrace"
  with recording(path):
    a = Tensor(np.arange(1000, dtype=np.float32))
    b = (a * 2).realize()
    out_id = buffer_of_view(b.uop).arg[0]
    got = b.numpy()
    del a, b
    gc.collect()
    c = Tensor(np.ones(10, dtype=np.float32))
    c.numpy()  # (a buffer operation: the frees queued by the collection are written before it)
  assert np.array_equal(got, np.arange(1000, dtype=np.float32) * 2)
  mems = [r for r in TraceReader(path) if r["t"] == "mem"]
  return path, mems, out_id


def test_allocs_and_frees_come_in_pairs_with_the_buffers_bytes(program):
  path, mems, out_id = program
  allocs = {r["buf"]: r for r in mems if r["op"] == "alloc"}
  frees = [r for r in mems if r["op"] == "free"]
  assert len(allocs) == sum(r["op"] == "alloc" for r in mems) == 3, "each buffer is allocated once"
  assert sorted((r["dtype"], r["size"], r["bytes"]) for r in allocs.values()) == [
    ("float32", 10, 40), ("float32", 1000, 4000), ("float32", 1000, 4000)]
  assert out_id in allocs
  assert len(frees) == 2 and {f["buf"] for f in frees} == {b for b, r in allocs.items() if r["size"] == 1000}
  for f in frees:
    assert f["bytes"] == allocs[f["buf"]]["bytes"] and f["ts"] >= allocs[f["buf"]]["ts"]


def test_the_peak_is_the_hand_computed_one(program):
  path, mems, out_id = program
  prof = MemoryProfile(event(r, i) for i, r in enumerate(mems))
  # by hand: a's 4000 bytes, then the product's 4000 more; both freed before c's 40
  assert prof.peak["bytes"] == 4000 + 4000 and prof.peak["buf"] == out_id
  assert prof.used == [4000, 8000, 4000, 0, 40]
  s = summarize(str(path))["memory"]
  assert s["peak"]["bytes"] == 8000 and s["allocs"] == 3 and s["frees"] == 2 and s["end_bytes"] == 40
  out = subprocess.run([sys.executable, "-m", "compiler.trace", "info", str(path)], capture_output=True, text=True,
                       cwd=ROOT, env={"PATH": "/usr/bin:/bin", "VIZ": "0"}, timeout=120)
  assert out.returncode == 0, out.stderr
  line = next(x for x in out.stdout.splitlines() if x.startswith("memory"))
  assert "peak 7.8 KiB (8000 B)" in line and f"buffer {out_id}'s" in line and "float32 x1000" in line


def test_the_timeline_api_gives_bytes_in_use_and_the_peak(program):
  path, mems, out_id = program
  tl = _timeline(path)
  m = tl["memory"]
  t0 = tl["t0"]
  assert m["bytes"] == [4000, 8000, 4000, 0, 40] and m["allocs"] == 3 and m["frees"] == 2 and m["skipped"] == 0
  want_t = sorted(r["ts"] - t0 for r in mems)
  assert m["t"] == pytest.approx(want_t, abs=1e-6) and all(0 <= t <= tl["end"] for t in m["t"])
  alloc = next(r for r in mems if r["op"] == "alloc" and r["buf"] == out_id)
  assert m["peak"] == {"t": pytest.approx(alloc["ts"] - t0, abs=1e-6), "bytes": 8000, "buf": out_id,
                       "buf_bytes": 4000, "dtype": "float32", "size": 1000, "ctx": alloc["ctx"]}
  assert m["truncated"] is False


def test_nothing_is_recorded_or_queued_without_a_recorder():
  assert recorder.RECORDER is None
  b = buffer.Buffer(dtypes.float32, 100)
  b.ensure_allocated()
  assert b._traced == 0
  del b
  gc.collect()
  assert not buffer._freed


def test_nonsense_mem_records_are_skipped(tmp_path):
  tl = _timeline(ht.bad_memory(tmp_path / "bad.vztrace"))
  m = tl["memory"]
  assert m["skipped"] == ht.BAD_MEMORY_SKIPPED
  assert {k: m["peak"][k] for k in ("bytes", "buf")} == ht.BAD_MEMORY_PEAK
  assert m["bytes"] == [300, 800, 300, 400]  # buffer 7's double free releases nothing the second time
  assert m["peak"]["dtype"] == "float32" and m["peak"]["size"] == 125


def test_a_mem_record_breaking_the_schema_leaves_the_rest(tmp_path):
  path = ht.bad_memory(tmp_path / "broken.vztrace", schema_break=True)
  app = create_app([path], follow=False)
  client = app.test_client()
  entry = client.get("/api/traces").get_json()[0]
  assert entry["status"] == "damaged" and "bytes" in entry["damage"]["reason"]
  tl = client.get("/api/traces/0/timeline").get_json()
  assert tl["memory"]["bytes"] == [300, 800, 300, 400], "the records before the damage are all there"


def test_many_events_are_thinned_keeping_every_peak():
  n = memory.MAX_POINTS * 5
  ts = [i * 1e-3 for i in range(n)]
  used = [(i * 7919) % 1000 for i in range(n)]
  used[12345] = 10 ** 6
  kt, ku = memory._thin(ts, used)
  assert len(kt) <= memory.MAX_POINTS and kt == sorted(kt)
  assert max(ku) == 10 ** 6 and kt[ku.index(10 ** 6)] == ts[12345]
  assert ku[-1] == used[-1], "the level at the end is kept"
  json.dumps(kt)
