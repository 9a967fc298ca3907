"""The trace file format: writer, reader, schema, damage handling, live tailing, fuzzing."""
from __future__ import annotations

import io
import json
import os
import re
import struct
import subprocess
import sys
import textwrap
import threading
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.proc_helpers import open_gate, read_until, stop_writer
from support.trace_samples import BATCH, BATCH_RECORDS, SAMPLES, batch

from vztrace import format as fmt
from vztrace import reader as reader_mod
from vztrace import writer as writer_mod
from vztrace.format import (
  FRAME_HEADER,
  FRAME_MAGIC,
  HEADER,
  MAGIC,
  RECORDS,
  TraceFormatError,
  pack_column,
  unpack_column,
  validate_record,
)
from vztrace.reader import BatchMatches, BatchNodes, TraceReader
from vztrace.writer import TraceWriter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))







def expanded(recs: list[dict]) -> list[dict]:
  """What a reader yields for recs (a batch becomes its records)."""
  return [r for rec in recs for r in (BATCH_RECORDS if rec is BATCH else [rec])]


def write_trace(path, batches: list[list[dict]]) -> list[int]:
  """Write each batch as one flush; return the file size after the header and after each flush (frame ends)."""
  ends = [HEADER.size]
  with TraceWriter(path, flush_interval=1e9, validate=True) as w:
    for batch in batches:
      for rec in batch:
        w.write(rec)
      w.flush()
      ends.append(os.path.getsize(path))
  return ends


def frame(raw: bytes, *, crc: int | None = None, raw_len: int | None = None, payload: bytes | None = None) -> bytes:
  """A hand-built frame (for damage the writer never produces)."""
  payload = zlib.compress(raw) if payload is None else payload
  return FRAME_HEADER.pack(FRAME_MAGIC, len(payload), zlib.crc32(payload) if crc is None else crc,
                           len(raw) if raw_len is None else raw_len) + payload


def rec_bytes(*items: bytes | dict) -> bytes:
  out = b""
  for it in items:
    data = it if isinstance(it, bytes) else json.dumps(it).encode()
    out += len(data).to_bytes(4, "little") + data
  return out


def header(major: int = 1, minor: int = 0) -> bytes:
  return HEADER.pack(MAGIC, major, minor)


def read_bytes(data: bytes) -> tuple[list[dict], TraceReader]:
  r = TraceReader(io.BytesIO(data))
  return list(r), r


# ---- round trip and schema
def test_round_trip_every_record_type(tmp_path):
  assert set(SAMPLES) == set(RECORDS), "a record type without a sample"
  p = tmp_path / "deep" / "dir" / "t.vztrace"  # parent dirs are created
  write_trace(p, [list(SAMPLES.values())[:5], list(SAMPLES.values())[5:]])
  with TraceReader(p) as r:
    got = list(r)
  assert got == expanded(list(SAMPLES.values()))
  assert (r.damaged, r.complete, r.frames, r.records, r.skipped_unknown) == (False, True, 2, len(got), 0)
  assert r.offset == os.path.getsize(p) and r.version == fmt.VERSION
  assert p.read_bytes()[:12] == b"VZTRACE\0" + struct.pack("<HH", *fmt.VERSION)


@pytest.mark.parametrize("t", sorted(RECORDS))
def test_every_required_field_is_checked(t):
  required = RECORDS[t][0]
  assert validate_record(SAMPLES[t]) is True
  for key in required:
    rec = {k: v for k, v in SAMPLES[t].items() if k != key}
    with pytest.raises(TraceFormatError, match=repr(key)):
      validate_record(rec)
    bad = dict(SAMPLES[t], **{key: {"not": "this"}})  # no field accepts an object except `any` (and recs items)
    if required[key] != "any":
      with pytest.raises(TraceFormatError, match="must be"):
        validate_record(bad)


@pytest.mark.parametrize("rec,msg", [
  ([1, 2], "not an object"),
  ({"id": 1}, "'t'"),
  ({"t": 5}, "'t'"),
  ({**SAMPLES["node"], "id": True}, "must be int"),  # bool is not an int
  ({**SAMPLES["node"], "id": 1.0}, "must be int"),
  ({**SAMPLES["node"], "src": [1, "2"]}, "list\\[int\\]"),
  ({**SAMPLES["match"], "after": "x"}, "int\\?"),
  ({**SAMPLES["ctx_end"], "error": 3}, "error"),
  ({**SAMPLES["run"], "times": [1.0, "inf"]}, "list\\[num\\]"),
])
def test_validate_record_rejects(rec, msg):
  with pytest.raises(TraceFormatError, match=msg) as e:
    validate_record(rec)
  assert isinstance(e.value, ValueError) and e.value.reason and e.value.offset is None


def test_validate_record_accepts_nulls_and_unknown():
  assert validate_record({**SAMPLES["match"], "after": None, "error": "KeyError: x"})
  assert validate_record({**SAMPLES["run"], "gflops": None, "times": [None, 1]})  # numbers may be null
  assert validate_record({**SAMPLES["opt"], "shape": [4, "n"], "arg": [1, [2]]})
  assert validate_record({"t": "future_thing", "x": 1}) is False


def test_non_finite_floats_are_written_as_null(tmp_path):
  p = tmp_path / "t.vztrace"
  inf, nan = float("inf"), float("nan")
  run = {**SAMPLES["run"], "times": [inf, 1.0], "min": -inf, "median": nan, "gflops": inf}
  with TraceWriter(p) as w:
    w.write(run)
    w.write({**SAMPLES["opt"], "arg": (1, nan)})
  got = list(TraceReader(p))
  assert got[0]["times"] == [None, 1.0] and got[0]["min"] is None and got[0]["median"] is None
  assert got[0]["gflops"] is None and got[0]["kname"] == "r_4"
  assert got[1]["arg"] == [1, None]


def test_writer_coerces_odd_values(tmp_path):
  np = pytest.importorskip("numpy")

  class Thing:
    def __str__(self) -> str:
      return "thing!"

  cyc: list = []
  cyc.append(cyc)
  p = tmp_path / "t.vztrace"
  with TraceWriter(p) as w:
    w.write({**SAMPLES["node"], "id": np.int64(7), "src": (np.int32(1),), "arg": Thing()})
    w.write({"t": "misc", "keys": {1: {2, 3}}, "cyc": cyc})
    w.write(SAMPLES["end"])
  got = list(r := TraceReader(p))
  assert got[0] == {**SAMPLES["node"], "id": 7, "src": [1], "arg": "thing!"}
  assert got[1] == SAMPLES["end"] and r.skipped_unknown == 1 and not r.damaged


# ---- flush policy
def test_write_is_batched_until_flush(tmp_path):
  p = tmp_path / "t.vztrace"
  w = TraceWriter(p, flush_interval=1e9)
  assert os.path.getsize(p) == HEADER.size  # the header is on disk at once
  for i in range(10):
    w.write({**SAMPLES["node"], "id": i})
  assert os.path.getsize(p) == HEADER.size
  w.flush()
  w.flush()  # an empty flush writes no frame
  assert w.frames == 1 and os.path.getsize(p) == w.bytes
  w.close()
  w.close()
  with pytest.raises(ValueError):
    w.write(SAMPLES["end"])


def test_auto_flush_by_time_and_size(tmp_path, monkeypatch):
  p = tmp_path / "t.vztrace"
  with TraceWriter(p, flush_interval=0.0) as w:
    for i in range(writer_mod.CHECK_EVERY):
      w.write({**SAMPLES["node"], "id": i})
    assert w.frames == 1  # interval passed: flushed on the CHECK_EVERY-th write
  monkeypatch.setattr(writer_mod, "MAX_BATCH", 2 * writer_mod.CHECK_EVERY)
  with TraceWriter(p, flush_interval=1e9) as w:
    for i in range(2 * writer_mod.CHECK_EVERY - 1):
      w.write({**SAMPLES["node"], "id": i})
    assert w.frames == 0
    w.write(SAMPLES["end"])
    assert w.frames == 1
    w.write(SAMPLES["end"])
    w.flush_if_due()
    assert w.frames == 1


def test_background_flush_of_an_idle_writer(tmp_path):
  p = tmp_path / "t.vztrace"
  flushed = threading.Event()
  with TraceWriter(p, flush_interval=0.02, background=True) as w:
    w.on_flush = flushed.set
    w.write(SAMPLES["meta"])
    assert flushed.wait(120), "the background thread never flushed"
    assert TraceReader(p).poll() == [SAMPLES["meta"]]


def test_large_batches_split_into_frames(tmp_path, monkeypatch):
  p = tmp_path / "t.vztrace"
  text = "x" * 1000
  recs = [{**SAMPLES["source"], "text": text + str(i)} for i in range(3000)]  # ~3 MB raw
  with TraceWriter(p, flush_interval=1e9) as w:
    for rec in recs:
      w.write(rec)
  got = list(r := TraceReader(p))
  assert got == recs and r.frames >= 3
  monkeypatch.setattr(writer_mod, "MAX_RAW_LEN", 5000)
  with TraceWriter(p) as w:
    w.write({**SAMPLES["source"], "text": "y" * 6000})
    w.write(SAMPLES["end"])
  got = list(TraceReader(p))
  assert got[0]["t"] == "error" and "dropped" in got[0]["text"] and got[1] == SAMPLES["end"]


def test_forked_child_does_not_write(tmp_path):
  p = tmp_path / "t.vztrace"
  with TraceWriter(p) as w:
    w.write(SAMPLES["meta"])
    w._pid = -1  # what a forked child sees: its pid differs from the opener's
    w.flush()
  assert os.path.getsize(p) == HEADER.size


def test_new_writer_replaces_file_but_not_an_open_readers_view(tmp_path):
  p = tmp_path / "t.vztrace"
  write_trace(p, [[SAMPLES["meta"], SAMPLES["end"]]])
  old = TraceReader(p)
  write_trace(p, [[SAMPLES["node"]]])
  assert list(old) == [SAMPLES["meta"], SAMPLES["end"]]
  assert list(TraceReader(p)) == [SAMPLES["node"]]


# ---- damage
@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> tuple[bytes, list[int], list[list[dict]]]:
  batches = [[SAMPLES["meta"], SAMPLES["ctx_begin"]], [SAMPLES["node"]], [SAMPLES["match"], SAMPLES["run"]],
             [SAMPLES["end"]]]
  p = tmp_path_factory.mktemp("small") / "t.vztrace"
  ends = write_trace(p, batches)
  return p.read_bytes(), ends, batches


def test_truncation_at_every_offset(small_trace):
  data, ends, batches = small_trace
  assert len(ends) == 5 and ends[-1] == len(data)
  for cut in range(len(data) + 1):
    part = data[:cut]
    if cut < HEADER.size:
      with pytest.raises(TraceFormatError, match="too short"):
        read_bytes(part)
      assert TraceReader(io.BytesIO(part)).poll() == []  # live: the header is not there yet
      continue
    whole = sum(1 for e in ends if e <= cut) - 1  # complete frames before the cut
    expect = [rec for b in batches[:whole] for rec in b]
    got, r = read_bytes(part)
    assert got == expect, cut
    at_boundary = cut in ends
    assert r.damaged == (not at_boundary), cut
    if not at_boundary:
      assert r.stopped_at == ends[whole] and "truncated" in r.reason
      assert r.stopped_record == len(expect)
    live = TraceReader(io.BytesIO(part))
    assert live.poll() == expect and not live.damaged, cut  # a partial frame is "not yet", not damage
    assert r.complete == (cut == len(data))


def test_every_bit_flip_is_detected(small_trace):
  data, ends, batches = small_trace
  records = [rec for b in batches for rec in b]
  for pos in range(len(data)):
    for bit in range(8):
      bad = bytearray(data)
      bad[pos] ^= 1 << bit
      if pos < HEADER.size:
        if pos in (10, 11):  # the minor version: any minor of major 1 is readable
          assert read_bytes(bytes(bad))[0] == records
        else:
          with pytest.raises(TraceFormatError):
            read_bytes(bytes(bad))
        continue
      got, r = read_bytes(bytes(bad))
      assert r.damaged, (pos, bit)
      frame_no = max(i for i, e in enumerate(ends) if e <= pos)
      assert got == [rec for b in batches[:frame_no] for rec in b]
      assert r.stopped_at == ends[frame_no]


def test_crc_mismatch_is_reported():
  data = header() + frame(rec_bytes(SAMPLES["meta"])) + frame(rec_bytes(SAMPLES["node"]), crc=123)
  got, r = read_bytes(data)
  assert got == [SAMPLES["meta"]] and r.damaged and "crc32" in r.reason
  assert r.stopped_at == len(data) - len(frame(rec_bytes(SAMPLES["node"]))) and r.stopped_record == 1


END1 = {"t": "end", "ts": 1}


@pytest.mark.parametrize("bad_frame,reason,kept", [
  (frame(rec_bytes(b"{not json")), "record 0 of frame 1: bad JSON", []),
  (frame(rec_bytes(END1, b'{"t":"run","x":NaN}')), "record 1 of frame 1: bad JSON", [END1]),
  (frame(rec_bytes(b'{"t":"end","ts":1e999}')), "out of range", []),
  (frame(rec_bytes(b'{"t":"end","ts":1}\xff')), "bad JSON", []),
  (frame(rec_bytes(b"[" * 100000 + b"]" * 100000)), "bad JSON", []),
  (frame(rec_bytes(END1) + b"\x01\x00"), "record 1 of frame 1: length cut off", [END1]),
  (frame(rec_bytes(END1) + b"\xff\x00\x00\x00{}"), "overruns", [END1]),
  (frame(b"abc", payload=b"this is not zlib"), "zlib", []),
  (frame(b"abc", raw_len=2), "header says 2", []),
  (frame(b"abc", raw_len=10), "header says 10", []),
  (frame(b"abc" * 1000, raw_len=0), "header says 0", []),
  (frame(b"abc", payload=zlib.compress(b"abc") + b"junk"), "header says", []),
  (b"VZF2" + frame(b"")[4:], "frame magic", []),
  (FRAME_HEADER.pack(FRAME_MAGIC, 1 << 31, 0, 0), "over the limit", []),
  (frame(rec_bytes(SAMPLES["node"], {"t": "node", "id": "x"})), "record 1 of frame 1: .*'node' record",
   [SAMPLES["node"]]),
  (frame(rec_bytes(b"[1]")), "not an object", []),
])
def test_damage_stops_with_a_reason(bad_frame, reason, kept):
  first = frame(rec_bytes(SAMPLES["meta"]))
  got, r = read_bytes(header() + first + bad_frame + first)
  assert got == [SAMPLES["meta"], *kept] and r.stopped_record == 1 + len(kept)  # a frame's earlier records are kept
  assert r.damaged and r.stopped_at == HEADER.size + len(first) and r.frames == 1
  assert re.search(reason, r.reason), r.reason
  assert list(r) == [] and r.poll() == []  # the reader stays stopped


def test_unknown_record_types_are_skipped(tmp_path):
  p = tmp_path / "t.vztrace"
  write_trace(p, [[SAMPLES["meta"], {"t": "gpu_counter", "v": 1}, {"t": "x"}], [SAMPLES["end"]]])
  got = list(r := TraceReader(p))
  assert got == [SAMPLES["meta"], SAMPLES["end"]] and r.skipped_unknown == 2 and not r.damaged and r.complete


@pytest.mark.parametrize("data,msg", [
  (b"", "too short"),
  (b"VZTRACE", "too short"),
  (b"PK\x03\x04 a zip file, not a trace", "not a trace file"),
  (b"\x89PNG", "not a trace file"),
  (header(3, 0) + frame(rec_bytes(SAMPLES["end"])), "version 3.0 is newer"),
  (header(0, 9), "version 0.9 is older"),
])
def test_non_traces_raise(data, msg):
  with pytest.raises(TraceFormatError, match=msg) as e:
    read_bytes(data)
  assert e.value.offset is not None


def test_bad_magic_raises_at_open_and_poll_raises_too(tmp_path):
  p = tmp_path / "x.txt"
  p.write_bytes(b"hello world, long enough")
  with pytest.raises(TraceFormatError, match="not a trace"):
    TraceReader(p)
  p.write_bytes(b"VZT")  # a prefix of the magic: maybe a trace being created
  r = TraceReader(p)
  assert r.poll() == []
  with open(p, "ab") as f:
    f.write(header(3)[3:])
  with pytest.raises(TraceFormatError, match="newer"):
    r.poll()


def test_minor_version_is_accepted():
  got, r = read_bytes(header(2, 7) + frame(rec_bytes(SAMPLES["end"])))
  assert got == [SAMPLES["end"]] and r.version == (2, 7)


def test_version_1_files_are_read():
  v1 = [SAMPLES["meta"], SAMPLES["node"], SAMPLES["match"], SAMPLES["end"]]
  got, r = read_bytes(header(1, 0) + frame(rec_bytes(*v1[:2])) + frame(rec_bytes(*v1[2:])))
  assert got == v1 and r.version == (1, 0) and not r.damaged and r.complete


# ---- batch records
def test_columns_round_trip():
  for kind, values in (("u32s", [0, 1, 2**32 - 1, 7]), ("i64s", [-(2**63), 0, 2**63 - 1]), ("u32s", [])):
    assert unpack_column(pack_column(values, kind).decode(), kind) == values
  with pytest.raises(OverflowError):
    pack_column([2**32])
  for n in (5, 6, 7):
    text = pack_column(list(range(n))).decode()
    assert unpack_column(text, limit=6 if n < 7 else 7) == list(range(n))
    with pytest.raises(ValueError, match="more than 4 values"):
      unpack_column(text, limit=4)
  for bad in ("AAA", "AA!A", "AAAAAAA=", "\u00e9AAA", "AAAA\n"):  # padding, alphabet, 5 bytes, non-ASCII, whitespace
    with pytest.raises(ValueError):
      unpack_column(bad)


def test_batch_expands_in_order(tmp_path):
  p = tmp_path / "t.vztrace"
  later = batch(3, ["MUL"], [(5, 2, 4, [2, 1])], [(0, 0, 2, 3, 7)], [])  # no records: nodes, then matches
  write_trace(p, [[BATCH], [later, SAMPLES["end"]]])
  got = list(r := TraceReader(p))
  assert got == [*BATCH_RECORDS, {"t": "node", "id": 3, "op": "MUL", "dtype": "int", "arg": "None", "src": [2, 1]},
                 {"t": "match", "rw": 0, "pat": 0, "before": 2, "after": 3, "dt": 7}, SAMPLES["end"]]
  assert r.records == len(got) and not r.damaged and r.complete
  live = TraceReader(p)  # polling keeps the string table across calls
  assert live.poll(max_records=1) == BATCH_RECORDS and live.poll() == got[len(BATCH_RECORDS):]


def test_batch_as_columns_holds_its_records_in_order(tmp_path, monkeypatch):
  monkeypatch.setattr(reader_mod, "COLUMN_RUN", 2)  # runs of at most 2 rows: node 2 alone after nodes 3 and 4
  p = tmp_path / "t.vztrace"
  later = batch(3, ["MUL"], [(5, 2, 4, [2, 1]), (5, 2, 4, [3, 3]), (0, 2, 3, [])],
                [(0, 0, 2, 3, 7), (0, 0, 3, 4, 8), (0, 0, 4, 5, 9)], [])
  write_trace(p, [[BATCH], [later, SAMPLES["end"]]])
  want = list(TraceReader(p))
  for items in (list(TraceReader(p).read_to_end(columns=True)), TraceReader(p).tail(columns=True)):
    items = list(items)
    assert [r for x in items for r in ([x] if type(x) is dict else x.records())] == want
    runs = [(type(x).__name__, len(x)) for x in items if type(x) is not dict]
    assert runs == [("BatchNodes", 2), ("BatchNodes", 1), ("BatchMatches", 1), ("BatchNodes", 2), ("BatchNodes", 1),
                    ("BatchMatches", 2), ("BatchMatches", 1)]
    assert all(type(x) in (dict, BatchNodes, BatchMatches) for x in items)


def test_batch_skips_unknown_records_inside():
  b = batch(0, [], [], [], [(0, 0, {"t": "future_thing", "x": 1}), (0, 0, SAMPLES["end"])])
  got, r = read_bytes(header(2) + frame(rec_bytes(b)))
  assert got == [SAMPLES["end"]] and r.skipped_unknown == 1 and not r.damaged


SITE = {"file": "/home/me/model.py", "line": 7, "function": "forward"}  # a call site (trace 2.7)


@pytest.mark.parametrize("change,reason", [
  ({"op": pack_column([0, 1]).decode()}, "node columns of different lengths"),
  ({"nsrc": pack_column([0, 1, 0]).decode()}, "nsrc does not add up"),
  ({"arg": pack_column([3, 4, 5]).decode()}, "outside the table of 5"),
  ({"src": "not base64!"}, "column 'src': bad base64"),
  ({"dt": pack_column([1], "u32s").decode()}, "column 'dt': 4 bytes"),
  ({"after": pack_column([]).decode()}, "match columns of different lengths"),
  ({"at": pack_column([0, 0, 2, 0]).decode()}, "4 positions for 3 records"),
  ({"at": pack_column([0, 0, 2, 0, 1, 1]).decode()}, "positions go back"),
  ({"at": pack_column([0, 0, 2, 0, 4, 1]).decode()}, "past the nodes"),
  ({"at": pack_column([0, 0, 2, 0, 3, 2]).decode()}, "past the nodes or matches"),
  ({"recs": [SAMPLES["meta"], {"t": "node", "id": "x"}, SAMPLES["end"]]}, "record 1: field 'id' of 'node' record"),
  ({"recs": [SAMPLES["meta"], BATCH, SAMPLES["end"]]}, "record 1 is a 'batch' record"),
  ({"recs": [SAMPLES["meta"], 5, SAMPLES["end"]]}, "'recs' of 'batch' record must be list\\[dict\\]"),
  ({"strs": ["a", 1]}, "'strs' of 'batch' record must be list\\[str\\]"),
  ({"op": pack_column([0] * (fmt.MAX_BATCH_ROWS + 1)).decode()}, "column 'op': more than"),
  ({"sites": [SITE], "site": pack_column([0, 1]).decode()}, "site column of another length"),
  ({"sites": [SITE], "site": pack_column([0, 2, 0]).decode()}, "call site outside the table of 1"),
  ({"site": pack_column([0, 1, 0]).decode()}, "call site outside the table of 0"),
  ({"sites": [{**SITE, "line": "7"}], "site": pack_column([0, 1, 0]).decode()}, "field 'line' of 'batch.sites\\[0\\]'"),
  ({"sites": [{"file": "a.py", "line": 1}]}, "'batch.sites\\[0\\]' record lacks field 'function'"),
])
def test_bad_batch_is_damage(change, reason):
  first = frame(rec_bytes(SAMPLES["meta"]))
  got, r = read_bytes(header(2) + first + frame(rec_bytes(SAMPLES["end"], {**BATCH, **change})) + first)
  assert got == [SAMPLES["meta"], SAMPLES["end"]] and r.damaged and r.stopped_record == 2  # nothing of the batch
  assert re.search("record 1 of frame 1: .*" + reason, r.reason), r.reason


SITE = {"file": "/home/me/model.py", "line": 7, "function": "forward"}


def test_batch_call_sites_name_the_nodes_over_batches():
  """Trace 2.7: a batch's `site` column names each node's entry in the trace's call-site table (0: none), which each
  batch's `sites` extends; the reader's node records carry the site, its column runs the codes and the table."""
  other = {"file": "/home/me/train.py", "line": 30, "function": "<module>"}
  b1 = {**BATCH, "sites": [SITE], "site": pack_column([1, 0, 1]).decode()}
  b2 = {**batch(3, [], [(0, 2, 3, []), (1, 2, 4, [3, 0])], [], []), "sites": [other],
        "site": pack_column([2, 1]).decode()}
  got, r = read_bytes(header(2) + frame(rec_bytes(b1)) + frame(rec_bytes(b2, SAMPLES["end"])))
  assert not r.damaged, r.reason
  sites = {x["id"]: x.get("site") for x in got if x["t"] == "node"}
  assert sites == {0: SITE, 1: None, 2: SITE, 3: other, 4: SITE}
  runs = [x for x in TraceReader(io.BytesIO(header(2) + frame(rec_bytes(b1)) + frame(rec_bytes(b2)))).read_to_end(
    columns=True) if isinstance(x, BatchNodes)]
  assert [c for x in runs for c in x.site] == [1, 0, 1, 2, 1] and runs[-1].sites == [SITE, other]


def test_damaged_batch_leaves_the_string_table_alone():
  # a batch whose strings are fine but whose nodes are not must not shift the codes of the batches after it... which
  # the reader never reads: it stops. What it read before stays, with the table as it was.
  bad = {**BATCH, "nsrc": pack_column([0, 0, 0]).decode()}
  got, r = read_bytes(header(2) + frame(rec_bytes(BATCH)) + frame(rec_bytes(bad)))
  assert got == BATCH_RECORDS and r.damaged and len(r._strs) == len(BATCH["strs"])


# ---- live tailing
def test_poll_on_a_growing_file(tmp_path):
  p = tmp_path / "t.vztrace"
  w = TraceWriter(p, flush_interval=1e9)
  r = TraceReader(p)
  assert r.poll() == []
  w.write(SAMPLES["meta"])
  assert r.poll() == []  # not flushed yet
  w.flush()
  assert r.poll() == [SAMPLES["meta"]]
  assert r.poll() == []
  # a frame that is half on disk is "not yet", then complete
  extra = frame(rec_bytes(SAMPLES["node"], SAMPLES["match"]))
  w.close()
  with open(p, "ab") as f:
    f.write(extra[:7])
    f.flush()
    assert r.poll() == [] and not r.damaged
    f.write(extra[7:30])
    f.flush()
    assert r.poll() == [] and not r.damaged
    f.write(extra[30:])
  assert r.poll() == [SAMPLES["node"], SAMPLES["match"]]
  assert not r.damaged and not r.complete
  # a final read reports a partial trailing frame as truncation
  with open(p, "ab") as f:
    f.write(extra[:20])
  assert list(r) == [] and r.damaged and "truncated" in r.reason


def test_poll_max_records(tmp_path):
  p = tmp_path / "t.vztrace"
  write_trace(p, [[SAMPLES["meta"], SAMPLES["node"]], [SAMPLES["match"]], [SAMPLES["end"]]])
  r = TraceReader(p)
  assert r.poll(max_records=1) == [SAMPLES["meta"], SAMPLES["node"]]  # whole frames
  assert r.poll(max_records=1) == [SAMPLES["match"]]
  assert r.poll() == [SAMPLES["end"]] and r.complete and r.frames == 3


def test_poll_notices_a_file_that_shrank(tmp_path):
  p = tmp_path / "t.vztrace"
  write_trace(p, [[SAMPLES["meta"]]])
  r = TraceReader(p)
  assert r.poll() == [SAMPLES["meta"]]
  with open(p, "r+b") as f:
    f.truncate(20)
  assert r.poll() == [] and r.damaged and "shrank" in r.reason


# argv: path, nodes. The writer writes the first half, flushes it, says so on stdout and waits at a gate the test
# opens once it has read that half, so the reader sees the file grow however the two processes are scheduled
WRITER_SCRIPT = textwrap.dedent("""
  import sys, time
  from support.proc_helpers import wait_at_gate
  from vztrace.writer import TraceWriter
  n = int(sys.argv[2])
  with TraceWriter(sys.argv[1], flush_interval=0.005) as w:
    w.write({"t": "meta", "version": "1.0", "argv": sys.argv, "host": "h", "pid": 1, "python": "3", "started": 0,
             "cwd": "/"})
    for i in range(n):
      w.write({"t": "node", "id": i, "op": "CONST", "dtype": "int", "arg": str(i), "src": []})
      if i == n // 2:
        w.flush()
        print("flushed", flush=True)
        wait_at_gate()
    w.write({"t": "end", "ts": time.time()})
""")


def test_follow_a_subprocess_writer(tmp_path):
  p = tmp_path / "live.vztrace"
  n = 20000
  env = {k: v for k, v in os.environ.items() if k not in ("VIZ", "VIZ_TRACE")}
  env["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])
  proc = subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(p), str(n)], cwd=ROOT, env=env,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)
  try:
    read_until(proc.stdout, "flushed", "the writer to flush the first half")
    r = TraceReader(p)
    half = r.poll()  # exactly what was flushed before the gate: the writer waits there
    assert [g["t"] for g in half] == ["meta"] + ["node"] * (n // 2 + 1) and not r.complete
    open_gate(proc)
    assert proc.wait(120) == 0
    rest = r.poll()
  finally:
    stop_writer(proc)
    proc.stdout.close()
  assert r.complete and not r.damaged and rest[-1]["t"] == "end"
  assert [g["id"] for g in half + rest if g["t"] == "node"] == list(range(n))


def test_follow_in_process(tmp_path):
  p = tmp_path / "t.vztrace"
  write_trace(p, [[SAMPLES["meta"]], [SAMPLES["end"]]])
  assert list(TraceReader(p).follow(interval=0.001)) == [SAMPLES["meta"], SAMPLES["end"]]  # returns at `end`
  write_trace(p, [[SAMPLES["meta"]]])  # no end record: returns once idle_timeout passes with nothing new
  assert list(TraceReader(p).follow(interval=0.001, idle_timeout=0.05)) == [SAMPLES["meta"]]


# ---- fuzzing: only TraceFormatError may escape, and what is read is always a prefix of what was written
FUZZ = settings(max_examples=2000, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


def _read_everything(data: bytes) -> list[dict] | None:
  try:
    live = TraceReader(io.BytesIO(data))
    live_got = live.poll()
  except TraceFormatError:
    live_got = None
  try:
    got, r = read_bytes(data)
  except TraceFormatError as e:
    assert isinstance(e.reason, str) and e.offset is not None
    return None
  assert live_got is not None and got[:len(live_got)] == live_got  # poll never reads past what a full read does
  assert r.damaged == (r.reason is not None) == (r.stopped_at is not None)
  return got


@FUZZ
@given(st.one_of(st.binary(max_size=300), st.binary(max_size=300).map(lambda b: header() + b),
                 st.binary(max_size=300).map(lambda b: header() + FRAME_MAGIC + b)))
def test_fuzz_random_bytes(data):
  _read_everything(data)


@pytest.fixture(scope="module")
def fuzz_base(tmp_path_factory) -> tuple[bytes, list[dict]]:
  batches = [[SAMPLES["meta"], SAMPLES["pattern"]], [SAMPLES["node"], {"t": "zzz"}, SAMPLES["match"]],
             list(SAMPLES.values())[3:]]
  p = tmp_path_factory.mktemp("fuzz") / "t.vztrace"
  write_trace(p, batches)
  return p.read_bytes(), expanded([rec for b in batches for rec in b if rec["t"] != "zzz"])


_mutation = st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]), st.integers(0, 10**6),
                      st.binary(min_size=1, max_size=8))


@FUZZ
@given(st.lists(_mutation, min_size=1, max_size=4))
def test_fuzz_mutated_valid_file(fuzz_base, mutations):
  data, records = fuzz_base
  buf = bytearray(data)
  for kind, pos, blob in mutations:
    pos %= len(buf) + 1
    if kind == "flip" and pos < len(buf):
      buf[pos] ^= blob[0] or 1
    elif kind == "set":
      buf[pos:pos + len(blob)] = blob
    elif kind == "insert":
      buf[pos:pos] = blob
    elif kind == "delete":
      del buf[pos:pos + len(blob)]
    else:
      del buf[pos:]
  got = _read_everything(bytes(buf))
  if got is not None:
    assert got == records[:len(got)]


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                     max_leaves=8)


@settings(max_examples=500, derandomize=True, deadline=None, database=None)
@given(st.sampled_from(sorted(RECORDS) + ["other"]), st.dictionaries(st.sampled_from(
  sorted({k for req, opt in RECORDS.values() for k in (*req, *opt)})), _json, max_size=8))
def test_fuzz_records_through_writer(tmp_path_factory, t, fields):
  p = tmp_path_factory.getbasetemp() / "recfuzz.vztrace"
  rec = {**fields, "t": t}
  with TraceWriter(p) as w:
    w.write(rec)
    w.write(SAMPLES["end"])
  got = list(r := TraceReader(p))
  try:
    known = validate_record(json.loads(json.dumps(writer_mod._sanitize(rec))))
  except TraceFormatError:
    assert r.damaged and got == [] and r.stopped_record == 0
  else:
    assert not r.damaged and got[-1] == SAMPLES["end"] and len(got) == 1 + known


def test_format_constants():
  assert HEADER.size == 12 and FRAME_HEADER.size == 16 and fmt.VERSION[0] == 2 and fmt.READ_MAJORS == (1, 2)


_ints = st.lists(st.integers(0, 6), max_size=6)
_column = st.one_of(_ints.map(lambda v: pack_column(v).decode()), st.text(max_size=8),
                    st.binary(max_size=9).map(lambda b: __import__("base64").b64encode(b).decode()))


@settings(max_examples=400, derandomize=True, deadline=None, database=None)
@given(st.fixed_dictionaries({k: _column for k in ("op", "dtype", "arg", "nsrc", "src", "rw", "pat", "before",
                                                   "after", "dt", "at")}),
       st.lists(st.sampled_from([SAMPLES["end"], SAMPLES["node"], {"t": "zzz"}, {"t": "node"}, BATCH]), max_size=3),
       st.lists(st.text(max_size=3), max_size=4), st.integers(-2, 3))
def test_fuzz_batch_contents(cols, recs, strs, first):
  b = {"t": "batch", "id": first, "strs": strs, **cols, "recs": recs}
  got, r = read_bytes(header(2) + frame(rec_bytes(SAMPLES["meta"], b)))  # only TraceFormatError may escape
  if r.damaged:
    assert got == [SAMPLES["meta"]] and "record 1 of frame 0: 'batch' record" in r.reason
  else:
    n, m = len(unpack_column(cols["op"])), len(unpack_column(cols["dt"], "i64s"))
    known = sum(rec["t"] != "zzz" for rec in recs)
    assert len(got) == 1 + n + m + known and [x for x in got if x["t"] != "node" and x["t"] != "match"] == \
      [SAMPLES["meta"]] + [x for x in recs if x["t"] not in ("zzz", "node")]
