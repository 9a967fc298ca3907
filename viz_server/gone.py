"""Stop a request's work once its client has gone: long loops (replaying steps, laying out a chain of steps) call
check(), which looks at the request's socket now and then and raises ClientGone when the peer has closed it. Work
already done stays cached; background work (no request socket) is never stopped here."""
from __future__ import annotations

import select
import socket
import threading
import time

EVERY_S = 0.05  # how often a loop looks at the socket (a poll and a peek: a few us)


class ClientGone(Exception):
  """The client of the request being served closed its connection."""


_local = threading.local()


def start(sock: socket.socket | None) -> None:
  """check() in this thread looks at `sock` (the request's connection) until stop()."""
  _local.sock, _local.next = sock, time.monotonic() + EVERY_S


def stop() -> None:
  _local.sock = None


def check() -> None:
  """Raise ClientGone if this thread serves a request whose client has closed the connection (looked at every
  EVERY_S at most)."""
  sock = getattr(_local, "sock", None)
  if sock is None:
    return
  now = time.monotonic()
  if now < _local.next:
    return
  _local.next = now + EVERY_S
  try:
    p = select.poll()  # (select.select fails on fds past 1024)
    p.register(sock, select.POLLIN)
    if p.poll(0) and sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
      raise ClientGone()
  except BlockingIOError:  # readable but nothing to read after all
    return
  except OSError:  # a closed socket: the client cannot get an answer either
    raise ClientGone() from None
