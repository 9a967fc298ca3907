"""The UI's Export and Compare buttons (docs/architecture.md, "JSON API"): GET /api/traces/<t>/export answers the
trace's single-file HTML export as a download, GET /api/compare?a=&b= the `compare` report as JSON.

Both run the trace tools (`python -m viz_server.tools export|compare`, viz_server/tools.py) in a child process on
the served traces' files: the answer is byte for byte what the command writes, the tools' imports stay below the
app's (export and compare read traces through viz_server/offline.py, which builds an app), and a slow or big job
costs a bounded time (TOOL_TIMEOUT_S) and its own process's memory, never the server's lock."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from flask import Blueprint, current_app, jsonify, request

from viz_server.request_args import ascii_int, fail, get_trace
from viz_server.store import Trace

bp = Blueprint("share", __name__, url_prefix="/api")
REDACTABLE = ("paths", "source", "argv", "host")  # viz_server/export.py's REDACTABLE
# What the tools are given: past these a request is refused with 413 (the export of the demo trace, ~2k matches,
# takes a few seconds; the export's size and time grow with the matches, compare's with the nodes)
MAX_EXPORT_MATCHES = 50_000
MAX_COMPARE_MATCHES = 200_000
MAX_TRACE_BYTES = 64 << 20
TOOL_TIMEOUT_S = 120
ROOT = Path(__file__).resolve().parents[1]


def _file(tr: Trace, limit: int, what: str) -> str:
  """The trace's file, after the size checks that keep the tool's run bounded."""
  path = getattr(tr, "path", None)
  if path is None or not os.path.isfile(path):
    fail(404, f"trace {tr.id} has no file to {what}")
  size = os.path.getsize(path)
  if size > MAX_TRACE_BYTES:
    fail(413, f"trace {tr.id} is {size} bytes; the viewer will {what} traces of at most {MAX_TRACE_BYTES} bytes "
              f"(use `python -m compiler.trace {what}` on the file)")
  if tr.match_count > limit:
    fail(413, f"trace {tr.id} has {tr.match_count} matches; the viewer will {what} traces of at most {limit} "
              f"(use `python -m compiler.trace {what}` on the file)")
  return str(path)


def _tool(args: list[str], what: str) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
  try:
    return subprocess.run([sys.executable, "-m", "viz_server.tools", *args], capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S, env=env, cwd=str(ROOT), stdin=subprocess.DEVNULL)
  except subprocess.TimeoutExpired:
    fail(413, f"{what} took more than {TOOL_TIMEOUT_S} s; use `python -m compiler.trace {what}` on the files")


def _redact_arg() -> list[str]:
  what = [w.strip() for w in request.args.get("redact", "").split(",") if w.strip()]
  bad = sorted(set(what) - set(REDACTABLE))
  if bad:
    fail(400, f"cannot redact {', '.join(b[:20] for b in bad)[:200]}: choose from {', '.join(REDACTABLE)}")
  return sorted(set(what))


def download_name(tr: Trace, redacted: bool) -> str:
  """The export's file name: the trace's name (ASCII letters, digits, '-', '_' and '.' only) + .html."""
  stem = Path(str(tr.name)).stem if not redacted else f"trace-{tr.id}"
  safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_.") else "_" for ch in stem)[:80].strip(".")
  return f"{safe or f'trace-{tr.id}'}.html"


@bp.get("/traces/<int:t>/export")
def export(t: int) -> Any:
  tr = get_trace(t)
  what = _redact_arg()
  path = _file(tr, MAX_EXPORT_MATCHES, "export")
  with tempfile.TemporaryDirectory(prefix="tinyviz-export-") as tmp:
    out = Path(tmp) / "export.html"
    p = _tool(["export", path, "-o", str(out), "--redact", ",".join(what)], "export")
    if p.returncode != 0 or not out.is_file():
      fail(400, f"cannot export trace {t}: {(p.stdout + p.stderr).strip()[-300:]}")
    page = out.read_bytes()
  resp = current_app.response_class(page, mimetype="text/html")
  resp.headers["Content-Disposition"] = f'attachment; filename="{download_name(tr, bool(what))}"'
  return resp


@bp.get("/compare")
def compare() -> Any:
  paths, traces = [], []
  for which in ("a", "b"):
    raw = request.args.get(which, "")
    t = ascii_int(raw)
    if t is None:
      fail(400, f"query parameter {which!r} must be a trace id (ASCII digits), got {raw[:40]!r}")
    traces.append(get_trace(t))
    paths.append(_file(traces[-1], MAX_COMPARE_MATCHES, "compare"))
  p = _tool(["compare", *paths, "--json"], "compare")
  if p.returncode not in (0, 1):
    fail(400, f"cannot compare: {(p.stdout + p.stderr).strip()[-300:]}")
  try:
    rep = json.loads(p.stdout)
  except ValueError:
    fail(400, "compare printed no report")
  for side, tr in zip(("a", "b"), traces):  # the names the viewer lists (an upload's file has a temporary name)
    if isinstance(rep.get(side), dict):
      rep[side]["name"] = tr.name
  return jsonify({**rep, "trace_a": traces[0].id, "trace_b": traces[1].id})
