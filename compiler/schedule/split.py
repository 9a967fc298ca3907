"""Long reduces to few outputs in two kernels: partial sums over disjoint parts of a reduce axis, then their sum.

Why: a reduce whose every output reads a long stretch of input (MNIST's weight gradient `r_32_32_5_5_512_20_20`:
25600 outputs, each a sum over 512 x 20 x 20) splits across threads only along its outputs, so each thread streams the
whole batch of both operands and two threads ran it 1.29x faster at 1.46x the CPU (AMD EPYC VM, the cores its own).
As `SPLIT_REDUCE_PARTS` partial sums over disjoint slices of the batch, the first kernel's outermost axis is the part,
which the optimizer's THREAD split takes: each thread reads its own slice; the second kernel adds the few partials
(and whatever consumed the reduce, an optimizer's update, fuses there). The parts do not depend on the thread count,
so every THREADS computes the same numbers; they differ from one reduce's by float rounding of the order only.
`NO_SPLIT_REDUCE=1` turns it off. tinygrad's scheduler splits long reduces likewise (split_reduceop)."""
from __future__ import annotations

import os

from compiler.rewrite import PatternMatcher, UPat
from compiler.schedule.shape import prod, shape_of
from compiler.uop import Ops, UOp

SPLIT_REDUCE_PARTS = 2
SPLIT_REDUCE_RATIO = 1 << 15  # input elements per output element, at least (tinygrad's REDUCEOP_SPLIT_THRESHOLD)
SPLIT_REDUCE_MIN = 1 << 24  # input elements (of the expanded view: the products summed), at least


def split_enabled() -> bool:
  return os.environ.get("NO_SPLIT_REDUCE", "0") in ("", "0")


def _split_reduce(ctx: set[UOp], r: UOp) -> UOp | None:
  """REDUCE(x, axes) -> RESHAPE(REDUCE(CONTIGUOUS(REDUCE(x split along a reduce axis, the inner axes)), parts)); ctx:
  the partial reduces made (not split again). Sums, products and maxima alike: each is associative."""
  if r in ctx:
    return None
  x = r.src[0]
  op, axes = r.arg
  xs, out = shape_of(x), shape_of(r)
  if not all(isinstance(s, int) for s in xs):
    return None
  n_in, n_out = prod(xs), prod(out)
  if n_out == 0 or n_in < SPLIT_REDUCE_MIN or n_in // n_out < SPLIT_REDUCE_RATIO:
    return None
  p = SPLIT_REDUCE_PARTS
  # the longest reduce axis the parts divide (a batch): its slices are the most disjoint reads
  cands = [a for a in axes if xs[a] % p == 0 and xs[a] >= 4 * p]
  if not cands:
    return None
  a = max(cands, key=lambda i: (xs[i], -i))
  split = UOp(Ops.RESHAPE, x.dtype, (x,), (*xs[:a], p, xs[a] // p, *xs[a + 1:]))
  inner = tuple(i if i < a else i + 1 for i in axes)  # (axis a's slice is now a + 1; the part, a, is kept)
  partial = UOp(Ops.REDUCE_AXIS, r.dtype, (split,), (op, inner))
  ctx.add(partial)
  part = UOp(Ops.CONTIGUOUS, r.dtype, (partial,))
  total = UOp(Ops.REDUCE_AXIS, r.dtype, (part,), (op, (a,)))
  return UOp(Ops.RESHAPE, r.dtype, (total,), out)


pm_split_reduce = PatternMatcher([
  (UPat(Ops.REDUCE_AXIS, name="r"), _split_reduce, "long REDUCE -> REDUCE(CONTIGUOUS(partial REDUCEs over parts))"),
], name="split reduces")
