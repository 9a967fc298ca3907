"""`compare` costs O(n log n) in the contexts and rewrites of a trace pair (issue 31): generated pairs that made its
difflib alignment quadratic (every context the same key; keys A and B never share; rewrites whose names never
match) are compared at growing sizes with the work counted - compare's own step counter and the Python lines run,
which also count difflib's inner loops - never timed; and the alignment stays right on normal sequences."""
from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from support import hostile_traces as ht

from viz_server import compare
from viz_server.store import TraceStore


def contexts_trace(path: Path, n: int, kind: Callable[[int], str], name: Callable[[int], str],
                   rw_name: Callable[[int], str] = lambda i: "simplify", arg: str = "1") -> Path:
  """n contexts under the default one, each with one rewrite of a 2-node graph (CONST arg, NEG of it)."""
  recs: list[Any] = [ht.meta(), ht.ctx(0)]
  for i in range(n):
    c = i + 1
    recs += [ht.ctx(c, kind(i), 0, name(i)), ht.node(2 * i, arg=arg), ht.node(2 * i + 1, "NEG", [2 * i]),
             {**ht.rw_begin(i, 2 * i + 1, c), "name": rw_name(i)}, ht.rw_end(i, 2 * i + 1, 0),
             {"t": "ctx_end", "id": c, "ts": 1.7e9}]
  return ht.write(path, [[*recs, ht.END]])


def rewrites_trace(path: Path, n: int, rw_name: Callable[[int], str]) -> Path:
  """One context with n rewrites, each of its own 1-node graph."""
  recs: list[Any] = [ht.meta(), ht.ctx(0)]
  for i in range(n):
    recs += [ht.node(i, arg=str(i)), {**ht.rw_begin(i, i), "name": rw_name(i)}, ht.rw_end(i, i, 0)]
  return ht.write(path, [[*recs, ht.END]])


# (name, trace A of size n, trace B of size n): the pairs difflib's alignment took quadratic work on
PAIRS = {
  "same_key": (lambda p, n: contexts_trace(p, n, lambda i: "schedule", lambda i: "schedule"),
               lambda p, n: contexts_trace(p, n, lambda i: "schedule", lambda i: "schedule", arg="2")),
  "disjoint": (lambda p, n: contexts_trace(p, n, lambda i: "a", lambda i: f"a{i}"),
               lambda p, n: contexts_trace(p, n, lambda i: "b", lambda i: f"b{i}")),
  "rewrite_names": (lambda p, n: rewrites_trace(p, n, lambda i: "p"), lambda p, n: rewrites_trace(p, n, lambda i: "q")),
}


def load(path: Path):
  store = TraceStore()
  (tr,) = store.add_path(path)
  store.stop()
  return tr


def lines_run(fn: Callable[[], Any]) -> int:
  """How many Python lines fn() runs (every frame it calls, library code included)."""
  count = 0

  def tracer(frame, event, arg):
    nonlocal count
    if event == "line":
      count += 1
    return tracer

  old = sys.gettrace()
  sys.settrace(tracer)
  try:
    fn()
  finally:
    sys.settrace(old)
  return count


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_compare_work_is_linear_on_hostile_pairs(pair, tmp_path):
  make_a, make_b = PAIRS[pair]
  steps, lines = [], []
  for n in (150, 300, 600):
    ta, tb = load(make_a(tmp_path / f"a{n}.vztrace", n)), load(make_b(tmp_path / f"b{n}.vztrace", n))
    work = compare.Work()
    rep = compare.compare(ta, tb, work=work)
    assert not rep["same"]
    if pair == "same_key":  # context i pairs with context i; every rewrite differs (its constant does)
      assert rep["rewrites"]["differ"] == n and not any(rep["contexts"].values())
    elif pair == "disjoint":  # no kind in common: nothing pairs
      assert len(rep["contexts"]["only_a"]) == len(rep["contexts"]["only_b"]) == n
    else:
      assert len(rep["rewrites"]["only_a"]) == len(rep["rewrites"]["only_b"]) == n
    steps.append(work.steps)
    lines.append(lines_run(lambda ta=ta, tb=tb: compare.compare(ta, tb)))
    assert work.steps <= 40 * (n + 1)
  for counts in (steps, lines):
    for small, big in zip(counts, counts[1:]):
      assert big <= 2.2 * small + 200, counts


def test_compare_files_on_a_big_pair(tmp_path):
  """The CLI's path (files read, compared, reported) on a pair of 5,000 contexts, counted."""
  a = contexts_trace(tmp_path / "a.vztrace", 5000, lambda i: "schedule", lambda i: "schedule")
  b = contexts_trace(tmp_path / "b.vztrace", 5000, lambda i: "schedule", lambda i: f"s{i % 7}", arg="2")
  work = compare.Work()
  store = TraceStore()
  try:
    (ta,), (tb,) = store.add_path(a), store.add_path(b)
    rep = compare.compare(ta, tb, work=work)
  finally:
    store.stop()
  assert len(rep["contexts"]["renamed"]) == 5000 and rep["rewrites"]["differ"] == 5000
  assert work.steps <= 40 * 5001
  assert rep["first_divergence"]["a"]["id"] == 0 and rep["first_divergence"]["input_differs"]


def _check_alignment(a: list, b: list, pairs: list[tuple], loose: Callable[[Any], Any]) -> None:
  """Every item of each side once, in order; paired items have equal loose keys."""
  assert [x for x, _ in pairs if x is not None] == a and [y for _, y in pairs if y is not None] == b
  assert all(loose(x) == loose(y) for x, y in pairs if x is not None and y is not None)


@pytest.mark.parametrize("a,b,want", [
  ("abcd", "abcd", [("a", "a"), ("b", "b"), ("c", "c"), ("d", "d")]),
  ("abcd", "abxcd", [("a", "a"), ("b", "b"), (None, "x"), ("c", "c"), ("d", "d")]),
  ("abxcd", "abcd", [("a", "a"), ("b", "b"), ("x", None), ("c", "c"), ("d", "d")]),
  ("sksk", "sKsk", [("s", "s"), ("k", "K"), ("s", "s"), ("k", "k")]),  # loose: k and K pair in their stretch
  ("sss", "ss", [("s", "s"), ("s", "s"), ("s", None)]),
  ("xab", "abx", [("x", None), ("a", "a"), ("b", "b"), (None, "x")]),
  ("", "ab", [(None, "a"), (None, "b")]),
  ("QaQb", "qAqB", [("Q", "q"), ("a", "A"), ("Q", "q"), ("b", "B")]),
])
def test_align_pairs_keys_then_loose_keys_in_order(a, b, want):
  """Exact keys are the characters; the loose key is the character's lower case (as a context's kind)."""
  got = list(compare.align(list(a), list(b), list(a), list(b), str.lower))
  assert got == want


def test_align_is_a_valid_alignment_of_random_sequences():
  rng = random.Random(31)
  for _ in range(300):
    a = [rng.choice("aAbBcC") for _ in range(rng.randrange(12))]
    b = [rng.choice("aAbBcC") for _ in range(rng.randrange(12))]
    work = compare.Work()
    pairs = list(compare.align(a, b, a, b, str.lower, work))
    _check_alignment(a, b, pairs, str.lower)
    assert work.steps <= 8 * (len(a) + len(b)) + 8
    # one item inserted into a sequence: every other item pairs with itself and the new one stands alone
    c = list(a)
    c.insert(rng.randrange(len(a) + 1), "x")
    got = list(compare.align(a, c, a, c, str.lower))
    assert got.count((None, "x")) == 1 and all(x == y for x, y in got if y != "x")
