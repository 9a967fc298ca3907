"""Differential fuzz of the Tensor API: random op chains against a numpy oracle, on inputs with nan/inf/-0.0.

  python bench/fuzz_tensor_ops.py [PROGRAMS] [--seed N] [--backend interp|llvm] [--show K] [--ops N]

Each program is 1-3 random inputs and a chain of 1-4 ops (elementwise, broadcasting binaries, reductions,
scans, movement, indexing, sorting, nn ops), each called in one of its forms (method, `Tensor.fn(x, ...)`,
operator). Many programs are realized in one schedule. A program is "ok" when every output matches numpy (the
dtype's kind, the shape, NaN where numpy has NaN, infinities, the rest within a tolerance; the sign of zero too
when every op of the chain keeps it exactly), "wrong" when a value differs, "raised" when the Tensor side raised.
Prints a table of counts per op and a reproducer for each of the first K failures.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.table import format_table  # noqa: E402
from compiler import Tensor  # noqa: E402

SHAPES = [(5,), (3, 4), (2, 3, 4), (1, 4), (4, 1), (2, 1, 3), (0, 3), (1,), (), (3, 0, 2)]
F32, I32, BOOL = np.float32, np.int32, np.bool_


@dataclass
class Prog:
  """A program: its inputs, and the ops applied (names, the code that reproduces them)."""
  inputs: list[np.ndarray]
  ops: list[str] = field(default_factory=list)
  code: list[str] = field(default_factory=list)
  sign_exact: bool = True


def rand_array(rng: np.random.Generator, shape: tuple, dt: Any, special: bool = True) -> np.ndarray:
  if dt is BOOL:
    return rng.random(shape) > 0.5
  if dt is I32:
    return rng.integers(-6, 7, shape).astype(I32)
  x = (rng.standard_normal(shape) * rng.choice([0.5, 2.0, 4.0, 300.0])).astype(F32)
  if special and x.size and rng.random() < 0.6:
    flat = x.reshape(-1)
    for v in rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0], F32), size=min(3, flat.size)):
      flat[rng.integers(flat.size)] = v
  return x


def _bshape(rng: np.random.Generator, shape: tuple) -> tuple:
  """A shape that broadcasts with shape (some dims 1, maybe fewer dims)."""
  s = tuple(1 if rng.random() < 0.3 else d for d in shape)
  return s[rng.integers(0, len(s) + 1):] if s and rng.random() < 0.3 else s


# ---- the op catalogue: name -> (applies(a) -> bool, build(rng, a) -> (tensor fn, numpy fn, code, sign_exact))
def _call(form: int, name: str, x: Any, *args: Any, **kw: Any) -> Any:
  """x.name(*args) or Tensor.name(x, *args): the two call forms every method has."""
  return getattr(x, name)(*args, **kw) if form == 0 else getattr(Tensor, name)(x, *args, **kw)


def _sig(x):
  return 1 / (1 + np.exp(-x))


def _softplus(x):
  return np.logaddexp(np.zeros((), x.dtype), x)


UNARY_F = {
  "neg": (np.negative, True), "abs": (np.abs, True), "exp": (np.exp, False), "log": (np.log, False),
  "sqrt": (np.sqrt, False), "sin": (np.sin, False), "cos": (np.cos, False), "tanh": (np.tanh, False),
  "sigmoid": (_sig, False), "relu": (lambda x: np.where(np.isnan(x), x, np.maximum(x, 0)), False),
  "reciprocal": (lambda x: 1 / x, False), "square": (np.square, False), "floor": (np.floor, True),
  "ceil": (np.ceil, True), "trunc": (np.trunc, True), "round": (np.round, True), "sign": (np.sign, False),
  "exp2": (np.exp2, False), "log2": (np.log2, False),
  "erf": (np.vectorize(lambda v: math.erf(v) if not math.isnan(v) else math.nan, otypes=[F32]), False),
  "asin": (np.arcsin, False), "acos": (np.arccos, False), "atan": (np.arctan, False), "sinh": (np.sinh, False),
  "cosh": (np.cosh, False), "asinh": (np.arcsinh, False), "acosh": (np.arccosh, False),
  "atanh": (np.arctanh, False), "silu": (lambda x: x * _sig(x), False),
  "elu": (lambda x: np.where(x > 0, x, np.expm1(x)), False),
  "celu": (lambda x: np.where(x > 0, x, np.expm1(x)), False),
  "selu": (lambda x: 1.0507 * np.where(x >= 0, x, 1.67326 * np.expm1(x)), False),
  "softplus": (_softplus, False), "softsign": (lambda x: x / (1 + np.abs(x)), False),
  "mish": (lambda x: x * np.tanh(_softplus(x)), False),
  "hardswish": (lambda x: x * np.clip(x + 3, 0, 6) / 6, False),
  "hardsigmoid": (lambda x: np.clip(x / 6 + 0.5, 0, 1), False), "hardtanh": (lambda x: np.clip(x, -1, 1), False),
  "relu6": (lambda x: np.clip(x, 0, 6), False), "quick_gelu": (lambda x: x * _sig(1.702 * x), False),
  "logsigmoid": (lambda x: -_softplus(-x), False),
  "leaky_relu": (lambda x: np.where(x < 0, x * F32(0.01), x), False),
}
# inputs kept where these are accurate (the oracle's float32 argument reduction and ours agree there)
DOMAIN = {"sin": 1e5, "cos": 1e5, "exp": 80.0, "exp2": 120.0, "sinh": 80.0, "cosh": 80.0, "mish": 80.0}


def _unary(name: str, npf: Callable, exact: bool):
  def build(rng, a):
    form = int(rng.integers(2))
    lim = DOMAIN.get(name)
    pre = (lambda t: t) if lim is None else (lambda t: t.clip(-lim, lim))
    prenp = (lambda x: x) if lim is None else (lambda x: np.clip(x, -lim, lim))
    code = f"x = {'x.' + name + '()' if form == 0 else 'Tensor.' + name + '(x)'}"
    if lim is not None:
      code = f"x = x.clip(-{lim}, {lim}); " + code
    return (lambda t: _call(form, name, pre(t)), lambda x: npf(prenp(x)).astype(F32), code, exact)
  return (lambda a: a.dtype == F32), build


BINARY = {  # name: (operator, numpy, kinds, sign_exact)
  "add": ("+", np.add, "fi", False), "sub": ("-", np.subtract, "fi", False), "mul": ("*", np.multiply, "fib", False),
  "div": ("/", np.divide, "f", False), "maximum": (None, np.maximum, "fi", False),
  "minimum": (None, np.minimum, "fi", False), "copysign": (None, np.copysign, "f", True),
  "__lt__": ("<", np.less, "fi", True), "__eq__": ("==", np.equal, "fib", True),
  "__ne__": ("!=", np.not_equal, "fib", True),
  "__and__": ("&", np.bitwise_and, "ib", True), "__or__": ("|", np.bitwise_or, "ib", True),
  "__xor__": ("^", np.bitwise_xor, "ib", True), "pow": ("**", np.power, "f", False),
  "mod": ("%", np.mod, "f", False), "floordiv": ("//", np.floor_divide, "f", False),
}


def _binary(name: str):
  opr, npf, kinds, exact = BINARY[name]

  def applies(a):
    return a.dtype.kind in kinds
  def build(rng, a):
    other = rand_array(rng, _bshape(rng, a.shape), a.dtype.type)
    scalar = rng.random() < 0.25 and a.dtype != BOOL
    if scalar:
      other = np.array(other.reshape(-1)[0] if other.size else 1, a.dtype)
    o_t = other.item() if scalar else Tensor(other)
    forms = ["method", "fn"] + (["op"] if opr else [])
    form = forms[rng.integers(len(forms))]
    meth = name
    def tfn(t):
      if form == "op":
        return eval_op(opr, t, o_t)
      return getattr(t, meth)(o_t) if form == "method" else getattr(Tensor, meth)(t, o_t)
    def nfn(x):
      with np.errstate(all="ignore"):
        return npf(x, other)
    code = {"op": f"x = x {opr} y", "method": f"x = x.{meth}(y)", "fn": f"x = Tensor.{meth}(x, y)"}[form]
    return tfn, nfn, code + f"  # y = {'Tensor(' if not scalar else ''}{np.array2string(other, separator=',')}" + \
      (")" if not scalar else ""), exact
  return applies, build


def eval_op(opr: str, a: Any, b: Any) -> Any:
  import operator
  return {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "<": operator.lt,
          "==": operator.eq, "!=": operator.ne, "&": operator.and_, "|": operator.or_, "^": operator.xor,
          "**": operator.pow, "%": operator.mod, "//": operator.floordiv}[opr](a, b)


def _axis(rng, a):
  return int(rng.integers(-a.ndim, a.ndim)) if a.ndim else None


def _reduce(name: str, npf: Callable, kinds: str, exact: bool = False, nonempty: bool = False):
  def applies(a):
    return a.dtype.kind in kinds and a.ndim > 0 and not (nonempty and a.size == 0)
  def build(rng, a):
    ax = _axis(rng, a)
    keep = bool(rng.integers(2))
    form = int(rng.integers(2))
    if nonempty and a.shape[ax] == 0:
      ax = None
    # squares of values past 1e19 overflow float32: whether that gives inf depends on the algorithm, not the answer
    lim = 1e15 if name in ("std", "var") else None
    def nfn(x):
      with np.errstate(all="ignore"):
        return npf(x if lim is None else np.clip(x, -lim, lim), axis=ax, keepdims=keep)
    def tfn(t):
      return _call(form, name, t if lim is None else t.clip(-lim, lim), ax, keep)
    return tfn, nfn, ("" if lim is None else f"x = x.clip(-{lim}, {lim}); ") + f"x = x.{name}({ax}, {keep})", exact
  return applies, build


def _np_argext(fn):
  def f(x, axis, keepdims):
    if axis is None:
      r = fn(x.reshape(-1), axis=0)
      return np.array(r, I32).reshape((1,) * x.ndim) if keepdims else np.array(r, I32)
    return np.expand_dims(fn(x, axis=axis), axis).astype(I32) if keepdims else fn(x, axis=axis).astype(I32)
  return f


def _np_logsumexp(x, axis, keepdims):
  m = np.max(x, axis=axis, keepdims=True)
  m = np.where(np.isfinite(m), m, 0)
  r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
  return r if keepdims else np.squeeze(r, axis=axis)


def _np_softmax(x, axis, log=False):
  m = np.max(x, axis=axis, keepdims=True)
  e = x - m
  return e - np.log(np.exp(e).sum(axis=axis, keepdims=True)) if log else np.exp(e) / np.exp(e).sum(axis, keepdims=True)


def _scan(name: str, kinds: str):
  def applies(a):
    return a.dtype.kind in kinds and a.ndim > 0
  def build(rng, a):
    ax = int(rng.integers(-a.ndim, a.ndim))
    form = int(rng.integers(2))
    def nfn(x):
      with np.errstate(all="ignore"):
        if name == "cumsum":
          return np.cumsum(x, ax, dtype=np.int32 if x.dtype.kind in "ib" else None)
        if name == "cumprod":
          return np.cumprod(x, ax, dtype=np.int32 if x.dtype.kind in "ib" else None)
        acc = np.maximum if name == "cummax" else np.minimum
        return acc.accumulate(x, ax) if x.size else x
    def tfn(t):
      r = _call(form, name, t, ax)
      return r[0] if name in ("cummax", "cummin") else r
    return tfn, nfn, f"x = x.{name}({ax})" + ("[0]" if name in ("cummax", "cummin") else ""), False
  return applies, build


def _movement(name: str):
  def applies(a):
    if name in ("permute", "transpose", "flip", "roll", "tril", "triu", "repeat_interleave", "pad", "slice"):
      return a.ndim >= (2 if name in ("transpose", "tril", "triu") else 1)
    return True
  def build(rng, a):
    nd = a.ndim
    if name == "reshape":
      shape = (-1,) if rng.random() < 0.5 or a.size == 0 else (a.size, 1)
      return lambda t: t.reshape(shape), lambda x: x.reshape(shape), f"x = x.reshape({shape})", True
    if name == "permute":
      order = tuple(int(i) for i in rng.permutation(nd))
      return lambda t: t.permute(order), lambda x: np.transpose(x, order), f"x = x.permute({order})", True
    if name == "transpose":
      return lambda t: t.transpose(0, -1), lambda x: np.swapaxes(x, 0, -1), "x = x.transpose(0, -1)", True
    if name == "flip":
      ax = int(rng.integers(-nd, nd))
      return lambda t: t.flip(ax), lambda x: np.flip(x, ax), f"x = x.flip({ax})", True
    if name == "pad":
      pads = tuple((int(rng.integers(0, 2)), int(rng.integers(0, 3))) for _ in range(nd))
      v = float(rng.choice([0.0, -0.0, 1.5, -np.inf])) if a.dtype == F32 else 0
      return (lambda t: t.pad(pads, v), lambda x: np.pad(x, pads, constant_values=v), f"x = x.pad({pads}, {v})",
              True)
    if name == "slice":
      sl = tuple(slice(int(rng.integers(0, max(s, 1))), None, int(rng.choice([1, 2, -1]))) for s in a.shape)
      return lambda t: t[sl], lambda x: x[sl], f"x = x[{sl}]", True
    if name == "expand":
      shape = (2,) + a.shape
      return lambda t: t.unsqueeze(0).expand(shape), lambda x: np.broadcast_to(x, shape), \
        f"x = x.unsqueeze(0).expand({shape})", True
    if name == "roll":
      s, ax = int(rng.integers(-4, 5)), int(rng.integers(-nd, nd))
      return lambda t: t.roll(s, ax), lambda x: np.roll(x, s, ax), f"x = x.roll({s}, {ax})", True
    if name in ("tril", "triu"):
      k = int(rng.integers(-2, 3))
      zero = np.zeros((), a.dtype)
      npf = (lambda x: np.where(np.tri(*x.shape[-2:], k, dtype=bool), x, zero)) if name == "tril" else \
        (lambda x: np.where(np.tri(*x.shape[-2:], k - 1, dtype=bool), zero, x))
      return lambda t: getattr(t, name)(k), npf, f"x = x.{name}({k})", True
    if name == "repeat_interleave":
      r, ax = int(rng.integers(0, 3)), int(rng.integers(-nd, nd))
      return lambda t: t.repeat_interleave(r, ax), lambda x: np.repeat(x, r, ax), \
        f"x = x.repeat_interleave({r}, {ax})", True
    raise KeyError(name)
  return applies, build


def _selection(name: str):
  """Ops that pick elements: cat/stack/split, indexing, gather, sort/topk."""
  def applies(a):
    return a.ndim >= 1
  def build(rng, a):
    nd = a.ndim
    if name in ("cat", "stack"):
      ax = int(rng.integers(-nd, nd))
      other = rand_array(rng, a.shape, a.dtype.type)
      form = int(rng.integers(3))
      def tfn(t):
        o = Tensor(other)
        return getattr(t, name)(o, dim=ax) if form == 0 else getattr(Tensor, name)(t, o, dim=ax) if form == 1 else \
          getattr(Tensor, name)([t, o], dim=ax)
      npf = (lambda x: np.concatenate([x, other], ax)) if name == "cat" else (lambda x: np.stack([x, other], ax))
      forms = ["x.{n}(y, dim={ax})", "Tensor.{n}(x, y, dim={ax})", "Tensor.{n}([x, y], dim={ax})"]
      return tfn, npf, "x = " + forms[form].format(n=name, ax=ax) + f"  # y = Tensor({other.tolist()!r})", True
    if name == "split":
      ax = int(rng.integers(-nd, nd))
      k = int(rng.integers(1, max(a.shape[ax], 1) + 1))
      idx = list(range(k, a.shape[ax], k))
      return lambda t: t.split(k, ax)[-1], lambda x: np.split(x, idx, ax)[-1], f"x = x.split({k}, {ax})[-1]", True
    if name == "index":
      ax = int(rng.integers(0, nd))
      n = a.shape[ax]
      ids = [int(i) for i in rng.integers(-n, n, int(rng.integers(0, 4)))] if n else []
      key = (slice(None),) * ax + (ids,)
      npkey = (slice(None),) * ax + (np.array(ids, np.int64),)
      as_tensor = bool(rng.integers(2)) and ids
      def tfn(t):
        return t[(slice(None),) * ax + (Tensor(ids),)] if as_tensor else t[key]
      shown = f"Tensor({ids})" if as_tensor else f"{ids}"
      return tfn, lambda x: x[npkey], f"x = x[{':, ' * ax}{shown}]", True
    if name == "gather":
      ax = int(rng.integers(-nd, nd))
      n = a.shape[ax]
      ishape = tuple(int(rng.integers(0, s + 1)) if k != ax % nd else int(rng.integers(0, 4)) for k, s in
                     enumerate(a.shape))
      idx = rng.integers(0, max(n, 1), ishape).astype(I32) if n else np.zeros(tuple(0 if k == ax % nd else s for k, s
                                                                                    in enumerate(ishape)), I32)
      def nfn(x):
        xs = x[tuple(slice(0, s) if k != ax % nd else slice(None) for k, s in enumerate(idx.shape))]
        return np.take_along_axis(xs, idx.astype(np.int64), ax) if idx.size else np.zeros(idx.shape, x.dtype)
      return lambda t: t.gather(ax, Tensor(idx)), nfn, f"x = x.gather({ax}, Tensor({idx.tolist()!r}))", True
    if name in ("sort", "topk"):
      ax = int(rng.integers(-nd, nd))
      desc = bool(rng.integers(2))
      def nfn(x):
        v = np.sort(x, ax)  # NaN last, as ours (the values only: ties don't matter)
        v = np.flip(v, ax) if desc else v
        return v if name == "sort" else np.take(v, range(min(1, x.shape[ax])), ax)
      if name == "sort":
        return lambda t: t.sort(ax, desc)[0], nfn, f"x = x.sort({ax}, {desc})[0]", False
      return lambda t: t.topk(min(1, a.shape[ax]), ax, desc)[0], nfn, \
        f"x = x.topk({min(1, a.shape[ax])}, {ax}, {desc})[0]", False
    raise KeyError(name)
  return applies, build

def _where():
  def build(rng, a):
    cond = rng.random(_bshape(rng, a.shape)) > 0.5
    other = rand_array(rng, _bshape(rng, a.shape), a.dtype.type)
    return (lambda t: Tensor(cond).where(t, Tensor(other)), lambda x: np.where(cond, x, other),
            f"x = Tensor({cond.tolist()!r}).where(x, Tensor({other.tolist()!r}))", True)
  return (lambda a: True), build


def _int_div(name: str):
  def build(rng, a):
    d = rng.integers(1, 5, _bshape(rng, a.shape)) * rng.choice([-1, 1], _bshape(rng, a.shape))
    d = np.broadcast_to(d, np.broadcast_shapes(d.shape, d.shape)).astype(I32)
    op = "//" if name == "floordiv" else "%"
    def tfn(t):
      return t // Tensor(d) if op == "//" else t % Tensor(d)
    return tfn, (lambda x: x // d if op == "//" else x % d), f"x = x {op} Tensor({d.tolist()!r})", True
  return (lambda a: a.dtype == I32), build


def _nn(name: str):
  def applies(a):
    return a.dtype == F32 and a.ndim >= 1 and a.size > 0 and (name != "cross_entropy" or a.ndim == 2)
  def build(rng, a):
    ax = int(rng.integers(-a.ndim, a.ndim))
    if name == "softmax":
      return lambda t: t.softmax(ax), lambda x: _np_softmax(x, ax), f"x = x.softmax({ax})", False
    if name == "log_softmax":
      return lambda t: t.log_softmax(ax), lambda x: _np_softmax(x, ax, True), f"x = x.log_softmax({ax})", False
    if name == "logcumsumexp":
      return lambda t: t.logcumsumexp(ax), lambda x: np.logaddexp.accumulate(x.astype(np.float64), ax), \
        f"x = x.logcumsumexp({ax})", False
    if name == "cross_entropy":
      y = rng.integers(0, a.shape[1], a.shape[0]).astype(I32)
      def nfn(x):
        lsm = _np_softmax(x, 1, True)
        return -np.take_along_axis(lsm, y[:, None].astype(np.int64), 1).mean()
      return lambda t: t.cross_entropy(Tensor(y)), nfn, f"x = x.cross_entropy(Tensor({y.tolist()!r}))", False
    raise KeyError(name)
  return applies, build


def _np_scatter(x, dim, idx, src, reduce=None, include_self=True):
  """torch.scatter / scatter_reduce by loops (the last write wins)."""
  out = x.copy()
  acc: dict = {}
  for pos in np.ndindex(*idx.shape):
    tgt = list(pos)
    tgt[dim] = idx[pos]
    acc.setdefault(tuple(tgt), []).append(src[pos])
  with np.errstate(all="ignore"):
    for tgt, vals in acc.items():
      vals = ([out[tgt]] if include_self else []) + vals
      out[tgt] = {None: lambda v: v[-1], "sum": lambda v: np.sum(np.array(v, x.dtype)),
                  "prod": lambda v: np.prod(np.array(v, x.dtype)), "amax": lambda v: np.max(np.array(v, x.dtype)),
                  "amin": lambda v: np.min(np.array(v, x.dtype))}[reduce](vals)
  return out


def _scatter_ops(name: str):
  """scatter, scatter_reduce, masked_fill, one_hot."""
  def applies(a):
    return a.dtype == I32 if name == "one_hot" else a.ndim >= 1 and a.dtype != BOOL
  def build(rng, a):
    nd = a.ndim
    if name in ("scatter", "scatter_reduce"):
      ax = int(rng.integers(-nd, nd))
      d = ax % nd
      ishape = tuple(int(rng.integers(0, s + 1)) for s in a.shape)
      idx = rng.integers(0, max(a.shape[d], 1), ishape).astype(I32)
      if a.shape[d] == 0:
        idx = np.zeros(tuple(0 if k == d else s for k, s in enumerate(ishape)), I32)
      src = rand_array(rng, idx.shape, a.dtype.type, special=False)
      red = [None, "sum", "prod", "amax", "amin"][rng.integers(5)] if name == "scatter_reduce" else None
      inc = bool(rng.integers(2))
      if name == "scatter":
        return (lambda t: t.scatter(ax, Tensor(idx), Tensor(src)), lambda x: _np_scatter(x, d, idx, src),
                f"x = x.scatter({ax}, Tensor({idx.tolist()!r}), Tensor({src.tolist()!r}))", True)
      red = red or "sum"
      return (lambda t: t.scatter_reduce(ax, Tensor(idx), Tensor(src), red, include_self=inc),
              lambda x: _np_scatter(x, d, idx, src, red, inc),
              f"x = x.scatter_reduce({ax}, Tensor({idx.tolist()!r}), Tensor({src.tolist()!r}), {red!r}, "
              f"include_self={inc})", red in ("amax", "amin"))
    if name == "masked_fill":
      m = rng.random(_bshape(rng, a.shape)) > 0.5
      v = -0.0 if a.dtype == F32 else 3
      return (lambda t: t.masked_fill(Tensor(m), v), lambda x: np.where(m, np.array(v, x.dtype), x),
              f"x = x.masked_fill(Tensor({m.tolist()!r}), {v})", True)
    if name == "one_hot":
      return (lambda t: t.abs().one_hot(7), lambda x: (np.abs(x)[..., None] == np.arange(7)).astype(I32),
              "x = x.abs().one_hot(7)", True)
    raise KeyError(name)
  return applies, build

def _extra(name: str):
  """Newer ops: shifts, lerp, isclose, einsum, interpolate, argsort, chunk, unbind."""
  def applies(a):
    if name in ("argsort", "chunk", "unbind"):
      return a.ndim >= 1 and a.dtype != BOOL
    if name in ("lshift", "rshift"):
      return a.dtype == I32
    if name == "interpolate":
      return a.dtype == F32 and a.ndim >= 1 and a.size > 0
    return a.dtype == F32
  def build(rng, a):
    nd = a.ndim
    if name in ("lshift", "rshift"):
      k = int(rng.integers(0, 5))
      form = int(rng.integers(2))
      op = "<<" if name == "lshift" else ">>"
      def tfn(t):
        return (t << k if op == "<<" else t >> k) if form else getattr(t, name)(k)
      return tfn, (lambda x: x << k if op == "<<" else x >> k), f"x = x {op} {k}", True
    if name == "lerp":
      end = rand_array(rng, _bshape(rng, a.shape), F32, special=False)
      w = float(rng.random())
      return (lambda t: t.lerp(Tensor(end), w), lambda x: x + (end - x) * np.float32(w),
              f"x = x.lerp(Tensor({end.tolist()!r}), {w})", False)
    if name == "isclose":
      o = a + rng.choice([0, 1e-7, 1e-3], a.shape).astype(F32) if a.size else a
      return (lambda t: t.isclose(Tensor(o)), lambda x: np.isclose(x, o), f"x = x.isclose(Tensor({o.tolist()!r}))",
              True)
    if name == "einsum":
      letters = "abcd"[:nd]
      out = "".join(rng.permutation(list(letters))[:int(rng.integers(0, nd + 1))]) if nd else ""
      f = f"{letters}->{out}"
      form = int(rng.integers(2))
      def tfn(t):
        return Tensor.einsum(f, t) if form else Tensor.einsum(f, [t])
      return tfn, (lambda x: np.einsum(f, x)), f"x = Tensor.einsum({f!r}, x)", False
    if name == "interpolate":
      k = int(rng.integers(1, min(nd, 2) + 1))
      size = tuple(int(rng.integers(1, 6)) for _ in range(k))
      mode = ["linear", "nearest", "nearest-exact"][rng.integers(3)]
      align = mode == "linear" and bool(rng.integers(2))
      def nfn(x):
        x = x.astype(np.float64)
        for i in range(-1, -k - 1, -1):
          x = _np_interp_axis(x, i, size[i], mode, align)
        return x
      return (lambda t: t.interpolate(size, mode, align), nfn,
              f"x = x.interpolate({size}, {mode!r}, {align})", mode != "linear")
    if name == "argsort":
      ax = int(rng.integers(-nd, nd))
      def nfn(x):  # stable; NaN largest, as numpy's argsort
        return np.argsort(x, ax, kind="stable").astype(I32)
      return lambda t: t.argsort(ax), nfn, f"x = x.argsort({ax})", True
    if name in ("chunk", "unbind"):
      ax = int(rng.integers(-nd, nd))
      if name == "unbind":
        return (lambda t: t.unbind(ax)[0] if a.shape[ax] else t.sum(ax),
                lambda x: np.take(x, 0, ax) if x.shape[ax] else np.sum(x, ax, dtype=I32 if x.dtype == I32 else None),
                f"x = x.unbind({ax})[0]", True)
      c = int(rng.integers(1, 4))
      def nfn(x):
        n = x.shape[ax]
        size = -(-n // c) if n else 0
        return np.take(x, range(0, min(size, n)), ax) if n else x
      return lambda t: t.chunk(c, ax)[0], nfn, f"x = x.chunk({c}, {ax})[0]", True
    raise KeyError(name)
  return applies, build


def _np_interp_axis(x, axis, n_out, mode, align):
  n_in = x.shape[axis]
  if n_in == n_out:
    return x  # the identity (ours is exact; torch's weights would spread a neighbour's NaN)
  o = np.arange(n_out, dtype=np.float64)
  if mode == "linear":
    src = (o * ((n_in - 1) / (n_out - 1)) if n_out > 1 else o * 0) if align else \
      np.maximum((o + 0.5) * n_in / n_out - 0.5, 0)
    src = np.minimum(src, n_in - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = (src - lo).reshape([-1 if k == axis % x.ndim else 1 for k in range(x.ndim)])
    a, b = np.take(x, lo, axis), np.take(x, hi, axis)
    with np.errstate(all="ignore"):
      return a + (b - a) * frac
  src = (o + 0.5) * n_in / n_out if mode == "nearest-exact" else o * n_in / n_out
  return np.take(x, np.minimum(np.floor(src).astype(int), n_in - 1), axis)


def _np_red(fn):
  def f(x, axis, keepdims):
    return fn(x, axis=axis, keepdims=keepdims)
  return f


def catalogue() -> dict[str, tuple[Callable, Callable]]:
  ops: dict[str, tuple[Callable, Callable]] = {n: _unary(n, f, e) for n, (f, e) in UNARY_F.items()}
  ops.update({n: _binary(n) for n in BINARY})
  ops.update({
    "sum": _reduce("sum", lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims,
                                                           dtype=np.int32 if x.dtype.kind in "ib" else None), "fib"),
    "max": _reduce("max", _np_red(np.max), "fi", True, nonempty=True),
    "min": _reduce("min", _np_red(np.min), "fi", True, nonempty=True),
    "mean": _reduce("mean", _np_red(np.mean), "f"),
    # in float64: numpy's float32 variance of equal huge values overflows in (x - mean)^2 where ours is exact
    "std": _reduce("std", lambda x, axis, keepdims: np.std(x.astype(np.float64), axis=axis, keepdims=keepdims,
                                                           ddof=1).astype(x.dtype), "f"),
    "var": _reduce("var", lambda x, axis, keepdims: np.var(x.astype(np.float64), axis=axis, keepdims=keepdims,
                                                           ddof=1).astype(x.dtype), "f"),
    "logsumexp": _reduce("logsumexp", _np_logsumexp, "f"),
    "any": _reduce("any", _np_red(np.any), "fib", True), "all": _reduce("all", _np_red(np.all), "fib", True),
    "argmax": _reduce("argmax", _np_argext(np.argmax), "fi", True, nonempty=True),
    "argmin": _reduce("argmin", _np_argext(np.argmin), "fi", True, nonempty=True),
    "where": _where(), "int_floordiv": _int_div("floordiv"), "int_mod": _int_div("mod"),
  })
  ops.update({n: _scan(n, "fi") for n in ("cumsum", "cummax", "cummin")})
  ops["cumprod"] = _scan("cumprod", "f")
  ops.update({n: _movement(n) for n in ("reshape", "permute", "transpose", "flip", "pad", "slice", "expand", "roll",
                                        "tril", "triu", "repeat_interleave")})
  ops.update({n: _selection(n) for n in ("cat", "stack", "split", "index", "gather", "sort", "topk")})
  ops.update({n: _nn(n) for n in ("softmax", "log_softmax", "logcumsumexp", "cross_entropy")})
  ops.update({n: _scatter_ops(n) for n in ("scatter", "scatter_reduce", "masked_fill", "one_hot")})
  ops.update({n: _extra(n) for n in ("lshift", "rshift", "lerp", "isclose", "einsum", "interpolate", "argsort", "chunk",
                                     "unbind")})
  return ops


OPS = catalogue()
# reductions and argmax of a NaN-holding slice are defined (NaN, first NaN's index) but ties of argmax are not
# compared against a different tie-breaking oracle: see _np_argext (numpy also returns the first).


# ill-conditioned in their inputs (a last-ulp difference upstream moves x % y by up to y): only on exact values
EXACT_INPUT = {"mod", "floordiv", "pow"}


def gen_program(rng: np.random.Generator, max_ops: int = 4) -> tuple[Prog, list[tuple[Callable, Callable]]]:
  shape = SHAPES[rng.integers(len(SHAPES))]
  dt = [F32, F32, F32, I32, BOOL][rng.integers(5)]
  a = rand_array(rng, shape, dt)
  prog, steps = Prog([a]), []
  cur = a
  for _ in range(int(rng.integers(1, max_ops + 1))):
    names = [n for n, (applies, _) in OPS.items() if applies(cur) and (prog.sign_exact or n not in EXACT_INPUT)]
    if not names or cur.size > 4096:
      break
    name = names[rng.integers(len(names))]
    tfn, nfn, code, exact = OPS[name][1](rng, cur)
    with np.errstate(all="ignore"):
      try:
        nxt = np.asarray(nfn(cur))
      except (ValueError, IndexError, TypeError):
        continue
    prog.ops.append(name)
    prog.code.append(code)
    prog.sign_exact &= exact
    steps.append((tfn, nfn))
    cur = nxt
  return prog, steps


def _tolerance(ops: list[str]) -> tuple[float, float]:
  approx = {"erf", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "logcumsumexp", "std", "var",
            "softplus", "mish", "logsigmoid", "cross_entropy", "log_softmax", "logsumexp"}
  return (2e-4, 2e-5) if any(o in approx for o in ops) else (1e-4, 1e-5)


def compare(got: np.ndarray, ref: np.ndarray, prog: Prog) -> str | None:
  """None when they agree, else why not."""
  if got.shape != ref.shape:
    return f"shape {got.shape} != numpy's {ref.shape}"
  kind = lambda d: "f" if d.kind == "f" else "b" if d.kind == "b" else "i"  # noqa: E731
  if kind(got.dtype) != kind(ref.dtype):
    return f"dtype {got.dtype} where numpy gives {ref.dtype}"
  if got.dtype.kind != "f":
    bad = got != ref.astype(got.dtype)
    return None if not bad.any() else f"{int(bad.sum())} of {got.size} differ: got {got[bad][:4]} want {ref[bad][:4]}"
  g, r = got.astype(np.float64), ref.astype(np.float64)
  if (np.isnan(g) != np.isnan(r)).any():
    k = np.isnan(g) != np.isnan(r)
    return f"nan mismatch: got {got[k][:4]} want {ref[k][:4]}"
  fin = np.isfinite(r) & np.isfinite(g)
  if (np.isinf(r) != np.isinf(g)).any() or (g[np.isinf(r)] != r[np.isinf(r)]).any():
    k = (np.isinf(r) != np.isinf(g)) | (np.isinf(r) & (g != r))
    return f"inf mismatch: got {got[k][:4]} want {ref[k][:4]}"
  rtol, atol = _tolerance(prog.ops)
  scale = max(1.0, float(np.abs(r[fin]).max())) if fin.any() else 1.0
  with np.errstate(invalid="ignore"):  # inf - inf outside fin
    bad = fin & (np.abs(g - r) > atol * scale + rtol * np.abs(r))
  if bad.any():
    return f"{int(bad.sum())} of {got.size} off: got {got[bad][:4]} want {ref[bad][:4]}"
  if prog.sign_exact:
    z = (r == 0) & (g == 0) & (np.signbit(r) != np.signbit(g))
    if z.any():
      return f"sign of zero: got {got[z][:4]} want {ref[z][:4]}"
  return None


def reproducer(prog: Prog) -> str:
  return "\n".join([f"x = Tensor(np.array({prog.inputs[0].tolist()!r}, np.{prog.inputs[0].dtype}))", *prog.code])


def fuzz(n: int, seed: int = 0, batch: int = 25, max_ops: int = 4) -> tuple[dict, list[tuple[str, Prog, str]]]:
  """Run n programs; per op counts of outcomes, and the failures (outcome, program, detail)."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # numpy's oracle on nan/inf/empty inputs says so, rightly
    return _fuzz(n, seed, batch, max_ops)


def _fuzz(n: int, seed: int, batch: int, max_ops: int) -> tuple[dict, list[tuple[str, Prog, str]]]:
  rng = np.random.default_rng(seed)
  counts: dict[str, Counter] = defaultdict(Counter)
  failures: list[tuple[str, Prog, str]] = []
  done = 0
  while done < n:
    progs, outs, refs = [], [], []
    for _ in range(min(batch, n - done)):
      prog, steps = gen_program(rng, max_ops)
      done += 1
      if not steps:
        continue
      ref = prog.inputs[0]
      with np.errstate(all="ignore"):
        for _, nfn in steps:
          ref = np.asarray(nfn(ref))
      try:
        t = Tensor(prog.inputs[0])
        for tfn, _ in steps:
          t = tfn(t)
      except Exception as e:  # noqa: BLE001 — every exception is a finding here
        failures.append(("raised", prog, f"{type(e).__name__}: {e}"))
        for o in set(prog.ops):
          counts[o]["raised"] += 1
        continue
      progs.append(prog)
      outs.append(t)
      refs.append(ref)
    if outs:
      try:
        outs[0].realize(*outs[1:])
      except Exception:  # noqa: BLE001
        # find the culprit one by one
        for p, t in zip(progs, outs):
          try:
            t.realize()
          except Exception as e:  # noqa: BLE001
            failures.append(("raised", p, f"realize: {type(e).__name__}: {e}\n{traceback.format_exc(limit=2)}"))
      for p, t, r in zip(progs, outs, refs):
        if any(f[1] is p for f in failures):
          for o in set(p.ops):
            counts[o]["raised"] += 1
          continue
        why = compare(t.numpy(), r, p)
        for o in set(p.ops):
          counts[o]["wrong" if why else "ok"] += 1
        if why:
          failures.append(("wrong", p, why))
  return counts, failures


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("programs", nargs="?", type=int, default=2000)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--backend", default=None, help="interp or llvm (default: env BACKEND, else llvm)")
  ap.add_argument("--show", type=int, default=10, help="reproducers printed for the first K failures")
  ap.add_argument("--ops", type=int, default=4, help="the most ops in one chain")
  args = ap.parse_args()
  if args.backend:
    os.environ["BACKEND"] = args.backend
  t0 = time.perf_counter()
  counts, failures = fuzz(args.programs, args.seed, max_ops=args.ops)
  dt = time.perf_counter() - t0
  rows = sorted(((o, c["ok"], c["wrong"], c["raised"]) for o, c in counts.items()), key=lambda r: (-r[2] - r[3], r[0]))
  print(format_table([("op", "<20"), ("ok", ">7"), ("wrong", ">7"), ("raised", ">7")], rows))
  n_wrong = sum(1 for f in failures if f[0] == "wrong")
  n_raised = len(failures) - n_wrong
  print(f"\n{args.programs} programs in {dt:.1f} s on {os.environ.get('BACKEND', 'llvm')}: "
        f"{n_wrong} wrong, {n_raised} raised")
  for outcome, prog, why in failures[:args.show]:
    print(f"\n--- {outcome}: {why}\n{reproducer(prog)}")


if __name__ == "__main__":
  main()
