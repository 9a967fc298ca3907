"""PEEL: a tile on an axis it does not divide, the remainder handled by its own copy of the work (a second STORE
for an output axis, a second REDUCE for a reduce axis), never by masks. Exact against numpy (the evaluator of
opt_helpers, which knows nothing about opts) for sizes 1, amt-1, amt+1, 2*amt+3 and primes, compiled by LLVM
and run on one thread and on several; the heuristic's tiles on the SSE / AVX2 / AVX-512 target models; BEAM's
actions; the trace."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.opt_helpers import (
  buffers_for,
  check_refused,
  elementwise_ast,
  matmul_ast,
  row_reduce_ast,
  run_ast,
  sum_ast,
  two_store_ast,
)

from compiler.codegen import get_program
from compiler.opt import Kernel, hand_coded_optimizations
from compiler.opt.kernel import KernelOptError, Opt, OptOps
from compiler.opt.search import get_kernel_actions, kernel_actions
from compiler.opt.target import AVX2, AVX512, SSE
from compiler.runtime import compiled
from compiler.runtime.compiled import compile_kernel
from compiler.runtime.interpreter import interpret
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.uop import AxisType, Ops, UOp, toposort
from vztrace.reader import TraceReader

TARGETS = {"sse": SSE, "avx2": AVX2, "avx512": AVX512}
AMT = 8
SIZES = [1, AMT - 1, AMT + 1, 2 * AMT + 3, 13, 31]


def conv2d_ast(h: int, w: int, cout: int = 5) -> UOp:
  """The scheduler's conv2d kernel: out (2, cout, h-2, w-2) from x (2, 3, h, w) and a 3x3 filter."""
  x, f = Tensor(np.zeros((2, 3, h, w), np.float32)), Tensor(np.zeros((cout, 3, 3, 3), np.float32))
  sched, _ = create_schedule([x.conv2d(f).uop])
  return sched[-1].ast


def max_ast(m: int, n: int) -> UOp:
  return sum_ast(m, n, Ops.MAX)


# kernel -> (its AST for a size n, the PEELs tried on it: (axis, amt))
KERNELS = {
  "matmul_cols": (lambda n: matmul_ast(6, n, 5), [(1, AMT)]),
  "matmul_2d": (lambda n: matmul_ast(n, n, 7), [(1, AMT), (0, 4)]),
  "matmul_reduce": (lambda n: matmul_ast(3, 5, n), [(2, AMT)]),
  "elementwise": (lambda n: elementwise_ast(4, n), [(1, AMT)]),
  "sum": (lambda n: sum_ast(3, n), [(1, AMT)]),
  "max": (lambda n: max_ast(n, n), [(1, AMT), (0, 4)]),
  "two_store": (lambda n: two_store_ast(n, n), [(1, AMT), (0, 4)]),
  "conv2d": (lambda n: conv2d_ast(n + 2, n + 2), [(3, AMT), (2, 4), (1, 4)]),
}


def _peeled(ast: UOp, peels: list[tuple[int, int]], target=AVX512) -> tuple[Kernel, int]:
  """ast with each PEEL that applies; (the kernel, how many applied)."""
  k, n = Kernel(ast, target), 0
  for axis, amt in peels:
    try:
      k.apply_opt(Opt(OptOps.PEEL, axis, amt))
      n += 1
    except KernelOptError as e:
      # only where the tile does not fit or divides (or the axis of size 1 was dropped)
      assert axis >= k.shape_len or k.full_shape[axis] <= amt or k.full_shape[axis] % amt == 0, e
  return k, n


def _compare(ast: UOp, k: Kernel, threads: int = 1, tol: float = 1e-4) -> None:
  bufs = buffers_for(ast, seed=3)
  want = run_ast(ast, [b.copy() for b in bufs])
  ck = compile_kernel(k.get_optimized_ast())
  got = [b.copy() for b in bufs]
  ck(got, threads=threads)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{k.name} {k.applied_opts}")


def _loads(ast: UOp) -> int:
  return sum(u.op is Ops.LOAD for u in toposort(ast))


def _has_masks(ast: UOp) -> bool:
  """A masked load or a select: what padding would add to the inner loop (a store's gate is outside the loops)."""
  return any((u.op is Ops.LOAD and len(u.src[0].src) > 2) or u.op is Ops.WHERE for u in toposort(ast))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_peel_is_exact(name: str, n: int):
  make, peels = KERNELS[name]
  base = Kernel(make(n), AVX512)
  k, applied = _peeled(make(n), peels)
  assert applied == 0 or n > AMT or name in ("conv2d", "matmul_2d", "max", "two_store")
  if n in (AMT + 1, 2 * AMT + 3, 13, 31):  # the remainder's own loads (its store or reduce), and no mask
    assert applied >= 1 and _loads(k.ast) > _loads(base.ast) and not _has_masks(k.ast)
  _compare(make(n), k)
  bufs = buffers_for(make(n), seed=3)  # the interpreter runs the peeled AST too
  want = run_ast(make(n), [b.copy() for b in bufs])
  interpret(k.get_optimized_ast(), bufs)
  for g, w in zip(bufs, want):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [AMT + 1, 2 * AMT + 3, 31])
@pytest.mark.parametrize("name", ["matmul_cols", "elementwise", "two_store", "conv2d", "sum"])
def test_peel_is_exact_on_threads(name: str, n: int, monkeypatch):
  # every kernel split over 3 threads, however small: the remainder's work is done once, by the right chunk
  monkeypatch.setattr(compiled, "MIN_WORK_PER_THREAD", 1)
  make, peels = KERNELS[name]
  ast = make(n)
  k, applied = _peeled(ast, [(a, m) for a, m in peels if a != 0])  # the outermost axis left for the threads
  assert applied >= 1
  threaded = False
  for axis in range(k.global_dims):
    try:
      k.apply_opt(Opt(OptOps.THREAD, axis, 2 if k.full_shape[axis] % 2 == 0 else k.full_shape[axis]))
      threaded = True
      break
    except KernelOptError:
      continue
  ck = compile_kernel(k.get_optimized_ast())
  assert len(ck._chunks(None, buffers_for(ast), 3)) > 1
  _compare(ast, k, threads=3)
  assert threaded or name == "sum"


def test_an_output_peel_is_a_second_store_and_a_reduce_peel_a_second_reduce():
  k = Kernel(matmul_ast(6, 2 * AMT + 3, 2 * AMT + 6), AVX512)
  k.apply_opt(Opt(OptOps.PEEL, 1, AMT))
  assert len(k.stores) == 2 and k.full_shape == (6, 2, 22, AMT)
  assert [range_end(r) for r in k.remainders] == [3] and k.name == "r2_6_2_22_8_p3"
  assert ("p3", "yellow") in k.colored_name()
  k.apply_opt(Opt(OptOps.PEEL, 2, 4))  # the reduce of both stores: each store's REDUCE gets its remainder's
  assert len(k.stores) == 2 and len(k.reduceops) == 4 and sorted(range_end(r) for r in k.remainders) == [2, 3]
  assert not _has_masks(k.ast)
  _compare(matmul_ast(6, 2 * AMT + 3, 2 * AMT + 6), k)


def range_end(r: UOp) -> int:
  return r.src[0].arg


@pytest.mark.parametrize("peels", [[(1, AMT)], [(1, AMT), (0, 4)], [(1, AMT), (0, 4), (2, AMT)]])
def test_each_part_runs_in_its_own_loops_only(peels):
  # the remainder's store is not nested in the main part's loops (it would be redone there), nor the reverse:
  # every loop open at a store is one its address or value loops over, and the work is the unpeeled kernel's
  base = Kernel(matmul_ast(18, 19, 20), AVX512)
  k, applied = _peeled(matmul_ast(18, 19, 20), peels)
  assert applied == len(peels)
  prg = get_program(k.get_optimized_ast())
  open_loops: list[UOp] = []
  for u in prg.uops:
    if u.op is Ops.RANGE:
      open_loops.append(u)
    elif u.op is Ops.END:
      open_loops.pop()
    elif u.op is Ops.STORE:
      assert set(open_loops) <= set(u.ranges), (k.name, open_loops)
  assert sum(u.op is Ops.STORE for u in prg.uops) > 1
  # (a peeled reduce adds its main and remainder parts: one add per output)
  assert 0 <= prg.flops() - get_program(base.get_optimized_ast()).flops() <= (18 * 19 if len(peels) > 2 else 0)


def test_a_remainder_of_one_is_the_element_itself():
  k = Kernel(sum_ast(3, AMT + 1), AVX512)
  k.apply_opt(Opt(OptOps.PEEL, 1, AMT))
  assert k.remainders == [] and len(k.reduceops) == 1  # the main REDUCE plus the last element, no loop of one
  _compare(sum_ast(3, AMT + 1), k)


def test_later_opts_apply_to_both_parts():
  ast = matmul_ast(16, 2 * AMT + 3, 12)
  k = Kernel(ast, AVX512)
  k.apply_opt(Opt(OptOps.PEEL, 1, AMT))
  k.apply_opt(Opt(OptOps.UPCAST, 0, 4))  # rows: shared by the main part and the remainder
  k.apply_opt(Opt(OptOps.UNROLL, 0, 4))
  assert all(AxisType.UPCAST in [r.arg[1] for r in st.ranges] for st in k.stores)
  _compare(ast, k)


@pytest.mark.parametrize("axis, amount, reason", [  # of PEEL
  (1, 4, "divides"),
  (1, 64, "more than 16"),
  (2, 64, "more than 32"),
  (0, 16, "does not fit"),
  (3, 4, "invalid axis"),
])
def test_peel_refusals_leave_the_kernel_unchanged(axis: int, amount: int, reason: str):
  k = Kernel(matmul_ast(9, 20, 50), AVX512)
  check_refused(k, Opt(OptOps.PEEL, axis, amount), reason)
  assert k.remainders == []


def test_peel_refuses_upcasted_and_thread_axes():
  k = Kernel(matmul_ast(20, 20, 8), AVX512)
  k.apply_opt(Opt(OptOps.THREAD, 0, 2))
  with pytest.raises(KernelOptError, match="THREAD"):
    k.apply_opt(Opt(OptOps.PEEL, 0, 3))
  k.apply_opt(Opt(OptOps.UPCAST, 2, 4))
  with pytest.raises(KernelOptError, match="not UPCAST"):
    k.apply_opt(Opt(OptOps.PEEL, k.first_upcast, 3))


@pytest.mark.parametrize("rows", [AMT + 1, 2 * AMT + 3, 37])
def test_threads_over_peeled_rows_store_the_remainder_once(rows: int, monkeypatch):
  # rows peeled (main rows and a remainder's), then a THREAD split of the main rows: the remainder's stores do
  # not loop over them, so thread 0 alone stores them (a gate outside their loops), the others skip the store
  monkeypatch.setattr(compiled, "MIN_WORK_PER_THREAD", 1)
  ast = matmul_ast(rows, 2 * AMT + 3, 9)
  k = Kernel(ast, AVX512)
  k.apply_opt(Opt(OptOps.PEEL, 1, AMT))
  k.apply_opt(Opt(OptOps.PEEL, 0, 4))
  k.apply_opt(Opt(OptOps.THREAD, 0, 2 if k.full_shape[0] % 2 == 0 else k.full_shape[0]))
  gated = [st for st in k.stores if len(st.src[0].src) > 2]
  assert len(gated) == 2 and len(k.stores) == 4  # the remainder rows' two stores
  prg = get_program(k.get_optimized_ast())
  assert prg.par_size is not None and prg.par_size.arg == k.full_shape[0]
  for threads in (1, 2, 3):
    _compare(ast, k, threads=threads)


def test_peel_is_traced(tmp_path):
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("kernel r", kind="kernel"):
      k = Kernel(matmul_ast(8, 19, 16), AVX512)
      k.apply_opt(Opt(OptOps.PEEL, 1, AMT))
  finally:
    recorder.disable()
  recs = list(TraceReader(path))
  opts = [r for r in recs if r["t"] == "opt"]
  assert [(o["op"], o["axis"], o["arg"], o["ok"]) for o in opts] == [("PEEL", 1, AMT, True)]
  assert opts[0]["kname"] == "r2_8_2_16_8_p3" and opts[0]["shape"] == [8, 2, 16, AMT]
  assert [r["name"] for r in recs if r["t"] == "rw_begin"] == [f"apply PEEL(1, {AMT})"]
  assert Opt.from_json(Opt(OptOps.PEEL, 1, AMT).to_json()) == Opt(OptOps.PEEL, 1, AMT)


@pytest.mark.parametrize("rows,n", [(9, 2), (19, 4), (31, 3), (5, 4)])
def test_a_thread_split_the_threads_do_not_divide_peels_the_rest(rows: int, n: int, monkeypatch):
  # thread t takes rows t*q..t*q+q-1 (q = rows // n); the rows % n left are a loop of their own, stored by thread 0
  monkeypatch.setattr(compiled, "MIN_WORK_PER_THREAD", 1)
  ast = matmul_ast(rows, 2 * AMT + 3, 9)
  k = Kernel(ast, AVX512)
  k.apply_opt(Opt(OptOps.PEEL, 1, AMT))
  k.apply_opt(Opt(OptOps.THREAD, 0, n))
  assert k.axis_types[0] is AxisType.THREAD and k.full_shape[0] == n
  assert [range_end(r) for r in k.remainders] == ([rows % n] if rows % n > 1 else []) + [3]
  assert len(k.stores) == 4 and sum(len(st.src[0].src) > 2 for st in k.stores) == 2  # the rest's, gated
  assert get_program(k.get_optimized_ast()).par_size.arg == n
  for threads in (1, 2, n):
    _compare(ast, k, threads=threads)


# ---- the heuristic and BEAM

@pytest.mark.parametrize("tname", TARGETS)
@pytest.mark.parametrize("n", [500, 499, 1000])
def test_heuristic_register_tiles_on_sizes_they_do_not_divide(tname: str, n: int):
  tgt = TARGETS[tname]
  k = hand_coded_optimizations(Kernel(matmul_ast(n, n, n), replace(tgt, threads=2)))
  cols = 16  # one 64-byte line of floats, on every target: peeled where it does not divide
  ups = [s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.UPCAST]
  assert cols in ups and Opt(OptOps.PEEL, 1, cols) == k.applied_opts[0]
  # rows as for 512: as many as the registers hold (4 if the rows are peeled on AVX2), not a masked tile
  assert ups[1] >= {"sse": 2, "avx2": 4, "avx512": 4}[tname]
  assert not _has_masks(k.ast) and OptOps.PADTO not in [o.op for o in k.applied_opts]
  if n == 499:  # a prime: no amount divides the rows, they are peeled too
    assert sum(o.op is OptOps.PEEL for o in k.applied_opts) >= 2


def test_heuristic_threads_of_peeled_kernels():
  # rows 8 | 1000: every store loops over the row tiles (125, odd): no THREAD, the runtime splits that loop itself
  k = hand_coded_optimizations(Kernel(matmul_ast(1000, 1000, 64), replace(AVX512, threads=2)))
  assert OptOps.THREAD not in [o.op for o in k.applied_opts]
  assert get_program(k.get_optimized_ast()).par_size.arg == 125
  # 499 rows and columns both peeled: no loop is every store's, so a THREAD split, the remainders gated to thread 0
  k = hand_coded_optimizations(Kernel(matmul_ast(499, 499, 64), replace(AVX512, threads=2)))
  assert k.axis_types[0] is AxisType.THREAD and any(len(st.src[0].src) > 2 for st in k.stores)
  assert get_program(k.get_optimized_ast()).par_size.arg == 2


@pytest.mark.parametrize("tname", TARGETS)
@pytest.mark.parametrize("m,n,kk", [(37, 41, 29), (65, 67, 17), (19, 130, 9), (131, 23, 66)])
def test_heuristic_peeled_tiles_are_exact(tname: str, m: int, n: int, kk: int, monkeypatch):
  monkeypatch.setattr(compiled, "MIN_WORK_PER_THREAD", 1)
  ast = matmul_ast(m, n, kk)
  k = hand_coded_optimizations(Kernel(ast, replace(TARGETS[tname], threads=2)))
  assert any(o.op is OptOps.PEEL for o in k.applied_opts)
  _compare(ast, k, threads=1)
  _compare(ast, k, threads=2)


@pytest.mark.parametrize("tname", TARGETS)
def test_heuristic_peels_conv2d_and_row_reduces(tname: str):
  tgt = TARGETS[tname]
  ast = conv2d_ast(32, 32, cout=32)  # 30x30 outputs: no vector divides 30
  k = hand_coded_optimizations(Kernel(ast, replace(tgt, threads=2)))
  assert any(o.op is OptOps.PEEL for o in k.applied_opts) and not _has_masks(k.ast)
  _compare(ast, k)
  for op in (Ops.ADD, Ops.MAX):  # a row's sum and max (softmax's) of a length no line divides
    ast = row_reduce_ast(6, 2 * tgt.line_floats + 5, op)
    k = hand_coded_optimizations(Kernel(ast, tgt))
    assert [o.op for o in k.applied_opts] == [OptOps.PEEL]
    _compare(ast, k)


def test_beam_actions_include_peel():
  assert {o.arg for o in kernel_actions(Kernel(matmul_ast(4, 4, 4), AVX512)) if o.op is OptOps.PEEL} >= {4, 8, 16}
  acts = get_kernel_actions(Kernel(matmul_ast(20, 37, 29), AVX512), include_0=False)
  peeled = [k for k in acts.values() if k.applied_opts[-1].op is OptOps.PEEL]
  assert peeled and all(k.remainders or k.full_shape for k in peeled)


# ---- through the Tensor API: the heuristic on the host target, against numpy

@pytest.mark.parametrize("n", [1, 7, 9, 19, 31, 67])
def test_tensor_workloads_of_odd_sizes_match_numpy(n: int):
  rng = np.random.default_rng(n)
  a, b = rng.standard_normal((n, n + 2)).astype(np.float32), rng.standard_normal((n + 2, n)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((Tensor(a) * 2 + 1).numpy(), a * 2 + 1, rtol=1e-6)
  np.testing.assert_allclose(Tensor(a).sum(1).numpy(), a.sum(1), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(Tensor(a).max(1).numpy(), a.max(1))
  x, w = rng.standard_normal((2, 3, n + 2, n + 4)).astype(np.float32), rng.standard_normal((5, 3, 3, 3))
  got = Tensor(x).conv2d(Tensor(w.astype(np.float32))).numpy()
  cols = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))
  np.testing.assert_allclose(got, np.einsum("bchwij,ocij->bohw", cols, w).astype(np.float32), rtol=1e-4, atol=1e-4)
