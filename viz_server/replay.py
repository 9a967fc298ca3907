"""Step replay: the graph of a rewrite after its first k matches (see "Replay semantics" in docs/architecture.md).

The first k matches form a replacement map R. The graph at step k is what graph_rewrite returns when no further
rule fires: the root resolved through R. Resolving rebuilds a node over its resolved sources (interned by
structure, so a rebuilt node gets the id the trace gives it) and follows R where a node is replaced, the way the
rewriter does it top-down (a match on a node before its sources are rewritten; a rule's result tried again, not
looked up; a fixed-point chain of matches replacing only the node it started from) or bottom-up.

Resolutions are memoized with reverse dependencies, so adding or removing one entry of R re-resolves only what
depended on it. The graph is everything reachable from the resolved root; a cursor keeps reference counts of it,
so moving between steps costs work proportional to the nodes that change, and a far move costs O(graph + matches):
the R entries of the matches between, then the root resolved once (docs/architecture.md, "Far jumps"). What a match
did (StepInfo) is computed only for the steps asked for.
"""
from __future__ import annotations

import bisect
import itertools
import threading
from functools import partial
from typing import Callable, Iterable

from viz_server import gone
from viz_server.gate import REQUEST_GATE
from viz_server.nodes import Node
from viz_server.store import Rewrite, Trace

# Ids of nodes that replay builds and the trace never names: far above any id a trace uses, exact in JSON numbers.
FRESH_BASE = 1 << 40
NEAR = 8  # steps within which members() moves the cursor; farther it walks the graph from the step's root
CHECK_EVERY = 1024  # a far cursor move asks whether its request has gone every this many matches (~1 ms)


class StepInfo:
  """What match k did to the graph at k-1."""
  __slots__ = ("added", "changed", "removed", "olds", "news", "replaced", "by", "note")

  def __init__(self, added: tuple[int, ...], changed: tuple[int, ...], removed: tuple[int, ...],
               pairs: Iterable[tuple[int, int]], replaced: int | None, by: int | None, note: str | None):
    self.added, self.changed, self.removed, self.note = added, changed, removed, note
    # pairs (old, new), a node that left the graph and the node that took its place, kept as two columns: a tuple a
    # pair was ~2,000 objects a step that lived as long as the replay (~115 MB over `add bufferize`'s 874 steps) and
    # that each young collection walked (about a fifth of the tuples a step leaves)
    cols = tuple(zip(*pairs))
    self.olds, self.news = cols if cols else ((), ())
    self.replaced, self.by = replaced, by  # the node of graph k-1 the match replaced, and what stands for it at k

  @property
  def pairs(self) -> tuple[tuple[int, int], ...]:
    """(old, new) per node that left the graph and the node that took its place, in order."""
    return tuple(zip(self.olds, self.news))


class _Lock:
  """The replay's lock (reentrant). The prefetch worker gives way to requests inside a step, holding it
  (REQUEST_GATE.give_way): a thread that has to wait for it says so, and the worker goes on at once."""
  __slots__ = ("_lock",)

  def __init__(self) -> None:
    self._lock = threading.RLock()

  def __enter__(self) -> _Lock:
    if not self._lock.acquire(blocking=False):
      with REQUEST_GATE.wait_for_background():
        self._lock.acquire()
    return self

  def __exit__(self, *exc: object) -> None:
    self._lock.release()


class Replay:
  """Replays one rewrite. Thread-safe; steps are computed on demand and kept (a root id and small id sets each)."""

  def __init__(self, tr: Trace, rw: Rewrite) -> None:
    self.tr, self.rw, self.table = tr, rw, tr.nodes
    # structural lookups only see nodes defined before the rewrite ended, so the result never depends on when
    # (or how much of the rest of the trace) was read
    self.max_row = rw.nodes_at_end if rw.ended else None
    self.nodes_seen = len(self.table)
    self.fresh: dict[int, Node] = {}
    self.fresh_key: dict[Node, int] = {}
    # per step reached (a far jump reaches a step without the ones before it): its root, its graph's size (what
    # `members` would count); per step computed from the one before: what its match did
    self.roots: dict[int, int] = {}
    self.sizes: dict[int, int] = {}
    self.steps: dict[int, StepInfo | None] = {0: None}
    self._upto = 0  # every step up to this one is computed
    self.lock = _Lock()
    self._level: dict[int, int] = {}
    self._srcs: dict[int, tuple[int, ...]] = {}  # node -> its sources (src(); the table is append-only)
    self._look: dict[int, tuple[str, str, str]] = {}  # node of the trace -> its (op, dtype, arg), once rebuilt
    self._born: dict[int, int | list[int]] = {}  # node -> the step that added it to the graph, or the steps ascending
    # resolution through R, memoized with dependencies
    self._R: dict[int, int] = {}  # replaced node -> replacement, from the first `cur` matches
    self._chain_start: list[int] = []  # per match: the node whose R entry it sets
    self._hist: list[tuple[int, int | None] | None] = []  # per applied match: (R key, previous R value)
    self._memo: dict[int, int] = {}
    self._deps: dict[int, tuple[int, ...]] = {}
    self._rdeps: dict[int, set[int]] = {}
    # cursor: the graph at step self.cur, as reference counts (edges from users) of the nodes reachable from _root
    self.cur = 0
    self._ref: dict[int, int] = {}
    self._added: list[int] = []
    self._removed: list[int] = []
    self._root = -1
    self._whole = True  # the cursor's graph and memo are those of step cur (not so within a far move)
    with self.lock:
      root = self._resolve(rw.root) if rw.root in self.table else rw.root
      self._move_root(root)
      self.roots[0], self.sizes[0] = root, len(self._ref)

  def est_bytes(self) -> int:
    """About the bytes this replay holds, from the sizes of its tables (no walk; views.Views budgets by it): ~100
    bytes an entry of an int table, more for those holding tuples and sets, ~300 a step."""
    return (100 * (len(self._memo) + len(self._ref) + len(self._level) + len(self._born) + len(self._R)
                   + len(self.roots) + len(self._chain_start) + len(self._hist))
            + 130 * (len(self._deps) + len(self._srcs)) + 300 * len(self._rdeps) + 250 * len(self.fresh)
            + 300 * len(self.steps))

  @property
  def stale(self) -> bool:
    """A live rewrite whose replay made up node ids that the trace may have named since."""
    return self.max_row is None and bool(self.fresh) and len(self.table) != self.nodes_seen

  @property
  def n(self) -> int:
    """Number of steps (matches) known so far."""
    return self.rw.matches

  # ---- nodes
  def node(self, nid: int) -> Node | None:
    f = self.fresh.get(nid)
    return f if f is not None else self.table.get(nid)

  def src(self, nid: int) -> tuple[int, ...]:
    """A node's source ids (what the layouts are handed as a graph's edges), kept per node asked for: resolving,
    placing and answering a step ask each rebuilt node's several times (the table makes a tuple each time)."""
    f = self.fresh.get(nid)  # (first: most nodes a step brings, places and answers are fresh)
    if f is not None:
      return f[3]  # (not kept twice: a long replay makes ~2,000 fresh nodes a step)
    got = self._srcs.get(nid)
    if got is None:
      if nid in self.table:
        got = self._srcs[nid] = self.table.src(nid)
      else:  # (not kept: a live trace may define it later)
        return ()
    return got

  def srcs(self, ids: Iterable[int]) -> list[tuple[int, ...]]:
    """src() of each of ids, in order: a step's placing and its delta ask the sources of the ~2,000 nodes it
    rebuilt and of their old nodes, most of them fresh (read from `fresh` here, not by a call of src() each)."""
    fresh, src_of = self.fresh.get, self.src
    return [f[3] if (f := fresh(x)) is not None else src_of(x) for x in ids]

  def level(self, nid: int) -> int:
    """Length of the longest source chain below a node (a topological order key)."""
    lv = self._level
    got = lv.get(nid)
    if got is not None:
      return got
    # (a step's placing asks the levels of the ~1,000 fresh nodes under the users of what it placed: each node's
    # sources read once a visit, from `fresh` at once, and its level taken in C once they have theirs)
    stack, fresh, src_of, have = [nid], self.fresh.get, self.src, lv.__contains__
    while stack:
      x = stack[-1]
      if x in lv:
        stack.pop()
        continue
      src = f[3] if (f := fresh(x)) is not None else src_of(x)
      if not all(map(have, src)):
        stack.extend(itertools.filterfalse(have, src))
        continue
      stack.pop()
      lv[x] = 1 + max(map(lv.__getitem__, src), default=-1)
    return lv[nid]

  def _intern(self, x: int, src: tuple[int, ...]) -> int:
    """The node with x's op, dtype and arg over `src`: the trace's id for it if it has one, else a fresh id. x is a
    node of the trace (_resolve's keys are: R's keys, values and their sources are the trace's nodes), so `fresh` is
    asked only where its look is not kept yet (it was asked twice a rebuilt node, and always missed)."""
    # the trace's nodes have only the trace's nodes as sources (ids below FRESH_BASE): over a fresh source, no
    # structural lookup can hit (most of a step's rebuilt nodes are over one: the users of what it replaced)
    if max(src, default=0) >= FRESH_BASE:
      nid = None
    elif (f := self.fresh.get(x)) is None:
      nid = self.table.find_like(x, src, self.max_row)
    else:
      nid = self.table.find(f[0], f[1], f[2], src, self.max_row)
    if nid is None:
      look = self._look.get(x)
      if look is None:  # (op, dtype, arg) made once per node a replay rebuilds, not once a step
        f = self.fresh.get(x)
        look = self._look[x] = (f[0], f[1], f[2]) if f is not None else self.table.look(x)
      op, dtype, arg = look
      key = (op, dtype, arg, src)  # (unpacked: `(*look, src)` built a list first)
      fresh_key = self.fresh_key
      nid = fresh_key.get(key)
      if nid is None:
        fresh = self.fresh
        nid = FRESH_BASE + len(fresh)
        fresh[nid] = key
        fresh_key[key] = nid
        if not nid & 255:  # (a step's root resolution, ~10 ms: the prefetch worker lets a request run alone)
          REQUEST_GATE.give_way()
    return nid

  # ---- resolution
  def _resolve(self, x0: int) -> int:
    """x0 resolved through R (see the module docstring); iterative, memoized, cycle-safe.

    Memo keys: x >= 0 is res(x), ~x (< 0) is base(x): x rebuilt over res() of its sources. A rebuilt node has
    final sources, so it changes further only if R replaces it. res(x) of a replaced x is, top-down, base() of its
    replacement (the rewriter tries rules on a result rather than looking it up), bottom-up res() of it. A step
    re-resolves every user of what it replaced (~2,000 of a GPT step's `add bufferize`): this loop is its cost.
    `prog` holds what a key waits for: an int (res: the key), a tuple (base: its sources), [y, deps] (base: y)."""
    memo, R, td, srcs = self._memo, self._R, not self.rw.bottom_up, self._srcs
    if x0 in memo:
      return memo[x0]
    src_of, intern = self.src, self._intern
    stack = [x0]
    prog: dict[int, int | tuple] = {}  # keys being computed (all on the current path) -> what each waits for
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
          if need not in memo and need not in prog:
            prog[key] = need
            stack.append(need)
            if need >= 0:
              continue
            key = need  # a base, on the stack's top now: looked at at once, not on the next turn
          else:
            value, dep = memo.get(need, ~need if need < 0 else need), (need,)
        else:
          value, dep = memo.get(p, ~p if p < 0 else p), (p,)
      if key < 0:
        if type(p) is list:  # back from y, the rebuilt node R replaces
          value, dep = memo.get(p[0], p[0]), p[1]
        else:
          a = ~key
          if p is None:
            # (the trace's node's sources, kept once asked for: a key is never a fresh node, see _intern)
            src = srcs.get(a) or src_of(a)
            pending = None  # (a loop, not a comprehension: no frame made, twice per rebuilt node)
            for s in src:
              if s not in memo and s not in prog:
                if pending is None:
                  pending = [s]
                else:
                  pending.append(s)
            if pending is not None:
              prog[key] = src
              stack.extend(pending)
              continue
          else:  # back from its sources: each is resolved now, or on the current path as it was before
            src = p
          new = tuple(map(memo.get, src, src))
          if new == src:
            value, dep = a, src
          else:
            y = intern(a, new)
            # a fresh y is never in R (R's keys are the trace's nodes): nothing to depend on
            dep = src if y >= FRESH_BASE else (*src, y)
            if y in R and y not in memo and y not in prog:
              prog[key] = [y, dep]
              stack.append(y)
              continue
            value = memo.get(y, y) if y in R else y
      self._settle(stack, prog, key, value, dep)
    return memo[x0]

  def _settle(self, stack: list[int], prog: dict, key: int, value: int, dep: tuple[int, ...]) -> None:
    """_resolve's key on the stack's top has `value`, from `dep`: memoize it, then each res key below it on the stack
    that waits for it (as _resolve's next turns would), popping each."""
    memo, deps, rdeps = self._memo, self._deps, self._rdeps
    while True:
      memo[key] = value
      if key < 0 or dep[0] >= 0:
        deps[key] = dep
        for d in dep:
          s = rdeps.get(d)
          if s is None:
            rdeps[d] = {key}
          else:
            s.add(key)
      elif dep[0] != ~key or dep[0] in rdeps:  # (res(x) = base(x), as for each node R does not replace: implicit)
        self._depend(key, dep[0])
      prog.pop(key, None)
      stack.pop()
      if not stack or (top := stack[-1]) < 0 or prog.get(top) != key:
        return
      key, dep = top, (key,)  # (its value: key's)

  def _depend(self, key: int, need: int) -> None:
    """Note that res(key) depends on base(~need) (need < 0), other than implicitly: a res(x) that depends on its own
    base(x) alone keeps no `_deps` entry and no `_rdeps` set (every node R does not replace: a step made and dropped
    ~2,000 of each), until another key depends on base(x) too; then x's comes first in the set, as it came first."""
    s = self._rdeps.get(need)
    if s is None:
      s = self._rdeps[need] = set()
      u = ~need
      if u != key and u in self._memo and u not in self._deps:
        s.add(u)
        self._deps[u] = (need,)
    s.add(key)
    self._deps[key] = (need,)

  def _invalidate(self, b: int, old: dict[int, int]) -> None:
    """Forget the resolution of b and of everything that depended on it; old collects the forgotten values of res()
    keys (those of base() keys, ~x < 0, tell _step nothing)."""
    memo, deps, rdeps = self._memo, self._deps, self._rdeps
    todo = [b]
    while todo:
      z = todo.pop()
      v = memo.pop(z, None)
      if v is not None and z >= 0 and z not in old:
        old[z] = v
      for d in deps.pop(z, ()):
        s = rdeps.get(d)
        if s is not None:
          s.discard(z)
          if not s:  # (an empty set left behind per node a step rebuilt: ~330 bytes each, most of a long replay)
            del rdeps[d]
      got = rdeps.pop(z, None)
      if got is not None:
        todo.extend(got)
      elif z < 0 and ~z in memo and ~z not in deps:  # res(x) implicitly depending on base(x): see _resolve
        todo.append(~z)

  # ---- cursor state
  def _add_ref(self, root: int) -> None:
    ref, src_of, fresh, added = self._ref, self.src, self.fresh, self._added
    stack = [root]
    while stack:
      x = stack.pop()
      c = ref.get(x, 0)
      ref[x] = c + 1
      if c == 0:
        added.append(x)
        f = fresh.get(x)  # (src(), inlined for the fresh nodes a step brings: ~2,000 of them)
        stack.extend(f[3] if f is not None else src_of(x))

  def _del_ref(self, root: int) -> None:
    ref, src_of, fresh, removed = self._ref, self.src, self.fresh, self._removed
    stack = [root]
    while stack:
      x = stack.pop()
      c = ref[x] - 1
      if c:
        ref[x] = c
        continue
      del ref[x]
      removed.append(x)
      f = fresh.get(x)
      stack.extend(f[3] if f is not None else src_of(x))

  def _move_root(self, new_root: int) -> tuple[list[int], list[int]]:
    """Make new_root the cursor's root; returns (added, removed) node ids."""
    self._added, self._removed = [], []
    if new_root != self._root:
      if new_root in self.table or new_root in self.fresh:
        self._add_ref(new_root)
      if self._root in self._ref:
        self._del_ref(self._root)
      self._root = new_root
    return self._added, self._removed

  def _key_of(self, k: int) -> int:
    """The node whose entry in R match k sets: its `before`, or top-down, the start of the chain it continues (the
    rewriter applies rules to a node until none fires; only the node it started from maps to the result)."""
    while len(self._chain_start) < k:
      i = len(self._chain_start)
      b = self.rw.before[i]
      cont = not self.rw.bottom_up and i > 0 and self.rw.after[i - 1] == b and self.rw.after[i - 1] >= 0
      self._chain_start.append(self._chain_start[i - 1] if cont else b)
    return self._chain_start[k - 1]

  def _set_r(self, k: int, forward: bool, old: dict[int, int]) -> None:
    """Apply (forward) or undo match k on R, invalidating what depended on the entry it changes."""
    if forward:
      i = k - 1
      b, a = self.rw.before[i], self.rw.after[i]
      if a < 0 or a not in self.table or b not in self.table or a == b:
        self._hist.append(None)
        return
      b = self._key_of(k)
      self._hist.append((b, self._R.get(b)))
      self._R[b] = a
    else:
      h = self._hist.pop()
      if h is None:
        return
      b, prev = h
      if prev is None:
        del self._R[b]
      else:
        self._R[b] = prev
    self._invalidate(b, old)

  def _goto(self, k: int) -> None:
    """Move the cursor to step k: the R entries of the matches between applied or undone, then the root resolved once
    (O(graph + matches), whatever the nodes the steps between rebuilt); notes the root and size of step k."""
    if k == self.cur and self._whole:
      return
    self._whole = False  # (until the root is resolved again: a far move the request's end stopped is finished later)
    old: dict[int, int] = {}
    while self.cur != k:
      if self.cur % CHECK_EVERY == 0:
        gone.check()  # a far move: stop if the request asking has gone (R, its history and the memo agree)
      if self.cur < k:
        self.cur += 1
        self._set_r(self.cur, True, old)
      else:
        self._set_r(self.cur, False, old)
        self.cur -= 1
    # re-resolve what was invalidated, so the next step sees every old value
    root = self._resolve(self.rw.root) if self.rw.root in self.table else self.rw.root
    self._move_root(root)
    self._whole = True
    if k not in self.roots:
      self.roots[k], self.sizes[k] = root, len(self._ref)

  # ---- steps
  def ensure(self, k: int) -> None:
    """Compute every step up to k (k <= n) in order: what an exact `created` and a walk over all steps (the export,
    `show`, a node's origin) need. Showing a step needs only that step (root, step)."""
    if k <= self._upto:  # (no lock: a reader of computed steps never waits for a far cursor move)
      return
    with self.lock:
      for s in range(self._upto + 1, k + 1):
        if s not in self.steps:
          gone.check()  # between two steps (the state is whole): stop if the request asking has gone
          self._goto(s - 1)
          self._step(s)

  def computed(self, k: int) -> bool:
    """Whether every step up to k is computed (what a node's `created` at k needs to be exact: it never changes)."""
    return k <= self._upto

  def _ensure_root(self, k: int) -> None:
    if k not in self.roots:  # (read without the lock: entries are added last, never changed)
      with self.lock:
        if k == self.cur + 1 and self._whole and k not in self.steps:
          self._step(k)  # the next step: computed whole (what showing it asks next), as stepping from 0 numbers it
        elif k not in self.roots:
          self._goto(k)

  def _ensure_step(self, k: int) -> None:
    if k not in self.steps:
      with self.lock:
        if k not in self.steps:
          self._goto(k - 1)
          self._step(k)

  def _step(self, k: int) -> None:
    """Compute step k's StepInfo from the cursor at k-1 (and move the cursor to k)."""
    i = k - 1
    rw = self.rw
    b, a = rw.before[i], rw.after[i]
    note = None
    if a < 0:
      note = "the rule raised: nothing was replaced"
    elif a not in self.table or b not in self.table:
      note = f"the match names node {a if a not in self.table else b}, which the trace does not define"
    key = self._key_of(k)
    replaced = self._resolve(key) if note is None else None
    old: dict[int, int] = {}
    self._set_r(k, True, old)
    self.cur = k
    give_way = REQUEST_GATE.give_way  # (between the parts of a step, ~2-10 ms each: see _Lock)
    give_way()
    root = self._resolve(rw.root) if rw.root in self.table else rw.root
    give_way()
    added, removed = self._move_root(root)
    self.roots[k], self.sizes[k] = root, len(self._ref)
    new, gone = set(added), set(removed)
    pairs, changed = [], []
    memo, R = self._memo.get, self._R
    for z, v in old.items():
      nv = memo(z)
      if nv is not None and nv != v and nv in new and v in gone:
        pairs.append((v, nv))
        if z != key and z not in R:
          changed.append(nv)
    changed_set = set(changed)
    self._note_births(new, k)
    by = self._resolve(key) if note is None else None
    if note is None and not added and not removed:
      note = "the graph did not change: the replaced node is no longer part of it"
    kept_added = tuple(itertools.filterfalse(changed_set.__contains__, added))  # (in C: ~2,000 a step)
    self.steps[k] = StepInfo(kept_added, tuple(dict.fromkeys(changed)), tuple(removed), dict.fromkeys(pairs),
                             replaced, by, note)
    while self._upto + 1 in self.steps:
      self._upto += 1

  def _note_births(self, new: set[int], k: int) -> None:
    """Note step k as a birth of each node it added (steps are computed in any order: the lists stay ascending)."""
    born = self._born
    again = born.keys() & new  # (most nodes are added once: their step goes in at once, in C)
    for x in again:
      got = born[x]  # a step, or the steps ascending once added again (no list for a node added once)
      if type(got) is int:
        born[x] = [got, k] if got < k else [k, got]
      else:
        bisect.insort(got, k)
    born.update(dict.fromkeys(new - again if again else new, k))

  # ---- queries
  def root(self, k: int) -> int:
    self._ensure_root(k)
    return self.roots[k]

  def members(self, k: int) -> frozenset[int]:
    """Ids of the nodes of the graph at step k."""
    self._ensure_root(k)
    if abs(k - self.cur) > NEAR:  # (read without the lock: it only picks the cheaper way)
      return self._reachable(self.roots[k])  # walking the graph costs less than a far move, and takes no lock
    with self.lock:  # moving the cursor costs what the steps between changed
      self._goto(k)
      return frozenset(self._ref)

  def _reachable(self, root: int) -> frozenset[int]:
    """The nodes reachable from root (what the cursor's reference counts hold with root as its root)."""
    if root not in self.table and root not in self.fresh:
      return frozenset()
    seen, stack, src_of = set(), [root], self.src
    while stack:
      x = stack.pop()
      if x not in seen:
        seen.add(x)
        stack.extend(src_of(x))
    return frozenset(seen)

  def size(self, k: int) -> int:
    """The number of nodes of the graph at step k (without copying its members)."""
    self._ensure_root(k)
    return self.sizes[k]

  def step(self, k: int) -> StepInfo | None:
    """What match k did (None for step 0), computed from the graph at k-1 when first asked."""
    if k == 0:
      return None
    self._ensure_step(k)
    return self.steps[k]

  def created(self, nid: int, k: int) -> int:
    """The step that added node nid to the graph it has at step k (the last one up to k; 0: the input graph), exact:
    it computes every step up to k first."""
    self.ensure(k)
    return self._created(nid, k)

  def _computed_from(self, k: int) -> int:
    """The first step s such that steps s..k have all been computed (k + 1: step k has not)."""
    s, steps = k, self.steps
    while s > self._upto and s in steps:
      s -= 1
    return 1 if s <= self._upto else s + 1

  def creator(self, k: int) -> Callable[[int], int | None]:
    """created(·, k) for many nodes of step k as far as the steps computed tell it, without computing more (a delta
    asks it for each of the ~2,000 a step rebuilds): None where a step not computed may have brought the node back
    (after a far jump, most nodes; the node card says "unknown")."""
    return self._creator(k, self._computed_from(k))

  def _creator(self, k: int, lo: int) -> Callable[[int], int | None]:
    one = self._created

    def at(nid: int) -> int | None:
      b = one(nid, k)  # the last birth up to k among the steps computed (0: none)
      return b if lo <= b + 1 else None  # exact where no step after it is missing (for 0: every step up to k)
    return at

  def creators(self, k: int) -> tuple[Callable[[int], int | None], Callable[[Iterable[int]], list[int | None]]]:
    """creator(k), and the same for each of many ids in one loop (a delta asks it for the ~2,000 nodes a step
    rebuilds: two calls a node through creator's closure); both as far as the same steps computed tell."""
    lo = self._computed_from(k)
    return self._creator(k, lo), partial(self._creations, k, lo)

  def _creations(self, k: int, lo: int, ids: Iterable[int]) -> list[int | None]:
    born, out = self._born.get, []
    for nid in ids:
      got = born(nid)
      if got is None:
        b = 0
      elif type(got) is int:
        b = got if got <= k else 0
      else:
        i = bisect.bisect_right(got, k)
        b = got[i - 1] if i else 0
      out.append(b if lo <= b + 1 else None)
    return out

  def _created(self, nid: int, k: int) -> int:
    got = self._born.get(nid)
    if got is None:
      return 0
    if type(got) is int:
      return got if got <= k else 0
    i = bisect.bisect_right(got, k)
    return got[i - 1] if i else 0
