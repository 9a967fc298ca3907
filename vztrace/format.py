"""The trace file format (version 2): byte layout constants, limits, and the schema of every record type.

All integers in headers are little-endian. Layout (see docs/architecture.md):

  header : MAGIC + u16 major + u16 minor                                        (12 bytes)
  frame* : FRAME_MAGIC + u32 payload_len + u32 crc32(payload) + u32 raw_len + payload (zlib)
  payload: record*, each u32 len + compact JSON object (UTF-8; the writer emits ASCII)

Version 2 adds the `batch` record (nodes and matches in columns of ints, node texts through a per-trace string
table, and the other records with their positions); the reader expands it into the `node`, `match` and other
records of version 1, in their order. Version 1 records stay valid, so version 1 files are read as they are.

Field types of the schema: `int` (not bool), `num` (int or float; always also null, because the writer
encodes a non-finite float as null), `str`, `bool`, `list`, `dict`, `any`, unions `a|b`, `T?` (T or null),
and `list[T]` (every element a T). Fields not in the schema are allowed (a minor version may add them).
"""
from __future__ import annotations

import base64
import binascii
import struct
import sys
from array import array
from typing import Any

MAGIC = b"VZTRACE\0"
VERSION = (2, 8)  # (major, minor): a reader rejects a newer major and accepts any minor of the majors it reads
READ_MAJORS = (1, 2)  # version 1 has no batch records (a 1.x file that had them would be read all the same)
HEADER = struct.Struct("<8sHH")
FRAME_MAGIC = b"VZF1"
FRAME_HEADER = struct.Struct("<4sIII")  # magic, payload_len, crc32(payload), raw_len
RECORD_LEN = struct.Struct("<I")

# Limits keep a hostile file from making the reader allocate much: a frame claiming more is damage.
MAX_RAW_LEN = 64 << 20
MAX_PAYLOAD_LEN = MAX_RAW_LEN + (MAX_RAW_LEN >> 8) + 1024  # zlib's worst-case growth of incompressible data
FRAME_TARGET = 1 << 20  # the writer starts a new frame once this many raw bytes are batched
MAX_BATCH_ROWS = 1 << 20  # nodes, and matches, in one batch record (the recorder writes at most 1 << 17): expanded,
                          # a batch makes a dict of each, so more counts as damage
# Bounds on JSON values, so that what a reader accepts every consumer can take: the viewer keeps ids and steps in
# int64 arrays and times as floats (a bigger int raised OverflowError there), and encodes answers with a recursive
# JSON encoder (a record nested ~1,000 deep failed there, or in the decoder, depending on the caller's stack).
MIN_INT, MAX_INT = -(1 << 63), (1 << 63) - 1  # every JSON integer of a record (int64)
MAX_DEPTH = 100  # nesting of lists and objects in a record, the record being depth 1 (above the writer's cut, 66)
# Lengths of list fields (LIST_BOUNDS), sized from what the compiler writes, so that a small file whose lists compress
# well cannot make every consumer hold (and the viewer send) millions of elements per record: a longer list is damage.
# The writer clips a list to its bound (clip_lists), so a program never writes damage.
MAX_ARGV = 4096  # a program's argv (the viewer shows it in one line)
MAX_SHAPE_DIMS = 256  # a kernel's shape (and its colors): its dims (numpy allows 64), one more per opt that splits one
MAX_OPTS = 256  # opts of one kernel in a beam record (BEAM applies a few; a hand-written list a few dozen)
MAX_OPT_FIELDS = 8  # of one opt of a beam record (Opt.to_json: op, axis, arg)
MAX_TIMES = 1000  # timed runs of a run or beam record (CompiledKernel.time: 10 by default; a confirmation: <= 50)
MAX_NODE_SRC = 1 << 20  # sources of a node record (a node's sources are nodes: as many as a batch's)
MAX_SOURCE_LINES = 1 << 20  # lines of a source record's line map, and UOps of its kernel (a text is cut at 64 MiB)
MAX_LINE_UOPS = 16  # UOps named by one line of a source record's map
MAX_LAUNCH_DIMS = 8  # of an OpenCL kernel's global and local sizes (the renderer uses at most 3)
MAX_CALLSITES = 16  # call sites of a kernel context (the recorder keeps its first 15 and its output's)


# Columns of compact records: a JSON string, the base64 of the values as little-endian u32 ("u32s") or i64 ("i64s").
COLUMN_TYPES = {"u32s": next(c for c in "IL" if array(c).itemsize == 4), "i64s": "q"}
_SWAP = sys.byteorder != "little"


def column_bytes(values: list[int], kind: str = "u32s") -> bytes:
  """A column's values as little-endian bytes; OverflowError if a value does not fit."""
  a = array(COLUMN_TYPES[kind], values)
  if _SWAP:
    a.byteswap()
  return a.tobytes()


def pack_bytes(raw: bytes) -> bytes:
  """A column's little-endian bytes as the (ASCII) text of its JSON string."""
  return binascii.b2a_base64(raw, newline=False)


def pack_column(values: list[int], kind: str = "u32s") -> bytes:
  """A column of ints as the (ASCII) text of its JSON string; OverflowError if a value does not fit."""
  return pack_bytes(column_bytes(values, kind))


def unpack_column(text: str, kind: str = "u32s", limit: int | None = None, as_array: bool = False) -> list[int] | array:
  """The ints of a column (as_array: an array of them, 4 or 8 bytes each instead of a list's 8 + the int objects');
  ValueError if text is not one, or holds more than `limit` values."""
  if limit is not None and len(text) // 4 * 3 > (limit + 1) * array(COLUMN_TYPES[kind]).itemsize:
    raise ValueError(f"more than {limit} values")
  try:
    raw = base64.b64decode(text, validate=True)
  except (binascii.Error, ValueError) as e:  # a non-ASCII str is a ValueError
    raise ValueError(f"bad base64: {e}") from None
  a = array(COLUMN_TYPES[kind])
  if len(raw) % a.itemsize:
    raise ValueError(f"{len(raw)} bytes is not a whole number of {a.itemsize}-byte values")
  a.frombytes(raw)
  if limit is not None and len(a) > limit:
    raise ValueError(f"more than {limit} values")
  if _SWAP:
    a.byteswap()
  return a if as_array else a.tolist()


class TraceFormatError(ValueError):
  """A file is not a readable trace, or a record breaks the schema; `.offset` is a byte offset or None."""

  def __init__(self, reason: str, offset: int | None = None) -> None:
    super().__init__(reason if offset is None else f"{reason} (at byte {offset})")
    self.reason = reason
    self.offset = offset


# The columns of a `batch` record, in the order the writer writes them and the reader takes them: the nodes' (u32s),
# the matches' (u32s, then dt as i64s), and `at`, the positions of its other records (u32s).
NODE_COLUMNS = ("op", "dtype", "arg", "nsrc", "src")
MATCH_COLUMNS = ("rw", "pat", "before", "after")
MATCH_DT = "dt"

# t -> (required fields, optional fields)
RECORDS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
  "meta": ({"version": "int|str|list", "argv": "list[str]", "host": "str", "pid": "int", "python": "str",
            "started": "num", "cwd": "str"}, {}),
  # site (minor version 7): the user's line that made the node (CALLSITE_FIELDS), where the front end noted one
  "node": ({"id": "int", "op": "str", "dtype": "str", "arg": "str", "src": "list[int]"}, {"site": "dict"}),
  "pattern": ({"id": "int", "file": "str?", "line": "int?", "src": "str?", "pat": "str", "name": "str?"}, {}),
  # callsites (minor version 3), of a kernel context: the user's lines that made the ops it computes (CALLSITE_FIELDS),
  # in the order they are computed, its output's last; callsites_more: how many more there were
  # schedule (minor version 6), of a kernel, copy or memory context: the id of the schedule context that made what it
  # runs (its kernels run after that context ended, maybe after other contexts); a reader trusts it only where that
  # context began before and is a schedule (without it: the schedule context before it, by order)
  "ctx_begin": ({"id": "int", "parent": "int?", "name": "str", "kind": "str", "ts": "num"},
                {"callsites": "list[dict]", "callsites_more": "int", "schedule": "int"}),
  "ctx_end": ({"id": "int", "ts": "num"}, {"error": "str?"}),
  "rw_begin": ({"id": "int", "ctx": "int", "name": "str", "file": "str?", "line": "int?", "bottom_up": "bool",
                "root": "int", "ts": "num"}, {}),
  "match": ({"rw": "int", "pat": "int", "before": "int", "after": "int?", "dt": "num"}, {"error": "str?"}),
  "rw_end": ({"id": "int", "root": "int?", "dt": "num", "matches": "int"}, {"error": "str?"}),
  "opt": ({"ctx": "int", "op": "str", "axis": "int?", "arg": "any", "ok": "bool", "reason": "str?",
           "shape": "list[int|str]", "colors": "list[str]", "kname": "str?"}, {}),
  # times: a confirmation's timed runs of the variant (`time` their median)
  "beam": ({"ctx": "int", "round": "int", "opts": "list[list]", "chosen": "bool"},
           {"time": "num", "error": "str?", "times": "list[num]"}),
  # ts (minor version 1): epoch seconds when the LLVM compile began / the timed runs began
  # lines, uops (minor version 4): per line of text the positions of the UOps it came from, and per position its
  # node id (vztrace.linemap.source_lines); from minor version 8 a recording leaves `lines` out of the kinds whose
  # text tells it (uops, llvm_ir, opt_ir, asm): a reader makes it from the text (vztrace.linemap.record_lines)
  # global_size, local_size (minor version 5), of an "opencl" source: its launch's work-items per dimension (an
  # expression of variables as its text); no local_size: the driver picks the work-groups
  "source": ({"ctx": "int", "kind": "str", "text": "str", "compile_s": "num"},
             {"ts": "num", "lines": "list[list]", "uops": "list[int]", "global_size": "list[int|str]",
              "local_size": "list[int|str]"}),
  "run": ({"ctx": "int", "kname": "str", "times": "list[num]", "min": "num", "median": "num", "flops": "num",
           "bytes": "num", "gflops": "num", "gbs": "num"}, {"ts": "num"}),
  # a buffer's memory taken (op "alloc") or released ("free"), `bytes` of it, at `ts` (epoch s); `buf` names the
  # buffer (a BUFFER UOp's id), dtype and size (elements) say what it holds; the viewer's timeline draws bytes in use;
  # device: where the memory is (absent: the CPU), one memory lane per device
  "mem": ({"ctx": "int", "op": "str", "buf": "int", "bytes": "int", "ts": "num"},
          {"dtype": "str", "size": "int", "device": "str"}),
  "error": ({"ctx": "int?", "text": "str"}, {}),
  # exit (minor version 2): how the program ended where it did not end cleanly (EXIT_FIELDS); absent: it did
  "end": ({"ts": "num"}, {"exit": "dict"}),
  # version 2: what the recorder wrote between two flushes, in columns (see pack_column); the reader expands it.
  # Node `id + i` is (strs[op[i]], strs[dtype[i]], strs[arg[i]]) over the next nsrc[i] ids of src, where strs is
  # the trace's string table after appending this batch's `strs`; match i is (rw[i], pat[i], before[i], after[i],
  # dt[i]); recs are other records, recs[j] coming after the first at[2j] nodes and at[2j+1] matches of the batch;
  # the batch's nodes and then its matches after the last of them.
  # sites, site (minor version 7): node i was made by the user's line sites[site[i] - 1] (none where 0), sites being
  # the trace's call-site table after appending this batch's `sites` (each CALLSITE_FIELDS); no `site`: none was
  "batch": ({"id": "int", "strs": "list[str]", **dict.fromkeys(NODE_COLUMNS + MATCH_COLUMNS, "u32s"), MATCH_DT: "i64s",
             "at": "u32s", "recs": "list[dict]"}, {"sites": "list[dict]", "site": "u32s"}),
}

# record type -> list field -> its most elements (beam's "opts" also bounds each opt at MAX_OPT_FIELDS)
LIST_BOUNDS: dict[str, dict[str, int]] = {
  "meta": {"argv": MAX_ARGV}, "node": {"src": MAX_NODE_SRC}, "ctx_begin": {"callsites": MAX_CALLSITES},
  "opt": {"shape": MAX_SHAPE_DIMS, "colors": MAX_SHAPE_DIMS},
  "beam": {"opts": MAX_OPTS, "times": MAX_TIMES}, "run": {"times": MAX_TIMES},
  "source": {"lines": MAX_SOURCE_LINES, "uops": MAX_SOURCE_LINES, "global_size": MAX_LAUNCH_DIMS,
             "local_size": MAX_LAUNCH_DIMS},
  "batch": {"strs": 3 * MAX_BATCH_ROWS, "recs": MAX_BATCH_ROWS, "sites": MAX_BATCH_ROWS},
}
# of each element (a list) of the field
INNER_BOUNDS: dict[str, dict[str, int]] = {"beam": {"opts": MAX_OPT_FIELDS}, "source": {"lines": MAX_LINE_UOPS}}


def clip_lists(rec: dict) -> dict:
  """rec with its list fields cut to LIST_BOUNDS (a copy where one was cut; the writer writes no longer ones)."""
  t = rec.get("t")
  bounds = LIST_BOUNDS.get(t) if type(t) is str else None
  if bounds is None:
    return rec
  out = rec
  for key, n in bounds.items():
    v = rec.get(key)
    inner = INNER_BOUNDS.get(t, {}).get(key)
    if type(v) is list and (len(v) > n or (inner is not None and any(type(x) is list and len(x) > inner for x in v))):
      if out is rec:
        out = dict(rec)
      v = v[:n]
      out[key] = v if inner is None else [x[:inner] if type(x) is list else x for x in v]
  return out


# JSON-decoded values only ever have these exact types, so `type(v) in S` is both fast and bool-safe.
_BASE: dict[str, tuple[type, ...]] = {"int": (int,), "num": (int, float, type(None)), "str": (str,), "bool": (bool,),
                                      "list": (list,), "dict": (dict,), "null": (type(None),), "u32s": (str,),
                                      "i64s": (str,)}
_ANY = frozenset((int, float, str, bool, list, dict, type(None)))


class _Missing:
  """The value `dict.get` returns for an absent optional field, so absence is just another allowed type."""


_MISSING = _Missing()


def _compile(spec: str) -> tuple[frozenset, frozenset | None]:
  """(allowed exact types, allowed element types or None) for a type spec such as 'int?' or 'list[int|str]'."""
  if spec.endswith("?"):
    types, elem = _compile(spec[:-1])
    return types | {type(None)}, elem
  if spec.startswith("list[") and spec.endswith("]"):
    return frozenset((list,)), _compile(spec[5:-1])[0]
  if spec == "any":
    return _ANY, None
  return frozenset(t for part in spec.split("|") for t in _BASE[part]), None


class _Check:
  """One record type's schema, precompiled: (key, allowed types) pairs where an absent optional field is allowed."""

  def __init__(self, required: dict[str, str], optional: dict[str, str], lengths: dict[str, int] | None = None,
               inner: dict[str, int] | None = None) -> None:
    self.specs = {**required, **optional}
    compiled = {k: _compile(s) for k, s in self.specs.items()}
    self.pairs = tuple((k, types | {_Missing} if k in optional else types) for k, (types, _) in compiled.items())
    self.elems = tuple((k, e) for k, (_, e) in compiled.items() if e is not None)
    self.lengths = tuple((lengths or {}).items())  # list field -> most elements (looked at before the elements)
    self.inner = tuple((inner or {}).items())  # list-of-lists field -> most elements of each

  def ok(self, rec: dict) -> bool:
    get = rec.get
    for key, types in self.pairs:  # a plain loop measured faster than map()/all() chains on 3.11
      if type(get(key, _MISSING)) not in types:
        return False
    for key, n in self.lengths:
      v = get(key)
      if type(v) is list and len(v) > n:
        return False
    for key, etypes in self.elems:
      v = get(key)
      if type(v) is list and not etypes.issuperset(map(type, v)):
        return False
    for key, n in self.inner:
      v = get(key)
      if type(v) is list and max(map(len, v), default=0) > n:  # (elements are lists: checked just above)
        return False
    return True

  def explain(self, t: str, rec: dict) -> str:
    """Why ok() said no, for the error message."""
    elems, lengths, inner = dict(self.elems), dict(self.lengths), dict(self.inner)
    for key, types in self.pairs:
      v = rec.get(key, _MISSING)
      if v is _MISSING and _Missing not in types:
        return f"{t!r} record lacks field {key!r}"
      if type(v) is list and key in lengths and len(v) > lengths[key]:
        return f"field {key!r} of {t!r} record has {len(v):,} elements, more than {lengths[key]:,}"
      if type(v) not in types or (key in elems and type(v) is list and not elems[key].issuperset(map(type, v))):
        return f"field {key!r} of {t!r} record must be {self.specs[key]}, got {_short(v)}"
      if type(v) is list and key in inner and (m := max(map(len, v), default=0)) > inner[key]:
        return f"an element of field {key!r} of {t!r} record has {m:,} elements, more than {inner[key]:,}"
    return f"invalid {t!r} record"


_CHECKS = {t: _Check(req, opt, LIST_BOUNDS.get(t), INNER_BOUNDS.get(t)) for t, (req, opt) in RECORDS.items()}


# ---- how the program ended: the `exit` of an `end` record (minor version 2), written only where it did not end cleanly
# kind: "exception" (uncaught in the main thread), "interrupt" (KeyboardInterrupt), "exit" (sys.exit with a status
# other than 0: `status`), "thread" (uncaught in the thread named `thread`; the program went on); type and message: the
# exception's; file, line, function: the innermost frame outside the compiler package (the user's code, null where
# none is); traceback: frames outermost first (each EXIT_FRAME_FIELDS; `text` its source line), the innermost ones
# only, `omitted` counting the others.
EXIT_KINDS = ("exception", "interrupt", "exit", "thread")
EXIT_FIELDS = ({"kind": "str", "type": "str", "message": "str", "file": "str?", "line": "int?", "function": "str?",
                "traceback": "list[dict]"}, {"omitted": "int", "status": "int|str?", "thread": "str?"})
EXIT_FRAME_FIELDS: tuple[dict[str, str], dict[str, str]] = (
  {"file": "str", "line": "int?", "function": "str", "text": "str?"}, {})
# What the recorder writes and a reader keeps (exit_summary): a hostile trace's MB-long message or million frames cost
# their decoding, as any record's texts do, and no more than these after that.
MAX_EXIT_MESSAGE = 2000  # chars of the message (and of a status that is a text)
MAX_EXIT_TEXT = 300  # chars of a type name, a path, a function name, a source line
MAX_EXIT_FRAMES = 20  # the innermost frames of a traceback
_EXIT, _EXIT_FRAME = _Check(*EXIT_FIELDS), _Check(*EXIT_FRAME_FIELDS)


# ---- a kernel's call sites (minor version 3): each the first frame outside the compiler package that made an op of it
CALLSITE_FIELDS: tuple[dict[str, str], dict[str, str]] = ({"file": "str", "line": "int", "function": "str"}, {})
_CALLSITE = _Check(*CALLSITE_FIELDS)


def site_problem(site: Any, where: str) -> str | None:
  """Why one call site (CALLSITE_FIELDS) breaks the schema, or None; where: the field, for the message."""
  return None if _CALLSITE.ok(site) else _CALLSITE.explain(where, site)


def callsites_problem(sites: list) -> str | None:
  """Why a ctx_begin record's callsites (a list of at most MAX_CALLSITES objects) break the schema, or None."""
  for i, site in enumerate(sites):
    if not _CALLSITE.ok(site):
      return _CALLSITE.explain(f"ctx_begin.callsites[{i}]", site)
  return None


def exit_problem(ex: dict) -> str | None:
  """Why an `end` record's exit breaks the schema, or None. Only the frames exit_summary keeps are looked into (the
  others are checked to be objects, in C): a million frames cost their decoding and no loop here."""
  if not _EXIT.ok(ex):
    return _EXIT.explain("end.exit", ex)
  frames = ex["traceback"]
  for i in range(max(0, len(frames) - MAX_EXIT_FRAMES), len(frames)):
    if not _EXIT_FRAME.ok(frames[i]):
      return _EXIT_FRAME.explain(f"end.exit.traceback[{i}]", frames[i])
  return None


def clip_text(s: str | None, n: int = MAX_EXIT_TEXT) -> str | None:
  """s cut to n chars (the last one an ellipsis where it was cut)."""
  return s if s is None or len(s) <= n else s[:n - 1] + "\u2026"


def exit_summary(ex: dict) -> dict:
  """A valid exit (exit_problem) as the tools and the viewer show it: its texts clipped, the innermost MAX_EXIT_FRAMES
  frames (`omitted`: how many more), and `text`: how the program ended, in one line (exit_text)."""
  frames = ex["traceback"]
  kept = frames[max(0, len(frames) - MAX_EXIT_FRAMES):]
  status = ex.get("status")
  out = {"kind": clip_text(ex["kind"]), "type": clip_text(ex["type"]),
         "message": clip_text(ex["message"], MAX_EXIT_MESSAGE), "file": clip_text(ex["file"]), "line": ex["line"],
         "function": clip_text(ex["function"]), "thread": clip_text(ex.get("thread")),
         "status": clip_text(status, MAX_EXIT_MESSAGE) if type(status) is str else status,
         "traceback": [{"file": clip_text(f["file"]), "line": f["line"], "function": clip_text(f["function"]),
                        "text": clip_text(f["text"])} for f in kept],
         "omitted": min(MAX_INT, max(0, ex.get("omitted", 0)) + len(frames) - len(kept))}
  out["text"] = exit_text(out)
  return out


def exit_text(ex: dict) -> str:
  """How the program ended, to follow "the program": "ended with an error: ValueError: ... at x.py:12 in main"."""
  line = f":{ex['line']}" if ex["line"] is not None else ""
  where = f" at {ex['file']}{line} in {ex['function']}" if ex["file"] is not None else ""
  what = f"{ex['type']}: {ex['message']}" if ex["message"] else ex["type"]
  kind, status = ex["kind"], ex.get("status")
  if kind == "exception":
    return f"ended with an error: {what}{where}"
  if kind == "interrupt":
    return f"was interrupted: {what}{where}"
  if kind == "exit":
    return f"exited with status {status}{where}" if type(status) is int else f"exited with status 1: {status}{where}"
  if kind == "thread":
    return f"ended after an uncaught error in thread {ex.get('thread')!r}: {what}{where}"
  return f"ended: {kind}: {what}{where}"  # a kind of a later minor version


def exit_traceback_lines(ex: dict) -> list[str]:
  """An exit_summary's traceback as Python prints one (for a terminal, each line still to be made safe)."""
  more = f", {ex['omitted']} earlier frames left out" if ex["omitted"] else ""
  out = [f"Traceback (most recent call last{more}):"] if ex["traceback"] else []
  for f in ex["traceback"]:
    out.append(f'  File "{f["file"]}", line {f["line"]}, in {f["function"]}')
    if f["text"]:
      out.append(f"    {f['text']}")
  return out


def validate_record(rec: Any, bounds: bool = True) -> bool:
  """Raise TraceFormatError unless rec is a valid record; return False for an unknown type (to be skipped).
  bounds=False skips the look at its ints and nesting (out_of_bounds), for a caller that knows they are fine."""
  if type(rec) is not dict:
    raise TraceFormatError(f"record is a JSON {type(rec).__name__}, not an object")
  t = rec.get("t")
  if type(t) is not str:
    raise TraceFormatError("record has no string field 't'")
  check = _CHECKS.get(t)
  if check is None:
    return False
  if not check.ok(rec):
    raise TraceFormatError(check.explain(t, rec))
  if t == "end" and "exit" in rec and (why := exit_problem(rec["exit"])) is not None:
    raise TraceFormatError(why)
  if t == "ctx_begin" and "callsites" in rec and (why := callsites_problem(rec["callsites"])) is not None:
    raise TraceFormatError(why)
  if bounds and (why := out_of_bounds(rec)) is not None:
    raise TraceFormatError(why)
  return True


def out_of_bounds(rec: Any) -> str | None:
  """Why a decoded record breaks the value bounds (an int outside int64, nesting deeper than MAX_DEPTH), or None."""
  stack = [(rec, 1)]
  while stack:
    v, depth = stack.pop()
    if depth > MAX_DEPTH:
      return f"bad JSON: values nested deeper than {MAX_DEPTH}"  # the same words as the decoder's RecursionError
    for x in (v if type(v) is list else v.values()):
      tx = type(x)
      if tx is int:
        if not MIN_INT <= x <= MAX_INT:
          return f"integer of {x.bit_length()} bits, outside int64"
      elif tx is list or tx is dict:
        stack.append((x, depth + 1))
  return None


def _short(v: Any) -> str:
  s = repr(v)
  return s if len(s) <= 60 else s[:57] + "..."
