"""`hand_coded_optimizations`: the reference's heuristics, adapted to a CPU (no locals; threads instead)."""
from __future__ import annotations

import itertools
import math
import os
from typing import Callable

from compiler.opt.heuristic_gpu import gpu_optimizations
from compiler.opt.heuristic_gpu import reduces_span_outputs as _reduces_span_outputs
from compiler.opt.kernel import MAX_UNROLL, MAX_UPCAST, Kernel, KernelOptError, Opt, OptOps, access_strides, masked_axes
from compiler.opt.stage import stage_choice
from compiler.opt.tc import tc_opt_level, tc_select, use_tc
from compiler.uop import AxisType, FastOps, toposort

# a kernel does at least this many loop iterations before it is worth splitting across threads
THREAD_MIN_WORK = 1 << 16
# a staged tile is reused by at least this many row iterations (the copy reads and writes the strip once: with 8
# row tiles, MLP's 64x784 @ 784x256, it measured 0.87-1.06x, noise on the loaded machine), and a block of it spans at
# least this much of the reduce (shorter blocks load and store the outputs more often than they save)
STAGE_MIN_REUSE, STAGE_MIN_BLOCK = 16, 32
# a BLOCK of a long reduce (block_reduce) spans at least this many of its elements per output tile, in at least this
# many blocks
BLOCK_MIN_REDUCE, BLOCK_MIN_COUNT = 4096, 4
# a window of contiguous short axes is a column tile (_window_tile) where it fills more than this fraction of its
# vectors (MNIST's 5x5: 25 of 32 lanes on AVX-512; ResNet's 3x3, 9 of 16, stays a strided-store tile: 108 -> 125 ms)
WINDOW_MIN_FILL = (3, 4)
# a padded window of at most this many elements whose loads are gathers is unrolled whole (_gathered_window: MNIST's
# conv2 col2im is 6 x 6)
WINDOW_MAX_UNROLL = 36


def _load_strides(k: Kernel) -> list[tuple]:
  """The strides of each access k loads (every access but the stores' buffers), in access order."""
  stores = {st.src[0] for st in k.stores}
  return [access_strides(k, a) for a in k.accesses if a not in stores]


def hand_coded_optimizations(k: Kernel) -> Kernel:
  """Masked small axes upcast first, a register tile for reduces sized to the target's registers and cache line,
  reduce unrolling, a float vector along the unit-stride axis, then a THREAD split of the outermost
  parallel axis; applies the opts to k. A matmul on a target with tensor cores (or with TC=2) gets its fragment
  first, and nothing else but larger fragment tiles (the seed's order); a target with locals (an OpenCL device)
  gets the GPU heuristics instead (compiler.opt.heuristic_gpu)."""
  if apply_tensor_cores(k):
    return k
  if k.target.has_local:
    return gpu_optimizations(k)
  prod = _prod
  window = _gathered_window(k)
  tiled = not window and bool(k.reduceops) and prod(k.full_shape[:k.first_reduce]) >= 1024 and _reduces_span_outputs(k)
  # a dot tile first: a condition on loaded values along its rows (GPT's gelu backward) is no pad to make constant,
  # and its batch of 4 upcast for it left no registers for the tile (7 -> 23 GFLOP/s)
  stage = os.environ.get("NOSTAGE", "0") in ("", "0")
  transposed = tiled and stage and _transposed_panel(k)
  dot = tiled and not transposed and _dot_tile(k)
  # small masked axes (from pads and stacks) first: upcasting them turns their masks into constants
  masked = (masked_axes(k) | _short_window(k)) if not dot else set()
  to_upcast: list[int] = []
  for axis in range(k.first_reduce):
    s = k.full_shape[axis]
    if isinstance(s, int) and s <= 7 and axis in masked and \
        prod(k.full_shape[k.first_upcast:]) * prod(k.full_shape[j] for j in to_upcast) * s <= 7 * 7:
      to_upcast.append(axis)
  for axis in reversed(to_upcast):
    k.apply_opt(Opt(OptOps.UPCAST, axis, 0))

  tile_fills = dot or transposed or (tiled and _register_tile(k))

  # unroll the innermost reduce if it is small, else by 4 (loop unrolling, no vectors), or by vectors; not where the
  # register tile already fills the registers (the reference's "upcast < 64" rule let SSE's 2x16 tile be unrolled:
  # 4 times the B vectors live, matmul 512 6.7 -> 10.4 ms)
  upcast_is_reduce = any(t is AxisType.UNROLL for t in k.axis_types[k.first_upcast:])
  vector_loop = k.first_reduce < k.first_upcast and _unit_stride_reduce(k, k.first_upcast - 1)
  if k.first_reduce < k.first_upcast and (prod(k.full_shape[k.first_upcast:]) <= 4 or not upcast_is_reduce) and \
      (k.upcasted == 0 or prod(k.full_shape[k.first_upcast:]) < 64) and not tile_fills:
    last = k.first_upcast - 1
    s = k.full_shape[last]
    if isinstance(s, int) and s <= 32:
      k.apply_opt(Opt(OptOps.UNROLL, last - k.first_reduce, 0))
      last = k.first_upcast - 1
      if k.first_reduce < k.first_upcast and s <= 3 and isinstance(s2 := k.full_shape[last], int) and s2 <= 3:
        k.apply_opt(Opt(OptOps.UNROLL, last - k.first_reduce, 0))
    elif isinstance(s, int) and vector_loop:
      _unroll_vectors(k, last)
    elif isinstance(s, int) and s % 4 == 0:
      k.apply_opt(Opt(OptOps.UNROLL, last - k.first_reduce, 4))

  _unroll_nested_reduce(k)

  # float vectors: upcast the axis the store walks with stride 1 if every load is contiguous or broadcast along it
  _vectorize_store(k, vector_loop and k.first_reduce < k.first_upcast)

  thread = os.environ.get("NOTHREAD", "0") in ("", "0")
  # a THREAD split of an axis the threads do not divide peels its rest, which cannot follow STAGE: then the threads
  # go first (SSE matmul 499, 2 threads: 6.3 ms on one thread, 3.4 ms split; no tile count the threads divide)
  order = _thread_order(k) if thread else []
  # (not before a transposed panel's STAGE, which _transposed_panel checked on the kernel as it is)
  early = stage and not transposed and bool(order) and all(k.full_shape[a] % k.target.threads for a in order)
  if early:
    thread_outer_axis(k)
  staged = stage and not dot and stage_panel(k, transposed)  # (a dot tile reads each operand row once a tile)
  if not staged:
    block_reduce(k)
  if thread and not early:
    thread_outer_axis(k)
  return k


def apply_tensor_cores(k: Kernel, axis: int = 0) -> bool:
  """The seed's: TC (TC, TC_SELECT and TC_OPT from the environment) where the target has tensor cores (emulated ones
  only when TC is set) or TC=2, then
  the fragment's outer M and N axes upcast by the largest of 5, 4, 3, 2 that divides them (a tile of fragments per
  work-item, each element of A and B loaded once for them); False (k unchanged) where TC does not apply."""
  use = use_tc(default=0 if k.target.tensor_cores_emulated else 1)
  if use == 0 or not (k.target.tensor_cores or use == 2) or len(k.reduceops) != 1:
    return False
  try:
    k.apply_opt(Opt(OptOps.TC, axis, (tc_select(), tc_opt_level())))
  except KernelOptError:
    return False
  applied = k.tensor_core
  assert applied is not None
  for rid in applied.outer_ids[::-1]:  # M, then N
    ax = next(i for i, r in enumerate(k.rngs) if r.arg[0] == rid)
    if (amt := next((a for a in (5, 4, 3, 2) if k.full_shape[ax] % a == 0), None)) is not None:
      k.apply_opt(Opt(OptOps.UPCAST, ax, amt))
  return True


def _short_window(k: Kernel) -> set[int]:
  """A weight gradient's window on short rows, dw[co, ci, kh, kw] = sum_{b, y, x} g[b, co, y, x] x[b, ci, y + kh,
  x + kw] with x of at most 8 (MNIST's 6 x 6 and 8 x 8 convs): the store's two innermost axes (kw with stride 1, kh
  with stride kw), g broadcast along both and x read along both, upcast whole as masked axes are, so each g loaded
  serves the window's kh x kw products (3 of them with kw alone: conv4's 57 -> 32 ms, conv3's 39 -> 31 ms at batch
  512, AVX-512). A longer x gets its tile along x (ResNet's 32 x 32: 91 GFLOP/s). Empty where it does not apply."""
  if not k.reduceops or k.upcasted:
    return set()
  stores = [access_strides(k, st.src[0]) for st in k.stores]
  loads = _load_strides(k)
  kw = next((a for a in range(k.first_reduce) if all(st[a] == 1 for st in stores)), None)
  if kw is None or not isinstance(n := k.full_shape[kw], int):
    return set()
  kh = next((a for a in range(k.first_reduce) if all(st[a] == n for st in stores)), None)
  if kh is None or not isinstance(m := k.full_shape[kh], int) or n * m > 16 or \
      not all(isinstance(s, int) and s <= 8 for s in k.full_shape[k.first_reduce:k.first_upcast][-1:]):
    return set()
  both = [st for st in loads if st[kw] is not None and st[kh] is not None]
  if not any(st[kw] == 0 and st[kh] == 0 for st in both) or not any(st[kw] and st[kh] for st in both):
    return set()
  return {kw, kh}


def _gathered_window(k: Kernel) -> bool:
  """A reduce over a short padded window whose loads gather along the store's unit-stride axis (col2im: a conv's input
  gradient summing its per-window products, dX[n, c, y, x] = sum_{i, j} P[n, c, y - i, x - j, i, j] where the window
  is in bounds): the window unrolled whole and that axis upcast by 2 (by 4 was no better, by 8 worse). Measured (1
  thread, Zen 4, a loaded machine, interleaved, ms): MNIST's conv2 col2im (6 x 6 window, batch 31) 230 -> 79, its
  conv4's (4 x 4, batch 128) 25 -> 1.6, ResNet's (4 x 4, batch 16) 54 -> 17. Whether it applied."""
  reduces = list(range(k.first_reduce, k.first_upcast))
  sizes = [k.full_shape[a] for a in reduces]
  if not k.reduceops or k.upcasted or not reduces or not all(isinstance(s, int) for s in sizes) or \
      math.prod(sizes) > WINDOW_MAX_UNROLL or not set(reduces) & masked_axes(k):
    return False
  stores = {st.src[0] for st in k.stores}
  strides = [access_strides(k, st) for st in stores]
  axis = next((a for a in range(k.first_reduce) if all(st[a] == 1 for st in strides)), None)
  if axis is None or not isinstance(size := k.full_shape[axis], int) or size % 2 or \
      not any(access_strides(k, a)[axis] not in (0, 1) for a in k.accesses if a not in stores):
    return False
  for a in reversed(reduces):  # (the later one first: unrolling an axis moves the ones after it)
    k.apply_opt(Opt(OptOps.UNROLL, a - k.first_reduce, 0))
  k.apply_opt(Opt(OptOps.UPCAST, axis, 2))
  return True


def _unroll_nested_reduce(k: Kernel) -> None:
  """A kernel with a nested reduction (bufferize's `nested_reduces`: conv's input gradient summing the per-window one)
  unrolls its innermost reduce axis, the inner sum's, by 4 when nothing is unrolled yet: its loads are gathers (one
  per lane of the register tile) and the inner loop is short, so the unrolled loads overlap. MNIST conv2's at batch
  32, tile 8x8 (batch x channel): 75 ms, by 2 60, by 4 44, by 8 46; a vector along x in place of the tile: 185-340."""
  nested = any(any(v.op is FastOps.REDUCE for v in toposort(r.src[0])) for r in k.reduceops)
  last = k.first_upcast - 1
  if not nested or last < k.first_reduce or any(t is AxisType.UNROLL for t in k.axis_types[k.first_upcast:]):
    return
  s = k.full_shape[last]
  if isinstance(s, int) and s > 4 and s % 4 == 0:
    k.apply_opt(Opt(OptOps.UNROLL, last - k.first_reduce, 4))


def _unit_stride_reduce(k: Kernel, axis: int) -> bool:
  """Whether every load that walks this reduce axis walks it with stride 1 (a row's sum or max, a softmax): LLVM
  vectorizes such a loop itself, with vector accumulators (the accumulation is reassociable); unrolling it into 4
  scalar accumulators first made it slower (softmax's max 36 -> 25 us, its sum of exps 89 -> 73 us, Zen 4)."""
  stores = {st.src[0] for st in k.stores}
  walks = [access_strides(k, a)[axis] for a in k.accesses if a not in stores]
  walks = [w for w in walks if w != 0]
  return bool(walks) and all(w == 1 for w in walks)


def _unroll_vectors(k: Kernel, axis: int) -> None:
  """Unroll a reduce every load walks with stride 1 by two cache lines of floats (or one, or a vector): codegen
  makes the unrolled values vector loads into vector accumulators, combined across lanes after the loop. A max
  gets its cheap form there (x86's max instruction and a NaN mask: 2 instructions a vector, where LLVM's own
  vectorization of IEEE maximum took 6; softmax's max 26 -> 14 us on Zen 4). Not where a load is masked along the
  axis: its lanes' loads differ in their masks and stay scalar."""
  s, line, vec = k.full_shape[axis], k.target.line_floats, k.target.vector_floats
  if axis in masked_axes(k):
    return
  amts = [a for a in (2 * line, line, vec) if a <= MAX_UNROLL]
  amt = next((a for a in amts if s % a == 0), None)
  if amt is not None:
    k.apply_opt(Opt(OptOps.UNROLL, axis - k.first_reduce, amt))
  elif (amt := next((a for a in amts if a < s), None)) is not None:  # none divides: the remainder peeled
    k.apply_opt(Opt(OptOps.PEEL, axis, amt))


def _prod(xs) -> int:
  return math.prod(x for x in xs if isinstance(x, int))


def _register_tile(k: Kernel) -> bool:
  """Register blocking for a reduce, sized from the target: each loaded value is reused from registers across the
  tile. Columns: a vector along the output's unit-stride axis (for a matmul: a row of B, A's element broadcast)
  covering at least one cache line; rows: along the axes some load is broadcast along (the reference's rule), while
  the accumulators fit in the registers left by the column vectors and one broadcast operand; then more columns
  while they still fit. A matmul gets 6x16 (or 4x16) with AVX2, 8x32 with AVX-512, 2x16 with SSE. Finally the
  column tiles go outside the row tiles, so one B panel stays cached across consecutive row tiles. Whether the
  tile's accumulators take at least half of the registers."""
  tgt = k.target
  vec, regs = tgt.vector_floats, tgt.vector_regs

  def accumulators() -> int:
    return -(-_prod(s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.UPCAST) // vec)

  if _window_tile(k):
    return 2 * accumulators() >= regs
  choice = _column_choice(k, max(vec, tgt.line_floats))
  strided = choice is not None and any(access_strides(k, st.src[0])[choice[0]] != 1 for st in k.stores)
  if strided:
    _widen_short_columns(k, *choice)
  cols = _tile_columns(k, max(vec, tgt.line_floats))
  col_vectors = -(-cols[1] // vec) if cols is not None else 1
  if strided:
    _strided_store_rows(k, regs - col_vectors - 1, accumulators)
    return 2 * accumulators() >= regs
  upcasted: set[int] = {cols[0]} if cols is not None else set()  # axis ids: a split keeps its id
  # rows while the tile positions are many; with peeled columns (whose positions do not count the remainder's)
  # at least one row axis, as a smaller column tile that divides would have had
  peeled = bool(k.applied_opts) and k.applied_opts[-1].op is OptOps.PEEL
  col_axis = next((i for i, r in enumerate(k.rngs) if cols is not None and r.arg[0] == cols[0]), None)
  tiles = k.full_shape[col_axis] if col_axis is not None else 0
  odd_tiles = isinstance(tiles, int) and tiles > 2 and tiles % 2 == 1
  panel = _panel_too_big(k)
  rows_peeled = False
  while _prod(k.full_shape[:k.first_reduce]) >= 1024 or (peeled and len(upcasted) == 1):
    strides = [access_strides(k, a) for a in k.accesses]
    choices = []
    for axis in range(k.first_reduce):
      size = k.full_shape[axis]
      r = k.rngs[axis]
      if r.arg[0] in upcasted or not isinstance(size, int) or r.arg[1] is AxisType.THREAD:
        continue
      if not any(st[axis] == 0 and not any(x == 0 for x in st[k.first_upcast:]) for st in strides):
        continue
      budget = max(1, regs - col_vectors - 1)
      fits = [a for a in (8, 6, 4, 3, 2) if accumulators() * a <= budget]
      amt = _row_amount(size, fits)
      # peeled columns (now, or by the second set of column vectors below where it fits: an odd number of column
      # tiles) whose tiles should go outside the rows: rows that do not divide (see _row_amount)
      second = odd_tiles and accumulators() * (amt or 1) * 2 <= regs - 2 * col_vectors - 1
      if panel and (peeled or second) and amt is not None:
        amt = _row_amount(size, fits, budget // accumulators(), tgt.threads)
      if amt is None:
        continue
      pos = sum(1 for st in strides if st[axis] != 0)
      total = sum(st[axis] if st[axis] is not None else 1 << 30 for st in strides)
      choices.append((pos, total, -amt, axis))
    if not choices:
      break
    _, _, amt, axis = min(choices)
    upcasted.add(k.rngs[axis].arg[0])
    _upcast_or_peel(k, axis, -amt)
    rows_peeled = rows_peeled or k.applied_opts[-1].op is OptOps.PEEL
  if cols is None:
    return 2 * accumulators() >= regs
  # a second set of column vectors (the outer part kept the axis id) if the accumulators still fit; not peeled
  # where the rows divide and the column tiles should go outside them (the row loop would go outermost)
  axis = next((i for i, r in enumerate(k.rngs) if r.arg[0] == cols[0]), None)
  if axis is not None and accumulators() * 2 <= regs - 2 * col_vectors - 1 and \
      isinstance(size := k.full_shape[axis], int) and size > 2 and \
      not (size % 2 and not peeled and not rows_peeled and panel):
    _upcast_or_peel(k, axis, 2)
  _panel_order(k, cols[0])
  return 2 * accumulators() >= regs


def _transposed_panel(k: Kernel) -> bool:
  """A matmul's register tile for A B^T where B is read as W[j, k] (a linear layer's x @ W.T: both operands walk the
  reduce with stride 1): the columns along j (two vectors), the rows along an axis of A, to be STAGEd with the
  columns innermost (compiler.opt.stage transposes the strip once into the scratch), so each row reads its B vectors
  and broadcasts A as in A B. The dot tile's vector accumulators each end in a horizontal sum, which at GPT's
  reduce of 256 was a third of the work: 512x256 @ 256x1024 89 -> 106 GFLOP/s (Zen 4, AVX-512, 1 thread, loaded
  core; the plain A B there 100; attention's q k^T, 128x64 @ 64x128, 57 -> 78). Only for one reduce axis of at most 32
  vectors (a longer one leaves the sums a small part), nothing upcast yet, and a strip that at least STAGE_MIN_REUSE
  row tiles read (what the STAGE that follows, stage_panel(transposed), asks). Whether it applied."""
  if k.upcasted or k.first_reduce != k.first_upcast - 1 or k.vars or not k.reduceops:
    return False
  red, vec = k.first_reduce, k.target.vector_floats
  size = k.full_shape[red]
  stores = {st.src[0] for st in k.stores}
  loads = [st for a in k.accesses if a not in stores and (st := access_strides(k, a))[red] != 0]
  # (a reduce longer than 32 vectors leaves the dot tile's sums a small part: K 512 4% faster staged, 1024 3% slower;
  # SSE's 4-lane sums are cheap: q k^T with K 64 19% slower staged, where AVX2's tile was 23% faster)
  if len(loads) != 2 or any(st[red] != 1 for st in loads) or not isinstance(size, int) or vec < 8 or \
      not STAGE_MIN_BLOCK <= size <= 32 * vec:
    return False
  cols_n = 2 * vec
  # the columns: the innermost output axis along which exactly one operand (B) varies, by at least a vector
  col = next((a for a in reversed(range(k.first_reduce)) if isinstance(n := k.full_shape[a], int) and n % cols_n == 0
              and sorted(st[a] == 0 for st in loads) == [False, True] and all(st[a] is not None for st in loads)
              and max(abs(st[a]) for st in loads) >= vec and k.axis_types[a] is not AxisType.THREAD), None)
  if col is None:
    return False
  b = next(i for i, st in enumerate(loads) if st[col] != 0)
  # the rows: the innermost axis along which A varies and B is broadcast; as many as the registers hold (each row
  # accumulates two vectors; B's two vectors and A's broadcast are live besides)
  row = next((a for a in reversed(range(k.first_reduce)) if a != col and isinstance(k.full_shape[a], int) and
              loads[b][a] == 0 and loads[1 - b][a] not in (0, None) and k.axis_types[a] is not AxisType.THREAD), None)
  if row is None:
    return False
  rows = next((r for r in (8, 6, 4, 3, 2) if k.full_shape[row] % r == 0 and 2 * r + 3 <= k.target.vector_regs), None)
  reuse = _prod(k.full_shape[a] for a in range(k.first_reduce) if loads[b][a] == 0) // (rows or 1)
  # (the STAGE after it, stage_panel's, applies only where enough row tiles reuse the strip)
  if rows is None or reuse < STAGE_MIN_REUSE:
    return False
  opts = [Opt(OptOps.UPCAST, axis, amt) for axis, amts in sorted([(col, (vec, 2)), (row, (rows,))], reverse=True)
          for amt in amts]  # (the later axis first: ids stay put; the columns' vector innermost, as a matmul's)
  # without its STAGE the tile would gather B lane by lane: only where stage_panel stages it (tried on a copy)
  trial = k.copy()
  try:
    for opt in opts:
      trial.apply_opt(opt)
  except KernelOptError:
    return False
  if not stage_panel(trial, transposed=True):
    return False
  for opt in opts:
    k.apply_opt(opt)
  return True


def _dot_tile(k: Kernel) -> bool:
  """A register tile of dot products, for a reduce whose loads all walk its innermost axis with stride 1 while no
  output axis has a vector to load (a matmul with a transposed operand, A B^T: attention's dp = dO V^T, a linear
  layer's dx = dY W^T; a conv's weight gradient, dW[co, ci, kh, kw] = sum dY[n, co, oh, ow] X[n, ci, oh+kh, ow+kw]).
  The reduce is unrolled by two vectors (peeled where they do not divide it): each output accumulates in one vector
  register, its lanes summed after the loop (codegen's vector accumulators). Rows on both sides: a output axes along
  which one load is broadcast, so each loaded vector serves the other side's rows; the accumulators and one loaded
  vector per row fit in the registers. The column tile of a matmul gathered such a kernel's loads lane by lane.
  Measured on Zen 4 (AVX-512, 1 thread): dY W^T 128x768 @ 768x256 53 -> 105 GFLOP/s, MNIST's conv2 weight gradient
  23 -> 38; ResNet's (3 x 3, pad 1: x's load masked along the reduce, once refused here and left a strided-store
  tile of scalar FMAs) 9 -> 54 GFLOP/s on a loaded core, 4 x 4 rows of co and ci. Whether it applied."""
  if k.first_reduce >= k.first_upcast or _column_choice(k, max(k.target.vector_floats, k.target.line_floats)):
    return False
  red, vec = k.first_upcast - 1, k.target.vector_floats
  size = k.full_shape[red]
  stores = {st.src[0] for st in k.stores}
  # the operands: the loads that walk the reduce (others, a row's scale fused in, are read once per output)
  loads = [st for a in k.accesses if a not in stores and (st := access_strides(k, a))[red] != 0]
  # (a load masked along the reduce, a conv's padded window, is a masked vector load; a WHERE along it, GPT's gelu
  # backward, a vector select)
  if not isinstance(size, int) or len(loads) < 2 or any(st[red] != 1 for st in loads):
    return False
  # a reduce of one shorter vector, at least half a register's lanes (a 3 x 3 conv's 8 columns with AVX-512):
  # accumulated in vectors of its length (MNIST's conv3 weight gradient, where the short window's tile went: 48 -> 18 ms
  # with AVX-512, 1 thread, Zen 4; even with AVX2, whose vector it is). Not under 8 lanes, which nothing measured
  whole = size <= vec
  if whole:
    if size & (size - 1) or 2 * size < vec or size < 8:
      return False
    vec = size
  # rows: a side is the output axes along which the same operands are broadcast (and the others vary); not an axis
  # one walks by less than a vector (a conv's kw: its rows would be unaligned copies of the same vectors, MNIST's 49
  # -> 24 GFLOP/s). Two sides that broadcast different operands make the tile
  sides: dict[frozenset[int], list[tuple[int, int]]] = {}
  for axis in range(k.first_reduce):
    n = k.full_shape[axis]
    flat = frozenset(i for i, st in enumerate(loads) if st[axis] == 0)
    if isinstance(n, int) and 0 < len(flat) < len(loads) and k.axis_types[axis] is not AxisType.THREAD and \
        all(st[axis] is not None and (st[axis] == 0 or abs(st[axis]) >= vec) for st in loads):
      sides.setdefault(flat, []).append((axis, n))
  budget, pre = k.target.vector_regs - 1, _prod(s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.UPCAST)
  # (outputs, -(vectors loaded a step), axis sizes, amount a, axis a, amount b, axis b): the most outputs, fewest loads
  best: tuple[int, ...] | None = None
  for (flat_a, side_a), (flat_b, side_b) in itertools.combinations(sorted(sides.items(), key=lambda x: sorted(x[0])),
                                                                   2):
    if flat_a & flat_b:
      continue
    for (axis_a, n_a), (axis_b, n_b) in itertools.product(side_a, side_b):
      for amt_a, amt_b in itertools.product((8, 6, 5, 4, 3, 2), repeat=2):
        # an operand loads one vector a row of the side it varies along (both: a row of each)
        loaded = sum((1 if i in flat_a else amt_a) * (1 if i in flat_b else amt_b) for i in range(len(loads)))
        if n_a % amt_a or n_b % amt_b or pre * (amt_a * amt_b + loaded) > budget:
          continue
        cand = (amt_a * amt_b, -loaded, n_a, n_b, amt_a, axis_a, amt_b, axis_b)
        best = cand if best is None or cand[:4] > best[:4] else best
  if best is None:
    return False
  amt = next((a for a in (2 * vec, vec) if a <= MAX_UNROLL and size % a == 0), None)
  if amt is not None:  # (one vector the whole axis: unrolled whole, as BEAM's action spells it)
    k.apply_opt(Opt(OptOps.UNROLL, red - k.first_reduce, 0 if whole else amt))
  else:  # the most whole vectors up to two, the rest peeled (MNIST's 20 outputs a row: 16 + 4)
    k.apply_opt(Opt(OptOps.PEEL, red, min(2 * vec, size // vec * vec, MAX_UNROLL)))
  # the later axis first: an axis upcast whole leaves the axes before it where they are
  for amt_r, axis in sorted([best[4:6], best[6:8]], key=lambda t: -t[1]):
    k.apply_opt(Opt(OptOps.UPCAST, axis, amt_r))
  return True


def _window_tile(k: Kernel) -> bool:
  """Columns of a store whose unit-stride axis is shorter than a vector but continues contiguously into the next
  axes (a conv's input gradient before col2im, P[n, ci, y, x, kh, kw] = sum_co dY[n, co, y, x] W[co, ci, kh, kw]: kh x
  kw, 25 contiguous floats in P and in W, dY broadcast along them): those axes upcast whole, one contiguous column
  vector of window elements, where it fills more than WINDOW_MIN_FILL of its vectors; rows along an axis the window's
  load varies along and the other operand is broadcast along (ci: one dY broadcast serves every row), while the
  accumulators take at most a quarter of the registers. The strided-store columns (along x) stored each vector lane
  by lane: MNIST's conv2 at batch 31, 1 thread, Zen 4: 94-124 -> 30-42 ms. Whether it applied."""
  vec, regs = k.target.vector_floats, k.target.vector_regs
  stores = [access_strides(k, s.src[0]) for s in k.stores]
  loads = _load_strides(k)
  window: list[int] = []
  n = 1
  while True:  # grow the window outward: the next axis every store (and each load walking it) continues into
    nxt = next((a for a in range(k.first_reduce) if a not in window and isinstance(k.full_shape[a], int) and
                k.axis_types[a] is not AxisType.THREAD and all(st[a] == n for st in stores)), None)
    if nxt is None or n * k.full_shape[nxt] > 2 * MAX_UPCAST or \
        any(st[nxt] not in (0, n * (st[window[0]] if window else 1)) or
            (window and (st[nxt] == 0) != (st[window[0]] == 0)) for st in loads):
      break
    window.append(nxt)
    n *= k.full_shape[nxt]
  if len(window) < 2 or k.full_shape[window[0]] % vec == 0:  # (whole vectors along one axis: the matmul's tile)
    return False
  col_vectors = -(-n // vec)
  walks = [st for st in loads if st[window[0]] == 1]
  flat = [st for st in loads if st[window[0]] == 0]
  if not walks or not flat or n * WINDOW_MIN_FILL[1] <= col_vectors * vec * WINDOW_MIN_FILL[0]:
    return False
  for axis in sorted(window, reverse=True):  # (an axis upcast whole moves the later ones: the last first)
    k.apply_opt(Opt(OptOps.UPCAST, axis, 0))
  rows = [a for a in range(k.first_reduce) if isinstance(k.full_shape[a], int) and k.axis_types[a] is not
          AxisType.THREAD and all(st[a] != 0 for st in walks) and all(st[a] == 0 for st in flat)]
  for axis in reversed(rows):
    amt = next((a for a in (8, 4, 2) if k.full_shape[axis] % a == 0 and a * col_vectors <= regs // 4), None)
    if amt is not None:
      k.apply_opt(Opt(OptOps.UPCAST, axis, amt))
      break
  return True


def _widen_short_columns(k: Kernel, axis: int, amt: int) -> None:
  """A strided store's columns that take their whole axis and less than a vector (a conv's input gradient before
  col2im on 8 x 8 pixels with AVX-512: P[n, ci, y, x, kh, kw] = sum_co dY[n, co, y, x] W[co, ci, kh, kw]) widened
  to a vector along the axis the vector's load runs on into contiguously (dY's y: x's 8 floats then the next row's)
  and every other load is broadcast along: each load is one vector of y x x. Measured (MNIST conv3's, batch 512, 1
  thread, Zen 4, a loaded machine, CPU time): 36-46 -> 15-16 ms. Upcast before the columns (ids stay put)."""
  vec, size = k.target.vector_floats, k.full_shape[axis]
  if not isinstance(size, int) or amt != size or size >= vec or vec % size:
    return
  loads = _load_strides(k)
  for outer in reversed(range(k.first_reduce)):
    n = k.full_shape[outer]
    if outer != axis and isinstance(n, int) and n % (vec // size) == 0 and k.axis_types[outer] is not AxisType.THREAD \
        and all(st[outer] == (size if st[axis] == 1 else 0) for st in loads):
      k.apply_opt(Opt(OptOps.UPCAST, outer, vec // size))
      return


def _strided_store_rows(k: Kernel, budget: int, accumulators: Callable[[], int]) -> None:
  """Rows of a column tile the store walks with a stride (see _column_choice): along every axis the column vector's
  load is broadcast along, innermost first, while the accumulators fit in `budget`; the matmul's rule (one row axis)
  left ResNet's input gradient (dY[n, co, h, w] x W[co, ci, kh, kw]) at 3 of its 9 kh x kw rows, 8 -> 20 GFLOP/s
  with kh, kw and 2 of ci on Zen 4."""
  axis = max(range(k.first_upcast, k.shape_len), key=lambda i: k.rngs[i].arg[0])  # the columns' vector: the newest
  stores = {st.src[0] for st in k.stores}
  vectors = [a for a in k.accesses if a not in stores and access_strides(k, a)[axis] == 1]
  for rid in [r.arg[0] for r in reversed(k.rngs[:k.first_reduce])]:
    row = next(i for i, r in enumerate(k.rngs) if r.arg[0] == rid)  # (an axis upcast whole moves the later ones)
    size = k.full_shape[row]
    if not isinstance(size, int) or k.axis_types[row] is AxisType.THREAD or \
        any(access_strides(k, a)[row] != 0 for a in vectors):
      continue
    amt = next((a for a in (size, 8, 6, 4, 3, 2) if a <= MAX_UPCAST and size % a == 0 and
                accumulators() * a <= budget and a > 1), None)
    if amt is not None:
      k.apply_opt(Opt(OptOps.UPCAST, row, amt))
  # the reduce unrolled by 4 all the same (its loads are a vector and broadcasts, not a register row of vectors):
  # 17 -> 21 GFLOP/s there
  last = k.first_upcast - 1
  if k.first_reduce <= last and isinstance(n := k.full_shape[last], int) and n % 4 == 0:
    k.apply_opt(Opt(OptOps.UNROLL, last - k.first_reduce, 4))


def _row_amount(size: int, fits: list[int], peel_most: int = 0, threads: int = 1) -> int | None:
  """Rows of a register tile: the most that fit the registers (and the axis), peeled when they do not divide it.
  Measured (Zen 5, AVX-512, 1 thread): matmul 500 with 8 rows peeled (62 x 8 + 4) 1.36 ms, with 4 rows that divide
  1.95 ms. peel_most > 0: rows that do not divide the axis, the most of `fits` that do not, else the fewest more up
  to peel_most (what the registers hold); of those with at least as many rows, first one that leaves a number of
  row tiles the threads divide (their THREAD split: with no loop every store's, no other loop splits). Why: with
  peeled columns (a remainder store that does not loop over the column tiles), rows that divide make the row loop
  the parallel loop; codegen keeps it inside the column tiles and B's staging (compiler/codegen/linearizer.py), so
  the peel buys only an even count of row tiles for the THREAD split (AVX-512 matmul 1000, 1 thread: 8 dividing
  rows 8.4 ms, 7 peeled 8.3 ms; before that codegen rule, 18.1 vs 8.4 ms)."""
  if size < 2 or not fits:
    return None
  if peel_most > 0:
    amts = [a for a in [*range(min(fits[0], size), 1, -1), *range(fits[0] + 1, min(peel_most, size - 1) + 1)]
            if size % a]
    amt = next((a for a in amts if size // a % threads == 0 and a >= amts[0]), None)
    if amt is None and threads > 1:
      # fewer rows, so that the threads still split the work: rows that divide (the row loop is then every store's,
      # which THREAD or the runtime splits) or peeled rows in a count the threads divide. AVX2 matmul 500: 6 peeled
      # rows (83 row tiles, 31 column tiles) ran on one thread, 2.29 ms; 5 rows 2.39 ms on one, 1.19 ms on two
      amt = next((a for a in range(min(fits[0], size), 1, -1) if size % a == 0 or size // a % threads == 0), None)
    amt = amt if amt is not None else amts[0] if amts else None
    if amt is not None:
      return amt
  return next((a for a in fits if a <= size), None)


def _upcast_or_peel(k: Kernel, axis: int, amt: int) -> None:
  """UPCAST by amt when it divides the axis, else PEEL (the remainder as its own copy of the work)."""
  size = k.full_shape[axis]
  k.apply_opt(Opt(OptOps.UPCAST if isinstance(size, int) and size % amt == 0 else OptOps.PEEL, axis, amt))


def _tile_columns(k: Kernel, want: int) -> tuple[int, int] | None:
  """Upcast the output's unit-stride axis along which some load is broadcast by `want` elements (one cache line,
  at least one vector), else the largest vector-sized amount that divides it; (axis id, amount) or None."""
  choice = _column_choice(k, want)
  if choice is None:
    return None
  axis, amt = choice
  rid = k.rngs[axis].arg[0]
  _upcast_or_peel(k, axis, amt)
  return rid, amt


def _column_choice(k: Kernel, want: int) -> tuple[int, int] | None:
  """(axis, amount) of _tile_columns' tile, or None: nothing applied. Where no axis the store walks with stride 1
  qualifies, one some load is a vector along while the store is not (a conv's input gradient before col2im,
  P[n, ci, h, w, kh, kw] = sum_co dY[n, co, h, w] W[co, ci, kh, kw]: columns along w, each row's sums stored
  strided once at the end of the reduce)."""
  vec = k.target.vector_floats
  stores = [access_strides(k, s.src[0]) for s in k.stores]
  loads = _load_strides(k)
  axes = [a for a in reversed(range(k.first_reduce)) if all(st[a] == 1 for st in stores)]
  axes += [a for a in reversed(range(k.first_reduce)) if a not in axes and any(st[a] == 1 for st in loads)]
  for axis in axes:
    size = k.full_shape[axis]
    if not isinstance(size, int) or k.axis_types[axis] is AxisType.THREAD:
      continue
    if all(st[axis] in (0, 1) for st in loads) and any(st[axis] == 0 for st in loads):
      # the line-wide tile, its remainder peeled when it does not divide; else a vector that divides
      amt = next((a for a in (want, vec, 8, 4) if a <= MAX_UPCAST and (size % a == 0 or a == want < size)), None)
      if amt == want and size % want % vec and vec < min(want, size) and size % vec < size % want:
        # a line's remainder that is not whole vectors, where a vector's is smaller: conv2d's 30 outputs as 3x8 + 6,
        # not 16 + 14 (kernel 6.7 -> 1.0 ms on Zen 3, AVX2); a remainder of whole vectors is fast (matmul with 40 or
        # 56 columns: 16-wide tiles 10-20% faster than 8-wide)
        amt = vec
      if amt is not None:
        return axis, amt
  return None


def _panel_order(k: Kernel, col_id: int) -> None:
  """Put the column tiles' loop outside the other global loops (SWAP) when the inputs that do not depend on the
  rows (B) are too big to stay in L2 across the row loop: then the reduce reads the same columns of B for
  consecutive row tiles, and that panel (reduce length x tile columns) stays cached while the rows stream. Measured
  on Zen 4: neutral on a quiet core for matmul 512, +20% with other processes sharing its caches."""
  axis = next((i for i, r in enumerate(k.rngs) if r.arg[0] == col_id), None)
  if axis is None or axis == 0 or axis >= k.global_dims or not isinstance(k.full_shape[axis], int) or \
      k.full_shape[axis] < 2:
    return
  if _panel_too_big(k):
    k.apply_opt(Opt(OptOps.SWAP, 0, axis))


def _panel_too_big(k: Kernel) -> bool:
  """Whether the inputs that do not depend on the rows (axis 0: a matmul's B) are too big to stay in L2 across the
  row loop (more than half of it)."""
  stores = {s.src[0] for s in k.stores}
  row_free = {a.src[0] for a in k.accesses if a not in stores and access_strides(k, a)[0] == 0}
  return sum(max(0, b.dtype.size) * b.dtype.base.itemsize for b in row_free) * 2 > k.target.l2_bytes


def _vectorize_store(k: Kernel, vector_loop: bool) -> None:
  """Upcast the axis every store walks with stride 1 (and every load with stride 0 or 1) to a float vector;
  vector_loop: the innermost reduce is read with stride 1 (it is a loop of vectors already)."""
  stores = [access_strides(k, s.src[0]) for s in k.stores]
  loads = _load_strides(k)
  if any(st[a] == 1 for st in stores for a in range(k.first_upcast, k.shape_len)):
    return  # the store is already a vector
  cands = [a for a in range(k.first_reduce)
           if all(st[a] == 1 for st in stores) and all(st[a] in (0, 1) for st in loads)]
  if not cands and k.upcasted == 0 and k.first_reduce > 0 and not vector_loop:
    cands = [k.first_reduce - 1]  # as the reference does: upcast something (not rows of a loop LLVM vectorizes)
  for axis in reversed(cands):
    s = k.full_shape[axis]
    if not isinstance(s, int):
      continue
    # keep the upcasted block within 64 elements (a row reduction's unrolled lanes are not the store's)
    block = k.upcast_size() if _reduces_span_outputs(k) else \
        _prod(s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.UPCAST)
    room = 64 // max(1, block)
    for amt in sorted({k.target.vector_floats, 8, 4}, reverse=True):
      if amt <= min(16, room) and s % amt == 0:
        k.apply_opt(Opt(OptOps.UPCAST, axis, amt))
        return
    if 4 < s <= min(MAX_UPCAST, room):  # a short axis no vector divides (a layer of 10 outputs): all of it
      k.apply_opt(Opt(OptOps.UPCAST, axis, 0))
      return
    vec = k.target.vector_floats
    if vec < s and vec <= min(16, room):  # a long one: vectors, the remainder peeled
      k.apply_opt(Opt(OptOps.PEEL, axis, vec))
      return


def stage_panel(k: Kernel, transposed: bool = False) -> bool:
  """STAGE the first reduce axis of a register-tiled reduce (compiler.opt.stage): the input tile its row loop reads
  again (a matmul's B strip) copied once to a contiguous scratch, in one block if the scratch fits in a quarter of
  L2, else in the largest blocks that do. Only where at least STAGE_MIN_REUSE row iterations reuse the tile (the
  copy costs about one row tile's loads) and the strip is larger than half of L1 (a smaller one stays in L1 across
  the rows next to A's rows anyway: matmul 128 and 192 were 2-5% slower staged, 256 the same, 384 4% faster).
  Measured on Zen 5 (AVX-512, 48 KiB L1, 1 MiB L2), one core, GFLOP/s: matmul 512 159 -> 167, 768 109 -> 209,
  1024 126 -> 212, 2048 82 -> 220, 512x1024x256 48 -> 221, 256x1024x8192 (blocks of 2048) 86 -> 192.
  `transposed` (_transposed_panel's tile): staged whatever its size, the copy being the transpose the tile reads."""
  if not k.reduceops or k.upcasted == 0 or k.first_reduce >= k.first_upcast or k.vars:
    return False
  rng = k.rngs[k.first_reduce]
  size = k.full_shape[k.first_reduce]
  choice = stage_choice(k.rngs, k.global_dims, k.ast, rng)
  if choice is None or not isinstance(size, int) or choice[0] < STAGE_MIN_REUSE:
    return False
  if choice[1] * size * 2 <= k.target.l1_bytes and not transposed:  # the strip stays in L1 across the rows
    return False
  budget = k.target.l2_bytes // 4
  amt = next((a for a in range(size, 0, -1) if size % a == 0 and a * choice[1] <= budget), 1)
  if amt < STAGE_MIN_BLOCK and amt != size:
    return False
  try:
    k.apply_opt(Opt(OptOps.STAGE, 0, amt))
  except KernelOptError:
    return False
  return True


def block_reduce(k: Kernel) -> bool:
  """BLOCK the outermost reduce axis of a register-tiled kernel whose inputs are too big to stay in L2 across its
  output tiles (more than half of it: each tile read them all from beyond L2 again), in the fewest steps of that axis
  whose reduce per tile is BLOCK_MIN_REDUCE long (each block ends in the tile's sums, and loads and stores its
  outputs), where that leaves at least BLOCK_MIN_COUNT blocks; looped outside the outputs, which accumulate across
  them. A conv's weight gradient reduces over the batch into few outputs: MNIST's conv2 (batch 512, 64 MB of inputs,
  100 KB of outputs) in blocks of 16 images, measured on Zen 4 (1 MiB L2, 32 MiB L3), 1 thread, interleaved: 53 ->
  62 GFLOP/s (blocks of 2: 64 there, but 63 -> 34 at batch 32, where 16 leaves 2 blocks and none is made)."""
  reduces = [i for i in range(k.first_reduce, k.first_upcast) if k.axis_types[i] is AxisType.REDUCE]
  # not the reduce's only loop (the one its vectors or unrolled lanes walk: each block would end in their sums)
  if not k.reduceops or k.upcasted == 0 or len(reduces) < 2 or k.vars or _prod(k.full_shape[:k.first_reduce]) < 2:
    return False
  rng, size = k.rngs[reduces[0]], k.full_shape[reduces[0]]
  stores = {st.src[0] for st in k.stores}
  ins = [a for a in k.accesses if a not in stores and rng in a.ranges]
  # what one iteration of the outermost output loop reads (a forward conv's one image; attention's one head): an
  # input that varies along that loop is read a part at a time
  outer, n0 = k.rngs[0], k.full_shape[0]
  parts = {a.src[0]: n0 if outer in a.ranges and isinstance(n0, int) else 1 for a in ins}
  if not isinstance(size, int) or sum(b.dtype.size * b.dtype.base.itemsize / n for b, n in parts.items()) * 2 <= \
      k.target.l2_bytes:
    return False
  rest = _prod(k.full_shape[i] for i in range(reduces[0] + 1, k.shape_len)
               if k.axis_types[i] in (AxisType.REDUCE, AxisType.UNROLL))
  amt = next((a for a in range(2, size // BLOCK_MIN_COUNT + 1) if size % a == 0 and a * rest >= BLOCK_MIN_REDUCE),
             None)
  if amt is None:
    return False
  try:
    k.apply_opt(Opt(OptOps.BLOCK, reduces[0] - k.first_reduce, amt))
  except KernelOptError:
    return False
  return True


def thread_outer_axis(k: Kernel) -> bool:
  """Split the outermost global axis that the core count divides into a THREAD axis, if the kernel is big enough
  (with peeled remainders: see _thread_order); not where that axis is the outermost loop already (_runtime_splits)."""
  order = _thread_order(k)
  if order and _runtime_splits(k, order[0]):
    return False
  for axis in order:
    try:
      k.apply_opt(Opt(OptOps.THREAD, axis, k.target.threads))
      return True
    except KernelOptError:
      continue
  return False


def _runtime_splits(k: Kernel, axis: int) -> bool:
  """Whether the runtime splits this axis chunk by chunk itself, as a THREAD split would: it is the first loop, every
  store loops over it, and no STAGE fill, BLOCK, SWAP or PEEL changes which loop goes outermost. THREAD there adds a
  loop level, and LLVM then kept more values live across the inner loops: MNIST's conv4 input gradient
  (r_512_64_6_6_3_3_64) 134 -> 237 ms a thread, 143 -> 232 stack accesses; its conv2 col2im (r_512_32_24_24_6_6)
  172 -> 219 ms, 127 -> 547 (Zen 4, AVX-512, both run on one thread in one process)."""
  if axis != 0 or any(o.op in (OptOps.STAGE, OptOps.BLOCK, OptOps.SWAP, OptOps.PEEL) for o in k.applied_opts):
    return False
  return all(k.rngs[0] in st.ranges for st in k.stores)


def _thread_order(k: Kernel) -> list[int]:
  """The axes a THREAD split is tried on, in order (none when the kernel is too small or has one already)."""
  n = k.target.threads
  if n <= 1 or any(t is AxisType.THREAD for t in k.axis_types):
    return []
  work = math.prod(s for s in k.full_shape if isinstance(s, int))
  if work < THREAD_MIN_WORK:
    return []
  # an axis every store loops over that the threads divide; when some store loops over an axis but none of those
  # divide, no THREAD: the runtime splits the outermost such loop into uneven chunks itself. Only when no axis is
  # every store's (peeled rows and columns) one that is not, its remainder's stores gated to thread 0 (each thread
  # computes them), the rest of an axis the threads do not divide peeled (at least 4 blocks a thread)
  sizes = {a: s for a in range(k.global_dims) if isinstance(s := k.full_shape[a], int)}
  common = [a for a in sizes if all(k.rngs[a] in st.ranges for st in k.stores)]
  even = [a for a in sizes if sizes[a] % n == 0 and sizes[a] >= n]
  return [a for a in even if a in common] if common else even + [a for a in sizes if a not in even and
                                                                   sizes[a] >= 4 * n]
