"""`compare A B`: two traces of the same program aligned, and where they first diverge.

Contexts are matched by kind, name and order, then rewrites inside matched contexts by name and order, preferring
rewrites whose input graphs are structurally equal (the structural hashes of viz_server/diff.py, so the hashes in
the report are the labels the Diff panel prints). Reported: the first rewrite (in trace order) whose input or output
graph differs or that exists in one trace only, the first step in it whose match differs (rule, node), the kernels
whose opts, sources or runtime differ (with the runtime ratio B/A), and everything found in only one trace. Nothing
is replayed: a graph's identity is its root's structural hash, computed once per node of each trace.

Cost: O(N + E + (C + R) log(C + R) + M + S) for N nodes with E edges, C contexts, R rewrites, the matches M of the
one diverging rewrite whose steps are compared, and S characters of kernel sources compared (plus diff_graphs'
bounded diff of one pair of graphs). Alignment never pairs everything with everything (difflib was quadratic in
contexts: 21-26 s on a 27 KB pair): see align(). `Work` counts the steps that grow with the input, which the tests
bound by counting."""
from __future__ import annotations

import hashlib
import json
import math
import statistics
import sys
from bisect import bisect_left
from collections import deque
from typing import IO, Any, Callable, Iterator, Sequence, TypeVar

from viz_server.diff import HASH_CHARS, DiffError, diff_graphs
from viz_server.show import seconds_text
from viz_server.store import Context, Rewrite, Trace, TraceStore
from viz_server.term import Painter, safe, use_color
from vztrace.counts import kernel_key, run_times

T = TypeVar("T")
RUNTIME_TOLERANCE = 1.25  # a kernel whose median time changed by more than this factor (either way) may differ...
MIN_RUNS = 3  # ...when both traces ran it at least this often: fewer runs tell nothing of their noise


class Work:
  """Steps a comparison took where its cost grows with the input: nodes hashed, items aligned, anchors chained,
  match steps compared. Tests check compare()'s bound by counting these, never by the clock."""
  __slots__ = ("steps",)

  def __init__(self) -> None:
    self.steps = 0


class Hasher:
  """Structural hashes of one trace's nodes (the scheme of diff.structural_hashes), memoized across graphs; a node
  whose graph the trace does not define (a source it never wrote) is memoized as None too, so each node is hashed
  once whatever asks."""

  def __init__(self, tr: Trace, work: Work | None = None) -> None:
    self.tr = tr
    self.memo: dict[int, bytes | None] = {}
    self.work = work or Work()

  def __call__(self, root: int | None) -> str | None:
    """The hex hash of the graph under root, or None where the trace does not define it."""
    if root is None or root < 0:
      return None
    memo, get, work = self.memo, self.tr.nodes.get, self.work
    stack = [root]
    while stack:
      x = stack[-1]
      work.steps += 1
      if x in memo:
        stack.pop()
        continue
      node = get(x)
      if node is None:
        memo[x] = None
        stack.pop()
        continue
      missing = [s for s in node[3] if s not in memo]
      work.steps += len(node[3])
      if missing:
        stack.extend(missing)
        continue
      stack.pop()
      if any(memo[s] is None for s in node[3]):
        memo[x] = None
        continue
      h = hashlib.blake2b(digest_size=16)
      for part in node[:3]:
        b = part.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
      for s in node[3]:
        h.update(memo[s])  # type: ignore[arg-type]
      memo[x] = h.digest()
    got = memo[root]
    return None if got is None else got.hex()


def align(a: Sequence[T], b: Sequence[T], ka: list, kb: list, loose: Callable[[T], Any],
          work: Work | None = None) -> Iterator[tuple]:
  """Pairs (x, y) in order, (x, None) / (None, y) for what only one side has. Anchors first: the common start and
  end by key (ka[i] for a[i], kb[j] for b[j]), and between them the n-th occurrence of a key in A paired with its n-th
  in B, of those pairs the longest chain in both orders (patience sorting, O(n log n)); then inside each stretch
  between two anchors, items with equal loose keys paired in order. O((n + m) log(n + m)) in all: never a pair of
  every item with every other (difflib's matching blocks were quadratic in repeated keys)."""
  w = work or Work()
  n, m = len(a), len(b)
  lo = 0
  while lo < n and lo < m and ka[lo] == kb[lo]:
    lo += 1
  hi = 0
  while hi < n - lo and hi < m - lo and ka[n - 1 - hi] == kb[m - 1 - hi]:
    hi += 1
  w.steps += lo + hi
  middle = [(lo + i, lo + j) for i, j in _chain(ka[lo:n - hi], kb[lo:m - hi], w)]
  anchors = [*((i, i) for i in range(lo)), *middle, *((n - hi + k, m - hi + k) for k in range(hi)), (n, m)]
  i0 = j0 = 0
  for i, j in anchors:
    yield from _loose(a[i0:i], b[j0:j], loose, w)
    if i < n:  # (n, m) only closes the last stretch
      yield a[i], b[j]
    i0, j0 = i + 1, j + 1


def _chain(ka: list, kb: list, w: Work) -> list[tuple[int, int]]:
  """The longest chain (increasing in both) of pairs (i, j) where ka[i] is the n-th occurrence of its key in ka and
  kb[j] the n-th in kb."""
  at: dict[Any, list[int]] = {}
  for j, k in enumerate(kb):
    at.setdefault(k, []).append(j)
  used: dict[Any, int] = {}
  cand: list[tuple[int, int]] = []
  for i, k in enumerate(ka):
    js, u = at.get(k), used.get(k, 0)
    if js is not None and u < len(js):
      cand.append((i, js[u]))
      used[k] = u + 1
  w.steps += len(ka) + len(kb) + len(cand)
  tails: list[int] = []  # tails[p]: the smallest j ending a chain of p + 1 pairs so far
  ends: list[int] = []  # the index in cand of that pair
  back = [-1] * len(cand)
  for c, (_, j) in enumerate(cand):
    p = bisect_left(tails, j)
    back[c] = ends[p - 1] if p else -1
    if p == len(tails):
      tails.append(j)
      ends.append(c)
    else:
      tails[p], ends[p] = j, c
  out, c = [], ends[-1] if ends else -1
  while c >= 0:
    out.append(cand[c])
    c = back[c]
  return out[::-1]


def _loose(xs: Sequence[T], ys: Sequence[T], loose: Callable[[T], Any], w: Work) -> Iterator[tuple]:
  """A stretch with no anchor: each x paired with the first y after the last partner with an equal loose key (B's
  items before that partner come before it), found with a queue of positions per loose key: linear."""
  w.steps += len(xs) + len(ys)
  queues: dict[Any, deque[int]] = {}
  if xs:
    for j, y in enumerate(ys):
      queues.setdefault(loose(y), deque()).append(j)
  nxt = 0
  for x in xs:
    q = queues.get(loose(x))
    while q and q[0] < nxt:  # each position leaves its queue once
      q.popleft()
      w.steps += 1
    if not q:
      yield x, None
      continue
    j = q.popleft()
    for z in ys[nxt:j]:
      yield None, z
    nxt = j + 1
    yield x, ys[j]
  for z in ys[nxt:]:
    yield None, z


class Side:
  """One trace with its hasher."""

  def __init__(self, tr: Trace, work: Work | None = None) -> None:
    self.work = work or Work()
    self.tr, self.hash = tr, Hasher(tr, self.work)
    self.finals: dict[int, Rewrite] | None = None  # context id -> its final AST's rewrite (made when first asked)
    self._times: dict[str, list[float]] | None = None  # kernel (vztrace.counts.kernel_key) -> its run times

  def kernel_times(self, c: Context) -> list[float]:
    """Every run time of the kernel that ran in context c, in all the contexts it ran in (a schedule cache hit or a
    loop runs one kernel many times), in trace order; made for all kernels when first asked (O(runs))."""
    if self._times is None:
      self._times = {}
      for r in self.tr.runs:
        self._times.setdefault(kernel_key(r), []).extend(run_times(r))
        self.work.steps += 1
    return self._times.get(kernel_key(c.runs[-1]), []) if c.runs else []

  def rw_info(self, rw: Rewrite) -> dict:
    c = self.tr.contexts.get(rw.ctx)
    return {"id": rw.id, "name": rw.name, "ctx": rw.ctx, "ctx_name": c.name if c else None,
            "ctx_kind": c.kind if c else None, "matches": rw.matches, "input": _short(self.hash(rw.root)),
            "output": _short(self.hash(rw.end_root if rw.ended else None))}

  def step(self, rw: Rewrite, k: int) -> dict | None:
    """Match k (1-based) as compared: its rule and the nodes it replaced and made."""
    if k > rw.matches:
      return None
    pat = self.tr.patterns.get(rw.pat[k - 1]) or {}
    before, after = rw.before[k - 1], rw.after[k - 1]
    node = self.tr.nodes.get(before)
    return {"k": k, "rule": {"name": pat.get("name"), "file": pat.get("file"), "line": pat.get("line")},
            "node": {"id": before, "op": node[0] if node else None, "hash": _short(self.hash(before))},
            "result": {"id": after if after >= 0 else None, "hash": _short(self.hash(after))},
            "error": rw.merr.get(k)}


def _short(h: str | None) -> str | None:
  return None if h is None else h[:HASH_CHARS]


def _step_key(s: dict | None) -> Any:
  if s is None:
    return None
  r = s["rule"]
  return (r["name"], r["file"], r["line"], s["node"]["hash"], s["result"]["hash"], s["error"] is not None)


def first_step(a: Side, ra: Rewrite, b: Side, rb: Rewrite) -> dict | None:
  """The first step whose match differs (rule, node replaced, or result), or where one rewrite has no more."""
  for k in range(1, max(ra.matches, rb.matches) + 1):
    a.work.steps += 1
    sa, sb = a.step(ra, k), b.step(rb, k)
    if _step_key(sa) != _step_key(sb):
      return {"k": k, "a": sa, "b": sb}
  return None


def graph_diff(a: Side, ra: Rewrite, b: Side, rb: Rewrite, inputs: bool) -> list[dict] | None:
  """The Diff panel's unified diff (its `lines`) of the two input graphs, or of the outputs when the inputs are
  equal; None when a graph is missing or too big to print."""
  roots = (ra.root, rb.root) if inputs else (ra.end_root, rb.end_root)
  if None in roots:
    return None
  which = "input" if inputs else "output"
  try:
    d = diff_graphs((roots[0], a.tr.nodes.get, f"A {ra.name} {which}"), (roots[1], b.tr.nodes.get,
                                                                         f"B {rb.name} {which}"))
  except DiffError:
    return None
  return d["lines"]


def context_key(c: Context) -> tuple:
  return (c.kind, c.name)


def rewrite_pairs(a: Side, b: Side) -> Iterator[tuple[Context | None, Context | None, Rewrite | None,
                                                    Rewrite | None]]:
  """Every rewrite of both traces, aligned, in trace order (contexts aligned first)."""
  for x, y in context_pairs(a, b):
    ra = [a.tr.rewrites[r] for r in x.rewrites] if x else []
    rb = [b.tr.rewrites[r] for r in y.rewrites] if y else []
    keys_a = [(rw.name, a.hash(rw.root)) for rw in ra]
    keys_b = [(rw.name, b.hash(rw.root)) for rw in rb]
    for p, q in align(ra, rb, keys_a, keys_b, lambda rw: rw.name, a.work):
      yield x, y, p, q


def context_pairs(a: Side, b: Side) -> list[tuple[Context | None, Context | None]]:
  ca, cb = list(a.tr.contexts.values()), list(b.tr.contexts.values())
  return list(align(ca, cb, [context_key(c) for c in ca], [context_key(c) for c in cb], lambda c: c.kind, a.work))


def _ctx_info(c: Context) -> dict:
  return {"id": c.id, "name": c.name, "kind": c.kind}


def _warm(times: list[float]) -> list[float]:
  """The runs that say how fast a kernel is: its first run is cold (code and memory never touched; the demo's 4M
  elementwise kernel took 70.9 ms once, then 3.0 ms), left out where enough runs remain."""
  return times[1:] if len(times) > MIN_RUNS else times


def runtime_verdict(ta: list[float], tb: list[float], tolerance: float = RUNTIME_TOLERANCE) -> dict:
  """Whether two traces' runs of a kernel differ beyond their noise: "not enough runs" unless both have MIN_RUNS;
  "differs" when the medians are more than `tolerance` apart and the slower side's lower quartile is above the
  faster side's upper quartile (the middle halves of the two spreads do not overlap), else "same". Single runs
  2-17 us long differed 1.27x between two runs of one program: 26 of 48 kernels were reported as divergences."""
  wa, wb = _warm(ta), _warm(tb)
  ma = statistics.median(wa) if wa else None
  mb = statistics.median(wb) if wb else None
  best_a, best_b = min(wa, default=None), min(wb, default=None)
  out = {"time_a": best_a, "time_b": best_b, "ratio": best_b / best_a if best_a and best_b else None,  # (best: shown)
         "median_a": ma, "median_b": mb, "runs_a": len(ta), "runs_b": len(tb)}
  if len(wa) < MIN_RUNS or len(wb) < MIN_RUNS or not ma or not mb:
    return {**out, "runtime": "not enough runs"}
  slow, fast = (wb, wa) if mb >= ma else (wa, wb)
  apart = statistics.quantiles(slow, n=4, method="inclusive")[0] > statistics.quantiles(fast, n=4,
                                                                                     method="inclusive")[2]
  return {**out, "runtime": "differs" if apart and abs(math.log(mb / ma)) > math.log(tolerance) else "same"}


def _opts(c: Context) -> list[list]:
  return [[o.get("op"), o.get("axis"), o.get("arg")] for o in c.opts if o.get("ok")]


def _final_hash(side: Side, c: Context) -> str | None:
  if side.finals is None:
    side.finals = side.tr.final_asts()
  rw = side.finals.get(c.id)
  return None if rw is None else side.hash(rw.end_root)


def kernel_diff(a: Side, x: Context, b: Side, y: Context, tolerance: float) -> dict:
  sa = {s["kind"]: s["text"] for s in x.sources}
  sb = {s["kind"]: s["text"] for s in y.sources}
  out = {"a": _ctx_info(x), "b": _ctx_info(y), "opts_a": _opts(x), "opts_b": _opts(y),
         "sources_differ": sorted(k for k in sa.keys() | sb.keys() if sa.get(k) != sb.get(k)),
         "beam_a": len(x.beam), "beam_b": len(y.beam),
         **runtime_verdict(a.kernel_times(x), b.kernel_times(y), tolerance)}
  out["opts_differ"] = out["opts_a"] != out["opts_b"]
  out["ast_differs"] = _final_hash(a, x) != _final_hash(b, y)  # (a final AST can change with no source change)
  out["runtime_differs"] = out["runtime"] == "differs"
  out["differs"] = (out["opts_differ"] or bool(out["sources_differ"]) or out["ast_differs"] or out["runtime_differs"]
                    or out["beam_a"] != out["beam_b"])
  return out


def compare(ta: Trace, tb: Trace, tolerance: float = RUNTIME_TOLERANCE, work: Work | None = None) -> dict:
  """The comparison report (see the module docstring) of two indexed traces; `work` counts its steps."""
  work = work or Work()
  a, b = Side(ta, work), Side(tb, work)
  rewrites: dict[str, Any] = {"same": 0, "differ": 0, "only_a": [], "only_b": []}
  diverging: list[tuple[Rewrite | None, Rewrite | None]] = []  # in begin order
  for _, _, p, q in rewrite_pairs(a, b):
    if p is not None and q is not None:
      same = (a.hash(p.root), a.hash(p.end_root), p.matches) == (b.hash(q.root), b.hash(q.end_root), q.matches)
      rewrites["same" if same else "differ"] += 1
      if not same:
        diverging.append((p, q))
      continue
    if p is not None:
      rewrites["only_a"].append(a.rw_info(p))
    if q is not None:
      rewrites["only_b"].append(b.rw_info(q))
    diverging.append((p, q))
  first = divergence(a, b, *innermost(diverging)) if diverging else None
  contexts = {"only_a": [], "only_b": [], "renamed": []}
  kernels = []
  compared: set[tuple[str, str]] = set()  # a kernel once: its later contexts are its runs again (schedule cache hits)
  for x, y in context_pairs(a, b):
    if x is None or y is None:
      contexts["only_a" if y is None else "only_b"].append(_ctx_info(x or y))  # type: ignore[arg-type]
      continue
    if x.name != y.name:
      contexts["renamed"].append({"a": _ctx_info(x), "b": _ctx_info(y)})
    if (x.is_kernel or y.is_kernel) and (x.name, y.name) not in compared:
      compared.add((x.name, y.name))
      kernels.append(kernel_diff(a, x, b, y, tolerance))
  return {"a": _trace_info(ta), "b": _trace_info(tb), "same": first is None and not any(
            k["opts_differ"] or k["sources_differ"] or k["ast_differs"] or k["beam_a"] != k["beam_b"] for k in kernels)
          and not any(contexts.values()),
          "first_divergence": first, "rewrites": rewrites, "contexts": contexts, "kernels": kernels}


def innermost(pairs: list[tuple[Rewrite | None, Rewrite | None]]) -> tuple[Rewrite | None, Rewrite | None]:
  """The first diverging pair in begin order, or the first one nested in it (a rewrite that began while it ran, as
  a rule's own graph_rewrite does), repeatedly: the parent differs because the nested one does."""
  i = 0
  for j in range(1, len(pairs)):
    if _inside(pairs[j][0] or pairs[j][1], pairs[i][0] or pairs[i][1]):  # type: ignore[arg-type]
      i = j
  return pairs[i]


def _inside(child: Rewrite, parent: Rewrite) -> bool:
  """The child began while the parent ran: between the parent's begin and end records (not by timestamps: the
  parent's duration is timed from just after its begin record, so on a loaded machine the clocks disagree)."""
  return parent.order_at_end is not None and parent.order < child.order < parent.order_at_end


def divergence(a: Side, b: Side, p: Rewrite | None, q: Rewrite | None) -> dict:
  """The report's first_divergence entry for an aligned pair (either may be missing)."""
  if p is None or q is None:
    return {"kind": "only_a" if p is not None else "only_b", "a": a.rw_info(p) if p is not None else None,
            "b": b.rw_info(q) if q is not None else None, "input_differs": None, "output_differs": None,
            "step": None, "diff": None}
  ia, ib = a.rw_info(p), b.rw_info(q)
  inputs = ia["input"] != ib["input"]
  return {"kind": "differs", "a": ia, "b": ib, "input_differs": inputs, "output_differs": ia["output"] != ib["output"],
          "step": first_step(a, p, b, q), "diff": graph_diff(a, p, b, q, inputs)}


def _trace_info(tr: Trace) -> dict:
  # (contexts and kernels as every surface counts them: vztrace.counts)
  return {"name": tr.name, "contexts": tr.counts.contexts, "rewrites": len(tr.rewrites), "matches": tr.match_count,
          "kernels": tr.counts.kernels, "ended": tr.ended, "damage": tr.damage}


def compare_files(path_a: str, path_b: str, tolerance: float = RUNTIME_TOLERANCE) -> dict:
  """compare() of two trace files, each read whole (raises TraceFormatError/OSError like the store)."""
  store = TraceStore()
  try:
    (ta,), (tb,) = store.add_path(path_a), store.add_path(path_b)
    if ta is tb:  # the same file twice: the store serves it once
      return compare(ta, ta, tolerance)
    return compare(ta, tb, tolerance)
  finally:
    store.stop()


# ---- text report

def _where(info: dict | None) -> str:
  if info is None:
    return "-"
  return f"rewrite {info['id']} {safe(info['name'])!r} in {safe(info['ctx_kind'])} {safe(info['ctx_name'])!r}"


def _rule(step: dict | None) -> str:
  if step is None:
    return "(no such step)"
  r, n = step["rule"], step["node"]
  where = f"{safe(r['file'])}:{r['line']}" if r["file"] else "?"
  result = "raised" if step["error"] is not None else f"-> {step['result']['hash']}"
  return f"rule {safe(r['name'])} ({where}) on {safe(n['op'])} {n['hash']} {result}"


def report_lines(rep: dict, paint: Painter, max_diff: int = 40) -> Iterator[str]:
  """The report as text (every trace string made safe for the terminal)."""
  p = paint
  for side in ("a", "b"):
    t = rep[side]
    yield (f"{side.upper()}  {safe(t['name'])}: {t['contexts']} contexts, {t['rewrites']} rewrites, "
           f"{t['matches']} matches, {t['kernels']} kernels")
  first = rep["first_divergence"]
  rw = rep["rewrites"]
  yield (f"rewrites: {rw['same']} same, {rw['differ']} differ, {len(rw['only_a'])} only in A, "
         f"{len(rw['only_b'])} only in B")
  if first is None:
    yield p("no rewrite differs", "green")
  elif first["kind"] == "differs":
    what = " and ".join(w for w, d in (("input", first["input_differs"]), ("output", first["output_differs"])) if d)
    verb = "differ" if " and " in what else "differs"
    yield p(f"first divergence: {_where(first['a'])}: {what or 'match count'} {verb}", "bold")
    if first["b"]["id"] != first["a"]["id"] or first["b"]["ctx_name"] != first["a"]["ctx_name"]:
      yield f"  in B: {_where(first['b'])}"
    yield f"  A: {first['a']['matches']} match(es), {first['a']['input']} -> {first['a']['output']}"
    yield f"  B: {first['b']['matches']} match(es), {first['b']['input']} -> {first['b']['output']}"
    st = first["step"]
    if st is not None:
      yield p(f"  first differing step {st['k']}:", "bold")
      yield p(f"    A: {_rule(st['a'])}", "red")
      yield p(f"    B: {_rule(st['b'])}", "green")
    lines = first.get("diff") or []
    for line in lines[:max_diff]:
      kind = line["kind"]
      text = safe(line["text"]) if kind == "@" else kind + safe(line["text"])
      yield "    " + p(text, {"-": "red", "+": "green", "@": "cyan"}.get(kind))
    if len(lines) > max_diff:
      yield f"    ... {len(lines) - max_diff} more diff lines (--json has them all)"
  else:
    side = "A" if first["kind"] == "only_a" else "B"
    yield p(f"first divergence: {_where(first['a'] or first['b'])} exists only in {side}", "bold")
  kd = [k for k in rep["kernels"] if k["differs"]]
  if kd:
    yield p(f"kernels that differ ({len(kd)} of {len(rep['kernels'])}):", "bold")
  for k in kd:
    parts = []
    if k["opts_differ"]:
      parts.append(f"opts A {_opt_list(k['opts_a'])} | B {_opt_list(k['opts_b'])}")
    if k["sources_differ"]:
      parts.append("sources differ: " + ", ".join(safe(s) for s in k["sources_differ"]))
    if k["ast_differs"]:
      parts.append("final AST differs")
    if k["beam_a"] != k["beam_b"]:
      parts.append(f"beam candidates A {k['beam_a']} B {k['beam_b']}")
    if k["ratio"] is not None:  # medians of the warm runs, and the verdict on their spread (runtime_verdict)
      verdict = {"differs": "differs", "same": "within the runs' noise"}.get(k["runtime"], "not enough runs to judge")
      parts.append(f"runtime A {seconds_text(k['time_a'])} B {seconds_text(k['time_b'])} ({k['ratio']:.2f}x, "
                   f"{k['runs_a']} and {k['runs_b']} runs: {verdict})")
    yield f"  {safe(k['a']['name'])}: " + "; ".join(parts)
  for side in ("a", "b"):
    only = rep["contexts"][f"only_{side}"]
    if only:
      yield f"contexts only in {side.upper()}: " + ", ".join(f"{safe(c['kind'])} {safe(c['name'])!r}" for c in only)
    only_rw = rep["rewrites"][f"only_{side}"]
    if only_rw:
      yield f"rewrites only in {side.upper()}: {len(only_rw)}, first: {_where(only_rw[0])}"


def _opt_list(opts: list[list]) -> str:
  return " ".join(safe(f"{o}({a}, {g})") for o, a, g in opts) or "none"


def run(args: Any, out: IO[str] | None = None) -> int:
  """The `compare` command: exit status 0 when nothing differs, 1 when something does (as diff(1))."""
  out = out or sys.stdout
  rep = compare_files(args.a, args.b, args.tolerance)
  if args.json:
    out.write(json.dumps(rep, ensure_ascii=True) + "\n")
  else:
    out.write("\n".join(report_lines(rep, Painter(use_color(out)))) + "\n")
  return 0 if rep["same"] else 1
