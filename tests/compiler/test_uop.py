"""The IR: dtypes, hash-consed immutable UOps, graph walks, bounds (vmin/vmax), printing."""
import gc
import itertools
import math
import pickle

import pytest

from compiler.dtype import DType, PtrDType, dtypes, least_upper_dtype, truncate
from compiler.uop import AxisType, Ops, UOp, exec_alu, pretty, substitute, toposort

x = UOp.variable("x", 0, 10)
y = UOp.variable("y", -3, 4)
i32 = dtypes.int32


# ---- dtypes

def test_scalar_dtypes():
  assert dtypes.int32.itemsize == 4 and dtypes.float16.itemsize == 2 and dtypes.bool.itemsize == 1
  assert dtypes.is_int(dtypes.uint8) and not dtypes.is_int(dtypes.bool) and not dtypes.is_int(dtypes.float32)
  assert dtypes.is_float(dtypes.float64) and dtypes.is_unsigned(dtypes.uint64) and not dtypes.is_unsigned(i32)
  assert (dtypes.min(dtypes.int8), dtypes.max(dtypes.int8)) == (-128, 127)
  assert (dtypes.min(dtypes.uint16), dtypes.max(dtypes.uint16)) == (0, 65535)
  assert dtypes.max(dtypes.float32) == math.inf
  assert dtypes.by_name("float16") is dtypes.half and dtypes.index == i32
  assert dtypes.from_py(1) == i32 and dtypes.from_py(1.0) == dtypes.float32 and dtypes.from_py(True) == dtypes.bool
  assert dtypes.from_np("int16") == dtypes.int16
  with pytest.raises(ValueError):
    dtypes.by_name("int3")
  with pytest.raises(TypeError):
    dtypes.from_py("a")


def test_vector_dtypes():
  v = dtypes.float32.vec(4)
  assert v.count == 4 and v.itemsize == 16 and v.scalar() == dtypes.float32
  assert str(v) == "float32x4" and repr(v) == "dtypes.float32.vec(4)"
  assert dtypes.float32.vec(1) == dtypes.float32
  assert v == dtypes.float32.vec(4) and v != dtypes.float32.vec(2)
  assert dtypes.is_float(v) and v.np == dtypes.float32.np
  with pytest.raises(ValueError):
    v.vec(2)


def test_pointer_dtypes():
  p = dtypes.float32.ptr(16)
  assert isinstance(p, PtrDType) and isinstance(p, DType)
  assert p.base == dtypes.float32 and p.size == 16 and dtypes.float32.ptr().size == -1
  assert str(p) == "float32*" and repr(p) == "dtypes.float32.ptr(16)"
  assert p != dtypes.float32 and p == dtypes.float32.ptr(16) and p != dtypes.float32.ptr(8)
  with pytest.raises(ValueError):
    p.vec(2)


@pytest.mark.parametrize("ts, want", [
  ((dtypes.int8, dtypes.uint8), dtypes.int16),
  ((dtypes.int32, dtypes.uint32), dtypes.int64),
  ((dtypes.uint64, dtypes.int8), dtypes.float64),
  ((dtypes.int32, dtypes.float16), dtypes.float16),
  ((dtypes.float16, dtypes.float32), dtypes.float32),
  ((dtypes.bool, dtypes.int8), dtypes.int8),
  ((dtypes.bool, dtypes.bool), dtypes.bool),
  ((dtypes.uint8, dtypes.uint16), dtypes.uint16),
  ((dtypes.int64, dtypes.uint8), dtypes.int64),
  ((dtypes.float32.vec(4), dtypes.int32), dtypes.float32),
])
def test_least_upper_dtype(ts, want):
  assert least_upper_dtype(*ts) == want
  assert least_upper_dtype(*reversed(ts)) == want


def test_promotion_holds_both_ranges():
  ints = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64]
  for a, b in itertools.product(ints, repeat=2):
    t = least_upper_dtype(a, b)
    assert dtypes.min(t) <= min(dtypes.min(a), dtypes.min(b)) and dtypes.max(t) >= max(dtypes.max(a), dtypes.max(b))


def test_truncate_wraps_like_c():
  assert truncate(dtypes.int8, 200) == -56 and truncate(dtypes.uint8, -1) == 255
  assert truncate(i32, 2**31) == -2**31 and truncate(dtypes.bool, 2) is True
  assert truncate(dtypes.float16, 65520.0) == math.inf and truncate(dtypes.float32, 0.1) != 0.1


def test_exec_alu_c_semantics():
  assert exec_alu(Ops.IDIV, i32, (-7, 2)) == -3 and exec_alu(Ops.MOD, i32, (-7, 2)) == -1
  assert exec_alu(Ops.IDIV, i32, (7, -2)) == -3 and exec_alu(Ops.MOD, i32, (7, -2)) == 1
  assert exec_alu(Ops.ADD, dtypes.int8, (127, 1)) == -128 and exec_alu(Ops.SUB, dtypes.uint8, (0, 1)) == 255
  assert exec_alu(Ops.CMPLT, dtypes.bool, (1, 2)) is True
  assert exec_alu(Ops.FDIV, dtypes.float32, (1.0, 0.0)) == math.inf


# ---- hash-consing and immutability

def test_hash_consing_gives_identity():
  assert UOp.const(i32, 3) is UOp.const(i32, 3)
  assert (x + 1) is (x + 1)
  assert UOp.variable("x", 0, 10) is x
  assert UOp.const(i32, 3) is not UOp.const(dtypes.int64, 3)
  assert (x + 1) is not (1 + x)  # structure, not value
  assert UOp.const(dtypes.float32, math.nan) is UOp.const(dtypes.float32, float("nan"))


def test_negative_zero_is_its_own_constant():
  pz, nz = UOp.const(dtypes.float32, 0.0), UOp.const(dtypes.float32, -0.0)
  assert pz is not nz and math.copysign(1, nz.arg) == -1 and math.copysign(1, pz.arg) == 1


def test_a_bool_arg_is_not_the_equal_int_arg():
  # True == 1 and they hash alike: one must not be handed out for the other (a trace would show the wrong arg)
  t = UOp(Ops.CONST, i32, (), True)
  one, zero = UOp(Ops.CONST, i32, (), 1), UOp(Ops.CONST, i32, (), 0)
  assert one is not t and type(one.arg) is int and zero is not UOp(Ops.CONST, i32, (), False)
  assert UOp(Ops.CONST, i32, (), True) is t


def test_the_hash_consing_cache_forgets_dead_nodes_and_only_those():
  from compiler.uop import _UCACHE as cache
  from compiler.uop import _forget, _KeyRef, cons_key
  # (nodes an earlier test left in a reference cycle would leave the cache when a collection runs in between: the
  # count below is of this test's nodes, freed by reference counting alone)
  gc.collect()
  gc.disable()
  try:
    before = len(cache)
    x = UOp.variable("forget_me", 0, 7)
    made = [x * i + 1 for i in range(300)]
    assert len(cache) >= before + 600
    del made
    assert len(cache) == before + 1  # reference counting alone (the key held the sources: they go too)
  finally:
    gc.enable()
  key = cons_key(x.op, x.dtype, x.src, x.arg)
  late = _KeyRef(UOp.variable("another", 0, 1))
  late.key = key
  _forget(late)  # a late callback of an equal node that died: the live node keeps its entry
  assert cache[key]() is x and UOp.variable("forget_me", 0, 7) is x


def test_unhashable_arg_is_a_clear_error():
  with pytest.raises(TypeError, match="hashable"):
    UOp(Ops.NOOP, dtypes.void, (), [1, 2])


def test_uops_are_immutable():
  u = x + 1
  for field in ("op", "dtype", "src", "arg"):
    with pytest.raises(AttributeError):
      setattr(u, field, None)
  v = u.replace(op=Ops.MUL)
  assert u.op is Ops.ADD and v.op is Ops.MUL and v is (x * 1)
  with pytest.raises(TypeError):
    u.replace(colour="red")
  with pytest.raises(TypeError):
    bool(x < 3)


def test_pickle_round_trip_keeps_identity():
  u = (x * 4 + y) // 3
  assert pickle.loads(pickle.dumps(u)) is u


def test_operators_build_alu_nodes():
  assert (x + 1).op is Ops.ADD and (2 - x).src[0] is UOp.const(i32, 2)
  assert (x < 3).dtype == dtypes.bool and (x < 3).op is Ops.CMPLT
  assert (x > 3).src == (UOp.const(i32, 3), x)
  assert x.ne(1).op is Ops.CMPNE and x.eq(1).op is Ops.CMPEQ
  assert (x <= 3).op is Ops.CMPNE  # not (3 < x)
  assert (x < 3).where(x, 0).dtype == i32
  assert x.cast(i32) is x and x.cast(dtypes.float32).op is Ops.CAST
  v = UOp.const(dtypes.float32.vec(4), 1.0)
  assert v.op is Ops.VECTORIZE and len(v.src) == 4


# ---- graph walks

def test_toposort_sources_before_users():
  a = x + y
  b = a * a
  root = b - a
  order = toposort(root)
  assert order[-1] is root and len(order) == len(set(order))
  pos = {u: i for i, u in enumerate(order)}
  for u in order:
    assert all(pos[s] < pos[u] for s in u.src)
  assert set(order) == {x, y, a, b, root}


def test_toposort_gate_and_deep_chain():
  e = x
  for _ in range(100_000):
    e = e + 1
  assert len(toposort(e)) == 100_002  # x, one shared constant 1, the chain
  assert toposort(e, gate=lambda u: u is e) == [e.src[0], e.src[1], e]


def test_toposort_of_a_sink_is_kept_and_each_caller_gets_its_own_list():
  # a kernel AST (a SINK) is walked again by many passes' helpers: its walk is kept on the node (issue 29)
  from compiler import uop
  s = UOp.sink((x + y) * 2, x - y)
  first = toposort(s)
  assert s.__dict__[uop._TOPO_KEY] == tuple(first[:-1]) and first[-1] is s  # (not itself: no reference cycle)
  kept = list(first)
  first.append(x)  # a caller changing its list changes nothing kept
  again = toposort(s)
  assert again == kept and again is not first and again is not toposort(s)
  # a gated walk is neither kept nor answered from what is kept; another op's root keeps nothing
  assert toposort(s, gate=lambda u: u is s) == [*s.src, s]
  e = (x + y) * 3
  assert toposort(e) == [x, y, x + y, e.src[1], e] and uop._TOPO_KEY not in e.__dict__


def test_substitute():
  e = (x + y) * (x + 1)
  assert substitute(e, {x: y}) is (y + y) * (y + 1)
  assert e.substitute({}) is e
  assert e.substitute({x + y: x}) is x * (x + 1)
  # not inside the values: x -> x+1 happens once
  assert e.substitute({x: x + 1}) is ((x + 1) + y) * ((x + 1) + 1)


def test_ranges_property():
  r0, r1 = UOp.range(4, 0), UOp.range(8, 1, AxisType.REDUCE)
  assert (r1 * 4 + r0).ranges == (r0, r1)


# ---- bounds

def _brute(e, envs):
  vals = []
  for env in envs:
    v = {}
    for u in toposort(e):
      v[u] = u.arg if u.op is Ops.CONST else env[u] if u.op is Ops.DEFINE_VAR else \
        exec_alu(u.op, u.dtype, tuple(v[s] for s in u.src))
    vals.append(v[e])
  return vals


@pytest.mark.parametrize("expr, lo, hi", [
  (x + y, -3, 14), (x - y, -4, 13), (x * y, -30, 40), (-y, -4, 3), (x.maximum(y), 0, 10),
  (x // 3, 0, 3), (y // 2, -1, 2), (x % 4, 0, 3), (y % 3, -2, 2), ((x - 20) % 4, -3, 0), (x % 20, 0, 10),
  ((x < 3).where(y, x), -3, 10), (x & 6, 0, 6), (x << 2, 0, 40), (x >> 1, 0, 5),
  (UOp.range(5, 0), 0, 4), (x * y * 0, 0, 0),
])
def test_vmin_vmax_per_op(expr, lo, hi):
  assert (expr.vmin, expr.vmax) == (lo, hi)
  envs = [{x: a, y: b} for a in range(0, 11) for b in range(-3, 5)]
  vals = _brute(expr, envs) if expr.op is not Ops.RANGE else list(range(5))
  assert lo <= min(vals) and max(vals) <= hi  # sound


def test_comparison_bounds():
  assert ((x < 11).vmin, (x < 11).vmax) == (True, True)
  assert ((x < 0).vmin, (x < 0).vmax) == (False, False)
  assert ((x < 5).vmin, (x < 5).vmax) == (False, True)
  assert (x.ne(11).vmin, x.eq(11).vmax) == (True, False)
  assert (UOp.const(i32, 2).eq(2).vmin, UOp.const(i32, 2).eq(2).vmax) == (True, True)


def test_bounds_claim_nothing_on_overflow_or_floats():
  big = UOp.variable("b", 0, 2**30)
  assert ((big * 4).vmin, (big * 4).vmax) == (dtypes.min(i32), dtypes.max(i32))
  assert ((x << -1).vmin, (x << 40).vmax) == (dtypes.min(i32), dtypes.max(i32))  # undefined shifts
  f = x.cast(dtypes.float32)
  assert (f.vmin, f.vmax) == (-math.inf, math.inf)
  assert (x.cast(dtypes.int64).vmin, x.cast(dtypes.int8).vmax) == (0, 10)
  assert (UOp.variable("w", 0, 300).cast(dtypes.int8).vmax) == 127


def test_bounds_are_sound_on_random_exprs():
  import random
  rng = random.Random(0)
  leaves = [x, y, UOp.const(i32, 3), UOp.const(i32, -2)]
  envs = [{x: a, y: b} for a in range(0, 11, 2) for b in range(-3, 5)]
  steps = [lambda e, o: e + o, lambda e, o: e - o, lambda e, o: e * o, lambda e, o: e // 3, lambda e, o: e % 4,
           lambda e, o: -e, lambda e, o: e.maximum(o), lambda e, o: (e < o).where(e, o), lambda e, o: e // -3,
           lambda e, o: e % -3]
  for _ in range(300):
    e = rng.choice(leaves)
    for _ in range(rng.randint(1, 5)):
      e = rng.choice(steps)(e, rng.choice(leaves))
    vals = _brute(e, envs)
    assert e.vmin <= min(vals) and max(vals) <= e.vmax, e.render()


# ---- printing

def test_pretty_numbers_nodes_in_toposort_order():
  e = (x + 1) * x
  lines = pretty(e).splitlines()
  assert len(lines) == 4
  assert lines[0].split()[:2] == ["0", "DEFINE_VAR"]
  assert lines[1].split()[:2] == ["1", "CONST"]
  assert lines[2].split()[:3] == ["2", "ADD", "int32"] and "(0, 1)" in lines[2]
  assert lines[3].split()[:2] == ["3", "MUL"] and "(2, 0)" in lines[3]


def test_render_and_repr():
  assert ((x * 4 + y) // 4).render() == "(((x*4)+y)//4)"
  assert (-x).render() == "(-x)" and (x < 3).where(x, y).render() == "((x<3)?x:y)"
  assert UOp.range(4, 2).render() == "r2" and x.maximum(y).render() == "max(x, y)"
  assert repr(UOp.const(i32, 1)) == "UOp(Ops.CONST, dtypes.int32, arg=1, src=())"
  e = x
  for _ in range(50):
    e = e + 1
  assert "nodes>" in repr(e)  # big graphs are summarized
