"""Tensor cores: a matmul reshaped around a hardware fragment, D = A·B + C on one warp (A is M x K, B is K x N, C and
D are M x N), each of the warp's `threads` lanes holding some elements of A, B and C at the places its layout gives.

`Opt(OptOps.TC, axis, (tc_select, tc_opt))` (compiler/opt/kernel.py, the seed's encoding): `axis` picks one of the
kernel's (N axis, M axis, K axis) choices (the last first, as the seed counts them), `tc_select` a tensor core of the
target (-1: the first that matches), `tc_opt` the TC_OPT level (0: a single reduce axis of plain loads, 1: more
reduce axes and loads cast to the input dtype, 2: axes the fragment does not divide padded by PADTO). The opt
splits the kernel's three axes around the fragment in one rewrite:
- a lane axis of `threads` (LOCAL on a target with locals, where the warp is a work-group; a plain loop elsewhere),
- an UPCAST axis of C's elements per lane,
- an UNROLL axis of the fragment's K,
and M = m_outer * M + row, N = n_outer * N + col, where (row, col) is C's layout at (lane, element): each work-item
computes exactly the elements of C a lane of the real tensor core holds. `TC=2` stops there (the reduce stays a plain
multiply-add, on any device, LLVM included). `TC=1` (where the target has the tensor core) makes the reduce over the
fragment's K a WMMA (`wmma_ast`, in get_optimized_ast as the seed does): its sources are the lane's A and B elements
(the loads with the fragment's (row, col) replaced by A's and B's layouts at (lane, element)), the accumulator's
zeros and the lane; the REDUCE over the outer K sums the WMMAs, and each element of C is a GEP of it.

The OpenCL renderer emulates a WMMA (compiler/codegen/opencl.py `_wmma`): each lane writes its A and B elements to
their places in a __local copy of the fragment, a barrier, each lane computes its C elements from the whole fragment,
a barrier. So the element layout is the real one: a wrong layout gives wrong values, which the tests check against
numpy. The tensor cores (`TENSOR_CORES`) mirror NVIDIA's mma.sync shapes:
- `NV_16816_HALF`: m16n8k16 with half inputs and float accumulation (sm_80's `mma.sync.aligned.m16n8k16.f32.f16`),
- `NV_1688_FLOAT`: m16n8k8 with float inputs and accumulation: the layout of sm_80's `.tf32` shape, whose inputs the
  hardware rounds to tf32; the emulation keeps them float32 (so pocl checks float32 matmuls exactly).
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any, Callable

from compiler.dtype import DType, dtypes
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.uop import AxisType, Ops, UOp, toposort

Coord = Callable[[Any, Any], tuple[Any, Any]]  # (lane, element) -> (row, col); ints or UOps alike


class TCRefused(Exception):
  """The TC opt does not apply; the message says why (compiler.opt.kernel turns it into a KernelOptError)."""


# ---- NVIDIA's layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k8"): lane = group * 4 + thread_in_group

def nv_c(lane: Any, e: Any) -> tuple[Any, Any]:
  """C and D of m16n8kX: c0, c1 in row `group`, c2, c3 eight rows below; columns 2 * thread_in_group + (e % 2)."""
  return lane // 4 + 8 * (e // 2), (lane % 4) * 2 + e % 2


def nv_a_k16(lane: Any, e: int) -> tuple[Any, Any]:
  """A of m16n8k16 (half): a0..a7 in rows group, group + 8; columns 2 * thread_in_group (+1), 8 further for a4..a7."""
  return lane // 4 + 8 * ((e // 2) % 2), (lane % 4) * 2 + e % 2 + 8 * (e // 4)


def nv_b_k16(lane: Any, e: int) -> tuple[Any, Any]:
  """B of m16n8k16: b0, b1 in rows 2 * thread_in_group (+1), b2, b3 eight rows below; column `group`."""
  return (lane % 4) * 2 + e % 2 + 8 * (e // 2), lane // 4


def nv_a_k8(lane: Any, e: int) -> tuple[Any, Any]:
  """A of m16n8k8 (tf32): a0 (group, thread_in_group), a1 eight rows below, a2, a3 four columns right of a0, a1."""
  return lane // 4 + 8 * (e % 2), lane % 4 + 4 * (e // 2)


def nv_b_k8(lane: Any, e: int) -> tuple[Any, Any]:
  """B of m16n8k8 (tf32): b0 in row thread_in_group, b1 four rows below; column `group`."""
  return lane % 4 + 4 * e, lane // 4


@dataclass(frozen=True)
class TensorCore:
  """One tensor core: D = A·B + C on `threads` lanes. `dims` is (N, M, K) as the seed orders them, `elements_per_thread`
  (A, B, C) each lane's share, `opts` the seed's spelling of the fragment's axes (u<d>: an upcast digit of 2 of dim d,
  l<d>: a lane digit of 2; 0 is N, 1 is M), which this kernel merges into one lane axis and one upcast axis; `a`, `b`,
  `c` the layouts: (lane, element) -> (row, col) of A (M x K), B (K x N) and C (M x N)."""
  name: str
  dims: tuple[int, int, int]
  threads: int
  elements_per_thread: tuple[int, int, int]
  dtype_in: DType
  dtype_out: DType
  opts: tuple[str, ...]
  a: Coord
  b: Coord
  c: Coord

  def __post_init__(self) -> None:
    n, m, k = self.dims
    ea, eb, ec = self.elements_per_thread
    lanes = sum(1 for o in self.opts if o[0] == "l")
    assert 2 ** lanes == self.threads and 2 ** (len(self.opts) - lanes) == ec, f"{self.name}: opts and sizes differ"
    for (rows, cols), per, fn in (((m, k), ea, self.a), ((k, n), eb, self.b), ((m, n), ec, self.c)):
      places = {fn(lane, e) for lane in range(self.threads) for e in range(per)}
      assert len(places) == rows * cols == self.threads * per and all(0 <= r < rows and 0 <= c < cols
                                                                      for r, c in places), f"{self.name}: bad layout"

  def __repr__(self) -> str:
    return f"<TensorCore {self.name} {self.dtype_in.name}->{self.dtype_out.name}>"

  def positions(self, which: str) -> tuple[int, ...]:
    """The layout as a table: for lane * elements + element, the place row * cols + col in the row-major operand."""
    n, m, k = self.dims
    fn, per, cols = {"a": (self.a, self.elements_per_thread[0], k), "b": (self.b, self.elements_per_thread[1], n),
                     "c": (self.c, self.elements_per_thread[2], n)}[which]
    return tuple(r * cols + c for lane in range(self.threads) for e in range(per) for r, c in [fn(lane, e)])

  def wmma_arg(self) -> tuple:
    """The WMMA UOp's arg: everything a renderer needs (codegen does not import the optimizer)."""
    return (self.name, self.dims, self.threads, self.elements_per_thread, self.dtype_in, self.dtype_out,
            self.positions("a"), self.positions("b"), self.positions("c"))


# N: an upcast digit, two lane digits; M: three lane digits, an upcast digit (the seed's CUDA opts)
NV_OPTS = ("u0", "l0", "l0", "l1", "l1", "l1", "u1")
NV_16816_HALF = TensorCore("nv_m16n8k16_f16_f32", (8, 16, 16), 32, (8, 4, 4), dtypes.float16, dtypes.float32, NV_OPTS,
                           nv_a_k16, nv_b_k16, nv_c)
NV_1688_FLOAT = TensorCore("nv_m16n8k8_f32_f32", (8, 16, 8), 32, (4, 2, 4), dtypes.float32, dtypes.float32, NV_OPTS,
                           nv_a_k8, nv_b_k8, nv_c)
TENSOR_CORES: tuple[TensorCore, ...] = (NV_16816_HALF, NV_1688_FLOAT)


# ---- the environment (the seed's USE_TC, TC_OPT, TC_SELECT)

def _env_int(name: str, default: int, lo: int, hi: int) -> int:
  raw = os.environ.get(name, "") or str(default)
  try:
    v = int(raw)
  except ValueError:
    raise ValueError(f"{name} must be an integer, got {raw!r}") from None
  if not lo <= v <= hi:
    raise ValueError(f"{name} must be in {lo}..{hi}, got {v}")
  return v


def use_tc(default: int = 1) -> int:
  """TC: 0 no tensor cores, 1 the WMMA where the target has tensor cores, 2 the shape without the WMMA; `default`
  where TC is not set (the heuristics pass 0 on a target whose tensor cores are emulated: see Target)."""
  return _env_int("TC", default, 0, 2)


def tc_opt_level() -> int:
  """TC_OPT (default 0): which kernels the heuristics give tensor cores (see the module doc)."""
  return _env_int("TC_OPT", 0, 0, 2)


def tc_select() -> int:
  """TC_SELECT (default -1: the first that matches): which of the target's tensor cores the heuristics use."""
  return _env_int("TC_SELECT", -1, -1, 64)


# ---- matching: which axes of the kernel are the fragment's N, M and K

@dataclass(frozen=True)
class TCAxes:
  """Positions in the kernel's axes of the fragment's N, M and K, and the (axis, size) each needs padding to."""
  n: int
  m: int
  k: int
  pads: tuple[tuple[int, int], ...]


def _operand(x: UOp, tc: TensorCore, level: int) -> UOp:
  """The INDEX an operand of the multiply loads through: a LOAD of dtype_in, or (TC_OPT >= 1) one cast to it."""
  if x.op is Ops.LOAD and x.dtype == tc.dtype_in:
    return x.src[0]
  if level >= 1 and x.op is Ops.CAST and x.dtype == tc.dtype_in and x.src[0].op is Ops.LOAD:
    return x.src[0].src[0]
  raise TCRefused(f"{tc.name}: the multiply's operands must be loads of {tc.dtype_in.name}"
                  + ("" if level >= 1 else " (TC_OPT>=1 allows casts)") + f", got {x.op.name} of {x.dtype.name}")


def match_axes(rngs: list[UOp], first_reduce: int, reduceops: list[UOp], tc: TensorCore, axis: int, level: int,
               stride: Callable[[UOp, UOp], int | None]) -> TCAxes:
  """The kernel's (N, M, K) axes for `tc` (choice `axis`, the seed's order), or TCRefused with the reason."""
  if len(reduceops) != 1:
    raise TCRefused(f"tensor cores need a kernel of one reduce, got {len(reduceops)}")
  red = reduceops[0]
  if red.arg is not Ops.ADD:
    raise TCRefused(f"tensor cores need a sum, got a {red.arg.name} reduce")
  v = red.src[0]
  if tc.dtype_in != tc.dtype_out:
    if not (v.op is Ops.CAST and v.dtype == tc.dtype_out):
      raise TCRefused(f"{tc.name}: the reduce must sum {tc.dtype_in.name} products cast to {tc.dtype_out.name}")
    v = v.src[0]
  if red.dtype != tc.dtype_out:
    raise TCRefused(f"{tc.name}: the reduce is {red.dtype.name}, the tensor core accumulates {tc.dtype_out.name}")
  if v.op is not Ops.MUL:
    raise TCRefused(f"tensor cores need a sum of products, got a sum of {v.op.name}")
  idx0, idx1 = (_operand(s, tc, level) for s in v.src)
  reduce_axes = [i for i, r in enumerate(rngs) if r in red.src[1:]]
  if len(red.src) - 1 != len(reduce_axes) or not reduce_axes:
    raise TCRefused("the reduce's ranges are not the kernel's reduce axes")
  if len(reduce_axes) > 1 and level < 1:
    raise TCRefused(f"{len(reduce_axes)} reduce axes need TC_OPT>=1")
  outs = range(first_reduce)
  s0, s1 = ([stride(ix.src[1], rngs[i]) for i in outs] for ix in (idx0, idx1))
  n_axes = [i for i in outs if s0[i] == 0 and s1[i] != 0]  # operand 0 is broadcast along N: it is A (M x K)
  m_axes = [i for i in outs if s1[i] == 0 and s0[i] != 0]
  if not (n_axes and m_axes):
    raise TCRefused("not a matmul: no pair of output axes along which one operand is broadcast and the other is not")
  choices = list(itertools.product(n_axes, m_axes, reduce_axes))
  if not 0 <= axis < len(choices):
    raise TCRefused(f"TC axis {axis} out of range: the kernel has {len(choices)} (N, M, K) choices")
  n, m, k = choices[-(axis + 1)]
  sizes = [rngs[a].src[0] for a in (n, m, k)]
  if any(s.op is not Ops.CONST for s in sizes):
    raise TCRefused("tensor cores need constant sizes")
  pads = tuple((a, d) for a, d, s in zip((n, m, k), tc.dims, sizes) if s.arg % d)
  if pads and level < 2:
    raise TCRefused(f"{tc.name}: sizes {[s.arg for s in sizes]} are not multiples of {list(tc.dims)} (TC_OPT=2 pads)")
  return TCAxes(n, m, k, pads)


# ---- the shape: the kernel's axes around the fragment

@dataclass(frozen=True)
class AppliedTC:
  """A TC opt's outcome, which later opts and get_optimized_ast read: the tensor core, the TC level (1: WMMA, 2: the
  shape only), the lane, element and fragment-K ranges, the nodes of the fragment's row and column, and the ids of
  the outer N and M axes that are left (of sizes over the fragment's)."""
  tc: TensorCore
  use: int
  lane: UOp
  elem: UOp
  kf: UOp
  row: UOp
  col: UOp
  outer_ids: tuple[int, ...] = ()

  @property
  def axis_ids(self) -> frozenset[int]:
    return frozenset(r.arg[0] for r in (self.lane, self.elem, self.kf))


def fragment_split(rngs: list[UOp], axes: TCAxes, tc: TensorCore, use: int, next_id: int,
                   lane_kind: AxisType) -> tuple[dict[UOp, UOp], dict[UOp, tuple[UOp, ...]], AppliedTC]:
  """The substitutions (old RANGE -> expression, reduce RANGE -> its new ranges) that split N, M and K around the
  fragment, and the AppliedTC."""
  n, m, k = tc.dims
  rn, rm, rk = rngs[axes.n], rngs[axes.m], rngs[axes.k]
  dt = rm.dtype
  lane = UOp.range(tc.threads, next_id, lane_kind, dt)
  elem = UOp.range(tc.elements_per_thread[2], next_id + 1, AxisType.UPCAST, dt)
  kf = UOp.range(k, next_id + 2, AxisType.UNROLL, dt)
  row, col = tc.c(lane, elem)

  def outer(r: UOp, d: int, inner: UOp) -> UOp:
    size = r.src[0].arg
    return inner if size == d else UOp.range(size // d, r.arg[0], r.arg[1], r.dtype) * d + inner
  ranges = {rm: outer(rm, m, row), rn: outer(rn, n, col), rk: outer(rk, k, kf)}
  kparts = (kf,) if rk.src[0].arg == k else (UOp.range(rk.src[0].arg // k, rk.arg[0], rk.arg[1], dt), kf)
  outer_ids = tuple(r.arg[0] for r, d in ((rn, n), (rm, m)) if r.src[0].arg > d)
  return ranges, {rk: kparts}, AppliedTC(tc, use, lane, elem, kf, row, col, outer_ids)


def refusal_after(applied: AppliedTC, op_name: str, rngs: list[UOp]) -> str | None:
  """Why an opt on the axes `rngs` may not follow a TC (None: it may): the fragment's axes are the hardware's, STAGE
  and BLOCK renumber loops, and the emulated WMMA's work-group is one warp (its __local fragment is the work-group's),
  so no LOCAL or GROUP joins it."""
  if any(r.arg[0] in applied.axis_ids for r in rngs):
    return f"{op_name}: can't change a tensor core's fragment axis"
  if op_name in ("STAGE", "BLOCK"):
    return f"{op_name}: not after a tensor core (it renumbers the fragment's loops)"
  if op_name in ("LOCAL", "GROUP", "GROUPTOP") and applied.lane.arg[1] is AxisType.LOCAL:
    return f"{op_name}: a tensor core's work-group is its warp of {applied.tc.threads}"
  if op_name == "TC":
    return "tensor core opts must be first"
  return None


# ---- the WMMA (TC=1): the reduce over the fragment's K

def _wmma(ctx: AppliedTC, red: UOp) -> UOp | None:
  if ctx.kf not in red.src[1:]:
    return None
  tc, lane = ctx.tc, ctx.lane
  v = red.src[0]
  mul = v.src[0] if v.op is Ops.CAST and tc.dtype_in != tc.dtype_out else v
  deps = [set(toposort(s)) for s in mul.src]
  a, b = mul.src if ctx.row in deps[0] else mul.src[::-1]
  ea, eb, ec = tc.elements_per_thread

  def elements(x: UOp, per: int, fn: Coord, frag: tuple[UOp, UOp]) -> UOp:
    """The lane's elements of an operand: the fragment's (row or col, K) replaced by the layout's place."""
    out = []
    for e in range(per):
      r, c = fn(lane, e)
      out.append(x.substitute({frag[0]: r, frag[1]: c}))
    return UOp(Ops.VECTORIZE, tc.dtype_in.vec(per), tuple(out))
  va = elements(a, ea, tc.a, (ctx.row, ctx.kf))
  vb = elements(b, eb, tc.b, (ctx.kf, ctx.col))
  acc = tc.dtype_out.vec(ec)
  w = UOp(Ops.WMMA, acc, (va, vb, UOp.const(acc, 0), lane), tc.wmma_arg())
  rest = tuple(r for r in red.src[1:] if r is not ctx.kf)
  total = UOp(Ops.REDUCE, acc, (w, *rest), Ops.ADD) if rest else w
  # each lane of the element axis reads its element of the sum: an UNROLL over that axis (the expander's lanes)
  return UOp(Ops.UNROLL, tc.dtype_out, tuple(UOp(Ops.GEP, tc.dtype_out, (total,), e) for e in range(ec)),
             ((ctx.elem.arg[0], ec),))


pm_wmma = PatternMatcher([(UPat(Ops.REDUCE, name="red"), _wmma)], name="tensor core wmma")


def wmma_ast(ast: UOp, applied: AppliedTC) -> UOp:
  """The kernel with its fragment reduce as a WMMA (TC=1)."""
  return graph_rewrite(ast, pm_wmma, ctx=applied)


__all__ = ["AppliedTC", "NV_16816_HALF", "NV_1688_FLOAT", "TCAxes", "TCRefused", "TENSOR_CORES", "TensorCore",
           "fragment_split", "match_axes", "refusal_after", "tc_opt_level", "tc_select", "use_tc", "wmma_ast"]
