"""Who is on the other end of a loopback connection: the user id owning the client's socket, from /proc/net/tcp
(Linux). It proves that an upload comes from the user who runs the viewer (their browser or script), which loopback
alone does not: every user of the machine can reach 127.0.0.1."""
from __future__ import annotations

from vztrace.sockets import ESTABLISHED, tcp_sockets


def peer_uid(client_port: int, server_port: int) -> int | None:
  """The uid of the socket connected from local port client_port to server_port (both ends on this machine), or
  None when /proc does not say or the answer is ambiguous."""
  uids = {s.uid for s in tcp_sockets(ESTABLISHED) or () if s.local_port == client_port and s.remote_port == server_port}
  return uids.pop() if len(uids) == 1 else None
