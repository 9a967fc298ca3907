"""The oracle: a tensor graph evaluated as written, op by op with numpy, before scheduling or any rewrite.

No rule of the compiler touches it (the interpreter backend runs after the scheduler's rewrites, so a wrong rule gives
it the same wrong answer): `ORACLE=1` makes `Tensor.realize` compute values here, and `python -m compiler.trace
bisect` compares a script's values under it with the compiled ones. Each op is computed in its node's own dtype with
the kernel contract's semantics (C division, IEEE maximum, saturating float -> int casts: the interpreter's ALU
functions), so values agree within the dtype's tolerance. A COPY is a copy of its source's value, and each result
lands in a buffer on its node's device (`Tensor._oracle_realize`), so an ORACLE run of a CL program holds and reads
back its values where the compiled run would.
"""
from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from compiler.runtime.buffer import buffer_of
from compiler.runtime.interpreter import ALU, REDUCE, _cast
from compiler.uop import Ops, UOp, toposort

# ops whose value is their first source's (a marker for the scheduler or for autograd); a COPY's is a copy of it
_SAME = {Ops.CONTIGUOUS, Ops.DETACH}


class OracleError(NotImplementedError):
  """A tensor-level op the oracle does not evaluate."""


def enabled() -> bool:
  """ORACLE=1 in the environment: realize computes values with the oracle."""
  return os.environ.get("ORACLE", "0").strip() not in ("", "0")


def evaluate(roots: list[UOp], realized: Mapping[UOp, UOp] | None = None
             ) -> tuple[list[np.ndarray], list[tuple[UOp, np.ndarray]]]:
  """The values of roots (arrays of their shapes and dtypes) and the in-place writes their graphs hold (ASSIGN:
  (target view, value)), not done yet: every BUFFER is read as it is before them, as a schedule reads it. `realized`
  maps nodes computed earlier to views of their buffers (read instead of recomputed, as the scheduler does)."""
  memo: dict[UOp, np.ndarray] = {}
  writes: list[tuple[UOp, np.ndarray]] = []
  realized = realized or {}
  gate = (lambda u: u not in realized) if realized else None
  with np.errstate(all="ignore"):
    for u in toposort(UOp.sink(*roots), gate=gate) if gate else toposort(UOp.sink(*roots)):
      if u.op is Ops.SINK:
        continue
      if u in realized:
        memo[u] = _eval_view(realized[u])
        continue
      memo[u] = _eval(u, memo, writes)
  return [memo[r] for r in roots], writes


def _eval_view(v: UOp) -> np.ndarray:
  """A realized node's value: a view of its buffer (RESHAPEs of a BUFFER, possibly other movement ops)."""
  return evaluate([v])[0]


def _eval(u: UOp, memo: dict[UOp, np.ndarray], writes: list[tuple[UOp, np.ndarray]]) -> np.ndarray:
  op, arg = u.op, u.arg
  src = [memo[s] for s in u.src]
  if op is Ops.BUFFER:
    return buffer_of(u).numpy()
  if op is Ops.CONST:
    return np.array(arg, dtype=u.dtype.np)
  if op is Ops.BIND:
    return src[1]
  if op is Ops.RESHAPE:
    return src[0].reshape(arg)
  if op is Ops.EXPAND:
    return np.broadcast_to(src[0], arg)
  if op is Ops.PERMUTE:
    return src[0].transpose(arg)
  if op is Ops.PAD:
    return np.pad(src[0], arg)
  if op is Ops.SHRINK:
    return src[0][tuple(slice(b, e) for b, e in arg)]
  if op is Ops.FLIP:
    return src[0][tuple(slice(None, None, -1) if f else slice(None) for f in arg)]
  if op is Ops.REDUCE_AXIS:
    rop, axes = arg
    kw = {"dtype": u.dtype.np} if rop is not Ops.MAX else {}
    return np.asarray(REDUCE[rop](src[0], axis=tuple(axes), keepdims=True, **kw)).astype(u.dtype.np, copy=False)
  if op is Ops.CAST:
    return _cast(np.asarray(src[0]), u.dtype)
  if op is Ops.BITCAST:
    return np.ascontiguousarray(src[0]).view(u.dtype.np)
  if op in _SAME:
    return src[0]
  if op is Ops.COPY:  # (the value on another device: a buffer of its own there, compiler.device.device_of says which)
    return np.array(src[0], copy=True)
  if op is Ops.ASSIGN:
    value = np.broadcast_to(src[1], src[0].shape).astype(u.dtype.np)
    writes.append((u.src[0], value))
    return value
  if op in ALU:
    return np.asarray(ALU[op](*src)).astype(u.dtype.np, copy=False)
  raise OracleError(f"the oracle can't evaluate a tensor-level {op} node (dtype {u.dtype}, "
                    f"sources {[s.op.name for s in u.src]})")


def write(target: UOp, value: np.ndarray) -> UOp:
  """Do an in-place write (ASSIGN) into the buffer its target views; returns that BUFFER. The target's view maps each
  element to a buffer index: evaluated on the indices 0..n-1 instead of the contents."""
  base = target
  while base.src and base.op is not Ops.BUFFER:
    base = base.src[0]
  if base.op is not Ops.BUFFER:
    raise OracleError(f"ASSIGN to a {target.op} view that reads no buffer")
  idx = _view_indices(target, base, np.arange(base.arg[1], dtype=np.int64))
  buf = buffer_of(base)
  if buf.device != "CPU":  # (a device buffer's memory is the device's: read back, written, copied in again)
    arr = buf.copyout()
    arr[idx.ravel()] = np.broadcast_to(value, idx.shape).ravel()
    buf.copyin(arr)
    return base
  buf.prepare_write(False)  # (arrays handed out by .numpy() keep their values)
  buf.np[idx.ravel()] = np.broadcast_to(value, idx.shape).ravel()
  return base


def _view_indices(view: UOp, base: UOp, indices: np.ndarray) -> np.ndarray:
  """The buffer index of each element of a view of base (movement ops only)."""
  memo: dict[UOp, np.ndarray] = {}
  for u in toposort(view):
    if u is base:
      memo[u] = indices
    elif u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP) or u.op in _SAME:
      memo[u] = _eval(u, memo, [])
    else:
      raise OracleError(f"ASSIGN through a {u.op} view (the oracle writes through movement ops only)")
  return memo[view]


# ---- the values a script reads back (.numpy(), .item(), .tolist()), for `python -m compiler.trace bisect`

READBACK = os.environ.get("TINYVIZ_READBACK") or None  # a file each value read back is appended to (np.save)


def note_read(arr: np.ndarray) -> None:
  """Append a value the script read back to the READBACK file (np.save: dtype, shape and bytes, no pickle)."""
  if READBACK is None:
    return
  with open(READBACK, "ab") as f:
    np.save(f, np.ascontiguousarray(arr), allow_pickle=False)


def read_values(path: str) -> list[np.ndarray]:
  """The values a READBACK file holds, in the order they were read (nothing in it becomes code: no pickle)."""
  out = []
  with open(path, "rb") as f:
    while f.peek(1) if hasattr(f, "peek") else f.read(1):
      out.append(np.load(f, allow_pickle=False))
  return out


# dtype kind and size -> (rtol, atol) two runs' values may differ by (reductions summed in another order, fused
# multiply-adds, LLVM's exp2/log2/sin): a float's; integers and bools must be equal
TOLERANCE = {2: (1e-2, 1e-3), 4: (1e-3, 1e-5), 8: (1e-7, 1e-9)}


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
  """Whether two values read back agree within their dtype's tolerance (NaN where the other has NaN)."""
  if a.dtype != b.dtype or a.shape != b.shape:
    return False
  if a.dtype.kind != "f":
    return bool(np.array_equal(a, b))
  rtol, atol = TOLERANCE.get(a.dtype.itemsize, (1e-2, 1e-2))
  return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
