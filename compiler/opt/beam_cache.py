"""The on-disk BEAM cache: one small JSON file per (kernel AST, target, beam width), never pickle.

An entry holds the opts the kernel gets and how that choice was confirmed against the hand-coded kernel:
"pair" (BEAM's winner re-timed alone in turns with it, compiler.opt.search) or "sequence" (each timed in its place in
a schedule's run, compiler.engine.confirm_schedule). A "pair" entry also keeps BEAM's own winner (`beam_opts`), so a
schedule can confirm it in sequence without searching again; a "sequence" entry is final."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.opt.kernel import Opt
from compiler.opt.target import Target
from compiler.uop import UOp, pretty
from vztrace.paths import cache_dir as user_cache_dir

CACHE_VERSION = 1
MAX_ENTRY_BYTES = 1 << 16  # an entry is a few hundred bytes; anything far bigger was not written by cache_put
CONFIRMED = ("pair", "sequence")


@dataclass(frozen=True)
class CacheEntry:
  """A cached BEAM result: the opts to apply, their time, how they were confirmed (CONFIRMED), and BEAM's own winner
  (differs from opts where the confirmation kept the heuristics' opts)."""
  opts: list[Opt]
  time: float | None
  confirmed: str
  beam_opts: list[Opt]


def cache_dir() -> Path:
  """BEAM_CACHE_DIR, else the per-user cache: $XDG_CACHE_HOME/tinyviz/beam (default ~/.cache)."""
  if d := os.environ.get("BEAM_CACHE_DIR"):
    return Path(d)
  return user_cache_dir() / "beam"


def cache_key(ast: UOp, target: Target, amt: int, cap: int = 0) -> str:
  """A hash of the kernel's printed AST (its name left out) with the machine, the beam width and the per-round cap
  of candidates (0: none; a capped search may miss what an uncapped one finds, so they do not share results)."""
  text = pretty(ast.replace(arg=None))
  capped = f"cap={cap}\n" if cap else ""
  h = hashlib.sha256(f"v{CACHE_VERSION}\n{target.key}\nBEAM={amt}\n{capped}{text}".encode())
  return h.hexdigest()


def _opts(raw: Any) -> list[Opt] | None:
  if not isinstance(raw, list) or len(raw) > 64:
    return None
  try:
    return [Opt.from_json(o) for o in raw]
  except ValueError:
    return None


def cache_get(key: str) -> CacheEntry | None:
  """The cached entry for key, or None when absent, unreadable or not what this version wrote (an entry without
  `confirmed` was written before schedules confirmed in sequence: "pair")."""
  path = cache_dir() / f"{key}.json"
  try:
    with open(path, "rb") as f:
      raw_bytes = f.read(MAX_ENTRY_BYTES + 1)
    if len(raw_bytes) > MAX_ENTRY_BYTES:
      return None
    data: Any = json.loads(raw_bytes)
  except (OSError, ValueError, RecursionError):  # RecursionError: absurdly nested JSON
    return None
  if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or data.get("key") != key:
    return None
  t, confirmed = data.get("time"), data.get("confirmed", "pair")
  opts, beam_opts = _opts(data.get("opts")), _opts(data.get("beam_opts", data.get("opts")))
  if opts is None or beam_opts is None or not (t is None or type(t) in (int, float)) or confirmed not in CONFIRMED:
    return None
  return CacheEntry(opts, t, confirmed, beam_opts)


def cache_put(key: str, opts: list[Opt], time_s: float | None, kname: str = "", confirmed: str = "pair",
              beam_opts: list[Opt] | None = None) -> Path | None:
  """Write the entry atomically (temp file + rename); returns its path, or None if the cache is not writable.
  `beam_opts`: BEAM's own winner where the confirmation kept other opts (default: opts)."""
  if confirmed not in CONFIRMED:
    raise ValueError(f"confirmed must be one of {CONFIRMED}, got {confirmed!r}")
  d = cache_dir()
  data = {"version": CACHE_VERSION, "key": key, "kname": kname, "opts": [o.to_json() for o in opts],
          "time": time_s if time_s is not None and time_s == time_s and time_s != float("inf") else None,
          "confirmed": confirmed, "beam_opts": [o.to_json() for o in (opts if beam_opts is None else beam_opts)]}
  tmp = None
  try:
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".beam-", suffix=".json", dir=d)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      json.dump(data, f)
    os.replace(tmp, d / f"{key}.json")
  except OSError:
    if tmp is not None:
      with contextlib.suppress(OSError):
        os.unlink(tmp)
    return None
  return d / f"{key}.json"
