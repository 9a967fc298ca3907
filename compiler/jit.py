"""TinyJit (tinygrad's name and behaviour): capture the kernels a function runs, then replay them on new inputs.

The first call runs the function as it is (compiling its kernels); the second runs it again while
`compiler.realize.run_schedule` reports every kernel it runs (its runner and its Buffers in slot order); later calls
build no graph and schedule nothing: the captured kernels run in order, with the call's input Buffers (the realized
Tensor arguments, positional and keyword) in the slots where the capture's inputs were, found by buffer identity.

As in tinygrad, a replay returns the capture's own return value: its Tensors are bound to the captured output buffers,
which the next call writes again; an array `.numpy()` gave out of an earlier call keeps its values (a replay moves an
output whose memory a caller still reads to other memory before writing it). A replay reads its inputs where they are
(no copy; `Tensor.from_numpy` inputs are the caller's arrays). A numpy array argument (positional or keyword) is an
input too: the function is given `Tensor.from_numpy(arr)`, and a replay reads the array in place (copied only where a
kernel cannot read it: strided, unaligned) with no Tensor made at all; it is never written. The jit holds every Buffer
the capture used, so intermediates are never handed back to the buffer pool while it lives (the memory planner's
arena views hold their arena: replays run in the bytes the capture ran in); weights and optimizer
state written in place (assign, `opt.step()`; an assign whose value reads the target at other elements too: the
scheduler computes it into a temporary and copies it in) are the same buffers every call, so a replay updates them
as the function would; a loss it builds before `opt.step()` and returns is computed by the step's schedule
from the weights before the step (a lazy value means what it meant when it was built), so each replay returns it too.
A lazy Tensor built outside the function before the capture whose inputs the capture writes in place is computed
then, outside the captured kernels; a replay builds no graph, so one built later must be realized before the call.
Random numbers (Tensor.rand, randn, randint and what is built on them: uniform, normal, the initializers) drawn
inside the function are drawn anew by every replay: the capture notes each buffer the host RNG filled, in order, and
a replay fills them again from the RNG before its kernels run, so a jitted run draws exactly the numbers a plain run
with the same seed draws. Anything else the function does besides running kernels (Python values, host reads,
numpy's own random numbers) is frozen at the capture, and work it leaves lazy (an assign nothing realizes inside it)
is not captured: realize it inside. A Tensor the function reads from
outside (a weight held by `self`) is read from the buffer it had at the capture: rebinding the attribute to another
Tensor later is not seen, writing it in place is. A jitted method has a capture per instance. `JIT=0` runs the
function every call.

While recording (VIZ), a replay is one trace context "jit replay N kernels" (kind "kernel") holding each kernel's
run; a recording started (or restarted) after the capture makes the next call capture again, so the trace gets the
kernels' passes and sources."""
from __future__ import annotations

import functools
import os
import weakref
from typing import Any, Callable, Generic, Sequence, TypeVar

import numpy as np

from compiler import debug, realize
from compiler.realize import buffer_of_view, live_tensors
from compiler.runtime.buffer import Buffer, buffer_of, can_share
from compiler.tensor import Tensor, to_dtype
from compiler.trace import recorder
from compiler.trace.recorder import trace_context
from compiler.uop import Ops

ReturnType = TypeVar("ReturnType")


class JitError(Exception):
  """A call a TinyJit cannot replay (tinygrad's JitError)."""


_ENV_KEYS: dict[str, Any] = {}


def _environ(name: str) -> str | None:
  """os.environ.get(name), read from the environment's own dict (what os.environ[...] = and monkeypatch.setenv
  write) without Mapping.get's encode and decode: a replay reads JIT and DEBUG every call, and the two reads cost
  more than a small kernel's launch."""
  env = os.environ
  data = getattr(env, "_data", None)
  encode = getattr(env, "encodekey", None)
  if type(data) is not dict or encode is None:  # (not CPython's os._Environ: the plain way)
    return env.get(name)
  key = _ENV_KEYS.get(name)
  if key is None:
    key = _ENV_KEYS[name] = encode(name)
  raw = data.get(key)
  return None if raw is None else env.decodevalue(raw)


def _debug_level() -> int:
  """debug.level(), read the quick way (no DEBUG set, the usual replay: no parse)."""
  return 0 if _environ("DEBUG") is None else debug.level()


def _input_tensors(args: tuple, kwargs: dict) -> tuple[list[int | str], list[Tensor | np.ndarray]]:
  """The Tensor (and numpy array) arguments and their names (position, or keyword in sorted order), then, as
  tinygrad, the Tensors directly inside list, tuple and dict arguments (named "arg[key]"; not deeper, so a model
  passed in is no input)."""
  if not kwargs and all(isinstance(x, (Tensor, np.ndarray)) for x in args):  # the usual call, at once
    return list(range(len(args))), list(args)
  named: list[tuple[int | str, Tensor | np.ndarray]] = []
  inner: list[tuple[int | str, Tensor | np.ndarray]] = []
  for n, x in [*enumerate(args), *sorted(kwargs.items())]:
    if isinstance(x, (Tensor, np.ndarray)):
      named.append((n, x))
    elif isinstance(x, (list, tuple, dict)):
      items = x.items() if isinstance(x, dict) else enumerate(x)
      inner += [(f"{n}[{k!r}]", t) for k, t in items if isinstance(t, Tensor)]
  seen = {id(t) for _, t in named}
  named += [(n, t) for n, t in inner if id(t) not in seen and not seen.add(id(t))]
  return [n for n, _ in named], [t for _, t in named]


def _arrays_as_tensors(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
  """The arguments with each numpy array (positional or keyword) a Tensor reading it in place (Tensor.from_numpy)."""
  def conv(x: Any) -> Any:
    return Tensor.from_numpy(x) if isinstance(x, np.ndarray) else x
  return tuple(conv(x) for x in args), {k: conv(v) for k, v in kwargs.items()}


def _input_buffers(names: list[int | str], tensors: list[Tensor | np.ndarray]) -> list[Buffer]:
  """The Buffer of each input (lazy inputs are realized first; a numpy array's reads it in place where a kernel
  can, else holds a copy); JitError for a constant or a repeated buffer."""
  views = [x if isinstance(x, np.ndarray) else buffer_of_view(x.uop) for x in tensors]
  if any(v is None for v in views):
    Tensor.realize(*[t for t, v in zip(tensors, views) if v is None])
    views = [x if isinstance(x, np.ndarray) else v if v is not None else buffer_of_view(x.uop)
             for x, v in zip(tensors, views)]
  bufs = []
  for n, t, b in zip(names, tensors, views):
    if b is None:
      raise JitError(f"TinyJit: argument {n!r} (shape {t.shape}) is not a buffer; make one with .contiguous()")
    if isinstance(b, np.ndarray):
      bufs.append(Buffer(to_dtype(b.dtype), b.size).copyin(b, share=True))
    else:
      bufs.append(buffer_of(b))
  if len(bufs) > 1 and len({id(b) for b in bufs}) != len(bufs):
    raise JitError(f"TinyJit: duplicate inputs (arguments {names} share a buffer)")
  return bufs


def _returned_tensors(ret: Any) -> list[Tensor]:
  """The Tensors of a return value (a Tensor, None, or tuples/lists/dicts of them); JitError for anything else,
  since a replay returns the capture's value as it is."""
  if ret is None:
    return []
  if isinstance(ret, Tensor):
    return [ret]
  if isinstance(ret, (tuple, list, dict)):
    return [t for x in (ret.values() if isinstance(ret, dict) else ret) for t in _returned_tensors(x)]
  raise JitError(f"TinyJit: the function returned a {type(ret).__name__}; a jitted function returns Tensors")


Call = tuple[str, Any, list["Buffer | None"], tuple[tuple[int, bool], ...]]  # (name, runner, bufs, output slots)


class _Capture:
  """The kernels of one capture, with the slots where each input's buffer goes."""
  __slots__ = ("ret", "names", "info", "calls", "slots", "recorder", "own", "launches", "plain", "seen", "draws")

  def __init__(self, ret: Any, names: list[int | str], tensors: list[Tensor], inputs: list[Buffer],
               runs: list[tuple[str, Any, Sequence[Buffer], tuple[tuple[int, bool], ...]]],
               draws: Sequence[tuple[Buffer, Callable[[], np.ndarray]]] = ()):
    self.ret, self.names = ret, names
    self.draws = list(draws)  # the host RNG's draws into buffers during the capture, in order: each replay's anew
    self.info = [(t.shape, t.dtype) for t in tensors]
    where = {id(b): i for i, b in enumerate(inputs)}
    self.calls: list[Call] = []
    self.slots: list[tuple[list, int, int]] = []  # (a call's buffer list, slot, input index)
    for name, runner, bufs, outs in runs:
      # an output written whole but also read at another slot of the call keeps its contents (copied if moved)
      outs = tuple((s, whole and list(bufs).count(bufs[s]) == 1) for s, whole in outs)
      bufs = list(bufs)  # holds the intermediates and outputs for the jit's life
      for s, b in enumerate(bufs):
        if (i := where.get(id(b))) is not None:
          self.slots.append((bufs, s, i))
          bufs[s] = None  # (a call's inputs are not kept: set for a replay, cleared after it)
      self.calls.append((name, runner, bufs, outs))
    self.own = {id(b) for _, _, bufs, _ in self.calls for b in bufs if b is not None}
    # each call's launch (a compiled kernel's fewest-steps run, else the runner), buffers and outputs
    self.launches = [(getattr(runner, "launch", runner), bufs, outs) for _, runner, bufs, outs in self.calls]
    # the usual call, every argument positional: (shape, dtype, numpy dtype) per argument, for quick_inputs
    self.plain = [(shape, dtype, dtype.np) for shape, dtype in self.info] if names == list(range(len(names))) \
        else None
    self.seen: list[tuple[weakref.ref, int] | None] = [None] * len(names)  # per argument: (array, its address)
    rec = recorder.RECORDER
    self.recorder = None if rec is None else weakref.ref(rec)
    runs.clear()  # (the scheduler's tuples of the capture's buffers)

  def check(self, names: list[int | str], tensors: list[Tensor | np.ndarray]) -> None:
    """JitError unless the call's Tensor arguments are the capture's, with the same shapes and dtypes."""
    if names != self.names:
      raise JitError(f"TinyJit: the call's Tensor arguments {names} differ from the capture's {self.names}")
    for n, t, (shape, dtype) in zip(names, tensors, self.info):
      if t.shape != shape or to_dtype(t.dtype) != dtype:
        raise JitError(f"TinyJit: argument {n!r} has shape {t.shape} {t.dtype.name}, the capture had shape {shape} "
                       f"{dtype.name}")

  def quick_inputs(self, args: tuple) -> list[Buffer] | None:
    """The input Buffers of the usual call (positional arguments only, each a realized Tensor's buffer or a numpy
    array a kernel reads in place, with the capture's shapes and dtypes, no buffer twice) in the fewest steps;
    None for any other call: `check` and `_input_buffers` decide it (and raise)."""
    plain = self.plain
    if plain is None or len(args) != len(plain):
      return None
    bufs = []
    seen = self.seen
    for i, (x, (shape, dtype, npdt)) in enumerate(zip(args, plain)):
      if type(x) is np.ndarray:
        if x.shape != shape or x.dtype != npdt or not can_share(x, npdt):
          return None
        # the address of the array the last call gave here, if it is this one (an array's memory never moves while
        # its shape stays; a weak reference: no argument kept alive, and a dead one's id reused does not match)
        last = seen[i]
        if last is not None and last[0]() is x:
          bufs.append(Buffer.borrow(dtype, x, last[1]))
        else:
          b = Buffer.borrow(dtype, x)
          seen[i] = (weakref.ref(x), b.addr)
          bufs.append(b)
        continue
      if not isinstance(x, Tensor):
        return None
      u = x.uop
      while u.op is Ops.RESHAPE:
        u = u.src[0]
      if u.op is not Ops.BUFFER or u.dtype is not dtype or x.shape != shape:
        return None
      bufs.append(buffer_of(u))
    if len(bufs) > 1 and len({id(b) for b in bufs}) != len(bufs):
      return None
    return bufs

  def stale(self) -> bool:
    """Whether a recording started since the capture (its runners were compiled outside it)."""
    rec = recorder.RECORDER
    return rec is not None and (self.recorder is None or self.recorder() is not rec)

  def replay(self, inputs: list[Buffer]) -> Any:
    """Run the captured kernels on the inputs. An input that is one of the capture's own buffers (a previous
    replay's output passed back in) is copied first: the kernels write those buffers while reading the input. An
    output whose memory a caller still reads (a `.numpy()` of an earlier call) moves to memory of its own first, so
    an earlier result never changes."""
    own = self.own
    for bufs, s, i in self.slots:
      b = inputs[i]
      bufs[s] = b if id(b) not in own else Buffer(b.dtype, b.size, b.np)
    for buf, draw in self.draws:  # the random numbers the function would draw now, in its order
      values = draw()
      buf.prepare_write(True)  # (an array `.numpy()` gave out of an earlier draw keeps its values)
      np.copyto(buf.np, values.reshape(-1), casting="unsafe")
    try:
      if recorder.RECORDER is not None:
        from compiler.runtime.compiled import runs_recorded_here
        # each compiled kernel records its run into the replay's context (this thread's only), as run_schedule's
        # kernels do into theirs
        with trace_context(f"jit replay {len(self.calls)} kernels", kind="kernel"), runs_recorded_here():
          self._run_calls()
      elif _debug_level() >= 2:
        self._run_calls()
      else:
        for launch, bufs, outs in self.launches:
          for o, whole in outs:
            bufs[o].prepare_write(whole)
          launch(bufs)
    finally:
      for bufs, s, _ in self.slots:  # (the jit keeps no input alive, and the next call's input can take its memory)
        bufs[s] = None
    return self.ret

  def _run_calls(self) -> None:
    """Every kernel, each by debug.run_kernel (its DEBUG=2 line; a compiled kernel records its run itself)."""
    for name, runner, bufs, outs in self.calls:
      for o, whole in outs:
        bufs[o].prepare_write(whole)
      debug.run_kernel(name, runner, bufs)


class TinyJit(Generic[ReturnType]):
  """`@TinyJit` on a function of Tensors: the second call captures its kernels, later calls replay them."""

  def __init__(self, fxn: Callable[..., ReturnType]):
    self.fxn = fxn
    self.cnt = 0
    self.captured: _Capture | None = None
    functools.update_wrapper(self, fxn)

  def reset(self) -> None:
    """Drop the capture: the next call runs the function, the one after captures again."""
    self.cnt, self.captured = 0, None

  def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., ReturnType]:
    """A method's TinyJit per instance: one capture shared by two instances would replay the first one's weights."""
    if obj is None:
      return self
    try:
      jits = obj.__dict__
    except AttributeError:
      raise JitError(f"TinyJit on the method {self.fxn.__qualname__} needs instances with a __dict__") from None
    key = f"__tinyjit_{self.fxn.__name__}_{id(self)}"
    if (jit := jits.get(key)) is None:
      jit = jits[key] = TinyJit(functools.partial(self.fxn, obj))
    return jit

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    cap = self.captured
    if cap is not None and not kwargs and _environ("JIT") != "0" and not cap.stale():  # the usual replay, at once
      inputs = cap.quick_inputs(args)
      if inputs is not None:
        self.cnt += 1
        return cap.replay(inputs)
    names, tensors = _input_tensors(args, kwargs)
    plain = _environ("JIT") == "0" or self.cnt == 0
    if plain or self.captured is None or self.captured.stale():
      if any(isinstance(t, np.ndarray) for t in tensors):  # the function itself is given Tensors
        args, kwargs = _arrays_as_tensors(args, kwargs)
        names, tensors = _input_tensors(args, kwargs)
      inputs = _input_buffers(names, tensors)
      ret = self._run(args, kwargs) if plain else self._capture(args, kwargs, names, tensors, inputs)
    else:
      self.captured.check(names, tensors)
      ret = self.captured.replay(_input_buffers(names, tensors))
    self.cnt += 1
    return ret

  def _run(self, args: tuple, kwargs: dict) -> Any:
    ret = self.fxn(*args, **kwargs)
    if outs := _returned_tensors(ret):
      Tensor.realize(*outs)
    return ret

  def _capture(self, args: tuple, kwargs: dict, names: list[int | str], tensors: list[Tensor],
               inputs: list[Buffer]) -> Any:
    if realize.capturing is not None:
      raise RuntimeError("TinyJit: a TinyJit inside another TinyJit's capture is not supported")
    runs: list[tuple[str, Any, Sequence[Buffer], tuple[tuple[int, bool], ...]]] = []
    draws: list[tuple[Buffer, Callable[[], np.ndarray]]] = []
    realize.capturing, realize.drawing = runs, draws
    realize.before_capture = {id(t): weakref.ref(t) for t in live_tensors() if buffer_of_view(t.uop) is None}
    try:
      ret = self._run(args, kwargs)
    finally:
      realize.capturing = realize.drawing = realize.before_capture = None
    if not runs:
      raise JitError(f"TinyJit: {getattr(self.fxn, '__name__', 'the function')} ran no kernel while capturing")
    captured = _Capture(ret, names, tensors, inputs, runs, draws)
    self.captured = captured
    if debug.level() >= 1:
      print(f"JIT captured {len(captured.calls)} kernels with {len(inputs)} inputs", flush=True)
    return ret
