"""The program summary (viz_server/summary.py, GET /api/traces/<t>/summary): its phases and runs on a recorded real
trace equal sums made here from the raw records (TraceReader), cold first runs are kept apart from warm ones and never
rank a kernel, and the counts (vztrace.counts) agree across the trace list, the summary, `info`, `show` and the Runs
answer."""
from __future__ import annotations

import io
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.trace_tools_helpers import record_loop

from viz_server import show, summary
from viz_server.offline import OfflineApi
from vztrace.reader import TraceReader
from vztrace.writer import TraceWriter

ROOT = Path(__file__).resolve().parents[2]




def raw_phases(path: Path) -> dict:
  """The summary's phases made from the raw records, as viz_server.summary's docstring defines them, but from record
  order: a rewrite is outermost when no other is open at its rw_begin."""
  ctx: dict[int, dict] = {}
  compile_in: dict[int, float] = {}
  codegen_in: dict[int, float] = {}
  python_end: dict[int, float] = {}  # kernel -> the end of its last outermost rewrite
  rw_ts: dict[int, float] = {}
  run_in: dict[int, float] = {}
  compiled: set[int] = set()
  run = 0.0
  depth = 0
  rw_ctx: dict[int, int] = {}
  outer: set[int] = set()

  def top(cid):
    chain = []
    while cid is not None:
      chain.append(ctx[cid])
      cid = ctx[cid]["parent"]
    return next((c for c in reversed(chain) if c["kind"] in ("schedule", "kernel")), None)

  for rec in TraceReader(path):
    t = rec["t"]
    if t == "ctx_begin":
      ctx[rec["id"]] = {"id": rec["id"], "parent": rec["parent"], "kind": rec["kind"], "ts": rec["ts"], "end": None}
    elif t == "ctx_end":
      ctx[rec["id"]]["end"] = rec["ts"]
    elif t == "rw_begin":
      rw_ctx[rec["id"]], rw_ts[rec["id"]] = rec["ctx"], rec["ts"]
      if depth == 0:
        outer.add(rec["id"])
      depth += 1
      names = ctx[rec["ctx"]].setdefault("rw_names", {})
      names[rec["id"]] = rec["name"]
    elif t == "rw_end":
      depth -= 1
      k = top(rw_ctx[rec["id"]])
      if rec["id"] in outer and k is not None and k["kind"] == "kernel":
        end = rw_ts[rec["id"]] + rec["dt"] / 1e9
        python_end[k["id"]] = max(python_end.get(k["id"], end), end)
        if not ctx[rw_ctx[rec["id"]]]["rw_names"][rec["id"]].startswith("apply "):
          compile_in[k["id"]] = compile_in.get(k["id"], 0.0) + rec["dt"] / 1e9
          codegen_in[k["id"]] = codegen_in.get(k["id"], 0.0) + rec["dt"] / 1e9
    elif t == "source" and rec["kind"] == "llvm_ir":
      k = top(rec["ctx"])
      compiled.add(k["id"])
      compile_in[k["id"]] = compile_in.get(k["id"], 0.0) + rec["compile_s"]
    elif t == "run":
      run += sum(rec["times"])
      k = top(rec["ctx"])
      if k is not None and k["kind"] == "kernel":
        run_in[k["id"]] = run_in.get(k["id"], 0.0) + sum(rec["times"])
  span = {c["id"]: c["end"] - c["ts"] for c in ctx.values() if c["end"] is not None}
  schedule = sum(span[c["id"]] for c in ctx.values() if c["kind"] == "schedule" and top(c["id"]) is c)
  # (every compiled kernel of a real trace has rewrites: its Python part, begin to last rewrite, less codegen's)
  optimize = sum(max(python_end[k] - ctx[k]["ts"] - codegen_in.get(k, 0.0), 0.0) for k in compiled)
  total = max(c["end"] for c in ctx.values() if c["end"] is not None) - min(c["ts"] for c in ctx.values())
  comp = sum(compile_in.values())
  work = schedule + optimize + comp + run
  return {"total": total, "schedule": schedule, "optimize": optimize, "compile": comp, "run": run,
          "other": max(total - work, 0.0), "parallel": max(work - total, 0.0)}


def raw_kernels(path: Path) -> dict[str, list[float]]:
  """Every run time of each kernel (by name), in trace order, from the raw run records."""
  out: dict[str, list[float]] = {}
  for rec in TraceReader(path):
    if rec["t"] == "run":
      out.setdefault(rec["kname"], []).extend(rec["times"])
  return out


@pytest.mark.parametrize("backend", ["llvm", "interp"])
def test_phases_and_runs_equal_sums_of_the_raw_records(trace, monkeypatch, backend):
  monkeypatch.setenv("BACKEND", backend)
  path = record_loop(trace)
  with OfflineApi(path) as api:
    got = api.trace_get("summary")
  want = raw_phases(path)
  assert got["phases"] == pytest.approx(want, rel=1e-9, abs=1e-12)
  assert want["schedule"] > 0 and want["total"] > want["schedule"]
  kernels = raw_kernels(path)
  if backend == "interp":  # the reference interpreter times nothing
    assert kernels == {} and got["runs"]["count"] == 0 and got["top"] == [] and want["run"] == 0
    return
  assert want["compile"] > 0 and want["run"] > 0 and want["optimize"] > 0
  assert len(kernels) == 2 and all(len(ts) == 4 for ts in kernels.values())  # each kernel ran once a step
  r = got["runs"]
  assert r["count"] == 8 and r["kernels"] == 2
  assert r["total"] == pytest.approx(sum(map(sum, kernels.values())), rel=1e-12)
  assert r["cold"] == pytest.approx(sum(ts[0] for ts in kernels.values()), rel=1e-12)
  assert r["warm"] == pytest.approx(sum(sum(ts[1:]) for ts in kernels.values()), rel=1e-12)
  for row in got["top"]:
    ts = kernels[row["kname"]]
    assert (row["runs"], row["first"], row["warm"]) == (4, ts[0], 3)
    assert row["median"] == statistics.median(ts[1:]) and row["min"] == min(ts[1:])
    assert row["total"] == pytest.approx(sum(ts), rel=1e-12)
    assert row["gflops"] == pytest.approx(row["flops"] / min(ts[1:]) / 1e9)


def _meta() -> dict:
  return {"t": "meta", "version": "1.0", "argv": ["x"], "host": socket.gethostname(), "pid": os.getpid(),
          "python": "3", "started": time.time(), "cwd": "/"}


def write_runs(path: Path, runs: list[tuple[str, float]]) -> Path:
  """A trace of kernel contexts, each running one kernel once: (name, seconds) in order."""
  with TraceWriter(path) as w:
    w.write(_meta())
    w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 1.0})
    t = 1.0
    for i, (name, secs) in enumerate(runs, 1):
      w.write({"t": "ctx_begin", "id": i, "parent": 0, "name": name, "kind": "kernel", "ts": t})
      w.write({"t": "run", "ctx": i, "kname": name, "times": [secs], "min": secs, "median": secs, "flops": 1e6,
               "bytes": 4e6, "gflops": 1e6 / secs / 1e9, "gbs": 4e6 / secs / 1e9, "ts": t})
      t += secs + 1e-3
      w.write({"t": "ctx_end", "id": i, "ts": t})
    w.write({"t": "ctx_end", "id": 0, "ts": t})
    w.write({"t": "end", "ts": t})
  return path


@pytest.mark.parametrize("compile_s", [0.5, 5.0])
def test_kernels_compiled_ahead_count_only_their_own_python_part_as_optimize(tmp_path, compile_s):
  """Kernel contexts compiled ahead overlap (each begins at its optimize, up to COMPILE_AHEAD kernels before its run):
  a kernel's optimize is its Python part (begin to its last rewrite's end) less codegen's passes, not its span less
  compile and run, which would count the other kernels' work inside it (and phases past the total). Compiles on a
  second thread that add up past the span are `parallel` (5 s each here), the total staying the span."""
  path = tmp_path / "ahead.vztrace"
  with TraceWriter(path) as w:
    w.write(_meta())
    w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 0.0})
    w.write({"t": "node", "id": 0, "op": "SINK", "dtype": "void", "src": [], "arg": "None"})
    rw = 0
    for k, t in ((1, 0.0), (2, 2.0)):  # each: 1 s of the optimizer's rewrite, then 1 s of a codegen pass
      w.write({"t": "ctx_begin", "id": k, "parent": 0, "name": f"E_{k}", "kind": "kernel", "ts": t})
      for name, at in (("apply UPCAST(0, 4)", t), ("lower", t + 1.0)):
        w.write({"t": "rw_begin", "id": rw, "ctx": k, "name": name, "file": "x.py", "line": 1, "bottom_up": False,
                 "root": 0, "ts": at})
        w.write({"t": "rw_end", "id": rw, "root": 0, "dt": 10**9, "matches": 0})
        rw += 1
    for k, t in ((1, 4.0), (2, 6.0)):  # at each kernel's turn: its compile (0.5 s), its run (0.1 s), its end
      w.write({"t": "source", "ctx": k, "kind": "llvm_ir", "text": "x", "compile_s": compile_s, "ts": t})
      w.write({"t": "run", "ctx": k, "kname": f"E_{k}", "times": [0.1], "min": 0.1, "median": 0.1, "flops": 1,
               "bytes": 4, "gflops": 0, "gbs": 0, "ts": t + 0.5})
      w.write({"t": "ctx_end", "id": k, "ts": t + 2.0})
    w.write({"t": "ctx_end", "id": 0, "ts": 8.0})
    w.write({"t": "end", "ts": 8.0})
  with OfflineApi(path) as api:
    assert api.trace.damage is None
    got = api.trace_get("summary")["phases"]
  work = 2.0 + (2.0 + 2 * compile_s) + 0.2
  assert got["optimize"] == pytest.approx(2.0) and got["compile"] == pytest.approx(2.0 + 2 * compile_s)
  assert got["run"] == pytest.approx(0.2) and got["total"] == pytest.approx(8.0)
  assert got["other"] == pytest.approx(max(8.0 - work, 0)) and got["parallel"] == pytest.approx(max(work - 8.0, 0))


def test_a_cold_first_run_is_kept_apart_and_never_ranks_a_kernel(tmp_path):
  # the demo's case: a 4M elementwise kernel took 70.9 ms cold and 3.0 ms after; the other kernel 5 ms every time
  cold = [("E_4194304", 70.9e-3)] + [("E_4194304", 3.0e-3)] * 4
  path = write_runs(tmp_path / "cold.vztrace", [x for pair in zip(cold, [("r_1024", 5e-3)] * 5) for x in pair])
  with OfflineApi(path) as api:
    got = api.trace_get("summary")
    per_kernel = api.trace_get("runs/kernels")
  e, r = (next(k for k in got["top"] if k["kname"] == n) for n in ("E_4194304", "r_1024"))
  assert (e["runs"], e["first"], e["median"], e["min"], e["warm"]) == (5, 70.9e-3, 3.0e-3, 3.0e-3, 4)
  assert e["total"] == pytest.approx(82.9e-3)
  assert [k["kname"] for k in got["top"]] == ["r_1024", "E_4194304"]  # 25 ms steady beats 15 ms (82.9 with the cold)
  assert e["share"] == pytest.approx(15 / 40) and r["share"] == pytest.approx(25 / 40)
  assert e["gflops"] == pytest.approx(1e6 / 3.0e-3 / 1e9)  # at the warm min, not the cold run
  assert got["runs"]["cold"] == pytest.approx(75.9e-3) and got["runs"]["warm"] == pytest.approx(32e-3)
  assert per_kernel["count"] == 2 and {k["kname"]: k for k in per_kernel["kernels"]}["E_4194304"] == \
    {k: v for k, v in e.items() if k != "share"}


def test_the_answer_is_bounded_and_costs_one_pass(tmp_path, monkeypatch):
  runs = [(f"E_{i}", 1e-6 * (i + 1)) for i in range(200)]
  path = write_runs(tmp_path / "many.vztrace", runs)
  with OfflineApi(path) as api:
    got = api.trace_get("summary")
    calls = {"n": 0}
    real = summary.run_times

    def counted(rec):
      calls["n"] += 1
      return real(rec)
    monkeypatch.setattr(summary, "run_times", counted)
    with api.store.lock:
      summary.summary(api.trace)
  assert len(got["top"]) == summary.TOP_KERNELS and got["cut"] and got["runs"]["kernels"] == 200
  assert [k["kname"] for k in got["top"]] == [f"E_{i}" for i in range(199, 179, -1)]
  assert calls["n"] == 2 * len(runs)  # each run record read once for the kernels' rows and once for the phases


def info_json(path: Path) -> dict:
  p = subprocess.run([sys.executable, "-m", "compiler.trace", "info", "--json", str(path)], cwd=ROOT,
                     capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert p.returncode == 0, p.stderr
  return json.loads(p.stdout)


def test_counts_agree_on_every_surface(trace, monkeypatch):
  monkeypatch.setenv("BACKEND", "llvm")
  path = record_loop(trace)
  with OfflineApi(path) as api:
    entry = api.get("/api/traces")[0]["counts"]
    got = api.trace_get("summary")["counts"]
    per_kernel = api.trace_get("runs/kernels")
    contexts = api.trace_get("contexts")
  info = info_json(path)
  out = io.StringIO()
  show.run(show_args(path), out)
  head = out.getvalue().splitlines()[0]
  shown = [c for c in contexts if not (c["kind"] == "default" and c["parent"] is None and not c["rewrites"])]
  assert entry["contexts"] == got["contexts"] == info["contexts"] == len(shown) == len(contexts) - 1
  assert entry["kernels"] == got["kernels"] == info["kernels"] == per_kernel["count"] == 2
  assert entry["runs"] == got["runs"] == info["runs"] == sum(k["runs"] for k in per_kernel["kernels"]) == 8
  assert head == f"{entry['contexts']} contexts, {entry['kernels']} kernels, {entry['runs']} runs"


def show_args(path: Path, **kw):
  import argparse
  args = argparse.Namespace(file=str(path), rewrite=None, kernels=False, source=None, kernel=None, json=False)
  for k, v in kw.items():
    setattr(args, k, v)
  return args
