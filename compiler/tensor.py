"""The lazy Tensor's core: construction, the UOp graph it wraps (nodes, casts, broadcasting), realize, numpy and item.
Every other method comes from a themed mixin of compiler.tensor_mixins (elementwise, movement, reduce, indexing, nn,
creation, autograd), which uses the Tensor only through self / type(self)."""
from __future__ import annotations

import math
import weakref
from typing import Any, Sequence

import numpy as np

from compiler import oracle
from compiler import realize as realize_state
from compiler.codegen.program import collector_paused
from compiler.device import canonicalize, check_same_device, copy_to, default_device, device_of
from compiler.dtype import DType, dtypes, least_upper_dtype
from compiler.realize import PENDING_ASSIGNS, SHARED_BUFFERS, buffer_of_view, live_tensors, run_schedule, track
from compiler.runtime.buffer import buffer_of, new_buffer_uop
from compiler.schedule.assign import assign_target, assigns_run, forget_overwritten, stale_readers
from compiler.schedule.bufferize import FRONT_END_LOWERINGS
from compiler.schedule.rangeify import create_schedule
from compiler.schedule.shape import shape_of
from compiler.tensor_mixins import (
  AutogradMixin,
  CreationMixin,
  ElementwiseMixin,
  IndexingMixin,
  MovementMixin,
  NnMixin,
  ReduceMixin,
)
from compiler.tensor_mixins._args import (
  ArgumentError,
  AxisError,
  DTypeNameError,
  Scalar,
  Shape,
  broadcast_shape,
  fitting_int,
  is_scalar,
  py_value,
  to_dtype,
)
from compiler.trace import recorder
from compiler.uop import GroupOp, Ops, UOp

# (the argument errors and helpers other modules import from here, with the Tensor)
__all__ = ["ArgumentError", "AxisError", "DTypeNameError", "Scalar", "Shape", "Tensor", "broadcast_shape", "to_dtype"]

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


SCALAR_NODES_SIZE = 512
# (dtype, shape, kind, value, sign) -> a Python scalar's broadcast constant node (Tensor._scalar_to)
_SCALAR_NODES: dict[tuple, UOp] = {}


class Tensor(ElementwiseMixin, MovementMixin, ReduceMixin, IndexingMixin, NnMixin, CreationMixin, AutogradMixin):
  """A lazy n-d array. Build with numpy arrays, nested lists or scalars; compute with `.numpy()`/`.realize()`."""
  __slots__ = ("uop", "requires_grad", "grad", "__weakref__")

  def __init__(self, data: Any, dtype: Any = None, requires_grad: bool | None = None, device: str | None = None):
    self.requires_grad, self.grad = requires_grad, None
    self._init(data, dtype)
    if device is not None or (not isinstance(data, (UOp, Tensor)) and self.uop.op is not Ops.CONST):
      self._place(device)
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
    if is_scalar(data):
      v = py_value(data)
      self.uop = UOp.const(dt or fitting_int(dtypes.from_py(v), v, v, "Tensor"), v)
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
          dt = fitting_int(dt, int(arr.min()), int(arr.max()), "Tensor")
      dt = dt or dtypes.default_float
    elif isinstance(data, np.ndarray):
      arr = data
      dt = dt or to_dtype(arr.dtype)
    else:
      raise TypeError(f"Tensor: can't make a tensor from {type(data).__name__}")
    self.uop = Tensor._from_np(arr, dt)  # the buffer casts while it copies: one pass over the data, not two

  def _place(self, device: str | None) -> None:
    """Put the new tensor's value on `device` (None: data on the default device; a constant stays on none, so it
    follows the tensors it meets): a COPY from where it is, made only where that differs."""
    dev = default_device() if device is None else canonicalize(device)
    if (device_of(self.uop) is None and device is None) or dev == (device_of(self.uop) or default_device()):
      return
    self.uop = copy_to(self.uop, dev)

  @property
  def device(self) -> str:
    """Where the tensor's value lives (tinygrad's canonical name: "CPU", "CL"); constants alone: the default."""
    return device_of(self.uop) or default_device()

  def to(self, device: str) -> Tensor:
    """The tensor on `device` (itself when it is there already): a COPY, run as a step of its own when realized."""
    dev = canonicalize(device)
    if dev == self.device:
      return self
    t = Tensor._of(copy_to(self.uop, dev))
    t.requires_grad = self.requires_grad
    return t

  @staticmethod
  def _from_np(arr: np.ndarray, dt: DType, share: bool = False) -> UOp:
    buf = new_buffer_uop(dt, arr.size, arr, share)
    return buf if arr.ndim == 1 else UOp(Ops.RESHAPE, dt, (buf,), tuple(arr.shape))

  @staticmethod
  def from_numpy(arr: np.ndarray, dtype: Any = None, device: str | None = None) -> Tensor:
    """A tensor that reads arr's own memory (no copy) where kernels can: a C-contiguous, aligned array of the
    tensor's dtype (default: arr's). Later changes to arr show in the tensor, as with torch.from_numpy; the tensor
    never writes arr (an assign gives it memory of its own first). Any other array is copied, as by Tensor(arr).
    On `device` (None: the default one, `DEV`) as Tensor(arr, device=): off the CPU, a COPY of that memory."""
    if not isinstance(arr, np.ndarray):
      raise TypeError(f"Tensor.from_numpy: needs a numpy array, got {type(arr).__name__}")
    t = Tensor(Tensor._from_np(arr, to_dtype(dtype) or to_dtype(arr.dtype), share=True))
    t._place(device)
    return t

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
      # (the collector off: a schedule's and its compiles' nodes ran ~20 young and two full collections in GPT step's
      # first call, 0.05 s; program.collector_paused)
      with collector_paused():
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
    """ORACLE=1's realize (compiler.oracle): each output's value into a buffer of its own on its device, then the
    in-place writes (every value read the buffers as they were before them, as a schedule does); the map output ->
    buffer view."""
    values, writes = oracle.evaluate(uops, _realized)
    becomes = {u: UOp(Ops.RESHAPE, u.dtype, (new_buffer_uop(u.dtype, v.size, np.ascontiguousarray(v).ravel(),
                                                             device=device_of(u) or default_device()),), shape_of(u))
               for u, v in zip(uops, values)}
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
      check_same_device(op, x.uop, y.uop)
      xd, yd = x.uop.dtype, y.uop.dtype
      dt = out_dtype or (xd if xd is yd else least_upper_dtype(xd, yd))
    elif is_scalar(y):
      y = py_value(y)
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

  def _mop(self, op: Ops, arg: Any) -> Tensor:
    """A movement node on self (its arg checked by the caller: MovementMixin's reshape, pad, ...)."""
    return Tensor._of(UOp(op, self.uop.dtype, (self.uop,), arg))


FRONT_END_LOWERINGS[Ops.POW] = Tensor._lower_pow  # the scheduler's "earliest rewrites" lower float POW with it
