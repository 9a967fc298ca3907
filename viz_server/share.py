"""The UI's Export and Compare buttons (docs/architecture.md, "JSON API"): GET /api/traces/<t>/export answers the
trace's single-file HTML export as a download, GET /api/compare?a=&b= the `compare` report as JSON.

Both run the trace tools (`python -m viz_server.tools export|compare`, viz_server/tools.py) in a child process on
the served traces' files: the answer is byte for byte what the command writes, the tools' imports stay below the
app's (export and compare read traces through viz_server/offline.py, which builds an app), and a slow or big job
costs a bounded time (TOOL_TIMEOUT_S) and its own process's memory, never the server's lock.

The children are bounded and owned (issue 31): at most MAX_CHILDREN run at once (another request is refused with 503),
a cross-site page cannot start one (request_args.same_origin), each sets its own CPU and address-space limits and asks
the kernel to kill it when the viewer goes (viz_server/tools.py, `bound_child`: it stays bounded even where the viewer
was SIGKILLed), and each runs in its own process group, which the viewer kills when the client goes, at the time
limit and when the viewer stops (Children.kill_all, from viz_server/__main__.py's serve)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from flask import Blueprint, current_app, jsonify, request

from viz_server import gone
from viz_server.request_args import ascii_int, fail, get_trace, same_origin
from viz_server.store import Trace

bp = Blueprint("share", __name__, url_prefix="/api")
REDACTABLE = ("paths", "source", "argv", "host")  # viz_server/export/redact.py's REDACTABLE
# What the tools are given: past these a request is refused with 413 (the export of the demo trace, ~2k matches,
# takes a few seconds; the export's size and time grow with the matches, compare's with the nodes)
MAX_EXPORT_MATCHES = 50_000
MAX_COMPARE_MATCHES = 200_000
MAX_TRACE_BYTES = 64 << 20
TOOL_TIMEOUT_S = 120
# Each child's own limits (it sets them itself: viz_server/tools.py's bound_child): CPU seconds (the soft limit; the
# kernel kills it with SIGKILL 5 s later) and address space. A cross-site page once had 6 exports of ~1.3 GB each
# running at once: MAX_CHILDREN x CHILD_MEMORY is what the buttons can cost at most.
MAX_CHILDREN = 2
CHILD_CPU_S = TOOL_TIMEOUT_S
CHILD_MEMORY = 3 << 30
WAIT_S = 0.1  # how often a request waiting on its child looks whether its client has gone
JOB = re.compile(r"[0-9a-f]{8,32}")  # an export's progress name, chosen by the page (GET /api/exports/<job>)
PROGRESS_BYTES = 64  # what a progress file holds at most ('STEPS TOTAL')
ROOT = Path(__file__).resolve().parents[1]


class Children:
  """The tool processes the viewer runs: at most `limit` at once, each in its own process group, all killed by
  kill_all (the viewer stopping)."""

  def __init__(self, limit: int = MAX_CHILDREN) -> None:
    self.limit = limit
    self.lock = threading.Lock()
    self.running: set[subprocess.Popen] = set()
    self.jobs: dict[str, Path] = {}  # a running child's job name -> the file it keeps its progress in (one per child)
    self.closed = False

  def progress(self, job: str) -> tuple[int, int] | None:
    """(steps packed, total) of the running export named job ((0, 0) before its first count); None if none runs."""
    with self.lock:
      path = self.jobs.get(job)
    if path is None:
      return None
    try:
      with open(path, "rb") as f:
        got = f.read(PROGRESS_BYTES).split()
    except FileNotFoundError:
      return 0, 0
    return (int(got[0]), int(got[1])) if len(got) == 2 and all(g.isdigit() for g in got) else (0, 0)

  def run(self, args: list[str], what: str, job: tuple[str, Path] | None = None) -> subprocess.CompletedProcess:
    """`python -m viz_server.tools *args` in a child, its output captured; refused (503) past the limit, stopped
    (413) past TOOL_TIMEOUT_S, killed when the client goes (gone.ClientGone) or the viewer stops. job: (its name,
    the file the child keeps its progress in), readable by progress() while it runs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    bounds = ["--child-of", str(os.getpid()), "--max-cpu-s", str(CHILD_CPU_S), "--max-memory", str(CHILD_MEMORY)]
    with self.lock:
      if self.closed:
        fail(503, "the viewer is stopping")
      if len(self.running) >= self.limit:
        fail(503, f"{len(self.running)} exports or compares are running already (the viewer runs at most "
                  f"{self.limit} at once); try again when one has finished")
      if job is not None and job[0] in self.jobs:
        fail(400, f"export job {job[0]} is running already")
      # its own session and process group: killed as one, and no terminal's Ctrl-C reaches it past the viewer
      proc = subprocess.Popen([sys.executable, "-m", "viz_server.tools", *bounds, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env, cwd=str(ROOT),
                              start_new_session=True)
      self.running.add(proc)
      if job is not None:
        self.jobs[job[0]] = job[1]
    try:
      deadline = time.monotonic() + TOOL_TIMEOUT_S
      while True:
        try:
          out, err = proc.communicate(timeout=WAIT_S)
          break
        except subprocess.TimeoutExpired:
          gone.check()  # raises ClientGone once nobody waits for the answer
          if time.monotonic() > deadline:
            fail(413, f"{what} took more than {TOOL_TIMEOUT_S} s; use `python -m compiler.trace {what}` on the files")
    finally:
      self._kill(proc)
      with self.lock:
        self.running.discard(proc)
        if job is not None:
          self.jobs.pop(job[0], None)
    if proc.returncode < 0:  # killed: by its own limits, or by kill_all
      fail(413, f"{what} was stopped ({signal.Signals(-proc.returncode).name}): it needed more than the viewer "
                f"gives it ({CHILD_CPU_S} s of CPU, {CHILD_MEMORY >> 20} MiB); use `python -m compiler.trace {what}` "
                "on the files")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

  @staticmethod
  def _kill(proc: subprocess.Popen) -> None:
    """Kill proc's process group where proc has not been reaped yet (until then its pid, the group's id, is not
    reused), and reap it."""
    if proc.returncode is not None:  # reaped by communicate: its pipes are closed too
      return
    if proc.poll() is None:
      with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()  # reads what is left and closes the pipes

  def kill_all(self) -> None:
    """Kill every running child's process group and start no more (the viewer is stopping); their requests answer
    413 or are never read."""
    with self.lock:
      self.closed = True
      procs = list(self.running)
    for proc in procs:
      if proc.poll() is None:
        with suppress(ProcessLookupError, PermissionError):
          os.killpg(proc.pid, signal.SIGKILL)


def children() -> Children:
  return current_app.extensions["tinyviz"]["children"]


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


def _tool(args: list[str], what: str, job: tuple[str, Path] | None = None) -> subprocess.CompletedProcess:
  return children().run(args, what, job)


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
  same_origin()  # a GET, but one that starts a process: a page of another site must not
  tr = get_trace(t)
  what = _redact_arg()
  job = request.args.get("job")
  if job is not None and not JOB.fullmatch(job):
    fail(400, "query parameter 'job' must be 8 to 32 lowercase hex digits")
  path = _file(tr, MAX_EXPORT_MATCHES, "export")
  with tempfile.TemporaryDirectory(prefix="tinyviz-export-") as tmp:
    out, note = Path(tmp) / "export.html", Path(tmp) / "progress"
    args = ["export", path, "-o", str(out), "--redact", ",".join(what), "--progress-file", str(note)]
    p = _tool(args, "export", None if job is None else (job, note))
    if p.returncode != 0 or not out.is_file():
      fail(400, f"cannot export trace {t}: {(p.stdout + p.stderr).strip()[-300:]}")
    page = out.read_bytes()
  resp = current_app.response_class(page, mimetype="text/html")
  resp.headers["Content-Disposition"] = f'attachment; filename="{download_name(tr, bool(what))}"'
  return resp


@bp.get("/exports/<job>")
def export_progress(job: str) -> Any:
  """How far the export named job is: {running, steps, total} (the steps packed of the trace's; 0 and 0 until its
  first count, and where none by that name runs: not started yet, or done; not a 404, which the page's console
  would print on every poll)."""
  got = children().progress(job) if JOB.fullmatch(job) else None
  return jsonify({"running": got is not None, "steps": got[0] if got else 0, "total": got[1] if got else 0})


@bp.get("/compare")
def compare() -> Any:
  same_origin()  # as export
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
