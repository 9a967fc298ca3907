"""The lazy Tensor: operations build a tensor-level UOp graph; `.realize()`/`.numpy()` schedule and run it."""
from __future__ import annotations

import math
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from compiler import oracle, tensor_nn
from compiler import realize as realize_state
from compiler.dtype import DType, dtypes, least_upper_dtype, truncate
from compiler.realize import note_draw, run_schedule
from compiler.runtime.buffer import buffer_of, new_buffer_uop
from compiler.schedule.assign import assign_target, assigns_run, forget_overwritten, stale_readers
from compiler.schedule.bufferize import FRONT_END_LOWERINGS
from compiler.schedule.rangeify import create_schedule
from compiler.schedule.shape import shape_of
from compiler.tensor_mixins import AutogradMixin, CreationMixin, ElementwiseMixin, IndexingMixin, NnMixin, ReduceMixin
from compiler.tensor_mixins.autograd import PENDING_ASSIGNS, SHARED_BUFFERS, buffer_of_view, live_tensors, track
from compiler.tensor_mixins.elementwise import _expm1
from compiler.trace import recorder
from compiler.uop import GroupOp, Ops, UOp, toposort

Shape = tuple[int, ...]
Scalar = int | float | bool
_LN2 = math.log(2)

# tensor nodes already computed -> views of their buffers (weak keys: an entry lives while some graph uses the node)
_realized: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()
# buffer -> the first tensor that realizing gave it to (a second one makes it one of SHARED_BUFFERS)
_given: weakref.WeakKeyDictionary[UOp, weakref.ref] = weakref.WeakKeyDictionary()


def _reads_buffer(u: UOp) -> bool:
  """Whether u's graph has a BUFFER: a walk that stops at the first one (a training step's graphs reach one within a
  few nodes, where a full toposort of each output cost more than the rest of remembering it)."""
  x = u
  while x.src:  # first down the first sources, where most graphs' inputs are (no set of nodes seen)
    x = x.src[0]
  if x.op is Ops.BUFFER:
    return True
  seen, stack = {u}, [u]
  while stack:
    x = stack.pop()
    if x.op is Ops.BUFFER:
      return True
    for s in x.src:
      if s not in seen:
        seen.add(s)
        stack.append(s)
  return False


_NP_DTYPES: dict[np.dtype, DType] = {}  # numpy dtype -> DType (dtypes.from_np walks every dtype: 5 us a tensor)


def to_dtype(dt: Any, op: str = "to_dtype") -> DType | None:
  """A DType from a DType, its name, or anything numpy accepts as a dtype; None stays None. op names the caller in
  the error."""
  if dt is None or isinstance(dt, DType):
    return dt
  if isinstance(dt, np.dtype) and (known := _NP_DTYPES.get(dt)) is not None:
    return known
  if isinstance(dt, str) and (named := dtypes.from_str(dt)) is not None:
    return named  # before numpy's reading, where 'int' is int64 and 'float' float64
  try:
    got = dtypes.from_np(dt)
  except TypeError as e:
    if isinstance(dt, str):
      raise DTypeNameError(f"{op}: unsupported dtype {dt!r}: not the name of a dtype") from e
    raise TypeError(f"{op}: unsupported dtype {dt!r}") from e
  if isinstance(dt, np.dtype):
    _NP_DTYPES[dt] = got
  return got


def _shape_arg(shape: tuple, name: str) -> Shape:
  """Accept f(2, 3) and f((2, 3)) alike."""
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
    shape = tuple(shape[0])
  for s in shape:  # the usual case, Python ints: nothing to check further or convert (a loop: all() of a generator
    if type(s) is not int:  # was most of a reshape's own cost)
      break
  else:
    return shape
  if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape):
    raise TypeError(f"{name}: shape must be ints, got {shape!r}")
  return tuple(int(s) for s in shape)


def _check_shape(shape: Shape, name: str) -> Shape:
  if any(s < 0 for s in shape):
    raise ValueError(f"{name}: negative dimension in shape {shape}")
  return shape


def broadcast_shape(*shapes: Shape, op: str = "broadcast") -> Shape:
  """numpy broadcasting of shapes; ValueError naming the op and the shapes when they don't broadcast."""
  if len(shapes) == 2 and type(a := shapes[0]) is tuple and type(b := shapes[1]) is tuple:
    if a == b:
      return a  # the usual case of a binary op: nothing to broadcast
    if len(a) != len(b):
      a, b = (1,) * (len(b) - len(a)) + a, (1,) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b):  # (a binary op's broadcast, without the sets of the general rule below)
      if x == y or y == 1:
        out.append(x)
      elif x == 1:
        out.append(y)
      else:
        break
    else:
      return tuple(out)
  nd = max((len(s) for s in shapes), default=0)
  padded = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
  out = []
  for dims in zip(*padded):
    big = {d for d in dims if d != 1}
    if len(big) > 1:
      raise ValueError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} can't be broadcast together")
    out.append(big.pop() if big else 1)
  return tuple(out)


def _fitting_int(dt: DType, lo: int, hi: int, name: str) -> DType:
  """For the default int inferred from Python ints: it if they fit, else int64 (numpy's choice), never a wrap."""
  if dt != dtypes.default_int:
    return dt
  for cand in (dtypes.default_int, dtypes.int64):
    if dtypes.min(cand) <= lo and hi <= dtypes.max(cand):
      return cand
  raise OverflowError(f"{name}: the integer {hi if hi > 0 else lo} doesn't fit int64")


def _in_range(v: Scalar, dt: DType, op: str) -> Scalar:
  """A Python scalar as a value of dt (a float into an int dtype truncates, as torch); OverflowError naming the op,
  the value and the dtype when it doesn't fit, instead of a silent wrap."""
  v = _py(v)
  if dt == dtypes.bool:
    return bool(v)
  if dtypes.is_int(dt):
    if isinstance(v, float):
      if not math.isfinite(v):
        raise OverflowError(f"{op}: the value {v} can't be converted to {dt}")
      v = int(v)
    if not dtypes.min(dt) <= v <= dtypes.max(dt):
      raise OverflowError(f"{op}: the value {v} is out of range for {dt} [{dtypes.min(dt)}, {dtypes.max(dt)}]")
    return int(v)
  top = _FLOAT_MAX.get(dt)
  if top is None:
    top = _FLOAT_MAX[dt] = float(np.finfo(dt.np).max)  # (np.finfo each call was most of a constant's making)
  if math.isfinite(v) and abs(v) > top:
    raise OverflowError(f"{op}: the value {v} overflows {dt}")
  return float(v)


_FLOAT_MAX: dict[DType, float] = {}
_ACC_DTYPES: dict[DType, DType] = {}
SCALAR_NODES_SIZE = 512
# (dtype, shape, kind, value, sign) -> a Python scalar's broadcast constant node (Tensor._scalar_to)
_SCALAR_NODES: dict[tuple, UOp] = {}  # dtype -> its sum's accumulator (least_upper_dtype's walk, once a dtype)


class ArgumentError(RuntimeError, ValueError):
  """An invalid shape or order argument: RuntimeError as in tinygrad and torch, and the ValueError numpy raises."""


class AxisError(IndexError, ValueError):
  """An axis out of range: IndexError as in tinygrad and torch, and a ValueError as numpy's AxisError is."""


class DTypeNameError(AttributeError, TypeError):
  """An unknown dtype name: AttributeError as in tinygrad (getattr(dtypes, name)), and the TypeError numpy raises."""


def _is_scalar(x: Any) -> bool:
  return isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating))


def _py(x: Any) -> Scalar:
  return x.item() if isinstance(x, np.generic) else x


class Tensor(ElementwiseMixin, ReduceMixin, IndexingMixin, NnMixin, CreationMixin, AutogradMixin):
  """A lazy n-d array. Build with numpy arrays, nested lists or scalars; compute with `.numpy()`/`.realize()`."""
  __slots__ = ("uop", "requires_grad", "grad", "__weakref__")
  _rng: np.random.Generator = np.random.default_rng(0)

  def __init__(self, data: Any, dtype: Any = None, requires_grad: bool | None = None):
    self.requires_grad, self.grad = requires_grad, None
    self._init(data, dtype)
    if requires_grad:
      self.requires_grad_()
    track(self)
    if recorder.RECORDER is not None:  # (only while recording: a program not traced walks no frames)
      recorder.note_callsite(self.uop)

  @staticmethod
  def _of(u: UOp) -> Tensor:
    """Tensor(u) for a node the front end just built, without __init__'s dispatch on the kind of its argument."""
    t = object.__new__(Tensor)
    t.uop, t.requires_grad, t.grad = u, None, None
    track(t)
    if recorder.RECORDER is not None:  # the user's line that made it (only while recording: kernels list them)
      recorder.note_callsite(u)
    return t

  def _init(self, data: Any, dtype: Any) -> None:
    dt = to_dtype(dtype)
    if isinstance(data, UOp):
      self.uop = data if dt is None or dt == data.dtype else data.cast(dt)
      return
    if isinstance(data, Tensor):
      self.uop = data.uop if dt is None or dt == data.dtype else data.cast(dt).uop
      return
    if _is_scalar(data):
      v = _py(data)
      self.uop = UOp.const(dt or _fitting_int(dtypes.from_py(v), v, v, "Tensor"), v)
      return
    if isinstance(data, (list, tuple)):
      try:
        arr = np.array(data)
      except ValueError as e:
        raise ValueError(f"Tensor: ragged nested sequence ({e})") from e
      if arr.dtype == object:
        raise ValueError("Tensor: ragged nested sequence or unsupported elements")
      if arr.size and dt is None:
        try:
          dt = dtypes.from_py(data)
        except TypeError:  # numpy scalars inside the list
          dt = dtypes.from_np(arr.dtype)
        if arr.dtype.kind in "iu":
          dt = _fitting_int(dt, int(arr.min()), int(arr.max()), "Tensor")
      dt = dt or dtypes.default_float
    elif isinstance(data, np.ndarray):
      arr = data
      dt = dt or to_dtype(arr.dtype)
    else:
      raise TypeError(f"Tensor: can't make a tensor from {type(data).__name__}")
    self.uop = Tensor._from_np(arr, dt)  # the buffer casts while it copies: one pass over the data, not two

  @staticmethod
  def _from_np(arr: np.ndarray, dt: DType, share: bool = False) -> UOp:
    buf = new_buffer_uop(dt, arr.size, arr, share)
    return buf if arr.ndim == 1 else UOp(Ops.RESHAPE, dt, (buf,), tuple(arr.shape))

  @staticmethod
  def from_numpy(arr: np.ndarray, dtype: Any = None) -> Tensor:
    """A tensor that reads arr's own memory (no copy) where kernels can: a C-contiguous, aligned array of the
    tensor's dtype (default: arr's). Later changes to arr show in the tensor, as with torch.from_numpy; the tensor
    never writes arr (an assign gives it memory of its own first). Any other array is copied, as by Tensor(arr)."""
    if not isinstance(arr, np.ndarray):
      raise TypeError(f"Tensor.from_numpy: needs a numpy array, got {type(arr).__name__}")
    return Tensor(Tensor._from_np(arr, to_dtype(dtype) or to_dtype(arr.dtype), share=True))

  # ---- properties
  @property
  def shape(self) -> Shape:
    return shape_of(self.uop)

  @property
  def dtype(self) -> DType:
    return self.uop.dtype

  @property
  def ndim(self) -> int:
    return len(self.shape)

  def numel(self) -> int:
    return math.prod(self.shape)

  def element_size(self) -> int:
    return self.dtype.itemsize

  def __len__(self) -> int:
    if not self.shape:
      raise TypeError("len() of a 0-d tensor")
    return self.shape[0]

  def __repr__(self) -> str:
    return f"<Tensor {self.uop.op.name} shape={self.shape} dtype={self.dtype}>"

  def __hash__(self) -> int:
    return id(self)

  def __bool__(self) -> bool:
    raise TypeError("the truth value of a Tensor is ambiguous; use .item() or .numpy()")

  # ---- realizing
  @staticmethod
  def _realize_all(tensors: Sequence[Tensor]) -> None:
    todo = [t for t in tensors if buffer_of_view(t.uop) is None]
    if not todo:
      return
    run: set[UOp] = set()
    if PENDING_ASSIGNS:  # (no in-place write waiting, the usual realize: no walk)
      todo, run = Tensor._with_stale_readers(todo)
    uops = [t.uop for t in todo]  # read first: a tensor listed twice is rebound on its first visit
    if oracle.enabled():  # ORACLE=1: the graph as written, evaluated by numpy; no schedule, no rewrite
      becomes = Tensor._oracle_realize(uops)
    else:
      schedule, becomes = create_schedule(uops, _realized)
      run_schedule(schedule)
    for a in run:  # an assign run inside a graph is read from its buffer from now on, never run again
      _realized[a] = a.src[0]
      PENDING_ASSIGNS.discard(a)
    for t, u in zip(todo, uops):
      t.uop = becomes[u]
      if (buf := buffer_of_view(t.uop)) is not None:
        first = _given.setdefault(buf, weakref.ref(t))()
        if first is not None and first is not t:  # equal graphs, one buffer: two tensors now hold it
          SHARED_BUFFERS.add(buf)
        elif first is None:
          _given[buf] = weakref.ref(t)
      # a graph of constants only is not remembered: its nodes are shared with every graph using those constants
      # (hash-consing), which would then read a buffer instead of folding them, and two such tensors one buffer
      if _reads_buffer(u):
        _realized[u] = t.uop

  @staticmethod
  def _oracle_realize(uops: list[UOp]) -> dict[UOp, UOp]:
    """ORACLE=1's realize (compiler.oracle): each output's value into a buffer of its own, then the in-place writes
    (every value read the buffers as they were before them, as a schedule does); the map output -> buffer view."""
    values, writes = oracle.evaluate(uops, _realized)
    becomes = {u: UOp(Ops.RESHAPE, u.dtype, (new_buffer_uop(u.dtype, v.size, np.ascontiguousarray(v).ravel()),),
                      shape_of(u)) for u, v in zip(uops, values)}
    written = {oracle.write(target, v) for target, v in writes}
    if written:
      forget_overwritten(_realized, written)
      for u in uops:  # an assign's result is its target (read from the buffer it wrote), as the scheduler's
        if u.op is Ops.ASSIGN and buffer_of_view(u.src[0]) is not None:
          becomes[u] = u.src[0]
    return becomes

  @staticmethod
  def _with_stale_readers(todo: list[Tensor]) -> tuple[list[Tensor], set[UOp]]:
    """todo and the live lazy tensors that read a buffer as it is before the in-place writes todo's graphs run (a
    value means what it meant when it was built: `loss` read after `opt.step()` is the loss of the old weights),
    so that the scheduler computes them first, in the same schedule; and the ASSIGN nodes it runs."""
    uops = [t.uop for t in todo]
    pending = set(PENDING_ASSIGNS)
    outs = set(uops)
    run = pending & outs if pending <= outs else assigns_run(uops, _realized, pending)  # (an optimizer's step: all)
    if not run:
      return todo, run
    written = {assign_target(a) for a in run}
    ids = {id(t) for t in todo}
    lazy = [t for t in live_tensors() if id(t) not in ids and t.uop not in outs and buffer_of_view(t.uop) is None]
    readers = [t for t, stale in zip(lazy, stale_readers([t.uop for t in lazy], _realized, written, run)) if stale]
    if readers and (before := realize_state.before_capture):
      outside = [t for t in readers if (r := before.get(id(t))) is not None and r() is t]
      if outside:  # built before a TinyJit's capture: not part of it
        capturing, realize_state.capturing = realize_state.capturing, None
        try:
          Tensor._realize_all(outside)
        finally:
          realize_state.capturing = capturing
        done = {id(t) for t in outside}
        readers = [t for t in readers if id(t) not in done]
    if readers:  # (their graphs may hold other pending assigns, which run now too)
      run |= assigns_run([t.uop for t in readers], _realized, pending)
    return todo + readers, run

  def realize(self, *others: Tensor) -> Tensor:
    """Compute this tensor (and `others`, in the same schedule) into buffers."""
    Tensor._realize_all([self, *others])
    return self

  def schedule(self, *others: Tensor) -> list:
    """The kernels that would compute these tensors (nothing runs; the tensors stay lazy)."""
    return create_schedule([t.uop for t in (self, *others)], _realized)[0]

  def numpy(self) -> np.ndarray:
    """The values, as a read-only view of the tensor's buffer (no copy; `.copy()` it to write): it keeps its values
    whatever runs later, since a kernel about to write that buffer moves it to other memory first."""
    if buffer_of_view(self.uop) is None:  # (a realized tensor: no realize call, a repeat call's result)
      self.realize()
    u = self.uop
    while u.op is Ops.RESHAPE:
      u = u.src[0]
    out = buffer_of(u).numpy().reshape(self.shape)
    if oracle.READBACK is not None:  # (python -m compiler.trace bisect compares what the script reads)
      oracle.note_read(out)
    return out

  def tolist(self) -> Any:
    return self.numpy().tolist()

  def item(self) -> Scalar:
    if self.numel() != 1:
      raise ValueError(f"Tensor.item: a tensor of shape {self.shape} has {self.numel()} elements, not 1")
    return self.numpy().reshape(()).item()

  def contiguous(self) -> Tensor:
    return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

  # ---- creation
  @staticmethod
  def full(shape: Any, fill_value: Scalar, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    shape = _check_shape(_shape_arg((shape,) if isinstance(shape, int) else tuple(shape), "Tensor.full"),
                         "Tensor.full")
    v = _py(fill_value)
    dt = to_dtype(dtype) or _fitting_int(dtypes.from_py(v), v, v, "Tensor.full")
    c = UOp.const(dt, _in_range(v, dt, "Tensor.full"))
    if not shape:
      return Tensor(c)._marked(requires_grad)
    return Tensor(UOp(Ops.RESHAPE, dt, (c,), (1,) * len(shape))).expand(shape)._marked(requires_grad)

  @staticmethod
  def zeros(*shape: Any, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    return Tensor.full(_shape_arg(shape, "Tensor.zeros"), 0, to_dtype(dtype) or dtypes.default_float, requires_grad)

  @staticmethod
  def ones(*shape: Any, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    return Tensor.full(_shape_arg(shape, "Tensor.ones"), 1, to_dtype(dtype) or dtypes.default_float, requires_grad)

  @staticmethod
  def empty(*shape: Any, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    return Tensor.zeros(*shape, dtype=dtype, requires_grad=requires_grad)

  @staticmethod
  def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: Any = None,
             requires_grad: bool | None = None) -> Tensor:
    if stop is None:
      start, stop = 0, start
    start, stop, step = _py(start), _py(stop), _py(step)
    if step == 0:
      raise ValueError("Tensor.arange: step must not be 0")
    is_float = any(isinstance(x, float) for x in (start, stop, step))
    n = max(0, math.ceil((stop - start) / step))
    last = start + (n - 1) * step if n else start
    dt = to_dtype(dtype) or (dtypes.default_float if is_float else
                             _fitting_int(dtypes.default_int, min(start, last), max(start, last), "Tensor.arange"))
    for v in (start, last):  # both ends in range: the values between are too (and nothing huge is allocated)
      _in_range(v, dt, "Tensor.arange")
    if is_float:
      return Tensor((start + np.arange(n) * step).astype(dt.np), dt, requires_grad)
    return Tensor((start + np.arange(n, dtype=np.int64) * step).astype(dt.np), dt, requires_grad)

  @staticmethod
  def eye(n: int, m: int | None = None, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    m = n if m is None else m
    if n < 0 or m < 0:
      raise ValueError(f"Tensor.eye: negative size ({n}, {m})")
    dt = to_dtype(dtype) or dtypes.default_float
    return (Tensor.arange(n).reshape(n, 1) == Tensor.arange(m).reshape(1, m)).cast(dt)._marked(requires_grad)

  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    Tensor._rng = np.random.default_rng(seed)

  @staticmethod
  def _drawn(draw: Callable[[], np.ndarray], dt: DType, requires_grad: bool | None) -> Tensor:
    """A tensor of the numbers `draw()` takes from the host RNG (Tensor._rng when called: manual_seed rebinds it);
    its buffer is noted with the draw, so that a TinyJit replay draws new numbers into it as the function would."""
    t = Tensor(draw(), dt, requires_grad)
    note_draw(buffer_of(buffer_of_view(t.uop)), draw)
    return t

  @staticmethod
  def rand(*shape: Any, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    """Uniform in [0, 1)."""
    shape = _check_shape(_shape_arg(shape, "Tensor.rand"), "Tensor.rand")
    dt = to_dtype(dtype) or dtypes.default_float
    return Tensor._drawn(lambda: Tensor._rng.random(shape, dtype=np.float64).astype(dt.np), dt, requires_grad)

  @staticmethod
  def randn(*shape: Any, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    """Standard normal."""
    shape = _check_shape(_shape_arg(shape, "Tensor.randn"), "Tensor.randn")
    dt = to_dtype(dtype) or dtypes.default_float
    return Tensor._drawn(lambda: Tensor._rng.standard_normal(shape).astype(dt.np), dt, requires_grad)

  @staticmethod
  def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, dtype: Any = None,
              requires_grad: bool | None = None) -> Tensor:
    return (Tensor.rand(*shape, dtype=dtype) * (high - low) + low)._marked(requires_grad)

  @staticmethod
  def randint(*shape: Any, low: int = 0, high: int = 10, dtype: Any = None,
              requires_grad: bool | None = None) -> Tensor:
    shape = _check_shape(_shape_arg(shape, "Tensor.randint"), "Tensor.randint")
    dt = to_dtype(dtype) or dtypes.default_int
    return Tensor._drawn(lambda: Tensor._rng.integers(low, high, shape).astype(dt.np), dt, requires_grad)

  def full_like(self, fill_value: Scalar, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    return Tensor.full(self.shape, fill_value, to_dtype(dtype) or self.dtype, requires_grad)

  def zeros_like(self, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    return self.full_like(0, dtype, requires_grad)

  def ones_like(self, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    return self.full_like(1, dtype, requires_grad)

  def rand_like(self, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    return Tensor.rand(self.shape, dtype=to_dtype(dtype) or (self.dtype if dtypes.is_float(self.dtype) else None),
                       requires_grad=requires_grad)

  def randn_like(self, dtype: Any = None, requires_grad: bool | None = None) -> Tensor:
    return Tensor.randn(self.shape, dtype=to_dtype(dtype) or (self.dtype if dtypes.is_float(self.dtype) else None),
                        requires_grad=requires_grad)

  # ---- dtype
  def cast(self, dtype: Any) -> Tensor:
    if dtype is self.uop.dtype:  # (the usual case: an op's operand already of its dtype)
      return self
    dt = to_dtype(dtype)
    if dt is None:
      raise TypeError("Tensor.cast: dtype is required")
    return self if dt == self.dtype else Tensor._of(UOp(Ops.CAST, dt, (self.uop,)))

  def float(self) -> Tensor:
    return self.cast(dtypes.float32)

  def half(self) -> Tensor:
    return self.cast(dtypes.float16)

  def int(self) -> Tensor:
    return self.cast(dtypes.int32)

  def bool(self) -> Tensor:
    return self.cast(dtypes.bool)

  def _float(self) -> Tensor:
    return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

  # ---- elementwise building blocks
  def _alu(self, op: Ops, *srcs: Tensor) -> Tensor:
    u = self.uop
    if len(srcs) == 1 and op not in GroupOp.Comparison:  # a binary op of its operands' dtype (UOp.alu's rule)
      out = UOp(op, u.dtype, (u, srcs[0].uop))
    else:
      out = u.alu(op, *[s.uop for s in srcs])
    shape_of(out)  # known now from its operands' (asked later, a node whose source's is unknown costs a walk)
    return Tensor._of(out)

  def _scalar_dtype(self, v: Scalar) -> DType:
    """The dtype of a Python scalar next to this tensor (a scalar never widens the tensor's kind, like numpy)."""
    sd = dtypes.from_py(v)
    if dtypes.is_float(self.dtype):
      return self.dtype
    if dtypes.is_int(self.dtype):
      return self.dtype if sd != dtypes.float32 else dtypes.default_float
    return sd  # bool tensor: the scalar's own kind

  @staticmethod
  def _scalar(v: Scalar, dt: DType, op: str) -> Tensor:
    """A Python scalar as a constant of dt; an int out of dt's range is an error (numpy's rule), not a wrap."""
    if isinstance(v, int) and not isinstance(v, bool) and dtypes.is_int(dt) and \
        not dtypes.min(dt) <= v <= dtypes.max(dt):
      raise OverflowError(f"Tensor.{op}: the Python int {v} is out of range for {dt}")
    return Tensor._of(UOp.const(dt, v))

  @staticmethod
  def _scalar_to(v: Scalar, dt: DType, op: str, shape: Shape) -> UOp:
    """The constant v of dt broadcast to shape (Tensor._scalar's node, broadcast), remembered: a repeat call makes the
    same few such nodes again, and kept alive here they are found (hash-consing) instead of made."""
    key = (dt, shape, type(v), v, math.copysign(1.0, v) if isinstance(v, float) else 0.0)  # (0.0 and -0.0 differ)
    u = _SCALAR_NODES.get(key)
    if u is None:
      if len(_SCALAR_NODES) >= SCALAR_NODES_SIZE:
        _SCALAR_NODES.clear()
      u = _SCALAR_NODES[key] = Tensor._scalar(v, dt, op)._broadcast_to(shape).uop
    return u

  def _broadcasted(self, y: Tensor | Scalar, op: str, reverse: bool = False,
                   out_dtype: DType | None = None) -> tuple[Tensor, Tensor]:
    x: Tensor = self
    if isinstance(y, Tensor):
      xd, yd = x.uop.dtype, y.uop.dtype
      dt = out_dtype or (xd if xd is yd else least_upper_dtype(xd, yd))
    elif _is_scalar(y):
      y = _py(y)
      dt = out_dtype or self._scalar_dtype(y)
      x = self.cast(dt)
      c = Tensor._of(Tensor._scalar_to(y, dt, op, x.shape))  # (a scalar broadcasts to any shape)
      return (c, x) if reverse else (x, c)
    else:
      raise TypeError(f"Tensor.{op}: unsupported operand {type(y).__name__}")
    if reverse:
      x, y = y, x
    xs, ys = x.shape, y.shape
    if xs == ys:  # (no broadcast: the op's name is formatted only for broadcast_shape's error)
      return x.cast(dt), y.cast(dt)
    shape = broadcast_shape(xs, ys, op=f"Tensor.{op}")
    return x.cast(dt)._broadcast_to(shape), y.cast(dt)._broadcast_to(shape)

  def _broadcast_to(self, shape: Shape) -> Tensor:
    own = self.shape
    if own == shape:
      return self
    nd = len(shape)
    src = (1,) * (nd - len(own)) + own
    fits = type(shape) is tuple and len(src) == nd
    if fits and all(type(n) is int and n >= 0 and (s == n or s == 1) for s, n in zip(src, shape)):
      # the usual case, shapes that broadcast (binary ops checked them): the nodes without reshape's and expand's
      # argument checks, which were a seventh of building a training step's forward graph
      u = self.uop if src == own else UOp(Ops.RESHAPE, self.uop.dtype, (self.uop,), src)
      if src != shape:
        shape_of(u := UOp(Ops.EXPAND, u.dtype, (u,), shape))  # (known for the op on it: _alu)
      return Tensor._of(u)
    x = self if self.ndim == nd else self.reshape(src)
    return x.expand(shape)

  # arithmetic
  def add(self, y: Tensor | Scalar, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, "add", reverse)
    return a._alu(Ops.OR if a.dtype == dtypes.bool else Ops.ADD, b)

  def sub(self, y: Tensor | Scalar, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, "sub", reverse)
    if a.dtype == dtypes.bool:
      raise TypeError("Tensor.sub: subtracting bool tensors is not supported (use ^ or logical_not)")
    return a._alu(Ops.SUB, b)

  def mul(self, y: Tensor | Scalar, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, "mul", reverse)
    return a._alu(Ops.AND if a.dtype == dtypes.bool else Ops.MUL, b)

  def div(self, y: Tensor | Scalar, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (ints divide as floats); rounding_mode "trunc" rounds toward 0, "floor" toward -inf (torch's;
    ints stay ints)."""
    if rounding_mode == "floor":
      return self.floordiv(y, reverse)
    if rounding_mode == "trunc":
      a, b = self._broadcasted(y, "div", reverse)
      if dtypes.is_float(a.dtype):
        return a._alu(Ops.FDIV, b).trunc()
      if a.dtype == dtypes.bool:
        a, b = a.cast(dtypes.int8), b.cast(dtypes.int8)
      return a._alu(Ops.IDIV, b)
    if rounding_mode is not None:
      raise RuntimeError(f"Tensor.div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = self._broadcasted(y, "div", reverse)
    if not dtypes.is_float(a.dtype):
      a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    return a._alu(Ops.FDIV, b)

  def floordiv(self, y: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """Division rounding toward -inf, like numpy's //."""
    a, b = self._broadcasted(y, "floordiv", reverse)
    if dtypes.is_float(a.dtype):
      return a._float_floordiv(b)
    if a.dtype == dtypes.bool:
      a, b = a.cast(dtypes.int8), b.cast(dtypes.int8)
    q = a._alu(Ops.IDIV, b)
    if dtypes.is_unsigned(a.dtype):
      return q
    # C truncates; step down where the remainder is non-zero and the signs differ
    r = a._alu(Ops.MOD, b)
    fix = (r != 0) & ((r < 0) != (b < 0))
    return fix.where(q - 1, q)

  def mod(self, y: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """Remainder with the divisor's sign, like numpy's %."""
    a, b = self._broadcasted(y, "mod", reverse)
    if dtypes.is_float(a.dtype):
      return a._float_remainder(b)
    if a.dtype == dtypes.bool:
      a, b = a.cast(dtypes.int8), b.cast(dtypes.int8)
    r = a._alu(Ops.MOD, b)
    if dtypes.is_unsigned(a.dtype):
      return r
    fix = (r != 0) & ((r < 0) != (b < 0))
    return fix.where(r + b, r)

  def _signbit(self) -> Tensor:
    """True where a float is negative, -0.0 included."""
    return (self < 0) | ((self == 0) & (self._alu(Ops.RECIP) < 0))

  def fmod(self, y: Tensor | Scalar) -> Tensor:
    """C's fmod: the exact remainder of truncating division, with the dividend's sign (ints: C's %)."""
    a, b = self._broadcasted(y, "fmod")
    if not dtypes.is_float(a.dtype):
      return a._alu(Ops.MOD, b) if a.dtype != dtypes.bool else a._alu(Ops.MOD, b.cast(dtypes.int8)).cast(dtypes.bool)
    return a._fmod(b)

  def _two_sum(self, y: Tensor) -> tuple[Tensor, Tensor]:
    """s, e with s = fl(self + y) and s + e == self + y exactly (Knuth's TwoSum: adds only)."""
    s = self + y
    bb = s - self
    return s, (self - (s - bb)) + (y - bb)

  def _fmod(self, b: Tensor, narrow: bool = False) -> Tensor:
    """C's fmod of two float tensors of one dtype, exact (float64: while |self / b| < 2**116 and |b| is inside
    float32's range; beyond, one corrected truncating step). narrow: float64 holding float16/32 values."""
    if self.dtype != dtypes.float64:
      return self.cast(dtypes.float64)._fmod(b.cast(dtypes.float64), narrow=True).cast(self.dtype)
    a = self
    r, d = a.abs(), b.abs()
    # 10 steps of 28 bits cover the largest float32 ratio, 2**128 / 2**-149
    r = Tensor._fmod_steps(r, d, 28, 10, None) if narrow else Tensor._fmod_f64(r, d)
    r = a._signbit().where(-r, r)
    # C's special cases: an infinite divisor leaves a finite dividend; inf % y and x % 0 are nan
    r = ((d == math.inf) & (a.abs() != math.inf)).where(a, r)
    return ((d == 0) | (a.abs() == math.inf)).where(math.nan, r)

  @staticmethod
  def _fmod_steps(r: Tensor, d: Tensor, bits: int, steps: int, pieces: list[Tensor] | None) -> Tensor:
    """r mod d for float64 r, d >= 0 as r mod (d * 2**(bits*k)) for k = steps..0, each quotient q < 2**bits.

    Every remainder is a multiple of the ulp of its step (so it is exact), q * step is exact when d has a
    float32 significand (bits=28); else d is given as float32-sized pieces (bits=29) whose products are exact
    and whose differences TwoSum keeps exactly."""
    for k in range(steps, -1, -1):
      scale = float(2 ** (bits * k))
      step = d * scale
      q = (r / step).trunc()
      if pieces is None:
        r = r - q * step
      else:
        errs = []
        for piece in pieces:
          r, err = r._two_sum(-(q * (piece * scale)))
          errs.append(err)
        r = r + (errs[0] + errs[1] + errs[2])  # the errors are few-bit multiples of the step's ulp: exact
      r = (r < 0).where(r + step, r)  # the quotient rounded up to the next integer: one step too many
    return r

  @staticmethod
  def _fmod_f64(r: Tensor, d: Tensor) -> Tensor:
    """|a| mod |b| for float64 tensors (see _fmod)."""
    # scale both by powers of two (exact) until d is where its float32 pieces are exact: [2**-70, 2**127]
    rs, ds, moves = r, d, []
    for f in (2.0 ** 180,) * 6 + (2.0 ** -180,) * 5:
      move = (ds < 2.0 ** -70) if f > 1 else (ds > 2.0 ** 127)
      rs, ds = move.where(rs * f, rs), move.where(ds * f, ds)
      moves.append((move, f))
    d1 = ds.cast(dtypes.float32).cast(dtypes.float64)
    d2 = (ds - d1).cast(dtypes.float32).cast(dtypes.float64)
    exact = Tensor._fmod_steps(rs, ds, 29, 3, [d1, d2, (ds - d1) - d2])
    for move, f in reversed(moves):  # back one level at a time: the whole factor may be below float64's range
      exact = move.where(exact * (1 / f), exact)
    rough = Tensor._fmod_steps(r, d, 0, 0, None)
    rough = (rough >= d).where(rough - d, rough)  # a rounded product can leave one divisor too many
    # r < d is its own remainder (and scaling it down could lose it); quotients of 2**116 or more: rough
    return (r < d).where(r, (r < d * 2.0 ** 116).where(exact, rough))

  def _float_remainder(self, b: Tensor) -> Tensor:
    """numpy's float %: fmod, moved by b where it is non-zero and its sign differs from b's; else 0 with b's sign."""
    r = self._fmod(b)
    differ = r._signbit() != b._signbit()
    moved = ((r != 0) & differ).where(r + b, r)
    return (r == 0).where(b._signbit().where(-0.0, 0.0).cast(r.dtype), moved)

  def _float_floordiv(self, b: Tensor) -> Tensor:
    """numpy's float //: (a - fmod(a, b)) / b, one less where the remainder's sign differs from b's, rounded."""
    if self.dtype == dtypes.float16:  # numpy divides halves in float32
      return self.float()._float_floordiv(b.float()).half()
    a = self
    r = a._fmod(b)
    div = (a - r)._alu(Ops.FDIV, b)
    div = ((r != 0) & (r._signbit() != b._signbit())).where(div - 1, div)
    fl = div.floor()
    fl = (div - fl > 0.5).where(fl + 1, fl)
    # a zero quotient has the sign of a / b; b == 0 gives a / b (inf or nan), as numpy
    zero = (a._signbit() != b._signbit()).where(-0.0, 0.0).cast(a.dtype)
    return (b == 0).where(a._alu(Ops.FDIV, b), (div == 0).where(zero, fl))

  def pow(self, y: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """self ** y with numpy's (IEEE pow's) special cases; int ** int stays int (a negative int exponent raises)."""
    v = _py(y) if _is_scalar(y) else None
    if not reverse and isinstance(v, int) and not isinstance(v, bool):
      if v < 0 and not dtypes.is_float(self.dtype):
        raise RuntimeError(f"Tensor.pow: Integers to negative integer powers are not allowed ({self.dtype} tensor of "
                           f"shape {self.shape} ** {v})")
    whole = isinstance(v, int) or (isinstance(v, float) and v.is_integer())
    if not reverse and whole and (abs(v) <= 64 or not dtypes.is_float(self.dtype)):
      base = self.cast(self._scalar_dtype(v))
      if base.dtype in (dtypes.float16, dtypes.float32):  # each product would round: in float64 only the last does
        return base.cast(dtypes.float64)._pow_by_squaring(int(v)).cast(base.dtype)
      return base._pow_by_squaring(int(v))
    a, b = self._broadcasted(y, "pow", reverse)
    if not dtypes.is_float(a.dtype):
      return a._int_pow(b)
    # one POW node, whose derivative is torch's ("d/dx POW" in gradient.py; _float_pow's formula's was 0 where
    # torch's is inf or nan); the scheduler lowers it to that formula (_lower_pow)
    return a._alu(Ops.POW, b.cast(a.dtype))

  def _pow_by_squaring(self, n: int) -> Tensor:
    """self ** n for a Python int n: exact for ints, accurate for floats (a negative n only for floats)."""
    # a negative n squares 1 / self: its derivative at 0 and inf is -inf and 0, where 1 / self**|n|'s was 0 * inf
    ret, p, k = None, self.reciprocal() if n < 0 else self, abs(n)
    while k:
      if k & 1:
        ret = p if ret is None else ret * p
      k >>= 1
      if k:
        p = p * p
    if ret is None:  # x**0 is 1 even for inf and nan; self stays in the graph, so its gradient is 0, not missing
      return (self == self).where(1, 1).cast(self.dtype)
    return ret

  def _int_pow(self, e: Tensor) -> Tensor:
    """Elementwise int ** int by squaring over e's bits; a negative e gives the truncated 1/self**|e| (as torch)."""
    if self.dtype == dtypes.bool:
      return self.cast(dtypes.default_int)._int_pow(e.cast(dtypes.default_int))
    ret, p, k = self.ones_like(), self, e.abs()
    for i in range(8 * self.dtype.itemsize - (0 if dtypes.is_unsigned(self.dtype) else 1)):
      ret = ((k & 1) != 0).where(ret * p, ret)
      k = k._alu(Ops.IDIV, Tensor.full(k.shape, 2, k.dtype))  # k >= 0, so C's truncation is a shift
      if i < 8 * self.dtype.itemsize - 2:
        p = p * p
    if dtypes.is_unsigned(self.dtype):
      return ret
    odd = (e & 1) != 0
    neg_e = (self == 1).where(1, (self == -1).where(odd.where(-1, 1), 0)).cast(self.dtype)
    return (e < 0).where(neg_e, ret)

  def _float_pow(self, b: Tensor) -> Tensor:
    """Elementwise float ** float as exp2(log2|a| * b) with pow's signs and special cases: what a POW node computes
    (the scheduler's lowering, `_lower_pow`; its derivative is gradient.py's "d/dx POW", not this formula's)."""
    if self.dtype != dtypes.float64:  # log2's rounding error grows with the result's exponent: float64 holds it
      return self.cast(dtypes.float64)._float_pow(b.cast(dtypes.float64)).cast(self.dtype)
    a = self
    # log2|a| * b is nan for 0 * inf (x**0 at 0, inf, nan; 1**inf) and for nan, and at a base of 0 or inf the power
    # is 0 or inf: there the formula gets safe inputs (its result is not used) and the special cases' values
    bad = (a.abs().log2() * b) != (a.abs().log2() * b)
    edge = (a == 0) | (a.abs() == math.inf)  # the power is 0 or inf
    safe = bad | edge
    mag = (safe.where(1.0, a).abs().log2() * safe.where(0.0, b)).exp2()
    mag = edge.where((a == 0).where((b > 0).where(0.0, math.inf), (b > 0).where(math.inf, 0.0)), mag)
    neg_base = a._signbit()  # -0.0 is a negative base too
    b_int = b.trunc() == b  # false for nan, true for +-inf
    halved = b * 0.5
    b_odd = b_int & (halved.trunc() != halved)
    # a negative base has a real power for integer exponents (odd ones negate it), and at -0 and -inf for any; else
    # nan: mag times nan, times 0 where it is not used
    not_real = neg_base & (b_int | (a == 0) | (a.abs() == math.inf)).logical_not()
    ret = not_real.where(mag * not_real.where(math.nan, 0.0), (neg_base & b_odd).where(-mag, mag))
    # x**0, 1**y and (-1)**+-inf are 1 even for inf and nan
    one = (b == 0) | (a == 1) | ((a == -1) & (b.abs() == math.inf))
    return bad.where(one.where(1.0, math.nan), ret)

  @staticmethod
  def _lower_pow(x: UOp) -> UOp:
    """A float POW node of the tensor graph as `_float_pow`'s formula (the scheduler's "earliest rewrites"): the
    kernels compute the values they computed before POW was one node. Its nodes' call site is the POW's (the `**`'s
    line, as when the front end built the formula), not the frame realizing it that note_callsite would find."""
    with recorder.untraced():
      out = Tensor._of(x.src[0])._float_pow(Tensor._of(x.src[1])).uop
    if (site := recorder.callsite_of(x)) is not None:
      for u in toposort(out, gate=lambda y: y not in x.src):  # (not out: the scheduler finds the POW it stands for)
        if u is not out:
          u.__dict__.setdefault(recorder.CALLSITE_KEY, site)  # (the first maker keeps its own, as note_callsite)
    return out

  def maximum(self, y: Tensor | Scalar) -> Tensor:
    a, b = self._broadcasted(y, "maximum")
    if a.dtype == dtypes.bool:
      return a | b
    return a._alu(Ops.MAX, b)

  def minimum(self, y: Tensor | Scalar) -> Tensor:
    a, b = self._broadcasted(y, "minimum")
    if a.dtype == dtypes.bool:
      return a & b
    return a._flipped()._alu(Ops.MAX, b._flipped())._flipped()  # MAX propagates NaN, like numpy's minimum

  def clip(self, min_: Tensor | Scalar | None = None, max_: Tensor | Scalar | None = None) -> Tensor:
    if min_ is None and max_ is None:
      raise RuntimeError(f"Tensor.clip: give min_ or max_ (or both) to clip the tensor of shape {self.shape}")
    ret = self
    if min_ is not None:
      ret = ret.maximum(min_)
    if max_ is not None:
      ret = ret.minimum(max_)
    if not dtypes.is_float(ret.dtype) or self.dtype == dtypes.bool:
      return ret
    # the gradient as torch's clamp: 1 to self within the bounds, the bounds included (maximum's tie would share it)
    within = [c for c in ((self >= min_) if min_ is not None else None, (self <= max_) if max_ is not None else None)
              if c is not None]
    inside = within[0] if len(within) == 1 else within[0] & within[1]
    return inside.where(self, ret)

  def where(self, x: Tensor | Scalar, y: Tensor | Scalar) -> Tensor:
    """x where self is true, else y (self is the condition)."""
    for v in (x, y):
      if not isinstance(v, Tensor) and not _is_scalar(v):
        raise TypeError(f"Tensor.where: unsupported operand {type(v).__name__}")
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
      dt = least_upper_dtype(*(_fitting_int(dtypes.from_py(_py(v)), _py(v), _py(v), "Tensor.where") for v in (x, y)))
      x_t, y_t = Tensor._scalar(_py(x), dt, "where"), Tensor._scalar(_py(y), dt, "where")
    else:
      x_t = x if isinstance(x, Tensor) else Tensor._scalar(_py(x), y._scalar_dtype(_py(x)), "where")
      y_t = y if isinstance(y, Tensor) else Tensor._scalar(_py(y), x_t._scalar_dtype(_py(y)), "where")
    dt = least_upper_dtype(x_t.dtype, y_t.dtype)
    shape = broadcast_shape(self.shape, x_t.shape, y_t.shape, op="Tensor.where")
    c = self.cast(dtypes.bool)._broadcast_to(shape)
    return Tensor(c.uop.alu(Ops.WHERE, x_t.cast(dt)._broadcast_to(shape).uop, y_t.cast(dt)._broadcast_to(shape).uop))

  # comparisons (bool results)
  def _cmp(self, op: Ops, y: Tensor | Scalar, name: str, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, name, reverse)
    return a._alu(op, b)

  def __lt__(self, y): return self._cmp(Ops.CMPLT, y, "lt")
  def __gt__(self, y): return self._cmp(Ops.CMPLT, y, "gt", reverse=True)
  def __le__(self, y): return self._cmp(Ops.CMPLT, y, "le") | self._cmp(Ops.CMPEQ, y, "le")
  def __ge__(self, y): return self._cmp(Ops.CMPLT, y, "ge", reverse=True) | self._cmp(Ops.CMPEQ, y, "ge")
  def __eq__(self, y): return self._cmp(Ops.CMPEQ, y, "eq")  # type: ignore[override]
  def __ne__(self, y): return self._cmp(Ops.CMPNE, y, "ne")  # type: ignore[override]

  # bitwise / logical
  def _bitop(self, op: Ops, y: Tensor | Scalar, name: str, reverse: bool = False) -> Tensor:
    if dtypes.is_int(self.dtype) and isinstance(y, (int, np.integer)) and not isinstance(y, bool):
      # a Python int takes the int tensor's dtype by wrapping, as tinygrad (int32 | 0xFFFFFFFF is -1): exact for
      # and/or/xor, whose result's bits in the dtype depend only on the operands' bits in it
      y = truncate(self.dtype, int(y))
    a, b = self._broadcasted(y, name, reverse)
    if dtypes.is_float(a.dtype):
      raise TypeError(f"Tensor.{name}: needs int or bool tensors, got {a.dtype}")
    return a._alu(op, b)

  def __and__(self, y): return self._bitop(Ops.AND, y, "and")
  def __rand__(self, y): return self._bitop(Ops.AND, y, "and", True)
  def __or__(self, y): return self._bitop(Ops.OR, y, "or")
  def __ror__(self, y): return self._bitop(Ops.OR, y, "or", True)
  def __xor__(self, y): return self._bitop(Ops.XOR, y, "xor")
  def __rxor__(self, y): return self._bitop(Ops.XOR, y, "xor", True)

  def logical_not(self) -> Tensor:
    return self.cast(dtypes.bool)._alu(Ops.CMPNE, Tensor(UOp.const(dtypes.bool, True))._broadcast_to(self.shape))

  def __invert__(self) -> Tensor:
    if self.dtype == dtypes.bool:
      return self.logical_not()
    if dtypes.is_float(self.dtype):
      raise TypeError(f"Tensor.invert: needs int or bool tensors, got {self.dtype}")
    return self ^ (-1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype))

  # python operators
  def __add__(self, y): return self.add(y)
  def __radd__(self, y): return self.add(y, True)
  def __sub__(self, y): return self.sub(y)
  def __rsub__(self, y): return self.sub(y, True)
  def __mul__(self, y): return self.mul(y)
  def __rmul__(self, y): return self.mul(y, True)
  def __truediv__(self, y): return self.div(y)
  def __rtruediv__(self, y): return self.div(y, True)
  def __floordiv__(self, y): return self.floordiv(y)
  def __rfloordiv__(self, y): return self.floordiv(y, True)
  def __mod__(self, y): return self.mod(y)
  def __rmod__(self, y): return self.mod(y, True)
  def __pow__(self, y): return self.pow(y)
  def __rpow__(self, y): return self.pow(y, True)
  def __matmul__(self, y): return self.matmul(y)
  def __rmatmul__(self, y): return Tensor(y).matmul(self) if not isinstance(y, Tensor) else y.matmul(self)
  def __neg__(self): return self.neg()
  def __pos__(self): return self
  def __abs__(self): return self.abs()

  # unary math
  def neg(self) -> Tensor:
    return self.logical_not() if self.dtype == dtypes.bool else self._alu(Ops.NEG)

  def exp2(self) -> Tensor:
    return self._float()._alu(Ops.EXP2)

  def log2(self) -> Tensor:
    return self._float()._alu(Ops.LOG2)

  def _via_float32(self, fn) -> Tensor:
    """fn(x) in float32 for a half x: constants and intermediates rounded to half cost several ulps."""
    x = self._float()
    return fn(x.float()).half() if x.dtype == dtypes.float16 else fn(x)

  def exp(self) -> Tensor:
    return self._via_float32(lambda x: (x * (1 / _LN2)).exp2())

  def log(self) -> Tensor:
    return self._via_float32(lambda x: x.log2() * _LN2)

  def sqrt(self) -> Tensor:
    return self._float()._alu(Ops.SQRT)

  def rsqrt(self) -> Tensor:
    return self.sqrt().reciprocal()

  def reciprocal(self) -> Tensor:
    return self._float()._alu(Ops.RECIP)

  def sin(self) -> Tensor:
    from compiler.tensor_trig import sin_cos
    return sin_cos(self._float(), cos=False)

  def cos(self) -> Tensor:
    from compiler.tensor_trig import sin_cos
    return sin_cos(self._float(), cos=True)

  def tan(self) -> Tensor:
    return self._via_float32(lambda x: x.sin() / x.cos())

  def square(self) -> Tensor:
    return self * self

  def trunc(self) -> Tensor:
    return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self

  def floor(self) -> Tensor:
    if not dtypes.is_float(self.dtype):
      return self
    t = self.trunc()
    return (self < t).where(t - 1, t)

  def ceil(self) -> Tensor:
    if not dtypes.is_float(self.dtype):
      return self
    t = self.trunc()
    return (self > t).where(t + 1, t)

  def abs(self) -> Tensor:
    if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype):
      return self
    ret = self._alu(Ops.MAX, self.neg())
    # MAX of 0.0 and -0.0 may give either: |-0.0| and |0.0| are 0.0
    return (self == 0).where(0.0, ret) if dtypes.is_float(self.dtype) else ret

  def sign(self) -> Tensor:
    if self.dtype == dtypes.bool:
      return self
    if dtypes.is_unsigned(self.dtype):
      return (self > 0).cast(self.dtype)
    ret = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
    return (self != self).where(self, ret) if dtypes.is_float(self.dtype) else ret  # sign(nan) is nan

  def relu(self) -> Tensor:
    # not maximum(0), whose tie at 0 shares the gradient: relu'(0) is 0 (torch, tinygrad); nan stays nan
    return self.maximum(0) if self.dtype == dtypes.bool else (self <= 0).where(0, self)

  def sigmoid(self) -> Tensor:
    # from e = exp(-|x|) <= 1: 1 / (1 + exp(-x)) overflowed below -88 (float32), and its gradient was inf * 0 = nan
    def fn(x: Tensor) -> Tensor:
      pos = x >= 0
      e = (pos.where(-x, x) * (1 / _LN2)).exp2()
      return pos.where(1 / (1 + e), e / (1 + e))
    return self._via_float32(fn)

  def tanh(self) -> Tensor:
    # tanh|x| = -m / (2 + m) with m = expm1(-2|x|) in (-1, 0]: 2 * sigmoid(2x) - 1 cancelled for small x (tanh(1e-30)
    # gave 0), and nothing overflows (expm1(2|x|) did past 44, a nan gradient). -|x| is a where, not abs, so that
    # its derivative at 0 is 1 and tanh'(0) = 1
    def fn(x: Tensor) -> Tensor:
      pos = x > 0
      m = _expm1(2.0 * pos.where(-x, x))
      mag = -m / (2.0 + m)
      return pos.where(mag, -mag)
    return self._via_float32(fn)

  def gelu(self, approximate: str = "tanh") -> Tensor:
    """The tanh approximation by default (tinygrad's gelu); approximate="none" is torch's exact x * Phi(x)."""
    x = self._float()
    if approximate == "none":
      return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())
    if approximate != "tanh":
      raise RuntimeError(f"Tensor.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())

  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
    return (self > 0).where(self, self * neg_slope)  # the slope at 0 is neg_slope, as torch's

  # ---- movement
  def _mop(self, op: Ops, arg: Any) -> Tensor:
    return Tensor._of(UOp(op, self.uop.dtype, (self.uop,), arg))

  def _axis(self, axis: int, name: str, ndim: int | None = None) -> int:
    nd = self.ndim if ndim is None else ndim
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
      raise TypeError(f"Tensor.{name}: axis must be an int, got {axis!r}")
    if not -max(nd, 1) <= axis < max(nd, 1) or nd == 0:
      raise AxisError(f"Tensor.{name}: axis {axis} is out of range for shape {self.shape}")
    return int(axis) % nd

  def reshape(self, *shape: Any) -> Tensor:
    """The same elements in shape `shape`: one -1 is inferred, a None keeps that dim's size (tinygrad's)."""
    try:
      shape = _shape_arg(shape, "Tensor.reshape")
    except TypeError:
      shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
      if not any(s is None for s in shape):
        raise
      if any(s is None for s in shape[self.ndim:]):
        raise AxisError(f"Tensor.reshape: a None keeps its dim, but {shape} has one past the dims of {self.shape}") \
          from None
      shape = _shape_arg(tuple(self.shape[i] if s is None else s for i, s in enumerate(shape)), "Tensor.reshape")
    own = self.shape
    if shape == own:
      return self
    if min(shape, default=0) < 0:  # a -1 to infer, or an invalid size
      shape = self._infer_dim(shape)
    if math.prod(shape) != math.prod(own):
      raise ValueError(f"Tensor.reshape: can't reshape {own} ({math.prod(own)} elements) to {shape}")
    return self if shape == own else self._mop(Ops.RESHAPE, shape)

  def _infer_dim(self, shape: Shape) -> Shape:
    """A reshape's shape with its -1 replaced by the size that keeps the element count."""
    if sum(1 for s in shape if s == -1) > 1:
      raise ArgumentError(f"Tensor.reshape: only one dimension of {shape} can be -1 (reshaping {self.shape})")
    if any(s < -1 for s in shape):
      raise ValueError(f"Tensor.reshape: invalid shape {shape} for {self.shape}")
    rest = math.prod(s for s in shape if s != -1)
    if rest == 0 or self.numel() % rest:
      raise ValueError(f"Tensor.reshape: can't reshape {self.shape} to {shape}")
    return tuple(self.numel() // rest if s == -1 else s for s in shape)

  def view(self, *shape: Any) -> Tensor:
    return self.reshape(*shape)

  def permute(self, *order: Any) -> Tensor:
    order = _shape_arg(order, "Tensor.permute")
    axes = list(range(self.ndim))
    if len(order) != len(axes):
      raise ArgumentError(f"Tensor.permute: order {order} doesn't match shape {self.shape}")
    if sorted(order) != axes:  # (the usual case, a permutation of 0..n-1, has no negative axes to normalize)
      order = tuple(self._axis(o, "permute") for o in order)
      if sorted(order) != axes:
        raise ArgumentError(f"Tensor.permute: {order} is not a permutation of the axes of {self.shape}")
    return self if list(order) == axes else self._mop(Ops.PERMUTE, order)

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    if self.ndim == 0:  # dims 0 and -1 of a 0-d tensor are the tensor itself (torch)
      for d in (dim0, dim1):
        self._axis(d, "transpose", 1)
      return self
    order = list(range(self.ndim))
    a, b = self._axis(dim0, "transpose"), self._axis(dim1, "transpose")
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Tensor:
    """All axes reversed (numpy's .T; the usual transpose for 2-d)."""
    return self.permute(tuple(reversed(range(self.ndim))))

  def expand(self, *shape: Any) -> Tensor:
    shape = _shape_arg(shape, "Tensor.expand")
    own = self.shape
    if len(shape) < len(own):
      raise ValueError(f"Tensor.expand: can't expand {own} to fewer dims {shape}")
    src = (1,) * (len(shape) - len(own)) + own
    new = tuple(s if n == -1 else n for s, n in zip(src, shape)) if -1 in shape else shape
    for s, n in zip(src, new):
      if (s != n and s != 1) or n < 0:
        raise ValueError(f"Tensor.expand: can't expand {own} to {shape}")
    x = self if src == own else self._mop(Ops.RESHAPE, src)  # (leading 1s: a reshape with nothing to check)
    return x if new == src else x._mop(Ops.EXPAND, new)

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0:
      return self.reshape(1)
    s, e = self._axis(start_dim, "flatten"), self._axis(end_dim, "flatten")
    if s > e:
      raise ValueError(f"Tensor.flatten: start_dim {start_dim} is after end_dim {end_dim} for {self.shape}")
    return self.reshape(self.shape[:s] + (math.prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def unflatten(self, dim: int, sizes: tuple[int, ...]) -> Tensor:
    """Dim `dim` as the dims `sizes` (one of them may be -1)."""
    d = self._axis(dim, "unflatten")
    sizes = tuple(sizes)
    known = math.prod(s for s in sizes if s != -1)
    n_free = sum(1 for s in sizes if s == -1)
    if n_free > 1 or (n_free and (known == 0 or self.shape[d] % known)) or (not n_free and known != self.shape[d]):
      raise ValueError(f"Tensor.unflatten: sizes {sizes} don't multiply to dim {dim} of shape {self.shape}")
    sizes = tuple(self.shape[d] // known if s == -1 else s for s in sizes)
    return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])

  def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
    """Drop size-1 dims: all of them, or those of dim (an int or a sequence, as torch; other sizes are kept)."""
    if dim is None:
      return self.reshape(tuple(s for s in self.shape if s != 1))
    if isinstance(dim, (tuple, list)):
      axes = self._axes(tuple(dim), "squeeze")
      return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes or s != 1))
    if self.ndim == 0:
      self._axis(dim, "squeeze", 1)  # a 0-d tensor has dims 0 and -1 only (as torch and tinygrad)
      return self
    d = self._axis(dim, "squeeze")
    return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

  def unsqueeze(self, dim: int) -> Tensor:
    d = self._axis(dim, "unsqueeze", self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  _PAD_MODES = ("constant", "reflect", "replicate", "circular")

  def pad(self, padding: Sequence, mode: str = "constant", value: Scalar = 0.0) -> Tensor:
    """Pad by ((before, after) or None per dim), or by flat ints (last dim first, like torch). Modes: "constant"
    (value), "reflect" (mirror without the edge), "replicate" (the edge repeated), "circular" (wrap around). A
    negative pad removes elements. (A number as the second argument is the value, as in the old signature.)"""
    if _is_scalar(mode):
      mode, value = "constant", mode
    if mode not in Tensor._PAD_MODES:
      raise NotImplementedError(f"Tensor.pad: mode {mode!r} is not supported (one of {', '.join(Tensor._PAD_MODES)})")
    if mode != "constant" and _py(value) != 0:
      raise ValueError(f"Tensor.pad: mode {mode!r} takes no value (got {value!r})")
    pairs = self._pad_pairs(padding)
    if mode == "constant":
      return self._pad_constant(pairs, value)
    if mode == "circular":
      return self._pad_circular(pairs)
    x = self
    for d, (b, a) in enumerate(pairs):
      b, a = max(b, 0), max(a, 0)
      s = x.shape[d]
      if mode == "reflect" and (b or a) and (b >= s or a >= s):
        raise ValueError(f"Tensor.pad: reflect padding ({b}, {a}) must be less than size {s} of dim {d} "
                         f"(shape {self.shape})")
      if mode == "replicate" and s == 0 and (b or a):
        raise ValueError(f"Tensor.pad: replicate padding of the empty dim {d} (shape {self.shape})")
      parts = []
      if b:
        parts.append(x._slice(d, 1, b + 1).flip(d) if mode == "reflect" else x._slice(d, 0, 1)._repeat_dim(d, b))
      parts.append(x)
      if a:
        edge = x._slice(d, s - 1, s)._repeat_dim(d, a)
        parts.append(x._slice(d, s - a - 1, s - 1).flip(d) if mode == "reflect" else edge)
      x = Tensor.cat(*parts, dim=d) if len(parts) > 1 else x
    return x._pad_constant([(min(b, 0), min(a, 0)) for b, a in pairs], 0)

  def _slice(self, d: int, start: int, end: int) -> Tensor:
    return self.shrink(tuple((start, end) if i == d else None for i in range(self.ndim)))

  def _repeat_dim(self, d: int, n: int) -> Tensor:
    """A size-1 dim d expanded to n."""
    return self.expand(tuple(n if i == d else s for i, s in enumerate(self.shape)))

  def _pad_circular(self, pairs: list[tuple[int, int]]) -> Tensor:
    # a negative pad removes elements first, and the positive ones wrap around what is left (torch's)
    core = self._pad_constant([(min(b, 0), min(a, 0)) for b, a in pairs], 0)
    pairs = [(max(b, 0), max(a, 0)) for b, a in pairs]
    if any(b > s or a > s for (b, a), s in zip(pairs, core.shape)):
      raise ValueError(f"Tensor.pad: circular padding {pairs} wraps around shape {core.shape} more than once")
    # three copies side by side (where a dim is padded), then the window that starts b before the middle one
    x = core.repeat(tuple(3 if b or a else 1 for b, a in pairs))
    return x.shrink(tuple((s - b, 2 * s + a) if b or a else None for (b, a), s in zip(pairs, core.shape)))

  def _pad_pairs(self, padding: Sequence) -> list[tuple[int, int]]:
    """(before, after) per dim from tinygrad's/torch's padding forms."""
    if not isinstance(padding, (list, tuple)):
      raise TypeError(f"Tensor.pad: padding must be a sequence, got {type(padding).__name__}")
    if all(isinstance(p, (int, np.integer)) for p in padding):
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise ValueError(f"Tensor.pad: flat padding {tuple(padding)} doesn't fit shape {self.shape}")
      pairs = [(0, 0)] * self.ndim
      for i in range(len(padding) // 2):
        pairs[self.ndim - 1 - i] = (int(padding[2 * i]), int(padding[2 * i + 1]))
      return pairs
    if len(padding) != self.ndim:
      raise ValueError(f"Tensor.pad: {len(padding)} pads for shape {self.shape}")
    if not all(p is None or (isinstance(p, (list, tuple)) and len(p) == 2) for p in padding):
      raise ValueError(f"Tensor.pad: padding {padding!r} must be (before, after) or None per dim of {self.shape}")
    return [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]

  def _pad_constant(self, pairs: Sequence[tuple[int, int]], value: Scalar) -> Tensor:
    # negative padding is a shrink
    shrink = tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, self.shape))
    if any(lo > hi for lo, hi in shrink):
      raise ValueError(f"Tensor.pad: negative padding {list(pairs)} removes more than shape {self.shape} has")
    x = self.shrink(shrink) if any(b < 0 or a < 0 for b, a in pairs) else self
    pos = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
    if all(b == 0 and a == 0 for b, a in pos):
      return x
    ret = x._mop(Ops.PAD, pos)
    if _py(value) == 0 and not (isinstance(value, float) and math.copysign(1, value) < 0):
      return ret
    mask = Tensor.full(x.shape, True, dtypes.bool)._mop(Ops.PAD, pos)
    fill = Tensor(UOp.const(self.dtype, _in_range(value, self.dtype, "Tensor.pad")))  # the value takes the dtype
    return mask.where(ret, fill)

  def shrink(self, arg: Sequence) -> Tensor:
    """Keep [start, end) per dim (None keeps the dim)."""
    own = self.shape
    if len(arg) != len(own):
      raise ValueError(f"Tensor.shrink: {len(arg)} ranges for shape {own}")
    pairs = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, own))
    whole = True
    for (b, e), s in zip(pairs, own):  # (one pass: in range, and whether it keeps everything)
      if not 0 <= b <= e <= s:
        raise ValueError(f"Tensor.shrink: {pairs} out of range for shape {own}")
      whole = whole and b == 0 and e == s
    return self if whole else self._mop(Ops.SHRINK, pairs)

  def flip(self, axis: int | Sequence[int] = None) -> Tensor:
    axes = range(self.ndim) if axis is None else ((axis,) if isinstance(axis, (int, np.integer)) else axis)
    if self.ndim == 0:
      for a in axes:
        self._axis(a, "flip", 1)
      return self
    flips = [False] * self.ndim
    for a in axes:
      d = self._axis(a, "flip")
      if flips[d]:
        raise RuntimeError(f"Tensor.flip: axis {a} appears more than once in {tuple(axes)} (shape {self.shape})")
      flips[d] = True
    return self._mop(Ops.FLIP, tuple(flips)) if any(flips) else self

  def repeat(self, *repeats: Any) -> Tensor:
    repeats = _shape_arg(repeats, "Tensor.repeat")
    if len(repeats) < self.ndim or any(r < 0 for r in repeats):
      raise ValueError(f"Tensor.repeat: repeats {repeats} don't fit shape {self.shape}")
    base = (1,) * (len(repeats) - self.ndim) + self.shape
    x = self.reshape(base)
    inter = tuple(v for s in base for v in (1, s))
    exp = tuple(v for r, s in zip(repeats, base) for v in (r, s))
    return x.reshape(inter).expand(exp).reshape(tuple(r * s for r, s in zip(repeats, base)))

  def __getitem__(self, idx: Any) -> Tensor:
    from compiler.tensor_index import getitem
    return getitem(self, idx)

  @staticmethod
  def _tensor_args(first: Any, rest: tuple, name: str) -> tuple[Tensor, ...]:
    """Both call forms, as tinygrad's argfix: t.f(a, b), Tensor.f(t, a, b) and Tensor.f([t, a, b])."""
    if isinstance(first, (list, tuple)):
      if rest:
        raise ValueError(f"Tensor.{name}: a sequence of tensors must be the only argument, got {first!r} and "
                         f"{len(rest)} more")
      tensors = tuple(first)
    else:
      tensors = (first, *rest)
    if not tensors:
      raise ValueError(f"Tensor.{name}: needs at least one tensor")
    if not all(isinstance(t, Tensor) for t in tensors):
      raise TypeError(f"Tensor.{name}: all arguments must be Tensors, got {[type(t).__name__ for t in tensors]}")
    return tensors

  def cat(self: Tensor | Sequence[Tensor], *args: Tensor, dim: int = 0) -> Tensor:
    """Concatenate along dim: `a.cat(b, c, dim=1)` or `Tensor.cat(a, b, c, dim=1)`."""
    tensors = Tensor._tensor_args(self, args, "cat")
    first = tensors[0]
    if first.ndim == 0:
      raise IndexError("Tensor.cat: zero-dimensional tensors can't be concatenated")
    d = first._axis(dim, "cat")
    for t in tensors[1:]:
      if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d):
        raise ValueError(f"Tensor.cat: shapes {[x.shape for x in tensors]} differ outside dim {dim}")
    dt = least_upper_dtype(*(t.dtype for t in tensors))
    total = sum(t.shape[d] for t in tensors)
    ret, off = None, 0
    for t in tensors:
      pads = [None] * t.ndim
      pads[d] = (off, total - off - t.shape[d])
      p = t.cast(dt).pad(pads)
      # a WHERE on the tensor's own region, not an ADD of zero pads: 0.0 + -0.0 would lose the sign of a zero
      ret = p if ret is None else Tensor.full(t.shape, True, dtypes.bool).pad(pads).where(p, ret)
      off += t.shape[d]
    return ret

  def stack(self: Tensor | Sequence[Tensor], *args: Tensor, dim: int = 0) -> Tensor:
    """Join along a new dim: `a.stack(b, dim=1)` or `Tensor.stack(a, b, dim=1)`."""
    tensors = Tensor._tensor_args(self, args, "stack")
    if any(t.shape != tensors[0].shape for t in tensors):
      raise ValueError(f"Tensor.stack: shapes {[t.shape for t in tensors]} differ")
    d = tensors[0]._axis(dim, "stack", tensors[0].ndim + 1)
    return Tensor.cat(*(t.unsqueeze(d) for t in tensors), dim=d)

  # ---- reductions
  def _axes(self, axis: int | Sequence[int] | None, name: str) -> tuple[int, ...]:
    if type(axis) is int and -(nd := len(self.shape)) <= axis < nd:  # the usual case: one axis in range
      return (axis % nd,)
    if axis is None:
      return tuple(range(self.ndim))
    if isinstance(axis, (int, np.integer)):
      axes: tuple = (axis,)
    elif isinstance(axis, (tuple, list)):
      axes = tuple(axis)
    else:
      raise TypeError(f"Tensor.{name}: axis must be an int or a sequence of ints, got {axis!r}")
    if self.ndim == 0:  # a 0-d tensor reduces over dim 0 (or -1) to itself, as in torch and tinygrad
      for a in axes:
        self._axis(a, name, 1)
      return ()
    out = tuple(sorted({self._axis(a, name) for a in axes}))
    if len(out) != len(axes):
      raise ValueError(f"Tensor.{name}: repeated axis in {axis}")
    return out

  def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool, name: str) -> Tensor:
    axes = self._axes(axis, name)
    if not axes:
      return self
    ret = Tensor._of(UOp(Ops.REDUCE_AXIS, self.uop.dtype, (self.uop,), (op, axes)))
    shape_of(ret.uop)  # (known now from its source's; see _alu)
    # (dropping the reduced dims: a reshape to fewer dims of the same elements, with nothing to check)
    return ret if keepdim else ret._mop(Ops.RESHAPE, tuple(s for i, s in enumerate(self.shape) if i not in axes))

  @staticmethod
  def _acc_dtype(dt: DType) -> DType:
    """The dtype a sum or product of dt accumulates in."""
    acc = _ACC_DTYPES.get(dt)
    if acc is None:
      acc = Tensor._acc_rule(dt)
      if dt != dtypes.bool:  # (bool's is dtypes.default_int, which a program may change)
        _ACC_DTYPES[dt] = acc
    return acc

  @staticmethod
  def _acc_rule(dt: DType) -> DType:
    if dt == dtypes.bool:
      return dtypes.default_int
    if dtypes.is_unsigned(dt):
      return least_upper_dtype(dt, dtypes.uint32)
    if dtypes.is_int(dt):
      return least_upper_dtype(dt, dtypes.int32)
    return least_upper_dtype(dt, dtypes.float32)

  def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    acc = to_dtype(dtype, "Tensor.sum") or Tensor._acc_dtype(self.dtype)
    ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim, "sum")
    return ret.cast(self.dtype) if dtype is None and self.dtype == dtypes.float16 else ret

  def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    acc = to_dtype(dtype, "Tensor.prod") or Tensor._acc_dtype(self.dtype)
    ret = self.cast(acc)._reduce(Ops.MUL, axis, keepdim, "prod")
    return ret.cast(self.dtype) if dtype is None and self.dtype == dtypes.float16 else ret

  def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    if self.dtype == dtypes.bool:
      return self.cast(dtypes.uint8)._reduce(Ops.MAX, axis, keepdim, "max").cast(dtypes.bool)
    return self._reduce(Ops.MAX, axis, keepdim, "max")

  def _flipped(self) -> Tensor:
    """A order-reversing bijection of the dtype's values (for min = flip(max(flip)))."""
    if dtypes.is_float(self.dtype):
      return -self
    if dtypes.is_unsigned(self.dtype):
      return self ^ dtypes.max(self.dtype)
    return self ^ -1

  def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    if self.dtype == dtypes.bool:
      return self.logical_not().max(axis, keepdim).logical_not()
    return self._flipped().max(axis, keepdim)._flipped()

  def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    return self.cast(dtypes.bool).max(axis, keepdim)

  def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    return self.cast(dtypes.bool).min(axis, keepdim)

  def _count(self, axis: int | Sequence[int] | None) -> int:
    return math.prod(self.shape[a] for a in self._axes(axis, "mean"))

  def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    x = self._float()
    acc = Tensor._acc_dtype(x.dtype)  # a half sum overflows long before the mean does
    return (x.sum(axis, keepdim, dtype=acc) / self._count(axis)).cast(x.dtype)  # n == 0 gives nan, like numpy

  def _var(self, axis: int | Sequence[int] | None, keepdim: bool, correction: int) -> Tensor:
    """The variance in the accumulation dtype (half in float32, as numpy: its squares overflow early)."""
    x = self._float()
    x = x.cast(Tensor._acc_dtype(x.dtype))
    sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    return sq / max(self._count(axis) - correction, 0)  # no degrees of freedom: inf/nan, like numpy

  def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    return self._var(axis, keepdim, correction).cast(self._float().dtype)

  def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    return self._var(axis, keepdim, correction).sqrt().cast(self._float().dtype)

  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first maximum (int32)."""
    if axis is None:
      ret = self.flatten().argmax(0)
      return ret.reshape((1,) * self.ndim) if keepdim else ret
    if self.ndim == 0:
      self._axis(axis, "argmax", 1)
      return Tensor.full((), 0, dtypes.int32)
    a = self._axis(axis, "argmax")
    n = self.shape[a]
    if n == 0:
      raise ValueError(f"Tensor.argmax: empty axis {axis} of shape {self.shape}")
    is_max = self == self.max(a, keepdim=True)
    if dtypes.is_float(self.dtype):
      is_max = is_max | (self != self)  # a NaN is the max (max propagates it) and equals nothing
    rev = Tensor.arange(n, 0, -1, dtype=dtypes.int32).reshape((n,) + (1,) * (self.ndim - a - 1))
    return (n - (is_max * rev).max(a, keepdim)).cast(dtypes.int32)

  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    return (self.logical_not() if self.dtype == dtypes.bool else self._flipped()).argmax(axis, keepdim)

  # ---- compound
  def dot(self, w: Tensor) -> Tensor:
    """Matrix product with numpy's rules for 1-d operands and broadcast batch dims."""
    if not isinstance(w, Tensor):
      raise TypeError(f"Tensor.matmul: operand must be a Tensor, got {type(w).__name__}")
    xs, ws = self.shape, w.shape
    n1, n2 = len(xs), len(ws)
    if n1 == 0 or n2 == 0:
      raise ArgumentError(f"Tensor.matmul: 0-d operand (shapes {xs} and {ws})")
    if xs[-1] != ws[-min(n2, 2)]:
      raise ArgumentError(f"Tensor.matmul: shapes {xs} and {ws} don't line up ({xs[-1]} != {ws[-min(n2, 2)]})")
    if n1 > 2 or n2 > 2:
      try:
        broadcast_shape(xs[:-2], ws[:-2])
      except ValueError:
        raise ArgumentError(f"Tensor.matmul: batch dims of shapes {xs} and {ws} can't be broadcast together") from None
    k = min(n1 - 1, n2 - 1, 1)
    x = self.reshape(xs[:-1] + (1,) * k + xs[-1:])
    wt = w.reshape(ws[:-2] + (1,) * k + ws[-min(n2, 2):]).transpose(-1, -min(n2, 2))
    return (x * wt).sum(-1)

  def matmul(self, w: Tensor) -> Tensor:
    return self.dot(w)

  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """self @ weight + bias, weight shaped (in, out) (as tinygrad)."""
    x = self * weight if weight.ndim == 1 else self.dot(weight)
    return x + bias if bias is not None else x

  def softmax(self, axis: int = -1) -> Tensor:
    self._axes(axis, "softmax")
    x = self._float()
    e = (x - x.max(axis, keepdim=True)).exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1) -> Tensor:
    self._axes(axis, "log_softmax")
    x = self._float()
    m = x - x.max(axis, keepdim=True)
    return m - m.exp().sum(axis, keepdim=True).log()

  def softmin(self, axis: int = -1) -> Tensor:
    """softmax(-self) (torch's softmin), negated as a float: an unsigned input would wrap around."""
    self._axes(axis, "softmin")
    return self._float().neg().softmax(axis)

  def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over axis (biased variance), without affine parameters."""
    x = self._float()
    y = x - x.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

  def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: Any = 1, dilation: Any = 1,
             padding: Any = 0) -> Tensor:
    """n-d convolution: the number of spatial dims is weight.ndim - 2 (conv1d, conv2d, conv3d, ...)."""
    return tensor_nn.conv2d(self, weight, bias, groups, stride, dilation, padding)

  def max_pool2d(self, kernel_size: Any = (2, 2), stride: Any = None, dilation: Any = 1, padding: Any = 0,
                 ceil_mode: bool = False, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Max pooling over the last len(kernel_size) dims (n-d, as tinygrad's); return_indices: (values, flat indices
    into those dims), as torch."""
    return tensor_nn.max_pool2d(self, kernel_size, stride, dilation, padding, ceil_mode, return_indices)

  def avg_pool2d(self, kernel_size: Any = (2, 2), stride: Any = None, dilation: Any = 1, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Average pooling over the last len(kernel_size) dims (n-d, as tinygrad's)."""
    return tensor_nn.avg_pool2d(self, kernel_size, stride, dilation, padding, ceil_mode, count_include_pad)




FRONT_END_LOWERINGS[Ops.POW] = Tensor._lower_pow  # the scheduler's "earliest rewrites" lower float POW with it
