"""Issue 31: on a shared machine every route is the owner's. A connection from another user of the machine gets 403
on the page, static files, every API route and socket.io alike; the user who started the viewer (or a holder of its
control token) is served."""
from __future__ import annotations

import os
import socket
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
from vztrace.sockets import ESTABLISHED, TcpSocket, socket_uid, tcp_sockets

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
  monkeypatch.setattr(peer, "peer_uid", lambda *a: None if real(*a) is None else os.getuid() + 1)
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


AS_NOBODY_CONNECT = """
import encodings.idna, os, socket, sys  # imported before dropping to a user who cannot read them
os.setgid(65534); os.setuid(65534)
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print(c.getsockname()[1], flush=True)
sys.stdin.read()  # holds the connection until the test is done
"""


def test_the_kernel_names_one_connections_owner_without_reading_the_table():
  """socket_uid asks the kernel for one socket (sock_diag), agreeing with /proc's table; another user's socket is
  theirs; a socket that does not exist is None (the caller then reads the table)."""
  srv = socket.socket()
  srv.bind(("127.0.0.1", 0))
  srv.listen()
  with srv, socket.create_connection(srv.getsockname()) as c:
    conn, _ = srv.accept()
    with conn:
      got = socket_uid(c.getsockname(), c.getpeername())
      if got is None and sys.platform.startswith("linux"):
        pytest.fail("the kernel answered no sock_diag request for a live loopback socket")
      table = {s.uid for s in tcp_sockets(ESTABLISHED) or () if s.local_port == c.getsockname()[1]}
      assert table == {got} == {os.getuid()}
      assert socket_uid(conn.getsockname(), conn.getpeername()) == os.getuid()  # the server's end, same user
      assert socket_uid(("127.0.0.1", c.getsockname()[1]), ("127.0.0.1", 1)) is None  # no such connection
      assert socket_uid(("::ffff:127.0.0.1", c.getsockname()[1]), c.getpeername()) == os.getuid()  # mapped
      if os.getuid() == 0:  # another user's connection, to this listener
        p = subprocess.Popen([sys.executable, "-c", AS_NOBODY_CONNECT, str(srv.getsockname()[1])], cwd="/",
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
          port = int(p.stdout.readline())
          theirs, _ = srv.accept()
          with theirs:
            assert socket_uid(("127.0.0.1", port), srv.getsockname()) == 65534
            assert peer.peer_uid(port, srv.getsockname()[1], "127.0.0.1", "127.0.0.1") == 65534
        finally:
          p.stdin.close()
          p.wait(timeout=60)


def test_a_connection_is_checked_without_reading_procs_table(served, monkeypatch):
  """The owner check costs one kernel question per connection, not a walk of every TCP socket (~10 ms of CPU)."""
  url, t = served
  reads = []
  real = peer.tcp_sockets
  monkeypatch.setattr(peer, "tcp_sockets", lambda state: reads.append(state) or real(state))
  assert [status(url + p) for p in paths(t)[:4]] == [200] * 4
  assert reads == []
