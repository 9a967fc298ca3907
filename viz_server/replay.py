"""Step replay: the graph of a rewrite after its first k matches (see "Replay semantics" in docs/architecture.md).

The first k matches form a replacement map R. The graph at step k is what graph_rewrite returns when no further
rule fires: the root resolved through R. Resolving rebuilds a node over its resolved sources (interned by
structure, so a rebuilt node gets the id the trace gives it) and follows R where a node is replaced, the way the
rewriter does it top-down (a match on a node before its sources are rewritten; a rule's result tried again, not
looked up; a fixed-point chain of matches replacing only the node it started from) or bottom-up.

Resolutions are memoized with reverse dependencies, so adding one entry of R re-resolves only what depended on it.
Steps are computed once, in order, by one run (`_Run`) that only moves forward; a node replay makes gets the next
fresh id, so ids depend only on that order. Memory is bounded by checkpoints (docs: "Bounded replay"): once a
segment of steps made SEGMENT_NODES nodes (or has SEGMENT_STEPS steps), the run's state is saved compactly
(`_Checkpoint`) and the run forgets the nodes it made that nothing it holds refers to; a segment (its StepInfos,
the nodes it can show, when nodes entered the graph) is kept while among the last SEGMENTS_KEPT asked for, and
otherwise made again by a run from the checkpoint before it: a question replays at most one segment.
"""
from __future__ import annotations

import bisect
import threading
import zlib
from array import array
from collections import OrderedDict
from itertools import accumulate
from typing import Callable

from viz_server import gone
from viz_server.nodes import Node
from viz_server.store import Rewrite, Trace

# Ids of nodes that replay builds and the trace never names: far above any id a trace uses, exact in JSON numbers.
FRESH_BASE = 1 << 40
# A segment ends with the step that makes its SEGMENT_NODES-th node, or its SEGMENT_STEPS-th step: a question about a
# step not kept replays at most that (~15 us a node made: ~0.25 s) and a segment kept holds ~500 bytes a node made
# (a GPT step's `add bufferize` makes ~2,200 nodes a step: ~8 steps a segment, ~8 MB)
SEGMENT_NODES = 16_000
SEGMENT_STEPS = 256
SEGMENTS_KEPT = 3  # segments kept besides the one the run is filling: stepping across a block of layouts and back
INFOS_KEPT = 64  # StepInfos kept unpacked (a few ms to unpack a step of `add bufferize`)
LEVELS_KEPT = 200_000  # levels memoized at most (a cache: a GPT step's `add bufferize` makes ~1.9M nodes)
Born = dict[int, "int | list[int]"]  # node -> the step that added it to the graph, or the steps ascending


class _Packed:
  """A StepInfo kept for good, its id lists as zlib-packed differences: a step of a GPT step's `add bufferize` lists
  ~8,800 ids (changed, removed, pairs), ~2 bytes each so, ~40 as tuples of ints. Delta answers between far steps
  read every step between (StepGraphs.changes, aliases), so no step's changes are made again."""
  __slots__ = ("lens", "blob", "replaced", "by", "note")

  def __init__(self, info: StepInfo) -> None:
    cols = (info.added, info.changed, info.removed, [o for o, _ in info.pairs], [n for _, n in info.pairs])
    self.lens = tuple(map(len, cols))
    flat = [x for col in cols for x in col]
    self.blob = zlib.compress(array("q", [b - a for a, b in zip((0, *flat), flat)]).tobytes(), 1)
    self.replaced, self.by, self.note = info.replaced, info.by, info.note

  def info(self) -> StepInfo:
    diffs = array("q")
    diffs.frombytes(zlib.decompress(self.blob))
    flat, cols, at = tuple(accumulate(diffs)), [], 0
    for n in self.lens:
      cols.append(flat[at:at + n])
      at += n
    added, changed, removed, olds, news = cols
    return StepInfo(added, changed, removed, tuple(zip(olds, news)), self.replaced, self.by, self.note)


class StepInfo:
  """What match k did to the graph at k-1."""
  __slots__ = ("added", "changed", "removed", "pairs", "replaced", "by", "note")

  def __init__(self, added: tuple[int, ...], changed: tuple[int, ...], removed: tuple[int, ...],
               pairs: tuple[tuple[int, int], ...], replaced: int | None, by: int | None, note: str | None):
    self.added, self.changed, self.removed, self.note = added, changed, removed, note
    self.pairs = pairs  # (old, new): a node that left the graph and the node that took its place
    self.replaced, self.by = replaced, by  # the node of graph k-1 the match replaced, and what stands for it at k


class _Segment:
  """The steps after a checkpoint at c up to the next: the fresh nodes they can show (made in them or held by the run
  at c) and births."""
  __slots__ = ("fresh", "born")

  def __init__(self, fresh: dict[int, Node], born: Born) -> None:
    self.fresh, self.born = fresh, born

  def est_bytes(self) -> int:
    return 250 * len(self.fresh) + 100 * len(self.born)


class _Checkpoint:
  """A run's state after step `step`, as flat arrays zlib-packed (~5x smaller; ~70 KB for a 3,000-node graph): the
  memo with its dependencies, the cursor's reference counts, the births of the nodes in the graph, the fresh nodes it
  still refers to (and the next fresh id). R is not kept: it is the first `step` matches (Replay.replacements)."""
  __slots__ = ("step", "root", "counter", "kept", "_blob", "_lens")
  _TYPES = "qqIqqIqIqIIq"  # memo_k memo_v deps_n deps ref_k ref_n born_k born_v fresh_k fresh_c fresh_n fresh_s

  def __init__(self, run: _Run, codes: Callable[[str], int]) -> None:
    born = [(x, b if type(b) is int else b[-1]) for x in run.ref if (b := run.born.get(x)) is not None]
    kept = self.kept = run.referenced()
    parts = (run.memo, run.memo.values(), [len(run.deps[x]) for x in run.memo],
             [d for x in run.memo for d in run.deps[x]], run.ref, run.ref.values(), [x for x, _ in born],
             [b for _, b in born], kept, [codes(s) for x in kept for s in run.fresh[x][:3]],
             [len(run.fresh[x][3]) for x in kept], [s for x in kept for s in run.fresh[x][3]])
    arrays = [array(t, p) for t, p in zip(self._TYPES, parts)]
    self._lens = [len(a) for a in arrays]
    self._blob = zlib.compress(b"".join(a.tobytes() for a in arrays), 1)
    self.step, self.root, self.counter = run.cur, run.root, run.counter

  def nbytes(self) -> int:
    return len(self._blob) + 8 * len(self.kept) + 300

  def arrays(self) -> list[array]:
    """The arrays it packed, in _TYPES' order."""
    raw, out, at = zlib.decompress(self._blob), [], 0
    for t, n in zip(self._TYPES, self._lens):
      a = array(t)
      a.frombytes(raw[at:at + n * a.itemsize])
      at += n * a.itemsize
      out.append(a)
    return out

  @staticmethod
  def fresh(strs: list[str], fresh_k: array, fresh_c: array, fresh_n: array, fresh_s: array) -> dict[int, Node]:
    """The fresh nodes it keeps: id -> (op, dtype, arg, src)."""
    out, c, src, at = {}, fresh_c, fresh_s, 0
    for i, (x, n) in enumerate(zip(fresh_k, fresh_n)):
      out[x] = (strs[c[3 * i]], strs[c[3 * i + 1]], strs[c[3 * i + 2]], tuple(src[at:at + n]))
      at += n
    return out


class _Run:
  """The resolution state of one pass over the steps, forward only: R, the memo with its dependencies, the graph at
  the cursor as reference counts, the fresh nodes it may look up and the births of this segment."""

  def __init__(self, rp: Replay, fresh: dict[int, Node], counter: int, born: Born, cur: int) -> None:
    self.rp, self.table, self.max_row, self.td = rp, rp.table, rp.max_row, not rp.rw.bottom_up
    self.fresh = fresh
    self.fresh_key: dict[Node, int] = {v: k for k, v in fresh.items()}
    self.counter = counter  # the next fresh id, less FRESH_BASE
    self.born = born
    self.cur = cur
    self.R: dict[int, int] = rp.replacements(cur)  # replaced node -> replacement, from the first `cur` matches
    self.memo: dict[int, int] = {}
    self.deps: dict[int, tuple[int, ...]] = {}
    self.rdeps: dict[int, set[int]] = {}
    self.ref: dict[int, int] = {}  # the graph at cur: node -> edges from users (+1 for the root)
    self.root = -1
    self._added: list[int] = []
    self._removed: list[int] = []

  @classmethod
  def resume(cls, rp: Replay, cp: _Checkpoint) -> _Run:
    """A run in the state that cp saved."""
    memo_k, memo_v, deps_n, flat, ref_k, ref_n, born_k, born_v, *fresh = cp.arrays()
    run = cls(rp, cp.fresh(rp.strs, *fresh), cp.counter, dict(zip(born_k, born_v)), cp.step)
    run.memo = dict(zip(memo_k, memo_v))
    deps, rdeps, at = run.deps, run.rdeps, 0
    for x, n in zip(memo_k, deps_n):
      ds = deps[x] = tuple(flat[at:at + n])
      at += n
      for d in ds:
        s = rdeps.get(d)
        if s is None:
          rdeps[d] = {x}
        else:
          s.add(x)
    run.ref = dict(zip(ref_k, ref_n))
    run.root = cp.root
    return run

  def est_bytes(self) -> int:
    return (100 * (len(self.memo) + len(self.ref) + len(self.born) + len(self.R)) + 130 * len(self.deps)
            + 300 * len(self.rdeps) + 250 * len(self.fresh))

  def src(self, nid: int) -> tuple[int, ...]:
    f = self.fresh.get(nid)
    return f[3] if f is not None else self.rp.src(nid)

  def referenced(self) -> list[int]:
    """The fresh nodes the state refers to (memo values, dependencies, the graph) and all below them, ascending."""
    fresh, seen = self.fresh, set()
    stack = [x for x in (*self.memo.values(), *(d for ds in self.deps.values() for d in ds), *self.ref)
             if x in fresh]
    while stack:
      x = stack.pop()
      if x not in seen:
        seen.add(x)
        stack.extend(s for s in fresh[x][3] if s in fresh)
    return sorted(seen)

  def _intern(self, x: int, src: tuple[int, ...]) -> int:
    """The node with x's op, dtype and arg over `src` (x a node of the trace): the trace's id for it if it has one,
    else a fresh id (the same for the same structure while the run knows that node)."""
    nid = self.table.find_like(x, src, self.max_row)
    if nid is None:
      op, dtype, arg = self.table.look(x)
      key = (op, dtype, arg, src)
      nid = self.fresh_key.get(key)
      if nid is None:
        nid = FRESH_BASE + self.counter
        self.counter += 1
        self.fresh[nid] = key
        self.fresh_key[key] = nid
    return nid

  def resolve(self, x0: int) -> int:
    """x0 resolved through R (see the module docstring); iterative, memoized, cycle-safe.

    Memo keys: x >= 0 is res(x), ~x (< 0) is base(x): x rebuilt over res() of its sources. A rebuilt node has
    final sources, so it changes further only if R replaces it. res(x) of a replaced x is, top-down, base() of its
    replacement (the rewriter tries rules on a result rather than looking it up), bottom-up res() of it."""
    memo, R, td, src_of = self.memo, self.R, self.td, self.rp.src
    got = memo.get(x0)
    if got is not None:
      return got
    stack = [x0]
    prog: dict[int, tuple] = {}  # keys being computed (all on the current path) -> what each waits for
    while stack:
      key = stack[-1]
      if key in memo:
        stack.pop()
        continue
      p = prog.get(key)
      if key >= 0:
        if p is None:
          e = R.get(key)
          need = ~key if e is None else (~e if td else e)
          if need in prog:  # the replacement contains the replaced node: the inner occurrence stays as it is
            need = ~key
          p = ("N", need)
          if need not in memo and need not in prog:
            prog[key] = p
            stack.append(need)
            continue
        need = p[1]
        self._finish(key, memo.get(need, ~need if need < 0 else need), (need,))
      else:
        a = ~key
        if p is None or p[0] == "S":
          src = src_of(a)
          pending = [s for s in src if s not in memo and s not in prog]
          if pending:
            prog[key] = ("S",)
            stack.extend(pending)
            continue
          new = tuple([memo.get(s, s) for s in src])
          if new == src:
            self._finish(key, a, src)
          else:
            y = self._intern(a, new)
            if y in R and y not in memo and y not in prog:
              prog[key] = ("Y", y, (*src, y))
              stack.append(y)
              continue
            self._finish(key, memo.get(y, y) if y in R else y, (*src, y))
        else:
          self._finish(key, memo.get(p[1], p[1]), p[2])
      prog.pop(key, None)
      stack.pop()
    return memo[x0]

  def _finish(self, x: int, value: int, deps: tuple[int, ...]) -> None:
    self.memo[x] = value
    self.deps[x] = deps
    rd = self.rdeps
    for d in deps:
      s = rd.get(d)
      if s is None:
        rd[d] = {x}
      else:
        s.add(x)

  def _invalidate(self, b: int, old: dict[int, int]) -> None:
    """Forget the resolution of b and of everything that depended on it; old collects the forgotten values."""
    memo, deps, rdeps = self.memo, self.deps, self.rdeps
    todo = [b]
    while todo:
      z = todo.pop()
      v = memo.pop(z, None)
      if v is not None and z not in old:
        old[z] = v
      for d in deps.pop(z, ()):
        s = rdeps.get(d)
        if s is not None:
          s.discard(z)
          if not s:  # (an empty set left behind per node a step rebuilt: ~330 bytes each, most of a long replay)
            del rdeps[d]
      todo.extend(rdeps.pop(z, ()))

  def _add_ref(self, root: int) -> None:
    ref, src_of = self.ref, self.src
    stack = [root]
    while stack:
      x = stack.pop()
      c = ref.get(x, 0)
      ref[x] = c + 1
      if c == 0:
        self._added.append(x)
        stack.extend(src_of(x))

  def _del_ref(self, root: int) -> None:
    ref, src_of = self.ref, self.src
    stack = [root]
    while stack:
      x = stack.pop()
      c = ref[x] - 1
      if c:
        ref[x] = c
        continue
      del ref[x]
      self._removed.append(x)
      stack.extend(src_of(x))

  def move_root(self, new_root: int) -> tuple[list[int], list[int]]:
    """Make new_root the cursor's root; returns (added, removed) node ids."""
    self._added, self._removed = [], []
    if new_root != self.root:
      if new_root in self.table or new_root in self.fresh:
        self._add_ref(new_root)
      if self.root in self.ref:
        self._del_ref(self.root)
      self.root = new_root
    return self._added, self._removed

  def step(self, k: int) -> tuple[int, StepInfo]:
    """Apply match k to the state at k-1; returns the root at k and what the step did (a run from a checkpoint lists
    changes in another order: its dependents' sets, rebuilt, iterate so; the first run's StepInfos are kept)."""
    rp, i = self.rp, k - 1
    rw, table = rp.rw, self.table
    b, a = rw.before[i], rw.after[i]
    note = None
    if a < 0:
      note = "the rule raised: nothing was replaced"
    elif a not in table or b not in table:
      note = f"the match names node {a if a not in table else b}, which the trace does not define"
    key = rp.key_of(k)
    replaced = self.resolve(key) if note is None else None
    old: dict[int, int] = {}
    if note is None and a != b:  # (what replacements() puts in R)
      self.R[key] = a
      self._invalidate(key, old)
    self.cur = k
    root = self.resolve(rw.root) if rw.root in table else rw.root
    added, removed = self.move_root(root)
    new, gone_ = set(added), set(removed)
    pairs, changed = [], []
    for z, v in old.items():
      if z < 0:
        continue
      nv = self.memo.get(z)
      if nv is not None and nv != v and nv in new and v in gone_:
        pairs.append((v, nv))
        if z != key and z not in self.R:
          changed.append(nv)
    changed_t = tuple(dict.fromkeys(changed))
    changed_set = set(changed_t)
    born = self.born
    for x in added:
      got = born.get(x)
      if got is None:
        born[x] = k  # a step, or the steps ascending once added again (most nodes are added once: no list each)
      elif type(got) is int:
        born[x] = [got, k]
      else:
        got.append(k)
    by = self.resolve(key) if note is None else None
    if note is None and not added and not removed:
      note = "the graph did not change: the replaced node is no longer part of it"
    pairs_t = tuple(dict.fromkeys(pairs))
    return root, StepInfo(tuple(x for x in added if x not in changed_set), changed_t, tuple(removed), pairs_t,
                          replaced, by, note)


class Replay:
  """Replays one rewrite. Thread-safe; steps are computed on demand, in order, once; what they made is kept for a few
  segments of steps near those asked for and made again from a checkpoint for others (one segment a question)."""

  def __init__(self, tr: Trace, rw: Rewrite) -> None:
    self.tr, self.rw, self.table = tr, rw, tr.nodes
    # structural lookups only see nodes defined before the rewrite ended, so the result never depends on when
    # (or how much of the rest of the trace) was read
    self.max_row = rw.nodes_at_end if rw.ended else None
    self.nodes_seen = len(self.table)
    self.roots: list[int] = []
    self.sizes: list[int] = []  # per step computed: the nodes of its graph (what `members` counts)
    self.lock = threading.RLock()  # the run's: computing new steps
    self._seg_lock = threading.Lock()  # replaying a segment again (reads only what the run wrote for good)
    self.replays = self.remade = 0  # steps replayed again from checkpoints, and nodes they made (tests count them)
    self.strs: list[str] = []  # the op, dtype and arg strings of checkpointed nodes, by code
    self._codes: dict[str, int] = {}
    self._level: dict[int, int] = {}
    self._srcs: dict[int, tuple[int, ...]] = {}  # trace node -> its sources (src(); the table is append-only)
    self._chain_start: list[int] = []  # per match: the node whose R entry it sets
    self._infos: list[_Packed | None] = [None]  # per step computed: what it did, packed
    self._unpacked: OrderedDict[int, StepInfo] = OrderedDict()  # the last INFOS_KEPT asked for
    self._cps: list[_Checkpoint] = []  # the run's states at the segments' starts
    self._cp_steps: list[int] = []  # their steps (segment i: steps _cp_steps[i] + 1 .. _cp_steps[i + 1])
    self._first_fresh: list[int] = []  # per checkpoint: the fresh index of the first node its segment makes
    self._segs: OrderedDict[int, _Segment] = OrderedDict()  # segments kept (LRU)
    self._hint = 0  # the step last asked about (_fresh)
    self._known: dict[int, Node] = {}  # their fresh nodes, all in one (src() is asked ~10 times a node placed)
    with self.lock:
      self._run = _Run(self, {}, 0, {}, 0)
      root = self._run.resolve(rw.root) if rw.root in self.table else rw.root
      self._run.move_root(root)
      self.roots.append(root)
      self.sizes.append(len(self._run.ref))
      self._checkpoint()

  def est_bytes(self) -> int:
    """About the bytes this replay holds, from the sizes of its tables (no walk; views.Views budgets by it)."""
    return (self._run.est_bytes() + sum(cp.nbytes() for cp in self._cps)
            + sum(s.est_bytes() for s in self._segs.values())
            + sum(200 + len(p.blob) for p in self._infos if p is not None)
            + sum(80 * (len(s.added) + len(s.changed) + len(s.removed) + 2 * len(s.pairs))
                  for s in list(self._unpacked.values()))
            + 100 * (len(self._level) + len(self._srcs) + 3 * len(self.roots)) + 200 * len(self._chain_start))

  @property
  def stale(self) -> bool:
    """A live rewrite whose replay made up node ids that the trace may have named since."""
    return self.max_row is None and self._run.counter > 0 and len(self.table) != self.nodes_seen

  @property
  def n(self) -> int:
    """Number of steps (matches) known so far."""
    return self.rw.matches

  # ---- R
  def key_of(self, k: int) -> int:
    """The node whose entry in R match k sets: its `before`, or top-down, the start of the chain it continues (the
    rewriter applies rules to a node until none fires; only the node it started from maps to the result)."""
    cs = self._chain_start
    while len(cs) < k:
      i = len(cs)
      b = self.rw.before[i]
      cont = not self.rw.bottom_up and i > 0 and self.rw.after[i - 1] == b and self.rw.after[i - 1] >= 0
      cs.append(cs[i - 1] if cont else b)
    return cs[k - 1]

  def replacements(self, k: int) -> dict[int, int]:
    """R after the first k matches: replaced node -> replacement (a match that raised, names a node the trace does
    not define or replaces a node by itself sets nothing)."""
    R, rw, table = {}, self.rw, self.table
    for i in range(k):
      b, a = rw.before[i], rw.after[i]
      if a >= 0 and a in table and b in table and a != b:
        R[self.key_of(i + 1)] = a
    return R

  # ---- nodes
  def node(self, nid: int) -> Node | None:
    if nid < FRESH_BASE:
      return self.table.get(nid)
    return self._fresh(nid)

  def _fresh(self, nid: int) -> Node | None:
    got = self._run.fresh.get(nid)
    if got is None:
      got = self._known.get(nid)
    if got is not None:
      return got
    if nid - FRESH_BASE >= self._run.counter:
      return None
    # the segment of the step last asked about holds every node of its graph and of the graph before it (made in
    # it or held by the run at its checkpoint); else the segment that made it
    hint = self._hint
    if hint > 0:
      got = self._seg_of(hint).fresh.get(nid)
      if got is not None:
        return got
    i = bisect.bisect_right(self._first_fresh, nid - FRESH_BASE) - 1
    return self._segment(i).fresh.get(nid) if i >= 0 else None

  def src(self, nid: int) -> tuple[int, ...]:
    """A node's source ids (what the layouts are handed as a graph's edges), kept per trace node asked for:
    resolving, placing and answering a step ask each rebuilt node's several times (the table makes a tuple each)."""
    got = self._srcs.get(nid)
    if got is None:
      if nid >= FRESH_BASE:  # (inlined _fresh: src() is asked ~10 times a node placed)
        f = self._run.fresh.get(nid) or self._known.get(nid) or self._fresh(nid)
        return f[3] if f is not None else ()
      elif nid in self.table:
        got = self._srcs[nid] = self.table.src(nid)
      else:  # (not kept: a live trace may define it later)
        return ()
    return got

  def level(self, nid: int) -> int:
    """Length of the longest source chain below a node (a topological order key)."""
    lv = self._level
    got = lv.get(nid)
    if got is not None:
      return got
    if len(lv) > LEVELS_KEPT:  # (a cache: forgetting costs a walk down to what is memoized again)
      lv.clear()
    stack = [nid]
    while stack:
      x = stack[-1]
      if x in lv:
        stack.pop()
        continue
      missing = [s for s in self.src(x) if s not in lv]
      if missing:
        stack.extend(missing)
        continue
      stack.pop()
      lv[x] = 1 + max((lv[s] for s in self.src(x)), default=-1)
    return lv[nid]

  # ---- checkpoints and segments
  def _code(self, s: str) -> int:
    c = self._codes.get(s)
    if c is None:
      c = self._codes[s] = len(self.strs)
      self.strs.append(s)
    return c

  def _checkpoint(self) -> None:
    """Save the run's state after the step it computed last, seal the segment it filled and let
    the run forget the nodes and births nothing it holds refers to."""
    run = self._run
    cp = _Checkpoint(run, self._code)
    if self._cps:
      self._keep(len(self._cps) - 1, _Segment(run.fresh, run.born), asked=False)
    self._first_fresh.append(run.counter if self._first_fresh else 0)
    self._cp_steps.append(run.cur)
    self._cps.append(cp)  # (published: _segment reads the segment being filled without a lock)
    old = run.fresh
    run.fresh = {x: old[x] for x in cp.kept}
    run.fresh_key = {v: x for x, v in run.fresh.items()}
    run.born = {x: b if type(b) is int else b[-1] for x in run.ref if (b := run.born.get(x)) is not None}

  def _keep(self, i: int, seg: _Segment, asked: bool = True) -> None:
    """Keep segment i, as the most recently asked for, or (sealed by the run, not asked for) as the least: the run
    going far ahead (the views' prefetch) does not push out the segments of the steps being looked at."""
    segs = self._segs
    segs[i] = seg
    segs.move_to_end(i, last=asked)
    while len(segs) > SEGMENTS_KEPT:
      segs.popitem(last=False)
    known: dict[int, Node] = {}
    for kept in tuple(segs.values()):
      known.update(kept.fresh)
    self._known = known  # (replaced whole: readers without a lock see the old one or the new one)

  def _segment(self, i: int) -> _Segment:
    """Segment i's steps, nodes and births: kept, the run's own, or replayed from checkpoint i (at most SEGMENT_STEPS
    steps that make SEGMENT_NODES nodes and one step's more)."""
    got = self._segs.get(i)
    if got is not None:
      try:
        self._segs.move_to_end(i)  # (atomic, like the eviction it may race with)
      except KeyError:
        pass
      return got
    n = len(self._cps)
    if i == n - 1:  # the segment the run is filling; no lock: the run seals it into _segs, then publishes the
      # next checkpoint, then starts the next segment, so what was read before the checkpoints grew is whole
      got = _Segment(self._run.fresh, self._run.born)
      if len(self._cps) == n:
        return got
    with self._seg_lock:
      got = self._segs.get(i)
      if got is not None:
        self._segs.move_to_end(i)
        return got
      run = _Run.resume(self, self._cps[i])
      for k in range(self._cp_steps[i] + 1, self._cp_steps[i + 1] + 1):
        gone.check()  # between two steps: stop if the request asking has gone
        root, _ = run.step(k)
        if root != self.roots[k]:
          raise RuntimeError(f"replay of step {k} from a checkpoint reached another graph than the first time")
        self.replays += 1
      self.remade += run.counter - self._cps[i].counter
      got = _Segment(run.fresh, run.born)
      self._keep(i, got)
      return got

  def _seg_of(self, k: int) -> _Segment:
    """The segment of step k (k > 0)."""
    return self._segment(bisect.bisect_left(self._cp_steps, k) - 1)  # (after the last checkpoint before step k)

  # ---- steps
  def ensure(self, k: int) -> None:
    """Compute steps up to k (k <= n)."""
    if k < len(self.roots):  # computed (roots[k] is appended last): no lock
      return
    with self.lock:
      while len(self.roots) <= k:
        gone.check()  # between two steps (the state is whole): stop if the request asking has gone
        s = len(self.roots)
        root, info = self._run.step(s)
        self._infos.append(_Packed(info))
        self.sizes.append(len(self._run.ref))
        self.roots.append(root)
        if self._run.counter - self._first_fresh[-1] >= SEGMENT_NODES or s - self._cp_steps[-1] >= SEGMENT_STEPS:
          self._checkpoint()

  # ---- queries
  def root(self, k: int) -> int:
    self.ensure(k)
    return self.roots[k]

  def members(self, k: int) -> frozenset[int]:
    """Ids of the nodes of the graph at step k: those reachable from its root (a walk; no lock). Its fresh nodes are
    all in the segment of step k (made in it, or held by the run at the checkpoint before it)."""
    self.ensure(k)
    self._hint = k
    root, fresh = self.roots[k], self._seg_of(max(k, 1)).fresh if len(self.roots) > 1 else self._run.fresh
    if root not in self.table and root not in fresh:
      return frozenset()
    seen, stack, trace_src = set(), [root], self.src
    while stack:
      x = stack.pop()
      if x not in seen:
        seen.add(x)
        f = fresh.get(x)
        stack.extend(f[3] if f is not None else trace_src(x))
    return frozenset(seen)

  def size(self, k: int) -> int:
    """The number of nodes of the graph at step k (without copying its members)."""
    self.ensure(k)
    return self.sizes[k]

  def step(self, k: int) -> StepInfo | None:
    self.ensure(k)
    if k == 0:
      return None
    self._hint = k
    got = self._unpacked.get(k)
    if got is None:
      got = self._infos[k].info()  # type: ignore[union-attr]
      self._unpacked[k] = got
      while len(self._unpacked) > INFOS_KEPT:
        try:
          self._unpacked.popitem(last=False)
        except KeyError:  # (another thread emptied it)
          break
    return got

  def created(self, nid: int, k: int) -> int:
    """The step that added node nid to the graph it has at step k (the last one up to k; 0: the input graph)."""
    self.ensure(k)
    if k == 0:
      return 0
    got = self._seg_of(k).born.get(nid)
    if got is None:
      return 0
    if type(got) is int:
      return got if got <= k else 0
    i = bisect.bisect_right(got, k)
    return got[i - 1] if i else 0
