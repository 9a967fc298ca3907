"""The control token of a viewer started by the CLI: the secret a local process must send to make it follow a trace
file or stop, and the record that tells this user's processes where their viewers run.

Loopback is not enough: every user of the machine can reach 127.0.0.1, and "follow this path" would let another user
make the viewer (running as you) read your trace files and serve them. The token lives in a file only its owner can
read, in the per-user cache folder, one per port, with the viewer's pid and the port it was asked for
(`viewers/<port>.token`, JSON). A token is handed to the server on that port only once it is proved to be the viewer
that wrote it: its pid runs, is this user's and (where /proc tells) holds the socket listening on the port. A token
whose process is gone is stale: ignored and removed. Without that check, once a viewer died without removing its
token (kill -9), whoever listens on its port next (another user's fake viewer) would be sent the token and trace paths.
Standard library only: the compiler's launcher uses it without Flask."""
from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import os
import secrets
from pathlib import Path

from vztrace.paths import cache_dir
from vztrace.sockets import LISTEN, tcp_sockets

HEADER = "X-Tinyviz-Token"
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")


def token_dir() -> Path:
  return cache_dir() / "viewers"


def token_path(port: int) -> Path:
  return token_dir() / f"{int(port)}.token"


def write_token(port: int, asked: int | None = None) -> str:
  """Make a new token for this process's viewer listening on port (asked: the port it was asked for, where that one
  was busy) and store it, with this pid, where only this user can read it."""
  token = secrets.token_urlsafe(32)
  d = token_dir()
  d.mkdir(parents=True, exist_ok=True, mode=0o700)
  p = token_path(port)
  tmp = p.with_name(f"{p.name}.{os.getpid()}.tmp")
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  with os.fdopen(fd, "w") as f:
    json.dump({"token": token, "pid": os.getpid(), "port": int(port), "asked": int(asked or port)}, f)
  os.replace(tmp, p)  # atomic: a reader sees the old token or the new one, never half of one
  return token


def _load(path: Path) -> dict | None:
  """The record in a token file; None if there is none or it is not one (an older viewer's bare token: no pid to
  check, so it is never trusted)."""
  try:
    rec = json.loads(path.read_text())
  except (OSError, ValueError):
    return None
  if not isinstance(rec, dict) or not isinstance(rec.get("token"), str) or not rec["token"]:
    return None
  if not all(type(rec.get(k)) is int and rec[k] > 0 for k in ("pid", "port", "asked")):
    return None
  return rec


def process_is_mine(pid: int) -> bool:
  """Whether process pid runs (not a zombie) as this user (elsewhere than on POSIX: cannot be told, so True)."""
  if os.name != "posix":  # (os.kill(pid, 0) would send Ctrl-C there)
    return True
  try:
    os.kill(pid, 0)
  except (ProcessLookupError, PermissionError, OverflowError):  # PermissionError: another user's process
    return False
  proc = Path(f"/proc/{pid}")
  try:
    if proc.stat().st_uid != os.getuid():  # root may signal anyone's process: ask who owns it
      return False
    return (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
  except FileNotFoundError:
    return not proc.parent.joinpath("self").exists()  # no /proc at all: os.kill said it is ours
  except (OSError, IndexError):
    return False


def _listeners(port: int) -> list[tuple[int, int]] | None:
  """(uid, socket inode) of each socket listening on port that a connection to 127.0.0.1:port can reach; None
  where /proc/net does not say (not Linux)."""
  listening = tcp_sockets(LISTEN)
  if listening is None:
    return None
  found = []
  for s in listening:
    v4 = s.local.ipv4_mapped if isinstance(s.local, ipaddress.IPv6Address) else s.local
    if s.local_port == port and (s.local.is_unspecified or v4 == LOOPBACK):
      found.append((s.uid, s.inode))
  return found


def owns_port(pid: int, port: int) -> bool | None:
  """Whether this user's process pid holds every socket listening on 127.0.0.1:port; None where that cannot be told."""
  listeners = _listeners(port)
  if listeners is None:
    return None
  if not listeners:
    return False
  try:
    fds = {os.readlink(e.path) for e in os.scandir(f"/proc/{pid}/fd")}
  except OSError:
    return False
  uid = os.getuid()
  return all(owner == uid and f"socket:[{inode}]" in fds for owner, inode in listeners)


def _discard(path: Path, stale: dict) -> None:
  """Remove a stale token file, unless a new viewer replaced it meanwhile (then its file stays)."""
  grabbed = path.with_name(f"{path.name}.{os.getpid()}.stale")
  try:
    os.rename(path, grabbed)  # atomic: whatever is there now is ours to look at
  except OSError:
    return
  try:
    if _load(grabbed) != stale:  # a viewer wrote a new token in between: put it back unless an even newer one came
      with contextlib.suppress(OSError):
        os.link(grabbed, path)
  finally:
    with contextlib.suppress(OSError):
      grabbed.unlink()


def live_viewer(port: int) -> dict | None:
  """The record ({token, pid, port, asked}) of this user's viewer on port, only if that viewer is proved to run there:
  its pid is alive, this user's, and holds the listening socket. A record whose process is gone is removed."""
  path = token_path(port)
  rec = _load(path)
  if rec is None or rec["port"] != port:
    return None
  if not process_is_mine(rec["pid"]):
    _discard(path, rec)
    return None
  if owns_port(rec["pid"], port) is False:  # alive, but not (or no longer, or not yet) the one on this port
    return None
  return rec


def read_token(port: int) -> str | None:
  """The token of the viewer on port, if this user started it and it is proved to be the one listening there."""
  rec = live_viewer(port)
  return rec["token"] if rec else None


def my_viewers(asked: int | None = None) -> list[dict]:
  """This user's proved-live viewers (those asked for port `asked`, if given), the most recently started first."""
  found = []
  try:
    for p in token_dir().glob("*.token"):
      with contextlib.suppress(OSError):
        found.append((p.stat().st_mtime_ns, p.stem))
  except OSError:
    return []
  out = []
  for _, stem in sorted(found, reverse=True):
    if not stem.isdigit():
      continue
    rec = live_viewer(int(stem))
    if rec is not None and (asked is None or rec["asked"] == asked):
      out.append(rec)
  return out


def remove_token(port: int, token: str) -> None:
  """Remove the token file if it is still this viewer's (a newer viewer on the same port may have replaced it)."""
  rec = _load(token_path(port))
  if rec is not None and token_matches(rec["token"], token):
    with contextlib.suppress(OSError):
      token_path(port).unlink()


def token_matches(expected: str | None, given: str | None) -> bool:
  return expected is not None and given is not None and hmac.compare_digest(expected.encode(), given.encode())
