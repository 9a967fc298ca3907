"""The control token of a viewer started by the CLI: the secret a local process must send to make it follow a trace
file or stop.

Loopback is not enough: every user of the machine can reach 127.0.0.1, and "follow this path" would let another user
make the viewer (running as you) read your trace files and serve them. The token lives in a file only its owner can
read, in the per-user cache folder, one per port; `python -m viz_server --reuse/--stop` and `VIZ=1` read it from
there. Standard library only: the compiler's launcher uses it without Flask."""
from __future__ import annotations

import contextlib
import hmac
import os
import secrets
from pathlib import Path

from compiler.paths import cache_dir

HEADER = "X-Tinyviz-Token"


def token_dir() -> Path:
  return cache_dir() / "viewers"


def token_path(port: int) -> Path:
  return token_dir() / f"{int(port)}.token"


def write_token(port: int) -> str:
  """Make a new token for the viewer on port and store it where only this user can read it."""
  token = secrets.token_urlsafe(32)
  d = token_dir()
  d.mkdir(parents=True, exist_ok=True, mode=0o700)
  p = token_path(port)
  tmp = p.with_name(f"{p.name}.{os.getpid()}.tmp")
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  with os.fdopen(fd, "w") as f:
    f.write(token)
  os.replace(tmp, p)  # atomic: a reader sees the old token or the new one, never half of one
  return token


def read_token(port: int) -> str | None:
  """The token of the viewer on port, if this user started one there."""
  try:
    return token_path(port).read_text().strip() or None
  except OSError:
    return None


def remove_token(port: int, token: str) -> None:
  """Remove the token file if it is still this viewer's (a newer viewer on the same port may have replaced it)."""
  if read_token(port) == token:
    with contextlib.suppress(OSError):
      token_path(port).unlink()


def token_matches(expected: str | None, given: str | None) -> bool:
  return expected is not None and given is not None and hmac.compare_digest(expected.encode(), given.encode())
