"""Shared helpers for the viewer's tests: a small rewrite matcher, random expressions, an oracle that stops a rewrite
after k matches, structural comparison, and traces written by the real recorder. (No tests here.)"""
from __future__ import annotations

import contextlib
import functools
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from compiler import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from compiler.trace import recorder
from compiler.uop import arg_str, toposort
from viz_server.replay import FRESH_BASE

if TYPE_CHECKING:
  from viz_server.store import Rewrite, Trace

XSS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "\"'><svg onload=alert(1)>", "a&b</pre>"]


def _fold(a: UOp, b: UOp, op: Ops) -> UOp:
  return UOp.const(a.dtype, a.arg + b.arg if op is Ops.ADD else a.arg * b.arg)


# identities, constant folding and re-association: rules that often return a source of the matched node, so a
# top-down rewrite frequently names nodes that an earlier match already rebuilt
mini = PatternMatcher([
  (UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), lambda x: x),
  (UPat(Ops.MUL, src=[UPat.var("x"), UPat.const(None, 1)]), lambda x: x),
  (UPat(Ops.MUL, src=[UPat.var("x"), UPat.const(None, 0).named("z")]), lambda x, z: z),
  (UPat(Ops.ADD, src=[UPat.cvar("a"), UPat.cvar("b")]), lambda a, b: _fold(a, b, Ops.ADD)),
  (UPat(Ops.MUL, src=[UPat.cvar("a"), UPat.cvar("b")]), lambda a, b: _fold(a, b, Ops.MUL)),
  (UPat(Ops.ADD, src=[UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar("c1")]), UPat.cvar("c2")]),
   lambda x, c1, c2: x + _fold(c1, c2, Ops.ADD)),
  (UPat(Ops.MUL, src=[UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c1")]), UPat.cvar("c2")]),
   lambda x, c1, c2: x * _fold(c1, c2, Ops.MUL)),
], name="mini")


def limited(pm: PatternMatcher, k: int) -> PatternMatcher:
  """pm whose rules stop firing after k successful rewrites (the oracle for the graph at step k)."""
  fired = [0]

  def wrap(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def inner(*args, **kwargs):
      out = fn(*args, **kwargs)
      if out is None or fired[0] >= k:
        return None
      fired[0] += 1
      return out
    return inner
  return PatternMatcher([(r.pat, wrap(r.fn), r.name) for r in pm.rules], name=pm.name)


def rand_expr(rng: random.Random, n: int, width: int = 4) -> UOp:
  """A random DAG of ADD/MUL over three variables and small constants, with sharing; `width` sink sources."""
  pool = [UOp.variable(f"v{i}", 0, 10) for i in range(3)] + [UOp.const(dtypes.int32, c) for c in (0, 1, 2, 3)]
  for _ in range(n):
    a, b = rng.choice(pool), rng.choice(pool[-12:])
    pool.append(a.alu(rng.choice((Ops.ADD, Ops.MUL)), b))
  return UOp.sink(*pool[-width:])


def canon_uop(root: UOp, table: dict) -> int:
  """A number equal for structurally equal graphs (given the same table)."""
  memo: dict[UOp, int] = {}
  for u in toposort(root):
    key = (u.op.name, str(u.dtype), arg_str(u.arg), tuple(memo[s] for s in u.src))
    memo[u] = table.setdefault(key, len(table))
  return memo[root]


def canon_ids(root: int, node: Callable, table: dict) -> int:
  """canon_uop for a graph of trace-style nodes: node(id) -> (op, dtype, arg, src ids)."""
  memo: dict[int, int] = {}
  stack: list[tuple[int, bool]] = [(root, False)]
  while stack:
    x, expanded = stack.pop()
    if x in memo:
      continue
    op, dtype, arg, src = node(x)
    if not expanded:
      stack.append((x, True))
      stack.extend((s, False) for s in src if s not in memo)
      continue
    memo[x] = table.setdefault((op, dtype, arg, tuple(memo[s] for s in src)), len(table))
  return memo[root]


@contextlib.contextmanager
def recording(path: Path) -> Iterator[Path]:
  """Record everything traced inside the block to path (the real recorder, closed with its `end` record)."""
  recorder.enable(path, announce=False)
  try:
    yield path
  finally:
    recorder.disable()


def write_rewrites(path: Path, exprs: list[UOp], pm: PatternMatcher = mini) -> list[UOp]:
  """A trace with one graph_rewrite per expression (alternating top-down and bottom-up); returns the results."""
  out = []
  with recording(path):
    for i, e in enumerate(exprs):
      out.append(graph_rewrite(e, pm, name=f"rw{i}", bottom_up=bool(i % 2)))
  return out


def write_kernel_trace(path: Path, evil: bool = False) -> None:
  """Schedule and kernel contexts with rewrites, opts, beam rounds, sources and runs (as the compiler records them).
  evil: hostile strings in kernel names, node args, sources and run names."""
  name = XSS[0] if evil else "r_4_4"
  with recording(path):
    x = UOp.variable(XSS[1] if evil else "x", 0, 10)
    with recorder.trace_context("schedule 1", kind="schedule"):
      graph_rewrite((x + 0) * 1, mini, name="early")
    with recorder.trace_context(name, kind="kernel"):
      graph_rewrite(((x + 0) * 1) + (UOp.variable("y", 0, 5) * 2) + (x * 0), mini, name="simplify")
      recorder.record("opt", op="UPCAST", axis=0, arg=4, ok=True, reason=None, shape=[4, 4], colors=["blue", "yellow"],
                      kname=name)
      recorder.record("opt", op="LOCAL", axis=1, arg=8, ok=False, reason="axis too small", shape=[4, 4],
                      colors=["blue", "yellow"], kname=name)
      recorder.record("beam", round=0, opts=[["UPCAST", 0, 4]], time=1.5e-5, chosen=True)
      src = (XSS[2] + "\n" + XSS[0]) if evil else "define void @r_4_4(ptr %0) {\n  ret void\n}"
      recorder.record("source", kind="llvm_ir", text=src, compile_s=0.01)
      recorder.record("source", kind="asm", text=XSS[3] if evil else "r_4_4:\n  ret", compile_s=0.0)
      recorder.record("run", kname=name, times=[1e-5, 2e-5], min=1e-5, median=1.5e-5, flops=32.0, bytes=128.0,
                      gflops=3.2, gbs=12.8)


def apply_delta(graph: dict, d: dict) -> tuple[dict, dict]:
  """The client side of /delta: graph at `from` + delta -> graph at `to` (nodes by id, edges by key)."""
  nodes = {n["id"]: dict(n) for n in graph["nodes"]}
  edges = {(e["src"], e["dst"], e["index"]): e for e in graph["edges"]}
  old_nodes, old_edges = dict(nodes), dict(edges)
  for nid in d["nodes_removed"]:
    del nodes[nid]
  for key in d["edges_removed"]:
    del edges[tuple(key)]
  edges = {key: e for key, e in edges.items() if key[1] in nodes}  # compact: edges go with their node
  for n in d["nodes_added"]:
    assert n["id"] not in nodes
    if "like" in n:  # compact: rebuilt from `like`: its look, and its in-edges' routes where it had such an edge
      like = old_nodes[n.pop("like")]
      for i, s in enumerate(n["src"]):
        old = old_edges.get((like["src"][i], like["id"], i)) if i < len(like["src"]) else None
        if old is not None:
          edges[(s, n["id"], i)] = {"src": s, "dst": n["id"], "index": i, "points": old["points"]}
      n = {**like, **n}
    nodes[n["id"]] = n
  for n in nodes.values():
    n["consts"] = [s for s in n["src"] if s in nodes and nodes[s]["op"] == "CONST"]  # a cut graph: s not shown
  for nid, xy in d["nodes_moved"].items():
    nodes[int(nid)]["x"], nodes[int(nid)]["y"] = xy
  for e in d["edges_added"]:
    if "points" not in e:  # compact: a straight edge, center to center
      a, b = nodes[e["src"]], nodes[e["dst"]]
      e = {**e, "points": [[a["x"], a["y"]], [b["x"], b["y"]]]}
    edges[(e["src"], e["dst"], e["index"])] = e
  return nodes, edges


def noisy(rng: random.Random, depth: int, leaves: list[UOp]) -> UOp:
  """Index math with the identities and constant chains the simplifier removes (it rebuilds some nodes later)."""
  if depth == 0:
    return rng.choice(leaves)
  a = noisy(rng, depth - 1, leaves)
  r = rng.random()
  if r < 0.2:
    a = a + 0
  elif r < 0.35:
    a = a * 1
  elif r < 0.5:
    a = (a + rng.randint(1, 4)) + rng.randint(-4, -1)
  op = rng.choice(["add", "mul", "div", "mod", "addc"])
  if op == "add":
    return a + noisy(rng, depth - 1, leaves)
  if op == "mul":
    return a * rng.choice([2, 3, 4])
  if op == "div":
    return a // rng.choice([2, 4])
  return a % rng.choice([2, 4, 8]) if op == "mod" else a + rng.randint(0, 3)


def write_noisy_simplify(path: Path, kernel: str | None = None) -> Path:
  """24 noisy index expressions under a SINK simplified by `symbolic` top-down, then bottom-up (in a kernel context
  named `kernel` if given): long rewrites that remove nodes and build some of them again."""
  from compiler.symbolic import symbolic
  rng = random.Random(5)
  leaves = [UOp.range(8, i) for i in range(3)]
  sink = UOp.sink(*[noisy(rng, 5, leaves) for _ in range(24)])
  with recording(path):
    with recorder.trace_context(kernel, kind="kernel") if kernel else contextlib.nullcontext():
      graph_rewrite(sink, symbolic, name="simplify")
      graph_rewrite(sink, symbolic, name="simplify", bottom_up=True)
  return path


def longest_rewrite(tr: Trace) -> Rewrite:
  """The trace's rewrite with the most matches (the one whose steps a server test walks)."""
  return max(tr.rewrites.values(), key=lambda r: r.matches)


def _boxes_overlap(view, lay, ids):
  by_band = {}
  for n in ids:
    x, y = lay.pos[n]
    w, h = view.size(n)
    by_band.setdefault(round(y, 3), []).append((x - w / 2, x + w / 2, y - h / 2, y + h / 2, n))
  rows = [sorted(v) for v in by_band.values()]
  for row in rows:  # same band: neighbours must not overlap horizontally
    for a, b in zip(row, row[1:]):
      if a[1] > b[0] + 1e-6:
        return (a[4], b[4])
  boxes = [b for row in rows for b in row]
  for i, a in enumerate(boxes):  # any two boxes (nodes placed between bands included)
    for b in boxes[i + 1:]:
      if a[0] < b[1] - 1e-6 and b[0] < a[1] - 1e-6 and a[2] < b[3] - 1e-6 and b[2] < a[3] - 1e-6:
        return (a[4], b[4])
  return None




def fresh_canon(rp: Any, table: dict) -> Callable[[int], int]:
  """rp's node ids with its fresh ones (>= FRESH_BASE) as numbers standing for their structure, the trace's ids as they
  are: two replays of one rewrite compared up to the numbering of fresh ids, which follows the order the steps were
  asked in (docs: Replay semantics). `table` is shared by the replays compared."""
  memo: dict[int, int] = {}

  def canon(x0: int) -> int:
    stack = [x0]
    while stack:
      x = stack[-1]
      if x in memo:
        stack.pop()
        continue
      if x < FRESH_BASE:
        memo[x] = x
        stack.pop()
        continue
      op, dtype, arg, src = rp.node(x)
      todo = [s for s in src if s not in memo]
      if todo:
        stack.extend(todo)
        continue
      memo[x] = table.setdefault((op, dtype, arg, tuple(memo[s] for s in src)), -1 - len(table))
      stack.pop()
    return memo[x0]
  return canon
