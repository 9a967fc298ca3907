"""Hand-built kernel ASTs (per the contract in docs/architecture.md) and a helper that splits a RANGE the way the
optimizer does (r -> r_a*k + r_b with new axis types), shared by the codegen and runtime tests."""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

from compiler.dtype import DType, dtypes
from compiler.runtime.compiled import compile_kernel
from compiler.uop import AxisType, GroupOp, KernelInfo, Ops, UOp, exec_alu, toposort

G, R, UP, UN, TH = AxisType.GLOBAL, AxisType.REDUCE, AxisType.UPCAST, AxisType.UNROLL, AxisType.THREAD


def buf(slot: int, n: int, dt: DType = dtypes.float32) -> UOp:
  return UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), (), slot)


def sink(*stores: UOp, name: str = "k") -> UOp:
  return UOp.sink(*stores, arg=KernelInfo(name))


def split(ast: UOp, axis: int, k: int, inner: AxisType, outer: AxisType | None = None) -> UOp:
  """Replace the RANGE with axis id `axis` (size n) by r_a*k + r_b: r_a (n//k, `outer`, same id), r_b (k, `inner`,
  a new id); a REDUCE over it reduces over both."""
  (r,) = [u for u in toposort(ast) if u.op is Ops.RANGE and u.arg[0] == axis]
  n = r.src[0].arg
  assert n % k == 0, (n, k)
  new_id = 1 + max(u.arg[0] for u in toposort(ast) if u.op is Ops.RANGE)
  ra = UOp.range(n // k, axis, outer or r.arg[1])
  rb = UOp.range(k, new_id, inner)
  done: dict[UOp, UOp] = {}
  for u in toposort(ast):
    if u is r:
      done[u] = ra * k + rb
      continue
    if u.op is Ops.REDUCE:
      rngs = [x for s in u.src[1:] for x in ((ra, rb) if s is r else (done[s],))]
      done[u] = UOp(Ops.REDUCE, u.dtype, (done[u.src[0]], *rngs), u.arg)
      continue
    done[u] = u.replace(src=tuple(done[s] for s in u.src))
  return done[ast]


def run(ast: UOp, *arrays: np.ndarray, **kw) -> list[np.ndarray]:
  """Compile and run on copies of arrays; returns the arrays after the run."""
  arrs = [np.array(a, copy=True) for a in arrays]
  compile_kernel(ast)(arrs, **kw)
  return arrs


# ---- kernels

def elementwise(m: int, n: int) -> UOp:
  """out[i, j] = max(a[i, j] * b[i, j] + 1, 0)"""
  i, j = UOp.range(m, 0, G), UOp.range(n, 1, G)
  a, b = buf(1, m * n).index(i * n + j).load(), buf(2, m * n).index(i * n + j).load()
  return sink(buf(0, m * n).index(i * n + j).store((a * b + 1.0).maximum(0.0)), name="E_relu")


def broadcast(m: int, n: int) -> UOp:
  """out[i, j] = a[i, j] + b[j] (b read with stride 0 along i)"""
  i, j = UOp.range(m, 0, G), UOp.range(n, 1, G)
  return sink(buf(0, m * n).index(i * n + j).store(buf(1, m * n).index(i * n + j).load() + buf(2, n).index(j).load()),
              name="E_bcast")


def reduce_rows(m: int, k: int, op: Ops = Ops.ADD) -> UOp:
  """out[i] = reduce_j a[i, j]"""
  i, r = UOp.range(m, 0, G), UOp.range(k, 1, R)
  return sink(buf(0, m).index(i).store(buf(1, m * k).index(i * k + r).load().reduce(r, op=op)), name="r_rows")


def reduce_cols(m: int, k: int) -> UOp:
  """out[j] = sum_i a[i, j] (strided reduce)"""
  j, r = UOp.range(m, 0, G), UOp.range(k, 1, R)
  return sink(buf(0, m).index(j).store(buf(1, m * k).index(r * m + j).load().reduce(r)), name="r_cols")


def matmul(m: int, n: int, k: int, dt: DType = dtypes.float32) -> UOp:
  """c[i, j] = sum_r a[i, r] * b[r, j]"""
  i, j, r = UOp.range(m, 0, G), UOp.range(n, 1, G), UOp.range(k, 2, R)
  a = buf(1, m * k, dt).index(i * k + r).load()
  b = buf(2, k * n, dt).index(r * n + j).load()
  return sink(buf(0, m * n, dt).index(i * n + j).store((a * b).reduce(r)), name="r_matmul")


def pad1d(n: int, p: int) -> UOp:
  """out[i] = a[i - p] where 0 <= i - p < n, else 0 (out has n + 2p elements); times 2"""
  i = UOp.range(n + 2 * p, 0, G)
  valid = (i < p).logical_not() & (i < n + p)
  return sink(buf(0, n + 2 * p).index(i).store(buf(1, n).index(i - p, valid).load() * 2.0), name="E_pad")


def softmax_rows(m: int, k: int) -> UOp:
  """out[i, j] = exp2(a[i, j] - max_j a[i, j]) / sum_j exp2(a[i, j] - max): two reduces in one kernel"""
  i, j, r1, r2 = UOp.range(m, 0, G), UOp.range(k, 1, G), UOp.range(k, 2, R), UOp.range(k, 3, R)
  a = buf(1, m * k)
  mx = a.index(i * k + r1).load().reduce(r1, op=Ops.MAX)
  s = (a.index(i * k + r2).load() - mx).exp2().reduce(r2)
  return sink(buf(0, m * k).index(i * k + j).store((a.index(i * k + j).load() - mx).exp2() / s), name="r_softmax")


N = 24


def expected(op: Ops, dt: DType, ins: list[np.ndarray]) -> np.ndarray:
  out_dt = dtypes.bool if op in GroupOp.Comparison else dt
  vals = [exec_alu(op, out_dt, tuple(x.item() for x in xs)) for xs in zip(*ins)]
  return np.array(vals, dtype=out_dt.np)


def alu_kernel(op: Ops, dt: DType, n_in: int) -> UOp:
  i = UOp.range(N, 0, G)
  srcs = [buf(k + 1, N, dtypes.bool if (op is Ops.WHERE and k == 0) else dt).index(i).load() for k in range(n_in)]
  out_dt = dtypes.bool if op in GroupOp.Comparison else dt
  val = UOp(op, out_dt, tuple(srcs))
  return sink(buf(0, N, out_dt).index(i).store(val), name=f"alu_{op.name}_{dt.name}")


INT_OPS = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR,
           Ops.XOR, Ops.SHL, Ops.SHR, Ops.NEG, Ops.WHERE, Ops.MULACC]


FLOAT_EXACT = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.NEG, Ops.WHERE, Ops.RECIP,
               Ops.TRUNC, Ops.SQRT]


def _inputs(op: Ops, dt: DType) -> list[np.ndarray]:
  ins = [sample(dtypes.bool) if (op is Ops.WHERE and k == 0) else sample(dt) for k in range(_arity(op))]
  if op in (Ops.SHL, Ops.SHR):
    bits = 8 * dt.itemsize
    ins[0] = sample(dt)
    ins[1] = rng.integers(0, bits, N).astype(dt.np)
    ins[1][:2] = [bits, bits - 1]  # shifting by the width gives 0 (or the sign), as the wrapped Python result
  if op in (Ops.IDIV, Ops.MOD):
    ins[1][4:7] = [0, 1, 0] if dtypes.is_unsigned(dt) else [0, -1, -1]
    ins[0][5] = np.iinfo(dt.np).min  # INT_MIN // -1 wraps
  return ins




rng = np.random.default_rng(1)


def sample(dt: DType, n: int = N, special: bool = True) -> np.ndarray:
  """Values of dt including edge cases (min/max ints, inf/nan/-0.0 for floats)."""
  if dt == dtypes.bool:
    return rng.integers(0, 2, n).astype(bool)
  if dtypes.is_int(dt):
    info = np.iinfo(dt.np)
    v = rng.integers(max(info.min, -50), min(info.max, 50), n, endpoint=True).astype(dt.np)
    if special:
      v[:4] = [info.min, info.max, 0, 1 if dtypes.is_unsigned(dt) else -1]
    return v
  v = (rng.standard_normal(n) * 4).astype(dt.np)
  if special:
    v[:4] = [np.inf, -np.inf, np.nan, -0.0]
  return v


def _arity(op: Ops) -> int:
  return 1 if op in GroupOp.Unary else 3 if op in GroupOp.Ternary else 2




@contextlib.contextmanager
def process_libcalls() -> Iterator[None]:
  """Within, a test may make JITs of its own (LLVMJit()): each registers its runtime functions (half conversions) as the
  process's symbols. After, they point at the process JIT's again, as every later kernel and
  test_llvm_libcalls expect (the test keeps its JITs alive: code linked meanwhile may point into them)."""
  import llvmlite.binding as llvm

  from compiler.runtime.llvm import get_jit
  jit = get_jit()
  try:
    yield
  finally:
    for name, addr in jit.libcalls.items():
      llvm.add_symbol(name, addr)
