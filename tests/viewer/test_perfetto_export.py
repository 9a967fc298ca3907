"""`export TRACE --perfetto -o run.json` (viz_server/perfetto.py): a recorded program's timeline as Chrome trace-event
JSON. Checked against the trace itself: the format Perfetto and chrome://tracing read, nesting as the viewer's
timeline (viz_server/timeline.py) nests, every kernel run once with its time, one memory counter per device as
vztrace.memory folds the file's mem records; hostile traces cost events bounded by their records; the CLI's exit
codes."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import hostile_traces as ht

from compiler import realize
from compiler.trace.cli import summarize
from viz_server import perfetto, tools
from viz_server.offline import OfflineApi
from vztrace.format import FRAME_HEADER, HEADER
from vztrace.memory import MemoryProfile, event
from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[2]

# softmax of a reduce: a schedule with nested passes, 4 kernels (LLVM compiles under llvm), runs and buffers freed
PROGRAM = """
import numpy as np
from compiler.tensor import Tensor
from compiler.trace import recorder
x = Tensor(np.arange(256, dtype=np.float32).reshape(16, 16))
h = (x * 2 + 1).sum(axis=1).realize()
recorder.RECORDER.writer.flush()  # (a frame ends here whatever the background flush did: the damage test cuts after it)
y = h.softmax().numpy()
del h  # (its buffer is freed while recording, as in one expression)
assert np.isfinite(y).all()
"""
PHASES = {"X": ("name", "cat", "ts", "dur", "pid", "tid", "args"), "M": ("name", "pid", "tid", "args"),
          "C": ("name", "ts", "pid", "args")}
METADATA = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
            "thread_sort_index": "sort_index"}
MAX_METADATA = 4 + 2 * 2 * perfetto.MAX_TRACKS  # the processes' names and order, and each thread's


def record(path: Path, backend: str) -> Path:
  """Run PROGRAM in a fresh interpreter recording to path (VIZ=-1: record, no viewer)."""
  env = {**os.environ, "VIZ": "-1", "VIZ_TRACE": str(path), "BACKEND": backend}
  subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, check=True, timeout=300, capture_output=True)
  return path


def export(trace: Path, out: Path, **kw) -> tuple[dict, dict]:
  """(the JSON document, the counts export returned)."""
  got = perfetto.export(trace, out, **kw)
  return json.loads(out.read_text(encoding="ascii")), got


def records(path: Path) -> list[dict]:
  with TraceReader(path) as r:
    return list(r)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
  """backend -> PROGRAM's trace under it, recorded once for the module."""
  paths: dict[str, Path] = {}

  def get(backend: str) -> Path:
    if backend not in paths:
      paths[backend] = record(tmp_path_factory.mktemp(f"trace-{backend}") / "t.vztrace", backend)
    return paths[backend]
  return get


@pytest.fixture(scope="module", params=["llvm", "interp"])
def real(request, recorded, tmp_path_factory):
  """A recorded program under each backend: its trace, the export, and the viewer's timeline of it."""
  d = tmp_path_factory.mktemp(f"perfetto-{request.param}")
  trace = recorded(request.param)
  doc, got = export(trace, d / "run.json")
  with OfflineApi(trace) as api:
    tl = api.trace_get("timeline")
  return {"backend": request.param, "trace": trace, "doc": doc, "got": got, "tl": tl, "dir": d}


def check_format(doc: dict) -> list[dict]:
  """Assert the Chrome Trace Event Format's JSON object form; returns the events."""
  assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
  assert "displayTimeUnit" not in doc  # (Perfetto reads it as the unit of ts, chrome://tracing as a display unit)
  evs = doc["traceEvents"]
  names: set[tuple] = set()
  used: set[tuple] = set()
  for ev in evs:
    assert ev["ph"] in PHASES, ev
    for k in PHASES[ev["ph"]]:
      assert k in ev, (k, ev)
    assert isinstance(ev["name"], str) and isinstance(ev["args"], dict)
    assert type(ev["pid"]) is int and ("tid" not in ev or type(ev["tid"]) is int)
    for k in ("ts", "dur"):
      if k in ev:
        assert type(ev[k]) in (int, float) and math.isfinite(ev[k]) and 0 <= ev[k] <= perfetto.MAX_NS / 1000, ev
    if ev["ph"] == "M":
      key = METADATA[ev["name"]]
      assert type(ev["args"][key]) is (str if key == "name" else int), ev
      if ev["name"] == "process_name":
        names.add((ev["pid"],))
      elif ev["name"] == "thread_name":
        names.add((ev["pid"], ev["tid"]))
    elif ev["ph"] == "C":
      assert ev["args"] and all(type(v) is int for v in ev["args"].values()), ev
      used.add((ev["pid"],))
    else:
      assert isinstance(ev["cat"], str)
      used |= {(ev["pid"],), (ev["pid"], ev["tid"])}
  assert used <= names, used - names  # M events name every process and thread used
  return evs


def ns(x: float) -> int:
  return round(x * 1000)


def check_nesting(evs: list[dict]) -> dict[tuple, list[dict]]:
  """Assert that the X events of every thread nest properly (in integer ns, as an importer reads them); returns them
  by (pid, tid)."""
  threads: dict[tuple, list[dict]] = {}
  for ev in evs:
    if ev["ph"] == "X":
      threads.setdefault((ev["pid"], ev["tid"]), []).append(ev)
  for spans in threads.values():
    stack: list[int] = []
    for ev in sorted(spans, key=lambda e: (ns(e["ts"]), -ns(e["dur"]))):
      s, e = ns(ev["ts"]), ns(ev["ts"]) + ns(ev["dur"])
      while stack and stack[-1] <= s:
        stack.pop()
      assert not stack or e <= stack[-1], ("overlaps its parent without nesting", ev)
      stack.append(e)
  return threads


def inside(child: dict, parent: dict) -> bool:
  return (child["pid"], child["tid"]) == (parent["pid"], parent["tid"]) and ns(parent["ts"]) <= ns(child["ts"]) \
    and ns(child["ts"]) + ns(child["dur"]) <= ns(parent["ts"]) + ns(parent["dur"])


def test_the_export_has_the_trace_event_format(real):
  evs = check_format(real["doc"])
  other = real["doc"]["otherData"]
  assert other["status"] == "ended" and other["damage"] is None and other["events"] == len(evs)
  assert [e["ph"] for e in evs[:4]] == ["M"] * 4
  host = next(e for e in evs if e["name"] == "process_name" and e["pid"] == perfetto.HOST_PID)
  assert host["args"]["name"].startswith("python -c (pid ")  # the traced program's argv and pid


def test_spans_nest_as_the_timelines_contexts_passes_and_compiles(real):
  evs, tl = real["doc"]["traceEvents"], real["tl"]
  threads = check_nesting(evs)
  # a real trace: the main thread, kernels compiled ahead of their runs (overlapping their siblings: each begins at
  # its optimize) on threads of their own with their passes and compiles, and the runs' thread on the device
  host = sorted(t for t in threads if t[0] == perfetto.HOST_PID)
  assert host[0] == (perfetto.HOST_PID, 1) and len(host) <= 1 + realize.compile_ahead_depth()
  assert len(threads) == len(host) + bool(tl["runs"])
  kinds = {c["id"]: c["kind"] for c in tl["contexts"]}
  for t in host[1:]:
    assert {kinds[e["args"]["ctx"]] for e in threads[t]} == {"kernel"}, "only kernels compiled ahead overlap"
  ctx = {e["args"]["ctx"]: e for e in evs if e["ph"] == "X" and e["cat"] in ("default", "schedule", "kernel")}
  passes = {e["args"]["rewrite"]: e for e in evs if e["ph"] == "X" and e["cat"] == "pass"}
  compiles = [e for e in evs if e["ph"] == "X" and e["cat"] == "compile"]
  # every span of the timeline once, at its time: seconds since t0 (the first context's start) on the viewer's axis
  assert sorted(ctx) == sorted(c["id"] for c in tl["contexts"]) and len(ctx) >= 5
  t0_us = ctx[tl["contexts"][0]["id"]]["ts"]
  assert tl["contexts"][0]["start"] == 0.0
  for c in tl["contexts"]:
    ev = ctx[c["id"]]
    assert ev["name"] == c["name"] and ev["cat"] == c["kind"] and ev["pid"] == perfetto.HOST_PID
    assert abs(ev["ts"] - (t0_us + c["start"] * 1e6)) < 0.01 and abs(ev["dur"] - (c["end"] - c["start"]) * 1e6) < 1.01
    if c["parent"] is not None:  # (in time; on its thread unless it overlaps a sibling)
      p = ctx[c["parent"]]
      assert inside(ev, p) or (ev["tid"] != p["tid"] and inside({**ev, "tid": p["tid"]}, p))
  rw = tl["rewrites"]
  assert sorted(passes) == sorted(rw["id"]) and len(passes) > 10
  for i, rid in enumerate(rw["id"]):
    ev = passes[rid]
    assert ev["name"] == rw["names"][rw["name"][i]] and ev["args"]["matches"] == rw["matches"][i]
    assert abs(ev["ts"] - (t0_us + rw["start"][i] * 1e6)) < 1.01 and abs(ev["dur"] - rw["dur"][i] * 1e6) < 1.01
    assert inside(ev, ctx[rw["ctx"][i]])  # a pass inside its own context, on the same thread
  assert sorted(e["args"]["ctx"] for e in compiles) == sorted(x["ctx"] for x in tl["compiles"])
  assert bool(compiles) == (real["backend"] == "llvm")
  for ev in compiles:
    assert inside(ev, ctx[ev["args"]["ctx"]]) and ev["name"] == f"LLVM compile {ctx[ev['args']['ctx']]['name']}"
  nested = [rid for rid in passes if sum(inside(passes[rid], p) for p in passes.values()) > 1]
  assert nested  # passes a pass ran (the scheduler's "split kernels" holds others) nest inside it


def test_every_kernel_run_appears_once_with_its_duration(real):
  runs = [r for r in records(real["trace"]) if r["t"] == "run"]
  evs = [e for e in real["doc"]["traceEvents"] if e["ph"] == "X" and e["cat"] == "run"]
  want = 4 if real["backend"] == "llvm" else 0  # (the interpreter times no kernel runs)
  assert len(runs) == want and real["got"]["runs"] == want
  assert [(e["name"], e["args"]["ctx"]) for e in sorted(evs, key=lambda e: e["ts"])] == \
    [(r["kname"], r["ctx"]) for r in sorted(runs, key=lambda r: r["ts"])]
  by_ctx = {e["args"]["ctx"]: e for e in evs}
  for r in runs:
    want_us = sum(t for t in r["times"] if t > 0) * 1e6
    assert abs(by_ctx[r["ctx"]]["dur"] - want_us) <= 0.002  # (times in whole ns)
    assert by_ctx[r["ctx"]]["pid"] == perfetto.DEVICE_PID
  zero = real["doc"]["otherData"]["zero_s"]
  for r in runs:  # placed at their recorded start
    assert abs(by_ctx[r["ctx"]]["ts"] - (r["ts"] - zero) * 1e6) < 1


def test_the_memory_counter_is_vztrace_memorys_fold_of_the_files_mem_records(real):
  mem = [event(r, i) for i, r in enumerate(r for r in records(real["trace"]) if r["t"] == "mem")]
  prof = MemoryProfile(mem)
  assert prof.allocs >= 5 and prof.frees >= 2 and not prof.skipped
  evs = [e for e in real["doc"]["traceEvents"] if e["ph"] == "C"]
  assert {e["name"] for e in evs} == {perfetto.memory_track("CPU")}
  assert {e["pid"] for e in evs} == {perfetto.DEVICE_PID}
  assert [e["args"]["bytes"] for e in evs] == prof.used
  zero = real["doc"]["otherData"]["zero_s"]
  assert all(abs(e["ts"] - (t - zero) * 1e6) < 1 for e, t in zip(evs, prof.ts))
  assert real["doc"]["otherData"]["peak_bytes"] == prof.summary()["peak"]["bytes"] == max(prof.used)


def test_each_device_has_its_own_memory_counter_track_as_the_timelines_lanes(tmp_path):
  """CPU and CL buffers interleaved in time: one counter track per device (never one sum of both), each the same fold
  as the viewer's lane of that device (viz_server/memory.py), and the process named after both devices."""
  t = 1.7e9
  recs = [ht.meta(), {**ht.ctx(0), "ts": t}, ht.mem("alloc", 1, 100, ts=t + 1), ht.mem("alloc", 2, 40, ts=t + 2,
          device="CL"), ht.mem("alloc", 3, 10, ts=t + 3), ht.mem("free", 2, 40, ts=t + 4, device="CL"),
          ht.mem("free", 1, 100, ts=t + 5), {"t": "ctx_end", "id": 0, "ts": t + 6}, ht.END]
  trace = ht.write(tmp_path / "d.vztrace", [recs])
  doc, got = export(trace, tmp_path / "d.json")
  evs = check_format(doc)
  tracks: dict[str, list[int]] = {}
  for e in evs:
    if e["ph"] == "C":
      tracks.setdefault(e["name"], []).append(e["args"]["bytes"])
  assert tracks == {perfetto.memory_track("CPU"): [100, 110, 10], perfetto.memory_track("CL"): [40, 0]}
  with OfflineApi(trace) as api:
    tl = api.trace_get("timeline")
  assert [m["device"] for m in tl["memory_devices"]] == ["CL"] and tl["memory_devices"][0]["bytes"] == [40, 0]
  assert tl["memory"]["bytes"] == tracks[perfetto.memory_track("CPU")]
  assert got["peaks"] == {"CPU": 110, "CL": 40} and got["peak_bytes"] == 110 and got["memory_points"] == 5
  assert any(e["name"] == "process_name" and e["args"]["name"] == "devices: CPU, CL" for e in evs)


def test_context_filter_keeps_a_kernel_with_its_passes_compile_and_run(real, tmp_path):
  tl = real["tl"]
  k = next(c for c in tl["contexts"] if c["kind"] == "kernel")
  doc, _ = export(real["trace"], tmp_path / "k.json", names=[k["name"]])
  xs = [e for e in check_format(doc) if e["ph"] == "X"]
  assert {e["args"]["ctx"] for e in xs} == {k["id"]}
  rw = tl["rewrites"]
  want = [("kernel", k["id"])] + [("pass", r) for r, c in zip(rw["id"], rw["ctx"]) if c == k["id"]]
  want += [(what, x["ctx"]) for what in ("compile", "run") for x in tl[what + "s"] if x["ctx"] == k["id"]]
  assert sorted((e["cat"], e["args"].get("rewrite", e["args"]["ctx"])) for e in xs) == sorted(want)
  assert len(want) > (3 if real["backend"] == "llvm" else 0)  # (under llvm: its passes, compile and run)
  with pytest.raises(perfetto.ExportError, match="no context named 'nope'"):
    perfetto.export(real["trace"], tmp_path / "n.json", names=["nope"])


def overlapping(path: Path, n: int = 60) -> Path:
  """Schema-valid spans that no program makes: contexts each overlapping every later one without nesting, passes
  with null, negative, huge and far-away times, runs that overlap, a context that ends before it begins."""
  t = 1.7e9
  recs: list = [ht.meta(), {**ht.ctx(0), "ts": t}]
  for i in range(1, n):
    recs.append({**ht.ctx(i, parent=0), "ts": t + i * 1e-3})
  recs += [{"t": "ctx_end", "id": i, "ts": t + 1 + i * 1e-3} for i in range(1, n)]
  recs += [{**ht.ctx(n, parent=0), "ts": t + 0.5}, {"t": "ctx_end", "id": n, "ts": t + 0.25}]  # ends before it begins
  for r, (ts, dt) in enumerate([(t + 0.1, 1e6), (None, 5), (t + 0.2, None), (-1e300, 1), (1e300, 1), (t, -50),
                                (t + 0.3, 1e30), (t + 0.4, 2e8)]):
    recs += [{**ht.rw_begin(r, 0, cid=r % n), "ts": ts}, {**ht.rw_end(r, None, 0), "dt": dt}]
  for i in range(30):
    recs.append({"t": "run", "ctx": i, "kname": f"k<{i}>\n\"x\"", "times": [0.01, None, -1, 0.02], "min": 1,
                 "median": 1, "flops": 1, "bytes": 1, "gflops": 1, "gbs": 1, "ts": t + i * 1e-3})
  recs += [ht.mem("alloc", 1, 100, ts=t - 5), ht.mem("alloc", 2, 50, ts=1e300), ht.mem("free", 1, 100, ts=t + 2)]
  return ht.write(path, [recs, [{"t": "ctx_end", "id": 0, "ts": t + 3}, ht.END]])


# (not tiny_records and big_kernel: reading them is most of the cost, the store's own tests bound it)
HOSTILE = {**{k: v for k, v in ht.GENERATORS.items() if k not in ("tiny_records", "big_kernel")},
           "bad_memory": ht.bad_memory, "many_rewrites": ht.many_rewrites, "times": lambda p: ht.long_lists(p, "times"),
           "overlapping": overlapping}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_trace_costs_events_bounded_by_its_records(name, tmp_path):
  trace = HOSTILE[name](tmp_path / "h.vztrace")
  doc, got = export(trace, tmp_path / "h.json")
  evs = check_format(doc)
  check_nesting(evs)
  types = summarize(str(trace))["types"]
  spans = sum(types.get(t, 0) for t in ("ctx_begin", "rw_begin", "source", "run"))
  xs = sum(e["ph"] == "X" for e in evs)
  assert xs + got["skipped"] <= spans + types.get("mem", 0)
  assert sum(e["ph"] == "C" for e in evs) <= types.get("mem", 0)
  assert sum(e["ph"] == "M" for e in evs) <= MAX_METADATA
  assert got["threads"] <= 2 * perfetto.MAX_TRACKS
  if name == "overlapping":  # past MAX_TRACKS threads an overlapping span is cut at its parent's end, not dropped
    ctxs = [e for e in evs if e["ph"] == "X" and e["cat"] == "default"]
    assert len(ctxs) == 60 and got["clipped"] > 0 and got["threads"] > perfetto.MAX_TRACKS
    assert any(e["name"] == "k<3>\n\"x\"" for e in evs)  # strings escaped by json, read back as they were
    assert got["skipped"] >= 5  # null, far and negative times, and the context that ends before it begins


def test_rounding_steps_of_real_clocks_stay_on_one_thread(tmp_path):
  """A pass ending 0.3 us after its context, and a pass starting 0.2 us before its sibling ended: float epoch seconds
  do that; they stay nested on the main thread (cut by at most ROUND_NS), not sent to an overlapping thread."""
  t = 1000.0  # (near 1.7e9 the test's own offsets would be rounded too)
  recs = [ht.meta(), {**ht.ctx(0), "ts": t}, {**ht.rw_begin(0, 0), "ts": t + 1e-3}, {**ht.rw_end(0, None, 0),
          "dt": 1_000_300}, {**ht.rw_begin(1, 0), "ts": t + 0.5e-3}, {**ht.rw_end(1, None, 0), "dt": 100_000},
          {**ht.rw_begin(2, 0), "ts": t + 0.6e-3 - 2e-7}, {**ht.rw_end(2, None, 0), "dt": 100_000},
          {"t": "ctx_end", "id": 0, "ts": t + 2e-3}, ht.END]
  doc, got = export(ht.write(tmp_path / "r.vztrace", [recs]), tmp_path / "r.json")
  threads = check_nesting(check_format(doc))
  assert list(threads) == [(perfetto.HOST_PID, 1)] and got["clipped"] == 0
  ev = {e["args"].get("rewrite"): e for e in threads[(perfetto.HOST_PID, 1)]}
  assert ns(ev[0]["ts"]) + ns(ev[0]["dur"]) == ns(ev[None]["ts"]) + ns(ev[None]["dur"])  # ends with its context
  assert ns(ev[2]["ts"]) == ns(ev[1]["ts"]) + ns(ev[1]["dur"])  # starts where its sibling ended


def corrupt_frame(src: Path, dst: Path, frame: int) -> Path:
  """A copy of src with one byte of frame `frame`'s payload flipped (its checksum fails: the reader stops there)."""
  data = bytearray(src.read_bytes())
  at = HEADER.size
  for _ in range(frame):
    at += FRAME_HEADER.size + FRAME_HEADER.unpack_from(data, at)[1]
  data[at + FRAME_HEADER.size + 4] ^= 0xFF
  dst.write_bytes(bytes(data))
  return dst


def cli(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "compiler.trace", "export", *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)


def test_cli_writes_the_export_and_says_what_it_holds(recorded, tmp_path):
  trace = recorded("llvm")  # (the CLI reads traces of either backend alike)
  out = tmp_path / "run.json"
  p = cli(str(trace), "--perfetto", "-o", str(out))
  assert p.returncode == 0, p.stderr
  doc = json.loads(out.read_text())
  assert doc["traceEvents"] == export(trace, tmp_path / "in-process.json")[0]["traceEvents"]
  runs = sum(len(r["times"]) for r in TraceReader(trace) if r["t"] == "run")
  assert runs >= 3 and f"{len(doc['traceEvents'])} events" in p.stdout and f"{runs} kernel runs" in p.stdout
  assert "ui.perfetto.dev" in p.stdout
  # damaged in its second frame (PROGRAM's explicit flush ends the first after its first realize): what was read
  # before the damage, exit 1
  whole = len(doc["traceEvents"])
  bad = corrupt_frame(trace, tmp_path / "bad.vztrace", 1)
  p = cli(str(bad), "--perfetto", "-o", str(out))
  assert p.returncode == 1, p.stderr
  assert "DAMAGED at byte" in p.stdout and "holds what was read before the damage" in p.stdout
  doc = json.loads(out.read_text())
  check_nesting(check_format(doc))
  assert doc["otherData"]["status"] == "damaged"
  assert 0 < len(doc["traceEvents"]) < whole


def test_cli_errors(recorded, tmp_path, capsys):
  trace = recorded("llvm")
  out = tmp_path / "x.json"
  assert tools.main(["export", str(tmp_path / "missing.vztrace"), "--perfetto", "-o", str(out)]) == 2
  assert "missing.vztrace: not a readable trace: no such trace file" in capsys.readouterr().err and not out.exists()
  assert tools.main(["export", str(tmp_path), "--perfetto", "-o", str(out)]) == 2
  assert "not a trace file" in capsys.readouterr().err
  assert tools.main(["export", str(trace), "--perfetto", "-o", str(tmp_path / "no" / "x.json")]) == 2
  assert "export: cannot write" in capsys.readouterr().out
  assert tools.main(["export", str(trace), "--perfetto", "-o", str(out), "--context", "nope"]) == 2
  assert "no context named 'nope'" in capsys.readouterr().out and not out.exists()
  assert tools.main(["export", str(trace), "--perfetto", "-o", str(out), "--redact", "argv,host"]) == 0
  name = next(e for e in json.loads(out.read_text())["traceEvents"] if e["name"] == "process_name")["args"]["name"]
  assert name == "the traced program"
  junk = ht.junk_after_header(tmp_path / "junk.vztrace")
  assert tools.main(["export", str(junk), "--perfetto", "-o", str(out)]) == 1
  assert "DAMAGED" in capsys.readouterr().out and json.loads(out.read_text())["otherData"]["spans"] == 0
  assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]  # no temporary file left behind
