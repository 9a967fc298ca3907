"""Per-user folders: the one place that decides where tinyviz keeps traces, viewer logs and tokens, and BEAM results."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
  """$XDG_CACHE_HOME/tinyviz (default ~/.cache/tinyviz): per user, never a fixed name in /tmp."""
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return Path(base) / "tinyviz"


def trace_dir() -> Path:
  """Where the recorder writes traces when VIZ_TRACE does not say."""
  return cache_dir() / "traces"
