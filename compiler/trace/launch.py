"""Start the trace viewer for `VIZ=1`, or hand the trace to one that already runs. Uses only the standard library:
the compiler never imports Flask; the viewer is a separate, detached `python -m viz_server` process.

Behaviour (docs/architecture.md, "Live viewing"): the port is VIZ_PORT (default 8000). If a tinyviz viewer answers
there, it is asked (POST /api/traces/follow, with the control token the viewer left for this user:
compiler/trace/control.py) to also follow this trace; otherwise a new viewer is started in its own
session, following the trace file, logging to <cache>/tinyviz/viewer-<port>.log. Either way the URL is printed once.
The viewer outlives the script; stop it with `python -m viz_server --stop --port PORT` (or kill its pid).
"""
from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from compiler.paths import cache_dir
from compiler.trace.control import HEADER as TOKEN_HEADER
from compiler.trace.control import read_token

DEFAULT_PORT = 8000
PING_TIMEOUT = 0.5
REPO_ROOT = Path(__file__).resolve().parents[2]


def viewer_port() -> int:
  try:
    port = int(os.environ.get("VIZ_PORT", "") or DEFAULT_PORT)
  except ValueError:
    return DEFAULT_PORT
  return port if 0 < port < 65536 else DEFAULT_PORT


def _ping(port: int) -> bool | None:
  """True: a tinyviz viewer answers on 127.0.0.1:port; False: something else listens there; None: nothing does."""
  try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/ping", timeout=PING_TIMEOUT) as resp:
      return json.loads(resp.read().decode()).get("app") == "tinyviz"
  except urllib.error.HTTPError:
    return False
  except (urllib.error.URLError, OSError, ValueError) as e:
    reason = getattr(e, "reason", e)
    refused = isinstance(reason, ConnectionRefusedError)
    return None if refused else False


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _follow(port: int, path: str) -> int | None:
  """Ask the viewer on port to follow path; returns the trace id it got, or None if it refused (a viewer of another
  user, or of an older version: it has no token of ours)."""
  token = read_token(port)
  if token is None:
    return None
  req = urllib.request.Request(f"http://127.0.0.1:{port}/api/traces/follow", method="POST",
                               data=json.dumps({"path": path}).encode(),
                               headers={"Content-Type": "application/json", TOKEN_HEADER: token})
  try:
    with urllib.request.urlopen(req, timeout=5) as resp:
      tid = json.loads(resp.read().decode()).get("id")
      return tid if isinstance(tid, int) else None
  except (urllib.error.URLError, OSError, ValueError):
    return None


def _log_path(port: int) -> Path:
  return cache_dir() / f"viewer-{port}.log"


def spawn_viewer(trace_path: str, port: int) -> subprocess.Popen:
  """Start `python -m viz_server TRACE --port PORT --reuse` detached from this process (own session, no tty)."""
  log = _log_path(port)
  log.parent.mkdir(parents=True, exist_ok=True)
  env = dict(os.environ)
  env["VIZ"] = "0"  # the viewer must not record (or launch viewers) itself
  env.pop("VIZ_TRACE", None)
  env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
  kw: dict = {}
  if os.name == "posix":
    kw["start_new_session"] = True
  else:
    flags = ("DETACHED_PROCESS", "CREATE_NEW_PROCESS_GROUP")
    kw["creationflags"] = sum(getattr(subprocess, f, 0) for f in flags)
  with open(log, "ab") as out:
    return subprocess.Popen([sys.executable, "-m", "viz_server", trace_path, "--port", str(port), "--reuse"],
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, close_fds=True, env=env,
                            cwd=str(REPO_ROOT), **kw)


def launch_viewer(trace_path: str | os.PathLike) -> str | None:
  """Show trace_path in a viewer (reusing a running one on VIZ_PORT); prints and returns the URL, None on failure."""
  path = os.path.abspath(os.fspath(trace_path))
  port = viewer_port()
  state = _ping(port)
  if state:
    tid = _follow(port, path)
    if tid is not None:
      url = f"http://127.0.0.1:{port}/#t={tid}"
      print(f"VIZ: the viewer at {url} follows this trace", file=sys.stderr, flush=True)
      return url
    print(f"VIZ: the viewer on port {port} refused {path}; starting another one", file=sys.stderr, flush=True)
    port = _free_port()
  elif state is False:  # the port is taken by something else
    port = _free_port()
  try:
    proc = spawn_viewer(path, port)
  except OSError as e:
    print(f"VIZ: could not start the viewer: {e}", file=sys.stderr, flush=True)
    return None
  url = f"http://127.0.0.1:{port}/"
  print(f"VIZ: viewer starting at {url} (pid {proc.pid}, log {_log_path(port)})", file=sys.stderr, flush=True)
  atexit.register(_at_exit, proc, port)
  return url


def wants_wait() -> bool:
  """Whether a script that started the viewer waits for Ctrl-C at its end: in a terminal, unless VIZ_WAIT=0."""
  if os.environ.get("VIZ_WAIT", "") not in ("", "1"):
    return False
  try:
    return sys.stdin is not None and sys.stdin.isatty()
  except (ValueError, OSError):
    return False


def _at_exit(proc: subprocess.Popen, port: int) -> None:
  """At the end of a script that started the viewer: finish the trace, then (in a terminal) keep the script in the
  foreground serving until Ctrl-C stops both; elsewhere (CI, pipes, VIZ_WAIT=0) leave the viewer running alone."""
  from compiler.trace import recorder
  recorder.disable()  # the trace gets its `end` record before we wait (atexit runs this handler first)
  if proc.poll() is not None:
    return
  if not wants_wait():
    print(f"VIZ: the viewer keeps serving; stop it with `python -m viz_server --stop --port {port}`",
          file=sys.stderr, flush=True)
    return
  print("VIZ: done; the viewer is serving this trace. Press Ctrl-C to stop it.", file=sys.stderr, flush=True)
  try:
    proc.wait()
  except KeyboardInterrupt:
    proc.terminate()
    try:
      proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
      proc.kill()
    print("VIZ: viewer stopped", file=sys.stderr, flush=True)
