"""The reference interpreter: evaluates a kernel AST with numpy, vectorized over every value of every RANGE.

Each RANGE gets one numpy axis (in axis-id order); every node evaluates to an array broadcastable over all of them,
a REDUCE reduces its ranges' axes (keepdims), a STORE scatters its broadcast value to the flat indices. Work is split
into chunks of the first output range, and a REDUCE too big for one chunk is summed over chunks of its largest
range, so memory stays bounded. This is the oracle compiled kernels are checked
against, so it follows the kernel AST contract in docs/architecture.md literally (C semantics for IDIV/MOD, a gated
LOAD reads 0 where its valid is false) and checks every index it dereferences.
"""
from __future__ import annotations

import math
from collections import ChainMap
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from compiler.dtype import DType, dtypes
from compiler.runtime.buffer import Buffer
from compiler.uop import Ops, UOp, toposort

# most elements one chunk evaluates at once (the product of all range sizes in the chunk)
CHUNK_ELEMENTS = 1 << 21


class InterpreterError(RuntimeError):
  """The AST broke the kernel contract (out-of-bounds index, unknown op, wrong buffer)."""


def _c_idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  if not (np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer)):
    return np.trunc(a / b)
  safe = np.where(b == 0, 1, b).astype(b.dtype)
  q = np.floor_divide(a, safe)  # floor, then step toward zero; no abs(), which overflows at INT_MIN
  q = q + ((a - q * safe != 0) & ((a < 0) != (safe < 0))).astype(q.dtype)
  return np.where(b == 0, 0, q).astype(q.dtype)


def _c_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  if not (np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer)):
    return np.fmod(a, b)
  return np.where(b == 0, 0, a - b * _c_idiv(a, b))


def _neg(x: np.ndarray) -> np.ndarray:
  return np.logical_not(x) if x.dtype == np.bool_ else np.negative(x)


def _shift(fn: Callable) -> Callable:
  return lambda a, b: fn(a, b.astype(a.dtype) if np.issubdtype(a.dtype, np.integer) else b)


def _maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """MAX: IEEE 754-2019 maximum on floats (NaN if either is NaN, +0.0 above -0.0), as codegen and the constant folder.
  np.maximum propagates NaN but keeps either operand's zero (which one depends on the dtype)."""
  out = np.maximum(a, b)
  if out.dtype.kind != "f":
    return out
  # a zero maximum with an operand whose sign bit is clear: that operand is +0.0
  return np.where((out == 0) & ~(np.signbit(a) & np.signbit(b)), np.zeros_like(out), out)


def _max_reduce(val: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
  """REDUCE MAX: the fold of _maximum, so +0.0 wherever the max is a zero and a +0.0 is among the values (np.max
  keeps the first zero it meets)."""
  out = np.max(val, axis=axis, keepdims=keepdims)
  if out.dtype.kind != "f" or not (zero := out == 0).any():
    return out
  pos_zero = np.any((val == 0) & ~np.signbit(val), axis=axis, keepdims=keepdims)
  return np.where(zero & pos_zero, np.zeros_like(out), out)


ALU: dict[Ops, Callable[..., np.ndarray]] = {
  Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt, Ops.RECIP: lambda x: 1 / x,
  Ops.NEG: _neg, Ops.TRUNC: np.trunc,
  Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.IDIV: _c_idiv, Ops.MOD: _c_mod,
  Ops.FDIV: np.true_divide, Ops.MAX: _maximum, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal,
  Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor, Ops.SHL: _shift(np.left_shift),
  Ops.SHR: _shift(np.right_shift), Ops.POW: np.power,
  Ops.WHERE: np.where, Ops.MULACC: lambda a, b, c: a * b + c,
}

REDUCE: dict[Ops, Callable[..., np.ndarray]] = {Ops.ADD: np.sum, Ops.MUL: np.prod, Ops.MAX: _max_reduce}


def _scalar_end(r: UOp, var_vals: dict[str, int]) -> int:
  end = r.src[0]
  if end.op is Ops.CONST:
    return int(end.arg)
  if end.op is Ops.DEFINE_VAR:
    return int(var_vals[end.arg[0]])
  raise InterpreterError(f"RANGE end must be a CONST or DEFINE_VAR, got {end.op}")


class InterpretedKernel:
  """A kernel AST prepared for evaluation; call it with the buffers in slot order."""

  def __init__(self, ast: UOp):
    if ast.op is not Ops.SINK:
      raise InterpreterError(f"a kernel AST is a SINK, got {ast.op}")
    self.ast = ast
    self.name = getattr(ast.arg, "name", "kernel")
    self.nodes = toposort(ast)
    if any(u.op is Ops.WMMA for u in self.nodes):  # (a warp's lanes exchange elements: no array over the ranges)
      raise InterpreterError(f"{self.name}: the interpreter can't evaluate a tensor core's WMMA: it runs the kernel "
                             "before its opts, or with TC=2 (the shape without the WMMA)")
    self.ranges = sorted((u for u in self.nodes if u.op is Ops.RANGE), key=lambda r: r.arg[0])
    self.axis = {r: i for i, r in enumerate(self.ranges)}
    reduced = {r for u in self.nodes if u.op is Ops.REDUCE for r in u.src[1:]}
    self.chunk_range = next((r for r in self.ranges if r not in reduced), None)
    self.globals = {u.arg: u for u in self.nodes if u.op is Ops.DEFINE_GLOBAL}
    last_use: dict[UOp, int] = {}
    for i, u in enumerate(self.nodes):
      for s in u.src:
        last_use[s] = i
    # nodes whose value can be dropped after node i ran
    self.free_after: dict[int, list[UOp]] = {}
    for u, i in last_use.items():
      self.free_after.setdefault(i, []).append(u)

  def __call__(self, bufs: Sequence[Buffer | np.ndarray], var_vals: dict[str, int] | None = None) -> None:
    arrays = [b.np if isinstance(b, Buffer) else b for b in bufs]
    for slot, g in self.globals.items():
      if not isinstance(slot, int) or not 0 <= slot < len(arrays):
        raise InterpreterError(f"{self.name}: DEFINE_GLOBAL slot {slot!r} has no buffer ({len(arrays)} given)")
      want = g.dtype.base if hasattr(g.dtype, "base") and g.dtype.base is not None else g.dtype
      if arrays[slot].dtype != want.np:
        raise InterpreterError(f"{self.name}: buffer {slot} is {arrays[slot].dtype}, the AST wants {want}")
    var_vals = var_vals or {}
    sizes = [_scalar_end(r, var_vals) for r in self.ranges]
    if any(s <= 0 for s in sizes):
      return
    total = math.prod(sizes)
    if self.chunk_range is None or total <= CHUNK_ELEMENTS:
      self._run(arrays, sizes, var_vals, {})
      return
    n = sizes[self.axis[self.chunk_range]]
    step = max(1, (CHUNK_ELEMENTS * n) // total)
    for lo in range(0, n, step):
      self._run(arrays, sizes, var_vals, {self.chunk_range: (lo, min(n, lo + step))})

  def _run(self, arrays: list[np.ndarray], sizes: list[int], var_vals: dict[str, int],
           spans: dict[UOp, tuple[int, int]]) -> None:
    nd = len(self.ranges)
    env: dict[UOp, Any] = {}
    big = self._big_reduces(sizes, spans)
    inside = {x for nodes in big.values() for x in nodes[1]}
    keep = {s for x in inside for s in x.src}  # read again when the REDUCE runs, after their last use in order
    with np.errstate(all="ignore"):
      for i, u in enumerate(self.nodes):
        if u in big:
          env[u] = self._chunked_reduce(u, big[u], env, arrays, sizes, var_vals, spans, nd)
        elif u not in inside:  # a chunked REDUCE evaluates what depends on its chunked range itself
          env[u] = self._eval(u, env, arrays, sizes, var_vals, spans, nd)
        for dead in self.free_after.get(i, ()):
          if dead not in keep:
            env.pop(dead, None)

  def _span(self, r: UOp, sizes: list[int], spans: dict[UOp, tuple[int, int]]) -> int:
    lo, hi = spans.get(r, (0, sizes[self.axis[r]]))
    return hi - lo

  def _big_reduces(self, sizes: list[int], spans: dict) -> dict[UOp, tuple[UOp, list[UOp]]]:
    """REDUCEs whose value spans more than CHUNK_ELEMENTS: each with the range to chunk (its largest) and the
    nodes that depend on that range (all inside the REDUCE: a reduce range is closed by its REDUCE)."""
    out: dict[UOp, tuple[UOp, list[UOp]]] = {}
    for u in self.nodes:
      if u.op is not Ops.REDUCE or len(u.src) < 2:
        continue
      rngs = set(u.src[0].ranges) | set(u.src[1:])
      if math.prod(self._span(r, sizes, spans) for r in rngs) <= CHUNK_ELEMENTS:
        continue
      r = max(u.src[1:], key=lambda x: self._span(x, sizes, spans))
      out[u] = (r, [x for x in toposort(u.src[0]) if r in x.ranges])
    return out

  def _chunked_reduce(self, u: UOp, plan: tuple[UOp, list[UOp]], env: dict, arrays: list[np.ndarray],
                      sizes: list[int], var_vals: dict[str, int], spans: dict, nd: int) -> np.ndarray:
    r, nodes = plan
    rngs = set(u.src[0].ranges) | set(u.src[1:])
    n = self._span(r, sizes, spans)
    step = max(1, CHUNK_ELEMENTS * n // math.prod(self._span(x, sizes, spans) for x in rngs))
    total: np.ndarray | None = None
    for lo in range(0, n, step):
      sub = {**spans, r: (lo, min(n, lo + step))}
      local = ChainMap({}, env)
      for x in nodes:
        local[x] = self._eval(x, local, arrays, sizes, var_vals, sub, nd)
      part = self._reduce(u, local, sizes, sub)
      total = part if total is None else ALU[u.arg](total, part).astype(u.dtype.np, copy=False)
    return total

  def _eval(self, u: UOp, env: Mapping, arrays: list[np.ndarray], sizes: list[int], var_vals: dict[str, int],
            spans: dict[UOp, tuple[int, int]], nd: int) -> Any:
    op = u.op
    if op is Ops.RANGE:
      ax = self.axis[u]
      vals = np.arange(*spans[u]) if u in spans else np.arange(sizes[ax])
      shape = [1] * nd
      shape[ax] = vals.size
      return vals.astype(u.dtype.np).reshape(shape)
    if op is Ops.CONST:
      return np.full((1,) * nd, u.arg, dtype=u.dtype.np)
    if op is Ops.DEFINE_VAR:
      return np.full((1,) * nd, var_vals[u.arg[0]], dtype=u.dtype.np)
    if op is Ops.DEFINE_GLOBAL:
      return u.arg
    if op is Ops.INDEX:
      if u.src[0].op is not Ops.DEFINE_GLOBAL:
        raise InterpreterError(f"{self.name}: INDEX of {u.src[0].op} (only DEFINE_GLOBAL buffers)")
      return (env[u.src[0]], env[u.src[1]], env[u.src[2]] if len(u.src) > 2 else None)
    if op is Ops.LOAD:
      return self._load(u, env[u.src[0]], arrays)
    if op is Ops.STORE:
      self._store(env[u.src[0]], env[u.src[1]], arrays)
      return None
    if op is Ops.REDUCE:
      return self._reduce(u, env, sizes, spans)
    if op is Ops.CAST:
      return _cast(env[u.src[0]], u.dtype)
    if op is Ops.BITCAST:
      return np.ascontiguousarray(env[u.src[0]]).view(u.dtype.np)
    if op in ALU:
      out = ALU[op](*(env[s] for s in u.src))
      return np.asarray(out).astype(u.dtype.np, copy=False)
    if op in (Ops.SINK, Ops.NOOP):
      return None
    raise InterpreterError(f"{self.name}: the interpreter can't evaluate {op}")

  def _check(self, slot: int, idx: np.ndarray, size: int) -> None:
    if idx.size and (idx.min() < 0 or idx.max() >= size):
      raise InterpreterError(f"{self.name}: index out of bounds in buffer {slot} (size {size}): "
                             f"[{int(idx.min())}, {int(idx.max())}]")

  def _load(self, u: UOp, index: tuple, arrays: list[np.ndarray]) -> np.ndarray:
    slot, idx, valid = index
    buf = arrays[slot]
    if valid is None:
      self._check(slot, idx, buf.size)
      return buf[idx].astype(u.dtype.np, copy=False)
    idx, valid = np.broadcast_arrays(idx, valid)
    self._check(slot, idx[valid], buf.size)
    if buf.size == 0:
      return np.zeros(idx.shape, dtype=u.dtype.np)
    safe = np.where(valid, idx, 0)
    return np.where(valid, buf[safe], np.zeros((), dtype=buf.dtype)).astype(u.dtype.np, copy=False)

  def _store(self, index: tuple, value: np.ndarray, arrays: list[np.ndarray]) -> None:
    slot, idx, valid = index
    buf = arrays[slot]
    parts = [idx, value] if valid is None else [idx, value, valid]
    parts = np.broadcast_arrays(*parts)
    i, v = parts[0].ravel(), parts[1].ravel()
    if valid is not None:
      m = parts[2].ravel()
      i, v = i[m], v[m]
    self._check(slot, i, buf.size)
    buf[i] = v

  def _reduce(self, u: UOp, env: Mapping, sizes: list[int], spans: dict[UOp, tuple[int, int]]) -> np.ndarray:
    val = env[u.src[0]]
    axes = tuple(self.axis[r] for r in u.src[1:])
    full = list(val.shape)
    for r, ax in zip(u.src[1:], axes):
      full[ax] = self._span(r, sizes, spans)
    val = np.broadcast_to(val, full)
    if u.arg not in REDUCE:
      raise InterpreterError(f"{self.name}: REDUCE with arg {u.arg} (ADD, MUL or MAX)")
    kw = {"dtype": u.dtype.np} if u.arg is not Ops.MAX else {}
    return np.asarray(REDUCE[u.arg](val, axis=axes, keepdims=True, **kw)).astype(u.dtype.np, copy=False)


def _cast(x: np.ndarray, dt: DType) -> np.ndarray:
  if dt.scalar() == dtypes.bool:
    return x != 0
  if dtypes.is_int(dt) and np.issubdtype(x.dtype, np.floating):
    # float -> int is undefined out of range in C; here it saturates and NaN gives 0 (LLVM's fptosi.sat). The
    # bounds are compared in float64 as 2^k: a clip to info.max would round up to 2^k in float and wrap around
    info = np.iinfo(dt.np)
    x = np.trunc(x.astype(np.float64))
    top, bottom = float(info.max) + 1, float(info.min)
    safe = np.where(np.isnan(x) | (x >= top) | (x < bottom), 0, x).astype(dt.np)
    return np.where(x >= top, np.array(info.max, dt.np), np.where(x < bottom, np.array(info.min, dt.np), safe))
  return x.astype(dt.np)


_cache: dict[UOp, InterpretedKernel] = {}
CACHE_SIZE = 512


def interpret(ast: UOp, bufs: Sequence[Buffer | np.ndarray], var_vals: dict[str, int] | None = None) -> None:
  """Run the kernel AST on the buffers (slot order) with numpy."""
  prg = _cache.pop(ast, None)
  if prg is None:
    prg = InterpretedKernel(ast)
  _cache[ast] = prg  # most recently used last
  if len(_cache) > CACHE_SIZE:
    del _cache[next(iter(_cache))]
  prg(bufs, var_vals)
