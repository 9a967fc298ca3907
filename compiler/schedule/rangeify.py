"""Movement ops become index math: `pm_rangeify` pushes a tensor-level INDEX down the tensor graph of one kernel.

A tensor-level INDEX is `INDEX(x, gate, *idxs)`: the value of tensor node `x` at the element `idxs` (one int
expression per dimension of x), read only where the bool `gate` holds. It is pushed through movement ops (which
rewrite the idxs), ALU ops (which it distributes over), REDUCE_AXIS (which opens REDUCE ranges) and stops at
buffers, where it becomes `LOAD(INDEX(DEFINE_GLOBAL(slot), flat_idx[, gate]))`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.dtype import DType, dtypes
from compiler.rewrite import PatternMatcher, UPat
from compiler.schedule.shape import Shape, shape_of, strides_for
from compiler.uop import AxisType, GroupOp, Ops, UOp

TRUE = UOp.const(dtypes.bool, True)


def iconst(v: int, dtype: DType = dtypes.index) -> UOp:
  return UOp.const(dtype, v)


def tindex(x: UOp, idxs: tuple[UOp, ...] | list[UOp], gate: UOp = TRUE) -> UOp:
  """The tensor-level INDEX of x at idxs (see the module docstring)."""
  return UOp(Ops.INDEX, x.dtype, (x, gate, *idxs))


def and_(a: UOp, b: UOp) -> UOp:
  if a.op is Ops.CONST and a.arg is True:
    return b
  if b.op is Ops.CONST and b.arg is True:
    return a
  return a.alu(Ops.AND, b)


def flat_index(idxs: tuple[UOp, ...] | list[UOp], shape: Shape, dtype: DType = dtypes.index) -> UOp:
  """Row-major flat index of idxs in shape (dims of size 1 contribute nothing)."""
  ret: UOp | None = None
  for i, st, s in zip(idxs, strides_for(shape), shape):
    if s == 1:
      continue
    term = i if st == 1 else i * st
    ret = term if ret is None else ret + term
  return ret if ret is not None else iconst(0, dtype)


def reshape_idxs(in_shape: Shape, out_shape: Shape, idxs: tuple[UOp, ...], dtype: DType = dtypes.index) -> list[UOp]:
  """Indices into in_shape for the element idxs of its reshape to out_shape (dims grouped where products agree)."""
  groups: list[tuple[list[int], list[int]]] = []
  i = j = 0
  while i < len(in_shape) or j < len(out_shape):
    gi, gj = ([i] if i < len(in_shape) else []), ([j] if j < len(out_shape) else [])
    pi = in_shape[i] if gi else 1
    pj = out_shape[j] if gj else 1
    i, j = i + len(gi), j + len(gj)
    while pi != pj:
      if pi < pj:
        gi.append(i)
        pi *= in_shape[i]
        i += 1
      else:
        gj.append(j)
        pj *= out_shape[j]
        j += 1
    groups.append((gi, gj))
  new: list[UOp] = [iconst(0, dtype)] * len(in_shape)
  for gi, gj in groups:
    if len(gi) == 1 and len(gj) == 1:
      new[gi[0]] = idxs[gj[0]]
      continue
    flat = flat_index([idxs[k] for k in gj], tuple(out_shape[k] for k in gj), dtype)
    sub = tuple(in_shape[k] for k in gi)
    total = 1
    for s in sub:
      total *= s
    for k, st, s in zip(gi, strides_for(sub), sub):
      if s == 1:
        continue
      v = flat if st == 1 else flat // st
      new[k] = v if st * s == total else v % s
  return new


@dataclass
class KernelContext:
  """Per-kernel state of the rangeify pass: buffer slots, the next free axis id and the index dtype."""
  next_axis: int
  idx: DType = dtypes.index  # of every RANGE and index expression (see index_dtype)
  slots: dict[UOp, int] = field(default_factory=dict)  # BUFFER/AFTER node -> DEFINE_GLOBAL slot

  def define_global(self, buf: UOp) -> UOp:
    slot = self.slots.setdefault(buf, len(self.slots))
    return UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(buf_size(buf)), (), slot)


def buf_size(buf: UOp) -> int:
  b = buf.src[0] if buf.op is Ops.AFTER else buf
  return b.arg[1]


# ---- the rules; each gets the INDEX node `i`, its tensor source `x`, and works on i.src[1] (gate), i.src[2:] (idxs)

def _idx_reshape(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  src = x.src[0]
  return tindex(src, reshape_idxs(shape_of(src), x.arg, i.src[2:], ctx.idx), i.src[1])


def _idx_permute(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  new: list[UOp] = [iconst(0, ctx.idx)] * len(x.arg)
  for k, p in enumerate(x.arg):
    new[p] = i.src[2 + k]
  return tindex(x.src[0], new, i.src[1])


def _idx_expand(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  src_shape = shape_of(x.src[0])
  new = [iconst(0, ctx.idx) if s == 1 and o != 1 else idx for s, o, idx in zip(src_shape, x.arg, i.src[2:])]
  return tindex(x.src[0], new, i.src[1])


def _idx_pad(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  src_shape = shape_of(x.src[0])
  valid, new = TRUE, []
  for idx, s, (b, a) in zip(i.src[2:], src_shape, x.arg):
    if b > 0:
      valid = and_(valid, iconst(b - 1, ctx.idx).alu(Ops.CMPLT, idx))
    if a > 0:
      valid = and_(valid, idx.alu(Ops.CMPLT, b + s))
    new.append(idx - b if b else idx)
  inner = tindex(x.src[0], new, and_(i.src[1], valid))
  return valid.where(inner, UOp.const(x.dtype, 0)) if valid is not TRUE else inner


def _idx_shrink(i: UOp, x: UOp) -> UOp:
  return tindex(x.src[0], [idx + b if b else idx for idx, (b, _) in zip(i.src[2:], x.arg)], i.src[1])


def _idx_flip(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  shp = shape_of(x)
  new = [iconst(s - 1, ctx.idx) - idx if f and s > 1 else idx for idx, f, s in zip(i.src[2:], x.arg, shp)]
  return tindex(x.src[0], new, i.src[1])


def _idx_elementwise(i: UOp, x: UOp) -> UOp:
  return x.replace(src=tuple(tindex(s, i.src[2:], i.src[1]) for s in x.src))


def _idx_reduce(ctx: KernelContext, i: UOp, x: UOp) -> UOp:
  src = x.src[0]
  src_shape = shape_of(src)
  new, rngs = list(i.src[2:]), []
  for a in x.arg[1]:
    if src_shape[a] > 1:
      r = UOp.range(src_shape[a], ctx.next_axis, AxisType.REDUCE, ctx.idx)
      ctx.next_axis += 1
      rngs.append(r)
      new[a] = r
    else:
      new[a] = iconst(0, ctx.idx)
  inner = tindex(src, new, i.src[1])
  return UOp(Ops.REDUCE, x.dtype, (inner, *rngs), x.arg[0]) if rngs else inner


def _idx_buffer(ctx: KernelContext, i: UOp, b: UOp) -> UOp:
  gate = i.src[1]
  return ctx.define_global(b).index(i.src[2], None if gate is TRUE else gate).load()


def _idx_const(c: UOp) -> UOp:
  return c


def _idx_passthrough(i: UOp, x: UOp) -> UOp:
  return tindex(x.src[0], i.src[2:], i.src[1])


def _tidx(pat: UPat) -> UPat:
  return UPat(Ops.INDEX, src=(pat,), allow_any_len=True, name="i")


pm_rangeify = PatternMatcher([
  (_tidx(UPat(Ops.RESHAPE, name="x")), _idx_reshape),
  (_tidx(UPat(Ops.PERMUTE, name="x")), _idx_permute),
  (_tidx(UPat(Ops.EXPAND, name="x")), _idx_expand),
  (_tidx(UPat(Ops.PAD, name="x")), _idx_pad),
  (_tidx(UPat(Ops.SHRINK, name="x")), _idx_shrink),
  (_tidx(UPat(Ops.FLIP, name="x")), _idx_flip),
  (_tidx(UPat(GroupOp.ALU | {Ops.CAST, Ops.BITCAST}, name="x")), _idx_elementwise),
  (_tidx(UPat(Ops.REDUCE_AXIS, name="x")), _idx_reduce),
  (_tidx(UPat((Ops.BUFFER, Ops.AFTER), name="b")), _idx_buffer),
  (UPat(Ops.INDEX, src=(UPat(Ops.CONST, name="c"), UPat())), _idx_const),
  (_tidx(UPat((Ops.CONTIGUOUS, Ops.DETACH), name="x")), _idx_passthrough),
], name="rangeify")
