"""Hand-built kernel ASTs and a small numpy evaluator of kernel ASTs for the optimizer's tests.

The evaluator gives every RANGE its own numpy axis, so an expression is an array broadcast over the ranges it
depends on; a REDUCE reduces its ranges' axes. It knows nothing about opts, which makes it a fair judge of them.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import strategies as st

from compiler.codegen import get_program
from compiler.dtype import dtypes
from compiler.opt import Kernel, KernelOptError, Opt, OptOps, Target
from compiler.opt.kernel import axis_stride
from compiler.uop import AxisType, KernelInfo, Ops, UOp, toposort

A = AxisType

G, R = AxisType.LOOP, AxisType.REDUCE  # what the scheduler emits


def buf(slot: int, n: int, dt=dtypes.float32) -> UOp:
  return UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), arg=slot)


def sink(*stores: UOp, name: str = "test") -> UOp:
  return UOp.sink(*stores, arg=KernelInfo(name))


def matmul_ast(m: int, n: int, k: int) -> UOp:
  i, j, r = UOp.range(m, 0, G), UOp.range(n, 1, G), UOp.range(k, 2, R)
  a = buf(1, m * k).index(i * k + r).load()
  b = buf(2, k * n).index(r * n + j).load()
  return sink(buf(0, m * n).index(i * n + j).store((a * b).reduce(r)), name="matmul")


def elementwise_ast(m: int, n: int) -> UOp:
  """out[i, j] = a[i, j] * b[j] + 1 (b broadcast along i)."""
  i, j = UOp.range(m, 0, G), UOp.range(n, 1, G)
  a = buf(1, m * n).index(i * n + j).load()
  b = buf(2, n).index(j).load()
  return sink(buf(0, m * n).index(i * n + j).store(a * b + 1.0), name="elementwise")


def sum_ast(m: int, k: int, op: Ops = Ops.ADD, fn=None) -> UOp:
  """out[i] = reduce_k f(a[i, k]), a transposed read (stride m along k)."""
  i, r = UOp.range(m, 0, G), UOp.range(k, 1, R)
  a = buf(1, m * k).index(r * m + i).load()
  return sink(buf(0, m).index(i).store((a if fn is None else fn(a)).reduce(r, op=op)), name="sum")


def masked_ast(m: int, n: int) -> UOp:
  """out[i, j] = (j >= 1 ? a[i, j-1] : 0) + a[i, j]: a shifted read with a valid, like a pad."""
  i, j = UOp.range(m, 0, G), UOp.range(n, 1, G)
  a = buf(1, m * n)
  shifted = a.index(i * n + j - 1, j.alu(Ops.CMPLT, 1).logical_not()).load()
  return sink(buf(0, m * n).index(i * n + j).store(shifted + a.index(i * n + j).load()), name="masked")


def stack_ast(n: int) -> UOp:
  """out[s, i] for s in 0..2: three masked reads (as from a stack of three tensors)."""
  s, i = UOp.range(3, 0, G), UOp.range(n, 1, G)
  parts = [buf(1 + t, n).index(i, s.eq(t)).load() for t in range(3)]
  return sink(buf(0, 3 * n).index(s * n + i).store(parts[0] + parts[1] + parts[2]), name="stack")


def two_reduce_ast(m: int, k: int) -> UOp:
  """out[i] = sum_k (a[i,k] - max_k2 a[i,k2]): two reduces over their own ranges, like softmax's."""
  i, r1, r2 = UOp.range(m, 0, G), UOp.range(k, 1, R), UOp.range(k, 2, R)
  a = buf(1, m * k)
  mx = a.index(i * k + r2).load().reduce(r2, op=Ops.MAX)
  return sink(buf(0, m).index(i).store((a.index(i * k + r1).load() - mx).reduce(r1)), name="two_reduce")


def two_store_ast(m: int, n: int) -> UOp:
  i, j = UOp.range(m, 0, G), UOp.range(n, 1, G)
  x = buf(2, m * n).index(i * n + j).load()
  return sink(buf(0, m * n).index(i * n + j).store(x * 2.0), buf(1, m * n).index(j * m + i).store(x + 1.0),
              name="two_store")


ALL_KERNELS = {
  "matmul": lambda: matmul_ast(8, 12, 16), "elementwise": lambda: elementwise_ast(6, 16), "sum": lambda: sum_ast(8, 24),
  "max": lambda: sum_ast(4, 12, Ops.MAX), "masked": lambda: masked_ast(4, 12), "stack": lambda: stack_ast(8),
  "two_reduce": lambda: two_reduce_ast(4, 8), "two_store": lambda: two_store_ast(4, 6),
}


# ---- the evaluator

def buffers_for(ast: UOp, seed: int = 0) -> list[np.ndarray]:
  """Random inputs and zeroed outputs, one array per DEFINE_GLOBAL slot."""
  rng = np.random.default_rng(seed)
  gl = sorted({u for u in toposort(ast) if u.op is Ops.DEFINE_GLOBAL}, key=lambda b: b.arg)
  return [rng.uniform(-2, 2, b.dtype.size).astype(b.dtype.base.np) for b in gl]


def _ialu(op: Ops, a, b):
  if op is Ops.IDIV:
    q = np.abs(a) // np.abs(b)
    return np.where((a >= 0) == (b >= 0), q, -q)
  return a - b * _ialu(Ops.IDIV, a, b)


_ALU = {
  Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.FDIV: np.divide,
  Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal, Ops.AND: np.logical_and, Ops.OR: np.logical_or,
  Ops.XOR: np.logical_xor, Ops.NEG: np.negative, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin,
  Ops.SQRT: np.sqrt, Ops.RECIP: np.reciprocal, Ops.TRUNC: np.trunc,
}


def run_ast(ast: UOp, bufs: list[np.ndarray]) -> list[np.ndarray]:
  """Evaluate a kernel AST on numpy buffers (outputs written in place); returns bufs."""
  nodes = toposort(ast)
  rngs = sorted((u for u in nodes if u.op is Ops.RANGE), key=lambda r: r.arg[0])
  pos = {r: i for i, r in enumerate(rngs)}
  nd = len(rngs)
  val: dict[UOp, object] = {}
  with np.errstate(all="ignore"):
    for u in nodes:
      s = [val.get(x) for x in u.src]
      if u.op is Ops.RANGE:
        shape = [1] * nd
        shape[pos[u]] = u.src[0].arg
        val[u] = np.arange(u.src[0].arg, dtype=np.int64).reshape(shape)
      elif u.op is Ops.CONST:
        val[u] = np.array(u.arg, dtype=np.int64 if u.dtype == dtypes.index else u.dtype.np)
      elif u.op is Ops.DEFINE_GLOBAL:
        val[u] = bufs[u.arg]
      elif u.op is Ops.INDEX:
        val[u] = (s[0], s[1], s[2] if len(s) > 2 else None)
      elif u.op is Ops.LOAD:
        b, idx, valid = s[0]
        if valid is None:
          val[u] = b[idx]
        else:
          idx, valid = np.broadcast_arrays(idx, valid)
          val[u] = np.where(valid, b[np.where(valid, idx, 0)], 0).astype(b.dtype)
      elif u.op is Ops.STORE:
        b, idx, valid = s[0]
        idx, v, m = np.broadcast_arrays(idx, s[1], True if valid is None else valid)
        b[idx[m]] = v[m]
      elif u.op is Ops.REDUCE:
        axes = tuple(pos[r] for r in u.src[1:])
        shape = list(np.shape(s[0])) + [1] * (nd - np.ndim(s[0]))
        for r in u.src[1:]:
          shape[pos[r]] = r.src[0].arg
        v = np.broadcast_to(s[0], shape)
        fn = {Ops.ADD: np.sum, Ops.MAX: np.max, Ops.MUL: np.prod}[u.arg]
        val[u] = fn(v, axis=axes, keepdims=True).astype(v.dtype)
      elif u.op is Ops.CAST:
        val[u] = np.asarray(s[0]).astype(np.int64 if u.dtype == dtypes.index else u.dtype.np)
      elif u.op is Ops.WHERE:
        val[u] = np.where(s[0], s[1], s[2])
      elif u.op in (Ops.IDIV, Ops.MOD):
        val[u] = _ialu(u.op, s[0], s[1])
      elif u.op in _ALU:
        out = _ALU[u.op](*s)
        val[u] = out if u.dtype == dtypes.index or u.dtype == dtypes.bool else np.asarray(out).astype(u.dtype.np)
      elif u.op is Ops.SINK:
        pass
      else:
        raise NotImplementedError(f"test evaluator: {u.op}")
  return bufs


def outputs_of(ast: UOp) -> list[int]:
  return sorted({s.src[0].src[0].arg for s in ast.src})


def evaluate(ast: UOp, seed: int = 0) -> list[np.ndarray]:
  """The output buffers of the kernel on seeded random inputs."""
  bufs = run_ast(ast, buffers_for(ast, seed))
  return [bufs[i] for i in outputs_of(ast)]


def reference(name: str) -> list[np.ndarray]:
  """What numpy says each test kernel computes (checks the evaluator itself)."""
  ast = ALL_KERNELS[name]()
  b = buffers_for(ast)
  if name == "matmul":
    return [(b[1].reshape(8, 16) @ b[2].reshape(16, 12)).ravel()]
  if name == "elementwise":
    return [(b[1].reshape(6, 16) * b[2] + 1).ravel()]
  if name == "sum":
    return [b[1].reshape(24, 8).sum(0)]
  if name == "max":
    return [b[1].reshape(12, 4).max(0)]
  if name == "masked":
    a = b[1].reshape(4, 12)
    return [(a + np.pad(a, ((0, 0), (1, 0)))[:, :12]).ravel()]
  if name == "stack":
    return [np.concatenate([b[1], b[2], b[3]])]
  if name == "two_reduce":
    a = b[1].reshape(4, 8)
    return [(a - a.max(1, keepdims=True)).sum(1)]
  if name == "two_store":
    x = b[2].reshape(4, 6)
    return [(x * 2).ravel(), (x + 1).T.ravel()]
  raise KeyError(name)


def test_evaluator_matches_numpy():
  for name, make in ALL_KERNELS.items():
    for got, want in zip(evaluate(make()), reference(name), strict=True):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)


def loops_around_the_fill(ast: UOp) -> tuple[list[UOp], UOp] | None:
  """(the loops open where a STAGE fill stores into its scratch, that store) in the linearized kernel; None when
  nothing is staged."""
  open_loops: list[UOp] = []
  for u in get_program(ast).uops:
    if u.op is Ops.RANGE:
      open_loops.append(u)
    elif u.op is Ops.END:
      open_loops.remove(u.src[0])
    elif u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_LOCAL:
      return open_loops, u
  return None




@st.composite
def kernels(draw) -> UOp:
  """out[globals] = [reduce_r] combine(loads of inputs laid out over random subsets/orders of the axes)."""
  shape = draw(st.lists(st.sampled_from(SIZES), min_size=1, max_size=2))
  gl = [UOp.range(s, i, AxisType.GLOBAL) for i, s in enumerate(shape)]
  red_op = draw(st.sampled_from([None, Ops.ADD, Ops.ADD, Ops.MAX]))
  red = [UOp.range(draw(st.sampled_from([2, 3, 4, 8, 16])), len(gl), AxisType.REDUCE)] if red_op else []
  axes = gl + red
  loads = []
  for slot in range(1, draw(st.integers(1, 3)) + 1):
    order = draw(st.permutations(axes))
    used = [r for r in order if r in red or draw(st.booleans())] or order[:1]
    idx, stride = UOp.const(gl[0].dtype, 0), 1
    for r in reversed(used):
      idx, stride = idx + r * stride, stride * r.src[0].arg
    valid = None
    if draw(st.integers(0, 3)) == 0:  # a masked read, as a pad makes
      r = draw(st.sampled_from(used))
      valid = r.alu(Ops.CMPLT, max(1, r.src[0].arg - 1))
    loads.append(buf(slot, stride).index(idx, valid).load())
  value = loads[0]
  for x in loads[1:]:
    value = value.alu(draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX, Ops.SUB])), x)
  if draw(st.booleans()):
    value = value * 2.0 + 1.0
  if red_op:
    value = value.reduce(*red, op=red_op)
  out_idx, stride = UOp.const(gl[0].dtype, 0), 1
  for r in reversed(gl):
    out_idx, stride = out_idx + r * stride, stride * r.src[0].arg
  return sink(buf(0, math.prod(shape)).index(out_idx).store(value))


def apply_allowed(k: Kernel, seq: list[tuple[OptOps, int, int]]) -> Kernel:
  """k with each (op, axis, arg) of seq applied that it accepts, the refused ones skipped (SWAP's arg: axis + 1)."""
  for op, axis, arg in seq:
    try:
      k.apply_opt(Opt(op, axis, axis + 1 if op is OptOps.SWAP else arg))
    except KernelOptError:
      continue
  return k


def check_compiled(ast: UOp, k: Kernel, threads: int | None = None) -> None:
  """k's optimized AST, JIT-compiled and run on `threads` cores (None: all), computes what the evaluator gives ast."""
  from compiler.runtime import compile_kernel
  bufs = buffers_for(ast)
  compile_kernel(k.get_optimized_ast())(bufs, threads=threads)
  for x, y in zip(evaluate(ast), [bufs[i] for i in outputs_of(ast)], strict=True):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4, err_msg=str(k.applied_opts))




CPU = Target(threads=2, vector_floats=8, cpu="test-cpu")


def modelled_cost(ast: UOp) -> float:
  """A deterministic stand-in for a timing: loop overhead per iteration, cheaper memory with bigger register blocks,
  spills past 64 elements, and threads dividing the time."""
  k = Kernel(ast, CPU)
  loops = math.prod(s for s, t in zip(k.full_shape, k.axis_types) if t not in (AxisType.UPCAST, AxisType.UNROLL))
  threads = math.prod(s for s, t in zip(k.full_shape, k.axis_types) if t is AxisType.THREAD)
  block = k.upcast_size()
  per_iter = 4 + len(k.accesses) * block ** 0.7 + (block - 64) * 2 * (block > 64)
  return loops / threads * per_iter * 1e-9




def tile(k: Kernel) -> dict[int, int]:
  """{output stride: upcast amount} of the kernel's upcast axes, measured on the store."""
  out_idx = k.stores[0].src[0].src[1]
  tl: dict[int, int] = {}
  for r, s in zip(k.rngs, k.full_shape):
    if r.arg[1] is A.UPCAST:
      st = axis_stride(out_idx, r)
      tl[st] = tl.get(st, 1) * s
  return tl




def check_refused(k: Kernel, opt: Opt, reason: str) -> None:
  """Applying opt raises a KernelOptError that says `reason`, and k is as it was: AST, name, opts, colors, peels."""
  before = (k.ast, k.name, list(k.applied_opts), k.colors(), list(k.remainders))
  with pytest.raises(KernelOptError, match=reason):
    k.apply_opt(opt)
  assert (k.ast, k.name, k.applied_opts, k.colors(), k.remainders) == before




def row_reduce_ast(m: int, kk: int, op: Ops = Ops.ADD) -> UOp:
  """out[i] = reduce_j x[i, j]: the reduce walks each row with stride 1 (softmax's max and sum)."""
  i, r = UOp.range(m, 0, AxisType.LOOP), UOp.range(kk, 1, AxisType.REDUCE)
  x = buf(1, m * kk).index(i * kk + r).load()
  return sink(buf(0, m).index(i).store(x.reduce(r, op=op)), name="rowsum")




SIZES = [2, 3, 4, 5, 6, 8, 12]


