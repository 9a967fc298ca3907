"""Who is on the other end of a loopback connection: the user id owning the client's socket, from /proc/net/tcp
(Linux). It proves that an upload comes from the user who runs the viewer (their browser or script), which loopback
alone does not: every user of the machine can reach 127.0.0.1."""
from __future__ import annotations

from pathlib import Path

TCP_ESTABLISHED = "01"


def _port_of(hex_addr: str) -> int:
  return int(hex_addr.rpartition(":")[2], 16)


def peer_uid(client_port: int, server_port: int) -> int | None:
  """The uid of the socket connected from local port client_port to server_port (both ends on this machine), or
  None when /proc does not say or the answer is ambiguous."""
  uids = set()
  for name in ("tcp", "tcp6"):
    try:
      lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
    except OSError:
      continue
    for line in lines:
      f = line.split()
      if len(f) < 8 or f[3] != TCP_ESTABLISHED:
        continue
      if _port_of(f[1]) == client_port and _port_of(f[2]) == server_port:
        uids.add(int(f[7]))
  return uids.pop() if len(uids) == 1 else None
