"""Who holds a TCP socket on this machine, from Linux's /proc/net/tcp and tcp6: the one reading of that table for the
viewer's control token (which process listens on a port: vztrace/control.py) and for its uploads (which user
is on the other end of a loopback connection: viz_server/peer.py). Standard library only."""
from __future__ import annotations

import ipaddress
import struct
from pathlib import Path
from typing import NamedTuple

LISTEN = "0A"  # the state column's values
ESTABLISHED = "01"


class TcpSocket(NamedTuple):
  local: ipaddress.IPv4Address | ipaddress.IPv6Address
  local_port: int
  remote_port: int
  uid: int
  inode: int


def _address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
  # the kernel prints each 32-bit word of the address in host byte order
  raw = b"".join(struct.pack("=I", int(hex_addr[i:i + 8], 16)) for i in range(0, len(hex_addr), 8))
  return ipaddress.ip_address(raw)


def tcp_sockets(state: str) -> list[TcpSocket] | None:
  """The TCP sockets (IPv4 and IPv6) in state (LISTEN, ESTABLISHED); None where /proc/net does not say (not Linux)."""
  out, known = [], False
  for name in ("tcp", "tcp6"):
    try:
      lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
    except OSError:
      continue
    known = True
    for line in lines:
      f = line.split()
      if len(f) < 10 or f[3] != state:
        continue
      local, _, lport = f[1].rpartition(":")
      out.append(TcpSocket(_address(local), int(lport, 16), int(f[2].rpartition(":")[2], 16), int(f[7]), int(f[9])))
  return out if known else None
