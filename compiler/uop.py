"""The IR: `Ops`, and `UOp`, an immutable hash-consed node (op, dtype, src, arg)."""
from __future__ import annotations

import math
import weakref
from _weakref import _remove_dead_weakref  # what WeakValueDictionary uses: delete a key only if its ref is dead
from dataclasses import dataclass
from enum import Enum, IntEnum, auto
from functools import cached_property
from typing import Any, Callable, Container

from compiler.dtype import DType, dtypes, truncate


class Ops(IntEnum):
  """IntEnum so that hashing and set membership run at C speed on the rewrite hot path."""
  # graph structure
  SINK = auto(); NOOP = auto(); GROUP = auto()  # noqa: E702
  # tensor level
  BUFFER = auto(); CONST = auto(); DEFINE_VAR = auto(); BIND = auto()  # noqa: E702
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()  # noqa: E702
  REDUCE_AXIS = auto(); CONTIGUOUS = auto(); COPY = auto(); ASSIGN = auto(); DETACH = auto()  # noqa: E702
  BUFFERIZE = auto(); KERNEL = auto(); AFTER = auto()  # noqa: E702
  # kernel level
  DEFINE_GLOBAL = auto(); DEFINE_LOCAL = auto(); DEFINE_REG = auto(); DEFINE_ACC = auto()  # noqa: E702
  RANGE = auto(); END = auto(); INDEX = auto(); LOAD = auto(); STORE = auto(); REDUCE = auto()  # noqa: E702
  VECTORIZE = auto(); GEP = auto(); UNROLL = auto(); CONTRACT = auto(); SPECIAL = auto()  # noqa: E702
  IF = auto(); ENDIF = auto(); BARRIER = auto(); PHI = auto()  # noqa: E702
  # unary
  CAST = auto(); BITCAST = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto()  # noqa: E702
  RECIP = auto(); NEG = auto(); TRUNC = auto()  # noqa: E702
  # binary
  ADD = auto(); SUB = auto(); MUL = auto(); IDIV = auto(); MOD = auto(); FDIV = auto(); MAX = auto()  # noqa: E702
  CMPLT = auto(); CMPNE = auto(); CMPEQ = auto(); AND = auto(); OR = auto(); XOR = auto()  # noqa: E702
  SHL = auto(); SHR = auto(); POW = auto()  # noqa: E702
  # ternary
  WHERE = auto(); MULACC = auto()  # noqa: E702
  # ops added by later stages go below this line
  WMMA = auto()  # a tensor core's fragment multiply-add: (A elements, B elements, C elements, lane); compiler/opt/tc.py

  def __repr__(self) -> str:
    return f"Ops.{self.name}"

  __str__ = __repr__

  def __format__(self, spec: str) -> str:
    return format(repr(self), spec)


class GroupOp:
  Unary = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC}
  Binary = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND,
            Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.POW}
  Ternary = {Ops.WHERE, Ops.MULACC}
  ALU = Unary | Binary | Ternary
  Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR}
  Comparison = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}
  Movement = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}
  Associative = {Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX}
  Idempotent = {Ops.MAX, Ops.AND, Ops.OR}


class FastOps:
  """Ops' members (the same objects) as plain class attributes, for code that runs per node or per lane (bounds, the
  symbolic linear forms, the expander and vectorizer, the linearizer, the LLVM renderer, the scheduler's and
  optimizer's walks): on Python 3.11 `Ops.X` is a lookup through EnumType.__getattr__'s hook (~90 ns; a plain class's
  attribute ~20)."""


for _op in Ops:
  setattr(FastOps, _op.name, _op)
del _op


class AxisType(Enum):
  """What a RANGE becomes in the kernel (its color in the UI: compiler.opt.kernel.AXIS_COLORS)."""
  GLOBAL = auto(); THREAD = auto(); LOCAL = auto(); LOOP = auto(); GROUP_REDUCE = auto()  # noqa: E702
  REDUCE = auto(); UPCAST = auto(); UNROLL = auto()  # noqa: E702
  BLOCK = auto()  # a block of a reduce, looped outside the store: the output accumulates across blocks (STAGE)

  def __repr__(self) -> str:
    return f"AxisType.{self.name}"


@dataclass(frozen=True)
class KernelInfo:
  """The arg of a kernel's SINK."""
  name: str = "test"
  opts: tuple = ()
  dont_use_locals: bool = True

  def __repr__(self) -> str:
    return f"KernelInfo(name={self.name!r}, opts={self.opts!r})"


def _cdiv(a: int, b: int) -> int:
  """C integer division: truncates toward zero."""
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b >= 0) else -q


def _cmod(a: int, b: int) -> int:
  """C remainder: has the sign of the dividend."""
  return a - b * _cdiv(a, b)


def exec_alu(op: Ops, dtype: DType, operands: tuple) -> Any:
  """Evaluate one ALU op on Python scalars with the dtype's C semantics (ints wrap, C division)."""
  fxn = python_alu[op]
  return truncate(dtype, fxn(*operands))


def _safe_exp2(x: float) -> float:
  try:
    return 2.0 ** x
  except OverflowError:
    return math.inf


def _safe_log2(x: float) -> float:
  if x > 0:
    return math.log2(x)
  return -math.inf if x == 0 else math.nan


def _fdiv(x, y):
  if y != 0:
    return x / y
  if x == 0 or x != x:
    return math.nan
  return math.copysign(math.inf, x) * math.copysign(1.0, y)


def _fmax(x, y):
  """MAX: IEEE 754-2019 maximum on floats (NaN if either is NaN, +0.0 above -0.0), as codegen's llvm.maximum and the
  interpreter; Python's max keeps its first argument on a tie and on a NaN."""
  if isinstance(x, float) or isinstance(y, float):
    if x != x or y != y:
      return math.nan
    if x == y == 0:
      return x if math.copysign(1.0, x) > 0 else y
  return max(x, y)


python_alu: dict[Ops, Callable] = {
  Ops.EXP2: _safe_exp2, Ops.LOG2: _safe_log2,
  Ops.SIN: lambda x: math.sin(x) if math.isfinite(x) else math.nan,
  Ops.SQRT: lambda x: math.sqrt(x) if x >= 0 else math.nan,
  Ops.RECIP: lambda x: _fdiv(1.0, x), Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x,
  Ops.TRUNC: lambda x: math.copysign(float(math.trunc(x)), x) if math.isfinite(x) else x,  # trunc(-0.5) is -0.0
  Ops.ADD: lambda x, y: x + y, Ops.SUB: lambda x, y: x - y, Ops.MUL: lambda x, y: x * y,
  Ops.IDIV: lambda x, y: _cdiv(x, y) if y != 0 else 0, Ops.MOD: lambda x, y: _cmod(x, y) if y != 0 else 0,
  Ops.FDIV: _fdiv, Ops.MAX: _fmax, Ops.CMPLT: lambda x, y: x < y, Ops.CMPNE: lambda x, y: x != y,
  Ops.CMPEQ: lambda x, y: x == y, Ops.AND: lambda x, y: x & y, Ops.OR: lambda x, y: x | y,
  Ops.XOR: lambda x, y: x ^ y, Ops.SHL: lambda x, y: x << y, Ops.SHR: lambda x, y: x >> y,
  Ops.POW: lambda x, y: x ** y, Ops.WHERE: lambda c, x, y: x if c else y, Ops.MULACC: lambda x, y, z: x * y + z,
}


def cons_key(op: Ops, dtype: DType, src: tuple, arg: Any) -> tuple:
  """What makes two UOps the same node: equal fields, where equal args of different kinds are not the same arg."""
  if isinstance(arg, float):  # 0.0 == -0.0 (and they hash alike), but they are different constants (1/x, copysign)
    return (op, dtype, src, arg, math.copysign(1.0, arg))
  if arg is True or arg is False:  # True == 1 (and hashes alike), but a bool arg is not an int arg
    return (op, dtype, src, arg, bool)
  return (op, dtype, src, arg)


class _KeyRef(weakref.ref):
  """A weak reference to a UOp that knows the UOp's cache key (weakref.KeyedRef, without its Python __new__/__init__:
  made in C, and one object where a callback partial would be another for the cycle collector to track)."""
  __slots__ = ("key",)


def _forget(ref: _KeyRef) -> None:
  """A UOp died: drop its cache entry, unless an equal UOp made since holds the key now (checked atomically, in C)."""
  _remove_dead_weakref(_UCACHE, ref.key)


# hash-consing: the same (op, dtype, src, arg) always gives the same object while it is alive. A dict of weak
# references rather than a WeakValueDictionary, whose methods are Python code: a lookup, the insert of a new node and
# its removal were half the cost of making a UOp.
_UCACHE: dict[tuple, weakref.ref] = {}


class UOpMetaClass(type):
  def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple = (), arg: Any = None):
    key = (op, dtype, src, None) if arg is None else cons_key(op, dtype, src, arg)  # (most nodes: no arg, no call)
    try:
      ref = _UCACHE.get(key)
    except TypeError as e:
      raise TypeError(f"UOp arg must be hashable, got {type(arg).__name__} for {op}") from e
    if ref is not None:
      ret = ref()
      if ret is not None:
        return ret
    # (a new node's fields set here, not in a function of their own: codegen makes ~70k new nodes a training step)
    set_op, set_dtype, set_src, set_arg, set_mm, set_trace_id = _set_fields
    ret = object.__new__(cls)
    set_op(ret, op)
    set_dtype(ret, dtype)
    set_src(ret, tuple(src))
    set_arg(ret, arg)
    set_mm(ret, None)
    set_trace_id(ret, 0)
    ref = _UCACHE[key] = _KeyRef(ret, _forget)
    ref.key = key
    return ret


def live_uops() -> list[UOp]:
  """Every UOp alive now (the hash-consing table's)."""
  return [u for ref in list(_UCACHE.values()) if (u := ref()) is not None]


def _as_uop(x: Any, dtype: DType) -> UOp:
  return x if isinstance(x, UOp) else UOp.const(dtype, x)


_simplifier: Callable[[UOp], UOp] | None = None


def register_simplifier(fn: Callable[[UOp], UOp]) -> None:
  """Make fn what UOp.simplify runs. compiler.symbolic registers its pass when imported (`import compiler` does): its
  rules are built from UOps, so this module cannot import it back (docs/architecture.md, "Direction of imports")."""
  global _simplifier
  _simplifier = fn


class UOp(metaclass=UOpMetaClass):
  # _mm: the cached (vmin, vmax), a slot: most nodes get their bounds asked and nothing else cached, and a __dict__
  # for them would be one more object per node for memory and the cycle collector; _trace_id: the id a recording gave
  # the node (compiler.trace.recorder.TraceIds; 0: none), a slot for the same reasons: a recording names every node
  # (set here: a getattr with a default on an unset slot, in the recorder's walk, cost more than this costs VIZ off)
  __slots__ = ("op", "dtype", "src", "arg", "_mm", "_trace_id", "__weakref__", "__dict__")
  # the user's line that made the node, (file, line, function), where the front end noted it while recording (in the
  # node's __dict__: compiler.trace.recorder.note_callsite); this default answers for every other node without making
  # it a __dict__ (the recorder asks each node it names)
  callsite: tuple[str, int, str] | None = None

  def __setattr__(self, name, value):
    raise AttributeError("UOp is immutable")

  def __reduce__(self):
    return UOp, (self.op, self.dtype, self.src, self.arg)

  def __repr__(self) -> str:
    return pretty_repr(self)

  def replace(self, **kwargs) -> UOp:
    new = (kwargs.pop("op", self.op), kwargs.pop("dtype", self.dtype), kwargs.pop("src", self.src),
           kwargs.pop("arg", self.arg))
    if kwargs:
      raise TypeError(f"unknown UOp fields {list(kwargs)}")
    return UOp(*new)

  # ---- graph helpers
  def toposort(self) -> list[UOp]:
    return toposort(self)

  def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
    return substitute(self, mapping)

  @cached_property
  def ranges(self) -> tuple[UOp, ...]:
    """The RANGE nodes this node depends on, sorted by axis id."""
    rs = {u for u in toposort(self) if u.op is FastOps.RANGE}
    return tuple(sorted(rs, key=lambda r: r.arg))

  # ---- constructors
  @staticmethod
  def const(dtype: DType, value: Any) -> UOp:
    if isinstance(value, UOp):
      return value
    if dtype.count > 1:
      return UOp(Ops.VECTORIZE, dtype, (UOp.const(dtype.scalar(), value),) * dtype.count)
    if isinstance(value, float) and math.isnan(value):
      value = math.nan  # one NaN object, so NaN constants hash-cons
    v = truncate(dtype, value)
    if isinstance(v, float) and math.isnan(v):
      v = math.nan
    return UOp(FastOps.CONST, dtype, (), v)

  @staticmethod
  def variable(name: str, vmin: int, vmax: int, dtype: DType = dtypes.index) -> UOp:
    if vmin > vmax:
      raise ValueError(f"variable {name}: empty range [{vmin}, {vmax}]")
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, vmin, vmax))

  @staticmethod
  def range(end: int | UOp, axis: int, kind: AxisType = AxisType.LOOP, dtype: DType = dtypes.index) -> UOp:
    """A loop counter over [0, end); `dtype` is the kernel's index dtype (int64 where int32 could overflow)."""
    return UOp(Ops.RANGE, dtype, (_as_uop(end, dtype),), (axis, kind))

  @staticmethod
  def sink(*srcs: UOp, arg: Any = None) -> UOp:
    return UOp(Ops.SINK, dtypes.void, tuple(srcs), arg)

  def alu(self, op: Ops, *src: Any) -> UOp:
    operands = (self, *(_as_uop(s, self.dtype) for s in src))
    if op in GroupOp.Comparison:
      out = dtypes.bool.vec(self.dtype.count)
    elif op is FastOps.WHERE:
      out = operands[1].dtype
    else:
      out = self.dtype
    return UOp(op, out, operands)

  def cast(self, dtype: DType) -> UOp:
    return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

  def bitcast(self, dtype: DType) -> UOp:
    return UOp(Ops.BITCAST, dtype, (self,))

  def where(self, x: Any, y: Any) -> UOp:
    known = [v.dtype for v in (x, y) if isinstance(v, UOp)]
    dt = known[0] if known else dtypes.from_py(x)
    return UOp(Ops.WHERE, dt, (self, _as_uop(x, dt), _as_uop(y, dt)))

  def load(self, *src: UOp, dtype: DType | None = None) -> UOp:
    dt = dtype if dtype is not None else getattr(self.dtype, "base", self.dtype)
    return UOp(Ops.LOAD, dt, (self, *src))

  def store(self, value: UOp, *src: UOp) -> UOp:
    return UOp(Ops.STORE, dtypes.void, (self, value, *src))

  def index(self, idx: UOp, valid: UOp | None = None) -> UOp:
    return UOp(Ops.INDEX, self.dtype, (self, idx) if valid is None else (self, idx, valid))

  def reduce(self, *ranges: UOp, op: Ops = Ops.ADD) -> UOp:
    return UOp(Ops.REDUCE, self.dtype, (self, *ranges), op)

  # ---- python operators build ALU nodes
  def __add__(self, x): return self.alu(Ops.ADD, x)
  def __radd__(self, x): return _as_uop(x, self.dtype).alu(Ops.ADD, self)
  def __sub__(self, x): return self.alu(Ops.SUB, x)
  def __rsub__(self, x): return _as_uop(x, self.dtype).alu(Ops.SUB, self)
  def __mul__(self, x): return self.alu(Ops.MUL, x)
  def __rmul__(self, x): return _as_uop(x, self.dtype).alu(Ops.MUL, self)
  def __floordiv__(self, x): return self.alu(Ops.IDIV, x)
  def __rfloordiv__(self, x): return _as_uop(x, self.dtype).alu(Ops.IDIV, self)
  def __mod__(self, x): return self.alu(Ops.MOD, x)
  def __rmod__(self, x): return _as_uop(x, self.dtype).alu(Ops.MOD, self)
  def __truediv__(self, x): return self.alu(Ops.FDIV, x)
  def __rtruediv__(self, x): return _as_uop(x, self.dtype).alu(Ops.FDIV, self)
  def __neg__(self): return self.alu(Ops.NEG)
  def __and__(self, x): return self.alu(Ops.AND, x)
  def __rand__(self, x): return _as_uop(x, self.dtype).alu(Ops.AND, self)
  def __or__(self, x): return self.alu(Ops.OR, x)
  def __ror__(self, x): return _as_uop(x, self.dtype).alu(Ops.OR, self)
  def __xor__(self, x): return self.alu(Ops.XOR, x)
  def __rxor__(self, x): return _as_uop(x, self.dtype).alu(Ops.XOR, self)
  def __lshift__(self, x): return self.alu(Ops.SHL, x)
  def __rshift__(self, x): return self.alu(Ops.SHR, x)
  def __lt__(self, x): return self.alu(Ops.CMPLT, x)
  def __gt__(self, x): return _as_uop(x, self.dtype).alu(Ops.CMPLT, self)
  def __le__(self, x): return (self > x).logical_not()
  def __ge__(self, x): return (self < x).logical_not()
  # == stays identity (UOps are dict keys); these build comparison nodes
  def eq(self, x): return self.alu(Ops.CMPEQ, x)
  def ne(self, x): return self.alu(Ops.CMPNE, x)
  def logical_not(self): return self.ne(True)
  def maximum(self, x): return self.alu(Ops.MAX, x)
  def minimum(self, x): return -((-self).maximum(-_as_uop(x, self.dtype)))
  def exp2(self): return self.alu(Ops.EXP2)
  def log2(self): return self.alu(Ops.LOG2)
  def sin(self): return self.alu(Ops.SIN)
  def sqrt(self): return self.alu(Ops.SQRT)
  def reciprocal(self): return self.alu(Ops.RECIP)
  def trunc(self): return self.alu(Ops.TRUNC)
  __hash__ = object.__hash__
  __eq__ = object.__eq__

  def __bool__(self):
    raise TypeError("a UOp has no truth value; use .simplify() and compare .arg of a CONST")

  # ---- values and bounds
  def simplify(self) -> UOp:
    if _simplifier is None:
      raise RuntimeError(f"UOp.simplify ({self.op}, {self.dtype}) needs the simplifier that importing "
                         "compiler.symbolic registers")
    return _simplifier(self)

  def ssimplify(self) -> UOp | int:
    s = self.simplify()
    return s.arg if s.op is Ops.CONST else s

  @property
  def vmin(self) -> Any:
    return self._min_max[0]

  @property
  def vmax(self) -> Any:
    return self._min_max[1]

  @property
  def _min_max(self) -> tuple[Any, Any]:
    mm = self._mm
    return mm if mm is not None else _bounds(self)

  def render(self) -> str:
    """A compact infix rendering of an index/ALU expression (for labels and messages)."""
    return render_expr(self)


# a new UOp's fields set through their slots' descriptors (C), not an __init__ of object.__setattr__ calls (Python, a
# name looked up each): codegen makes ~100k new nodes a big kernel, and a new node took 1.9 us that way, 1.6 this one
# (UOpMetaClass.__call__'s)
_set_fields = tuple(UOp.__dict__[k].__set__ for k in ("op", "dtype", "src", "arg", "_mm", "_trace_id"))


# ---- bounds (vmin/vmax), iterative so deep graphs don't recurse

def _bounds(root: UOp) -> tuple[Any, Any]:
  set_mm = _set_fields[4]
  for s in root.src:
    if s._mm is None:
      break
  else:  # (a node rebuilt over known sources, the rewrites' usual case)
    mm = _bounds_one(root)
    set_mm(root, mm)
    return mm
  # sources first, below the nodes with no bounds yet only: toposort(root, gate=...)'s walk written out, no gate's
  # call and no list a node (codegen's folds ask the bounds of every int lane they make: issue 29); nor below a node
  # whose bounds its sources do not decide (a float's, a load's, a comparison of floats: GPT step's first call worked
  # out the bounds of 2.5k nodes under those, for folds that could not fold them)
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    u, expanded = stack.pop()
    if u._mm is not None:
      continue
    if expanded:
      set_mm(u, _source_bounds(u))
      continue
    if (own := _own_bounds(u)) is not None:
      set_mm(u, own)
      continue
    stack.append((u, True))
    stack.extend([(x, False) for x in u.src if x._mm is None])
  return root._mm


_RANGES: dict[DType, tuple[Any, Any]] = {}  # a scalar dtype's (min, max), asked for every node's bounds


def _dtype_range(dt: DType) -> tuple[Any, Any]:
  rng = _RANGES.get(dt)
  if rng is None:
    rng = _RANGES[dt] = (dtypes.min(dt), dtypes.max(dt))
  return rng


def _bounds_one(u: UOp) -> tuple[Any, Any]:
  """u's (vmin, vmax), from its sources' where they decide them (every source's bounds are known: _bounds walks sources
  first). The sources' bounds are read from their slots, not through vmin/vmax (two property calls a read:
  fold_by_bounds asks this of every int lane the expander makes)."""
  own = _own_bounds(u)
  return own if own is not None else _source_bounds(u)


def _own_bounds(u: UOp) -> tuple[Any, Any] | None:
  """u's (vmin, vmax) where its sources' bounds do not decide them, else None: a constant's or a variable's, a float's
  or any op's _int_bounds knows nothing of (its dtype's range), a comparison of floats or bools (False, True)."""
  op = u.op
  if op is FastOps.CONST:
    return (u.arg, u.arg)
  if op is FastOps.DEFINE_VAR:
    return (u.arg[1], u.arg[2])
  if op is FastOps.RANGE or op is FastOps.BIND:
    return None
  dt = u.dtype.scalar()
  if op in GroupOp.Comparison and dt == dtypes.bool:
    a = u.src[0].dtype
    return (False, True) if a.scalar() == dtypes.bool or not (dtypes.is_int(a) or a == dtypes.bool) else None
  if not (dtypes.is_int(dt) or dt == dtypes.bool) or op not in _INT_BOUNDS_OPS:
    return _dtype_range(dt)
  return None


def _source_bounds(u: UOp) -> tuple[Any, Any]:
  """u's (vmin, vmax) where its sources' bounds decide them (_own_bounds(u) is None)."""
  op, s = u.op, u.src
  mm = [x._mm or _bounds(x) for x in s]  # (a bounds tuple is never empty)
  if op is FastOps.RANGE:
    return (0, mm[0][1] - 1)
  if op is FastOps.BIND:
    return mm[0][0], mm[0][1]
  dt = u.dtype.scalar()
  lo, hi = _dtype_range(dt)
  if op in GroupOp.Comparison and dt == dtypes.bool:  # (of ints: _own_bounds answers for the others)
    (amin, amax), (bmin, bmax) = mm
    if op is FastOps.CMPLT:
      if amax < bmin:
        return (True, True)
      if amin >= bmax:
        return (False, False)
    if op in (FastOps.CMPNE, FastOps.CMPEQ):
      disjoint = amax < bmin or amin > bmax
      same = amin == amax == bmin == bmax
      if disjoint or same:
        v = (op is FastOps.CMPNE) == disjoint
        return (v, v)
    return (False, True)
  res = _int_bounds(op, s, mm, dt)
  if res is None or res[0] < lo or res[1] > hi:
    return (lo, hi)  # unknown, or it may overflow: claim nothing
  if dt == dtypes.bool:
    return (bool(res[0]), bool(res[1]))
  return res


# the ops _int_bounds may know the bounds of (any other int op's are its dtype's range: _own_bounds)
_INT_BOUNDS_OPS = frozenset((Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MAX, Ops.IDIV, Ops.MOD, Ops.AND, Ops.WHERE,
                             Ops.CAST, Ops.SHL, Ops.SHR, Ops.SPECIAL))


def _int_bounds(op: Ops, s: tuple[UOp, ...], mm: list[tuple[Any, Any]], dt: DType) -> tuple[Any, Any] | None:
  """An int/bool node's bounds from its sources' `mm` (None: unknown), before the check for overflow."""
  if op is FastOps.ADD:
    return (mm[0][0] + mm[1][0], mm[0][1] + mm[1][1])
  if op is FastOps.SUB:
    return (mm[0][0] - mm[1][1], mm[0][1] - mm[1][0])
  if op is FastOps.MUL:
    (a0, a1), (b0, b1) = mm
    c = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]
    return (min(c), max(c))
  if op is FastOps.NEG:
    return (-mm[0][1], -mm[0][0])
  if op is FastOps.MAX:
    return (max(mm[0][0], mm[1][0]), max(mm[0][1], mm[1][1]))
  if op is FastOps.IDIV and mm[1][0] > 0:
    (a0, a1), (b0, b1) = mm
    c = [_cdiv(a0, b0), _cdiv(a0, b1), _cdiv(a1, b0), _cdiv(a1, b1)]
    return (min(c), max(c))
  if op is FastOps.MOD and mm[1][0] > 0:
    (a0, a1), (b0, m) = mm
    if a0 >= 0:
      return (a0, a1) if a1 < b0 else (0, min(m - 1, a1))
    if a1 <= 0:
      return (max(-(m - 1), a0), 0)
    return (-(m - 1), m - 1)
  if op is FastOps.AND and s[1].op is FastOps.CONST and isinstance(s[1].arg, int) and s[1].arg >= 0:
    return (0, s[1].arg) if dt != dtypes.bool else (False, True)
  if op is FastOps.WHERE:
    return (min(mm[1][0], mm[2][0]), max(mm[1][1], mm[2][1]))
  if op is FastOps.CAST and (dtypes.is_int(s[0].dtype) or s[0].dtype.scalar() == dtypes.bool):
    return (mm[0][0], mm[0][1])
  if op is FastOps.SHL and s[1].op is FastOps.CONST and mm[0][0] >= 0 and 0 <= s[1].arg < 8 * dt.itemsize:
    return (mm[0][0] << s[1].arg, mm[0][1] << s[1].arg)
  if op is FastOps.SHR and s[1].op is FastOps.CONST and mm[0][0] >= 0 and 0 <= s[1].arg < 8 * dt.itemsize:
    return (mm[0][0] >> s[1].arg, mm[0][1] >> s[1].arg)
  if op is FastOps.SPECIAL:
    return (0, mm[0][1] - 1) if s else None
  return None


# ---- graph walks

# a SINK's whole toposort (less the SINK), kept in its __dict__ (nodes are immutable, so it never changes): a kernel's
# AST is walked again and again by the passes' helpers (fusion's checks per candidate group, the optimizer's per opt,
# codegen's): GPT step walked 116k of its 190k nodes in ungated walks from a root it had walked before. Only SINKs:
# few, so the lists cost little memory, where keeping one on every node walked from would be quadratic in a chain's
# length
_TOPO_KEY = "_toposort"


def toposort(root: UOp, gate: Callable[[UOp], bool] | None = None, stop: Container[UOp] | None = None) -> list[UOp]:
  """Every node reachable from root, sources before users (iterative DFS). `gate(u)` False: don't descend. A node in
  `stop` is neither descended into nor listed (the linearizer's placed nodes: a container's lookup, not a call)."""
  keep = gate is None and stop is None and root.op is FastOps.SINK
  if keep:
    got = root.__dict__.get(_TOPO_KEY)
    if got is not None:
      out = list(got)  # (a new list: callers may change theirs)
      out.append(root)
      return out
  visited: dict[UOp, None] = {}
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    u, expanded = stack.pop()
    if u in visited:
      continue
    if expanded:
      visited[u] = None
      continue
    if stop is not None and u in stop:
      continue
    stack.append((u, True))
    if gate is None or gate(u):
      for s in reversed(u.src):
        if s not in visited:
          stack.append((s, False))
  out = list(visited)
  if keep:  # (without the root, which comes last: the root holding itself would be a cycle, freed only by the
    # cycle collector, not when the last reference goes)
    root.__dict__[_TOPO_KEY] = tuple(out[:-1])
  return out


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """Replace every key of mapping by its value in the graph of root (not inside the values)."""
  if not mapping:
    return root
  done: dict[UOp, UOp] = {}
  for u in toposort(root, gate=lambda x: x not in mapping):
    if u in mapping:
      done[u] = mapping[u]
      continue
    new_src = tuple(done[s] for s in u.src)
    done[u] = u if all(a is b for a, b in zip(new_src, u.src)) else u.replace(src=new_src)
  return done[root]


# ---- printing

def arg_str(arg: Any) -> str:
  """The display text of an arg (used in traces and labels); never raises."""
  try:
    if isinstance(arg, float):
      return repr(arg)
    if isinstance(arg, Enum):
      return repr(arg)
    return repr(arg)
  except Exception as e:  # a broken __repr__ must not break tracing
    return f"<unprintable {type(arg).__name__}: {e}>"


def pretty(root: UOp) -> str:
  """One line per node, numbered in topological order: `  3 ADD  int32  (1, 2)  arg`."""
  order = toposort(root)
  num = {u: i for i, u in enumerate(order)}
  lines = []
  for i, u in enumerate(order):
    srcs = ", ".join(str(num[s]) for s in u.src)
    arg = "" if u.arg is None else "  " + arg_str(u.arg)
    lines.append(f"{i:4d} {u.op.name:<14s} {str(u.dtype):<10s} ({srcs}){arg}")
  return "\n".join(lines)


def render_expr(u: UOp) -> str:
  """Infix text of an expression, iterative; shared subtrees are repeated (meant for small index math)."""
  out: dict[UOp, str] = {}
  sym = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.FDIV: "/", Ops.CMPLT: "<",
         Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
  for x in toposort(u):
    s = [out[y] for y in x.src]
    if x.op is Ops.CONST:
      out[x] = arg_str(x.arg)
    elif x.op is Ops.DEFINE_VAR:
      out[x] = str(x.arg[0])
    elif x.op is Ops.RANGE:
      out[x] = f"r{x.arg[0]}"
    elif x.op in sym and len(s) == 2:
      out[x] = f"({s[0]}{sym[x.op]}{s[1]})"
    elif x.op is Ops.NEG:
      out[x] = f"(-{s[0]})"
    elif x.op is Ops.WHERE:
      out[x] = f"({s[0]}?{s[1]}:{s[2]})"
    else:
      out[x] = f"{x.op.name.lower()}({', '.join(s)})"
    if len(out[x]) > 400:
      out[x] = out[x][:400] + "…"
  return out[u]


def pretty_repr(u: UOp, limit: int = 30) -> str:
  """tinygrad-like nested repr: UOp(Ops.ADD, dtypes.int, arg=None, src=(...)), truncated for big graphs."""
  order = toposort(u)
  if len(order) > limit:
    return f"UOp({u.op!r}, {u.dtype!r}, arg={arg_str(u.arg)}, src=<{len(u.src)} srcs, {len(order)} nodes>)"
  out: dict[UOp, str] = {}
  for x in order:
    srcs = ", ".join(out[s] for s in x.src)
    out[x] = f"UOp({x.op!r}, {x.dtype!r}, arg={arg_str(x.arg)}, src=({srcs}{',' if len(x.src) == 1 else ''}))"
  return out[u]

