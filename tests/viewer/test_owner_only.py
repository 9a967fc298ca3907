"""Issue 31: on a shared machine every route is the owner's. A connection from another user of the machine gets 403
on the page, static files, every API route and socket.io alike; the user who started the viewer (or a holder of its
control token) is served."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest
from support import hostile_traces as H

from viz_server import peer
from viz_server.__main__ import bind
from viz_server.app import create_app
from vztrace.control import HEADER
from vztrace.sockets import TcpSocket

AS_NOBODY = """
import encodings.idna, os, sys, urllib.request, urllib.error  # imported before dropping to a user who cannot read them
os.setgid(65534); os.setuid(65534)  # another user of the machine
for url in sys.argv[1:]:
  try:
    with urllib.request.urlopen(url, timeout=60) as r:
      print(r.status, r.read()[:0].decode())
  except urllib.error.HTTPError as e:
    print(e.code)
"""


def paths(t: int) -> list[str]:
  return ["/", "/static/app.js", "/highlight.css", "/api/traces", f"/api/traces/{t}/contexts", "/api/boot",
          f"/api/traces/{t}/rewrites/0", f"/api/traces/{t}/nodes/1", f"/api/traces/{t}/export",
          "/socket.io/?EIO=4&transport=polling"]


@pytest.fixture
def served(tmp_path):
  """An in-process viewer on a free port with its control token: (base url, trace id)."""
  app = create_app([H.small(tmp_path / "s.vztrace")], follow=False)
  app.extensions["tinyviz"]["control_token"] = "sesame"
  srv = bind(app, "127.0.0.1", 0)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  try:
    yield f"http://127.0.0.1:{srv.port}", app.extensions["tinyviz"]["store"].entries()[0]["id"]
  finally:
    app.extensions["tinyviz"]["children"].kill_all()
    srv.shutdown()
    app.extensions["tinyviz"]["store"].stop()
    srv.server_close()


def status(url: str, headers: dict | None = None) -> int:
  try:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=120) as r:
      r.read()
      return r.status
  except urllib.error.HTTPError as e:
    return e.code


@pytest.mark.skipif(os.name != "posix" or os.getuid() != 0 or not os.path.exists("/proc/net/tcp"),
                    reason="needs root (to act as another user) and Linux /proc")
def test_another_user_is_refused_on_every_route(served):
  url, t = served
  r = subprocess.run([sys.executable, "-c", AS_NOBODY, *(url + p for p in paths(t))], capture_output=True, text=True,
                     timeout=300, cwd="/")
  assert r.stdout.split() == ["403"] * len(paths(t)), r.stdout + r.stderr[-500:]
  assert [status(url + p) for p in paths(t)] == [200] * len(paths(t))


def test_a_peer_of_another_uid_is_refused_and_the_token_lets_in(served, monkeypatch):
  url, t = served
  real = peer.peer_uid
  monkeypatch.setattr(peer, "peer_uid", lambda c, s: None if real(c, s) is None else os.getuid() + 1)
  assert [status(url + p) for p in paths(t)] == [403] * len(paths(t))
  assert status(url + "/api/traces", {HEADER: "sesame"}) == 200
  assert status(url + "/api/traces", {HEADER: "wrong"}) == 403
  monkeypatch.setattr(peer, "peer_uid", real)
  assert [status(url + p) for p in paths(t)] == [200] * len(paths(t))


def test_an_unknown_loopback_peer_is_refused_a_network_peer_is_not(monkeypatch):
  """Where /proc names no socket for the peer: one on loopback must be there (refused), one on another machine is
  reachable only where the viewer was bound to a network address on purpose (taken)."""
  env = {"REMOTE_PORT": 40000, "SERVER_PORT": "8000"}
  monkeypatch.setattr(peer, "tcp_sockets", lambda state: [])
  check = peer.OwnerCheck()
  assert check.refusal({**env, "REMOTE_ADDR": "127.0.0.1"}, None) == peer.REFUSED
  assert check.refusal({**env, "REMOTE_ADDR": "::1"}, None) == peer.REFUSED
  assert check.refusal({**env, "REMOTE_ADDR": "192.0.2.7"}, None) is None
  mine = TcpSocket(None, 40000, 8000, os.getuid(), 1)  # type: ignore[arg-type]
  monkeypatch.setattr(peer, "tcp_sockets", lambda state: [mine, mine._replace(uid=os.getuid() + 1)])
  assert check.refusal({**env, "REMOTE_ADDR": "127.0.0.1"}, None) == peer.REFUSED  # ambiguous
  monkeypatch.setattr(peer, "tcp_sockets", lambda state: [mine])
  assert check.refusal({**env, "REMOTE_ADDR": "127.0.0.1"}, None) is None
  assert check.refusal({"REMOTE_ADDR": "127.0.0.1"}, None) is None  # not over a socket: a test client here
