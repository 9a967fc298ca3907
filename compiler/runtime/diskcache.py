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
import dataclasses
import enum
import functools
import hashlib
import io
import os
import pickle
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.dtype import DType
from compiler.uop import Ops, UOp, toposort
from vztrace.debuglines import level as debug_level
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


# (an enum's .name is a Python property: asked of every node of a key)
_OP_NAMES = {op: op.name for op in Ops}
_OP_TEXTS = {op: f"e{Ops.__qualname__}.{op.name}" for op in Ops}  # (what enc gives any other enum member)


def stable_bytes(obj: Any) -> bytes:
  """obj named by its value alone, the same bytes in every process for equal values: UOps as rows (op, dtype, source
  rows, arg) numbered in toposort's order, dtypes and other dataclasses by their fields, floats by their bits (0.0 is
  not -0.0, nor 1.0 1), enums by name. Where a pickle's bytes also depend on which equal objects are one object (two
  equal strings or tuples may be one or two), so that equal ASTs of two processes could name two entries.
  A TypeError for anything else."""
  out: list[str] = []
  rows: dict[UOp, int] = {}
  memo: dict[DType, str] = {}  # (equal dtypes are equal by value: each encoded once)

  def enc(x: Any) -> str:
    t = type(x)
    if t is int:
      return f"i{x}"
    if t is Ops:  # (a schedule's key is rows of an op, a dtype, ints and an arg: those kinds asked first)
      return _OP_TEXTS[x]
    if t is DType and (got := memo.get(x)) is not None:
      return got
    if t is float:
      return "f" + struct.pack("<d", x).hex()
    if x is None or t is bool:
      return repr(x)
    if t is str:
      return "s" + repr(x)
    if t is tuple or t is list:
      return ("(" if t is tuple else "[") + ",".join([enc(v) for v in x]) + ")"
    if t is type:  # (cons_key marks a bool arg with `bool`)
      return f"t{x.__module__}.{x.__qualname__}"
    if t is frozenset:
      return "{" + ",".join(sorted(enc(v) for v in x)) + "}"
    if isinstance(x, UOp):
      if x not in rows:
        for u in toposort(x):
          if u not in rows:  # (a row's parts looked up first: an AST's ~500 nodes are mostly a few dtypes, no arg)
            dt, arg = u.dtype, u.arg
            row = f"{_OP_NAMES[u.op]}|{memo.get(dt) or enc(dt)}|{','.join([str(rows[s]) for s in u.src])}|" \
              f"{'None' if arg is None else enc(arg)}"
            rows[u] = len(rows)
            out.append(row)
      return f"r{rows[x]}"
    if isinstance(x, enum.Enum):
      return f"e{t.__qualname__}.{x.name}"
    if isinstance(x, DType) and (got := memo.get(x)) is not None:
      return got
    if not dataclasses.is_dataclass(x) or isinstance(x, type):
      raise TypeError(f"compile cache: no stable key for a {t.__name__}")
    got = f"d{t.__qualname__}(" + ",".join([enc(getattr(x, f.name)) for f in dataclasses.fields(x)]) + ")"
    if isinstance(x, DType):
      memo[x] = got
    return got

  top = enc(obj)
  return ("\n".join(out) + "\n" + top).encode()


class _Unpickler(pickle.Unpickler):
  def find_class(self, module: str, name: str) -> Any:
    if (module, name) not in ALLOWED:
      raise pickle.UnpicklingError(f"compile cache: {module}.{name} is not allowed in an entry")
    return super().find_class(module, name)


def ignore(key: str, why: str) -> None:
  """Count an entry that is not used (STATS.ignored), and say why at DEBUG>=1: the caller makes it again."""
  STATS.ignored += 1
  if debug_level() >= 1:
    print(f"compile cache: ignored entry {key[:16]}: {why}", file=sys.stderr, flush=True)


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
    if len(data) > MAX_ENTRY_BYTES:
      raise ValueError(f"over {MAX_ENTRY_BYTES} bytes")
    if head != MAGIC or hashlib.sha256(payload).digest() != digest:
      raise ValueError("not an entry, or its checksum fails")
    value = _Unpickler(io.BytesIO(payload)).load()
  except Exception as e:  # (any failure to read an entry back means: compile again)
    ignore(key, f"{type(e).__name__}: {e}")
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
