"""MAX means one thing everywhere (issue 27): on floats IEEE 754-2019 `maximum`, torch.maximum's (NaN if either
operand is NaN, +0.0 above -0.0 in either order), on ints the max, on bool OR. The LLVM backend (scalar and vector
kernels, its vector max accumulators), the numpy interpreter and the constant folder must all give it, and REDUCE MAX
is its fold from -inf. numpy is the reference where it agrees with the rule (NaN, infinities, ints); for signed zeros
it does not (np.maximum keeps one operand's zero, which one depending on the dtype; np.max keeps the first zero it
meets), so those expectations are explicit values."""
from __future__ import annotations

import re

import numpy as np
import pytest
from support.backends import backends_for
from support.codegen_helpers import UN, UP, G, R, buf, run, sink, split

from compiler import Tensor
from compiler.codegen import get_program
from compiler.dtype import DType, dtypes
from compiler.engine import optimize
from compiler.runtime.interpreter import interpret
from compiler.uop import Ops, UOp

ON_CL = True  # IEEE maximum on every backend, OpenCL's included (support/backends.py)
BACKENDS = backends_for(ON_CL)

FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
        dtypes.uint64]
nan, inf = float("nan"), float("inf")

# (a, b, max(a, b)): every case of the rule, both orders
PAIRS = [
  (-0.0, 0.0, 0.0), (0.0, -0.0, 0.0), (-0.0, -0.0, -0.0), (0.0, 0.0, 0.0),
  (nan, 1.0, nan), (1.0, nan, nan), (nan, nan, nan), (nan, -inf, nan), (inf, nan, nan), (-0.0, nan, nan),
  (nan, 0.0, nan), (-inf, inf, inf), (inf, -inf, inf), (-inf, -0.0, -0.0), (-0.0, -inf, -0.0), (-1.0, -0.0, -0.0),
  (-0.0, -1.0, -0.0), (0.0, -1.0, 0.0), (-1.0, 0.0, 0.0), (3.0, 2.0, 3.0), (-3.0, -2.0, -2.0), (-inf, -inf, -inf),
  (5e-8, -0.0, 5e-8), (-0.0, -5e-8, -0.0), (2.5, 2.5, 2.5),
]
# (a, b, min(a, b)) of Tensor.minimum: IEEE minimum, -0.0 below +0.0
MIN_PAIRS = [(-0.0, 0.0, -0.0), (0.0, -0.0, -0.0), (0.0, 0.0, 0.0), (nan, 1.0, nan), (1.0, nan, nan),
             (-inf, inf, -inf), (1.0, 0.0, 0.0), (-1.0, -0.0, -1.0), (0.0, 5e-8, 0.0)]


def assert_same(got, want) -> None:
  """Equal arrays: same dtype, NaN where want is NaN, and elsewhere the same values with the same signs."""
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
  if got.dtype.kind != "f":
    assert np.array_equal(got, want), (got, want)
    return
  isnan = np.isnan(want)
  assert np.array_equal(np.isnan(got), isnan), (got, want)
  ok = ~isnan
  assert np.array_equal(got[ok], want[ok]) and np.array_equal(np.signbit(got[ok]), np.signbit(want[ok])), (got, want)


def _float_table(dt: DType, pairs=PAIRS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  a, b, want = (np.array([p[k] for p in pairs], dt.np) for k in range(3))
  return a, b, want


def _int_values(dt: DType) -> list[int]:
  lo, hi = dtypes.min(dt), dtypes.max(dt)
  return sorted({lo, lo + 1, -1 if lo < 0 else 2, 0, 1, hi // 2, hi - 1, hi})


def _int_table(dt: DType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  vals = _int_values(dt)
  a = np.array([x for x in vals for _ in vals], dt.np)
  b = np.array([y for _ in vals for y in vals], dt.np)
  return a, b, np.maximum(a, b)


def _table(dt: DType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  if dt == dtypes.bool:
    a, b = np.array([False, False, True, True]), np.array([False, True, False, True])
    return a, b, a | b
  return _float_table(dt) if dtypes.is_float(dt) else _int_table(dt)


def _tiled(n: int, *arrays: np.ndarray) -> list[np.ndarray]:
  """The arrays repeated to n elements (n a multiple of the vector width), each lane position seeing every case."""
  return [np.resize(a, n) for a in arrays]


def _run(backend: str, ast: UOp, *arrays: np.ndarray) -> list[np.ndarray]:
  if backend == "llvm":
    return run(ast, *arrays)
  arrs = [np.array(a, copy=True) for a in arrays]
  interpret(ast, arrs)
  return arrs


def _max_kernel(n: int, dt: DType) -> UOp:
  """out[i] = MAX(a[i], b[i])"""
  i = UOp.range(n, 0, G)
  a, b = buf(1, n, dt).index(i).load(), buf(2, n, dt).index(i).load()
  return sink(buf(0, n, dt).index(i).store(a.maximum(b)), name="E_max")


ALL = FLOATS + INTS + [dtypes.bool]


# ---- the MAX op in kernels, scalar and vector, on both backends

@pytest.mark.parametrize("dt", ALL, ids=str)
@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("upcast", [1, 8])
def test_max_op_in_a_kernel(dt: DType, be: str, upcast: int):
  a, b, want = _table(dt)
  n = -(-len(a) // 8) * 8 * 2
  a, b, want = _tiled(n, a, b, want)
  ast = _max_kernel(n, dt)
  if upcast > 1:
    ast = split(ast, 0, upcast, UP)
    assert f"<{upcast} x " in get_program(ast).src  # the vector form is what runs
  assert_same(_run(be, ast, np.zeros(n, dt.np), a, b)[0], want)


@pytest.mark.parametrize("dt", ALL, ids=str)
@pytest.mark.parametrize("be", BACKENDS)
def test_max_of_constants_in_a_kernel(dt: DType, be: str):
  a, b, want = _table(dt)
  i = UOp.range(4, 0, G)
  consts = [UOp.const(dt, x.item()).maximum(UOp.const(dt, y.item())) for x, y in zip(a, b)]
  ast = sink(*(buf(k, 4, dt).index(i).store(c) for k, c in enumerate(consts)), name="E_consts")
  outs = _run(be, ast, *(np.zeros(4, dt.np) for _ in consts))
  assert_same(np.stack([o[0] for o in outs]), want)


@pytest.mark.parametrize("dt", ALL, ids=str)
def test_constant_folding_gives_the_rule(dt: DType):
  a, b, want = _table(dt)
  for x, y, w in zip(a, b, want):
    s = UOp.const(dt, x.item()).maximum(UOp.const(dt, y.item())).simplify()
    assert s.op is Ops.CONST, (x, y, s)
    assert_same(np.array(s.arg, dt.np), w)


# ---- the front end: maximum, minimum, relu, clip, on both backends and with constants

@pytest.mark.parametrize("dt", ALL, ids=str)
def test_tensor_maximum(backend: str, dt: DType):
  a, b, want = _table(dt)
  assert_same(Tensor(a, dt).maximum(Tensor(b, dt)).numpy(), want)
  # big enough that the optimizer upcasts (vector kernels)
  big_a, big_b, big_want = _tiled(4096, a, b, want)
  assert_same(Tensor(big_a, dt).maximum(Tensor(big_b, dt)).numpy(), big_want)


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_tensor_maximum_of_constants(backend: str, dt: DType):
  for x, y, w in PAIRS:
    got = Tensor.full((3,), x, dtype=dt).maximum(Tensor.full((3,), y, dtype=dt)).numpy()
    assert_same(got, np.full(3, w, dt.np))


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_tensor_minimum(backend: str, dt: DType):
  a, b, want = _float_table(dt, MIN_PAIRS)
  assert_same(Tensor(a, dt).minimum(Tensor(b, dt)).numpy(), want)
  big_a, big_b, big_want = _tiled(4096, a, b, want)
  assert_same(Tensor(big_a, dt).minimum(Tensor(big_b, dt)).numpy(), big_want)


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int64, dtypes.uint8, dtypes.uint32], ids=str)
def test_tensor_minimum_of_ints(backend: str, dt: DType):
  a, b, _ = _int_table(dt)
  assert_same(Tensor(a, dt).minimum(Tensor(b, dt)).numpy(), np.minimum(a, b))


def test_relu_and_clip_of_zeros_and_nan(backend: str):
  x = np.array([-0.0, 0.0, nan, -1.0, 2.0, -inf, inf, 0.5, 1.0], np.float32)
  # relu(-0.0) is +0.0 as torch's (x <= 0 gives 0); np.maximum(-0.0, 0.0) keeps one of the zeros
  assert_same(Tensor(x).relu().numpy(), np.array([0.0, 0.0, nan, 0.0, 2.0, 0.0, inf, 0.5, 1.0], np.float32))
  assert_same(Tensor(x).clip(0.0, 1.0).numpy(), np.clip(x, 0.0, 1.0))  # x where within the bounds: -0.0 stays
  assert_same(Tensor(x).clip(-1.0, -0.0).numpy(), np.clip(x, -1.0, -0.0))


# ---- REDUCE MAX: the fold of MAX from -inf

REDUCES = [
  ([-0.0, 0.0], 0.0), ([0.0, -0.0], 0.0), ([-0.0, -0.0], -0.0), ([-0.0], -0.0), ([0.0], 0.0),
  ([1.0, nan, 2.0], nan), ([nan, 1.0], nan), ([2.0, nan], nan), ([inf, nan], nan), ([nan, -inf], nan),
  ([-inf], -inf), ([-inf, -0.0], -0.0), ([-1.0, -0.0, -2.0], -0.0), ([-1.0, 0.0, -0.0], 0.0), ([-inf, inf], inf),
]


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_small_max_reductions(backend: str, dt: DType):
  for vals, want in REDUCES:
    assert_same(Tensor(np.array(vals, dt.np)).max().numpy(), np.array(want, dt.np))
    # min is -max(-x): IEEE minimum, -0.0 below +0.0
    neg = np.negative(np.array(vals, dt.np))
    assert_same(Tensor(neg).min().numpy(), np.negative(np.array(want, dt.np)))


def _zeros_with(n: int, base: float, pos: int, v: float, dt: DType) -> np.ndarray:
  a = np.full(n, base, dt.np)
  a[pos] = v
  return a


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("n", [64, 4096, 4096 + 13])
def test_big_max_reductions_of_zeros_and_nan(backend: str, dt: DType, n: int):
  # vector accumulators (and a peeled remainder for n = 4109): the answer must not depend on where the zeros are
  for pos in (0, 1, 7, n // 2, n - 2, n - 1):
    assert_same(Tensor(_zeros_with(n, -0.0, pos, 0.0, dt)).max().numpy(), np.array(0.0, dt.np))
    assert_same(Tensor(_zeros_with(n, 0.0, pos, -0.0, dt)).max().numpy(), np.array(0.0, dt.np))
    assert_same(Tensor(_zeros_with(n, 0.0, pos, -0.0, dt)).min().numpy(), np.array(-0.0, dt.np))
    assert_same(Tensor(_zeros_with(n, -1.0, pos, nan, dt)).max().numpy(), np.array(nan, dt.np))
    assert_same(Tensor(_zeros_with(n, -inf, pos, -0.0, dt)).max().numpy(), np.array(-0.0, dt.np))
  assert_same(Tensor(np.full(n, -0.0, dt.np)).max().numpy(), np.array(-0.0, dt.np))
  assert_same(Tensor(np.full(n, -inf, dt.np)).max().numpy(), np.array(-inf, dt.np))
  tiled = np.resize(np.array([0.0, -0.0], dt.np), n)
  assert_same(Tensor(tiled).max().numpy(), np.array(0.0, dt.np))
  assert_same(Tensor(tiled[::-1].copy()).max().numpy(), np.array(0.0, dt.np))


def _rule_max(a: np.ndarray, axis: int) -> np.ndarray:
  """The rule's REDUCE MAX along axis: NaN where a NaN is, a zero max +0.0 where a +0.0 is (else -0.0)."""
  out = np.max(np.where(np.isnan(a), -np.inf, a), axis=axis)
  pos_zero = ((a == 0) & ~np.signbit(a)).any(axis=axis)
  out = np.where(out == 0, np.where(pos_zero, 0.0, -0.0).astype(a.dtype), out)
  return np.where(np.isnan(a).any(axis=axis), np.array(nan, a.dtype), out)


def _special_rows(m: int, k: int, dt: DType, seed: int) -> np.ndarray:
  """Rows drawn from the cases' values (zeros of both signs, NaN, infinities, small numbers of both signs)."""
  rng = np.random.default_rng(seed)
  pool = np.array([-0.0, 0.0, -0.0, -1.0, -2.0, -inf, nan, 1.0, inf], dt.np)
  a = pool[rng.integers(0, len(pool), (m, k))]
  # rows of zeros and negatives only (the zero's sign decides), the rest of them NaN-free
  a[: m // 2] = np.where(a[: m // 2] > 0, -0.0, a[: m // 2])
  a[: m // 2] = np.where(np.isnan(a[: m // 2]), -1.0, a[: m // 2])
  return a


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_row_and_column_max_reductions(backend: str, dt: DType):
  rows = _special_rows(32, 1024, dt, seed=1)
  assert_same(Tensor(rows).max(-1).numpy(), _rule_max(rows, 1))
  cols = _special_rows(64, 512, dt, seed=2).T.copy()  # (512, 64): a strided reduce, its outputs upcast
  assert_same(Tensor(cols).max(0).numpy(), _rule_max(cols, 0))


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("form", ["scalar", "unrolled", "upcast"])
def test_reduce_max_kernel_forms(dt: DType, be: str, form: str):
  # out[i] = REDUCE MAX a[i, :]: a scalar loop, vector accumulators of an unrolled reduce, a vector REDUCE
  m, k = 16, 256
  i, r = UOp.range(m, 0, G), UOp.range(k, 1, R)
  ast = sink(buf(0, m, dt).index(i).store(buf(1, m * k, dt).index(i * k + r).load().reduce(r, op=Ops.MAX)))
  if form == "unrolled":
    ast = split(ast, 1, 32, UN)
  elif form == "upcast":
    ast = split(ast, 0, 8, UP)
  a = _special_rows(m, k, dt, seed=3)
  a[0], a[1] = -0.0, 0.0
  a[2, 5], a[3, k - 1] = 0.0, 0.0  # one +0.0 in rows of -0.0 and negatives
  a[2][a[2] > 0], a[3][a[3] > 0] = -0.0, -0.0
  a[2][np.isnan(a[2])], a[3][np.isnan(a[3])] = -1.0, -1.0
  assert_same(_run(be, ast, np.zeros(m, dt.np), a.reshape(-1))[0], _rule_max(a, 1))


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_max_reductions(backend: str, dt: DType):
  rng = np.random.default_rng(4)
  vals = np.array(_int_values(dt), dt.np)
  a = vals[rng.integers(0, len(vals), (8, 1024))]
  assert_same(Tensor(a, dt).max().numpy(), np.max(a))
  assert_same(Tensor(a, dt).max(1).numpy(), np.max(a, 1))
  assert_same(Tensor(a, dt).min(0).numpy(), np.min(a, 0))
  low = np.full(4096, dtypes.min(dt), dt.np)
  assert_same(Tensor(low, dt).max().numpy(), np.max(low))  # the accumulator's initial value is the dtype's min


def test_bool_max_reductions(backend: str):
  a = np.zeros((4, 1024), bool)
  a[1, 1023] = a[2, 0] = True
  a[3] = True
  assert_same(Tensor(a).max(1).numpy(), a.any(1))
  assert_same(Tensor(a).min(1).numpy(), a.all(1))
  assert_same(Tensor(a).max().numpy(), np.bool_(True))


def test_float32_max_reduce_stays_vectorized():
  # vector accumulators: select-based max, NaN mask and the and-ed bits, all vectors; no scalar llvm.maximum chain
  (si,) = Tensor(np.zeros(1 << 16, np.float32)).max().schedule()
  src = get_program(optimize(si.ast)).src
  assert re.search(r"phi <(4|8|16) x float>", src) and re.search(r"phi <(4|8|16) x i32>", src), src
  assert re.search(r"phi <(4|8|16) x i1>", src), src
