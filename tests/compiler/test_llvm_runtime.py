"""The LLVM runtime: every dtype and ALU op vs the IR's own semantics (exec_alu) / numpy, casts, threads,
argument checks and what goes into the trace."""
from __future__ import annotations

import math
import os
import warnings

import llvmlite.binding as llvm
import numpy as np
import pytest
from support.codegen_helpers import (  # noqa: E402  # noqa: E402
  FLOAT_EXACT,
  INT_OPS,
  TH,
  UP,
  G,
  N,
  _arity,
  _inputs,
  alu_kernel,
  buf,
  elementwise,
  expected,
  matmul,
  rng,
  run,
  sample,
  sink,
  split,
)

from compiler.codegen import get_program
from compiler.codegen.llvmir import host_features
from compiler.dtype import DType, dtypes
from compiler.host import ISA_PRESETS, host_cpu
from compiler.opt.target import host_target
from compiler.runtime.compiled import MIN_WORK_PER_THREAD, compile_kernel
from compiler.runtime.llvm import get_jit
from compiler.trace import recorder
from compiler.uop import GroupOp, KernelInfo, Ops, UOp, exec_alu
from vztrace.reader import TraceReader

BOOL_OPS = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.NEG, Ops.WHERE]






@pytest.mark.parametrize("dt", dtypes.ints, ids=str)
@pytest.mark.parametrize("op", INT_OPS, ids=lambda o: o.name)
def test_int_alu(op, dt):
  ins = _inputs(op, dt)
  out_dt = dtypes.bool if op in GroupOp.Comparison else dt
  out = run(alu_kernel(op, dt, len(ins)), np.zeros(N, out_dt.np), *ins)[0]
  np.testing.assert_array_equal(out, expected(op, dt, ins))


@pytest.mark.parametrize("op", BOOL_OPS, ids=lambda o: o.name)
def test_bool_alu(op):
  ins = _inputs(op, dtypes.bool)
  out = run(alu_kernel(op, dtypes.bool, len(ins)), np.zeros(N, bool), *ins)[0]
  np.testing.assert_array_equal(out, expected(op, dtypes.bool, ins))


@pytest.mark.parametrize("dt", dtypes.floats, ids=str)
@pytest.mark.parametrize("op", FLOAT_EXACT, ids=lambda o: o.name)
def test_float_alu_exact(op, dt):
  """Correctly rounded ops match the IR semantics bit for bit (inf, nan and -0.0 included)."""
  ins = _inputs(op, dt)
  out_dt = dtypes.bool if op in GroupOp.Comparison else dt
  out = run(alu_kernel(op, dt, len(ins)), np.zeros(N, out_dt.np), *ins)[0]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    np.testing.assert_array_equal(out, expected(op, dt, ins))


NP_FN = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.MAX: np.maximum, Ops.POW: np.power,
         Ops.MULACC: lambda a, b, c: a * b + c}


@pytest.mark.parametrize("dt", dtypes.floats, ids=str)
@pytest.mark.parametrize("op", list(NP_FN), ids=lambda o: o.name)
def test_float_alu_vs_numpy(op, dt):
  ins = [sample(dt) for _ in range(_arity(op))]
  if op is Ops.POW:
    ins[0] = np.abs(ins[0])
  out = run(alu_kernel(op, dt, len(ins)), np.zeros(N, dt.np), *ins)[0]
  with np.errstate(all="ignore"):
    ref = NP_FN[op](*[x.astype(np.float64) for x in ins]).astype(dt.np)
  tol = {dtypes.float16: 2e-3, dtypes.float32: 2e-6, dtypes.float64: 1e-12}[dt]
  np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


def _cast_values(src: DType, dst: DType) -> np.ndarray:
  if src == dtypes.bool:
    return sample(src)
  vals = [0, 1, 2, 5, 7, 100, 127, 3.75, 99.5]
  if not dtypes.is_unsigned(src) and not (dtypes.is_float(src) and (dtypes.is_unsigned(dst))):
    vals += [-1, -7, -3.5]
  if dtypes.is_float(src) and dst == dtypes.bool:
    vals += [math.nan, math.inf, -0.0]
  return np.array([v for v in vals if dtypes.is_float(src) or float(v).is_integer()]).astype(src.np)


@pytest.mark.parametrize("src", dtypes.all, ids=str)
def test_casts_between_all_dtypes(src):
  """One kernel per source dtype storing its casts to every dtype; compared with numpy's astype."""
  dsts = list(dtypes.all)
  i = UOp.range(1, 0, G)
  vals = _cast_values(src, dtypes.float32)
  n = len(vals)
  i = UOp.range(n, 0, G)
  x = buf(0, n, src).index(i).load()
  ast = sink(*[buf(k + 1, n, d).index(i).store(x.cast(d)) for k, d in enumerate(dsts)], name=f"cast_{src.name}")
  for d in dsts:  # values safe for this destination (no float -> unsigned of negatives)
    vals_d = _cast_values(src, d)
    outs = run(ast, np.resize(vals_d, n).astype(src.np), *[np.zeros(n, dd.np) for dd in dsts])
    with np.errstate(all="ignore"):
      ref = np.resize(vals_d, n).astype(src.np).astype(d.np)
    np.testing.assert_array_equal(outs[1 + dsts.index(d)], ref, err_msg=f"{src} -> {d}")


def test_bitcast():
  i = UOp.range(4, 0, G)
  ast = sink(buf(0, 4, dtypes.int32).index(i).store(buf(1, 4).index(i).load().bitcast(dtypes.int32)))
  a = np.array([1.0, -2.5, np.inf, 0.0], np.float32)
  np.testing.assert_array_equal(run(ast, np.zeros(4, np.int32), a)[0], a.view(np.int32))


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.float64, dtypes.int8, dtypes.uint16, dtypes.int64], ids=str)
def test_vectorized_dtypes(dt):
  """Upcast elementwise kernels of other dtypes (vector loads/stores of i8, half, double, ...)."""
  i, j = UOp.range(4, 0, G), UOp.range(16, 1, G)
  a, b = buf(1, 64, dt).index(i * 16 + j).load(), buf(2, 64, dt).index(i * 16 + j).load()
  ast = split(sink(buf(0, 64, dt).index(i * 16 + j).store(a * b + a)), 1, 8, UP)
  assert f"<8 x {'half' if dt == dtypes.float16 else ''}" in get_program(ast).src
  x, y = sample(dt, 64, special=False), sample(dt, 64, special=False)
  ref = np.array([exec_alu(Ops.ADD, dt, (exec_alu(Ops.MUL, dt, (p.item(), q.item())), p.item())) for p, q in zip(x, y)],
                 dt.np)
  out = run(ast, np.zeros(64, dt.np), x, y)[0]
  if dtypes.is_float(dt):  # `contract` may fuse into an fma: one rounding fewer, so the error is bounded by the
    # rounding of the product, not of the (possibly cancelling) sum
    xs, ys = x.astype(np.float64), y.astype(np.float64)
    bound = 2 * np.finfo(dt.np).eps * (np.abs(xs * ys) + np.abs(xs))
    assert (np.abs(out.astype(np.float64) - ref.astype(np.float64)) <= bound).all(), (out, ref)
  else:
    np.testing.assert_array_equal(out, ref)


def test_vector_bool_store_and_compare():
  i, j = UOp.range(2, 0, G), UOp.range(8, 1, G)
  a = buf(1, 16).index(i * 8 + j).load()
  ast = split(sink(buf(0, 16, dtypes.bool).index(i * 8 + j).store(a < 0.5)), 1, 8, UP)
  x = sample(dtypes.float32, 16, special=False)
  np.testing.assert_array_equal(run(ast, np.zeros(16, bool), x)[0], x < 0.5)


# ---- variables, threads, argument checks

def test_define_var_kernel():
  n = UOp.variable("n", 1, 64)
  i = UOp(Ops.RANGE, dtypes.int32, (n,), (0, G))
  ast = sink(buf(0, 64).index(i).store(buf(1, 64).index(i).load() * 3.0), name="E_var")
  ck = compile_kernel(ast)
  a, out = rng.standard_normal(64).astype(np.float32), np.zeros(64, np.float32)
  ck([out, a], var_vals={"n": 10})
  np.testing.assert_allclose(out[:10], a[:10] * 3)
  assert not out[10:].any()
  assert ck.program.flops({"n": 10}) == 10
  with pytest.raises(ValueError, match="outside"):
    ck([out, a], var_vals={"n": 65})
  with pytest.raises(ValueError, match="no value for variable 'n'"):
    ck([out, a])


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_threads_give_identical_results(threads):
  n = 128
  ast = split(matmul(n, n, n), 1, 4, UP)
  a, b = rng.standard_normal(n * n).astype(np.float32), rng.standard_normal(n * n).astype(np.float32)
  ck = compile_kernel(ast)
  ref, out = np.zeros(n * n, np.float32), np.zeros(n * n, np.float32)
  chunks = ck._chunks(None, [out, a, b], threads)  # (before runs: later ones follow the measured times)
  ck([ref, a, b], threads=1)
  ck([out, a, b], threads=threads)
  np.testing.assert_array_equal(out, ref)
  assert len(chunks) == min(threads, 2 * n ** 3 // MIN_WORK_PER_THREAD)  # big enough for 4 threads, no more
  assert chunks[0][0] == 0 and chunks[-1][1] == n and all(x[1] == y[0] for x, y in zip(chunks, chunks[1:]))


def test_small_kernels_stay_on_one_thread():
  ck = compile_kernel(elementwise(4, 8))
  assert ck._chunks(None, [np.zeros(32, np.float32)] * 3, 8) == [(0, 4)]


def test_thread_axis_kernel():
  ast = split(elementwise(64, 64), 0, 16, G, TH)  # THREAD axis of size 4 over blocks of 16 rows
  prg = get_program(ast)
  assert prg.par_extent() == 4  # the THREAD range's size
  x, y = rng.standard_normal(4096).astype(np.float32), rng.standard_normal(4096).astype(np.float32)
  out = run(ast, np.zeros(4096, np.float32), x, y, threads=2)[0]
  np.testing.assert_allclose(out, np.maximum(x * y + 1, 0), rtol=1e-6, atol=1e-6)


def test_argument_checks():
  ck = compile_kernel(elementwise(2, 8))
  ok = [np.zeros(16, np.float32) for _ in range(3)]
  with pytest.raises(ValueError, match="takes 3 buffers"):
    ck(ok[:2])
  with pytest.raises(TypeError, match="buffer 1 must be float32"):
    ck([ok[0], np.zeros(16, np.float64), ok[2]])
  with pytest.raises(IndexError, match="buffer 2 has 8 elements"):
    ck([ok[0], ok[1], np.zeros(8, np.float32)])
  with pytest.raises(ValueError, match="not C-contiguous"):
    ck([ok[0], np.zeros(32, np.float32)[::2], ok[2]])
  ro = np.zeros(16, np.float32)
  ro.flags.writeable = False
  with pytest.raises(ValueError, match="read-only"):
    ck([ro, ok[1], ok[2]])


def test_compile_cache_by_ir_text():
  a = compile_kernel(elementwise(3, 5))
  b = compile_kernel(elementwise(3, 5))
  assert a.address == b.address and b.compile_s == 0.0


def test_same_name_different_kernels_get_different_symbols():
  k1, k2 = elementwise(2, 3), elementwise(2, 4)
  assert k1.arg.name == k2.arg.name
  c1, c2 = compile_kernel(k1), compile_kernel(k2)
  assert c1.address != c2.address
  x = np.ones(8, np.float32)
  out = np.zeros(8, np.float32)
  c2([out, x, x])
  assert (out == 2).all()


def test_timing_and_trace(tmp_path):
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("matmul", kind="kernel"):
      ck = compile_kernel(split(matmul(16, 16, 16), 1, 4, UP))
    bufs = [np.zeros(256, np.float32), np.ones(256, np.float32), np.ones(256, np.float32)]
    tm = ck.time(bufs, reps=3)
  finally:
    recorder.disable()
  assert len(tm.times) == 3 and tm.min <= tm.median and tm.flops == 2 * 16 ** 3 and tm.bytes == 3 * 1024
  assert tm.gflops == pytest.approx(tm.flops / tm.min / 1e9)
  recs = list(TraceReader(path))
  kctx = next(r["id"] for r in recs if r["t"] == "ctx_begin" and r["name"] == "matmul")
  sources = {r["kind"]: r for r in recs if r["t"] == "source"}
  assert {"llvm_ir", "opt_ir", "asm", "uops"} <= set(sources)
  assert all(s["ctx"] == kctx for s in sources.values())
  assert "<4 x float>" in sources["llvm_ir"]["text"] and sources["asm"]["text"].strip()
  runs = [r for r in recs if r["t"] == "run"]
  assert len(runs) == 1 and runs[0]["ctx"] == kctx and runs[0]["flops"] == 2 * 16 ** 3 and len(runs[0]["times"]) == 3
  rewrites = [r["name"] for r in recs if r["t"] == "rw_begin" and r["ctx"] == kctx]
  for name in ("View Base AST", "expand + index fold", "vectorize", "lower", "View Output AST"):
    assert name in rewrites
  assert (bufs[0] == 16).all()


def test_kernel_info_name_in_symbol_is_sanitized():
  i = UOp.range(4, 0, G)
  ast = UOp.sink(buf(0, 4).index(i).store(UOp.const(dtypes.float32, 2.0)), arg=KernelInfo("E 4-x.y"))
  np.testing.assert_array_equal(run(ast, np.zeros(4, np.float32))[0], [2, 2, 2, 2])


def test_in_place_kernel_drops_noalias():
  """The same array as input and output (an in-place update) runs a variant compiled without `noalias`."""
  i = UOp.range(64, 0, G)
  ast = split(sink(buf(0, 64).index(i).store(buf(1, 64).index(i).load() * 2.0 + 1.0)), 0, 8, UP)
  ck = compile_kernel(ast)
  x = np.arange(64, dtype=np.float32)
  ck([x, x])
  np.testing.assert_array_equal(x, np.arange(64) * 2 + 1)
  assert ck._alias_fxn is not None
  y, z = np.zeros(64, np.float32), np.ones(64, np.float32)
  assert ck._fxn_for([y, z]) is ck.fxn


def test_runs_are_recorded_while_tracing(tmp_path):
  path = tmp_path / "r.vztrace"
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("E", kind="kernel"):
      ck = compile_kernel(elementwise(2, 8))
    out = np.zeros(16, np.float32)
    ck([out, np.ones(16, np.float32), np.ones(16, np.float32)])
    x = np.full(16, 2.0, np.float32)
    ck([x, x, x])  # in place: must run exactly once
  finally:
    recorder.disable()
  runs = [r for r in TraceReader(path) if r["t"] == "run"]
  assert len(runs) == 2 and all(r["flops"] == 3 * 16 for r in runs)
  # the run the program makes is the one timed: recording runs no kernel again (an in-place one could not be)
  assert all(len(r["times"]) == 1 and r["min"] == r["median"] == r["times"][0] > 0 for r in runs)
  assert (out == 2).all()
  assert (x == 5).all()  # 2*2+1 once


def test_object_code_round_trip():
  """What a BEAM worker process does: IR -> object code there, linked into this process's engine."""
  from compiler.runtime.compiled import CompiledKernel
  from compiler.runtime.llvm import get_jit
  prg = get_program(elementwise(2, 8))
  jit = get_jit()
  addr = jit.add_object(jit.object_code(prg.src, prg.fname, f"{prg.fname}_obj_test"), f"{prg.fname}_obj_test")
  ck = CompiledKernel(prg, addr, 0.0, None)
  out, x = np.zeros(16, np.float32), np.full(16, 2.0, np.float32)
  ck([out, x, x])
  assert (out == 5).all()


def test_a_kernel_compiled_before_a_trace_is_compiled_again_for_it(tmp_path):
  # realize caches runners by AST: without a recompile, a trace started later would show the kernel's runs but not
  # its passes or sources, and the runs would name a context of the trace the runner was compiled for
  from compiler.tensor import Tensor
  x = np.linspace(-3, 5, 37 * 3, dtype=np.float32).reshape(37, 3)  # a shape of this test's own: no earlier cache hit
  prog = lambda: (Tensor(x) * 3 - 1).max(axis=1).numpy()  # noqa: E731
  want = prog()  # untraced: compiled and cached
  for i in range(2):  # two traces in a row: each compiles the kernels once for itself
    path = tmp_path / f"{i}.vztrace"
    recorder.enable(path, announce=False)
    try:
      np.testing.assert_allclose(prog(), want)
      np.testing.assert_allclose(prog(), want)  # the second realize reuses this trace's compile
    finally:
      recorder.disable()
    recs = list(TraceReader(path))
    compiled = {r["ctx"] for r in recs if r["t"] == "source" and r["kind"] == "llvm_ir"}
    kernel_ctxs = {r["id"] for r in recs if r["t"] == "ctx_begin" and r["kind"] == "kernel"}
    runs = [r for r in recs if r["t"] == "run"]
    assert compiled and compiled <= kernel_ctxs and len(kernel_ctxs) == 2 * len(compiled)
    # each run is filed under the context that ran it (the second realize's kernels reuse the first's compile)
    assert len(runs) == len(kernel_ctxs) and {r["ctx"] for r in runs} == kernel_ctxs
    passes = {r["ctx"] for r in recs if r["t"] == "rw_begin"}
    assert compiled <= passes  # each compiled kernel's context holds its codegen passes


def _sources_by_ctx(path) -> dict[int, list[tuple[str, str]]]:
  out: dict[int, list[tuple[str, str]]] = {}
  for r in TraceReader(path):
    if r["t"] == "source":
      out.setdefault(r["ctx"], []).append((r["kind"], r["text"]))
  return out


def test_texts_of_the_compile_go_into_its_context(tmp_path, monkeypatch):
  # the optimized IR and assembly go into the kernel's context, after its own sources (with VIZ in the environment,
  # where the trace closes at exit, as with a trace the program enabled itself)
  monkeypatch.setenv("VIZ", "-1")
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  try:
    ctxs = []
    for m in (3, 5):
      with recorder.trace_context(f"k{m}", kind="kernel") as cid:
        ctxs.append(cid)
        compile_kernel(elementwise(m, 8))
  finally:
    recorder.disable()
  got = _sources_by_ctx(path)
  assert sorted(got) == ctxs
  for cid in ctxs:
    assert [k for k, _ in got[cid]] == ["uops", "llvm_ir", "opt_ir", "asm"]
    texts = dict(got[cid])
    assert "define void @E_relu" in texts["opt_ir"] and "E_relu" in texts["asm"] and "ret" in texts["asm"]


def test_a_kernel_compiled_just_before_exit_has_its_texts(tmp_path):
  # a program that exits right after its only compile still has that kernel's four texts in its trace
  import os
  import subprocess
  import sys
  from pathlib import Path
  root = Path(__file__).resolve().parents[2]
  path = tmp_path / "exit.vztrace"
  program = ("import numpy as np\nfrom compiler.tensor import Tensor\n"
             "(Tensor(np.arange(24, dtype=np.float32)) * 3 + 1).numpy()\n")
  env = {**os.environ, "VIZ": "-1", "VIZ_TRACE": str(path), "PYTHONPATH": str(root)}
  p = subprocess.run([sys.executable, "-c", program], cwd=root, env=env, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr
  got = _sources_by_ctx(path)
  assert got and all([k for k, _ in kinds] == ["uops", "llvm_ir", "opt_ir", "asm"] for kinds in got.values()), got


def _object_code_in_child(ir: str, fname: str) -> None:
  from compiler.runtime.llvm import get_jit
  get_jit().object_code(ir, fname, fname + "_child")


def test_a_child_forked_after_a_traced_compile_compiles(tmp_path, monkeypatch):
  # llvmlite's one lock: a BEAM worker forked while another thread held it (LLVM's text thread did, when it emitted
  # assembly after the compile) would hang at its first compile
  import multiprocessing

  monkeypatch.setenv("VIZ", "-1")
  recorder.enable(tmp_path / "f.vztrace", announce=False)
  try:
    with recorder.trace_context("mm", kind="kernel"):
      ck = compile_kernel(split(matmul(64, 64, 64), 1, 4, UP))
    child = multiprocessing.get_context("fork").Process(target=_object_code_in_child,
                                                        args=(ck.program.src, ck.program.fname))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
  finally:
    recorder.disable()


def test_jit_optimizer_and_codegen_see_one_cpu():
  # the JIT's target machine, the optimizer's Target and codegen's intrinsic choice all read compiler.host: a kernel
  # is tuned for, and picks its instructions (AVX-512's scalef) for, the CPU it is compiled for
  isa = os.environ.get("TARGET_ISA", "host").strip().lower()  # (the suite run for an older ISA: its preset)
  cpu = ISA_PRESETS[isa] if isa in ISA_PRESETS else (llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())
  assert host_cpu() == cpu == (get_jit().cpu, get_jit().features) == (host_target().cpu, host_target().features)
  assert host_features() == frozenset(cpu[1].split(",")) and any(f.startswith("+") for f in host_features())


def test_a_kernel_made_serial_goes_back_to_split_runs_when_they_measured_faster():
  # the way back from one thread compares like with like: a kernel of 0.4 ms on one thread (more than PARALLEL_MIN_S,
  # less than twice it) whose split took 0.2 ms splits again; conv2d (0.28 ms) stayed on one thread for good once a
  # noisy split had made it serial, when the way back asked for twice PARALLEL_MIN_S from a run on one thread
  from compiler.runtime.compiled import PARALLEL_MIN_S
  ck = compile_kernel(split(elementwise(1024, 1024), 0, 512, G, TH))
  arrs = [np.zeros(1 << 20, np.float32), np.ones(1 << 20, np.float32), np.ones(1024, np.float32)]
  assert len(ck._chunks(None, arrs, 2)) == 2
  ck._observe(2e-4, 2)  # the first split run (0.4 ms of CPU): the next tries one thread, to compare
  assert ck._serial
  ck._observe(1.4 * PARALLEL_MIN_S, 1)
  assert not ck._serial and len(ck._chunks(None, arrs, 2)) == 2


def test_the_least_time_worth_splitting_is_the_pools_measured_hand_off_at_most_parallel_min_s():
  from compiler.runtime.compiled import PARALLEL_MIN_S, _split_min_s
  from compiler.runtime.threadpool import get_pool
  assert _split_min_s(1) == min(PARALLEL_MIN_S, get_pool(1).split_min_s)
  assert _split_min_s(0) == PARALLEL_MIN_S  # no workers: nothing is split
