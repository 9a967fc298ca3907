"""The heuristics on the kernels backward passes produce (issue 29): matmuls with a transposed operand (A B^T) and
conv weight gradients, whose loads all walk the reduce with stride 1, get a register tile of dot products (vector
accumulators along the reduce, rows on both operands' sides) on every target model, within its registers, and
compute what the interpreter does; and the programs that make them give numpy's gradients on both backends."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from support.opt_helpers import G, R, buf, buffers_for, matmul_ast, sink

from compiler.codegen import get_program
from compiler.codegen.program import lower_ast
from compiler.dtype import dtypes
from compiler.opt import Kernel, Opt, OptOps, hand_coded_optimizations
from compiler.opt.heuristic import THREAD_MIN_WORK
from compiler.opt.kernel import KernelOptError, access_strides, axis_stride
from compiler.opt.search import kernel_actions
from compiler.opt.target import AVX2, AVX512, SSE
from compiler.runtime.compiled import compile_kernel
from compiler.runtime.interpreter import interpret
from compiler.uop import AxisType, Ops, UOp

TARGETS = {"sse": SSE, "avx2": AVX2, "avx512": AVX512}


def abt_ast(m: int, n: int, kk: int, batch: int = 1) -> UOp:
  """out[b, i, j] = sum_r a[b, i, r] * c[b, j, r]: a matmul with its second operand transposed (attention's
  dO V^T, a linear layer's dY W^T)."""
  b, i, j, r = UOp.range(batch, 0, G), UOp.range(m, 1, G), UOp.range(n, 2, G), UOp.range(kk, 3, R)
  a = buf(1, batch * m * kk).index(b * m * kk + i * kk + r).load()
  c = buf(2, batch * n * kk).index(b * n * kk + j * kk + r).load()
  return sink(buf(0, batch * m * n).index(b * m * n + i * n + j).store((a * c).reduce(r)), name="abt")


def wgrad_ast(co: int, ci: int, ks: int, n: int, o: int) -> UOp:
  """A conv's weight gradient: dw[co, ci, kh, kw] = sum_{b, y, x} g[b, co, y, x] * x[b, ci, y + kh, x + kw]."""
  w = o + ks - 1
  a_co, a_ci, a_kh, a_kw = (UOp.range(s, i, G) for i, s in enumerate((co, ci, ks, ks)))
  b, y, x = (UOp.range(s, 4 + i, R) for i, s in enumerate((n, o, o)))
  g = buf(1, n * co * o * o).index(b * co * o * o + a_co * o * o + y * o + x).load()
  xs = buf(2, n * ci * w * w).index(b * ci * w * w + a_ci * w * w + (y + a_kh) * w + x + a_kw).load()
  out = buf(0, co * ci * ks * ks).index(a_co * ci * ks * ks + a_ci * ks * ks + a_kh * ks + a_kw)
  return sink(out.store((g * xs).reduce(b, y, x)), name="wgrad")


def gelu_bwd_ast(b: int, m: int, n: int, kk: int) -> UOp:
  """GPT's MLP backward dx[s, i, j] = sum_r where(h[s, i, r] > 0, g[s, i, r], 0) * w[j, r] + bias[j]: two operands on
  the rows' side, a condition on loaded values (no pad), a load outside the reduce, a batch of b."""
  s, i, j, r = UOp.range(b, 0, G), UOp.range(m, 1, G), UOp.range(n, 2, G), UOp.range(kk, 3, R)
  h, g = (buf(x, b * m * kk).index(s * m * kk + i * kk + r).load() for x in (1, 2))
  w = buf(3, n * kk).index(j * kk + r).load()
  val = (h.alu(Ops.CMPLT, 0.0).logical_not()).where(g, 0.0) * w
  out = buf(0, b * m * n).index(s * m * n + i * n + j)
  return sink(out.store(val.reduce(r) + buf(4, n).index(j).load()), name="gelu_bwd")


SHAPES = {"abt": lambda: abt_ast(64, 96, 768), "attention dp": lambda: abt_ast(32, 64, 64, batch=3),
          "mnist wgrad": lambda: wgrad_ast(32, 32, 5, 2, 20), "odd wgrad": lambda: wgrad_ast(12, 10, 3, 1, 27),
          "gelu bwd": lambda: gelu_bwd_ast(4, 16, 64, 256)}


def dot_tile(k: Kernel) -> tuple[int, list[tuple[int, int]]]:
  """(the reduce's unrolled lanes, [(upcast amount, the first operand broadcast along it)]) of a kernel; operands:
  the loads that walk the reduce."""
  stores = {st.src[0] for st in k.stores}
  red = k.rngs[k.first_reduce]
  loads = [access_strides(k, a) for a in k.accesses if a not in stores and red in a.ranges]
  lanes = math.prod(s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.UNROLL)
  rows = [(s, next(i for i, st in enumerate(loads) if st[a] == 0))
          for a, (s, t) in enumerate(zip(k.full_shape, k.axis_types)) if t is AxisType.UPCAST]
  return lanes, rows


def _windows(x: np.ndarray, ks: int) -> np.ndarray:
  return np.lib.stride_tricks.sliding_window_view(x, (ks, ks), axis=(2, 3))


def check_values(ast: UOp, k: Kernel) -> None:
  """k compiled and run (on 2 threads) against the interpreter on the unoptimized AST."""
  bufs = buffers_for(ast, seed=3)
  want = [b.copy() for b in bufs]
  interpret(ast, want)
  compile_kernel(k.get_optimized_ast())(bufs, threads=2)
  np.testing.assert_allclose(bufs[0], want[0], rtol=1e-4, atol=1e-4 * math.sqrt(bufs[1].size))


@pytest.mark.parametrize("tname", TARGETS)
@pytest.mark.parametrize("shape", SHAPES)
def test_dot_tile_on_every_target(tname: str, shape: str):
  target = replace(TARGETS[tname], threads=2)
  ast = SHAPES[shape]()
  k = hand_coded_optimizations(Kernel(ast, target))
  lanes, rows = dot_tile(k)
  vec = target.vector_floats
  # the reduce unrolled by whole vectors (two where they divide it), the rest peeled
  assert lanes % vec == 0 and vec <= lanes <= 2 * vec, k.applied_opts
  size = Kernel(ast).full_shape[-1]
  assert (size % lanes != 0) == bool(k.remainders), (size, lanes, k.applied_opts)
  # rows on both operands' sides, and the tile in the registers: an accumulator per output, a vector per row of
  # each operand (GPT's two on one side)
  assert len({side for _, side in rows}) == 2, rows
  outputs = math.prod(s for s, _ in rows)
  per_row = 2 if shape == "gelu bwd" else 1
  assert outputs >= 4 and outputs + sum(s * (per_row if side else 1) for s, side in rows) <= target.vector_regs - 1, \
      rows
  assert OptOps.STAGE not in [o.op for o in k.applied_opts]
  check_values(ast, k)


@pytest.mark.parametrize("tname", TARGETS)
def test_a_matmul_keeps_its_column_tile(tname: str):
  # B's rows are vectors along the output's columns: the matmul's tile, not dot products
  k = hand_coded_optimizations(Kernel(matmul_ast(128, 128, 128), replace(TARGETS[tname], threads=2)))
  assert dot_tile(k)[0] == 1 and k.applied_opts[0].op is OptOps.UPCAST


@pytest.mark.parametrize("tname", TARGETS)
def test_the_dot_tile_comes_before_upcasting_masked_axes(tname: str):
  # the gelu's condition reads loaded values along the batch of 4: upcast whole first (as a pad's mask would be), it
  # left no registers for the dot tile (GPT step's MLP dx 7 -> 23 GFLOP/s with the tile)
  k = hand_coded_optimizations(Kernel(gelu_bwd_ast(4, 16, 64, 256), replace(TARGETS[tname], threads=2)))
  assert Opt(OptOps.UPCAST, 0, 0) not in k.applied_opts and k.applied_opts[0].op is OptOps.UNROLL, k.applied_opts


def test_a_reduce_shorter_than_a_vector_is_no_dot_tile():
  # 12 columns of a conv's window on AVX-512: no whole vector to accumulate
  k = hand_coded_optimizations(Kernel(wgrad_ast(16, 8, 3, 2, 12), replace(AVX512, threads=2)))
  assert OptOps.PEEL not in [o.op for o in k.applied_opts] and dot_tile(k)[0] in (1, 12)


@pytest.mark.parametrize("tname", TARGETS)
@pytest.mark.parametrize("shape", SHAPES)
def test_beam_can_reach_the_dot_tile(tname: str, shape: str):
  # each of the heuristic's opts is one of BEAM's actions at its step (the reduce unrolled by two vectors included)
  target = replace(TARGETS[tname], threads=2)
  ast = SHAPES[shape]()
  want = hand_coded_optimizations(Kernel(ast, target)).applied_opts
  k = Kernel(ast, target)
  for opt in want:
    assert opt in kernel_actions(k), (opt, want)
    k.apply_opt(opt)


@pytest.mark.parametrize("tname", TARGETS)
def test_a_reduce_of_half_a_vector_gets_the_dot_tile(tname: str):
  # MNIST's conv3 weight gradient: rows of 8 pixels, half of AVX-512's lanes and AVX2's vector: the dot tile in vectors
  # of 8 (unrolled whole, as BEAM spells it; SSE's two vectors), rows on both operands' sides and none along kw (the
  # short window's tile there: 48 -> 18 ms with AVX-512, 1 thread, Zen 4)
  target = replace(TARGETS[tname], threads=2)
  ast = wgrad_ast(16, 16, 3, 2, 8)
  k = hand_coded_optimizations(Kernel(ast, target))
  lanes, rows = dot_tile(k)
  assert lanes == 8 and len({side for _, side in rows}) == 2 and not k.remainders, k.applied_opts
  assert all(stride != 1 for _, stride in store_upcasts(k)), k.applied_opts
  assert Opt(OptOps.UNROLL, 2, 8 if target.vector_floats == 4 else 0) in k.applied_opts
  check_values(ast, k)


def padded_wgrad_ast(co: int, ci: int, n: int, hw: int) -> UOp:
  """ResNet's weight gradient, 3 x 3 with a pad of 1: dw[co, ci, kh, kw] = sum_{b, y, x} g[b, co, y, x] *
  x[b, ci, y + kh - 1, x + kw - 1], x's load masked where the window leaves the image (along the reduce's x)."""
  a_co, a_ci, a_kh, a_kw = (UOp.range(s, i, G) for i, s in enumerate((co, ci, 3, 3)))
  b, y, x = (UOp.range(s, 4 + i, R) for i, s in enumerate((n, hw, hw)))
  yy, xx = y + a_kh, x + a_kw  # (the padded image's coordinates: 1 to hw inside)
  valid = (yy.alu(Ops.CMPLT, 1).logical_not() & yy.alu(Ops.CMPLT, hw + 1)) & \
      (xx.alu(Ops.CMPLT, 1).logical_not() & xx.alu(Ops.CMPLT, hw + 1))
  g = buf(1, n * co * hw * hw).index(b * co * hw * hw + a_co * hw * hw + y * hw + x).load()
  xs = buf(2, n * ci * hw * hw).index(b * ci * hw * hw + a_ci * hw * hw + yy * hw + xx - hw - 1, valid).load()
  out = buf(0, co * ci * 9).index(a_co * ci * 9 + a_ci * 9 + a_kh * 3 + a_kw)
  return sink(out.store((g * xs).reduce(b, y, x)), name="padded_wgrad")


@pytest.mark.parametrize("tname", TARGETS)
def test_a_padded_weight_gradient_gets_the_dot_tile(tname: str):
  # x's load is masked along the reduce's x (the pad): its lanes load as one masked vector, so the dot tile applies
  # (it was refused, leaving the 3 x 3 window as a strided-store tile of scalar FMAs: ResNet's six weight gradients
  # 14 -> 60-75 GFLOP/s on Zen 4), rows on the co and ci sides; values against float64 numpy
  target = replace(TARGETS[tname], threads=2)
  co, ci, n, hw = 16, 16, 2, 32
  ast = padded_wgrad_ast(co, ci, n, hw)
  k = hand_coded_optimizations(Kernel(ast, target))
  lanes, rows = dot_tile(k)
  assert lanes % target.vector_floats == 0 and len({side for _, side in rows}) == 2, k.applied_opts
  bufs = buffers_for(ast, seed=3)
  compile_kernel(k.get_optimized_ast())(bufs, threads=2)
  g = bufs[1].reshape(n, co, hw, hw).astype(np.float64)
  x = np.pad(bufs[2].reshape(n, ci, hw, hw).astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  want = np.einsum("nchwij,nohw->ocij", _windows(x, 3), g)
  np.testing.assert_allclose(bufs[0].reshape(want.shape), want, rtol=1e-4, atol=1e-3)


def igrad_ast(n: int, ci: int, hw: int, ks: int, co: int) -> UOp:
  """A conv's input gradient before col2im: p[b, c, y, x, i, j] = sum_o g[b, o, y, x] * w[o, c, i, j], stored with
  the window innermost (the store walks x with stride ks*ks)."""
  b, c, y, x, i, j = (UOp.range(s, a, G) for a, s in enumerate((n, ci, hw, hw, ks, ks)))
  o = UOp.range(co, 6, R)
  g = buf(1, n * co * hw * hw).index(b * co * hw * hw + o * hw * hw + y * hw + x).load()
  w = buf(2, co * ci * ks * ks).index(o * ci * ks * ks + c * ks * ks + i * ks + j).load()
  out = buf(0, n * ci * hw * hw * ks * ks).index(((((b * ci + c) * hw + y) * hw + x) * ks + i) * ks + j)
  return sink(out.store((g * w).reduce(o)), name="igrad")


def store_upcasts(k) -> list[tuple[int, int]]:
  """(size, stride in the first store's index) of each UPCAST axis: the register tile as the store sees it."""
  return [(s, axis_stride(k.stores[0].src[0].src[1], r)) for s, r in zip(k.full_shape, k.rngs)
          if r.arg[1] is AxisType.UPCAST]


def igrad_tile(tname: str, hw: int, ks: int):
  """An input gradient's per-window kernel (batch 2, 8 channels in, 16 out) under the heuristics on target model
  tname with 2 threads: (ast, kernel, (vector floats, vector registers), store_upcasts)."""
  target = replace(TARGETS[tname], threads=2)
  ast = igrad_ast(2, 8, hw, ks, 16)
  k = hand_coded_optimizations(Kernel(ast, target))
  return ast, k, (target.vector_floats, target.vector_regs), store_upcasts(k)


@pytest.mark.parametrize("tname", TARGETS)
def test_strided_store_columns_take_every_row_that_fits(tname: str):
  # the store's unit stride (j, 3 long) has no vector; g's rows along x are: a line of columns there, then rows along
  # the axes g is broadcast along (j, i, c: the window's 3 x 3 where the registers hold them) while the accumulators
  # fit beside the column vectors, and the short reduce unrolled by 4
  ast, k, (vec, regs), ups = igrad_tile(tname, 32, 3)
  assert ups[0] == (16, 9), k.applied_opts  # the columns: x, stored with stride 3 x 3
  rows = math.prod(s for s, _ in ups[1:])
  assert {st for _, st in ups[1:]} <= {1, 3, 32 * 32 * 9} and rows * (16 // vec) <= regs - 16 // vec - 1
  assert rows * 2 * (16 // vec) > regs - 16 // vec - 1 or rows == 3 * 3 * 8  # no room for twice the rows
  if vec == 16:  # AVX-512: the whole window and 2 channels, 18 accumulators (ResNet's input gradient 8 -> 20 GFLOP/s)
    assert rows == 18
  assert (4, AxisType.UNROLL) in zip(k.full_shape, k.axis_types)
  check_values(ast, k)


@pytest.mark.parametrize("tname", TARGETS)
def test_strided_store_columns_shorter_than_a_vector_take_the_next_row(tname: str):
  # MNIST's conv3 input-gradient product on 8 x 8 pixels: x's 8 columns are half of AVX-512's vector, and g's row
  # runs on into the next y, along which w is broadcast: the columns take 2 of y and all of x, one vector of g a
  # load (36-46 -> 15-16 ms, 1 thread, Zen 4); AVX2's and SSE's vectors fit in x
  ast, k, (vec, regs), ups = igrad_tile(tname, 8, 3)
  assert ups[:2] == ([(2, 8 * 9), (8, 9)] if vec == 16 else [(vec, 9), (3, 1)]), k.applied_opts
  assert math.prod(s for s, _ in ups) // vec <= regs - 2
  check_values(ast, k)


@pytest.mark.parametrize("tname", TARGETS)
def test_a_window_of_short_contiguous_axes_is_the_column_tile(tname: str):
  # MNIST's input gradient: the store's unit stride (j, 5 long) continues into i, 25 contiguous floats that w walks
  # and g is broadcast along, more than 3/4 of their vectors on every target: i and j upcast whole (one contiguous
  # column vector, stored as it is, no lane-by-lane store along x), rows along c (w varies, g broadcast) while the
  # accumulators take at most a quarter of the registers; ResNet's 3x3 (9 of 12 or 16 lanes) is not a window
  ast, k, (vec, regs), ups = igrad_tile(tname, 20, 5)
  cols = -(-25 // vec)
  rows = [s for s, st in ups if st == 20 * 20 * 25]  # along c
  assert sorted(u for u in ups if u[1] in (1, 5)) == [(5, 1), (5, 5)] and len(ups) == 2 + len(rows), k.applied_opts
  assert (not rows or math.prod(rows) * cols <= regs // 4) and (math.prod(rows) * 2 * cols > regs // 4 or 8 in rows)
  check_values(ast, k)
  assert all(o.arg != 0 for o in igrad_tile(tname, 32, 3)[1].applied_opts if o.op is OptOps.UPCAST)


def loop_gathers(ast: UOp) -> tuple[list[int], int]:
  """The lanes of each accumulator of ast's lowered kernel, and how many vectors its reduce loops put together lane
  by lane (VECTORIZE of different values: a gather each iteration; a broadcast or a mask is not one)."""
  out = lower_ast(ast)
  phis = [u for u in out.toposort() if u.op is Ops.PHI and u.src[0].op is Ops.DEFINE_ACC]
  loop = {v for ph in phis for v in ph.src[1].toposort()}
  gathers = [v for v in loop if v.op is Ops.VECTORIZE and v.dtype.scalar() != dtypes.bool and
             len(set(v.src)) > 1 and any(s.op is not Ops.CONST for s in v.src)]
  return [ph.dtype.count for ph in phis], len(gathers)


@pytest.mark.parametrize("tname", TARGETS)
def test_strided_store_columns_accumulate_along_their_loads(tname: str):
  # ResNet's input-gradient product p[b, c, y, x, i, j] = sum_o g[b, o, y, x] w[o, c, i, j]: the columns run along x,
  # where g is contiguous, but p stores the window innermost. Accumulators in store order gathered g and w lane by lane
  # every iteration (AVX-512: 96 vpermt2ps a loop; AVX2's 3-lane runs and SSE's scalar stores: short or scalar
  # accumulators); they now run along x, 16 lanes each, put in store order after the loop. Values: float64 numpy
  ast, k, _, ups = igrad_tile(tname, 16, 3)
  assert ups[0] == (16, 9), k.applied_opts
  lanes, gathers = loop_gathers(k.get_optimized_ast())
  # (a short tile keeps one accumulator per unrolled value: a multiple of outputs / 16)
  outputs = math.prod(s for s, _ in ups)
  assert gathers == 0 and set(lanes) == {16} and len(lanes) % (outputs // 16) == 0, (lanes, gathers)
  bufs = buffers_for(ast, seed=5)
  compile_kernel(k.get_optimized_ast())(bufs)
  g, w = bufs[1].reshape(2, 16, 16, 16).astype(np.float64), bufs[2].reshape(16, 8, 3, 3).astype(np.float64)
  want = np.einsum("boyx,ocij->bcyxij", g, w)
  np.testing.assert_allclose(bufs[0].reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def _col2im_ast(hw: int = 10) -> UOp:
  """The kernel of a conv's input gradient that sums the per-window products into the input's pixels (its loads
  gather along x: the products are stored window innermost), from the Tensor API (2 x 4 x hw x hw, 3 x 3)."""
  from compiler import Tensor
  from compiler.schedule.rangeify import create_schedule
  rng = np.random.default_rng(0)
  tx = Tensor(rng.standard_normal((2, 4, hw, hw)).astype(np.float32), requires_grad=True)
  tw = Tensor(rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
  tx.conv2d(tw).sum().backward()
  sched, _ = create_schedule([tx.grad.uop])
  return next(si.ast for si in sched if Kernel(si.ast).full_shape[-2:] == (3, 3))


@pytest.mark.parametrize("tname", TARGETS)
def test_a_gathered_padded_window_is_unrolled_whole(tname: str, monkeypatch):
  # col2im's 3 x 3 window (the pool's repeat trick pads 3 to 4, the dead 4th taps cut), masked by the pad and read at
  # x - j: unrolled whole,
  # x upcast by 2 (MNIST's conv4 col2im 16 -> 1.6 ms, ResNet's 54 -> 17 ms on Zen 4); big enough for two threads,
  # but no THREAD split: its batch is the first loop, which the runtime splits chunk by chunk (a THREAD axis there
  # made MNIST's conv2 col2im spill, 172 -> 219 ms a thread); values checked on those two chunks
  from compiler.runtime import compiled
  monkeypatch.setattr(compiled, "MIN_WORK_PER_THREAD", 1)
  ast = _col2im_ast(34)
  k = hand_coded_optimizations(Kernel(ast, replace(TARGETS[tname], threads=2)))
  assert k.applied_opts == [Opt(OptOps.UNROLL, 1, 0), Opt(OptOps.UNROLL, 0, 0), Opt(OptOps.UPCAST, 3, 2)], \
      k.applied_opts
  assert math.prod(Kernel(ast).full_shape) >= THREAD_MIN_WORK  # (a THREAD split's size)
  assert len(compile_kernel(k.get_optimized_ast())._chunks(None, buffers_for(ast, seed=3), 2)) == 2
  check_values(ast, k)


def test_dot_tile_accumulates_in_vectors_not_gathers():
  # outputs side by side along the store's unit stride (j) used to be one vector of REDUCEs whose every unrolled
  # value was gathered lane by lane (64 insertelements for 2x2 outputs x 16 lanes); each output now accumulates its
  # contiguous loads in a vector register, only the final sums are put side by side for the store
  ast = abt_ast(64, 64, 256)
  k = Kernel(ast)
  for opt in Opt(OptOps.UNROLL, 0, 16), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 0, 2):
    k.apply_opt(opt)
  src = get_program(k.get_optimized_ast()).src
  assert src.count("insertelement") <= 2 * 4, src.count("insertelement")
  check_values(ast, k)


@pytest.mark.parametrize("tname", TARGETS)
def test_a_long_reduce_over_the_batch_is_blocked_outside_the_outputs(tname: str):
  # a weight gradient whose inputs (2.8 MB) do not stay in L2 (the models' set to 256 KB) across its output tiles:
  # the batch in blocks of 16 images (16 x 20 x 20 = 6400 reduced elements a tile, at least 4096), 4 of them,
  # looped outside the outputs, which accumulate across blocks (the first stores, later ones add)
  target = replace(TARGETS[tname], threads=2, l2_bytes=256 << 10)
  co, ci, ks, n, o = 16, 8, 5, 64, 20
  ast = wgrad_ast(co, ci, ks, n, o)
  k = hand_coded_optimizations(Kernel(ast, target))
  assert [o for o in k.applied_opts if o.op is OptOps.BLOCK] == [Opt(OptOps.BLOCK, 0, 16)], k.applied_opts
  assert k.axis_types[:2] == [AxisType.THREAD, AxisType.BLOCK] and k.full_shape[1] == 4
  bufs = buffers_for(ast, seed=3)
  compile_kernel(k.get_optimized_ast())(bufs, threads=2)
  g = bufs[1].reshape(n, co, o, o).astype(np.float64)
  x = bufs[2].reshape(n, ci, o + ks - 1, o + ks - 1).astype(np.float64)
  want = np.einsum("nchwij,nohw->ocij", _windows(x, ks), g)
  np.testing.assert_allclose(bufs[0].reshape(want.shape), want, rtol=1e-4, atol=1e-3)


def test_block_is_refused_where_it_cannot_accumulate():
  k = Kernel(wgrad_ast(16, 8, 5, 8, 20))
  with pytest.raises(KernelOptError, match="one block"):
    k.apply_opt(Opt(OptOps.BLOCK, 0, 8))  # the batch in one block of 8
  with pytest.raises(KernelOptError, match="does not divide"):
    k.apply_opt(Opt(OptOps.BLOCK, 0, 3))
  k.apply_opt(Opt(OptOps.BLOCK, 0, 2))
  with pytest.raises(KernelOptError, match="only THREAD may follow BLOCK"):
    k.apply_opt(Opt(OptOps.UPCAST, 1, 4))
  k2 = Kernel(sink(buf(0, 4).index(UOp.range(4, 0, G)).store(
    buf(1, 64).index(UOp.range(4, 0, G) * 16 + UOp.range(16, 1, R)).load().reduce(UOp.range(16, 1, R),
                                                                                   op=Ops.MAX))))
  with pytest.raises(KernelOptError, match="sum stored as it is"):
    k2.apply_opt(Opt(OptOps.BLOCK, 0, 4))  # a max does not add up across blocks


# ---- the programs, through the Tensor API, against float64 numpy

@pytest.mark.parametrize("backend", ["llvm", "interp"])
@pytest.mark.parametrize("pad", [0, 1])
def test_conv_gradients_match_numpy(backend: str, pad: int, monkeypatch):
  from compiler import Tensor
  monkeypatch.setenv("BACKEND", backend)
  rng = np.random.default_rng(0)
  n, c, hw, ks = 3, 8, 21, 3
  x, w = rng.standard_normal((n, c, hw, hw)).astype(np.float32), rng.standard_normal((c, c, ks, ks)).astype(np.float32)
  o = hw + 2 * pad - ks + 1
  g = rng.standard_normal((n, c, o, o)).astype(np.float32)
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  (tx.conv2d(tw, padding=pad) * Tensor(g)).sum().backward()
  x64, w64, g64 = x.astype(np.float64), w.astype(np.float64), g.astype(np.float64)
  xp = np.pad(x64, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  dw = np.einsum("nchwij,nohw->ocij", _windows(xp, ks), g64)
  gp = np.pad(g64, ((0, 0), (0, 0), (ks - 1 - pad,) * 2, (ks - 1 - pad,) * 2))
  dx = np.einsum("nohwij,ocij->nchw", _windows(gp, ks), w64[:, :, ::-1, ::-1])
  np.testing.assert_allclose(tw.grad.numpy(), dw, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(tx.grad.numpy(), dx, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("backend", ["llvm", "interp"])
def test_attention_gradients_match_numpy(backend: str, monkeypatch):
  from compiler import Tensor
  monkeypatch.setenv("BACKEND", backend)
  rng = np.random.default_rng(1)
  b, h, t, d = 2, 2, 40, 48
  q, k, v, g = (rng.standard_normal((b, h, t, d)).astype(np.float32) for _ in range(4))
  tq, tk, tv = (Tensor(a, requires_grad=True) for a in (q, k, v))
  p = (tq @ tk.transpose(-2, -1) / math.sqrt(d)).softmax(-1)
  ((p @ tv) * Tensor(g)).sum().backward()
  q64, k64, v64, g64 = (a.astype(np.float64) for a in (q, k, v, g))
  s = q64 @ k64.swapaxes(-2, -1) / math.sqrt(d)
  pr = np.exp(s - s.max(-1, keepdims=True))
  pr /= pr.sum(-1, keepdims=True)
  dp = g64 @ v64.swapaxes(-2, -1)
  ds = pr * (dp - (dp * pr).sum(-1, keepdims=True)) / math.sqrt(d)
  for got, want in ((tq.grad, ds @ k64), (tk.grad, ds.swapaxes(-2, -1) @ q64), (tv.grad, pr.swapaxes(-2, -1) @ g64)):
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


def _schedule_of(*outs):
  from compiler.schedule.rangeify import create_schedule
  return create_schedule([t.uop for t in outs])[0]


def test_a_conv_input_gradient_sums_no_dead_taps():
  # the pool's repeat reads a 5 x 5 window of 12 x 12 inputs as 6 repeats a window axis; the 6th is padding for every
  # x (x + 12 * 5 < 65 and x - 5 >= 0 ask x < 5 and x > 4): the kernel sums 5 x 5 taps, not 6 x 6 (MNIST's conv2
  # input gradient 287 -> 237 ms), and gives numpy's float64 gradient
  from compiler import Tensor
  from compiler.realize import run_schedule
  rng = np.random.default_rng(2)
  x, w = rng.standard_normal((2, 3, 12, 12)).astype(np.float32), rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
  g = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
  tx = Tensor(x, requires_grad=True)
  (tx.conv2d(Tensor(w)) * Tensor(g)).sum().backward()
  sched = _schedule_of(tx.grad)
  windowed = [si.ast for si in sched if "_6_6" in si.name]
  assert windowed and all(6 not in Kernel(a).full_shape and Kernel(a).full_shape.count(5) >= 2 for a in windowed), \
      [(si.name, Kernel(si.ast).full_shape) for si in sched]
  run_schedule(sched)
  want = np.zeros(x.shape)
  for i in range(5):
    for j in range(5):
      want[:, :, i:i + 8, j:j + 8] += np.einsum("boyx,oc->bcyx", g.astype(np.float64), w[:, :, i, j].astype(np.float64))
  np.testing.assert_allclose(tx.grad.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tname", TARGETS)
def test_a_relu_epilogue_leaves_a_convs_opts_alone(tname: str):
  # relu's `x <= 0` on the conv's sum reads the output ranges only through the sum: no pad mask to upcast into
  # constants (MNIST's conv4 with relu upcast its 6 x 6 outputs whole: 27 -> 42 ms)
  from compiler import Tensor
  rng = np.random.default_rng(3)
  x, w = Tensor(rng.standard_normal((4, 8, 8, 8)).astype(np.float32)), Tensor(rng.standard_normal((16, 8, 3, 3))
                                                                              .astype(np.float32))
  plain, relu = (next(si.ast for si in _schedule_of(y) if si.name.startswith("r_")) for y in (x.conv2d(w),
                                                                                           x.conv2d(w).relu()))
  target = replace(TARGETS[tname], threads=2)
  opts = [hand_coded_optimizations(Kernel(a, target)).applied_opts for a in (plain, relu)]
  assert opts[0] == opts[1], opts
  check_values(relu, hand_coded_optimizations(Kernel(relu, target)))


@pytest.mark.parametrize("tname", TARGETS)
def test_a_weight_gradient_on_short_rows_upcasts_its_window_whole(tname: str):
  # dw[co, ci, kh, kw] over 6 x 6 outputs: kh and kw upcast whole, so each g loaded serves all 9 products (MNIST's
  # conv4 weight gradient 57 -> 33 ms with AVX-512, conv3's 339 -> 230 ms with AVX2 on a loaded machine); SSE's dot
  # tile comes first; 32 x 32 outputs keep their tile along x
  target = replace(TARGETS[tname], threads=2)
  short, long = (hand_coded_optimizations(Kernel(wgrad_ast(16, 8, 3, 4, o), target)) for o in (6, 32))
  window = [Opt(OptOps.UPCAST, 3, 0), Opt(OptOps.UPCAST, 2, 0)]
  assert (short.applied_opts[:2] == window) == (tname != "sse"), short.applied_opts
  assert not any(o.op is OptOps.UPCAST and o.arg == 0 for o in long.applied_opts), long.applied_opts
  check_values(wgrad_ast(16, 8, 3, 4, 6), short)


def test_a_dead_tap_needs_every_factor_zero():
  # taps k = 4, 5 of a sum over x (4) and k (6) read a's padding for every x (x + k < 4 and k < 4 ask x < 0 at k = 4);
  # a * b there is 0 only where b is masked too: an unmasked b may be inf there, and 0 * inf is nan
  from compiler.dtype import dtypes
  from compiler.opt.dead_taps import dead_tail_ranges
  from compiler.uop import UOp
  x, k = UOp.range(4, 0), UOp.range(6, 1)
  a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 1)
  b = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 2)
  a_at = a.index(x + k, ((x + k) < 4) & (k < 4)).load()
  ends = {}
  for b_valid in (None, k < 4):
    ast = (a_at * b.index(k, b_valid).load()).reduce(k)
    ends[b_valid is not None] = [r.src[0].arg for r in dead_tail_ranges(ast).values()]
  assert ends == {False: [], True: [4]}


@pytest.mark.parametrize("tname", TARGETS)
def test_a_linear_with_a_short_reduce_stages_w_transposed(tname: str):
  # x @ W.T (GPT's linears, reduce 256): on AVX2 and AVX-512 the matmul's tile with W's strip staged transposed,
  # columns innermost (no horizontal sums: 89 -> 106 GFLOP/s); SSE keeps the dot tile (its 4-lane sums are cheap)
  target = replace(TARGETS[tname], threads=2)
  ast = abt_ast(256, 64, 256)
  k = hand_coded_optimizations(Kernel(ast, target))
  ops = [o.op for o in k.applied_opts]
  staged = target.vector_floats >= 8
  assert (OptOps.STAGE in ops) == staged and (OptOps.UNROLL in ops) != staged, k.applied_opts
  if staged:  # the rows read the scratch as vectors along the columns' lanes: W's strip was transposed into it
    opt = k.get_optimized_ast()
    read = next(u for u in opt.toposort() if u.op is Ops.INDEX and u.src[0].op is Ops.AFTER)
    lanes = next(r for r in read.ranges if r.arg[1] is AxisType.UPCAST and r.src[0].arg == target.vector_floats)
    assert axis_stride(read.src[1], lanes) == 1
  beam = Kernel(ast, target)
  for opt in k.applied_opts:  # each opt one of BEAM's actions at its step
    assert opt in kernel_actions(beam), (opt, k.applied_opts)
    beam.apply_opt(opt)
  check_values(ast, k)
