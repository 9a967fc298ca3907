"""PatternMatcher.rules_for, the rules graph_rewrite tries on a node: every rule that matches the node is among them,
in the matcher's order (the node's dtype and its first source's op only ever rule out patterns that cannot match)."""
from __future__ import annotations

import itertools

import pytest

from compiler.dtype import dtypes
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.uop import Ops, UOp

c1, c2 = UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2)
r = UOp.range(4, 0)
f1 = UOp.const(dtypes.float32, 1.0)
f2 = UOp(Ops.VECTORIZE, dtypes.float32.vec(2), (f1, f1))
LEAVES = [c1, c2, r, -r]
# nodes of every op here over every pair (and single, and no) sources: first sources of each op, and none
NODES = [*LEAVES, UOp(Ops.SINK, dtypes.void, ()), *(UOp(Ops.SINK, dtypes.void, (a,)) for a in LEAVES),
         *(UOp(op, dtypes.int32, (a, b)) for op in (Ops.ADD, Ops.MUL) for a, b in itertools.product(LEAVES, repeat=2)),
         *(UOp(Ops.SINK, dtypes.void, (a, b, c1)) for a, b in itertools.product(LEAVES, repeat=2)),
         # float nodes, scalar and vector, beside the int ones: the root's dtype rules patterns out too
         f1, UOp(Ops.ADD, dtypes.float32, (f1, f1)), UOp(Ops.ADD, dtypes.float32.vec(2), (f2,) * 2)]

PATTERNS = [
  UPat(Ops.ADD, src=(UPat(Ops.CONST), UPat())),                          # ordered
  UPat(Ops.ADD, src=[UPat(Ops.CONST), UPat(Ops.RANGE)]),                 # permutations: either source may be first
  UPat(Ops.ADD, src=(UPat.any(UPat(Ops.NEG), UPat(Ops.RANGE)), UPat())),  # an any: the union of its ops
  UPat(Ops.ADD, src=(UPat.any(UPat(Ops.NEG), UPat()), UPat())),           # an any with a wildcard: every op
  UPat(None, src=(UPat(Ops.CONST), UPat())),                             # a wildcard op
  UPat(None),                                                            # a wildcard with no sources
  UPat(Ops.SINK, src=UPat(Ops.CONST)),                                   # repeated: an empty SINK matches
  UPat(Ops.SINK, src=(UPat(Ops.RANGE),), allow_any_len=True),            # a prefix of the sources
  UPat(Ops.SINK, src=()),                                                # no sources at all
  UPat(Ops.MUL, src=(UPat(Ops.NEG, src=(UPat(Ops.RANGE),)), UPat.var("y"))),
  UPat(Ops.MUL, src=(UPat.var("x"), UPat.var("x"))),                     # the same node twice
  UPat(Ops.ADD, dtype=dtypes.ints, src=[UPat.var("x"), UPat(Ops.CONST)]),  # int roots only
  UPat(Ops.ADD, dtype=dtypes.float32),                                   # float roots, a vector's by its scalar
  UPat((Ops.ADD, Ops.CONST), dtype=(dtypes.float32, dtypes.int32)),
]


def _pm() -> PatternMatcher:
  return PatternMatcher([(p, lambda **kw: None) for p in PATTERNS], name="dispatch test")


@pytest.mark.parametrize("node", NODES, ids=lambda u: f"{u.op.name}{[s.op.name for s in u.src]}")
def test_every_matching_rule_is_tried_in_order(node):
  pm = _pm()
  matching = [rule for rule in pm.rules if next(rule.pat.match(node, {}), None) is not None]
  tried = pm.rules_for(node)
  assert [rule for rule in tried if rule in matching] == matching
  assert list(tried) == sorted(tried, key=pm.rules.index)


def test_rules_that_cannot_match_are_left_out():
  pm = _pm()
  add_c = UOp(Ops.ADD, dtypes.int32, (c1, r))
  add_r = UOp(Ops.ADD, dtypes.int32, (r, c1))
  names = {rule.index for rule in pm.rules_for(add_c)}
  assert 2 not in names and {0, 1, 3, 4, 5} <= names  # NEG-or-RANGE first: not for a CONST first
  assert 0 not in {rule.index for rule in pm.rules_for(add_r)}
  # one pattern for every source (SINK of CONSTs, rule 6): not for a first source of another op, an empty SINK kept
  assert 6 not in {rule.index for rule in pm.rules_for(UOp(Ops.SINK, dtypes.void, (r, c1)))}
  assert 6 in {rule.index for rule in pm.rules_for(UOp(Ops.SINK, dtypes.void, (c1, r)))}
  assert 6 in {rule.index for rule in pm.rules_for(UOp(Ops.SINK, dtypes.void, ()))}


def test_a_root_dtype_leaves_its_rule_out_of_other_dtypes_nodes():
  pm = _pm()
  int_add, float_add = UOp(Ops.ADD, dtypes.int32, (r, c1)), UOp(Ops.ADD, dtypes.float32, (f1, f1))
  assert {11, 13} <= {rule.index for rule in pm.rules_for(int_add)} and 12 not in {
    rule.index for rule in pm.rules_for(int_add)}
  assert {12, 13} <= {rule.index for rule in pm.rules_for(float_add)} and 11 not in {
    rule.index for rule in pm.rules_for(float_add)}


def test_graph_rewrite_picks_the_first_rule_that_returns_a_node():
  # rules on one root op told apart by their first source's op, as the gradient markers; the first matching rule
  # in order wins also where a later, more specific one would match too
  pm = PatternMatcher([
    (UPat(Ops.ADD, src=(UPat(Ops.RANGE), UPat.cvar("c"))), lambda c: c),
    (UPat(Ops.ADD, src=(UPat(Ops.CONST, name="c"), UPat())), lambda c: UOp.const(c.dtype, c.arg + 10)),
    (UPat(Ops.ADD, src=(UPat(), UPat()), name="x"), lambda x: x.src[1]),
  ], name="first wins")
  assert graph_rewrite(UOp(Ops.ADD, dtypes.int32, (r, c2)), pm) is c2
  assert graph_rewrite(UOp(Ops.ADD, dtypes.int32, (c1, r)), pm).arg == 11
  assert graph_rewrite(UOp(Ops.ADD, dtypes.int32, (-r, r)), pm) is r


def test_a_node_test_is_asked_once_a_node_and_decides_as_matching_does():
  # a pattern of an op and a test of the node (the expander's "has an UNROLL source"): graph_rewrite asks the test
  # directly, once for each node it tries, and rewrites where UPat.match would (PatternMatcher.rewrite matches)
  asked: list[UOp] = []

  def neg_src(u: UOp) -> bool:
    asked.append(u)
    return any(s.op is Ops.NEG for s in u.src)
  pm = PatternMatcher([(UPat(Ops.ADD, custom=neg_src, name="x"), lambda x: x.src[0] * x.src[1])], name="node test")
  root = UOp(Ops.SINK, dtypes.void, (r + c1, -r + c2, c1 + (-r)))
  out = graph_rewrite(root, pm)
  assert [s.op for s in out.src] == [Ops.ADD, Ops.MUL, Ops.MUL]
  assert len(asked) == len(set(asked)) == 3  # each sum once (the products are no ADD: not asked)
  for u in (r + c1, -r + c2):
    got = pm.rewrite(u)
    assert graph_rewrite(u, pm) is (u if got is None else got)


@pytest.mark.parametrize("bottom_up", [False, True])
def test_a_node_without_rules_is_not_tried(monkeypatch, bottom_up):
  # graph_rewrite looks the rules up itself and asks _apply only of nodes that have some (most nodes of most passes
  # have none: a pass on one op walks every other node): the same result, a call only where a rule may match
  from compiler import rewrite
  tried: list[UOp] = []
  inner = rewrite._Rewriter._apply

  def spy(self, u, *args):
    tried.append(u)
    return inner(self, u, *args)
  monkeypatch.setattr(rewrite._Rewriter, "_apply", spy)
  pm = PatternMatcher([(UPat(Ops.MUL, name="x"), lambda x: x.src[0] + x.src[1])], name="mul to add")
  root = UOp(Ops.SINK, dtypes.void, ((r + c1) * c2, -r + c2))
  out = graph_rewrite(root, pm, bottom_up=bottom_up)
  assert out is UOp(Ops.SINK, dtypes.void, ((r + c1) + c2, -r + c2))
  # the product (top-down, its chain's next step too: the sum it became, asked in _fixed_point's loop)
  assert [u.op for u in tried] == ([Ops.MUL] if bottom_up else [Ops.MUL, Ops.ADD])
