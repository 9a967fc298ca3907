"""The global trace recorder, switched by the VIZ env var. With VIZ unset or 0, `RECORDER` is None and
graph_rewrite does one None check per call and per match."""
from __future__ import annotations

import atexit
import contextlib
import functools
import getpass
import os
import platform
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
  from compiler.uop import UOp

TRACE_FORMAT_VERSION = "1.0"
_RULE_INFO: dict = {}  # Rule -> its pattern record fields
_OP_NAMES: dict = {}  # Ops -> name, filled on first Recorder (Enum.name is a slow descriptor)


def default_trace_path() -> Path:
  """A timestamped file in a per-user cache directory."""
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  stamp = time.strftime("%Y%m%d-%H%M%S")
  return Path(base) / "tinyviz" / "traces" / f"trace-{stamp}-{os.getpid()}.vztrace"


class Recorder:
  """Turns compiler events into trace records; each UOp and each rule is written once and then referenced by id."""

  def __init__(self, path: str | os.PathLike):
    from compiler.trace.writer import TraceWriter
    from compiler.uop import Ops
    _OP_NAMES.update({op: op.name for op in Ops})
    self.path = Path(path)
    self.writer = TraceWriter(self.path, background=True)  # an idle process still shows its last records
    self._w = self.writer.write
    self.node_ids: dict[UOp, int] = {}
    self.pattern_ids: dict[Any, int] = {}
    self.dtype_names: dict[Any, str] = {}
    self.arg_strs: dict[Any, str] = {}
    self.ctx_stack: list[int] = [0]
    self.next_ctx = 1
    self.next_rw = 0
    self.closed = False
    self._w({"t": "meta", "version": TRACE_FORMAT_VERSION, "argv": list(sys.argv), "host": socket.gethostname(),
             "pid": os.getpid(), "python": platform.python_version(), "started": time.time(), "cwd": os.getcwd(),
             "user": _user()})
    self._w({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": time.time()})

  # ---- nodes and patterns
  def node_id(self, u: UOp) -> int:
    """The id of u, writing u and every unwritten node below it first (sources before users)."""
    ids = self.node_ids
    nid = ids.get(u)
    if nid is not None:
      return nid
    from compiler.uop import arg_str
    names, dts, w, arg_strs = _OP_NAMES, self.dtype_names, self._w, self.arg_strs
    stack = [u]  # a DFS specialised to stop at written nodes: this runs for every new node while tracing
    while stack:
      x = stack[-1]
      if x in ids:
        stack.pop()
        continue
      pending = [s for s in x.src if s not in ids]
      if pending:
        stack.extend(reversed(pending))
        continue
      stack.pop()
      ids[x] = nid = len(ids)
      dt = dts.get(x.dtype)
      if dt is None:
        dt = dts[x.dtype] = str(x.dtype)
      arg = x.arg
      if arg is None:
        a = "None"
      elif type(arg) is int:
        a = repr(arg)
      else:
        # args repeat a lot (axis tuples, kernel infos, constants): cache their text; the key carries the types so
        # that 1, 1.0 and True (equal as dict keys) keep their own spelling
        key = (type(arg), tuple(map(type, arg)), arg) if type(arg) is tuple else (type(arg), arg)
        a = arg_strs.get(key)
        if a is None:
          a = arg_strs[key] = arg_str(arg)
      w({"t": "node", "id": nid, "op": names[x.op], "dtype": dt, "arg": a, "src": [ids[s] for s in x.src]})
    return ids[u]

  def pattern_id(self, rule: Any) -> int:
    pid = self.pattern_ids.get(rule)
    if pid is not None:
      return pid
    pid = self.pattern_ids[rule] = len(self.pattern_ids)
    info = _RULE_INFO.get(rule)
    if info is None:  # reading source files is slow: once per process, not once per trace
      file, line = rule.location
      info = _RULE_INFO[rule] = {"file": file, "line": line, "src": rule.source, "pat": repr(rule.pat),
                                 "name": rule.fn_name}
    self._w({"t": "pattern", "id": pid, **info})
    return pid

  # ---- contexts
  @property
  def current_ctx(self) -> int:
    return self.ctx_stack[-1]

  def ctx_begin(self, name: str, kind: str = "context") -> int:
    cid = self.next_ctx
    self.next_ctx += 1
    self._w({"t": "ctx_begin", "id": cid, "parent": self.ctx_stack[-1], "name": str(name), "kind": kind,
             "ts": time.time()})
    self.ctx_stack.append(cid)
    return cid

  def ctx_end(self, cid: int, error: str | None = None) -> None:
    rec = {"t": "ctx_end", "id": cid, "ts": time.time()}
    if error is not None:
      rec["error"] = error
    self._w(rec)
    if cid in self.ctx_stack:
      del self.ctx_stack[self.ctx_stack.index(cid):]
    self.writer.flush_if_due()

  # ---- rewrites
  def rewrite_begin(self, name: str, file: str, line: int, bottom_up: bool, root: UOp) -> int:
    rid = self.next_rw
    self.next_rw += 1
    self._w({"t": "rw_begin", "id": rid, "ctx": self.ctx_stack[-1], "name": name, "file": file, "line": line,
             "bottom_up": bottom_up, "root": self.node_id(root), "ts": time.time()})
    return rid

  def match(self, rw: int, rule: Any, before: UOp, after: UOp, dt_ns: int) -> None:
    ids = self.node_ids
    b = ids.get(before)
    if b is None:
      b = self.node_id(before)
    a = ids.get(after)
    if a is None:
      a = self.node_id(after)
    p = self.pattern_ids.get(rule)
    if p is None:
      p = self.pattern_id(rule)
    self._w({"t": "match", "rw": rw, "pat": p, "before": b, "after": a, "dt": dt_ns})

  def match_error(self, rw: int, rule: Any, before: UOp, exc: BaseException) -> None:
    self._w({"t": "match", "rw": rw, "pat": self.pattern_id(rule), "before": self.node_id(before), "after": None,
             "dt": 0, "error": f"{type(exc).__name__}: {exc}"})

  def rewrite_end(self, rw: int, root: UOp | None, dt_ns: int, matches: int, error: str | None = None) -> None:
    rec = {"t": "rw_end", "id": rw, "root": None if root is None else self.node_id(root), "dt": dt_ns,
           "matches": matches}
    if error is not None:
      rec["error"] = error
    self._w(rec)

  # ---- kernels
  def record(self, t: str, **fields: Any) -> None:
    """Write an opt/beam/source/run/error record into the current context."""
    fields.setdefault("ctx", self.ctx_stack[-1])
    self._w({"t": t, **fields})

  def close(self) -> None:
    if self.closed:
      return
    self.closed = True
    self._w({"t": "ctx_end", "id": 0, "ts": time.time()})
    self._w({"t": "end", "ts": time.time()})
    self.writer.close()


def _user() -> str:
  try:
    return getpass.getuser()
  except Exception:
    return ""


class _Pending:
  """RECORDER while VIZ is set but nothing was traced yet: the first use starts recording. So `import compiler`
  alone (e.g. by `python -m compiler.trace info` run with VIZ in the environment) never creates or truncates a
  trace."""

  def __getattr__(self, name: str) -> Any:
    return getattr(start_from_env(), name)


RECORDER: Recorder | _Pending | None = None


def viz_level() -> int:
  try:
    return int(os.environ.get("VIZ", "0") or "0")
  except ValueError:
    return 0


def enable(path: str | os.PathLike | None = None, announce: bool = True) -> Recorder:
  """Start recording to `path` (default: VIZ_TRACE or a timestamped cache file). Idempotent."""
  global RECORDER
  if isinstance(RECORDER, Recorder) and not RECORDER.closed:
    return RECORDER
  target = Path(path or os.environ.get("VIZ_TRACE") or default_trace_path())
  RECORDER = Recorder(target)
  atexit.register(disable)
  if announce:
    print(f"VIZ: recording trace to {target}", file=sys.stderr, flush=True)
  return RECORDER


def arm_from_env() -> None:
  """What `import compiler` does when VIZ is set: recording starts with the first traced event."""
  global RECORDER
  if RECORDER is None and viz_level() != 0:
    RECORDER = _Pending()


def start_from_env() -> Recorder:
  """Record to VIZ_TRACE (or the default path), and with VIZ>=1 also start (or reuse) the viewer."""
  if isinstance(RECORDER, Recorder) and not RECORDER.closed:
    return RECORDER
  rec = enable()
  if viz_level() > 0:
    try:
      from compiler.trace.launch import launch_viewer
    except ImportError:  # the viewer launcher is optional: recording still works
      return rec
    launch_viewer(rec.path)
  return rec


def disable() -> Path | None:
  """Stop recording and close the file; returns its path."""
  global RECORDER
  rec, RECORDER = RECORDER, None
  if not isinstance(rec, Recorder):
    return None
  rec.close()
  return rec.path


@contextlib.contextmanager
def trace_context(name: str, kind: str = "context") -> Iterator[int | None]:
  """Open a named, nestable trace context (a schedule, a kernel, ...); free when tracing is off."""
  rec = RECORDER
  if rec is None:
    yield None
    return
  cid = rec.ctx_begin(name, kind)
  try:
    yield cid
  except BaseException as e:
    rec.ctx_end(cid, error=f"{type(e).__name__}: {e}")
    raise
  rec.ctx_end(cid)


@contextlib.contextmanager
def untraced() -> Iterator[None]:
  """Record nothing inside (e.g. BEAM trying thousands of opts on throwaway kernels)."""
  global RECORDER
  saved, RECORDER = RECORDER, None
  try:
    yield
  finally:
    RECORDER = saved


def traced_context(name: str | Callable[..., str], kind: str = "context") -> Callable:
  """Decorator form of trace_context; `name` may be a function of the call's arguments."""
  def deco(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
      if RECORDER is None:
        return fn(*args, **kwargs)
      with trace_context(name(*args, **kwargs) if callable(name) else name, kind):
        return fn(*args, **kwargs)
    return wrapper
  return deco


def record(t: str, **fields: Any) -> None:
  """Write a kernel record (opt, beam, source, run, error) if tracing is on."""
  if RECORDER is not None:
    RECORDER.record(t, **fields)
