"""Vector accumulators of unrolled reduces (codegen's `vector_accumulators`) and the NaN-flagged vector max
(`lowerer._max_with_nan_flag`): results against numpy, NaN, infinities and zeros included, and the IR's shape."""
from __future__ import annotations

import re

import numpy as np
import pytest
from support.codegen_helpers import UN, UP, buf, matmul, reduce_cols, reduce_rows, run, sink, split

from compiler.codegen import get_program
from compiler.codegen.llvmir import host_features
from compiler.dtype import dtypes
from compiler.uop import AxisType, Ops, UOp

rng = np.random.default_rng(7)
NP = {Ops.ADD: np.sum, Ops.MAX: np.max}


def _rows(m: int, k: int, dt=np.float32) -> np.ndarray:
  return (rng.standard_normal((m, k)) * 8).astype(dt)


def _specials(a: np.ndarray) -> np.ndarray:
  """Rows with NaN at the first, a middle and the last element, an all-NaN row, infinities, only -inf, only zeros
  of both signs, and a NaN next to +inf: each its own row of a (which needs at least 10 rows)."""
  a = a.copy()
  k = a.shape[1]
  a[0, 0] = a[1, k // 2 + 1] = a[2, k - 1] = np.nan
  a[3] = np.nan
  a[4, 3] = np.inf
  a[5] = -np.inf
  a[6] = -np.inf
  a[6, k - 1] = np.nan
  a[7] = 0.0
  a[7, ::3] = -0.0
  a[8] = -0.0
  a[9, 1], a[9, k - 2] = np.inf, np.nan
  return a


@pytest.mark.parametrize("k,unroll", [(64, 32), (96, 32), (64, 16), (48, 8), (40, 4), (1024, 32), (32, 32)])
def test_unrolled_row_max_propagates_nan_like_numpy(k: int, unroll: int):
  a = _specials(_rows(12, k))
  ast = split(reduce_rows(12, k, Ops.MAX), 1, unroll, UN)
  out = run(ast, np.zeros(12, np.float32), a.reshape(-1))[0]
  want = a.max(1)
  assert np.array_equal(np.isnan(out), np.isnan(want)), (out, want)
  ok = ~np.isnan(want)
  assert np.array_equal(out[ok], want[ok]), (out, want)
  assert not np.signbit(out[8]) or np.signbit(want[8])  # a row of -0.0 stays a zero (of either sign at most)


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
@pytest.mark.parametrize("k,unroll", [(64, 32), (1024, 32), (48, 16)])
def test_unrolled_row_reduce_gets_vector_accumulators(op: Ops, k: int, unroll: int):
  # before: 32 scalar values chained into one accumulator a loop iteration, and for MAX LLVM's IEEE maximum
  ast = split(reduce_rows(5, k, op), 1, unroll, UN)
  src = get_program(ast).src
  assert "phi <16 x float>" in src and "load <16 x float>" in src
  if op is Ops.MAX:
    body = src[src.index("loop"):src.index("exit")]
    assert "llvm.maximum" not in body  # inside the loop: compare and select, and the NaN mask
    assert "phi <16 x i1>" in src
  a = _rows(5, k)
  out = run(ast, np.zeros(5, np.float32), a.reshape(-1))[0]
  np.testing.assert_allclose(out, NP[op](a, axis=1), rtol=1e-5, atol=1e-4 * k)


@pytest.mark.parametrize("dt,np_dt", [(dtypes.int32, np.int32), (dtypes.float16, np.float16),
                                      (dtypes.float64, np.float64)])
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
def test_unrolled_reduce_of_other_dtypes(dt, np_dt, op: Ops):
  m, k = 10, 64
  i, r = UOp.range(m, 0, AxisType.GLOBAL), UOp.range(k, 1, AxisType.REDUCE)
  x = buf(1, m * k, dt).index(i * k + r).load()
  ast = split(sink(buf(0, m, dt).index(i).store(x.reduce(r, op=op)), name="r_dt"), 1, 16, UN)
  a = _rows(m, k, np.float64)
  a = (a.round() if np_dt == np.int32 else _specials(a) if op is Ops.MAX else a).astype(np_dt)
  out = run(ast, np.zeros(m, np_dt), a.reshape(-1))[0]
  want = NP[op](a.astype(np.float64) if op is Ops.ADD and np_dt == np.float16 else a, axis=1).astype(np_dt)
  if np_dt == np.int32 or op is Ops.MAX:
    assert np.array_equal(out, want, equal_nan=True), (out, want)
  else:
    np.testing.assert_allclose(out, want, rtol=2e-3 if np_dt == np.float16 else 1e-12, atol=1e-2)


def test_upcast_output_max_keeps_nan_in_its_vector_accumulator():
  # columns as lanes (the reduce is strided): the vector accumulator comes from the store's lanes, NaN-flagged too
  m, k = 16, 40
  a = (rng.standard_normal((k, m)) * 8).astype(np.float32)
  a[0, 3] = a[k - 1, 7] = a[17, 12] = np.nan
  a[:, 5] = -np.inf
  j, r = UOp.range(m, 0, AxisType.GLOBAL), UOp.range(k, 1, AxisType.REDUCE)
  ast = sink(buf(0, m).index(j).store(buf(1, m * k).index(r * m + j).load().reduce(r, op=Ops.MAX)), name="r_cmax")
  ast = split(ast, 0, 16, UP)
  src = get_program(ast).src
  assert "phi <16 x float>" in src and "phi <16 x i1>" in src
  out = run(ast, np.zeros(m, np.float32), a.reshape(-1))[0]
  assert np.array_equal(out, a.max(0), equal_nan=True), (out, a.max(0))


@pytest.mark.timeout(120, method="thread")  # the hang was inside LLVM, where a signal cannot interrupt it
@pytest.mark.parametrize("k,unroll,upcast", [(256, 32, 4), (256, 32, 2), (1024, 32, 8), (64, 32, 4)])
def test_upcast_rows_with_a_long_unrolled_max_compile_quickly_and_right(k: int, unroll: int, upcast: int):
  # rows as vector lanes, 32 unrolled (gathered) values each: once accumulated as a chain of 32 selects, which LLVM
  # unrolled 8 times and then took minutes to simplify; the values now combine pairwise before the accumulator
  ast = split(split(reduce_rows(8, k, Ops.MAX), 1, unroll, UN), 0, upcast, UP)
  a = _specials(_rows(12, k))[4:]
  a[0, 5] = np.nan
  out = run(ast, np.zeros(8, np.float32), a.reshape(-1))[0]
  assert np.array_equal(out, a.max(1), equal_nan=True), (out, a.max(1))


def test_strided_unrolled_reduce_stays_scalar_and_right():
  # the unrolled values are a column apart: a vector of them would be a gather, so they stay scalar chains
  ast = split(reduce_cols(8, 64), 1, 16, UN)
  src = get_program(ast).src
  assert "<16 x float>" not in src
  a = rng.standard_normal(8 * 64).astype(np.float32)
  np.testing.assert_allclose(run(ast, np.zeros(8, np.float32), a)[0], a.reshape(64, 8).sum(0), rtol=1e-5, atol=1e-4)


def test_unrolled_max_of_an_expression_vectorizes():
  # max_j (a[i, j] - b[i]) * 2: vector ops over a vector load and a broadcast, NaN from either input
  m, k = 10, 64
  i, r = UOp.range(m, 0, AxisType.GLOBAL), UOp.range(k, 1, AxisType.REDUCE)
  v = (buf(1, m * k).index(i * k + r).load() - buf(2, m).index(i).load()) * 2.0
  ast = split(sink(buf(0, m).index(i).store(v.reduce(r, op=Ops.MAX)), name="r_expr"), 1, 32, UN)
  assert "phi <16 x float>" in get_program(ast).src
  a, b = _specials(_rows(m, k)), rng.standard_normal(m).astype(np.float32)
  b[4] = np.inf  # inf - inf: NaN made inside the kernel
  out = run(ast, np.zeros(m, np.float32), a.reshape(-1), b)[0]
  with np.errstate(invalid="ignore"):
    want = ((a - b[:, None]) * 2).max(1)
  assert np.array_equal(out, want, equal_nan=True)


# ---- exp2 of a vector: AVX-512's scalef (where the host has it) rounds p * 2^n once, as the exponent-bits path

def _exp2_ast(n: int, dt=dtypes.float32) -> UOp:
  i = UOp.range(n, 0, AxisType.GLOBAL)
  return sink(buf(0, n, dt).index(i).store(buf(1, n, dt).index(i).load().exp2()), name="E_exp2")


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_vector_exp2_equals_the_scalar_path_bit_for_bit(lanes: int):
  sweep = np.concatenate([np.linspace(-170, 140, 40001), rng.standard_normal(4000) * 30,
                          [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 127.99, 128.0, 128.5, -126.0, -149.0, -149.5,
                           -150.0, -150.5, -159.9, -160.0, -1e30, 1e30, 1e-30, -1e-30, 0.5, -0.5, 1.5, -1.5]])
  x = np.resize(sweep.astype(np.float32), 16 * (len(sweep) // 16 + 1))
  n = len(x)
  vec = split(_exp2_ast(n), 0, lanes, UP)
  src = get_program(vec).src
  assert f"<{lanes} x float>" in src
  feats = host_features()  # the JIT compiles for this CPU: scalef exactly where it has AVX-512 (VL below 16 lanes)
  assert ("avx512.mask.scalef" in src) == ("+avx512f" in feats and (lanes == 16 or "+avx512vl" in feats))
  got = run(vec, np.zeros(n, np.float32), x)[0]
  scalar = run(_exp2_ast(n), np.zeros(n, np.float32), x)[0]
  # bit for bit, a zero's sign included (array_equal takes -0.0 for 0.0); NaN payloads aside
  nan = np.isnan(got)
  assert np.array_equal(nan, np.isnan(scalar)), x[nan != np.isnan(scalar)][:10]
  differ = got[~nan].view(np.uint32) != scalar[~nan].view(np.uint32)
  assert not differ.any(), x[~nan][differ][:10]
  with np.errstate(over="ignore"):
    want = np.exp2(x.astype(np.float64))
    w32 = want.astype(np.float32)
  f32 = np.finfo(np.float32)
  fin = (want > f32.tiny) & (want < f32.max)  # normal float32 results: within 2 ulp
  ulp = np.abs(got[fin].astype(np.float64) - want[fin]) / np.spacing(w32[fin]).astype(np.float64)
  assert ulp.max() <= 2, ulp.max()
  assert np.array_equal(np.isnan(got), np.isnan(x))
  special = ~fin & ~np.isnan(x)
  assert np.allclose(got[special], w32[special], rtol=0, atol=2 * 2.0 ** -149), (x[special], got[special])


def test_vector_exp2_of_half_and_double():
  x = np.concatenate([np.linspace(-30, 20, 992), [np.nan, np.inf, -np.inf, 0, -0.0, 15.9, 16.0, -24.0]])
  for dt, np_dt, tol in ((dtypes.float16, np.float16, 1e-3), (dtypes.float64, np.float64, 1e-12)):
    xs = x.astype(np_dt)
    got = run(split(_exp2_ast(len(xs), dt), 0, 8, UP), np.zeros(len(xs), np_dt), xs)[0]
    with np.errstate(over="ignore"):
      want = np.exp2(xs.astype(np.float64)).astype(np_dt)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=0)


# ---- through the Tensor front end: rows long enough to be unrolled into vectors, with NaN, infinities and zeros

def _tensor_rows(seed: int, m: int, k: int) -> np.ndarray:
  r = np.random.default_rng(seed)
  a = (r.standard_normal((m, k)) * 6).astype(np.float32)
  for _ in range(r.integers(0, 4)):
    a[r.integers(0, m), r.integers(0, k)] = r.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30])
  if r.random() < 0.5:
    a[r.integers(0, m)] = -np.inf
  return a


def _same_nan_and_close(got: np.ndarray, want: np.ndarray, rtol: float) -> None:
  assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
  ok = ~np.isnan(want)
  np.testing.assert_allclose(got[ok], want[ok], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("seed", range(12))
def test_row_reductions_of_the_tensor_api_match_numpy(seed: int):
  from compiler import Tensor
  m, k = [(3, 64), (5, 96), (2, 1024), (7, 48), (4, 32 * 9), (1, 2048)][seed % 6]
  a = _tensor_rows(seed, m, k)
  with np.errstate(invalid="ignore", over="ignore"):
    e = np.exp(a - a.max(1, keepdims=True))
    cases = {
      "max": (lambda t: t.max(1), a.max(1)), "min": (lambda t: t.min(1), a.min(1)),
      "sum": (lambda t: t.sum(1), a.sum(1, dtype=np.float64)), "argmax": (lambda t: t.argmax(1), None),
      "softmax": (lambda t: t.softmax(1), e / e.sum(1, keepdims=True)),
      "exp": (lambda t: t.exp(), np.exp(a.astype(np.float64))),
    }
  for name, (fn, want) in cases.items():
    got = fn(Tensor(a)).numpy()
    if name == "argmax":  # numpy's argmax takes the first NaN, else the first maximum
      want = np.array([np.flatnonzero(np.isnan(row))[0] if np.isnan(row).any() else np.argmax(row) for row in a])
      assert np.array_equal(got, want), (name, got, want)
    elif name in ("max", "min"):
      assert np.array_equal(got, want, equal_nan=True), (name, got, want)
    else:
      _same_nan_and_close(got.astype(np.float64), np.asarray(want, np.float64), 1e-5 if name != "sum" else 1e-4)


@pytest.mark.parametrize("vector_bytes,widths", [(16, {4, 2}), (32, {8, 2}), (64, {10})])
def test_stores_not_a_power_of_two_wide_are_cut_into_registers(monkeypatch, vector_bytes, widths):
  # a row of 10 outputs (MLP's logits) upcast whole: one <10 x float> accumulator fits an AVX-512 register (LLVM
  # widens it with masks), while on AVX2 and SSE LLVM kept it one scalar register a lane across the loop, rebuilt
  # every iteration: it is cut into registers' worth and the rest there
  from compiler.codegen import expander, program
  monkeypatch.setattr(expander, "vector_bytes", lambda: vector_bytes)
  monkeypatch.setattr(program, "_PROGRAMS", type(program._PROGRAMS)())
  ast = split(matmul(6, 10, 32), 1, 10, UP)
  src = get_program(ast).src
  accs = {int(n) for n in re.findall(r"%acc\d+\S* = phi <(\d+) x float>", src)}
  assert accs == widths, src
  a, b = _rows(6, 32), _rows(32, 10)
  out = run(ast, np.zeros(60, np.float32), a.ravel(), b.ravel())[0]
  np.testing.assert_allclose(out.reshape(6, 10), a @ b, rtol=1e-5, atol=1e-4)
