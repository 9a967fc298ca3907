"""Per-user folders: the one place that decides where tinyviz keeps traces, viewer logs and tokens, BEAM results and
compiled kernels."""
from __future__ import annotations

import os
import stat
from pathlib import Path


def cache_dir() -> Path:
  """$XDG_CACHE_HOME/tinyviz (default ~/.cache/tinyviz): per user, never a fixed name in /tmp."""
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return Path(base) / "tinyviz"


def trace_dir() -> Path:
  """Where the recorder writes traces when VIZ_TRACE does not say."""
  return cache_dir() / "traces"


def private_dir(path: Path) -> Path:
  """`path` made (parents too) as a folder only its user may enter (0700), and checked to be one: a real folder (not
  a link) owned by this user, its group and other bits cleared if set. OSError where it is not this user's."""
  path.mkdir(parents=True, exist_ok=True, mode=0o700)
  st = os.lstat(path)
  if not stat.S_ISDIR(st.st_mode):
    raise OSError(f"{path} is not a folder")
  if hasattr(os, "getuid") and st.st_uid != os.getuid():
    raise OSError(f"{path} belongs to another user (uid {st.st_uid})")
  if st.st_mode & 0o077:  # made by an older version, or under a loose umask: what is in it is the user's alone
    os.chmod(path, 0o700)
  return path
