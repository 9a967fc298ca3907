"""Issue 31: the Export and Compare buttons' children are bounded and owned. At most share.MAX_CHILDREN run at once
(more are refused with 503), a cross-site page cannot start one, each runs with its own CPU and memory limits, and
none outlives the viewer (SIGTERM: the viewer kills their process groups; SIGKILL: the kernel's parent-death signal).

A child is held alive by stopping it (SIGSTOP) as soon as it appears, so that what the test counts does not depend on
how fast an export is."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from contextlib import suppress
from pathlib import Path

import pytest
from support import hostile_traces as H
from support.proc_helpers import Events, alive, get_json, wait_exit, wait_until

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


def state(pid: int) -> str:
  try:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
  except OSError:
    return "gone"


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


def limits_set(pid: int) -> bool:
  """Whether the child has set its own limits (the first thing it does, with its parent-death signal)."""
  try:
    line = Path(f"/proc/{pid}/limits").read_text().split("Max cpu time")[1].split("\n")[0]
  except (OSError, IndexError):
    return False
  return line.split()[0] == str(share.CHILD_CPU_S)


def held_child(ppid: int, url: str, known: set[int], results: Events, set_up: bool = False) -> int:
  """Start a request of url in a thread and stop (SIGSTOP) the tool child it starts, as soon as it appears (set_up:
  once it has set its own limits); tries again where the child had finished before it could be stopped. The stopped
  child's pid."""
  for _ in range(20):
    th = threading.Thread(target=lambda: results.add(get(url)), daemon=True)
    th.start()
    pid = wait_until(lambda th=th: next((p for p in tool_children(ppid) if p not in known and
                                         (not set_up or limits_set(p))), None) or (not th.is_alive() and -1),
                     "the request to start a tool child")
    if pid == -1:
      continue
    known.add(pid)
    with suppress(ProcessLookupError):
      os.kill(pid, signal.SIGSTOP)
    stopped = wait_until(lambda pid=pid: state(pid) in ("T", "t", "Z", "X", "gone") and state(pid), "the child to stop")
    if stopped == "T":
      return pid
  raise AssertionError("no tool child could be held")


def release(pids: list[int]) -> None:
  for pid in pids:
    with suppress(ProcessLookupError):
      os.kill(pid, signal.SIGKILL)


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


def test_at_most_max_children_run_and_more_are_refused(viewer):
  url, (a, b) = viewer
  held: list[int] = []
  results = Events()  # each request's answer, recorded by its thread
  try:
    for _ in range(share.MAX_CHILDREN):
      held.append(held_child(os.getpid(), f"{url}/api/traces/{a}/export", set(held), results))
    assert get(f"{url}/api/traces/{b}/export") == 503
    assert get(f"{url}/api/compare?a={a}&b={b}") == 503
    assert len(tool_children(os.getpid())) == share.MAX_CHILDREN
  finally:
    release(held)
  results.wait_for(lambda got: len(got) >= len(held), "the held requests to be answered")
  assert get(f"{url}/api/compare?a={a}&b={b}") == 200  # a slot is free again once the held ones are gone


def test_each_child_has_its_own_limits_and_process_group(viewer):
  url, (a, _) = viewer
  results = Events()  # each request's answer, recorded by its thread
  pid = held_child(os.getpid(), f"{url}/api/traces/{a}/export", set(), results, set_up=True)
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


def _cli_viewer(tmp_path: Path) -> tuple[subprocess.Popen, str, int]:
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  env.update(PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp_path / "cache"), TMPDIR=str(tmp_path))
  proc = subprocess.Popen([sys.executable, "-m", "viz_server", str(H.small(tmp_path / "a.vztrace")), "--port", "0"],
                          env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  line = proc.stdout.readline()
  assert "serving 1 trace(s) at " in line, line + proc.stderr.read() if proc.poll() is not None else line
  url = line.split(" at ")[1].split()[0].rstrip("/")
  return proc, url, get_json(url + "/api/traces")[0]["id"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_child_outlives_the_viewer(tmp_path, sig):
  proc, url, t = _cli_viewer(tmp_path)
  results = Events()  # each request's answer, recorded by its thread
  child = None
  try:
    # SIGKILL: the kernel's parent-death signal, which the child asks for as it sets its limits
    child = held_child(proc.pid, f"{url}/api/traces/{t}/export", set(), results, set_up=sig == signal.SIGKILL)
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
