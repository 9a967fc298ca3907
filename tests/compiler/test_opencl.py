"""BACKEND=cl (compiler/codegen/opencl.py, compiler/runtime/opencl.py) on Debian's pocl: the same values as the LLVM
backend bit for bit where its ops are exact (nan, inf, -0.0, IEEE maximum, saturating casts, guarded integer
division, half rounding), the transcendentals within the LLVM backend's ulps of float64, vectors of every width,
global ids, the device's limits and its compiler's errors."""
from __future__ import annotations

import numpy as np
import pytest
from support.tensor_values import same_bits

from compiler.codegen.expander import register_pieces
from compiler.codegen.linearizer import linearize
from compiler.codegen.opencl import cl_program, const_text, global_ranges, pad_width
from compiler.codegen.program import lower_ast
from compiler.dtype import dtypes
from compiler.host import vector_bytes
from compiler.opt import Kernel, Opt, OptOps
from compiler.opt.target import cl_target
from compiler.runtime.buffer import Buffer
from compiler.runtime.interpreter import InterpretedKernel
from compiler.runtime.opencl import BUILD_OPTIONS, ClKernel, OpenCLError, cl_kernel, get_device
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import Tensor

F32_SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38, 0.5, 2.5,
                         -2.5, 1e10, -1e10, 7.0, 1 / 3], dtype=np.float32)


def on(monkeypatch, backend: str, fn, *arrays: np.ndarray) -> np.ndarray:
  """fn of fresh Tensors of `arrays` realized on `backend` (fresh buffers: no result of another backend is reused)."""
  monkeypatch.setenv("BACKEND", backend)
  return fn(*[Tensor(a.copy()) for a in arrays]).numpy()


def pairs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Every ordered pair of values, as two flat arrays."""
  a, b = np.meshgrid(values, values, indexing="ij")
  return a.ravel().copy(), b.ravel().copy()


BINARY = {
  "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
  "maximum": lambda a, b: a.maximum(b), "minimum": lambda a, b: a.minimum(b), "lt": lambda a, b: a < b,
  "ne": lambda a, b: a != b, "eq": lambda a, b: a == b, "where": lambda a, b: (a < b).where(a, b),
}
UNARY = {"neg": lambda a: -a, "sqrt": lambda a: a.sqrt(), "trunc": lambda a: a.trunc(), "recip": lambda a: 1 / a,
         "relu": lambda a: a.relu()}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_float_binary_specials_as_llvm(monkeypatch, name):
  a, b = pairs(F32_SPECIALS)
  same_bits(on(monkeypatch, "cl", BINARY[name], a, b), on(monkeypatch, "llvm", BINARY[name], a, b))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_float_unary_specials_as_llvm(monkeypatch, name):
  same_bits(on(monkeypatch, "cl", UNARY[name], F32_SPECIALS), on(monkeypatch, "llvm", UNARY[name], F32_SPECIALS))


def test_max_is_ieee_maximum(monkeypatch):
  """+0.0 above -0.0 in either order and NaN from either side (fmax would give 1.0 for max(nan, 1))."""
  a = np.array([-0.0, 0.0, np.nan, 1.0, -0.0], dtype=np.float32)
  b = np.array([0.0, -0.0, 1.0, np.nan, -0.0], dtype=np.float32)
  got = on(monkeypatch, "cl", lambda x, y: x.maximum(y), a, b)
  assert not np.signbit(got[0]) and not np.signbit(got[1]) and np.signbit(got[4])
  assert np.isnan(got[2]) and np.isnan(got[3])
  red = on(monkeypatch, "cl", lambda x: x.max(), np.array([-0.0, 0.0, -0.0], dtype=np.float32))
  assert red == 0 and not np.signbit(red)


def _ulps(got: np.ndarray, x: np.ndarray, f) -> float:
  ref = f(x.astype(np.float64))
  ok = np.isfinite(ref) & (np.abs(ref) < 3e38)
  spacing = np.spacing(np.abs(ref[ok]).astype(np.float32)).astype(np.float64)
  return float(np.max(np.abs(got[ok].astype(np.float64) - ref[ok]) / spacing))


@pytest.mark.parametrize("name", ["exp2", "log2", "sin"])
def test_transcendentals_within_llvms_ulps(monkeypatch, name):
  """Against float64 numpy: the OpenCL builtins' error is at most 1 ulp, as the LLVM backend's (measured 0.80,
  0.54, 0.50 here against LLVM's 0.77, 0.67, 0.50)."""
  rng = np.random.default_rng(1)
  x = {"exp2": rng.uniform(-150, 128, 4000), "log2": np.exp(rng.uniform(-80, 80, 4000)),
       "sin": np.concatenate([rng.uniform(-10, 10, 2000), rng.uniform(-1e4, 1e4, 2000)])}[name].astype(np.float32)
  fn = lambda t: getattr(t, name)()  # noqa: E731
  cl, llvm = on(monkeypatch, "cl", fn, x), on(monkeypatch, "llvm", fn, x)
  assert _ulps(cl, x, getattr(np, name)) <= 1.0
  assert _ulps(llvm, x, getattr(np, name)) <= 1.0
  specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=np.float32)
  same_bits(on(monkeypatch, "cl", fn, specials), on(monkeypatch, "llvm", fn, specials))


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64,
                                dtypes.bool, dtypes.float16, dtypes.float64])
def test_casts_as_llvm(monkeypatch, dt):
  """float -> int saturates (NaN -> 0, inf -> the extreme), float -> bool is != 0 (NaN true)."""
  x = np.concatenate([F32_SPECIALS, np.array([300.7, -300.7, 65519.0, 65520.0, 1e5, 2.9e9, -2.9e9], np.float32)])
  same_bits(on(monkeypatch, "cl", lambda t: t.cast(dt), x), on(monkeypatch, "llvm", lambda t: t.cast(dt), x))


def test_int_division_and_wrapping_as_llvm(monkeypatch):
  """x // 0 and x % 0 are 0, INT_MIN // -1 wraps, INT_MIN % -1 is 0, + and * wrap (no undefined behaviour)."""
  vals = np.array([0, 1, -1, 7, -7, 3, 2**31 - 1, -2**31], dtype=np.int32)
  a, b = pairs(vals)
  for fn in (lambda x, y: x // y, lambda x, y: x % y, lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x - y,
             lambda x, y: x.maximum(y), lambda x, y: x < y):
    same_bits(on(monkeypatch, "cl", fn, a, b), on(monkeypatch, "llvm", fn, a, b))


def test_shifts_as_llvm(monkeypatch):
  a = np.array([1, -8, 2**30, -2**31, 12345, 7], dtype=np.int32)
  b = np.array([0, 1, 3, 31, 5, 2], dtype=np.int32)
  for fn in (lambda x, y: x << y, lambda x, y: x >> y):
    same_bits(on(monkeypatch, "cl", fn, a, b), on(monkeypatch, "llvm", fn, a, b))


def test_half_rounded_once_an_op_as_llvm(monkeypatch):
  """Half in memory only (pocl has no cl_khr_fp16): each op computed in float and rounded to half once."""
  rng = np.random.default_rng(2)
  a = np.concatenate([rng.uniform(-100, 100, 500), [65504, -65504, 0.0, -0.0, np.inf, np.nan, 6e-8]]).astype(np.float16)
  b = np.concatenate([rng.uniform(-3, 3, 500), [2.0, 0.5, -0.0, 3.0, 1.0, 1.0, 0.5]]).astype(np.float16)
  for fn in (lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x / y, lambda x, y: x.maximum(y),
             lambda x, y: (x * y + x).sqrt(), lambda x, y: (x / 64).exp2(), lambda x, y: x.cast(dtypes.int16),
             lambda x, y: x.sum(), lambda x, y: x.float() * 1.001):
    same_bits(on(monkeypatch, "cl", fn, a, b), on(monkeypatch, "llvm", fn, a, b))


def test_double_to_half_rounds_once(monkeypatch):
  """65519.99 in float64 is below the half rounding boundary to inf, but rounds up to 65520.0 in float32 first."""
  x = np.array([65519.99, 1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40)], dtype=np.float64)
  got = on(monkeypatch, "cl", lambda t: t.cast(dtypes.float16), x)
  np.testing.assert_array_equal(got, x.astype(np.float16))
  assert got[0] == 65504


def _kernel_ast(fn, *arrays):
  (si,) = [s for s in create_schedule([fn(*[Tensor(a) for a in arrays]).uop])[0]]
  return si


@pytest.mark.parametrize("amt", [2, 3, 5, 6, 8, 12, 16])
def test_upcast_vectors_of_every_width(amt):
  """An UPCAST of amt lanes: OpenCL vectors of 2/3/4/8/16 lanes, a count between them padded; values as the
  interpreter's, for float math, a compare, a select, a bool and an int cast. The lanes come in the pieces the
  expander forms for this CPU's registers (12 floats: one vector of 16 with AVX-512, 8 + 4 with AVX2, whose
  test failed when it expected one float16 there)."""
  x = np.random.default_rng(3).uniform(-4, 4, (4, 240)).astype(np.float32)
  si = _kernel_ast(lambda t: ((t * 3 - 1).maximum(t.sqrt()) + (t < 1).where(t, -t) + (t > 0).cast(dtypes.int32)), x)
  k = Kernel(si.ast, cl_target("test", 256, 65536)).apply_opts([Opt(OptOps.UPCAST, 1, amt)])
  ast = k.get_optimized_ast()
  prg = cl_program(ast)
  widths = {len(p) for p in register_pieces(list(range(amt)), vector_bytes() // 4)}
  assert all(f"float{pad_width(w)} " in prg.src for w in widths), widths
  assert all(pad_width(w) == min(v for v in (2, 3, 4, 8, 16) if v >= w) for w in widths)
  got = [Buffer(b.dtype, b.size) for b in si.bufs]
  want = [Buffer(b.dtype, b.size) for b in si.bufs]
  for g, w, b in zip(got, want, si.bufs):
    for buf in (g, w):
      buf.ensure_allocated(zero=True)
      if b.allocated:
        buf.np[:] = b.np
  cl_kernel(ast)(got)
  InterpretedKernel(si.ast)(want)
  same_bits(got[0].np, want[0].np)


def test_outer_loops_become_global_ids():
  """Of 4 output axes the 3 outermost are get_global_id (the innermost of them dimension 0), the 4th a loop."""
  x = np.arange(2 * 3 * 5 * 7, dtype=np.float32).reshape(2, 3, 5, 7)
  si = _kernel_ast(lambda t: t * 2 + 1, x)
  lin = linearize(lower_ast(si.ast), "t")
  glob = global_ranges(lin)
  assert [r.src[0].arg for r in glob] == [2, 3, 5]
  prg = cl_program(si.ast)
  assert prg.global_dims() == [5, 3, 2]
  assert "get_global_id(0)" in prg.src and "get_global_id(2)" in prg.src and "for (" in prg.src
  out = [Buffer(b.dtype, b.size) for b in si.bufs]
  for o, b in zip(out, si.bufs):
    o.ensure_allocated(zero=True)
    if b.allocated:
      o.np[:] = b.np
  ClKernel(prg, get_device())(out)
  np.testing.assert_array_equal(out[0].np, (x * 2 + 1).ravel())


def test_no_fast_math():
  src = cl_program(_kernel_ast(lambda t: t / 3, np.ones(4, np.float32)).ast).src
  assert "#pragma OPENCL FP_CONTRACT OFF" in src
  assert "-cl-fp32-correctly-rounded-divide-sqrt" in BUILD_OPTIONS
  assert not any("fast" in o or "mad" in o for o in BUILD_OPTIONS)


def test_constants_are_exact():
  assert const_text(0.1, dtypes.float32) == float(np.float32(0.1)).hex() + "f"
  assert const_text(-0.0, dtypes.float64) == "-0x0.0p+0"
  assert const_text(-2**31, dtypes.int32) == "(-2147483647-1)"
  assert const_text(2**64 - 1, dtypes.uint64) == "18446744073709551615uL"


def test_device_limits_and_target():
  lim = get_device().limits
  assert lim.max_work_group_size >= 1 and lim.local_mem_bytes > 0 and 1 <= lim.max_dims == len(lim.max_work_item_sizes)
  t = cl_target(lim.name, lim.max_work_group_size, lim.local_mem_bytes)
  assert t.has_local and t.has_shared and t.local_max == lim.max_work_group_size
  assert t.shared_max == lim.local_mem_bytes and t.threads == 1


def test_build_error_names_kernel_and_log():
  with pytest.raises(OpenCLError, match=r"(?s)kernel 'broken'.*undeclared"):
    get_device().build("__kernel void broken(__global float* a) { a[0] = nothere; }", "broken")


def test_launch_is_timed_by_profiling_event(monkeypatch):
  x = np.ones(1 << 16, np.float32)
  si = _kernel_ast(lambda t: t * 2, x)
  out = [Buffer(b.dtype, b.size) for b in si.bufs]
  for o, b in zip(out, si.bufs):
    o.ensure_allocated(zero=True)
    if b.allocated:
      o.np[:] = b.np
  k = cl_kernel(si.ast)
  secs = k(out)
  assert secs == k.last_s and 0 < secs < 10
  assert (out[0].np == 2).all()


def test_local_axis_is_a_work_group():
  """LOCAL 4 of a (6, 8) kernel's last axis: the work-items of a work-group of 4 share the LOCAL axis (get_local_id),
  global axes are work-groups of one; values as the interpreter's."""
  x = np.random.default_rng(4).uniform(-1, 1, (6, 8)).astype(np.float32)
  si = _kernel_ast(lambda t: (t * 3 + 2).sqrt() - t.maximum(0.25), x)
  k = Kernel(si.ast, cl_target("test", 256, 65536)).apply_opts([Opt(OptOps.LOCAL, 1, 4)])
  prg = cl_program(k.get_optimized_ast())
  assert "get_local_id(0)" in prg.src
  assert prg.local_dims() == [4, 1, 1] and prg.global_dims() == [4, 2, 6]
  out = [Buffer(b.dtype, b.size) for b in si.bufs]
  for o, b in zip(out, si.bufs):
    o.ensure_allocated(zero=True)
    if b.allocated:
      o.np[:] = b.np
  want = [Buffer(b.dtype, b.size) for b in si.bufs]
  for w, b in zip(want, si.bufs):
    w.ensure_allocated(zero=True)
    if b.allocated:
      w.np[:] = b.np
  ClKernel(prg, get_device())(out)
  InterpretedKernel(si.ast)(want)
  same_bits(out[0].np, want[0].np)
