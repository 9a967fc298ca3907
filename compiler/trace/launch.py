"""Start the trace viewer for `VIZ=1`, or hand the trace to one that already runs. Uses only the standard library:
the compiler never imports Flask; the viewer is a separate, detached `python -m viz_server` process.

Behaviour (docs/architecture.md, "Live viewing"): the port is VIZ_PORT (default 8000). If this user's tinyviz viewer
answers there, it is asked (POST /api/traces/follow, with the control token the viewer left for this user:
vztrace/control.py, only once that viewer is proved to be the one listening) to also follow this trace; if
the port is busy otherwise, that is said once and the viewer this user started instead of it before is reused;
else a new viewer is started in its own session, following the trace file, logging to
<cache>/tinyviz/viewer-<port>.log. Either way the URL is printed once. The viewer outlives the script; stop it with
`python -m viz_server --stop --port PORT` (or kill its pid: it cleans up on SIGTERM too).
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from vztrace.control import HEADER as TOKEN_HEADER
from vztrace.control import live_viewer, my_viewers
from vztrace.paths import cache_dir

DEFAULT_PORT = 8000
PING_TIMEOUT = 0.5
READY_TIMEOUT = 30.0  # a script that started the viewer waits at most this long at its end for the viewer to serve
REPO_ROOT = Path(__file__).resolve().parents[2]
_warned: set[str] = set()


def _say(msg: str, once: bool = False) -> None:
  if once and msg in _warned:
    return
  _warned.add(msg)
  print(msg, file=sys.stderr, flush=True)


def viewer_port() -> int:
  """VIZ_PORT, or 8000 where it is unset; a value that is no port number is said to be so (once) and means 8000."""
  raw = os.environ.get("VIZ_PORT", "")
  if not raw.strip():
    return DEFAULT_PORT
  try:
    port = int(raw)
  except ValueError:
    port = 0
  if 0 < port < 65536:
    return port
  _say(f"VIZ: VIZ_PORT={raw!r} is not a port number (1-65535); using {DEFAULT_PORT}", once=True)
  return DEFAULT_PORT


def _ping(port: int) -> dict | bool | None:
  """What answers on 127.0.0.1:port: a tinyviz viewer (its /api/ping answer), False: something else, None: nothing."""
  try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/ping", timeout=PING_TIMEOUT) as resp:
      answer = json.loads(resp.read().decode())
      return answer if isinstance(answer, dict) and answer.get("app") == "tinyviz" else False
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
  """Ask this user's viewer on port to follow path; the trace id it got, or None. Nothing (neither the token nor the
  path) is sent unless the viewer is proved to be one this user started there (control.live_viewer): a viewer killed
  without clean-up leaves its token, and another user may listen on its port since."""
  rec = live_viewer(port)
  answer = _ping(port) if rec is not None else None
  if rec is None or not isinstance(answer, dict) or answer.get("pid") != rec["pid"]:
    return None
  req = urllib.request.Request(f"http://127.0.0.1:{port}/api/traces/follow", method="POST",
                               data=json.dumps({"path": path}).encode(),
                               headers={"Content-Type": "application/json", TOKEN_HEADER: rec["token"]})
  try:
    with urllib.request.urlopen(req, timeout=5) as resp:
      tid = json.loads(resp.read().decode()).get("id")
      return tid if isinstance(tid, int) else None
  except (urllib.error.URLError, OSError, ValueError):
    return None


def _log_path(port: int) -> Path:
  return cache_dir() / f"viewer-{port}.log"


def spawn_viewer(trace_path: str, port: int, instead_of: int | None = None) -> subprocess.Popen:
  """Start `python -m viz_server TRACE --port PORT --reuse` detached from this process (own session, no tty);
  instead_of: the busy port it stands in for (its token record says so, for later runs to find it)."""
  log = _log_path(port)
  log.parent.mkdir(parents=True, exist_ok=True)
  # VIZ may stay set: the viewer imports no compiler module (tests/project/test_import_direction.py)
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
  kw: dict = {}
  if os.name == "posix":
    kw["start_new_session"] = True
  else:
    flags = ("DETACHED_PROCESS", "CREATE_NEW_PROCESS_GROUP")
    kw["creationflags"] = sum(getattr(subprocess, f, 0) for f in flags)
  extra = ["--instead-of", str(instead_of)] if instead_of else []
  with open(log, "ab") as out:
    return subprocess.Popen([sys.executable, "-m", "viz_server", trace_path, "--port", str(port), "--reuse", *extra],
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, close_fds=True, env=env,
                            cwd=str(REPO_ROOT), **kw)


def _followed(port: int, path: str) -> str | None:
  tid = _follow(port, path)
  if tid is None:
    return None
  url = f"http://127.0.0.1:{port}/#t={tid}"
  _say(f"VIZ: the viewer at {url} follows this trace")
  return url


def launch_viewer(trace_path: str | os.PathLike, finish: Callable[[], object]) -> str | None:
  """Show trace_path in a viewer (reusing a running one on VIZ_PORT); prints and returns the URL, None on failure.
  finish ends the trace (the recorder's `disable`) at the script's end, before a viewer this started is waited on: the
  recorder passes it, so that this module needs no import of the recorder that imports it.

  Where VIZ_PORT is busy (another program, or a viewer that is not this user's), that is said once, and the viewer
  this user started instead of it before is reused; only if there is none is a new one started on a free port."""
  path = os.path.abspath(os.fspath(trace_path))
  asked = viewer_port()
  state = _ping(asked)
  if state is None:  # nothing listens: start the viewer there
    return _start(path, asked, None, finish)
  if isinstance(state, dict):
    url = _followed(asked, path)
    if url is not None:
      return url
    why = "the tinyviz viewer there is not one you started"
  else:
    why = "another program listens there"
  _say(f"VIZ: port {asked} is busy ({why}); using another port (set VIZ_PORT to choose one)")
  for rec in my_viewers(asked=asked):  # the viewer this user started instead before, if it still runs
    url = _followed(rec["port"], path) if rec["port"] != asked else None
    if url is not None:
      return url
  return _start(path, _free_port(), asked, finish)


def _start(path: str, port: int, instead_of: int | None, finish: Callable[[], object]) -> str | None:
  try:
    proc = spawn_viewer(path, port, instead_of)
  except OSError as e:
    _say(f"VIZ: could not start the viewer: {e}")
    return None
  url = f"http://127.0.0.1:{port}/"
  # the URL is said once the viewer listens (~1 s after the spawn: a click on it before was refused), by a thread,
  # so that the program runs on meanwhile; _at_exit waits for it, so that the URL comes before what it says
  announce = threading.Thread(target=_announce, args=(proc, url, port), name="viz-viewer-ready", daemon=True)
  announce.start()
  atexit.register(_at_exit, proc, port, finish, announce)
  return url


def _announce(proc: subprocess.Popen, url: str, port: int) -> None:
  """Print the viewer's URL once it serves (at most READY_TIMEOUT s after the spawn), or why there is none."""
  where = f"(pid {proc.pid}, log {_log_path(port)})"
  if _wait_serving(proc):
    _say(f"VIZ: viewer starting at {url} {where}")
  elif proc.poll() is not None:
    _say(f"VIZ: the viewer for {url} exited (status {proc.returncode}) before it served {where}")
  else:
    _say(f"VIZ: the viewer for {url} did not serve within {READY_TIMEOUT:.0f} s {where}")


def wants_wait() -> bool:
  """Whether a script that started the viewer waits for Ctrl-C at its end: in a terminal, unless VIZ_WAIT=0 or the
  process ignores SIGINT (started in the background by a script, say: Ctrl-C could never end the wait)."""
  if os.environ.get("VIZ_WAIT", "") not in ("", "1"):
    return False
  if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    return False
  try:
    return sys.stdin is not None and sys.stdin.isatty()
  except (ValueError, OSError):
    return False


def _wait_serving(proc: subprocess.Popen, timeout: float = READY_TIMEOUT) -> bool:
  """Wait (at most timeout s) until the viewer serves, proved by its token record, or exits: a script started right
  after this one must find it (where VIZ_PORT is busy it listens on a port of its own), not start another."""
  deadline = time.monotonic() + timeout
  while proc.poll() is None and time.monotonic() < deadline:
    if any(rec["pid"] == proc.pid for rec in my_viewers()):
      return True
    time.sleep(0.05)
  return False


def _at_exit(proc: subprocess.Popen, port: int, finish: Callable[[], object],
             announce: threading.Thread | None = None) -> None:
  """At the end of a script that started the viewer: finish the trace, then (in a terminal) keep the script in the
  foreground serving until Ctrl-C stops both; elsewhere (CI, pipes, VIZ_WAIT=0) leave the viewer running alone."""
  finish()  # the trace gets its `end` record before we wait (atexit runs this handler first)
  if not wants_wait():
    if announce is not None:  # the URL before what follows (it waits for the viewer to serve, READY_TIMEOUT at most)
      announce.join()
    if proc.poll() is not None or not _wait_serving(proc):
      return
    print(f"VIZ: the viewer keeps serving; stop it with `python -m viz_server --stop --port {port}`",
          file=sys.stderr, flush=True)
    return
  try:  # the message inside: a Ctrl-C right after it must still stop the viewer
    if announce is not None:
      announce.join()
    if proc.poll() is not None:
      return
    print("VIZ: done; the viewer is serving this trace. Press Ctrl-C to stop it.", file=sys.stderr, flush=True)
    # polled, not one blocking proc.wait(): a SIGINT that the kernel delivers to another thread (a kernel pool worker
    # of the user's script) only sets Python's flag, and a main thread blocked in waitpid would never see it
    while proc.poll() is None:
      time.sleep(0.2)
  except KeyboardInterrupt:
    proc.terminate()
    try:
      proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
      proc.kill()
    print("VIZ: viewer stopped", file=sys.stderr, flush=True)
