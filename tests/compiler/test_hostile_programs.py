"""Issue 14, items 10-12: programs past 2**31 elements, deep graphs, many inputs and integer corner cases must give
the right answer or a clear error on both backends, never a crash or a wrong number.

No test here allocates more than a few MB: views (expand/pad) of small buffers index past 2**31 without memory."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import compiler.runtime.interpreter as interp
from compiler.dtype import dtypes
from compiler.tensor import Tensor
from compiler.uop import Ops, toposort

BIG = 2**31


def _ranges(t: Tensor) -> list:
  return [u for si in t.schedule() for u in toposort(si.ast) if u.op is Ops.RANGE]


# ---- item 11: index math past 2**31 (int32 wrapped: pad read zeros, expand summed 3)

def test_pad_past_int32_reads_the_data(backend):
  x = Tensor([1.0, 2.0, 3.0]).pad(((BIG, 0),))[BIG:]
  np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])


def test_pad_past_int32_both_sides(backend):
  x = Tensor([1.0, 2.0, 3.0]).pad(((BIG, 5),))[BIG - 1:BIG + 4]
  np.testing.assert_array_equal(x.numpy(), [0.0, 1.0, 2.0, 3.0, 0.0])


@pytest.mark.parametrize("n", [2**31 + 10, 2**32 + 3])
def test_sum_of_an_expand_past_int32(backend, n):
  got = Tensor.ones(1).expand(n).sum().numpy()
  assert got == np.float32(n)


def test_int_sum_of_an_expand_past_int32_wraps_like_numpy(backend):
  got = Tensor([3], dtype=dtypes.int32).expand(BIG + 10).sum().numpy()
  assert int(got) == -BIG + 30  # 3 * (2**31 + 10) mod 2**32, as int32 addition wraps


def test_max_of_an_expand_past_int32(backend):
  assert Tensor([-2.5]).expand(BIG + 10).max().numpy() == np.float32(-2.5)


def test_views_far_past_int32(backend):
  assert Tensor.ones(1).expand(2**62).sum().numpy() == np.float32(2**62)
  np.testing.assert_array_equal(Tensor.ones(1).expand(2**40).pad(((1, 0),))[:3].numpy(), [0.0, 1.0, 1.0])
  np.testing.assert_array_equal(Tensor([1.0, 2.0]).pad(((2**62, 0),))[2**62:].numpy(), [1.0, 2.0])
  assert Tensor.ones(1).expand(2**40).reshape(2**20, 2**20)[5:7, 3:5].sum().numpy() == 4.0


@pytest.mark.parametrize("build", [lambda: Tensor.ones(1).expand(2**63 + 5).sum(),
                                   lambda: Tensor([1.0, 2.0]).pad(((2**63, 0),))[2**63:]])
def test_views_past_int64_are_refused(backend, build):
  with pytest.raises(ValueError, match="more than 64-bit index math can address"):
    build().numpy()


def test_index_dtype_is_int32_unless_a_view_exceeds_it():
  assert {r.dtype for r in _ranges(Tensor.ones(4, 5).contiguous().sum(axis=1))} == {dtypes.int32}
  # the kernel over the padded view counts in int64; a long sum's partials are added by a kernel of their own (the
  # scheduler's "split reduces"), whose two-element view fits int32
  kernels = [{u.dtype for u in toposort(si.ast) if u.op is Ops.RANGE} for si in
             Tensor([1.0, 2.0]).pad(((BIG, 0),)).sum().schedule()]
  assert kernels == [{dtypes.int64}, {dtypes.int32}]


def _narrowable(v: float) -> list[tuple[Tensor, list[float]]]:
  return [(Tensor([v, 2.0, 3.0]).pad(((BIG, 0),))[BIG:], [v, 2.0, 3.0]),
          (Tensor([v, 2.0, 3.0]).pad(((BIG, 5),))[BIG - 1:BIG + 4], [0.0, v, 2.0, 3.0, 0.0]),
          (Tensor([v]).expand(2**40).pad(((1, 0),))[:3], [0.0, v, v])]


def test_index_math_narrows_to_int32_where_bounds_prove_it_fits():
  # the views exceed int32, but after simplification the kernels index [0, 5): vmin/vmax narrow them to int32
  for t, _ in _narrowable(1.25):
    assert {r.dtype for r in _ranges(t)} == {dtypes.int32}
  # index math beside an int64 value (a constant stored with it) keeps int64
  t = Tensor([5], dtype=dtypes.int64).expand(2**40).pad(((1, 0),))[:3] + 7
  assert {r.dtype for r in _ranges(t)} == {dtypes.int64}


def test_narrowed_kernels_compute_the_same(backend):
  for t, want in _narrowable(1.5 if backend == "llvm" else 2.5):
    np.testing.assert_array_equal(t.numpy(), want)
  t = Tensor([5], dtype=dtypes.int64).expand(2**40).pad(((1, 0),))[:3] + 7
  np.testing.assert_array_equal(t.numpy(), [7, 12, 12])


def test_llvm_loop_past_int32_runs_every_iteration(monkeypatch):
  # a padded view depends on its range, so the 2**31+11-iteration loop really runs (in i64)
  monkeypatch.setenv("BACKEND", "llvm")
  # (uint8 sums to uint32: exact, where float32 accumulation would stall near 2**30)
  got = Tensor([1], dtype=dtypes.uint8).expand(BIG + 10).pad(((1, 0),)).sum().numpy()
  assert got.dtype == np.uint32 and int(got) == BIG + 10


def test_interpreter_chunks_a_big_reduce(monkeypatch):
  # the oracle evaluates a REDUCE too big for one chunk over slices of its range, with bounded memory
  monkeypatch.setenv("BACKEND", "interp")
  monkeypatch.setattr(interp, "CHUNK_ELEMENTS", 64)
  biggest = [0]
  plain_eval = interp.InterpretedKernel._eval

  def spy(self, *args):
    out = plain_eval(self, *args)
    biggest[0] = max(biggest[0], getattr(out, "size", 0))
    return out
  monkeypatch.setattr(interp.InterpretedKernel, "_eval", spy)
  a = np.arange(37 * 300, dtype=np.float32).reshape(37, 300) % 17 - 8
  np.testing.assert_allclose(Tensor(a).sum(axis=1).numpy(), a.sum(1), rtol=1e-6)
  np.testing.assert_allclose(Tensor(a).sum().numpy(), a.sum(), rtol=1e-6)
  np.testing.assert_array_equal(Tensor(a).max(axis=0).numpy(), a.max(0))
  np.testing.assert_allclose((Tensor(a) * 0.1).exp().sum(axis=0).numpy(), np.exp(a * np.float32(0.1)).sum(0),
                             rtol=1e-5)
  assert 0 < biggest[0] <= 64


def test_codegen_refuses_an_int32_index_into_a_buffer_past_int32():
  from compiler.codegen import CodegenError, get_program
  from compiler.uop import UOp
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.uint8.ptr(BIG + 1), (), 0)
  r = UOp.range(16, 0)
  ast = UOp.sink(buf.index(r).store(UOp.const(dtypes.uint8, 1)))
  with pytest.raises(CodegenError, match="2147483649 elements indexed with int32"):
    get_program(ast)


BIG_BUFFER = """
import numpy as np
from compiler.dtype import dtypes
from compiler.tensor import Tensor
x = Tensor.ones(2**16, 2**15 + 1, dtype=dtypes.uint8).contiguous()
r = x.sum(axis=1).numpy()
print(r.dtype, r.shape, int(r.min()), int(r.max()))
"""


def test_big_buffer_sum_past_int32_allocates_2gib():
  """ALLOCATES 2.0 GiB (the one big-buffer test here): a 2**31+2**16-byte buffer, read by a compiled kernel, was
  indexed in int32 and segfaulted (exit 139); it runs in a child process so a crash cannot take pytest down."""
  p = subprocess.run([sys.executable, "-c", BIG_BUFFER], capture_output=True, text=True, timeout=600,
                     env={**os.environ, "BACKEND": "llvm"})
  assert p.returncode == 0, p.stderr[-2000:]
  assert p.stdout.split() == ["uint32", "(65536,)", "32769", "32769"]


# ---- item 12: valid programs that failed with internal errors

@pytest.mark.parametrize("n", [1000, 4000])
def test_chained_reshapes_fold(backend, n):
  t = Tensor([1.0, 2.0, 3.0, 4.0]) + 1  # lazy: the reshapes reach the scheduler as one chain
  for _ in range(n):
    t = t.reshape(2, 2).reshape(4)
  np.testing.assert_array_equal(t.numpy(), [2.0, 3.0, 4.0, 5.0])


def test_a_real_rewrite_loop_is_still_caught():
  from compiler.rewrite import PatternMatcher, RewriteLoopError, UPat, graph_rewrite
  from compiler.uop import UOp
  grow = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x + UOp.const(x.dtype, 0).alu(Ops.MUL, x))])
  with pytest.raises(RewriteLoopError, match="does not converge"):
    graph_rewrite(UOp.variable("a", 0, 9) + 1, grow, name="grow")


@pytest.mark.parametrize("n", [600, 1100])
def test_a_kernel_of_more_than_1024_buffers_runs(backend, n):
  ts = [Tensor(np.full(3, i, np.float32)) for i in range(n)]
  t = ts[0]
  for x in ts[1:]:
    t = t + x
  assert [len(si.bufs) for si in t.schedule()] == [n + 1]  # one kernel reads them all
  np.testing.assert_array_equal(t.numpy(), np.full(3, n * (n - 1) / 2, np.float32))


def test_few_buffers_keep_one_noalias_pointer_each():
  from compiler.codegen import get_program
  si = (Tensor([1.0]) + Tensor([2.0])).schedule()[0]
  assert get_program(si.ast).src.count("ptr noalias %data") == 3


# ---- item 12: integer division by zero and INT_MIN // -1. tinygrad documents `idiv` as truncating and its Python
# reference ALU gives x // 0 == 0; % by zero it leaves undefined. Here both are defined as numpy computes them:
# x // 0 == 0, x % 0 == 0, INT_MIN // -1 wraps to INT_MIN, INT_MIN % -1 == 0 (the LLVM backend guards the
# divisor, as sdiv/srem by 0 or of INT_MIN by -1 is undefined behaviour in LLVM IR)

@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64", "uint8", "uint32"])
def test_integer_division_corner_cases_match_numpy(backend, dt):
  info = np.iinfo(dt)
  edge = [0, 1, -1, 7, -7, info.min, info.max, info.min + 1] if info.min < 0 else [0, 1, 7, info.max, info.max - 1]
  a = np.array(edge, dt).repeat(len(edge))
  b = np.tile(np.array(edge, dt), len(edge))  # every pair, 64 lanes: the compiled kernel is vectorized
  with np.errstate(all="ignore"):
    want_q, want_r = a // b, a % b
  np.testing.assert_array_equal((Tensor(a) // Tensor(b)).numpy(), want_q)
  np.testing.assert_array_equal((Tensor(a) % Tensor(b)).numpy(), want_r)


def test_integer_division_by_constant_zero_and_minus_one(backend):
  a = Tensor([0, 5, -7, -2**31], dtype=dtypes.int32)
  np.testing.assert_array_equal((a // 0).numpy(), [0, 0, 0, 0])
  np.testing.assert_array_equal((a % 0).numpy(), [0, 0, 0, 0])
  np.testing.assert_array_equal((a // -1).numpy(), [0, -5, 7, -2**31])
  np.testing.assert_array_equal((a % -1).numpy(), [0, 0, 0, 0])
  np.testing.assert_array_equal(a.fmod(Tensor.zeros(4, dtype=dtypes.int32)).numpy(), [0, 0, 0, 0])
