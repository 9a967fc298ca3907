"""Step replay against the real rewriter: the graph at every step equals graph_rewrite stopped after k matches."""
import random

import pytest
from support.server_helpers import (
  canon_ids,
  canon_uop,
  fresh_canon,
  limited,
  longest_rewrite,
  mini,
  rand_expr,
  write_rewrites,
)

from compiler import Ops, PatternMatcher, RewriteLoopError, UOp, UPat, graph_rewrite
from compiler.trace import recorder
from compiler.uop import toposort
from viz_server.replay import FRESH_BASE, Replay
from viz_server.store import TraceStore


def _load(path):
  st = TraceStore()
  (tr,) = st.add_path(path)
  return tr


def _graph_ids(rp: Replay, k: int) -> set[int]:
  seen, stack = set(), [rp.root(k)]
  while stack:
    x = stack.pop()
    if x not in seen:
      seen.add(x)
      stack.extend(rp.node(x)[3])
  return seen


def _oracle_artifact(rp: Replay, k: int) -> bool:
  """Top-down, match k returned a node an earlier match (not of this chain) replaced: the stopped rewriter then
  treats that node as final for users it visits later, which replay does not reproduce (docs: Replay semantics)."""
  rw = rp.rw
  if rw.bottom_up:
    return False
  rp.members(k - 1)  # cursor at k-1: R holds the first k-1 matches
  return rw.after[k - 1] in rp._R and rw.after[k - 1] != rp._key_of(k)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_step_equals_rewrite_stopped_after_k_matches(tmp_path, seed):
  rng = random.Random(seed)
  exprs = [rand_expr(rng, rng.randint(5, 60)) for _ in range(40)]
  results = write_rewrites(tmp_path / "t.vztrace", exprs)
  tr = _load(tmp_path / "t.vztrace")
  checked = artifacts = 0
  for rid, rw in tr.rewrites.items():
    rp = Replay(tr, rw)
    table: dict = {}
    assert canon_ids(rp.root(0), rp.node, table) == canon_uop(exprs[rid], table)
    for k in range(1, rw.matches + 1):
      oracle = graph_rewrite(exprs[rid], limited(mini, k), bottom_up=rw.bottom_up)
      if _oracle_artifact(rp, k):
        # the graphs differ elsewhere, but where the match happened both hold the match's result as it is
        assert canon_ids(rp.step(k).by, rp.node, table) in {canon_uop(u, table) for u in toposort(oracle)}
        artifacts += 1
        continue
      assert canon_ids(rp.root(k), rp.node, table) == canon_uop(oracle, table), (rid, k)
      checked += 1
    # the last step is the rewrite's result, under the id the trace gives it
    assert rp.root(rw.matches) == rw.end_root
    assert canon_ids(rw.end_root, tr.nodes.get, table) == canon_uop(results[rid], table)
  assert checked > 150 and artifacts <= checked // 20


def test_steps_in_any_order_give_the_same_graphs_and_consistent_change_sets(tmp_path):
  rng = random.Random(7)
  exprs = [rand_expr(rng, 60) for _ in range(6)]
  write_rewrites(tmp_path / "t.vztrace", exprs)
  tr = _load(tmp_path / "t.vztrace")
  rw = longest_rewrite(tr)
  assert rw.matches >= 8
  forward = Replay(tr, rw)
  graphs = [forward.members(k) for k in range(rw.matches + 1)]
  for k in range(rw.matches + 1):
    assert graphs[k] == _graph_ids(forward, k)
  jumpy = Replay(tr, rw)
  order = list(range(rw.matches + 1))
  random.Random(1).shuffle(order)
  table: dict = {}
  cf, cj = fresh_canon(forward, table), fresh_canon(jumpy, table)
  for k in order + order[::-1]:  # the same graphs up to the numbering of fresh ids (it follows the order asked in)
    assert set(map(cj, jumpy.members(k))) == set(map(cf, graphs[k]))
  for k in range(1, rw.matches + 1):
    info = forward.step(k)
    assert set(info.removed) == graphs[k - 1] - graphs[k]
    assert set(info.added) | set(info.changed) == graphs[k] - graphs[k - 1]
    assert not set(info.added) & set(info.changed)
    for old, new in info.pairs:
      assert old in graphs[k - 1] and new in graphs[k]
    if info.note is None:
      assert info.replaced in graphs[k - 1] and info.by in graphs[k]


def test_rebuilt_parents_get_the_ids_the_trace_gives_them_later(tmp_path):
  # x+0 under two parents: after the first match the parents are rebuilt; bottom-up, the trace names them when a
  # later rule fires on them, and replay must have used those ids (or the later match could not be found)
  x = UOp.variable("x", 0, 10)
  expr = UOp.sink(((x + 0) * 1) + 3, ((x + 0) * 1) * 2)
  write_rewrites(tmp_path / "t.vztrace", [expr, expr])
  tr = _load(tmp_path / "t.vztrace")
  rw = tr.rewrites[1]  # bottom-up
  rp = Replay(tr, rw)
  for k in range(1, rw.matches + 1):
    assert rp.step(k).note is None, rp.step(k).note
    assert rw.before[k - 1] in rp.members(k - 1)  # bottom-up matches name nodes of the current graph
  assert rp.root(rw.matches) == rw.end_root
  assert all(n < FRESH_BASE for n in rp.members(rw.matches))


def test_a_raising_rule_and_unknown_nodes_are_steps_that_change_nothing(tmp_path):
  def boom(x):
    raise ValueError("rule failed")
  pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), lambda x: x),
                       (UPat(Ops.MUL, src=[UPat.var("x"), UPat.const(None, 1)]), boom)], name="boom")
  x = UOp.variable("x", 0, 10)
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  try:
    with pytest.raises(ValueError):
      graph_rewrite((x + 0) * 1, pm, name="raises", bottom_up=True)
  finally:
    recorder.disable()
  tr = _load(path)
  (rw,) = tr.rewrites.values()
  assert rw.error and rw.merr
  rp = Replay(tr, rw)
  last = rw.matches
  assert rp.step(last).note and "raised" in rp.step(last).note
  assert rp.members(last) == rp.members(last - 1)
  # a hostile match naming a node the trace never defined
  rw.before.append(10 ** 6)
  rw.after.append(0)
  rw.pat.append(0)
  rw.mdt.append(0.0)
  assert "does not define" in Replay(tr, rw).step(last + 1).note


def test_after_containing_before_does_not_loop(tmp_path):
  # a rule whose result contains the node it replaces (the rewriter raises, the match is recorded first)
  x = UOp.variable("x", 0, 10)
  pm = PatternMatcher([(UPat(Ops.CAST, name="c"), lambda c: UOp(Ops.NEG, c.dtype, (c,)))], name="grow")
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  try:
    with pytest.raises(RewriteLoopError):
      graph_rewrite(UOp.sink(UOp(Ops.CAST, x.dtype, (x,))), pm, name="grow")
  finally:
    recorder.disable()
  tr = _load(path)
  (rw,) = tr.rewrites.values()
  assert rw.matches >= 1
  rp = Replay(tr, rw)
  g = rp.members(rw.matches)
  ops = {rp.node(n)[0] for n in g}
  assert {"NEG", "CAST"} <= ops  # the replacement holds the replaced node, which stays as it is inside it


def test_a_step_looks_up_the_trace_only_for_rebuilt_nodes_over_its_nodes(tmp_path):
  # a step rebuilds every user of what it replaced (a GPT step's `add bufferize`: ~2,000 a step); a rebuilt node over
  # a node replay made (a fresh id) is not one the trace has, so only those over the trace's nodes alone are looked up
  vs = [UOp.variable(f"v{i}", 0, 10) for i in range(12)]
  e = vs[0] * 1
  for i, v in enumerate(vs[1:]):
    e = (e + v * 1) * 2 if i % 3 else e + v * 1
    for _ in range(4):  # (no rule fires on these: a tall chain of users over each `* 1`)
      e = e + vs[0]
  write_rewrites(tmp_path / "t.vztrace", [e])
  tr = _load(tmp_path / "t.vztrace")
  rw = tr.rewrites[0]
  rp = Replay(tr, rw)
  calls = []
  find_like, find = tr.nodes.find_like, tr.nodes.find
  tr.nodes.find_like = lambda *a: calls.append(a[1]) or find_like(*a)  # (the sources looked up)
  tr.nodes.find = lambda *a: calls.append(a[3]) or find(*a)
  rebuilt = sum(len(rp.step(k).changed) for k in range(1, rw.matches + 1))
  assert rw.matches >= 12 and rebuilt >= 20 * rw.matches  # each step rebuilt the chain above its match
  assert len(calls) <= rebuilt // 4, (len(calls), rebuilt)  # (each rebuilt node looked up: calls == rebuilt + 1)
  assert all(max(src, default=0) < FRESH_BASE for src in calls)
  assert rp.root(rw.matches) == rw.end_root  # and the last step is still the trace's result, by its ids


def _random_replay(tmp_path, seed: int):
  """(trace, its longest rewrite, a Replay of it) over six random 60-node expressions."""
  rng = random.Random(seed)
  write_rewrites(tmp_path / "t.vztrace", [rand_expr(rng, 60) for _ in range(6)])
  tr = _load(tmp_path / "t.vztrace")
  rw = longest_rewrite(tr)
  return tr, rw, Replay(tr, rw)


def test_created_and_creator_name_the_step_that_last_added_each_node(tmp_path):
  # creator(k) is what a delta asks for each of a step's ~2,000 rebuilt nodes; both must agree with the graphs
  tr, rw, rp = _random_replay(tmp_path, 11)
  far = Replay(tr, rw)  # reaches the last step directly: only that step's births are known
  info, at_end = far.step(rw.matches), far.creator(rw.matches)
  assert all(at_end(n) == rw.matches for n in info.added) and at_end(far.root(rw.matches)) in (None, rw.matches)
  assert {at_end(n) for n in far.members(rw.matches)} - {rw.matches} == {None}  # the others: unknown, never wrong
  graphs = [rp.members(k) for k in range(rw.matches + 1)]
  rp.ensure(rw.matches)  # (members moves the cursor only; a step's births are noted when it is computed)
  every = frozenset().union(*graphs)  # (nodes added later too: not created yet at k)
  last: dict[int, int] = {}  # node -> the step that last added it, up to k
  readded = 0
  for k in range(rw.matches + 1):
    for n in graphs[k]:
      if k and n not in graphs[k - 1]:
        readded += n in last
        last[n] = k
    at = rp.creator(k)
    one, many = rp.creators(k)  # (many: a delta's ~2,000 rebuilt nodes in one loop)
    nodes = sorted(every)
    assert many(nodes) == [one(n) for n in nodes] == [at(n) for n in nodes]
    for n in every:
      assert rp.created(n, k) == at(n) == last.get(n, 0), (n, k)
  assert last and readded, "no node was added, or none added again (the case kept as a list of steps)"


def test_a_step_keeps_its_pairs_as_two_columns_and_many_sources_at_once(tmp_path):
  # a step of a GPT step's `add bufferize` pairs ~2,000 rebuilt nodes with their old ones: a tuple a pair lived as long
  # as the replay (~130 MB over its 874 steps) and each young collection walked them; srcs() is src() of many ids
  _, rw, rp = _random_replay(tmp_path, 5)
  paired = 0
  for k in range(1, rw.matches + 1):
    info = rp.step(k)
    assert info.pairs == tuple(zip(info.olds, info.news)) and len(info.olds) == len(info.news)
    paired += len(info.olds)
    kept = [getattr(info, slot) for slot in type(info).__slots__]
    inner = [x for col in kept if isinstance(col, tuple) for x in col]
    assert not any(isinstance(x, tuple) for x in inner)  # (columns of ids: no object a pair)
    ids = [*rp.members(k), *info.removed]
    assert rp.srcs(ids) == [rp.src(n) for n in ids]
  assert paired
