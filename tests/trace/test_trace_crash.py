"""A program that dies leaves a trace that says so (issue 27): the `end` record's `exit` (vztrace/format.py) names the
error, the user's frame and a bounded traceback, and `info`, `validate`, `show`, the viewer's answers and the export
show it; a clean end stays "ended cleanly". The scripts run in their own processes with VIZ=-1, as a user runs them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.crash_script import LINES, MESSAGE, run_script

from compiler.trace.cli import summarize
from viz_server.export.collect import collect
from viz_server.offline import OfflineApi
from vztrace import format as fmt
from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[2]






@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """kind -> (the finished process, its trace), each script run once for the module."""
  done: dict[str, tuple[subprocess.CompletedProcess, Path]] = {}
  d = tmp_path_factory.mktemp("crash")

  def get(kind: str) -> tuple[subprocess.CompletedProcess, Path]:
    if kind not in done:
      done[kind] = run_script(d, kind)
    return done[kind]
  return get


def trace_cli(*args: str) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  return subprocess.run([sys.executable, "-m", "compiler.trace", *args], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=300)


# kind -> (what `info` says after "intact, ", the exception type, the marker of the user's line, its function)
ENDINGS = {
  "error": ("ended with an error: ValueError: boom", "ValueError", "RAISE", "main"),
  "compiler": ("ended with an error: ValueError: Tensor.reshape", "ValueError", "COMPILER", "main"),
  "exit": ("exited with status 3", "SystemExit", "EXIT", "main"),
  "interrupt": ("was interrupted: KeyboardInterrupt", "KeyboardInterrupt", "INTERRUPT", "main"),
  "thread": ("ended after an uncaught error in thread 'worker': ZeroDivisionError", "ZeroDivisionError", "THREAD",
             "<lambda>"),
}


@pytest.mark.parametrize("kind", list(ENDINGS))
def test_info_and_validate_say_how_the_program_ended(runs, kind):
  proc, trace = runs(kind)
  assert (proc.returncode == 0) == (kind == "thread"), proc.stderr
  said, exc_type, marker, function = ENDINGS[kind]
  info = trace_cli("info", str(trace))
  assert info.returncode == 0, info.stderr  # the trace is intact: the status line says how the program ended
  status = next(line for line in info.stdout.splitlines() if line.startswith("status"))
  where = f" at {trace.parent / 'script.py'}:{LINES[marker]} in {function}"
  assert status.startswith(f"status    intact, {said}") and status.endswith(where), status
  assert "\x1b" not in info.stdout and "\x07" not in info.stdout  # a trace's text never reaches the terminal raw
  ex = json.loads(trace_cli("info", "--json", str(trace)).stdout)["exit"]
  assert (ex["kind"], ex["type"], ex["file"], ex["line"], ex["function"]) == \
    ({"error": "exception", "compiler": "exception"}.get(kind, kind), exc_type, str(trace.parent / "script.py"),
     LINES[marker], function)
  innermost = "compiler/tensor_mixins/movement.py" if kind == "compiler" else "script.py"  # where reshape raises
  assert ex["traceback"][-1]["file"].endswith(innermost)
  assert any(f["line"] == LINES[marker] and f["text"] and f"# {marker}" in f["text"] for f in ex["traceback"])
  assert ex["status"] == (3 if kind == "exit" else None) and ex["thread"] == ("worker" if kind == "thread" else None)
  valid = trace_cli("validate", str(trace))
  assert valid.returncode == 0 and f"; the program {said}" in valid.stdout, valid.stdout


def test_the_message_is_recorded_whole_and_shown_escaped(runs):
  proc, trace = runs("error")
  assert "Traceback (most recent call last)" in proc.stderr and "ValueError: boom <img" in proc.stderr  # hook chained
  end = [r for r in TraceReader(trace) if r["t"] == "end"]
  assert len(end) == 1 and end[0]["exit"]["message"] == MESSAGE
  info = trace_cli("info", str(trace)).stdout
  assert "boom <img src=x onerror=alert(1)> \\x1b]0;pwned\\x07 \\x1b[31mred" in info
  assert "    raise ValueError(sys.argv[2])  # RAISE" in info.splitlines()  # the traceback, as Python prints it


@pytest.mark.parametrize("kind", ["clean", "caught-exit"])
def test_a_clean_end_stays_ended_cleanly(runs, kind):
  proc, trace = runs(kind)
  assert proc.returncode == 0, proc.stderr
  assert "status    intact, ended cleanly" in trace_cli("info", str(trace)).stdout.splitlines()
  assert summarize(str(trace))["exit"] is None
  assert trace_cli("validate", str(trace)).stdout.rstrip().endswith("; ended cleanly")
  assert "the program" not in trace_cli("show", str(trace)).stdout


def test_show_prints_the_ending_after_the_contexts(runs):
  _, trace = runs("error")
  out = trace_cli("show", str(trace))
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  at = lines.index(next(line for line in lines if line.startswith("the program ended with an error: ValueError")))
  assert at > 0 and "\\x1b[31mred" in lines[at] and "\x1b" not in out.stdout
  assert lines[at + 1] == "Traceback (most recent call last):"
  assert "    raise ValueError(sys.argv[2])  # RAISE" in lines[at:]
  ends = [json.loads(line) for line in trace_cli("show", "--json", str(trace)).stdout.splitlines()
          if '"type": "exit"' in line]
  assert len(ends) == 1 and ends[0]["exit"]["message"] == MESSAGE and ends[0]["exit"]["line"] == LINES["RAISE"]


def test_export_redacts_the_endings_paths_and_source_lines(runs):
  _, trace = runs("error")
  with OfflineApi(trace) as api:
    plain = collect(api)["answers"]["/api/traces"][0]["exit"]
    red = collect(api, redact=("paths", "source"))["answers"]["/api/traces"][0]["exit"]
  folder = str(trace.parent)
  assert plain["file"] == str(trace.parent / "script.py") and folder in plain["text"]
  assert red["file"] == "script.py" and {f["file"] for f in red["traceback"]} == {"script.py"}
  assert red["text"].endswith(f" at script.py:{LINES['RAISE']} in main") and folder not in json.dumps(red)
  assert all(f["text"] is None for f in red["traceback"]) and all(f["text"] for f in plain["traceback"])


# ---- hostile end records

def _hostile(path: Path, ex: dict) -> Path:
  from support.hostile_traces import ctx, meta, write
  return write(path, [[meta(), ctx(0), {"t": "end", "ts": 1.7e9, "exit": ex}]])


def _frame(i: int) -> dict:
  return {"file": f"/x/f{i}.py", "line": i, "function": "f", "text": "y = 1"}


def test_an_oversize_end_record_costs_bounded_work(tmp_path, monkeypatch):
  n = 200_000
  ex = {"kind": "exception", "type": "E" * (1 << 20), "message": "m" * (8 << 20), "file": "/x/" + "p" * (1 << 20),
        "line": 1, "function": "f", "traceback": [_frame(i) for i in range(n)], "omitted": 5}
  path = _hostile(tmp_path / "big.vztrace", ex)
  looked = []  # frames the reader's schema check looked into: only those the consumers keep
  real = fmt._EXIT_FRAME.ok
  monkeypatch.setattr(fmt._EXIT_FRAME, "ok", lambda f: looked.append(f) or real(f))
  s = summarize(str(path))
  assert s["complete"] and not s["damaged"] and len(looked) == fmt.MAX_EXIT_FRAMES
  got = s["exit"]
  assert len(got["message"]) == fmt.MAX_EXIT_MESSAGE and got["message"].endswith("\u2026")
  assert max(len(got["type"]), len(got["file"])) == fmt.MAX_EXIT_TEXT
  assert [f["line"] for f in got["traceback"]] == list(range(n - fmt.MAX_EXIT_FRAMES, n))
  assert got["omitted"] == 5 + n - fmt.MAX_EXIT_FRAMES
  with OfflineApi(path) as api:
    [entry] = api.get("/api/traces")
  assert entry["exit"] == got and len(json.dumps(entry)) < 64 << 10  # what every trace list answer carries
  assert len(trace_cli("info", str(path)).stdout) < 64 << 10


@pytest.mark.parametrize("bad", [
  {"kind": 5},  # a field of the wrong type
  {"message": None},  # a required text that is null
  {"traceback": ["not a frame"]},
  {"traceback": [_frame(1), {**_frame(2), "line": "2"}]},  # a kept frame of the wrong shape
  {"status": True},
])
def test_a_malformed_end_record_is_damage(tmp_path, bad):
  ex = {"kind": "exception", "type": "E", "message": "m", "file": None, "line": None, "function": None,
        "traceback": [_frame(1)], **bad}
  path = _hostile(tmp_path / "bad.vztrace", ex)
  r = TraceReader(path)
  assert [x["t"] for x in r] == ["meta", "ctx_begin"] and r.damaged and "end.exit" in r.reason
  assert trace_cli("validate", str(path)).returncode == 1
  with OfflineApi(path) as api:
    [entry] = api.get("/api/traces")
  assert entry["status"] == "damaged" and entry["exit"] is None
