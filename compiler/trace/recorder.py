"""The global trace recorder, switched by the VIZ env var: it turns compiler events (a rewrite, a match, a kernel's
opt, source or run) into the records of a trace file, whose format, writer and reader are the vztrace package's.
With VIZ unset or 0, `RECORDER` is None and graph_rewrite does one None check per call and per match.

In the order a node takes through this file: `TraceIds` gives each UOp a record names its trace id (by structure),
`node_columns` turns the nodes' keys into a batch's columns, `RecordQueue` holds what was recorded until the writer's
flush makes `batch` records of it, and `Recorder` is what the compiler calls."""
from __future__ import annotations

import atexit
import bisect
import contextlib
import functools
import itertools
import linecache
import operator
import os
import re
import struct
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from compiler.dtype import DType
from compiler.uop import Ops, UOp, arg_str, cons_key, live_uops
from vztrace.paths import trace_dir

_RULE_INFO: dict = {}  # Rule -> its pattern record fields


# ---- trace ids

_RECORDINGS = itertools.count(1)  # numbers the recordings: a recording's ids in the nodes' _trace_id slot are its own
_ID_BITS = 40  # a node's _trace_id: (the recording's number << _ID_BITS) + its id in that recording
_SET_TRACE_ID = UOp._trace_id.__set__  # (UOp's __setattr__ refuses every field: it is immutable but for this one)
_OP_INT = list(range(max(Ops) + 1))  # an op (an IntEnum, which the cycle collector tracks) -> plain int


_PACKED = 64
# a key's packer by its number of sources: (op, dtype number, arg number, *source ids) as u32s
_KEY_PACKS = [struct.Struct(f"<{3 + n}I").pack for n in range(_PACKED)]


def _pack_key(*fields: int) -> bytes:
  """A key of a node with more sources than _KEY_PACKS has packers for (a SINK of many stores)."""
  return struct.pack(f"<{len(fields)}I", *fields)


def key_fields(key: bytes) -> tuple[int, ...]:
  """A node's key (TraceIds) as its ints: (op, dtype number, arg number, *source ids)."""
  return struct.unpack(f"<{len(key) // 4}I", key)


_NO_DTYPE = object()  # (no node's dtype: the first node of a walk looks its dtype up)


def _split_sources(src: tuple[UOp, ...], base: int, top: int) -> tuple[list[int], list[UOp]]:
  """(the ids of src's named sources, its unnamed sources in order), in one pass (a node of three or more sources)."""
  ids: list[int] = []
  unnamed: list[UOp] = []
  for s in src:
    v = s._trace_id
    if base <= v < top:
      ids.append(v - base)
    else:
      unnamed.append(s)
  return ids, unnamed


def _dtype_number(dtypes: list[DType], numbers: dict[DType, int], by_id: dict[int, int], seen: list[DType],
                  dtype: DType) -> int:
  """A dtype's number in a recording (TraceIds' tables): by equality, the first time its object is met."""
  d = numbers.setdefault(dtype, len(dtypes))
  if d == len(dtypes):
    dtypes.append(dtype)
  seen.append(dtype)
  by_id[id(dtype)] = d
  return d


def _arg_number(plain: dict[Any, int], more_args: dict[tuple, int], counter: Iterator[int], op: Ops, dtype: DType,
                arg: Any) -> int:
  """The number of an arg as cons_key tells args apart (a new one for an arg not seen before; TraceIds' tables)."""
  more = cons_key(op, dtype, (), arg)[4:]
  table, k = (more_args, (arg, more[0])) if more else (plain, arg)
  a = table.get(k)
  if a is None:
    a = table[k] = next(counter)
  return a


class TraceIds:
  """The trace ids of one recording, given by structure; `add` receives the key of each node given a new id, in id
  order (sources first), and `add_arg` its arg (the object, for its text): the key is bytes, the node's op, dtype
  number, arg number and source ids as little-endian u32s, so that a flush makes the node columns from the keys
  alone (node_columns), and so that a key is no object the cycle collector tracks: the keys live as long as the
  recording, and a tuple a node (what a key was) made the collector run ~30% more often (each new tuple counts
  toward the next collection) and scan the table at every full one (a dict of tuples is tracked; one of bytes and
  ints is not). On issue 30's GPT training step that was most of the ~0.5 s the collections cost a recording.

  A UOp gets its id the first time a record names it (its sources first), and an equal UOp made later must get the
  same one, or the viewer would show two nodes where the compiler had one. "Equal" is what hash-consing means by it:
  the key `cons_key(op, dtype, src, arg)`, here with the sources' trace ids for the sources, the dtype's number of its
  first appearance (`dtypes`) and the arg's number: args equal as cons_key compares them (what it adds for a float or
  a bool kept apart) share one (`_arg_number`). `keys` maps each key to its id for the whole recording, so a node made
  again after the first one died finds its id there, and the trace keeps no UOp alive (nor, through a BUFFER node, a
  Buffer).

  Finding a key needs the sources' ids, so a node named before is found by identity instead, in O(1): its id is kept
  in its own `_trace_id` slot, as `base` + the id, where `base` is this recording's number shifted past any id
  (another recording's id there, or 0, is not in [base, top): the node is then found by its key). A slot rather than
  an entry in the node's __dict__: that was one dict more per named node (memory, and an allocation), and a lookup
  by a method call; a table by id() needed a weak reference a node, an object the cycle collector tracked."""

  def __init__(self, add: Callable[[bytes], None], add_site: Callable[[tuple], None] | None = None,
               add_arg: Callable[[Any], None] | None = None) -> None:
    self.keys: dict[bytes, int] = {}  # every node named so far, by structure
    self.dtypes: list[DType] = []  # a key's dtype number -> the dtype
    self._dtype_numbers: dict[DType, int] = {}  # by equality (a dtype hashes in Python: asked once per object)
    self._dtype_by_id: dict[int, int] = {}  # by identity (every dtype object seen is kept alive in `_seen`)
    self._seen: list[DType] = []
    # an arg -> its number: args cons_key adds nothing to (None, ints, tuples, ...) by equality, and floats and bools
    # by (arg, what cons_key adds) in a table of their own (a tuple arg may equal such a pair)
    # (None, most nodes' arg, is number 0 without a lookup, and no other arg is: the table and the counter never give
    # 0, so a flush tells a None arg by its number, node_columns)
    self._plain_args: dict[Any, int] = {}
    self._more_args: dict[tuple, int] = {}
    self._arg_numbers = itertools.count(1)
    self.base = next(_RECORDINGS) << _ID_BITS  # a named node's _trace_id is base + its id
    self.top = self.base + (1 << _ID_BITS)
    self.add = add
    self.add_arg = add_arg if add_arg is not None else (lambda arg: None)
    # (id, call site) of each node given an id that has a call site (UOp.callsite), in id order; the first node of a
    # structure names it, as with the rest of its record
    self.add_site = add_site if add_site is not None else (lambda row: None)
    self._name_below = self._namer()  # (root -> its id, naming it and what below it has none)

  def get(self, u: UOp) -> int | None:
    """u's id if u was named."""
    v = u._trace_id
    return v - self.base if self.base <= v < self.top else None

  def id_of(self, u: UOp) -> int:
    """The id of u, giving u and every node below it without one an id (sources first)."""
    v = u._trace_id
    if self.base <= v < self.top:
      return v - self.base
    return self._name_below(u)

  # _name_below(root) names root and the nodes below it without an id, each after its sources, in the order of a
  # depth-first walk over sources in order: a node met with a source not named yet goes back on the stack with all
  # such sources above it (the first on top), and is named when it is met again, its sources then named. Iterative,
  # since a graph may be far deeper than the recursion limit. The id of an equal node named before (its key), else a
  # new one. A node of one or two sources (most of them) reads them without a loop or a list: ~9% less time naming
  # (the GPT training step's naming replayed: 150 -> 137 ms CPU).
  def _namer(self) -> Callable[[UOp], int]:
    """The recording's `_name_below(root)`: a closure made once, its tables bound as free variables (no attribute
    read or tuple unpacking a call: ~16,000 calls on the GPT training step, most naming a rule's result of a few
    nodes)."""
    base, top, keys, add, dtype_by_id, op_int = self.base, self.top, self.keys, self.add, self._dtype_by_id, _OP_INT
    add_site, add_arg, plain_args, arg_numbers, packs = (self.add_site, self.add_arg, self._plain_args,
                                                         self._arg_numbers, _KEY_PACKS)
    pack0, pack1, pack2 = packs[:3]
    dtype_number = functools.partial(_dtype_number, self.dtypes, self._dtype_numbers, self._dtype_by_id, self._seen)
    arg_number = functools.partial(_arg_number, self._plain_args, self._more_args, self._arg_numbers)
    stack: list[UOp] = []  # (one for the recording: naming never re-enters; a walk an error stopped is dropped below)
    pop, push, set_key = stack.pop, stack.append, keys.setdefault

    def name_below(root: UOp) -> int:
      """root's id, root and the nodes below it without one named (the walk described above _namer)."""
      stack.clear()
      push(root)
      last_dtype, last_d = _NO_DTYPE, 0
      while stack:
        x = pop()
        if base <= x._trace_id < top:  # on the stack twice (a source of two nodes): named the first time
          continue
        src = x.src
        n = len(src)
        if n == 1:
          s0 = src[0]._trace_id
          if not base <= s0 < top:
            push(x)
            push(src[0])
            continue
        elif n == 2:
          s0, s1 = src[0]._trace_id, src[1]._trace_id
          if not (base <= s0 < top and base <= s1 < top):
            push(x)
            if not base <= s1 < top:
              push(src[1])
            if not base <= s0 < top:  # (the first on top)
              push(src[0])
            continue
        elif n:
          ids, unnamed = _split_sources(src, base, top)
          if unnamed:
            push(x)
            stack.extend(reversed(unnamed))  # (the first on top)
            continue
        dtype = x.dtype
        if dtype is not last_dtype:  # (runs of one dtype: most nodes skip the lookup)
          d = dtype_by_id.get(id(dtype))
          last_dtype, last_d = dtype, d if d is not None else dtype_number(dtype)
        arg = x.arg
        t = type(arg)
        if arg is None:
          a = 0
        elif t is int or t is tuple:  # (cons_key adds nothing to these: looked up as they are)
          a = plain_args.get(arg)
          if a is None:
            a = plain_args[arg] = next(arg_numbers)
        else:
          a = arg_number(x.op, dtype, arg)
        if n == 1:  # (the usual numbers of sources spelled out: a call with *src costs more than the packing)
          key = pack1(op_int[x.op], last_d, a, s0 - base)
        elif n == 2:
          key = pack2(op_int[x.op], last_d, a, s0 - base, s1 - base)
        elif n == 0:
          key = pack0(op_int[x.op], last_d, a)
        else:
          key = packs[n](op_int[x.op], last_d, a, *ids) if n < _PACKED else _pack_key(op_int[x.op], last_d, a, *ids)
        new = len(keys)  # ids are dense: the next one is the number of keys
        tid = set_key(key, new)
        if tid == new:
          if x.callsite is not None:  # (before the row: a flush that counts the row finds its site queued)
            add_site((new, x.callsite))
          add_arg(arg)  # (before the key: a flush counts the keys)
          add(key)
        _SET_TRACE_ID(x, base + tid)
      return root._trace_id - base
    return name_below

  def close(self) -> None:
    """Recording ended: nothing to drop (the ids live in the nodes, and go with them)."""


# ---- a batch's node columns
# The node columns of a batch record: for each node its op, dtype code, arg code, number of sources and its sources'
# trace ids, as little-endian u32 bytes (format.py, "batch"), made from the nodes' keys (TraceIds: op, dtype number,
# arg number, source ids, as u32s) and args, so that a flush reads no UOp.
#
# A flush makes them for every node the trace names: the keys' u32s are split into columns by numpy; a dtype's code
# is looked up by its number, an arg's by object identity (the object kept alive, so that its id is never another's),
# so a text is made once per object.

Columns = tuple[bytes, bytes, bytes, bytes, bytes]
_FIRST = operator.itemgetter(0)


def codes(objs: list, by_id: dict[int, int], code: Callable[[Any], int], keep: list) -> list[int]:
  """The codes of objs, looked up by object id in `by_id`; code(o) for an object not seen before (then kept there,
  and the object in `keep`: while it lives its id is its own)."""
  out = list(map(by_id.get, map(id, objs), itertools.repeat(-1)))
  new = out.count(-1)
  if new * 8 > len(out):  # many (a first batch): each distinct object once (deduplicated in C), then all again
    for k, o in dict(zip(map(id, objs), objs)).items():
      if k not in by_id:
        by_id[k] = code(o)
        keep.append(o)
    return list(map(by_id.__getitem__, map(id, objs)))
  i = -1
  for _ in range(new):  # a few: found by searches in C
    i = out.index(-1, i + 1)
    o = objs[i]
    c = by_id.get(id(o))  # seen earlier in objs
    if c is None:
      c = by_id[id(o)] = code(o)
      keep.append(o)
    out[i] = c
  return out


def node_columns(keys: list[bytes], args: list, dtype_codes: list[int], arg_ids: dict[int, int],
                 arg_code: Callable[[Any], int], keep: list) -> Columns:
  """(op, dtype, arg, nsrc, src) of the nodes with these keys and args; a dtype's code is dtype_codes[its number in
  the key], an arg's is looked up in the by-id table (whose objects are kept alive in `keep`, so that no id is
  reused), and arg_code makes the code of one not seen before. A None arg (arg number 0, TraceIds: 81% of the GPT
  step's nodes) takes None's code without a lookup of its own: ~7 ms less of that step's flushes (replayed)."""
  import numpy as np  # (loaded with the compiler; imported here so that VIZ off never reads this line)
  u32 = np.dtype("<u4")
  vals = np.frombuffer(b"".join(keys), u32)
  size = np.fromiter(map(len, keys), np.int64, len(keys)) >> 2  # u32s a key
  at = np.cumsum(size) - size  # where each key's op is
  head = np.zeros(len(vals), np.bool_)
  head[at] = head[at + 1] = head[at + 2] = True
  dtype_col = np.asarray(dtype_codes, u32)[vals[at + 1]]  # (codes of the string table: u32s, OverflowError else)
  some = np.flatnonzero(vals[at + 2])  # the nodes whose arg is not None
  if len(some) == len(keys):
    arg_col = np.asarray(codes(args, arg_ids, arg_code, keep), np.int64)
  else:
    arg_col = np.full(len(keys), codes([None], arg_ids, arg_code, keep)[0], np.int64)
    if len(some):
      arg_col[some] = codes(list(operator.itemgetter(*some.tolist())(args)) if len(some) > 1 else [args[some[0]]],
                            arg_ids, arg_code, keep)
  if len(arg_col) and (arg_col.min() < 0 or arg_col.max() >= 1 << 32):  # (as column_bytes: a wrong code is an error)
    raise OverflowError("an arg's code does not fit a u32 column")
  return (vals[at].tobytes(), dtype_col.tobytes(), arg_col.astype(u32).tobytes(), (size - 3).astype(u32).tobytes(),
          vals[~head].tobytes())


def default_trace_path() -> Path:
  """A timestamped file in a per-user cache directory."""
  stamp = time.strftime("%Y%m%d-%H%M%S")
  return trace_dir() / f"trace-{stamp}-{os.getpid()}.vztrace"


class RecordQueue:
  """What the recorder wrote since the last flush: the writer's `Deferred` tail.

  The recording thread only appends: a node's key and arg (TraceIds: its op, dtype, arg and source ids) when it
  gets its id, a match row (five ints), or another record (the dict, and in `at` how many nodes and matches came
  before it). A flush, in whichever thread, under the writer's lock, turns what was appended so far into `batch`
  records: the node columns (texts through the trace's string table) and the records with their positions, so a
  reader restores the exact order. Only the recording thread removes drained rows (compact(), under the lock)."""

  def __init__(self, lock: Any) -> None:
    from vztrace.format import MATCH_COLUMNS, MATCH_DT, NODE_COLUMNS, pack_bytes, pack_column
    from vztrace.writer import encode_json, nested_record_bytes
    self.lock = lock
    self.rows: list[bytes] = []  # the nodes' keys in id order
    self.args: list[Any] = []  # their args (the objects: a text is made once per object)
    self.site_rows: list[tuple[int, tuple[str, int, str]]] = []  # (id, call site) of the nodes with one, in id order
    self.ids = TraceIds(self.rows.append, self.site_rows.append, self.args.append)
    self.site_codes: dict[tuple[str, int, str], int] = {}  # the trace's call-site table: site -> its index + 1
    self.sites_new: list[dict] = []  # the table's entries made since the last batch (format.CALLSITE_FIELDS)
    self.pack, self.pack_bytes, self.json, self.record_bytes = pack_column, pack_bytes, encode_json, nested_record_bytes
    self.node_columns = node_columns
    # a batch's column names (one table, vztrace.format); node_columns makes the node columns in NODE_COLUMNS' order
    self.node_keys, self.match_keys = (tuple(k.encode() for k in ks) for ks in (NODE_COLUMNS, MATCH_COLUMNS))
    self.dt_key = MATCH_DT.encode()
    # the string table: text -> code, and the texts in order; it starts with the op names at their values, so an op
    # (an IntEnum) is its own code
    self.arg_str = arg_str
    self.strs: list[str] = [""] * (max(Ops) + 1)
    for op in Ops:
      self.strs[op] = op.name
    self.str_codes: dict[str, int] = {s: c for c, s in enumerate(self.strs)}
    self.dtype_codes: list[int] = []  # a key's dtype number -> the code of its text
    # arg object id -> code; every object given a code is kept alive in arg_kept (as long as this queue), so no id
    # is reused
    self.arg_ids: dict[int, int] = {}
    self.arg_kept: list[Any] = []
    self.arg_values: dict[Any, int] = {}  # (types, arg) -> code: equal args that are different objects
    self.matches: list[int] = []  # rw, pat, before, after, dt per match
    self.recs: list[dict] = []
    self.patterns_due: list[tuple[dict, Any]] = []  # pattern records (queued in recs) whose texts a flush makes
    self.at: list[int] = []  # per record: the nodes and matches before it (positions in the lists above)
    self.n_done = self.m_done = self.r_done = self.t_done = self.s_done = 0  # drained prefixes (t: strs, s: site_rows)
    self.next_id = 0  # id of the next node to drain

  # ---- the recording thread
  def compact(self) -> None:
    """Drop the drained rows (outside a node walk; in place, since the recorder holds the appenders). Only when every
    record is drained: the positions of one still queued count from the start of the lists."""
    with self.lock:
      if 2 * self.r_done != len(self.at):
        return
      del self.rows[:self.n_done]
      del self.args[:self.n_done]
      del self.site_rows[:self.s_done]
      del self.matches[:5 * self.m_done]
      del self.recs[:]
      del self.at[:]
      self.n_done = self.m_done = self.r_done = self.s_done = 0

  # ---- a flush (under the lock)
  def _code(self, s: str) -> int:
    c = self.str_codes.get(s)
    if c is None:
      c = self.str_codes[s] = len(self.strs)
      self.strs.append(s)
    return c

  def _arg_code(self, arg: Any) -> int:
    t = type(arg)
    if t is int or t is float:  # a cheap text (and 0.0 == -0.0, NaN != NaN: a float's is not shared with an equal's)
      return self._code(repr(arg))
    # the key carries the types so that 1, 1.0 and True (equal as dict keys) keep their own spelling
    key = (t, tuple(map(type, arg)), arg) if t is tuple else (t, arg)
    try:
      c = self.arg_values.get(key)
    except TypeError:  # an unhashable value inside a tuple
      c, key = None, None
    if c is None:
      c = self._code(self.arg_str(arg))
      if key is not None:
        self.arg_values[key] = c
    return c

  def _site_column(self, n: int) -> bytes:
    """The batch's call-site fields for its n nodes from next_id on (format.py "batch": `sites`, the table's new
    entries, and `site`, a node's index in the table + 1, 0 for none), or nothing where none of them has a site."""
    rows, sd, first = self.site_rows, self.s_done, self.next_id
    se = bisect.bisect_left(rows, first + n, lo=sd, key=_FIRST)
    if se == sd:
      return b""
    col, codes = [0] * n, self.site_codes
    for nid, site in rows[sd:se]:
      c = codes.get(site)
      if c is None:
        c = codes[site] = len(codes) + 1
        self.sites_new.append({"file": site[0], "line": site[1], "function": site[2]})
      col[nid - first] = c
    self.s_done = se
    part = b',"sites":%s,"site":"%s"' % (self.json(self.sites_new), self.pack(col))
    self.sites_new = []
    return part

  def pattern_record(self, pid: int, rule: Any) -> dict:
    """The `pattern` record of a rule first met: its texts (the source, read from its file; the pattern's repr) are
    made by the flush, in the writer's thread, and then kept for the process (_RULE_INFO)."""
    rec = {"t": "pattern", "id": pid, "file": None, "line": None, "src": None, "pat": "", "name": None}
    self.patterns_due.append((rec, rule))  # before the record is queued: a flush that sees it fills it in
    return rec

  def _fill_patterns(self) -> None:
    due = self.patterns_due
    n = len(due)
    for rec, rule in due[:n]:
      info = _RULE_INFO.get(rule)
      if info is None:
        info = _RULE_INFO[rule] = _rule_info(rule)
      rec.update(info)
    del due[:n]

  def drain(self) -> list[bytes]:
    # records, then matches, then nodes: what a row needs was appended before the row is counted
    r = len(self.at) // 2
    m = len(self.matches) // 5
    k = len(self.rows)
    # after the counts: a pattern record is put in patterns_due before it is queued, so every one counted is filled
    # (filled first, one queued meanwhile by the recording thread went out with no name, file or source)
    self._fill_patterns()
    out = []
    while self.r_done < r or self.n_done < k or self.m_done < m:
      out.append(self._batch(r, m, k))
    return out

  def _all_recs(self, ra: int, r: int) -> list[bytes] | None:
    """recs[ra:r] encoded in one go (the usual case), or None if one of them needs encode_record's fallbacks or they
    are too big for one batch."""
    try:
      text = self.json(self.recs[ra:r])
    except (ValueError, TypeError, RecursionError, UnicodeEncodeError):
      return None
    return [text[1:-1]] if len(text) <= BATCH_BYTES else None

  def _batch(self, r: int, m: int, k: int) -> bytes:
    """One batch record from the drained prefixes on: at most BATCH_ROWS nodes, BATCH_ROWS matches and about
    BATCH_BYTES of records, cut after a record where it can be."""
    na, ma, ra = self.n_done, self.m_done, self.r_done
    at, recs, cap = self.at, self.recs, BATCH_ROWS

    def fits(j: int) -> bool:  # records ra..j-1 and the rows before them
      return at[2 * j - 2] - na <= cap and at[2 * j - 1] - ma <= cap

    rb, parts = ra, self._all_recs(ra, r) if r > ra and fits(r) else None
    if parts is not None:
      rb = r
    else:  # one by one: a record that cannot be encoded is replaced alone, and a big batch is cut
      parts, size = [], 0
      while rb < r and fits(rb + 1) and size <= BATCH_BYTES:
        parts.append(self.record_bytes(recs[rb]))
        size += len(parts[-1])
        rb += 1
    if rb == r and k - na <= cap and m - ma <= cap:
      nb, mb = k, m  # everything, with the rows after the last record
    elif rb > ra:
      nb, mb = at[2 * rb - 2], at[2 * rb - 1]  # up to the last record that fits
    else:  # the rows before the next record (or all there are) are too many: a part of them
      nb, mb = (at[2 * ra], at[2 * ra + 1]) if ra < r else (k, m)
      # nodes first (no matches yet); once they fit, matches: each names nodes made before it, all in this batch
      nb, mb = (na + cap, ma) if nb - na > cap else (nb, min(mb, ma + cap))
    pack, raw = self.pack, self.pack_bytes
    dts = self.dtype_codes
    dts.extend(self._code(str(dt)) for dt in self.ids.dtypes[len(dts):])  # the dtypes named since the last batch
    node_cols = self.node_columns(self.rows[na:nb], self.args[na:nb], dts, self.arg_ids, self._arg_code,
                                  self.arg_kept)
    site_part = self._site_column(nb - na)
    rows = self.matches[5 * ma:5 * mb]  # the match columns are its every 5th value (rw, pat, before, after, dt)
    positions = [x - (ma if i & 1 else na) for i, x in enumerate(at[2 * ra:2 * rb])]
    # spliced by hand: base64 needs no escaping, and json would scan every character of it
    data = (b'{"t":"batch","id":%d,"strs":%s' % (self.next_id, self.json(self.strs[self.t_done:])) +
            b"".join(b',"%s":"%s"' % (name, raw(v)) for name, v in zip(self.node_keys, node_cols)) + site_part +
            b"".join(b',"%s":"%s"' % (name, pack(rows[i::5])) for i, name in enumerate(self.match_keys)) +
            b',"%s":"%s","at":"%s","recs":[%s]}' % (self.dt_key, pack(rows[4::5], "i64s"), pack(positions),
                                                     b",".join(parts)))
    recs[ra:rb] = itertools.repeat(None, rb - ra)  # written: let them go now (compact() drops the slots later)
    self.t_done = len(self.strs)
    self.next_id += nb - na
    self.n_done, self.m_done, self.r_done = nb, mb, rb
    return data


def _rule_info(rule: Any) -> dict:
  """A rule's pattern record fields (reading its source file); a text that cannot be made says why instead (this
  runs in the flush: a failure must not stop it)."""
  file, line = rule.location
  return {"file": file, "line": line, "src": _text(lambda: _rule_source(rule), "# source not available: "),
          "pat": _text(lambda: repr(rule.pat), "<pattern not available: "),
          "name": _text(lambda: rule.name, "<name not available: ")}


_END_LINE = operator.itemgetter(1)  # of a code position (None for code with no line)
_DEF_LINE = re.compile(r'^(\s*def\s)|(\s*async\s+def\s)|(.*(?<!\w)lambda(:|\s))|^(\s*@)')  # inspect.findsource's


def _rule_source(rule: Any) -> str:
  """rule.source (inspect.getsource of the rule's function, stripped), for a plain `def` without the tokenizer, which
  was ~12 ms of the demo's flushes for 36 rules: from its `def` (or first decorator) line to the last line any of its
  code covers. inspect's answer where that could differ: a lambda, a wrapped function, or a line after that one (before
  the next line of code) indented past the `def`: a comment inspect may keep, or code no instruction covers."""
  fn = rule.fn
  code = getattr(fn, "__code__", None)
  if code is None or code.co_name == "<lambda>" or hasattr(fn, "__wrapped__") or not hasattr(code, "co_positions"):
    return rule.source
  lines = linecache.getlines(code.co_filename)
  start = code.co_firstlineno - 1
  while 0 < start < len(lines) and not _DEF_LINE.match(lines[start]):  # (the search inspect.findsource makes)
    start -= 1
  stack, last = [code], 0
  while stack:  # the code of nested functions and comprehensions too
    c = stack.pop()
    last = max(last, max(filter(None, map(_END_LINE, c.co_positions())), default=0))
    stack.extend(k for k in c.co_consts if hasattr(k, "co_positions"))
  if not 0 <= start < last <= len(lines):
    return rule.source
  indent = len(lines[start]) - len(lines[start].lstrip())
  for t in lines[last:]:  # up to the next line of code: what inspect could count in the block (or code: dead code)
    text = t.lstrip()
    if text and len(t) - len(text) > indent:  # (a comment at or left of the def's column it leaves out)
      return rule.source
    if text and not text.startswith("#"):
      break
  return "".join(lines[start:last]).strip()


def _text(make: Callable[[], str], why: str) -> str:
  try:
    return make()
  except Exception as e:
    return f"{why}{type(e).__name__}: {e}" + (">" if why.startswith("<") else "")


BATCH_ROWS = 1 << 17  # nodes, and matches, per batch at most; with BATCH_BYTES (+ a record) far below the frame limit
BATCH_BYTES = 16 << 20
COMPACT_AT = 1 << 16  # drained rows kept before the recording thread drops them
FLUSH_AT = 1 << 22  # nodes and match fields (5 a match) queued before the recording thread flushes itself


class Recorder:
  """Turns compiler events into trace records; each UOp and each rule is written once and then referenced by id.

  Everything goes into a `RecordQueue`, which the writer turns into `batch` records when it flushes (every 100 ms in
  its background thread, and on flush/close): recording a match or a new node costs an append. The trace keeps no
  UOp alive (TraceIds)."""

  def __init__(self, path: str | os.PathLike):
    import platform  # (here: a program that never records does not import what the meta record needs)
    import socket

    from vztrace.writer import TraceWriter
    self.path = Path(path)
    self.writer = TraceWriter(self.path, background=True)  # an idle process still shows its last records
    self.pattern_ids: dict[Any, int] = {}
    self._queue = self.writer.tail = RecordQueue(self.writer.lock)
    self.ids = self._queue.ids
    self._base, self._top = self.ids.base, self.ids.top  # the fast path of match(): TraceIds.id_of's, inlined
    self._name_below = self.ids._name_below
    self._matches = self._queue.matches
    self.ctx_stack: list[int] = [0]
    self.next_ctx = 1
    self.next_rw = 0
    self.closed = False
    self.exit: dict | None = None  # how the program ended, where not cleanly (note_exit): the end record carries it
    # kernel name -> the call sites of the ops it computes (the latest schedule's): its kernel contexts carry them
    self.kernel_sites: dict[str, tuple[list[dict], int]] = {}
    self.match_log: list[tuple[UOp, UOp]] | None = None  # (before, after) of each match, while a schedule asks
    from vztrace.format import VERSION  # (the meta record names the version its writer wrote, as the header does)
    meta = {"t": "meta", "version": f"{VERSION[0]}.{VERSION[1]}", "argv": list(sys.argv), "host": socket.gethostname(),
            "pid": os.getpid(), "python": platform.python_version(), "started": time.time(), "cwd": os.getcwd(),
            "user": _user()}
    switches = getattr(sys.modules.get("compiler.rewrite"), "SWITCHES", None)  # (rewrite imports this module)
    if switches is not None and switches.active():  # what SKIP_RULES / SKIP_MATCHES / SKIP_OPTS turned off
      meta["off"] = switches.meta()
    self._enqueue(meta)
    self._enqueue({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default",
                   "ts": time.time()})

  def _enqueue(self, rec: dict) -> None:
    """Queue a record after the nodes and matches recorded so far."""
    if self.closed:
      raise ValueError("write to a closed Recorder")
    b = self._queue
    if b.n_done > COMPACT_AT or b.m_done > COMPACT_AT:
      b.compact()
    elif len(b.rows) + len(b.matches) > FLUSH_AT:  # the background thread is not keeping up (or gone: a fork)
      self.writer.flush()
    b.recs.append(rec)
    b.at.extend((len(b.rows), len(b.matches) // 5))

  # ---- nodes and patterns
  def node_id(self, u: UOp) -> int:
    """The id of u, giving u and every node below it without one an id (sources first)."""
    return self.ids.id_of(u)

  def pattern_id(self, rule: Any) -> int:
    pid = self.pattern_ids.get(rule)
    if pid is not None:
      return pid
    pid = self.pattern_ids[rule] = len(self.pattern_ids)
    info = _RULE_INFO.get(rule)
    self._enqueue({"t": "pattern", "id": pid, **info} if info is not None else self._queue.pattern_record(pid, rule))
    return pid

  # ---- contexts
  @property
  def current_ctx(self) -> int:
    return self.ctx_stack[-1]

  def ctx_begin(self, name: str, kind: str = "context", schedule: int | None = None, push: bool = True) -> int:
    """Open a context; `schedule`: the schedule context that made what it runs (a kernel's, a copy's, a memory
    plan's) as `context_ref` gave it, written where it is one of this recording's earlier contexts. `push=False`:
    begun but not made current (a kernel compiled ahead: its records go in while `inside` it, its end comes at its
    turn, `trace_context(begun=)`); its parent is the current context either way."""
    cid = self.next_ctx
    self.next_ctx += 1
    rec = {"t": "ctx_begin", "id": cid, "parent": self.ctx_stack[-1], "name": str(name), "kind": kind,
           "ts": time.time()}
    if schedule is not None and 0 < (local := schedule - self.ids.base) < cid:  # (another recording's: left out)
      rec["schedule"] = local
    if kind == "kernel" and (sites := self.kernel_sites.get(rec["name"])) is not None:
      rec["callsites"], rec["callsites_more"] = sites
    self._enqueue(rec)
    if push:
      self.ctx_stack.append(cid)
    return cid

  def ctx_end(self, cid: int, error: str | None = None) -> None:
    rec = {"t": "ctx_end", "id": cid, "ts": time.time()}
    if error is not None:
      rec["error"] = error
    self._enqueue(rec)
    if cid in self.ctx_stack:
      del self.ctx_stack[self.ctx_stack.index(cid):]

  # ---- rewrites
  def rewrite_begin(self, name: str, file: str, line: int, bottom_up: bool, root: UOp) -> int:
    rid = self.next_rw
    self.next_rw += 1
    self._enqueue({"t": "rw_begin", "id": rid, "ctx": self.ctx_stack[-1], "name": name, "file": file, "line": line,
             "bottom_up": bottom_up, "root": self.node_id(root), "ts": time.time()})
    return rid

  def match(self, rw: int, rule: Any, before: UOp, after: UOp, dt_ns: int) -> None:
    base, top = self._base, self._top
    b = before._trace_id
    b = b - base if base <= b < top else self._name_below(before)
    a = after._trace_id
    if base <= a < top:
      a -= base
    else:
      if before.callsite is not None and after.callsite is None:
        inherit_callsite(after, before)  # what a rule made of a node of the user's line is of that line too
      a = self._name_below(after)
    p = self.pattern_ids.get(rule)
    if p is None:
      p = self.pattern_id(rule)
    self._matches.extend((rw, p, b, a, dt_ns))
    if self.match_log is not None:  # (a schedule follows its nodes through the rewrites: KernelSites)
      self.match_log.append((before, after))

  def match_error(self, rw: int, rule: Any, before: UOp, exc: BaseException) -> None:
    self._enqueue({"t": "match", "rw": rw, "pat": self.pattern_id(rule), "before": self.node_id(before), "after": None,
             "dt": 0, "error": f"{type(exc).__name__}: {exc}"})

  def rewrite_end(self, rw: int, root: UOp | None, dt_ns: int, matches: int, error: str | None = None) -> None:
    rec = {"t": "rw_end", "id": rw, "root": None if root is None else self.node_id(root), "dt": dt_ns,
           "matches": matches}
    if error is not None:
      rec["error"] = error
    self._enqueue(rec)

  # ---- kernels
  def record(self, t: str, **fields: Any) -> None:
    """Write an opt/beam/source/run/error record into the current context."""
    fields.setdefault("ctx", self.ctx_stack[-1])
    self._enqueue({"t": t, **fields})

  def note_exit(self, ex: dict) -> None:
    """Say in the end record how the program ended (an `exit`, exit_record): the main thread's ending wins over an
    error in another thread, and the first of each kind over later ones."""
    if self.exit is None or (self.exit["kind"] == "thread" and ex["kind"] != "thread"):
      self.exit = ex

  def close(self) -> None:
    if self.closed:
      return
    self._enqueue({"t": "ctx_end", "id": 0, "ts": time.time()})
    end: dict[str, Any] = {"t": "end", "ts": time.time()}
    if self.exit is not None:
      end["exit"] = self.exit
    self._enqueue(end)
    self.closed = True
    try:
      self.writer.close()
    finally:
      self.ids.close()


# ---- how the program ended
# The `end` record says how the program ended where it did not end cleanly (vztrace.format.EXIT_FIELDS): the hooks
# below note an uncaught exception (sys.excepthook; KeyboardInterrupt too), one in another thread (threading.excepthook)
# or sys.exit with a status other than 0 on the recorder, and close() (at exit, after them) writes it. Each hook calls
# the one it replaced, and is installed while recording only.

_COMPILER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SYSTEM_EXIT_CODE = SystemExit.code  # the member SystemExit keeps its status in
_HOOKS: dict[str, tuple[Any, Any]] = {}  # "sys" / "threading" / "exit" -> (ours, the one it replaced)


def exit_record(kind: str, exc: BaseException, frames: list[tuple[str, int | None, str]], **more: Any) -> dict:
  """The end record's `exit` for exc raised through frames ((file, line, function), outermost first; `more`: status,
  thread; vztrace.format.EXIT_FIELDS): the user's frame is the innermost one outside the compiler package, and the texts
  are clipped as a reader clips them."""
  import traceback

  from vztrace.format import MAX_EXIT_FRAMES, MAX_EXIT_MESSAGE, clip_text
  file, line, fn = next((f for f in reversed(frames) if not os.path.abspath(f[0]).startswith(_COMPILER_DIR)),
                        (None, None, None))
  kept = [traceback.FrameSummary(*f) for f in frames[len(frames) - min(len(frames), MAX_EXIT_FRAMES):]]
  t = SystemExit if isinstance(exc, ProgramExit) else type(exc)
  name = t.__qualname__ if t.__module__ in ("builtins", "__main__") else f"{t.__module__}.{t.__qualname__}"
  return {"kind": kind, "type": clip_text(name),
          "message": clip_text(_text(lambda: str(exc), "<message not available: "), MAX_EXIT_MESSAGE),
          "file": clip_text(file), "line": line, "function": clip_text(fn),
          "traceback": [{"file": clip_text(f.filename), "line": f.lineno, "function": clip_text(f.name),
                         "text": clip_text(f.line or None)} for f in kept],
          "omitted": len(frames) - len(kept), **more}


def _note_exit(kind: str, exc: BaseException, frames: Any, **more: Any) -> None:
  """Note on the recorder how the program ended; frames: a traceback, or (file, line, function) outermost first."""
  rec = RECORDER
  if not isinstance(rec, Recorder) or rec.closed:  # (VIZ set but nothing traced: there is no trace to end)
    return
  try:
    if not isinstance(frames, list):
      import traceback
      frames = [(f.f_code.co_filename, n, f.f_code.co_name) for f, n in traceback.walk_tb(frames)]
    rec.note_exit(exit_record(kind, exc, frames, **more))
  except Exception as e:  # a hook that raised would print its own traceback over the program's
    print(f"VIZ: could not record how the program ended: {type(e).__name__}: {e}", file=sys.stderr, flush=True)


class ProgramExit(SystemExit):
  """What sys.exit raises while recording. Python calls no hook for an uncaught SystemExit, but reads its `code` to
  find the exit status, with no Python frame left on the stack (all unwound), as no `except` clause ever does: that
  read notes the exit (a status other than 0) on the recorder. `frames`: where sys.exit was called (the traceback of
  an uncaught exception is not on it then)."""
  frames: list[tuple[str, int | None, str]] = []

  @property  # type: ignore[override]
  def code(self) -> Any:
    status = _SYSTEM_EXIT_CODE.__get__(self)
    if not (status is None or (isinstance(status, int) and status == 0)):
      try:
        sys._getframe(1)
      except ValueError:  # read by the interpreter, ending the program
        _note_exit("exit", self, self.frames, status=int(status) if isinstance(status, int) else
                   _text(lambda: str(status), "<status not available: "))
    return status

  @code.setter
  def code(self, value: Any) -> None:
    _SYSTEM_EXIT_CODE.__set__(self, value)


def _install_exit_hooks() -> None:
  import threading
  if _HOOKS:
    return
  prev_sys, prev_thread = sys.excepthook, threading.excepthook

  def excepthook(tp: type[BaseException], value: BaseException, tb: Any) -> None:
    if not hasattr(sys, "ps1"):  # (at the interactive prompt an error ends one statement, not the program)
      _note_exit("interrupt" if issubclass(tp, KeyboardInterrupt) else "exception", value, tb)
    prev_sys(tp, value, tb)

  def thread_excepthook(args: Any) -> None:
    if args.exc_value is not None and not issubclass(args.exc_type, SystemExit):  # (the default hook ignores those)
      _note_exit("thread", args.exc_value, args.exc_traceback,
                 thread=None if args.thread is None else str(args.thread.name))
    prev_thread(args)

  def exit(status: object = None) -> None:
    e = ProgramExit(status)
    f, e.frames = sys._getframe(1), []
    while f is not None:  # (names and lines only: holding the frames would keep their locals alive)
      e.frames.append((f.f_code.co_filename, f.f_lineno, f.f_code.co_name))
      f = f.f_back
    e.frames.reverse()
    raise e
  exit.__doc__ = sys.exit.__doc__

  _HOOKS.update(sys=(excepthook, prev_sys), threading=(thread_excepthook, prev_thread), exit=(exit, sys.exit))
  sys.excepthook, threading.excepthook, sys.exit = excepthook, thread_excepthook, exit


def _uninstall_exit_hooks() -> None:
  """Put back each hook ours replaced, where ours is still the one installed (one installed over it calls ours, which
  then only passes on)."""
  import threading
  for holder, name, key in ((sys, "excepthook", "sys"), (threading, "excepthook", "threading"), (sys, "exit", "exit")):
    ours, prev = _HOOKS.pop(key, (None, None))
    if ours is not None and getattr(holder, name) is ours:
      setattr(holder, name, prev)


def _user() -> str:
  import getpass
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
  _install_exit_hooks()
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
    from compiler.trace.launch import launch_viewer
    launch_viewer(rec.path, disable)
  return rec


def disable() -> Path | None:
  """Stop recording and close the file; returns its path."""
  global RECORDER
  rec, RECORDER = RECORDER, None
  _uninstall_exit_hooks()
  if not isinstance(rec, Recorder):
    return None
  try:
    rec.close()
  finally:
    forget_callsites()
  return rec.path


def forget_callsites() -> None:
  """Drop the call sites noted while a recording ran from every live node: hash-consing gives a node made again in a
  later recording the same object, and the line that made it there is the later one's (a site kept from the earlier
  recording named another program's line, a test's temporary file in the next test's trace)."""
  for u in live_uops():
    if u.callsite is not None:  # (asked of the class default first: no __dict__ made for a node without one)
      u.__dict__.pop(CALLSITE_KEY, None)


def context_ref(cid: int | None) -> int | None:
  """A context id of this recording as something made now keeps it (ScheduleItem.ctx): with the recording's base
  (TraceIds.base), so that a step made while one recording ran and run in a later one names no context of that one."""
  rec = RECORDER
  return None if rec is None or cid is None else rec.ids.base + cid


@contextlib.contextmanager
def trace_context(name: str, kind: str = "context", schedule: int | None = None,
                  begun: int | None = None) -> Iterator[int | None]:
  """Open a named, nestable trace context (a schedule, a kernel, ...); free when tracing is off. Yields its id;
  `schedule`: the schedule context that made what this one runs, as `context_ref` gave it (Recorder.ctx_begin).
  `begun`: a context begun earlier and not ended (`ctx_begin(push=False)`: a kernel compiled ahead) goes on here
  instead of a new one, and ends here."""
  rec = RECORDER
  if rec is None:
    yield None
    return
  if begun is None:
    cid = rec.ctx_begin(name, kind, schedule)
  else:
    cid = begun
    rec.ctx_stack.append(cid)
  try:
    yield cid
  except BaseException as e:
    rec.ctx_end(cid, error=f"{type(e).__name__}: {e}")
    raise
  rec.ctx_end(cid)


@contextlib.contextmanager
def inside(cid: int) -> Iterator[None]:
  """Record into the context `cid` (begun by `ctx_begin(push=False)`, not ended) within, and leave it open after: a
  kernel's Python part made ahead of its turn (compiler.realize._Ahead)."""
  rec = RECORDER
  if rec is None:
    yield
    return
  stack = rec.ctx_stack
  depth = len(stack)
  stack.append(cid)
  try:
    yield
  finally:
    del stack[depth:]  # (what was opened inside and not closed, as ctx_end would drop it)


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


# ---- call sites: which line of the user's program made a tensor node, and so a kernel (while recording only)
# The front end notes on each node it makes (in the node's __dict__, which dies with it and is no part of its
# structure) the first frame outside the compiler package, as tinygrad's metadata does; the scheduler collects those
# of the nodes each kernel computes (schedule.rangeify.KernelSites) and kernel contexts carry them (`callsites`).

CALLSITE_KEY = "callsite"  # a tensor node's __dict__ key: (file, line, function)
_IN_COMPILER: dict[str, bool] = {}  # a code object's file -> whether it is in the compiler package
_SITES: dict[tuple[str, int, str], tuple[str, int, str]] = {}  # one tuple per call site (a site makes many nodes)


def note_callsite(u: UOp) -> None:
  """Remember on u the user's frame that made it: the first one outside the compiler package. The first maker keeps
  it (hash-consing makes one node of equal ones); callers call this only while recording."""
  d = u.__dict__
  if CALLSITE_KEY in d:
    return
  f: Any = sys._getframe(1)
  inside = _IN_COMPILER
  while f is not None:
    file = f.f_code.co_filename
    c = inside.get(file)
    if c is None:
      c = inside[file] = os.path.abspath(file).startswith(_COMPILER_DIR)
    if not c:
      site = (file, f.f_lineno, f.f_code.co_name)
      d[CALLSITE_KEY] = _SITES.setdefault(site, site)
      return
    f = f.f_back


def inherit_callsite(u: UOp, made_from: UOp) -> None:
  """Give u, a node the compiler made of made_from (a rule's result, or made_from rebuilt over new sources), the call
  site of made_from, so that the viewer can show it and group by it through the rewrites (while recording only)."""
  u.__dict__.setdefault(CALLSITE_KEY, made_from.callsite)


def callsite_of(u: UOp) -> tuple[str, int, str] | None:
  """The (file, line, function) that made tensor node u, where it was noted (note_callsite)."""
  return u.__dict__.get(CALLSITE_KEY)


def note_kernel_callsites(name: str, sites: list[tuple[str, int, str]]) -> None:
  """The call sites of the ops of the kernel `name` (in the order its ops are computed, its output's last), for its
  kernel contexts from now on: the first MAX_CALLSITES - 1 and the last (its output's), and how many more there were."""
  rec = RECORDER
  if not isinstance(rec, Recorder):
    return
  from vztrace.format import MAX_CALLSITES
  kept = sites if len(sites) <= MAX_CALLSITES else [*sites[:MAX_CALLSITES - 1], sites[-1]]
  rec.kernel_sites[name] = ([{"file": f, "line": n, "function": fn} for f, n, fn in kept], len(sites) - len(kept))
