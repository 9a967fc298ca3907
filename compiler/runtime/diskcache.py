"""The compile cache on disk (tinygrad's diskcache and CACHELEVEL): what a kernel compiled to, kept between processes.

One file per entry in $XDG_CACHE_HOME/tinyviz/compile, a folder only its user may enter (0700, checked on use):
a magic line, the SHA-256 of the payload, then the payload, a pickle that `_Unpickler` reads back building only the
compiler's IR types (UOp, DType, Program, KernelInfo and the enums), nothing else a pickle could name. Files are
written atomically (a temporary file renamed over the entry) and a file that is too big, fails its checksum or does
not read back is ignored (`STATS.ignored`): the caller compiles again and rewrites it. The key is the caller's
(compiler.engine: the kernel's AST and the target), here joined with what the code depends on beyond it: LLVM's and
llvmlite's versions, Python's, and a hash of the compiler package's source files, so that a changed compiler never
loads what an older one made. `CACHELEVEL=0` or `DISABLE_COMPILER_CACHE=1` turns the cache off.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import pickle
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vztrace.paths import cache_dir as user_cache_dir
from vztrace.paths import private_dir

CACHE_VERSION = 1
MAGIC = b"tinyviz compile cache 1\n"
PROTOCOL = 5
MAX_ENTRY_BYTES = 64 << 20  # a kernel's object code and Program are tens of KB; a bigger file was not written here
# what a payload may name: the compiler's IR types and the helper that rebuilds a DType (classes whose construction
# has no effect beyond the object; an Enum by value), checked by _Unpickler.find_class
ALLOWED = {("compiler.uop", "UOp"), ("compiler.uop", "Ops"), ("compiler.uop", "AxisType"),
           ("compiler.uop", "KernelInfo"), ("compiler.dtype", "DType"), ("compiler.dtype", "PtrDType"),
           ("compiler.dtype", "_rebuild_dtype"), ("compiler.codegen.program", "Program"),
           ("builtins", "frozenset"), ("builtins", "slice")}


@dataclass
class CacheStats:
  """What the disk cache did in this process: entries found, not found, written, and files ignored (corrupt)."""
  hits: int = 0
  misses: int = 0
  writes: int = 0
  ignored: int = 0


STATS = CacheStats()


def enabled() -> bool:
  """False under CACHELEVEL=0 or DISABLE_COMPILER_CACHE=1 (tinygrad's switches)."""
  env = os.environ
  return (env.get("CACHELEVEL", "2") or "2").strip() != "0" and \
    (env.get("DISABLE_COMPILER_CACHE", "0") or "0").strip() in ("", "0")


def cache_dir() -> Path:
  """Where entries live: TINYVIZ_COMPILE_CACHE, else the per-user cache's "compile" folder."""
  chosen = os.environ.get("TINYVIZ_COMPILE_CACHE")
  return Path(chosen) if chosen else user_cache_dir() / "compile"


@functools.cache
def compiler_version() -> str:
  """A hash of every source file of the compiler package (read once a process): any code change is a new version."""
  root = Path(__file__).resolve().parents[1]
  h = hashlib.sha256()
  for p in sorted(root.rglob("*.py")):
    h.update(p.relative_to(root).as_posix().encode() + b"\0")
    h.update(p.read_bytes() + b"\0")
  return h.hexdigest()


@functools.cache
def _toolchain() -> str:
  import llvmlite
  import llvmlite.binding as llvm
  return f"llvm {llvm.llvm_version_info} llvmlite {llvmlite.__version__} python {sys.version_info[:2]}"


def full_key(parts: bytes) -> str:
  """The entry's name: a hash of the caller's key bytes with the cache's and the compiler's versions."""
  h = hashlib.sha256(f"v{CACHE_VERSION}\n{compiler_version()}\n{_toolchain()}\n".encode())
  h.update(parts)
  return h.hexdigest()


class _Unpickler(pickle.Unpickler):
  def find_class(self, module: str, name: str) -> Any:
    if (module, name) not in ALLOWED:
      raise pickle.UnpicklingError(f"compile cache: {module}.{name} is not allowed in an entry")
    return super().find_class(module, name)


def get(key: str) -> Any:
  """The value stored under `key`, or None where there is none or its file is not sound (then it is ignored)."""
  try:
    with open(private_dir(cache_dir()) / key, "rb") as f:  # (a folder that is not the user's own is not read)
      data = f.read(MAX_ENTRY_BYTES + 1)
  except OSError:
    STATS.misses += 1
    return None
  head, digest, payload = data[:len(MAGIC)], data[len(MAGIC):len(MAGIC) + 32], data[len(MAGIC) + 32:]
  try:
    if len(data) > MAX_ENTRY_BYTES or head != MAGIC or hashlib.sha256(payload).digest() != digest:
      raise ValueError("bad checksum")
    value = _Unpickler(io.BytesIO(payload)).load()
  except Exception:  # (any failure to read an entry back means: compile again)
    STATS.ignored += 1
    STATS.misses += 1
    return None
  STATS.hits += 1
  return value


def put(key: str, value: Any) -> Path | None:
  """Store `value` under `key` atomically; its path, or None where it could not be written (the cache is a help,
  never a failure)."""
  tmp = None
  try:
    payload = pickle.dumps(value, protocol=PROTOCOL)
    d = private_dir(cache_dir())
    fd, tmp = tempfile.mkstemp(prefix=".cc-", dir=d)  # (mode 0600)
    with os.fdopen(fd, "wb") as f:
      f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
    os.replace(tmp, d / key)
  except (OSError, pickle.PicklingError, RecursionError, TypeError, AttributeError):
    if tmp is not None:
      with contextlib.suppress(OSError):
        os.unlink(tmp)
    return None
  STATS.writes += 1
  return d / key
