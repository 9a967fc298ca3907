"""Who holds a TCP socket on this machine, from Linux's /proc/net/tcp and tcp6: the one reading of that table for the
viewer's control token (which process listens on a port: vztrace/control.py) and for its uploads (which user
is on the other end of a loopback connection: viz_server/peer.py). Standard library only.

Reading /proc/net/tcp costs what the kernel's whole TCP hash table costs to walk, not what the file holds: ~10-15 ms
of CPU on a VM with a few hundred sockets, and the viewer asks once per connection (a page load opens ~8). So the
owner of one connection is asked of the kernel directly first (`socket_uid`: one sock_diag netlink request naming
the socket by its four addresses, O(1)), and the table is read only where netlink does not answer."""
from __future__ import annotations

import ipaddress
import socket
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


# sock_diag (linux/sock_diag.h, linux/inet_diag.h): one request for one socket, named by its addresses and ports
NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, NLMSG_ERROR = 4, 20, 1, 2
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_DIAG_ID = struct.Struct("!HH16s16s")  # inet_diag_sockid's ports and addresses (network order); then if, cookie
_DIAG_TAIL = struct.Struct("=III")  # the interface (any) and the cookie (INET_DIAG_NOCOOKIE: any socket)
_DIAG_MSG_UID = struct.Struct("=IIIII")  # inet_diag_msg after family/state/timer/retrans and the id: expires ... inode


def _unmapped(addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
  ip = ipaddress.ip_address(addr.split("%", 1)[0])
  return ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip


def socket_uid(local: tuple[str, int], remote: tuple[str, int]) -> int | None:
  """The uid owning the established TCP socket from local (address, port) to remote on this machine, asked of the
  kernel by netlink (sock_diag); None where it names no such socket or cannot be asked (not Linux, no permission):
  then read the table (tcp_sockets). IPv4-mapped IPv6 addresses are asked as the IPv4 socket they are."""
  try:
    src, dst = _unmapped(local[0]), _unmapped(remote[0])
  except ValueError:
    return None
  if src.version != dst.version or not hasattr(socket, "AF_NETLINK"):
    return None
  family = socket.AF_INET if src.version == 4 else socket.AF_INET6
  sockid = _DIAG_ID.pack(local[1], remote[1], src.packed.ljust(16, b"\0"), dst.packed.ljust(16, b"\0"))
  req = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << 1) + sockid + _DIAG_TAIL.pack(0, 0xFFFFFFFF,
                                                                                                  0xFFFFFFFF)
  try:
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
      nl.sendto(_NLMSG.pack(_NLMSG.size + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + req, (0, 0))
      got = nl.recv(65536)
  except OSError:
    return None
  if len(got) < _NLMSG.size:
    return None
  _, kind, _, _, _ = _NLMSG.unpack_from(got)
  if kind == NLMSG_ERROR or kind != SOCK_DIAG_BY_FAMILY or len(got) < _NLMSG.size + 4 + 48 + _DIAG_MSG_UID.size:
    return None
  msg = got[_NLMSG.size:]
  if (msg[0], msg[1]) != (family, 1) or msg[4:4 + _DIAG_ID.size] != sockid:  # ESTABLISHED, the socket asked for
    return None
  return _DIAG_MSG_UID.unpack_from(msg, 4 + 48)[3]
