"""Issue 31, memory: the reader decodes a frame's records as they are consumed (never a frame's worth at once), list
fields are bounded by the schema, and the viewer's rewrite views are bounded by their estimated bytes."""
from __future__ import annotations

import gc
import itertools
import json
import os
import subprocess
import sys
import tracemalloc
import zlib

import pytest
from support import hostile_traces as H

from viz_server import caches
from viz_server.store import TraceStore
from viz_server.views import VIEW_CACHE_BYTES, Views
from vztrace import format as fmt
from vztrace.format import FRAME_HEADER, FRAME_MAGIC, MAX_SHAPE_DIMS, MAX_TIMES, RECORD_LEN
from vztrace.reader import INFLATE_WHOLE, INFLATE_WINDOW, TraceReader
from vztrace.writer import TraceWriter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _raw_len(path) -> list[int]:
  """The raw length of each frame of a trace file."""
  data, pos, out = path.read_bytes(), 12, []
  while pos < len(data):
    _, plen, _, rlen = FRAME_HEADER.unpack_from(data, pos)
    out.append(rlen)
    pos += FRAME_HEADER.size + plen
  return out


# a frame inflated whole, and one inflated a window at a time: 80,000 records (38 raw bytes each) are 3 MB raw, more
# than the peak bound below, so a reader that held the frame's inflated bytes while iterating would still fail it
@pytest.mark.parametrize("records", [20_000, 80_000])
def test_a_frame_is_decoded_as_it_is_consumed(tmp_path, records):
  path = H.big_frame(tmp_path / "f.vztrace", records)
  assert (_raw_len(path)[1] > INFLATE_WHOLE) == (records > 50_000) and path.stat().st_size < 200 << 10
  assert records < 50_000 or _raw_len(path)[1] > 2 * INFLATE_WHOLE + 4 * INFLATE_WINDOW
  r = TraceReader(path)
  it = iter(r)
  assert [next(it)["t"], next(it)["t"]] == ["meta", "error"]
  assert r.records == 2  # records decoded at once: was the whole frame's (300,001), 1.08 GB for 3M
  gc.collect()
  tracemalloc.start()
  try:
    n = sum(1 for _ in it)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert n == records and r.complete and not r.damaged and r.frames == 3
  # a window of raw bytes and one record: a frame's worth of dicts was ~130 MB here
  assert peak < 2 * INFLATE_WHOLE + 4 * INFLATE_WINDOW, peak


def test_a_streamed_frame_reads_what_was_written(tmp_path):
  sizes = [0, 5, INFLATE_WINDOW - 40, INFLATE_WINDOW + 3, 3 * INFLATE_WINDOW, 17, 2 * INFLATE_WHOLE, 1, 300]
  recs = [{"t": "error", "ctx": i, "text": "ab{[" * (s // 4)} for i, s in enumerate(sizes * 3)]
  path = H.write(tmp_path / "s.vztrace", [[H.meta()], recs, [H.END]])
  assert _raw_len(path)[1] > INFLATE_WHOLE
  r = TraceReader(path)
  assert list(r) == [H.meta(), *recs, H.END] and not r.damaged and r.frames == 3
  p = tmp_path / "w.vztrace"  # the writer gives a record bigger than its frame target a frame of its own
  with TraceWriter(p) as w:
    w.write(H.meta())
    w.write(big := {"t": "source", "ctx": 0, "kind": "llvm_ir", "text": "%x = add\n" * 400_000, "compile_s": 0.1})
    w.write(H.END)
  assert max(_raw_len(p)) > INFLATE_WHOLE and list(TraceReader(p)) == [H.meta(), big, H.END]


def test_damage_in_a_streamed_frame_keeps_the_records_before_it(tmp_path):
  good = {"t": "error", "ctx": None, "text": "x"}
  recs: list = [good] * 100_000 + ['{"t":"error","ctx":"bad","text":"x"}'] + [good] * 1000
  path = H.write(tmp_path / "d.vztrace", [[H.meta()], recs, [H.END]])
  assert _raw_len(path)[1] > INFLATE_WHOLE
  r = TraceReader(path)
  assert sum(1 for _ in r) == 100_001 and r.damaged and r.stopped_record == 100_001 and r.frames == 1
  assert "record 100000 of frame 1" in r.reason and r.stopped_at == r.offset


def test_a_streamed_frame_whose_length_lies_gives_nothing(tmp_path):
  raw = b"".join(RECORD_LEN.pack(len(t)) + t for t in [b'{"t":"end","ts":1}'] * 100_000)
  payload = zlib.compress(raw)
  for rlen in (len(raw) - 1, len(raw) + 1):
    bad = FRAME_HEADER.pack(FRAME_MAGIC, len(payload), zlib.crc32(payload), rlen) + payload
    path = H.write(tmp_path / "l.vztrace", [[H.meta()]])
    with open(path, "ab") as f:
      f.write(bad)
    r = TraceReader(path)
    assert list(r) == [H.meta()] and r.damaged and f"header says {rlen}" in r.reason and r.stopped_record == 1


def test_a_consumer_that_stops_in_a_frame_gets_the_rest_next(tmp_path):
  path = H.big_frame(tmp_path / "f.vztrace", 40_000, "t")
  assert _raw_len(path)[1] > INFLATE_WHOLE  # (a frame inflated a window at a time, the consumer stopping in it)
  everything = list(TraceReader(path))
  r = TraceReader(path)
  it = r.read_to_end()
  first = list(itertools.islice(it, 1000))
  it.close()
  assert first + r.poll(max_records=10) + list(r) == everything and r.complete


@pytest.mark.parametrize("field,bound", [("shape", MAX_SHAPE_DIMS), ("colors", MAX_SHAPE_DIMS),
                                         ("times", MAX_TIMES)])
def test_a_long_list_field_is_damage(tmp_path, field, bound):
  path = H.long_lists(tmp_path / "l.vztrace", field)
  assert path.stat().st_size < 40 << 10
  r = TraceReader(path)
  got = list(r)
  assert [x["t"] for x in got] == ["meta", "ctx_begin", "ctx_begin"] and r.damaged
  assert f"field {field!r}" in r.reason and f"has 1,048,576 elements, more than {bound:,}" in r.reason
  (tr,) = TraceStore().add_path(path)  # the viewer keeps the records before it, as for any damage
  assert tr.status == "damaged" and len(tr.contexts) == 2 and not tr.runs


def test_a_beam_opt_with_many_fields_is_damage(tmp_path):
  beam = {"t": "beam", "ctx": 0, "round": 0, "opts": [["UPCAST", 0, 4] + [0] * 100], "chosen": True}
  path = H.write(tmp_path / "b.vztrace", [[H.meta(), H.ctx(0)], [beam], [H.END]])
  r = TraceReader(path)
  assert len(list(r)) == 2 and r.damaged and "has 103 elements, more than 8" in r.reason


def test_the_writer_clips_lists_to_their_bounds(tmp_path):
  p = tmp_path / "c.vztrace"
  run = {"t": "run", "ctx": 0, "kname": "k", "times": [1e-3] * 5000, "min": 1e-3, "median": 1e-3, "flops": 1,
         "bytes": 1, "gflops": 1, "gbs": 1}
  opt = {"t": "opt", "ctx": 0, "op": "UPCAST", "axis": 0, "arg": 4, "ok": True, "reason": None,
         "shape": list(range(300)), "colors": ["blue"] * 300, "kname": "k"}
  with TraceWriter(p, validate=True) as w:
    for rec in (H.meta(), run, opt, H.END):
      w.write(rec)
  r = TraceReader(p)
  got = list(r)
  assert not r.damaged and len(got) == 4 and len(run["times"]) == 5000  # (the record given is left as it was)
  assert got[1]["times"] == [1e-3] * MAX_TIMES and got[2]["shape"] == list(range(MAX_SHAPE_DIMS))
  assert got[2]["colors"] == ["blue"] * MAX_SHAPE_DIMS and fmt.clip_lists(H.END) is H.END


def _open_all(views: Views, tr, until: int | None = None, held: list[int] | None = None) -> list:
  """Open the first `until` rewrites, laying out steps 0 and 1 and answering step 1 (held: what the views and the
  caches hold after each get, when the budget was looked at)."""
  opened = []
  for rw in list(tr.rewrites.values())[:until]:
    v = views.get(tr, rw)
    if held is not None:
      held.append(views.held_bytes() + caches.held_bytes())
    v.layout(0)
    v.layout(1)
    v.graph_json(1, compact=True)
    opened.append(v)
  return opened


def test_the_views_and_their_caches_hold_one_budget(tmp_path, monkeypatch):
  # 8 rewrites: more than the budget's views, fewer than MAX_VIEWS (a bound on their number alone holds all 8); the
  # layouts and answers cached for the views count against the same budget (they were three budgets, 320 MB in all)
  monkeypatch.setattr(caches, "LAYOUTS", caches._LayoutCache(caches.LAYOUT_CACHE_NODES))
  monkeypatch.setattr(caches, "ANSWERS", caches.answer_cache())
  (tr,) = TraceStore().add_path(H.many_rewrites(tmp_path / "m.vztrace", 8, 2000))
  one = _open_all(Views(None, prefetch=0), tr, 1)[0].est_bytes()  # type: ignore[arg-type]
  budget, held = 5 * one, []
  views = Views(None, prefetch=0, max_bytes=budget)  # type: ignore[arg-type]
  opened = _open_all(views, tr, held=held)
  views.get(tr, list(tr.rewrites.values())[-1])  # (a view grows as it is laid out: each get looks again)
  held.append(views.held_bytes() + caches.held_bytes())
  assert caches.held_bytes() > one // 2  # (the caches hold something worth counting)
  assert max(held) <= budget and 2 <= len(views) < 5  # was all 8 (only their number was bounded), then 5 (the views')
  assert views.get(tr, list(tr.rewrites.values())[-1]) is opened[-1]  # the most recent ones stay
  big = Views(None, prefetch=0, max_bytes=one // 2)  # type: ignore[arg-type]
  _open_all(big, tr, 3)
  assert len(big) == 1  # the view being looked at stays, whatever its size


def test_a_views_estimate_is_close_to_what_it_holds(tmp_path):
  (tr,) = TraceStore().add_path(H.many_rewrites(tmp_path / "m.vztrace", 2, 3000))
  views = Views(None, prefetch=0)  # type: ignore[arg-type]
  gc.collect()
  tracemalloc.start()
  try:
    before = tracemalloc.get_traced_memory()[0]
    [v] = _open_all(views, tr, 1)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
  finally:
    tracemalloc.stop()
  assert 0.5 < v.est_bytes() / held < 2, (v.est_bytes(), held)


def test_the_views_budget_default_and_setting():
  assert VIEW_CACHE_BYTES == 128 << 20 or "TINYVIZ_VIEW_CACHE_MB" in os.environ
  code = "import viz_server.views as v; print(v.VIEW_CACHE_BYTES)"
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "TINYVIZ_VIEW_CACHE_MB": "8"})
  assert out.returncode == 0, out.stderr
  assert json.loads(out.stdout) == 8 << 20
