"""Pattern matching and graph_rewrite: UPat features, PatternMatcher order and composition, rewrite directions,
fixed points, deep graphs, and the errors for rewrites that don't converge."""
import pytest

from compiler.dtype import dtypes
from compiler.rewrite import PatternMatcher, RewriteLoopError, UPat, graph_rewrite
from compiler.uop import GroupOp, Ops, UOp

x = UOp.variable("x", 0, 10)
y = UOp.variable("y", 0, 10)
i32 = dtypes.int32


def c(v, dt=i32) -> UOp:
  return UOp.const(dt, v)


def matches(pat: UPat, u: UOp) -> list[dict]:
  return list(pat.match(u, {}))


# ---- UPat

def test_op_sets_and_wildcard():
  p = UPat({Ops.ADD, Ops.MUL})
  assert matches(p, x + 1) and matches(p, x * 2) and not matches(p, x - 1)
  assert matches(UPat(GroupOp.Binary), x // 2) and not matches(UPat(GroupOp.Binary), -x)
  assert matches(UPat(), x) and matches(UPat(), c(1))


def test_dtype_constraints():
  f = x.cast(dtypes.float32)
  assert matches(UPat(dtype=dtypes.float32), f) and not matches(UPat(dtype=dtypes.float32), x)
  assert matches(UPat(dtype=(dtypes.int8, i32)), x)
  vec = UOp(Ops.VECTORIZE, dtypes.float32.vec(2), (f, f))
  assert matches(UPat(dtype=dtypes.float32), vec)  # a vector matches its scalar type
  assert not matches(UPat(Ops.CONST, dtype=dtypes.bool), c(1))


def test_named_captures_and_same_name_binds_same_node():
  p = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b")), name="root")
  (caps,) = matches(p, x + y)
  assert caps == {"a": x, "b": y, "root": x + y}
  same = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
  assert matches(same, x + x) == [{"a": x}]
  assert matches(same, x + y) == []


def test_tuple_src_is_ordered_and_list_src_tries_permutations():
  ordered = UPat(Ops.ADD, src=(UPat.var("v", dtype=i32).named("v"), UPat.cvar("k")))
  assert matches(ordered, x + 1) == [{"v": x, "k": c(1)}]
  assert matches(ordered, 1 + x) == []
  perm = UPat(Ops.ADD, src=[UPat.var("v"), UPat.cvar("k")])
  assert matches(perm, 1 + x) == [{"v": x, "k": c(1)}]
  anyorder = UPat(Ops.ADD, src=[UPat.var("a"), UPat.var("b")])
  assert matches(anyorder, x + y) == [{"a": x, "b": y}, {"a": y, "b": x}]  # both assignments, in source order first
  assert len(matches(anyorder, x + x)) == 1  # identical permutations are tried once
  assert matches(UPat(Ops.ADD, src=(UPat(),)), x + y) == []  # length must match


def test_upat_as_src_repeats_for_every_source():
  p = UPat(Ops.SINK, src=UPat(Ops.CONST, name="k"))
  assert matches(p, UOp.sink(c(1), c(1)))
  assert not matches(p, UOp.sink(c(1), c(2)))  # "k" twice: the same node both times
  assert matches(UPat(Ops.SINK, src=UPat(Ops.CONST)), UOp.sink(c(1), c(2)))
  assert not matches(UPat(Ops.SINK, src=UPat(Ops.CONST)), UOp.sink(c(1), x))
  wide = UOp.sink(*[c(i) for i in range(5000)])  # backtracking over many sources must not recurse per source
  assert len(matches(UPat(Ops.SINK, src=UPat(Ops.CONST)), wide)) == 1


def test_allow_any_len():
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0)
  idx3 = buf.index(x, x < 5)
  two = UPat(Ops.INDEX, src=(UPat(), UPat.var("i")))
  assert matches(two, idx3) == []
  assert matches(UPat(Ops.INDEX, src=(UPat(), UPat.var("i")), allow_any_len=True), idx3) == [{"i": x}]
  assert matches(UPat.var("b").index(UPat.var("i")), buf.index(x)) == [{"b": buf, "i": x}]


def test_arg_matching_and_constructors():
  assert matches(UPat(Ops.CONST, arg=3), c(3)) and not matches(UPat(Ops.CONST, arg=3), c(4))
  assert matches(UPat.const(i32, 0), c(0)) and not matches(UPat.const(dtypes.bool, 0), c(0))
  assert matches(UPat.cvar("k"), c(7)) == [{"k": c(7)}] and not matches(UPat.cvar("k"), x)
  assert matches(UPat.cvar("k", dtypes.float32), c(1.0, dtypes.float32))
  assert matches(UPat.var("v"), x) == [{"v": x}]
  assert matches(UPat(Ops.DEFINE_VAR, arg=("x", 0, 10)), x)
  assert matches(UPat(custom=lambda u: u.op is Ops.CONST and u.arg > 5), c(6))


def test_chainable_helpers():
  p = UPat.var("v") + UPat.cvar("k")
  assert matches(p, x + 3) == [{"v": x, "k": c(3)}] and matches(p, 3 + x) == [{"v": x, "k": c(3)}]
  assert matches(UPat.var("v") * 2, x * 2) and not matches(UPat.var("v") * 2, x * 3)
  div = UPat.var("v") // UPat.cvar("k")
  assert matches(div, x // 4) and not matches(div, 4 // x)  # not commutative: ordered
  assert matches(UPat.var("a") < UPat.var("b"), x < y) == [{"a": x, "b": y}]
  assert matches(UPat.var("v").cast(dtypes.float32, name="cst"), x.cast(dtypes.float32))
  assert matches(UPat.var("v").named("w"), x) == [{"w": x}]
  assert matches(UPat.var("v").maximum(UPat.var("v")), x.maximum(x))


def test_upat_any_and_named_any():
  p = UPat.any(UPat(Ops.ADD, name="s"), UPat(Ops.MUL, name="s"))
  assert matches(p, x + 1) == [{"s": x + 1}] and matches(p, x * 2) and not matches(p, x - 1)
  named = UPat.any(UPat(Ops.ADD), UPat(Ops.MUL)).named("n")
  assert matches(named, x * 2) == [{"n": x * 2}]
  assert "UPat.any" in repr(p)


def test_repr_shows_the_pattern():
  r = repr(UPat.var("v") + UPat.cvar("k"))
  assert "Ops.ADD" in r and "name='v'" in r and "src=[" in r


# ---- PatternMatcher

def _const_rule(v):
  def rule(**captures):
    return c(v)
  rule.__name__ = f"to_{v}"
  return rule


def test_pattern_matcher_indexes_by_op_and_keeps_order():
  pm = PatternMatcher([(UPat(Ops.ADD), _const_rule(1)), (UPat(Ops.MUL), _const_rule(2)),
                       (UPat(Ops.ADD, name="u"), _const_rule(3))])
  assert [r.fn_name for r in pm.pdict[Ops.ADD]] == ["to_1", "to_3"]
  assert pm.rewrite(x + 1) is c(1) and pm.rewrite(x * 2) is c(2) and pm.rewrite(x - 1) is None


def test_wildcard_rules_interleave_in_order():
  pm = PatternMatcher([(UPat(Ops.MUL, name="u"), lambda u: None), (UPat(name="u"), _const_rule(9)),
                       (UPat(Ops.ADD, name="u"), _const_rule(1))])
  assert pm.rewrite(x + 1) is c(9)  # the wildcard comes first
  assert pm.rewrite(x - 1) is c(9)  # no op-specific rule: only wildcards


def test_composition_keeps_order():
  a = PatternMatcher([(UPat(Ops.ADD), _const_rule(1))])
  b = PatternMatcher([(UPat(Ops.ADD), _const_rule(2)), (UPat(Ops.MUL), _const_rule(3))])
  assert (a + b).rewrite(x + 1) is c(1) and (b + a).rewrite(x + 1) is c(2)
  assert (a + b).rewrite(x * 1) is c(3)
  assert [r.fn_name for r in (a + b).rules] == ["to_1", "to_2", "to_3"]


def test_rules_with_and_without_ctx_and_none_means_no_match():
  seen = []

  def skip(u):
    seen.append(u)
    return None

  def with_ctx(ctx, u):
    return c(ctx["value"])

  pm = PatternMatcher([(UPat(Ops.ADD, name="u"), skip), (UPat(Ops.ADD, name="u"), with_ctx)])
  assert graph_rewrite(x + 1, pm, ctx={"value": 5}) is c(5)
  assert seen == [x + 1]  # the first rule ran, said no, and the next was tried
  same = PatternMatcher([(UPat(Ops.ADD, name="u"), lambda u: u)])
  assert graph_rewrite(x + 1, same) is x + 1  # returning the node itself is no match either


def test_rule_returning_non_uop_is_a_clear_error():
  def bad(u):
    return 3

  with pytest.raises(TypeError, match=r"bad.*'mypass'.*int"):
    graph_rewrite(x + 1, PatternMatcher([(UPat(Ops.ADD, name="u"), bad)]), name="mypass")


# ---- graph_rewrite

def test_top_down_vs_bottom_up():
  # the ADD rule sees `x + 1` only if it runs before the CONST rule turns the 1 into a 2
  def one_to_two(k):
    return c(2) if k.arg == 1 else None

  def add_one(v):
    return v * 10

  pm = PatternMatcher([(UPat(Ops.CONST, name="k"), one_to_two), (UPat.var("v") + UPat.const(None, 1), add_one)])
  assert graph_rewrite(x + 1, pm) is x * 10  # top-down: the parent first
  assert graph_rewrite(x + 1, pm, bottom_up=True) is x + 2  # bottom-up: sources first


def test_visit_order():
  order = []

  def log(ctx, u):
    ctx.append(u)
    return None

  e = (x + y) * 2
  graph_rewrite(e, PatternMatcher([(UPat(name="u"), log)]), ctx=order)
  assert order[0] is e
  order2 = []
  graph_rewrite(e, PatternMatcher([(UPat(name="u"), log)]), ctx=order2, bottom_up=True)
  assert order2[-1] is e and order2.index(x) < order2.index(x + y)
  assert set(order) == set(order2) == {x, y, c(2), x + y, e}


@pytest.mark.parametrize("bottom_up", [False, True])
def test_fixed_point(bottom_up):
  def dec(k):
    return c(k.arg - 1) if k.arg > 0 else None

  def drop_zero(v):
    return v

  def mul_zero(v):
    return c(0)

  pm = PatternMatcher([(UPat(Ops.CONST, name="k"), dec), (UPat.var("v") + UPat.const(None, 0), drop_zero),
                       (UPat.var("v") * UPat.const(None, 0), mul_zero)])
  # 5 -> 4 -> ... -> 0 at one node; then x*0 -> 0 makes the parent's x + 0 -> x
  assert graph_rewrite(x + y * 5, pm, bottom_up=bottom_up) is x
  assert graph_rewrite(c(7), pm, bottom_up=bottom_up) is c(0)


def x_to_y(v):
  return y


def plus_two(v):
  return v + 2


@pytest.fixture(scope="module")
def chain100k():
  e = x
  for _ in range(100_000):
    e = e + 1
  return e


@pytest.mark.parametrize("bottom_up", [False, True])
def test_deep_chain_is_iterative(chain100k, bottom_up):
  pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), x_to_y)])
  out = graph_rewrite(chain100k, pm, bottom_up=bottom_up)  # the leaf changes: all 100k parents are rebuilt
  assert out.src[1] is c(1) and out is not chain100k
  n, depth = out, 0
  while n.op is Ops.ADD:
    n, depth = n.src[0], depth + 1
  assert n is y and depth == 100_000
  if not bottom_up:
    assert graph_rewrite(out, pm) is out  # already a fixed point
    assert graph_rewrite(chain100k, PatternMatcher([])) is chain100k


@pytest.mark.parametrize("bottom_up", [False, True])
def test_deep_chain_every_node_matches(bottom_up):
  e = x
  for _ in range(20_000):
    e = e + 1
  out = graph_rewrite(e, PatternMatcher([(UPat.var("v") + UPat.const(None, 1), plus_two)]), bottom_up=bottom_up)
  n, depth = out, 0
  while n.op is Ops.ADD:
    assert n.src[1] is c(2)
    n, depth = n.src[0], depth + 1
  assert n is x and depth == 20_000


def test_shared_nodes_rewrite_once():
  calls = []

  def count(v):
    calls.append(v)
    return v * 3

  s = x + 1
  e = UOp.sink(s * s, s - s)
  out = graph_rewrite(e, PatternMatcher([(UPat.var("v") + UPat.const(None, 1), count)]))
  assert calls == [x] and out is UOp.sink((x * 3) * (x * 3), (x * 3) - (x * 3))


# ---- loops

def swap_ab(k):
  return c(k.arg ^ 1)


def test_loop_between_rules_names_pass_and_rules():
  with pytest.raises(RewriteLoopError, match=r"'flipflop'.*swap_ab"):
    graph_rewrite(c(0), PatternMatcher([(UPat(Ops.CONST, name="k"), swap_ab)]), name="flipflop")


def grow(v):
  return v + 0


def test_growing_rewrite_names_pass_and_rule():
  pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), grow)])
  with pytest.raises(RewriteLoopError, match=r"'grower'.*grow"):
    graph_rewrite(x * 2, pm, name="grower")


def count_up(k):
  return c(k.arg + 1)


def test_endless_rewrite_names_pass_and_rule():
  with pytest.raises(RewriteLoopError, match=r"'counter'.*count_up"):
    graph_rewrite(c(0), PatternMatcher([(UPat(Ops.CONST, name="k"), count_up)]), name="counter")


def wrap_neg(v, k):
  return UOp(Ops.ADD, v.dtype, (v, -k))


def neg_const(k):
  return c(k.arg + 1)


@pytest.mark.parametrize("bottom_up", [False, True])
def test_loop_through_rebuilt_parents_names_a_rule(bottom_up):
  # each rule alone converges; together the parent is rebuilt forever with new constants
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("v"), UPat.cvar("k"))), wrap_neg),
                       (UPat(Ops.NEG, src=(UPat.cvar("k"),)), neg_const)])
  with pytest.raises(RewriteLoopError, match=r"'rebuild'.*(neg_const|wrap_neg)"):
    graph_rewrite(x + 0, pm, name="rebuild", bottom_up=bottom_up)
