"""STAGE: the CPU's counterpart of a GPU's local (shared) memory. A tile of one input that a row loop reads again
and again (for a matmul C[i, j] += A[i, k] * B[k, j] with the column tiles outside the row tiles: B's strip
B[k, j-tile]) is copied once into a contiguous scratch buffer, and every row tile reads the scratch instead:
contiguous vector loads from a few pages in L1/L2 instead of half a cache line per k with a row-sized stride.

`Opt(STAGE, axis, amt)` on the reduce axis `axis` (counted among the reduce axes, like UNROLL) with a block of `amt`
(0: the whole axis). The AST after it, built by one rewrite ("apply STAGE(axis, amt)"):
- the reduce axis k becomes `k_blk * amt + k_in`: k_in stays the REDUCE's range, k_blk is a BLOCK axis looped
  outside the rows: the outer loops the tile depends on, then k_blk, then the rows (the outer loops it does not
  depend on) get new ids in that order, as loop order is axis-id order (a batched matmul's [columns, rows, batch]
  becomes [columns, batch, k_blk, rows]; loop order never changes what a kernel computes);
- the staged LOAD becomes `LOAD(INDEX(AFTER(DEFINE_LOCAL, fill), scratch index))`, where `fill` is
  `END(STORE(INDEX(DEFINE_LOCAL, c-index), the load at the copy ranges), *copy ranges)`: loops over the tile's
  axes (its reduce axes, k_in's block, and the upcast/unrolled axes it depends on) that copy it, laid out in the
  load's own memory order (the unit-stride axis innermost, so the row tiles' reads stay vector loads), except a load
  whose unit-stride axis is k itself (a transposed operand, x @ W.T's W): its UPCAST axes go innermost, so the copy
  transposes the strip and the register tile's columns read vectors (GPT's linears 89 -> 106 GFLOP/s); a masked
  load copies its zeros, so the reads need no mask;
- with more than one block the output accumulates across blocks: `STORE(C, LOAD(C, valid=k_blk > 0) + REDUCE)`
  (the first block stores, later ones add; the masked load reads nothing in the first block);
- a kernel with peeled rows or columns (PEEL: the remainder is a store of its own) picks the load from the main
  part's reduce and stages it in every reduce that reads it (a peeled-rows remainder reads the same B strip); with
  blocks every store accumulates its own outputs.
The codegen places the fill where its free ranges (the loops outside the rows) are open, so each (column tile,
block) fills the scratch once and every row tile reuses it; the scratch is an `alloca` of the kernel function, so
every thread of a THREAD split has its own. Only THREAD may follow a STAGE (the fill is built from the axes as they
are); the block axis is never the parallel loop (its iterations accumulate into the same outputs).
"""
from __future__ import annotations

import math
from typing import Callable

from compiler.dtype import dtypes
from compiler.rewrite import PatternMatcher, UPat
from compiler.uop import AxisType, FastOps, Ops, UOp, toposort

# the scratch lives on the stack of the thread that runs the kernel (Linux gives a thread 8 MiB by default): however
# large L2 is, a scratch stays within this
MAX_SCRATCH = 1 << 20
# the kinds of axis a staged tile may span inside the fill: the reduce's own and the lanes of the register tile
TILE_KINDS = frozenset({AxisType.REDUCE, AxisType.UNROLL, AxisType.UPCAST})


class StageRefused(Exception):
  """STAGE does not apply; the message says why (the kernel turns it into a KernelOptError)."""


def _need(cond: bool, msg: str) -> None:
  if not cond:
    raise StageRefused(msg)


def _size(r: UOp) -> int:
  end = r.src[0]
  _need(end.op is Ops.CONST, "symbolic axis")
  return end.arg


def pick_load(rngs: list[UOp], n_outer: int, reds: list[UOp], k: UOp) -> tuple[UOp, list[UOp], list[UOp]] | None:
  """(the load to stage, the outer loops it depends on, the rows) of the reduces over k: a LOAD of a buffer under
  them that reads along k and does not depend on at least one outer (THREAD or global) loop, the rows, which read
  it again. Its outer loops go first (THREAD always does), then the rows. Of several, the one whose scratch the rows
  read the most bytes of (row iterations x tile bytes per element of k), then the one whose loops are in order."""
  outer = rngs[:n_outer]
  best: tuple[int, UOp, list[UOp], list[UOp]] | None = None
  for u in toposort(UOp.sink(*(r.src[0] for r in reds))):
    if u.op is not FastOps.LOAD or u.src[0].src[0].op is not FastOps.DEFINE_GLOBAL or k not in u.ranges:
      continue
    deps = set(u.ranges)
    if any(r.arg[1] not in TILE_KINDS for r in deps - set(outer)):
      continue
    need = [r for r in outer if r in deps or r.arg[1] is AxisType.THREAD]
    rows = [r for r in outer if r not in need]
    # what the scratch serves: row iterations x the tile's bytes per element of k; ties: the one in loop order
    per_k = math.prod(_size(r) for r in deps - set(outer) if r is not k) * u.dtype.itemsize
    score = (math.prod(_size(r) for r in rows) * per_k, outer == need + rows)
    if rows and (best is None or score > best[0]):
      best = (score, u, need, rows)
  return None if best is None else best[1:]


def _main_reduces(ast: UOp, reds: list[UOp], outer: list[UOp]) -> list[UOp]:
  """The reduces of the stores that loop over every outer axis: the kernel's main part, not a peeled remainder's
  store (whose loads, over a remainder of rows, would look reused by every loop)."""
  main = [st for st in ast.src if all(r in st.ranges for r in outer)]
  return [red for red in reds if any(red in toposort(st) for st in main)]


def stage_choice(rngs: list[UOp], n_outer: int, ast: UOp, k: UOp) -> tuple[int, int] | None:
  """For STAGE of reduce range k: (row iterations that reuse the tile, scratch bytes per element of k), or None
  when no load can be staged. What a heuristic sizes the blocks by."""
  reds = [u for u in toposort(ast) if u.op is FastOps.REDUCE and k in u.src[1:]]
  if not reds or any(r.src[0].op is not Ops.CONST for r in rngs):
    return None
  picked = pick_load(rngs, n_outer, _main_reduces(ast, reds, rngs[:n_outer]), k)
  if picked is None:
    return None
  ld, _, rows = picked
  per_k = math.prod(_size(r) for r in ld.ranges if r not in rngs[:n_outer] and r is not k)
  return math.prod(_size(r) for r in rows), per_k * ld.dtype.itemsize


def staged_store(rngs: list[UOp], n_outer: int, ast: UOp, k: UOp, amt: int, next_id: int, max_bytes: int,
                 stride: Callable[[UOp, UOp], int | None]) -> dict[UOp, UOp]:
  """{old STORE: its staged version} for STAGE of reduce range k by blocks of amt (see the module doc).
  `stride(idx, r)`: how an index moves along r (None: not affine); `max_bytes`: the largest scratch allowed."""
  # the reduces over k: one per store of a kernel with peeled rows or columns (the rest a store of its own)
  reds = [u for u in toposort(ast) if u.op is Ops.REDUCE and k in u.src[1:]]
  _need(bool(reds), "no reduce over the staged axis")
  size = _size(k)
  blocks = size // amt
  if blocks > 1:
    _need_accumulating(ast, reds)
  picked = pick_load(rngs, n_outer, _main_reduces(ast, reds, rngs[:n_outer]), k)
  _need(picked is not None, "no load of the reduce is read again by an outer loop it does not depend on")
  assert picked is not None
  ld, need, rows = picked
  outer = rngs[:n_outer]
  nid = next_id
  sub: dict[UOp, UOp] = {}
  blk = None
  # loop order is axis-id order: the load's outer loops, the block axis and the rows get new ids in that order
  # (THREAD stays outermost by its kind) unless they are in that order already and there are no blocks
  if blocks > 1 or outer != need + rows:
    for r in need:
      if r.arg[1] is not AxisType.THREAD:
        sub[r] = r.replace(arg=(nid, r.arg[1]))
        nid += 1
    if blocks > 1:
      blk = UOp.range(blocks, nid, AxisType.BLOCK, k.dtype)
      nid += 1
    for r in rows:
      sub[r] = r.replace(arg=(nid, r.arg[1]))
      nid += 1
  if blk is not None:
    k_in = UOp.range(amt, k.arg[0], k.arg[1], k.dtype)
    sub[k] = blk * amt + k_in
  else:
    k_in = k
  # the tile's axes, in the load's memory order: the largest stride outermost, unit stride innermost
  idx = ld.src[0].src[1]
  tile = sorted((r for r in ld.ranges if r not in outer),
                key=lambda r: (-(s if (s := stride(idx, r)) is not None else 1 << 60), r.arg[0]))
  if stride(idx, k) == 1 and any(r.arg[1] is AxisType.UPCAST for r in tile):
    # a transposed operand (B read as W[j, k], unit stride along k): the register tile's column lanes (its UPCAST
    # axes) innermost instead, so the row tiles read vectors of the scratch and the fill transposes the strip once
    tile = [r for r in tile if r.arg[1] is not AxisType.UPCAST] + [r for r in tile if r.arg[1] is AxisType.UPCAST]
  new_of = {r: (k_in if r is k else r) for r in tile}
  sizes = [amt if r is k else _size(r) for r in tile]
  elems = math.prod(sizes)
  nbytes = elems * ld.dtype.itemsize
  _need(nbytes <= max_bytes, f"a scratch of {nbytes} bytes exceeds {max_bytes}")
  _need(elems >= 2, "a tile of one element")
  strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
  copy = [UOp.range(n, nid + i, AxisType.LOCAL, k.dtype) for i, n in enumerate(sizes)]
  local = UOp(Ops.DEFINE_LOCAL, ld.dtype.ptr(elems), (), 0)

  def flat(rs: list[UOp]) -> UOp:
    return sum((r * s for r, s in zip(rs[1:], strides[1:])), rs[0] * strides[0])

  # the copy: the load with each tile axis replaced by its copy range (k by the block's offset + the copy range)
  fill_sub = {r: (blk * amt + c if blk is not None and r is k else c) for r, c in zip(tile, copy)}
  fill_val = ld.substitute({**sub, **fill_sub})
  fill_st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, local.dtype, (local, flat(copy))), fill_val))
  fill = UOp(Ops.END, dtypes.void, (fill_st, *copy))
  read = UOp(Ops.LOAD, ld.dtype, (UOp(Ops.INDEX, local.dtype, (UOp(Ops.AFTER, local.dtype, (local, fill)),
                                                               flat([new_of[r] for r in tile]))),))
  new_reds = {red: UOp(Ops.REDUCE, red.dtype, (red.src[0].substitute({**sub, ld: read}),
                                               *(k_in if r is k else r for r in red.src[1:])), red.arg) for red in reds}
  if blk is None:
    return {st: st.substitute({**sub, **new_reds}) for st in ast.src}
  return _accumulating_stores(ast, sub, new_reds, blk)


def _sum_terms(v: UOp) -> list[UOp]:
  """The terms of a sum: a reduce whose axis was peeled is the sum of its main part's REDUCE and its remainder's."""
  return [t for s in v.src for t in _sum_terms(s)] if v.op is Ops.ADD else [v]


def _need_accumulating(ast: UOp, reds: list[UOp]) -> None:
  """The outputs can accumulate across blocks: only sums (of a peeled reduce's parts) that are stored as they are."""
  for st in ast.src:
    red = st.src[1]
    _need(all(t in reds and t.arg is Ops.ADD for t in _sum_terms(red)),
          "blocks of a reduce need the sum stored as it is, by each store")
    _need(len(st.src[0].src) == 2, "blocks of a reduce need ungated stores")
    _need(st.src[0].src[0].dtype.base == red.dtype, "blocks accumulate in the output's dtype")


def _accumulating_stores(ast: UOp, sub: dict[UOp, UOp], new_reds: dict[UOp, UOp], blk: UOp) -> dict[UOp, UOp]:
  """{old STORE: STORE(C, LOAD(C, valid=blk > 0) + its block's REDUCE)}: the first block stores, later ones add."""
  out = {}
  for st in ast.src:
    ix = st.src[0].substitute(sub)
    acc = UOp(Ops.LOAD, st.src[1].dtype, (UOp(Ops.INDEX, ix.dtype, (*ix.src, blk > 0)),))
    out[st] = UOp(Ops.STORE, st.dtype, (ix, acc + st.src[1].substitute(new_reds)))
  return out


def blocked_store(rngs: list[UOp], n_outer: int, ast: UOp, k: UOp, amt: int, next_id: int) -> dict[UOp, UOp]:
  """{old STORE: its blocked version} for BLOCK of reduce range k by blocks of amt: `k = k_blk * amt + k_in`, k_blk a
  BLOCK axis looped outside every outer loop but THREAD (they get new ids after it, loop order being id order), the
  outputs accumulating across blocks. A long reduce with few outputs (a conv's weight gradient over the batch) then
  reads one block of its inputs from the cache for every output tile, instead of all of them from memory."""
  reds = [u for u in toposort(ast) if u.op is Ops.REDUCE and k in u.src[1:]]
  _need(bool(reds), "no reduce over the blocked axis")
  blocks = _size(k) // amt
  _need(blocks > 1, "one block changes nothing")
  _need_accumulating(ast, reds)
  blk = UOp.range(blocks, next_id, AxisType.BLOCK, k.dtype)
  outer = [r for r in rngs[:n_outer] if r.arg[1] is not AxisType.THREAD]
  sub = {r: r.replace(arg=(next_id + 1 + i, r.arg[1])) for i, r in enumerate(outer)}
  k_in = UOp.range(amt, k.arg[0], k.arg[1], k.dtype)
  sub[k] = blk * amt + k_in
  new_reds = {red: red.replace(src=(red.src[0].substitute(sub), *(k_in if r is k else r for r in red.src[1:])))
              for red in reds}
  return _accumulating_stores(ast, sub, new_reds, blk)


def _swap_store(ctx: dict[UOp, UOp], st: UOp) -> UOp | None:
  return ctx.get(st)


pm_stage = PatternMatcher([(UPat(Ops.STORE, name="st"), _swap_store)], name="stage")
