"""`python -m compiler.trace info|validate`: exit codes, messages, --json keys."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from compiler.trace.cli import main, summarize
from vztrace.writer import TraceWriter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(*args: str) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if k not in ("VIZ", "VIZ_TRACE")}  # never start a recorder here
  return subprocess.run([sys.executable, "-m", "compiler.trace", *args], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=60)


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> tuple[str, int]:
  """A small trace (2 contexts, 3 rewrites, 2 named "symbolic", with 5 matches, 4 nodes, 1 kernel with a run, 23
  records in 2 frames) and the byte offset of its second frame."""
  p = tmp_path_factory.mktemp("cli") / "t.vztrace"
  with TraceWriter(p, validate=True) as w:
    w.write({"t": "meta", "version": "1.0", "argv": ["demo.py"], "host": "box", "pid": 7, "python": "3.11",
             "started": 1.7e9, "cwd": "/w"})
    w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": 1.0})
    w.write({"t": "ctx_begin", "id": 1, "parent": 0, "name": "r_4", "kind": "kernel", "ts": 1.0})
    for i in range(4):
      w.write({"t": "node", "id": i, "op": "CONST", "dtype": "int", "arg": str(i), "src": []})
    w.write({"t": "pattern", "id": 0, "file": "s.py", "line": 1, "src": "x", "pat": "UPat()", "name": "f"})
    for rw, (name, n) in enumerate([("symbolic", 2), ("lower", 1), ("symbolic", 2)]):
      w.write({"t": "rw_begin", "id": rw, "ctx": 1, "name": name, "file": None, "line": None, "bottom_up": False,
               "root": 0, "ts": 1.0})
      for _ in range(n):
        w.write({"t": "match", "rw": rw, "pat": 0, "before": 0, "after": 1, "dt": 10})
      w.write({"t": "rw_end", "id": rw, "root": 1, "dt": 100, "matches": n})
    w.write({"t": "source", "ctx": 1, "kind": "llvm_ir", "text": "ret void", "compile_s": 0.1})
    w.write({"t": "run", "ctx": 1, "kname": "r_4", "times": [1.0], "min": 1.0, "median": 1.0, "flops": 4,
             "bytes": 16, "gflops": float("inf"), "gbs": 1e-8})
    w.flush()
    second = os.path.getsize(p)
    w.write({"t": "ctx_end", "id": 1, "ts": 2.0})
    w.write({"t": "end", "ts": 2.0})
  return str(p), second


@pytest.fixture(scope="module")
def trace(traced) -> str:
  return traced[0]


@pytest.fixture(scope="module")
def truncated(trace, tmp_path_factory) -> str:
  p = tmp_path_factory.mktemp("cli") / "cut.vztrace"
  data = open(trace, "rb").read()
  p.write_bytes(data[:-5])
  return str(p)


def test_validate_exit_codes(traced, truncated, tmp_path):
  trace, second = traced
  ok = run_cli("validate", trace)
  assert ok.returncode == 0 and "OK" in ok.stdout and "ended cleanly" in ok.stdout
  bad = run_cli("validate", truncated)
  assert bad.returncode == 1, bad.stdout + bad.stderr
  assert "DAMAGED" in bad.stdout and "truncated" in bad.stdout
  assert f"at byte {second}, in frame 1 (counting from 0; frame 0 is intact): truncated frame" in bad.stdout
  junk = tmp_path / "notes.txt"
  junk.write_text("hello, I am not a trace\n")
  for path in (str(junk), str(tmp_path / "missing.vztrace")):
    res = run_cli("validate", path)
    assert res.returncode == 2 and "not a readable trace" in res.stderr, res.stderr


def test_info_json(trace, truncated):
  res = run_cli("info", trace, "--json")
  assert res.returncode == 0, res.stderr
  s = json.loads(res.stdout)
  for key in ("contexts", "rewrites", "matches", "nodes", "bytes", "patterns", "runs", "records", "damaged",
              "stopped_at", "reason", "complete", "kernels", "frames", "meta", "top_rewrites"):
    assert key in s, key
  # (the empty root context is not counted: vztrace.counts)
  assert (s["contexts"], s["rewrites"], s["matches"], s["nodes"], s["patterns"], s["runs"]) == (1, 3, 5, 4, 1, 1)
  assert s["bytes"] == os.path.getsize(trace) and s["frames"] == 2 and s["records"] == 23 and s["kernels"] == 1
  assert (s["damaged"], s["stopped_at"], s["reason"], s["complete"]) == (False, None, None, True)
  assert s["top_rewrites"][0] == {"name": "symbolic", "matches": 4, "calls": 2, "time_s": 200e-9}
  assert s["time"] == {"rewrites_s": 300e-9, "compile_s": 0.1, "runs_s": 1.0}
  cut = run_cli("info", truncated, "--json")
  c = json.loads(cut.stdout)
  assert cut.returncode == 1 and c["damaged"] and not c["complete"] and c["stopped_at"] > 12 and c["records"] == 21


def test_info_text_and_help(trace):
  res = run_cli("info", trace)
  assert res.returncode == 0
  for text in ("demo.py", "pid 7 on box", "contexts  1 (kernel 1)", "rewrites  3, matches 5, nodes 4",
               "kernels   1", "intact, ended cleanly", "symbolic",
               "time      rewrites 0.0 ms, LLVM compiles 100.0 ms, kernel runs 1000.0 ms"):
    assert text in res.stdout, text
  h = run_cli("--help")
  assert h.returncode == 0 and "info" in h.stdout and "validate" in h.stdout
  assert run_cli("validate", "--help").stdout.count("2 not a readable trace") == 1
  assert run_cli().returncode == 2  # a command is required


def test_main_in_process(trace, capsys):
  assert main(["validate", trace]) == 0
  assert "23 records in 2 frames" in capsys.readouterr().out
  assert summarize(trace, top=1)["top_rewrites"] == [{"name": "symbolic", "matches": 4, "calls": 2, "time_s": 200e-9}]
