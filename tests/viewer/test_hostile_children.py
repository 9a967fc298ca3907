"""Issue 31: the Export and Compare buttons' children are bounded and owned. At most share.MAX_CHILDREN run at once
(more are refused with 503), a cross-site page cannot start one, each runs with its own CPU and memory limits, and
none outlives the viewer (SIGTERM: the viewer kills their process groups; SIGKILL: the kernel's parent-death signal).

A child is held alive by tests/support/sitecustomize.py: it tells the test its pid over a Unix socket and waits there
(at its start, or once it has bound itself), so that what the test counts does not depend on how fast an export is
and no test looks for children in /proc until they show up."""
from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from contextlib import suppress
from pathlib import Path

import pytest
from support import hostile_traces as H
from support.proc_helpers import Events, alive, get_json, wait_exit

from viz_server import share
from viz_server.__main__ import bind
from viz_server.app import create_app

ROOT = Path(__file__).resolve().parents[2]


def tool_children(ppid: int) -> list[int]:
  """Pids of the running trace-tool processes (`viz_server.tools`) whose parent is ppid."""
  out = []
  for d in Path("/proc").iterdir():
    if not d.name.isdigit():
      continue
    try:
      stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
      argv = (d / "cmdline").read_bytes().split(b"\0")
    except OSError:
      continue
    if int(stat[1]) == ppid and stat[0] not in "ZX" and b"viz_server.tools" in argv:
      out.append(int(d.name))
  return out


def get(url: str, headers: dict | None = None) -> int:
  """The status of a GET (the body is read and dropped)."""
  try:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=300) as r:
      r.read()
      return r.status
  except urllib.error.HTTPError as e:
    return e.code
  except OSError:  # the viewer went away mid-request
    return -1


class Holds:
  """The listening end of the socket that held tool children connect to (support/sitecustomize.py), and the
  environment that makes a viewer's children hold: at "start" (before they bound themselves) or "trace" (after)."""

  def __init__(self, folder: Path, at: str = "trace") -> None:
    self.path = str(folder / "hold.sock")
    self.sock = socket.socket(socket.AF_UNIX)
    self.sock.bind(self.path)
    self.sock.listen(8)
    self.conns: list[socket.socket] = []  # one per held child: it goes on when this end closes
    paths = [str(ROOT / "tests" / "support"), os.environ.get("PYTHONPATH")]
    self.env = {"TINYVIZ_HOLD_CHILD": self.path, "TINYVIZ_HOLD_AT": at,
                "PYTHONPATH": os.pathsep.join(p for p in paths if p)}

  def close(self) -> None:
    """Let the held children go on, and hold no more (a child that finds nobody listening goes on at once)."""
    for c in self.conns:
      c.close()
    self.sock.close()


def held_child(holds: Holds, url: str, results: Events) -> int:
  """Request url in a thread (its status goes to results); the pid of the tool child the request starts, which holds
  until released. Fails as soon as the request is answered without one."""
  answered_r, answered_w = os.pipe()

  def request() -> None:
    results.add(get(url))
    with suppress(OSError):  # (nobody listens any more once a child was held)
      os.write(answered_w, b"\n")
    os.close(answered_w)
  threading.Thread(target=request, daemon=True).start()
  try:
    ready, _, _ = select.select([holds.sock, answered_r], [], [], 120)
  finally:
    os.close(answered_r)
  if holds.sock not in ready:
    raise AssertionError(f"no tool child came for {url}: answers so far {results.snapshot()}")
  conn, _ = holds.sock.accept()
  holds.conns.append(conn)
  conn.settimeout(60)
  with conn.makefile() as f:
    return int(f.readline())


def release(pids: list[int]) -> None:
  for pid in pids:
    with suppress(ProcessLookupError):
      os.kill(pid, signal.SIGKILL)


@pytest.fixture
def holds(tmp_path, monkeypatch):
  """Tool children of this process hold once they have bound themselves (the in-process viewer's: they inherit
  this environment)."""
  h = Holds(tmp_path)
  for k, v in h.env.items():
    monkeypatch.setenv(k, v)
  yield h
  h.close()


@pytest.fixture
def viewer(tmp_path):
  """An in-process viewer on a free port serving two small traces: (url, trace ids)."""
  app = create_app([H.small(tmp_path / "a.vztrace"), H.small(tmp_path / "b.vztrace")], follow=False)
  srv = bind(app, "127.0.0.1", 0)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  ids = [e["id"] for e in app.extensions["tinyviz"]["store"].entries()]
  try:
    yield f"http://127.0.0.1:{srv.port}", ids
  finally:
    app.extensions["tinyviz"]["children"].kill_all()
    srv.shutdown()
    app.extensions["tinyviz"]["store"].stop()
    srv.server_close()


def test_at_most_max_children_run_and_more_are_refused(viewer, holds):
  url, (a, b) = viewer
  held: list[int] = []
  results = Events()  # each request's answer, recorded by its thread
  try:
    for _ in range(share.MAX_CHILDREN):
      held.append(held_child(holds, f"{url}/api/traces/{a}/export", results))
    assert get(f"{url}/api/traces/{b}/export") == 503
    assert get(f"{url}/api/compare?a={a}&b={b}") == 503
    assert len(tool_children(os.getpid())) == share.MAX_CHILDREN
  finally:
    release(held)
    holds.close()  # (the next child goes on without holding)
  results.wait_for(lambda got: len(got) >= len(held), "the held requests to be answered")
  assert get(f"{url}/api/compare?a={a}&b={b}") == 200  # a slot is free again once the held ones are gone


def test_each_child_has_its_own_limits_and_process_group(viewer, holds):
  url, (a, _) = viewer
  results = Events()  # each request's answer, recorded by its thread
  pid = held_child(holds, f"{url}/api/traces/{a}/export", results)  # (held once it has bound itself)
  try:
    limits = Path(f"/proc/{pid}/limits").read_text()
    cpu = limits.split("Max cpu time")[1].split()
    mem = limits.split("Max address space")[1].split()
    assert int(cpu[0]) == share.CHILD_CPU_S and int(mem[0]) == share.CHILD_MEMORY, limits
    assert os.getpgid(pid) == pid != os.getpgid(0)  # its own group: killed as one, apart from the viewer's
  finally:
    release([pid])


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                                     {"Sec-Fetch-Site": "same-site"}])
def test_a_cross_site_request_starts_no_child(viewer, headers):
  url, (a, b) = viewer
  assert get(f"{url}/api/traces/{a}/export", headers) == 403
  assert get(f"{url}/api/compare?a={a}&b={b}", headers) == 403
  assert get(f"{url}/api/traces/{a}/export", {"Sec-Fetch-Site": "same-origin"}) == 200  # the page's own fetch


def _cli_viewer(tmp_path: Path, holds: Holds) -> tuple[subprocess.Popen, str, int]:
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), TMPDIR=str(tmp_path), **holds.env)
  env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env["PYTHONPATH"]])
  proc = subprocess.Popen([sys.executable, "-m", "viz_server", str(H.small(tmp_path / "a.vztrace")), "--port", "0"],
                          env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  line = proc.stdout.readline()
  assert "serving 1 trace(s) at " in line, line + proc.stderr.read() if proc.poll() is not None else line
  url = line.split(" at ")[1].split()[0].rstrip("/")
  return proc, url, get_json(url + "/api/traces")[0]["id"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_child_outlives_the_viewer(tmp_path, sig):
  # SIGTERM: the child holds before it asked for a parent-death signal, so only the viewer's kill can end it;
  # SIGKILL: only that signal can, which the child asks for as it sets its limits
  holds = Holds(tmp_path, at="start" if sig == signal.SIGTERM else "trace")
  proc, url, t = _cli_viewer(tmp_path, holds)
  results = Events()  # each request's answer, recorded by its thread
  child = None
  try:
    child = held_child(holds, f"{url}/api/traces/{t}/export", results)
    proc.send_signal(sig)
    proc.communicate(timeout=120)
    wait_exit(child, "the viewer's export child to die with the viewer", timeout=60)
    assert not alive(child)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.communicate(timeout=60)
    if child is not None:
      release([child])
    holds.close()
