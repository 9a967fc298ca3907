"""The numpy reference interpreter on hand-built kernel ASTs, and the pluggable backends of run_schedule."""
import itertools
import math

import numpy as np
import pytest

from compiler import Tensor, dtypes
from compiler import realize as realize_mod
from compiler.runtime import interpreter
from compiler.runtime.buffer import Buffer
from compiler.runtime.interpreter import InterpretedKernel, InterpreterError, interpret
from compiler.schedule.rangeify import ScheduleItem
from compiler.uop import AxisType, KernelInfo, Ops, UOp, exec_alu


def g(slot: int, dt=dtypes.float32, size: int = 16) -> UOp:
  return UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), (), slot)


def rng_(n: int, axis: int, kind=AxisType.LOOP) -> UOp:
  return UOp.range(n, axis, kind)


def kernel(*stores: UOp, name: str = "test") -> UOp:
  return UOp.sink(*stores, arg=KernelInfo(name=name))


def test_copy_with_offset_and_reverse():
  r = rng_(8, 0)
  src = np.arange(16, dtype=np.float32)
  out = np.zeros(8, np.float32)
  ast = kernel(g(0, size=8).index(r).store(g(1).index((r * -1) + 15).load()))
  interpret(ast, [out, src])
  np.testing.assert_array_equal(out, src[::-1][:8])


def test_2d_transpose_and_buffers():
  r0, r1 = rng_(3, 0), rng_(4, 1)
  a = Buffer(dtypes.float32, 12, np.arange(12, dtype=np.float32))
  out = Buffer(dtypes.float32, 12)
  ast = kernel(g(0, size=12).index(r0 * 4 + r1).store(g(1, size=12).index(r1 * 3 + r0).load()))
  interpret(ast, [out, a])
  np.testing.assert_array_equal(out.numpy().reshape(3, 4), np.arange(12).reshape(4, 3).T)


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL, Ops.MAX])
def test_reduce(op):
  r0, r1 = rng_(4, 0), rng_(5, 1, AxisType.REDUCE)
  data = np.random.default_rng(0).standard_normal(20).astype(np.float32)
  out = np.zeros(4, np.float32)
  val = g(1, size=20).index(r0 * 5 + r1).load()
  interpret(kernel(g(0, size=4).index(r0).store(val.reduce(r1, op=op))), [out, data])
  ref = {Ops.ADD: np.sum, Ops.MUL: np.prod, Ops.MAX: np.max}[op](data.reshape(4, 5), axis=1)
  np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_reduce_of_value_not_using_its_range():
  # summing a constant over a range of 6 counts the range even though the value does not depend on it
  r0, r1 = rng_(3, 0), rng_(6, 1, AxisType.REDUCE)
  out = np.zeros(3, np.int32)
  interpret(kernel(g(0, dtypes.int32, 3).index(r0).store(UOp.const(dtypes.int32, 2).reduce(r1))), [out])
  np.testing.assert_array_equal(out, [12, 12, 12])


def test_gated_load_reads_zero_and_never_dereferences():
  r = rng_(10, 0)
  data = np.arange(1, 5, dtype=np.float32)  # 4 elements, read at r-3 for 3 <= r < 7
  valid = UOp.const(dtypes.index, 2).alu(Ops.CMPLT, r).alu(Ops.AND, r.alu(Ops.CMPLT, 7))
  out = np.full(10, -1, np.float32)
  interpret(kernel(g(0, size=10).index(r).store(g(1, size=4).index(r - 3, valid).load())), [out, data])
  np.testing.assert_array_equal(out, [0, 0, 0, 1, 2, 3, 4, 0, 0, 0])


def test_out_of_bounds_is_an_error():
  r = rng_(8, 0)
  ast = kernel(g(0, size=8).index(r).store(g(1, size=4).index(r).load()), name="oob")
  with pytest.raises(InterpreterError, match="oob.*out of bounds"):
    interpret(ast, [np.zeros(8, np.float32), np.zeros(4, np.float32)])
  ast = kernel(g(0, size=4).index(r).store(UOp.const(dtypes.float32, 1.0)))
  with pytest.raises(InterpreterError, match="out of bounds"):
    interpret(ast, [np.zeros(4, np.float32)])


def test_buffer_checks():
  r = rng_(4, 0)
  ast = kernel(g(0, size=4).index(r).store(g(1, size=4).index(r).load()))
  with pytest.raises(InterpreterError, match="slot 1"):
    interpret(ast, [np.zeros(4, np.float32)])
  with pytest.raises(InterpreterError, match="int32"):
    interpret(ast, [np.zeros(4, np.float32), np.zeros(4, np.int32)])
  with pytest.raises(InterpreterError, match="SINK"):
    InterpretedKernel(r)
  bad = kernel(g(0, size=4).index(r).store(UOp(Ops.VECTORIZE, dtypes.float32, (UOp.const(dtypes.float32, 1.0),))))
  with pytest.raises(InterpreterError, match="VECTORIZE"):
    interpret(bad, [np.zeros(4, np.float32)])


INT_VALUES = [-7, -3, -1, 0, 2, 5, 7]


@pytest.mark.parametrize("op", [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
                                Ops.AND, Ops.OR, Ops.XOR])
@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.int8])
def test_int_alu_matches_exec_alu(op, dt):
  """C semantics (wrapping, truncating division) agree with the Python model in compiler.uop."""
  pairs = [(a, b) for a, b in itertools.product(INT_VALUES + [dtypes.max(dt), dtypes.min(dt)], repeat=2)
           if not (op in (Ops.IDIV, Ops.MOD) and b == 0)]
  n = len(pairs)
  a = np.array([p[0] for p in pairs], dt.np)
  b = np.array([p[1] for p in pairs], dt.np)
  r = rng_(n, 0)
  val = g(1, dt, n).index(r).load().alu(op, g(2, dt, n).index(r).load())
  out = np.zeros(n, val.dtype.np)
  interpret(kernel(g(0, val.dtype, n).index(r).store(val)), [out, a, b])
  ref = [exec_alu(op, val.dtype, (int(x), int(y))) for x, y in zip(a, b)]
  np.testing.assert_array_equal(out, np.array(ref, val.dtype.np))


@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC])
def test_float_unary_matches_exec_alu(op):
  xs = np.array([0.5, 1.0, 2.25, 3.7, -1.5, 0.0], np.float32)
  r = rng_(len(xs), 0)
  out = np.zeros(len(xs), np.float32)
  interpret(kernel(g(0, size=6).index(r).store(g(1, size=6).index(r).load().alu(op))), [out, xs])
  ref = np.array([exec_alu(op, dtypes.float32, (float(x),)) for x in xs], np.float32)
  np.testing.assert_allclose(out, ref, rtol=1e-6, equal_nan=True)


def test_where_cast_bitcast_const():
  r = rng_(4, 0)
  x = g(1, size=4).index(r).load()
  val = (x < 0).where(x.cast(dtypes.int32).cast(dtypes.float32), UOp.const(dtypes.float32, 9.0))
  out = np.zeros(4, np.float32)
  interpret(kernel(g(0, size=4).index(r).store(val)), [out, np.array([-1.5, 2.0, -3.7, 0.0], np.float32)])
  np.testing.assert_array_equal(out, [-1.0, 9.0, -3.0, 9.0])
  outi = np.zeros(4, np.int32)
  interpret(kernel(g(0, dtypes.int32, 4).index(r).store(x.bitcast(dtypes.int32))), [outi, np.ones(4, np.float32)])
  np.testing.assert_array_equal(outi, np.ones(4, np.float32).view(np.int32))


def test_define_var():
  r = rng_(3, 0)
  v = UOp.variable("n", 0, 10)
  out = np.zeros(3, np.int32)
  interpret(kernel(g(0, dtypes.int32, 3).index(r).store(r + v)), [out], {"n": 5})
  np.testing.assert_array_equal(out, [5, 6, 7])


def test_chunking_gives_the_same_result(monkeypatch):
  x = np.random.default_rng(1).standard_normal((40, 30)).astype(np.float32)
  w = np.random.default_rng(2).standard_normal((30, 20)).astype(np.float32)
  t = Tensor(x) @ Tensor(w)
  (si,) = t.schedule()
  whole = [Buffer(b.dtype, b.size) for b in si.bufs]
  whole[1].copyin(x)
  whole[2].copyin(w)
  interpret(si.ast, whole)
  monkeypatch.setattr(interpreter, "CHUNK_ELEMENTS", 700)  # forces many chunks of the first output range
  chunked = [Buffer(b.dtype, b.size) for b in si.bufs]
  chunked[1].copyin(x)
  chunked[2].copyin(w)
  InterpretedKernel(si.ast)(chunked)
  np.testing.assert_array_equal(whole[0].numpy(), chunked[0].numpy())
  np.testing.assert_allclose(whole[0].numpy().reshape(40, 20), x @ w, rtol=1e-4, atol=1e-4)


# ---- run_schedule and backends

def test_unknown_backend():
  with pytest.raises(ValueError, match="unknown backend 'nope'"):
    realize_mod.get_runner(kernel(), "nope")


def test_register_backend_and_env(monkeypatch):
  calls = []

  def factory(ast):
    calls.append(ast.arg.name)
    return lambda bufs: interpret(ast, bufs)
  realize_mod.register_backend("spy", factory)
  monkeypatch.setenv("BACKEND", "spy")
  a = Tensor(np.arange(6, dtype=np.float32)) * 3
  np.testing.assert_array_equal(a.numpy(), np.arange(6) * 3)
  assert calls and calls[0].startswith("E_6")
  assert realize_mod.default_backend() == "spy"
  monkeypatch.delenv("BACKEND")
  assert realize_mod.default_backend() == realize_mod.DEFAULT_BACKEND


def test_run_schedule_allocates_and_runs_in_order():
  x = Tensor(np.arange(8, dtype=np.float32))
  y = (x * 2).contiguous() + 1
  sched = y.schedule()
  assert len(sched) == 2 and all(isinstance(si, ScheduleItem) for si in sched)
  assert sched[0].bufs[0] is sched[1].bufs[1]  # the second kernel reads what the first writes
  realize_mod.run_schedule(sched, backend="interp")
  np.testing.assert_array_equal(sched[1].bufs[0].numpy(), np.arange(8) * 2 + 1)


@pytest.mark.parametrize("backend", ["interp", "llvm"])
@pytest.mark.parametrize("src", [dtypes.float16, dtypes.float32, dtypes.float64], ids=str)
def test_float_to_int_casts_saturate(backend, src, monkeypatch):
  """Out-of-range and NaN float -> int casts are defined alike on both backends: clamped, NaN -> 0."""
  monkeypatch.setenv("BACKEND", backend)
  with np.errstate(over="ignore"):  # 3e9 is inf in half
    x = np.array([3e9, -3e9, np.nan, np.inf, -np.inf, 2.7, -2.7, 255.9, -0.5, 7e4], np.float64).astype(src.np)
  for dst in [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64]:
    info = np.iinfo(dst.np)
    want = [int(min(max(math.trunc(v), info.min), info.max)) if math.isfinite(v) else
            (0 if math.isnan(v) else (info.max if v > 0 else info.min)) for v in x.astype(np.float64)]
    np.testing.assert_array_equal(Tensor(x).cast(dst).numpy(), np.array(want, dst.np), err_msg=f"{src} -> {dst}")
