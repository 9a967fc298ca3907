"""The node records of one trace, kept compactly in flat arrays (no per-node Python objects)."""
from __future__ import annotations

import threading
from array import array
from itertools import accumulate, chain, islice, repeat
from operator import ge

from vztrace.reader import BatchNodes

Node = tuple[str, str, str, tuple[int, ...]]  # (op, dtype, arg, src ids)
Site = tuple[str, int, str]  # the user's line that made a node: (file, line, function)


class NodeColumns:
  """Every node of a trace in columns: op/dtype/arg are small codes into a string table, sources a CSR array.

  The recorder numbers nodes 0, 1, 2, ... so the id is the row; a trace with other ids gets an id->row dict.
  A node is accepted only if all its sources are already known, so the table is always a DAG. Nodes come one by
  one (`add`, a `node` record) or as the reader's runs of a batch (`add_run`), whose codes are translated. A node's
  call site (trace 2.7) is a code into a table of sites, 0 for none (4 bytes a node).
  """

  def __init__(self) -> None:
    self._strs: list[str] = []
    self._codes: dict[str, int] = {}
    self._op = array("I")
    self._dtype = array("I")
    self._arg = array("I")
    self._src_start = array("Q", [0])
    self._src = array("q")
    self._ids = array("q")  # row -> id
    self._rows: dict[int, int] | None = None  # id -> row, only when ids are not 0..n-1
    self._struct: dict[int, int | list[int]] | None = None  # hash(op, dtype, arg, srcs) -> id(s), built on demand
    # held while the index is built and while a new row is entered in it: a replay (a request's thread, the prefetch
    # worker) builds it while the ingest thread adds rows, and a reader must never see it half built (a miss gives a
    # trace node a fresh id) nor a row lost between the build's count of the rows and its publication
    self._struct_lock = threading.Lock()
    self._indexer: threading.Thread | None = None  # the thread building the index ahead of a replay (index_ahead)
    self._xlat: list[int] = []  # the reader's string code -> ours (its table only grows, see BatchNodes)
    self._site = array("I")  # row -> its call site's code (index in _sites + 1; 0: none)
    self._sites: list[Site] = []
    self._site_codes: dict[Site, int] = {}
    self._sxlat: list[int] = [0]  # the reader's call-site code -> ours (as _xlat)

  def __len__(self) -> int:
    return len(self._ids)

  def _code(self, s: str) -> int:
    c = self._codes.get(s)
    if c is None:
      c = self._codes[s] = len(self._strs)
      self._strs.append(s)
    return c

  def _row(self, nid: int) -> int:
    if self._rows is None:
      return nid if 0 <= nid < len(self._ids) else -1
    return self._rows.get(nid, -1)

  def __contains__(self, nid: int) -> bool:
    return self._row(nid) >= 0

  def _site_code(self, site: Site) -> int:
    c = self._site_codes.get(site)
    if c is None:
      self._sites.append(site)
      c = self._site_codes[site] = len(self._sites)
    return c

  def add(self, nid: int, op: str, dtype: str, arg: str, src: list[int], site: Site | None = None) -> str | None:
    """Append one node (made by the user's line `site`, if known); returns why it was rejected (duplicate id, unknown
    source) or None."""
    row = len(self._ids)
    if self._rows is None and nid == row and (not src or (min(src) >= 0 and max(src) < row)):
      pass  # the recorder's numbering: ids are rows and sources come first
    else:
      if self._row(nid) >= 0:
        return f"node {nid} is defined twice"
      for s in src:
        if self._row(s) < 0:
          return f"node {nid} uses node {s} before it is defined"
      if self._rows is None:
        self._rows = {int(i): r for r, i in enumerate(self._ids)}
      self._rows[nid] = row
    codes = self._codes
    oc, dc, ac = codes.get(op), codes.get(dtype), codes.get(arg)
    if oc is None:
      oc = self._code(op)
    if dc is None:
      dc = self._code(dtype)
    if ac is None:
      ac = self._code(arg)
    self._op.append(oc)
    self._dtype.append(dc)
    self._arg.append(ac)
    self._src.extend(src)
    self._src_start.append(len(self._src))
    self._site.append(0 if site is None else self._site_code(site))
    self._ids.append(nid)  # last: a reader in another thread sees the row only once it is complete
    with self._struct_lock:
      if self._struct is not None:
        self._index(self._struct, nid, (oc, dc, ac, tuple(src)))
    return None

  def add_run(self, run: BatchNodes) -> list[str]:
    """Append a run of a batch's nodes; returns why nodes were rejected (as add() says it, one line each)."""
    first, n, row = run.first, len(run), len(self._ids)
    if self._rows is not None or first != row or not _sources_first(run):
      # not the recorder's numbering: node by node, with add()'s checks
      return [why for rec in run.records()
              if (why := self.add(rec["id"], rec["op"], rec["dtype"], rec["arg"], rec["src"],
                                  site_of(rec.get("site")))) is not None]
    xlat = self._xlat
    for s in run.strs[len(xlat):]:
      xlat.append(self._code(s))
    code = xlat.__getitem__
    self._op.extend(map(code, run.op))
    self._dtype.extend(map(code, run.dtype))
    self._arg.extend(map(code, run.arg))
    self._src_start.extend(islice(accumulate(run.nsrc, initial=len(self._src)), 1, None))
    self._src.fromlist(run.src.tolist())
    if run.site is None:
      self._site.frombytes(bytes(n * self._site.itemsize))
    else:
      sx = self._sxlat
      for d in run.sites[len(sx) - 1:]:
        sx.append(self._site_code(site_of(d)))  # type: ignore[arg-type]
      self._site.extend(map(sx.__getitem__, run.site))
    self._ids.extend(range(first, first + n))  # last: a reader in another thread sees the rows once complete
    with self._struct_lock:
      if self._struct is not None:
        for nid in range(first, first + n):  # (ids are rows here)
          self._index(self._struct, nid, self._key_at(nid))
    return []

  def _key_at(self, row: int) -> tuple[int, int, int, tuple[int, ...]]:
    a, b = self._src_start[row], self._src_start[row + 1]
    return (self._op[row], self._dtype[row], self._arg[row], tuple(self._src[a:b]))

  def get(self, nid: int) -> Node | None:
    row = self._row(nid)
    if row < 0:
      return None
    s = self._strs
    return (s[self._op[row]], s[self._dtype[row]], s[self._arg[row]],
            tuple(self._src[self._src_start[row]:self._src_start[row + 1]]))

  def site(self, nid: int) -> Site | None:
    """The user's line that made node nid, where the trace says (None for a node it names none for, or unknown)."""
    row = self._row(nid)
    c = self._site[row] if row >= 0 else 0
    return self._sites[c - 1] if c else None

  def look(self, nid: int) -> tuple[str, str, str]:
    """A node's (op, dtype, arg), without its sources."""
    row, s = self._row(nid), self._strs
    return s[self._op[row]], s[self._dtype[row]], s[self._arg[row]]

  def src(self, nid: int) -> tuple[int, ...]:
    row = self._row(nid)
    return tuple(self._src[self._src_start[row]:self._src_start[row + 1]]) if row >= 0 else ()

  def op(self, nid: int) -> str | None:
    row = self._row(nid)
    return self._strs[self._op[row]] if row >= 0 else None

  def ids(self) -> array:
    return self._ids

  def row(self, nid: int) -> int:
    """The position of a node in definition order (-1 if unknown)."""
    return self._row(nid)

  @property
  def max_id(self) -> int:
    if not len(self._ids):
      return -1
    return len(self._ids) - 1 if self._rows is None else max(self._ids)

  # ---- structural lookup (what replay uses to give rebuilt nodes the ids the trace gives them)
  def key(self, op: str, dtype: str, arg: str, src: tuple[int, ...]) -> tuple[int, int, int, tuple[int, ...]] | None:
    """The structural key of a node, or None if op/dtype/arg never occur in this trace (so no node has it)."""
    c = self._codes
    oc, dc, ac = c.get(op), c.get(dtype), c.get(arg)
    if oc is None or dc is None or ac is None:
      return None
    return (oc, dc, ac, src)

  def find(self, op: str, dtype: str, arg: str, src: tuple[int, ...], max_row: int | None = None) -> int | None:
    """The id of the node with exactly this structure among the first max_row nodes, if the trace has one."""
    k = self.key(op, dtype, arg, src)
    if k is None:
      return None
    hit = self._structure().get(hash(k))
    if hit is None:
      return None
    for nid in (hit if isinstance(hit, list) else (hit,)):
      row = self._row(nid)
      if max_row is not None and row >= max_row:
        continue
      if (self._op[row], self._dtype[row], self._arg[row]) == k[:3] and self.src(nid) == src:
        return nid
    return None

  def find_like(self, nid: int, src: tuple[int, ...], max_row: int | None = None) -> int | None:
    """find() for the node with nid's op, dtype and arg over src (nid a node of this table): its codes are used as
    they are (replay rebuilds ~2,000 nodes a step of a GPT step's `add bufferize`; no strings made and looked up)."""
    row = self._row(nid)
    k = (self._op[row], self._dtype[row], self._arg[row], src)
    hit = self._structure().get(hash(k))
    if hit is None:
      return None
    ss, op, dt, ar = self._src_start, self._op, self._dtype, self._arg
    for cand in (hit if isinstance(hit, list) else (hit,)):
      r = self._row(cand)
      if max_row is not None and r >= max_row:
        continue
      if op[r] == k[0] and dt[r] == k[1] and ar[r] == k[2] and tuple(self._src[ss[r]:ss[r + 1]]) == src:
        return cand
    return None

  def _structure(self) -> dict[int, int | list[int]]:
    """The structural index, built whole before any reader sees it (the rows there are when the lock is taken: a
    row added later waits for the lock and then enters the built index)."""
    got = self._struct
    if got is not None:
      return got
    with self._struct_lock:
      if self._struct is None:
        built: dict[int, int | list[int]] = {}
        for r in range(len(self._ids)):
          self._index(built, self._ids[r], self._key_at(r))
        self._struct = built
      return self._struct

  def index_ahead(self) -> threading.Thread | None:
    """Build the structural index on a thread of its own, unless it is built or being built (the thread, else None).
    Asked where a rewrite's graph with steps was answered: its steps' replays look nodes up next, and the first step
    waited for the index (~0.1 s over a GPT step's 130k nodes, the arrow steps' p95, issue 30)."""
    with self._struct_lock:
      if self._struct is not None or self._indexer is not None:
        return self._indexer
      self._indexer = threading.Thread(target=self._structure, name="tinyviz-node-index", daemon=True)
    self._indexer.start()
    return self._indexer

  @staticmethod
  def _index(struct: dict[int, int | list[int]], nid: int, k: tuple) -> None:
    # only the hash is kept (an int per node, not a key tuple); find() checks candidates against the table
    h = hash(k)
    prev = struct.get(h)
    if prev is None:
      struct[h] = nid
    elif isinstance(prev, list):
      prev.append(nid)
    else:
      struct[h] = [prev, nid]

  def nbytes(self) -> int:
    """Approximate memory of the arrays (for the bench)."""
    arrays = (self._op, self._dtype, self._arg, self._src_start, self._src, self._ids, self._site)
    return sum(a.itemsize * len(a) for a in arrays) + sum(len(s) + 49 for s in self._strs)


def site_of(d: dict | None) -> Site | None:
  """A call site of the reader's (checked against format.CALLSITE_FIELDS) as the table keeps it."""
  return None if d is None else (d["file"], d["line"], d["function"])


def _sources_first(run: BatchNodes) -> bool:
  """Whether every node of the run names only nodes with smaller ids (ids are u32s: never negative), checked in C."""
  owners = chain.from_iterable(map(repeat, range(run.first, run.first + len(run)), run.nsrc))
  return not any(map(ge, run.src, owners))
