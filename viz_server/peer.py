"""Who is on the other end of a loopback connection: the user id owning the client's socket, asked of the kernel for
that one socket (sock_diag) or read from /proc/net/tcp (Linux). It proves that a request comes from the user who runs
the viewer (their browser or script), which loopback alone does not: every user of the machine can reach 127.0.0.1.

Every request is the owner's (issue 31: a trace holds argv, host, user, cwd, sources): `refusal` is asked of each one,
over every route (viz_server/app.py's owner_only wraps the whole WSGI app, socket.io included)."""
from __future__ import annotations

import os
import socket
import threading
import weakref
from typing import Any

from vztrace.control import HEADER as TOKEN_HEADER
from vztrace.control import token_matches
from vztrace.sockets import ESTABLISHED, socket_uid, tcp_sockets

LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")
REFUSED = "this viewer serves only the user who started it"


def peer_uid(client_port: int, server_port: int, client_addr: str | None = None,
             server_addr: str | None = None) -> int | None:
  """The uid of the socket connected from local port client_port to server_port (both ends on this machine), or
  None when the kernel does not say or the answer is ambiguous. With both addresses the kernel is asked for that one
  socket (vztrace.sockets.socket_uid, O(1)); else, or where it names none, /proc's table is read (O(sockets))."""
  if client_addr is not None and server_addr is not None:
    uid = socket_uid((client_addr, client_port), (server_addr, server_port))
    if uid is not None:
      return uid
  uids = {s.uid for s in tcp_sockets(ESTABLISHED) or () if s.local_port == client_port and s.remote_port == server_port}
  return uids.pop() if len(uids) == 1 else None


def _server_address(environ: dict) -> str | None:
  """The address this request's connection reached (the accepted socket's own end), where the server says."""
  sock = environ.get("werkzeug.socket")
  try:
    return str(sock.getsockname()[0]) if sock is not None else None
  except (OSError, AttributeError, IndexError, TypeError):
    return None


def client_uid(environ: dict) -> int | None:
  """peer_uid of a WSGI request's client (None where its ports are not numbers: not over a socket)."""
  port, server_port = str(environ.get("REMOTE_PORT")), str(environ.get("SERVER_PORT"))
  if not (port.isdigit() and server_port.isdigit()):
    return None
  return peer_uid(int(port), int(server_port), environ.get("REMOTE_ADDR"), _server_address(environ))


def _owners_peer(environ: dict) -> bool:
  """Whether the client of a request over a socket is a process of the user running this one. Where /proc names
  no local socket: refused for a loopback peer (it must be there), taken for a peer on another machine (reachable
  only where the viewer was bound to a network address on purpose: __main__ warns that this shares the traces), and
  taken where the platform has no /proc/net to ask (not Linux)."""
  if not (str(environ.get("REMOTE_PORT")).isdigit() and str(environ.get("SERVER_PORT")).isdigit()):
    return False
  uid = client_uid(environ)
  if uid is not None:
    return uid == os.getuid()
  if tcp_sockets(ESTABLISHED) is None:
    return True
  return environ.get("REMOTE_ADDR") not in LOOPBACK


class OwnerCheck:
  """The verdict of _owners_peer once per connection (a keep-alive connection's peer does not change; /proc/net/tcp
  is read once for it, not per request)."""

  def __init__(self) -> None:
    self.lock = threading.Lock()
    self.verdicts: weakref.WeakKeyDictionary[socket.socket, bool] = weakref.WeakKeyDictionary()

  def refusal(self, environ: dict, token: str | None) -> str | None:
    """Why the request must be refused (403), or None: it comes with the control token, from the viewer's user, or
    not over a socket at all (a WSGI test client in this process)."""
    if environ.get("REMOTE_PORT") is None:
      return None
    if token_matches(token, environ.get("HTTP_" + TOKEN_HEADER.upper().replace("-", "_"))):
      return None
    sock: Any = environ.get("werkzeug.socket")
    try:
      with self.lock:
        known = self.verdicts.get(sock)
    except TypeError:  # not a socket that takes weak references: asked each time
      known = None
    if known is None:
      known = _owners_peer(environ)
      try:
        with self.lock:
          self.verdicts[sock] = known
      except TypeError:
        pass
    return None if known else REFUSED
