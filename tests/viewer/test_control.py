"""The viewer's control token: only the user who started a viewer can make it follow a file or stop it."""
import json
import os
import socket
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from support.proc_helpers import read_until

from compiler import Ops, PatternMatcher, UOp, UPat, graph_rewrite
from compiler.trace import recorder
from vztrace import control

ROOT = Path(__file__).resolve().parents[2]


def test_token_file_is_private_and_removed_only_by_its_viewer(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  with socket.socket() as listening:  # this process plays the viewer: its token is proved by the socket it holds
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    port = listening.getsockname()[1]
    assert control.read_token(port) is None
    tok = control.write_token(port)
    p = control.token_path(port)
    assert p.parent == tmp_path / "tinyviz" / "viewers"
    assert stat.S_IMODE(p.stat().st_mode) == 0o600 and stat.S_IMODE(p.parent.stat().st_mode) == 0o700
    assert control.read_token(port) == tok and len(tok) >= 32
    assert control.live_viewer(port) == {"token": tok, "pid": os.getpid(), "port": port, "asked": port}
    newer = control.write_token(port, asked=8000)  # a new viewer on the same port, standing in for a busy 8000
    assert newer != tok
    control.remove_token(port, tok)  # the old one exiting leaves the new one's token alone
    assert control.read_token(port) == newer
    assert [r["port"] for r in control.my_viewers(asked=8000)] == [port] and control.my_viewers(asked=port) == []
  # the socket is closed: the pid is alive but no longer holds the port, so the token is not handed out
  assert control.owns_port(os.getpid(), port) is False and control.read_token(port) is None
  assert p.exists()  # (not stale: its process still runs)
  control.remove_token(port, newer)
  assert not p.exists()
  assert control.token_matches("abc", "abc") and not control.token_matches("abc", "abd")
  assert not control.token_matches(None, None) and not control.token_matches("abc", None)


def test_a_bare_token_of_an_older_viewer_is_never_handed_out(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  with socket.socket() as listening:
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    port = listening.getsockname()[1]
    control.token_dir().mkdir(parents=True)
    control.token_path(port).write_text("just-a-token-with-no-pid")
    assert control.read_token(port) is None


def test_only_the_process_holding_the_listening_socket_owns_the_port():
  with socket.socket() as listening:
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    port = listening.getsockname()[1]
    assert control.owns_port(os.getpid(), port) is True
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
      assert control.process_is_mine(child.pid) and control.owns_port(child.pid, port) is False
    finally:
      child.communicate(b"", timeout=120)
    assert not control.process_is_mine(child.pid)  # exited (and reaped)


def _trace(path: Path, name: str) -> Path:
  pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), lambda x: x)], name="add0")
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context(name):
      graph_rewrite(UOp.variable("x", 0, 9) + 0, pm, name="rw")
  finally:
    recorder.disable()
  return path


def _cli(cache: Path, *args: str, **kw) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  env.update(XDG_CACHE_HOME=str(cache), PYTHONPATH=str(ROOT))
  return subprocess.run([sys.executable, "-m", "viz_server", *args], env=env, capture_output=True, text=True,
                        timeout=60, **kw)


def _traces(port: int) -> list:
  with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/traces", timeout=5) as r:
    return json.loads(r.read().decode())


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture
def viewer(tmp_path):
  """A CLI viewer started by "alice" (her cache folder), serving one trace."""
  alice = tmp_path / "alice"
  port = _free_port()
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  env.update(XDG_CACHE_HOME=str(alice), PYTHONPATH=str(ROOT))
  proc = subprocess.Popen([sys.executable, "-m", "viz_server", str(_trace(tmp_path / "a.vztrace", "a")), "--port",
                           str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    read_until(proc.stdout, "tinyviz: serving", "the viewer to start")  # (said after it wrote its token)
    yield port, alice, proc
  finally:
    if proc.poll() is None:
      proc.kill()
    proc.wait(timeout=60)
    proc.stdout.close()


def test_another_user_can_neither_hand_over_files_nor_stop_the_viewer(viewer, tmp_path):
  port, alice, proc = viewer
  mallory = tmp_path / "mallory"
  other = _trace(tmp_path / "alice-secret.vztrace", "secret")
  r = _cli(mallory, str(other), "--reuse", "--port", str(port))
  assert r.returncode == 1 and "token" in r.stderr
  r = _cli(mallory, "--stop", "--port", str(port))
  assert r.returncode == 1 and "refused" in r.stderr
  assert [t["name"] for t in _traces(port)] == ["a.vztrace"] and proc.poll() is None
  # alice herself (her cache folder holds the token): the hand-over and --stop work
  r = _cli(alice, str(other), "--reuse", "--port", str(port))
  assert r.returncode == 0, r.stderr
  assert [t["name"] for t in _traces(port)] == ["a.vztrace", "alice-secret.vztrace"]
  r = _cli(alice, "--stop", "--port", str(port))
  assert r.returncode == 0, r.stderr
  assert proc.wait(timeout=120) == 0
  assert not (alice / "tinyviz" / "viewers" / f"{port}.token").exists()
