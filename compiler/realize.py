"""Running a schedule: every kernel on a pluggable backend, each inside a "kernel" trace context.

A backend is a factory `ast -> runner`, where `runner(bufs)` runs the kernel on the Buffers in slot order. "llvm"
(the default) optimizes, compiles and runs through compiler.engine (the driver), which with BEAM on first decides
every kernel's opts of the schedule by timing them in the schedule's sequence (`engine.confirm_schedule`, on scratch
copies of the buffers); "interp" is the numpy reference interpreter. `BACKEND` (env) picks the default; other
backends can be added with `register_backend`.

Before a kernel runs, each buffer it stores to (`output_slots`) is prepared: allocated on first use (not zeroed when
the kernel writes it whole and never reads it), and moved to memory of its own when someone else still reads its
memory (a `.numpy()` view handed out, a caller's array from Tensor.from_numpy: `Buffer.prepare_write`), so a kernel
never changes an array a caller holds. Before any kernel runs, the schedule's intermediates are planned to share
Buffers where their lives do not overlap (`plan_memory`, compiler/runtime/memory.py). A backend with two stages (the
LLVM one: `_stage_loaders`) compiles ahead (`_Ahead`): the next kernels' Python part is made while LLVM compiles
earlier ones on a worker thread, the kernels compiled and run in the same order as without it (untraced, the runs too
leave this thread once a kernel compiles: each on whichever thread is free, one at a time, in order); traced, each
step's context is begun ahead, in run order, and the Python part records into it.
"""
from __future__ import annotations

import collections
import functools
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable, Sequence

from compiler import debug
from compiler.runtime.buffer import Buffer, _freed, note_schedule_need
from compiler.runtime.memory import memory_planner, planner_enabled
from compiler.schedule.rangeify import ScheduleItem
from compiler.symbolic import linear_form
from compiler.trace import recorder
from compiler.trace.recorder import trace_context
from compiler.uop import AxisType, Ops, UOp, toposort

Runner = Callable[[Sequence[Buffer]], None]
BackendFactory = Callable[[UOp], Runner]

DEFAULT_BACKEND = "llvm"
RUNNER_CACHE_SIZE = 512
# the kernels run while a TinyJit captures (compiler.jit sets and clears it): (name, runner, bufs, output_slots)
# per kernel run
capturing: list[tuple[str, Runner, Sequence[Buffer], tuple[tuple[int, bool], ...]]] | None = None
# while a TinyJit captures (set and cleared with `capturing`): the buffers the host RNG filled (Tensor.rand, randn,
# randint and what is built on them), in draw order, each with the draw that fills it again: a replay draws anew
drawing: list[tuple[Buffer, Callable[[], Any]]] | None = None
# while a TinyJit captures: the lazy Tensors alive when it began (weakly). One that an in-place write of the capture
# overwrites the inputs of is computed first outside the capture: a replay would write its buffer again
before_capture: dict[int, weakref.ref] | None = None  # id -> weak reference (a dead one's id may be reused)

# buffers that realizing gave to more than one tensor: equal graphs (hash-consed to one node) realized in one schedule,
# or a graph realized again that an earlier realize remembered. Writing one in place would change the other tensors
# too, so `assign` gives the tensor a buffer of its own instead (copy on write).
SHARED_BUFFERS: weakref.WeakSet[UOp] = weakref.WeakSet()
# the in-place writes (ASSIGN nodes onto a realized buffer) not run yet: a realize that runs one first computes the
# live tensors that still read the buffer's old contents (Tensor._realize_all)
PENDING_ASSIGNS: weakref.WeakSet[UOp] = weakref.WeakSet()

# every Tensor made, weakly (tinygrad's all_tensors): `backward` fills .grad of the live tensors in the graph, and an
# in-place write finds the live lazy tensors that read the old contents. Plain weak references in a list, swept of
# the dead ones when it has doubled: a reference with a callback (or a WeakSet) cost twice as much per tensor made
_all_tensors: list[weakref.ref] = []
_sweep_at = [1024]


def track(t: Any) -> None:
  """Remember a new Tensor (weakly)."""
  _all_tensors.append(weakref.ref(t))
  if len(_all_tensors) >= _sweep_at[0]:
    _all_tensors[:] = [r for r in _all_tensors if r() is not None]
    _sweep_at[0] = max(1024, 2 * len(_all_tensors))


def live_tensors() -> list[Any]:
  """The Tensors alive now."""
  return [t for r in _all_tensors if (t := r()) is not None]


def buffer_of_view(u: UOp) -> UOp | None:
  """The BUFFER node u is a view of (reshapes of a buffer), or None."""
  while u.op is Ops.RESHAPE:
    u = u.src[0]
  return u if u.op is Ops.BUFFER else None


def note_draw(buf: Buffer, draw: Callable[[], Any]) -> None:
  """A random creation function filled buf with `draw()` (noted while a TinyJit captures)."""
  if drawing is not None:
    drawing.append((buf, draw))


def _interp_factory() -> BackendFactory:
  from compiler.runtime.interpreter import InterpretedKernel
  return lambda ast: InterpretedKernel(ast)


def _llvm_factory() -> BackendFactory:
  """The LLVM backend: optimize, compile and run (`compiler.engine.compile_runner`, the driver)."""
  from compiler.engine import compile_runner  # lazy: loads llvmlite only when a kernel runs on it
  return compile_runner


def _llvm_confirm(items: list[tuple[UOp, Sequence[Buffer]]]) -> None:
  """Before the LLVM backend runs a schedule: BEAM's opts confirmed in its sequence (nothing when BEAM is off)."""
  from compiler.engine import confirm_schedule
  confirm_schedule(items)


def _cl_factory() -> BackendFactory:
  """OpenCL (pyopencl): the device's opts, OpenCL C, run on the device with its buffers copied in and out around each
  run (`compiler.engine.cl_runner`)."""
  from compiler.engine import cl_runner
  return cl_runner


_loaders: dict[str, Callable[[], BackendFactory]] = {"interp": _interp_factory, "llvm": _llvm_factory,
                                                     "cl": _cl_factory}


def _llvm_stages() -> tuple[BackendFactory, Callable[[UOp, Any], Callable[[], Runner]], Callable[[], bool]]:
  from compiler.engine import compile_runner, compiles_ahead, start_runner
  return compile_runner, start_runner, compiles_ahead


# backend -> (its factory, that factory in two stages: `start(ast, submit)` does the Python part now, the rest through
# `submit`, and returns the runner's getter; whether a schedule may compile ahead now): what compile-ahead uses, while
# the backend's factory is that one (run_schedule's `_Ahead`)
_stage_loaders: dict[str, Callable[[], tuple[BackendFactory, Callable[[UOp, Any], Callable[[], Runner]],
                                              Callable[[], bool]]]] = {
  "llvm": _llvm_stages}
# backend -> what it does with a whole schedule before its kernels run ((ast, buffers) in run order)
_schedule_hooks: dict[str, Callable[[list[tuple[UOp, Sequence[Buffer]]]], None]] = {"llvm": _llvm_confirm}
_factories: dict[str, BackendFactory] = {}
# (runner, a weak reference to the recorder it was compiled under): a trace gets every kernel's passes and sources,
# so a kernel compiled before it started (or for another trace) is compiled again, once, for it, and its runs name
# this trace's context (weak: an ended trace's recorder, and the nodes it holds, must not live on here)
_runners: dict[tuple[str, UOp], tuple[Runner, weakref.ref | None]] = {}


def register_backend(name: str, factory: BackendFactory) -> None:
  """Make `name` a backend: `factory(ast)` returns a runner `runner(bufs)`."""
  _factories[name] = factory
  _schedule_hooks.pop(name, None)  # (the hook belongs to the backend it replaces)
  for key in [k for k in _runners if k[0] == name]:
    del _runners[key]


def backend_names() -> list[str]:
  return sorted(set(_loaders) | set(_factories))


def default_backend() -> str:
  return os.environ.get("BACKEND", "") or DEFAULT_BACKEND


def get_runner(ast: UOp, backend: str | None = None) -> Runner:
  """The runner for a kernel AST on a backend (compiled once per AST)."""
  return _runner(ast, backend)[0]


def _runner(ast: UOp, backend: str | None) -> tuple[Runner, float | None]:
  """The runner, and the seconds its making took when it was made now (optimize + compile; None: cached)."""
  made_s = None
  name = backend or default_backend()
  key = (name, ast)
  hit = _runners.pop(key, None)
  tracing = recorder.RECORDER
  runner = hit[0] if hit is not None and (tracing is None or (hit[1] is not None and hit[1]() is tracing)) else None
  if runner is None:
    factory = _factories.get(name)
    if factory is None:
      if name not in _loaders:
        raise ValueError(f"unknown backend {name!r} (known: {', '.join(backend_names())})")
      factory = _factories[name] = _loaders[name]()
    t0 = debug.clock()
    runner = factory(ast)
    made_s = debug.clock() - t0
    tracing = recorder.RECORDER  # (a pending recorder became a real one at the first traced event)
  _remember(key, runner, tracing)
  return runner, made_s


def _remember(key: tuple[str, UOp], runner: Runner, tracing: Any) -> None:
  """Keep a runner made under the recorder `tracing` (None: untraced), the RUNNER_CACHE_SIZE latest at most."""
  _runners[key] = (runner, None if tracing is None else weakref.ref(tracing))
  if len(_runners) > RUNNER_CACHE_SIZE:
    del _runners[next(iter(_runners))]


def _cached_runner(key: tuple[str, UOp]) -> bool:
  """Whether _runner would find the runner of `key` made (under the current recorder) rather than make it."""
  hit = _runners.get(key)
  tracing = recorder.RECORDER
  return hit is not None and (tracing is None or (hit[1] is not None and hit[1]() is tracing))


def _strides(idx: UOp) -> list[tuple[int, int]] | None:
  """(stride, size) of each LOOP range of an index that is a sum of `range * const` terms over ranges with constant
  ends and no constant part (linear_form's view of it); None for any other form."""
  terms, k = linear_form(idx)
  if k != 0 or any(r.op is not Ops.RANGE or r.arg[1] is not AxisType.LOOP or r.src[0].op is not Ops.CONST
                   for r in terms):
    return None
  return [(stride, r.src[0].arg) for r, stride in terms.items()]


def whole_outputs(ast: UOp) -> frozenset[int]:
  """The output slots the kernel writes every element of (an ungated store at a row-major index over all of them):
  those need no zeros before it runs. Remembered on the AST."""
  got = ast.__dict__.get("_whole_outputs")
  if got is not None:
    return got
  whole = set()
  for st in ast.src if ast.op is Ops.SINK else ():
    if st.op is not Ops.STORE or len(st.src) != 2 or st.src[0].op is not Ops.INDEX or len(st.src[0].src) != 2:
      continue
    glob, idx = st.src[0].src
    size = getattr(glob.dtype, "size", -1)
    terms = _strides(idx)
    if glob.op is not Ops.DEFINE_GLOBAL or terms is None:
      continue
    expect = 1  # the strides of a row-major walk: each the product of the sizes inside it
    for stride, n in sorted(terms):
      if stride != expect:
        break
      expect *= n
    else:
      if expect == size:
        whole.add(glob.arg)
  ast.__dict__["_whole_outputs"] = got = frozenset(whole)
  return got


def _read_slots(ast: UOp) -> set[int]:
  """The slots the kernel may read: every global used other than as the address of a store."""
  users: dict[UOp, list[UOp]] = {}
  for u in toposort(ast):
    for x in u.src:
      users.setdefault(x, []).append(u)
  read = set()
  for g in users:
    if g.op is not Ops.DEFINE_GLOBAL:
      continue
    for i in users[g]:
      if i.op is not Ops.INDEX or i.src[0] is not g or \
          any(st.op is not Ops.STORE or st.src[0] is not i or i in st.src[1:] for st in users.get(i, [])):
        read.add(g.arg)
        break
  return read


def output_slots(ast: UOp) -> tuple[tuple[int, bool], ...]:
  """(slot, written whole) of each buffer the kernel stores to: whole when its store covers every element and the
  kernel never reads that slot (an in-place update reads the old values). Every slot, none whole, for a kernel not
  of the scheduler's form (a SINK of stores to indexed globals): taking an input for an output costs a copy at
  most, missing an output would let it change an array a caller holds. Remembered on the AST."""
  got = ast.__dict__.get("_output_slots")
  if got is None:
    stores = list(ast.src) if ast.op is Ops.SINK else []
    if stores and all(st.op is Ops.STORE and st.src[0].op is Ops.INDEX and st.src[0].src[0].op is Ops.DEFINE_GLOBAL
                      for st in stores):
      whole, read = whole_outputs(ast), _read_slots(ast)
      got = tuple((s, s in whole and s not in read) for s in sorted({st.src[0].src[0].arg for st in stores}))
    else:
      got = tuple((u.arg, False) for u in toposort(ast) if u.op is Ops.DEFINE_GLOBAL)
    ast.__dict__["_output_slots"] = got
  return got


def prepare_outputs(outs: tuple[tuple[int, bool], ...], bufs: Sequence[Buffer]) -> None:
  """Before a kernel runs: an output whose memory someone else still reads (an array `.numpy()` handed out, a
  caller's borrowed array) moves to memory of its own, so a kernel never changes an array a caller holds."""
  for i, whole in outs:
    b = bufs[i]
    b.prepare_write(whole and bufs.count(b) == 1)


def plan_memory(schedule: list[ScheduleItem], outs_of: list[tuple[tuple[int, bool], ...]]) -> list[ScheduleItem]:
  """The schedule, its intermediates placed in one arena where their lives do not overlap (the memory planner,
  compiler/runtime/memory.py; `NO_MEMORY_PLANNER=1`: not), and the pool told what the schedule takes fresh. A plan
  that places anything is a "memory plan" context of the trace (kind "memory", its counts in its name) and, at
  DEBUG>=2, a line."""
  plan = memory_planner([(si.bufs, outs) for si, outs in zip(schedule, outs_of)], planner_enabled())
  note_schedule_need(plan.fresh)
  if plan.placed:
    if recorder.RECORDER is not None:  # (made by the schedule its last step came from: copies' sources come first)
      with trace_context(plan.summary(), kind="memory", schedule=schedule[-1].ctx):
        pass
    if debug.level() >= 2:
      debug.on_memory_plan(plan.summary())
  return schedule


def copy_runner(bufs: Sequence[Buffer]) -> None:
  """A COPY step's runner: bufs (destination, source) on two devices. While tracing, a `run` record of the copy
  (its bytes, its time: waited for, a copy to a device is asynchronous) in the current context."""
  dst, src = bufs
  ts, t0 = time.time(), time.perf_counter()
  dst.copy_from(src)
  if dst.device != "CPU":
    dst.device_runtime().finish()
  dt = time.perf_counter() - t0
  if recorder.RECORDER is not None:
    name = f"copy {dst.nbytes}, {dst.device} <- {src.device}"
    recorder.record("run", kname=name, times=[dt], min=dt, median=dt, flops=0, bytes=dst.nbytes, gflops=0.0,
                    gbs=dst.nbytes / dt / 1e9 if dt > 0 else 0.0, ts=ts)


def kernel_backend(si: ScheduleItem, backend: str) -> str:
  """The backend a kernel runs on: its buffers' device's ("cl" for CL), `backend` for the CPU's. A kernel whose
  buffers are on two devices is a RuntimeError naming both (the front end refuses such ops; this is the last check)."""
  bufs = si.bufs
  dev = bufs[0].device if bufs else "CPU"
  if any(b.device != dev for b in bufs):
    devs = sorted({b.device for b in bufs})
    raise RuntimeError(f"kernel {si.name}: buffers on different devices, {' and '.join(devs)}")
  return backend if dev == "CPU" else "cl"


# kernels a schedule's run compiles ahead of the one it runs at most (`COMPILE_AHEAD`; 0: none, each kernel
# compiled at its turn): the bound on what waits in the compile worker's queue
COMPILE_AHEAD = 8
# the interpreter's switch interval while a schedule's compile worker runs (s): how long the worker may wait for the GIL
AHEAD_SWITCH_S = 5e-5
# backend -> (its factory, its two-stage start, whether this schedule may compile ahead), loaded once
_stages: dict[str, tuple[BackendFactory, Callable[[UOp, Any], Callable[[], Runner]], Callable[[], bool]]] = {}


def compile_ahead_depth() -> int:
  """How many kernels a schedule's untraced run compiles ahead (`COMPILE_AHEAD`, default COMPILE_AHEAD)."""
  raw = os.environ.get("COMPILE_AHEAD", "") or str(COMPILE_AHEAD)
  try:
    return max(0, int(raw))
  except ValueError:
    raise ValueError(f"COMPILE_AHEAD must be an integer, got {raw!r}") from None


class _Ahead:
  """A schedule's kernels compiled ahead of their runs (run_schedule's, DEBUG<2): each kernel's Python part
  (the disk cache's lookup, optimize, codegen) made here in run order, up to `depth` kernels ahead of the one about to
  run, and its LLVM part (optimizer, code generation: llvmlite releases the GIL there) on one worker thread, in the
  same order, while this thread goes on. A kernel's code does not depend on the order or thread of the compiles, so
  this thread, when it would wait for a kernel's LLVM part, runs a queued one itself (a `shared` job: `_Job`): the
  kernel's own if the worker has not started it, else the worker's next. What a kernel's compile raises (here or on
  the worker) is raised at its turn, where it was raised before. `close` waits for the worker and ends it (one thread
  a schedule that compiles, none after).

  Untraced (and not captured by a TinyJit), once a kernel compiles, each step's turn (its buffers prepared, its runner
  taken, its run: a `_Turn`) is handed over (`hand_over`) rather than run here: the worker runs the turns whose
  compiles are done after each compile, and this thread when it would wait (at the bound, or at the schedule's end)
  before it takes a queued compile; one at a time, in order (`_run_turns`). A kernel's run releases the GIL, as LLVM
  does, so runs and compiles on one thread overlap the next kernels' Python on the other. The first turn that raises
  stops the later ones, and its error (the same exception object) is raised here, after the same runs.

  Traced, each step's context (a kernel's, a copy's) is begun here in run order (`begin`: the same ids and parent as
  begun at its turn), the kernel's Python part recording into it (its opts, passes; `recorder.inside`), and goes on at
  its turn (`trace_context(begun=)`): its sources (the worker only compiles: it touches no recorder), run and end.
  A step never reached (an earlier one raised) ends `end_unreached`; none is started past a failed Python part."""

  def __init__(self, schedule: list[ScheduleItem], backend: str, start: Callable[[UOp, Any], Callable[[], Runner]],
               depth: int) -> None:
    self.schedule, self.backend, self.start, self.depth = schedule, backend, start, depth
    self.next = 0  # the next schedule index to start
    self.started: dict[int, Callable[[], Runner]] = {}  # schedule index -> its runner's getter
    self.asts: set[UOp] = set()  # the kernels started (an equal one later takes the runner made, from _runners)
    self.pool: Any = None  # the worker (a ThreadPoolExecutor of one thread), made at the first LLVM compile
    self.queue: collections.deque[_Job] = collections.deque()  # shared jobs given to the worker, in order
    self.traced = recorder.RECORDER is not None
    self.ctxs: dict[int, int] = {}  # traced: schedule index -> its context, begun ahead, until its turn
    self.failed = False  # traced: a kernel's Python part raised (no later step is begun: its turn ends the schedule)
    self.hands = not self.traced and capturing is None  # turns may be handed over (`hand_over`)
    self.jobs: dict[int, _Job] = {}  # schedule index -> its compile, until its turn is handed over
    self.starting: int | None = None  # the schedule index whose Python part runs now (its compile's index)
    self.turns: collections.deque[_Turn] = collections.deque()  # handed over, not yet seen done here, in order
    self.pending: collections.deque[_Turn] = collections.deque()  # handed over, not run yet, in order
    self.compiling = 0  # turns handed over with a compile of their own, not done: the bound's count
    self.run_lock = threading.Lock()  # held by the thread running turns (one at a time, from `pending`'s head)
    self.cv = threading.Condition()  # notified when a compile or a turn is done, or the turns' lock released
    self.halted = False  # a turn raised, or the schedule ends: no turn runs any more

  def _submit(self, job: Callable[[], Any]) -> Callable[[], Any]:
    if self.pool is None:
      from concurrent.futures import ThreadPoolExecutor
      self.pool = ThreadPoolExecutor(1, thread_name_prefix="tinyviz-compile")
      _switch_interval(+1)
    got = _Job(job, self)
    got.fut = self.pool.submit(got.run_on_worker)
    if getattr(job, "shared", False):
      self.queue.append(got)
    if self.starting is not None:
      self.jobs[self.starting] = got
    return got.result

  def _steal(self, waiting: _Job | None) -> bool:
    """Run the worker's earliest queued shared job here (not `waiting`, the worker's now); whether there was one."""
    while self.queue:
      job = self.queue.popleft()  # (one the worker started or finished is no longer this thread's to take)
      if job is not waiting and job.run_here():
        return True
    return False

  def _start(self, j: int) -> None:
    if not self.traced:
      self._start_item(j)
    elif not self.failed:
      si = self.schedule[j]
      copy = si.ast.op is Ops.COPY
      self.ctxs[j] = cid = recorder.RECORDER.ctx_begin(si.name, "copy" if copy else "kernel", si.ctx, push=False)
      if not copy:
        with recorder.inside(cid):
          self._start_item(j)

  def _start_item(self, j: int) -> None:
    si = self.schedule[j]
    if si.ast.op is Ops.COPY or si.ast in self.asts:
      return
    try:
      if kernel_backend(si, self.backend) != self.backend:
        return
    except RuntimeError:  # (buffers on two devices: raised again at its turn)
      return
    self.asts.add(si.ast)  # (before the runner cache is asked: a turn on the worker may be taking this one's runner)
    if _cached_runner((self.backend, si.ast)):
      return
    self.starting = j
    try:
      self.started[j] = self.start(si.ast, self._submit)
    except Exception as e:  # raised at the kernel's turn, as compiling it then would
      self.started[j] = functools.partial(_reraise, e)
      self.failed = self.traced
    finally:
      self.starting = None

  def _fill(self, i: int) -> None:
    """Start the steps past step i (about to run), in run order, those not started yet: untraced, until `depth` kernels
    past step i are started (what the worker's queue holds); a step that starts nothing (a copy, a kernel run before
    or repeated: 176 of a GPT step's 235) does not count, or `depth` steps would hold two kernels' compiles. Traced, the
    steps up to `depth` past step i (each holds a context begun ahead: at most `depth` open ahead). Handing turns over,
    only up to step i: this thread goes on to the next step at once (`hand_over` bounds it)."""
    n = len(self.schedule)
    if self.traced:
      n = min(n, i + 1 + self.depth)
    elif self.hands:
      n = min(n, i + 1)
    while self.next < n and (self.traced or self.next <= i or len(self.started) - (i in self.started) < self.depth):
      self._start(self.next)
      self.next += 1

  def runner(self, i: int) -> Runner:
    """The runner of schedule item i (about to run), the next ones' compiles started first."""
    self._fill(i)
    return self.take(i)

  def take(self, i: int) -> Runner:
    """The runner of schedule item i, once its compile is done (started before, by `_fill`)."""
    got = self.started.pop(i, None)
    si = self.schedule[i]
    if got is None:  # (not started here: cached, another backend's, or one already made for an equal kernel)
      return get_runner(si.ast, kernel_backend(si, self.backend))
    runner = got()
    _remember((self.backend, si.ast), runner, recorder.RECORDER)
    return runner

  def hand_over(self, i: int, turn: Callable[[], None]) -> bool:
    """Hand step i's turn (`turn`: its buffers prepared, its runner taken, its run) over, to run after the turns
    before it on whichever thread is free (`_run_turns`), once step i's Python part is made; whether it was. Not
    when traced or captured, nor while nothing compiles (no turn pending and none for step i): it runs here then,
    as before. Before step i's Python part, this thread waits (running turns, taking queued compiles) while more than
    `depth` turns handed over have compiles not yet run."""
    if not self.hands:
      return False
    self._reap()
    while self.compiling > self.depth:  # (read while the worker may be running turns: each is checked again)
      earliest = next((t for t in self.turns if not t.done), None)
      if earliest is not None:
        self._wait(earliest)
    self._fill(i)
    job = self.jobs.pop(i, None)
    if job is None and not self.turns:
      return False
    got = _Turn(turn, job)
    self.turns.append(got)
    with self.cv:
      self.pending.append(got)
      self.compiling += job is not None
    if job is None and self.pool is not None:  # (ready now: no compile of its own whose end would run it)
      self.pool.submit(self._run_turns)
    return True

  def _run_turns(self) -> bool:
    """Run the handed-over turns whose compiles are done, in order, while the next one's is (this thread or the
    worker: whichever holds the turns' lock, the other goes on); whether any ran. A turn that raises stops them."""
    if not self.run_lock.acquire(blocking=False):
      return False
    ran = False
    try:
      while True:
        with self.cv:
          if self.halted or not self.pending or not self.pending[0].ready():
            break
          t = self.pending.popleft()
        try:
          t.fn()
        except BaseException as e:  # (raised on the calling thread where it collects the turn, in order)
          t.error = e
          self.halted = True
        with self.cv:
          t.done = True
          self.compiling -= t.job is not None
          self.cv.notify_all()
        ran = True
    finally:
      self.run_lock.release()
      with self.cv:
        self.cv.notify_all()
    return ran

  def _wait(self, turn: _Turn) -> None:
    """Until `turn` has run: run ready turns here, else take a queued compile, else wait for the worker."""
    while not turn.done and not self.halted:
      if self._run_turns() or self._steal(None):
        continue
      with self.cv:
        if not (turn.done or self.halted or (self.pending and self.pending[0].ready() and not self.run_lock.locked())):
          self.cv.wait()
    self._reap()

  def _reap(self) -> None:
    """Drop the done turns from the front, raising the first error of one (its step's: the schedule stops there)."""
    while self.turns and (self.turns[0].done or self.halted):
      t = self.turns[0]
      if t.error is not None:
        raise t.error
      if not t.done:  # (halted by an earlier turn's error, raised before: this one never runs)
        return
      self.turns.popleft()

  def finish(self) -> None:
    """Wait for every turn handed over: a realize returns after every run (or raises a run's or compile's error)."""
    while self.turns and not (self.halted and not self.turns[0].done):
      self._wait(self.turns[-1])

  def begin(self, i: int) -> int | None:
    """Traced: the context of step i (about to run; begun now if not before), the next steps' begun and their
    compiles started first, in run order (each with the parent step i's would have: the current context)."""
    self._fill(i)
    return self.ctxs.pop(i, None)

  def end_unreached(self) -> None:
    """Traced: end the contexts begun ahead for steps the schedule never reached (an earlier step raised). They hold
    what was made for them (opts, passes) and say they did not run."""
    for cid in self.ctxs.values():
      if recorder.RECORDER is not None:
        recorder.RECORDER.ctx_end(cid, error=NOT_RUN)
    self.ctxs.clear()

  def close(self) -> None:
    """Stop the turns, wait for the worker's job in progress (a compile started for a kernel not reached is dropped)
    and end it."""
    self.halted = True
    self.queue.clear()
    if self.pool is not None:
      self.pool.shutdown(wait=True, cancel_futures=True)
      self.pool = None
      _switch_interval(-1)


class _Turn:
  """A step's turn handed over (`_Ahead.hand_over`): run once its compile (`job`, None: none of its own) is done."""
  __slots__ = ("fn", "job", "done", "error")

  def __init__(self, fn: Callable[[], None], job: _Job | None) -> None:
    self.fn, self.job, self.done, self.error = fn, job, False, None

  def ready(self) -> bool:
    return self.job is None or self.job.finished.is_set()


class _Job:
  """A compile given to the worker (its Future, `fut`), run by whichever thread takes it first: the worker, or (a
  shared job) the thread that would otherwise wait, which cancels the Future while it is still queued. Either keeps
  its outcome here for `result` and sets `finished`; the worker then runs the turns that were waiting for it."""
  __slots__ = ("job", "fut", "ahead", "ran", "value", "error", "finished")

  def __init__(self, job: Callable[[], Any], ahead: _Ahead) -> None:
    self.job, self.fut, self.ahead = job, None, ahead
    self.ran, self.value, self.error = False, None, None
    self.finished = threading.Event()

  def _run(self, catch: type[BaseException]) -> None:
    self.ran = True
    try:
      self.value = self.job()
    except catch as e:  # (raised by `result`, at the kernel's turn)
      self.error = e
    finally:
      self.finished.set()
      with self.ahead.cv:
        self.ahead.cv.notify_all()

  def run_on_worker(self) -> None:
    """The worker's: the compile, then the turns handed over that it made ready."""
    self._run(BaseException)
    if self.ahead.hands:
      self.ahead._run_turns()

  def run_here(self) -> bool:
    """Run the job on this thread if the worker has not started it; whether it did."""
    if self.ran or not self.fut.cancel():
      return False
    self._run(Exception)
    return True

  def result(self) -> Any:
    """The job's result, or its exception raised. Until it is done, this thread runs it itself if it is still queued,
    else the worker's next queued shared job, rather than wait (never on the worker: a turn it runs has its compile
    done)."""
    while not self.finished.is_set() and (self.run_here() or self.ahead._steal(self)):
      pass
    self.finished.wait()
    if self.error is not None:
      raise self.error
    return self.value


# the error a context begun ahead for a step never reached ends with (_Ahead.end_unreached)
NOT_RUN = "not run: an earlier step of its schedule raised"
# (compile workers alive, the process's switch interval before the first of them): schedules run on several threads
# at once lower it once and put it back when the last worker ends
_workers: list[Any] = [0, 0.0]
_workers_lock = threading.Lock()


def _switch_interval(delta: int) -> None:
  """A compile worker starts (+1) or ends (-1). A worker takes the GIL back after each of llvmlite's ~35 calls a
  compile, waiting for the calling thread's Python to give it up: up to the switch interval (5 ms) each time, ~0.15 s
  a kernel, several times LLVM's own time; while a worker lives the interval is AHEAD_SWITCH_S (~2 ms a kernel)."""
  with _workers_lock:
    if delta > 0 and _workers[0] == 0:
      _workers[1] = sys.getswitchinterval()
      sys.setswitchinterval(min(_workers[1], AHEAD_SWITCH_S))
    _workers[0] += delta
    if _workers[0] == 0:
      sys.setswitchinterval(_workers[1])


def _reraise(e: BaseException) -> Any:
  raise e


@functools.cache
def _cores() -> int:
  """The cores this process may run on (one: a compile worker would only take turns with this thread)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # (not on Linux)
    return os.cpu_count() or 1


def _ahead(schedule: list[ScheduleItem], backend: str, level: int) -> _Ahead | None:
  """Compile-ahead for this schedule's run, or None: DEBUG>=2 (each kernel's lines printed in order at its turn),
  COMPILE_AHEAD=0, one core, a one-kernel schedule, a backend with no two stages (or another factory registered in its
  name), or the backend's own veto (the LLVM backend's: BEAM, switches). Traced too (`_Ahead`: contexts begun ahead)."""
  if level >= 2 or backend not in _stage_loaders or len(schedule) < 2 or _cores() < 2:
    return None
  depth = compile_ahead_depth()
  if depth == 0:
    return None
  if backend not in _stages:
    _stages[backend] = _stage_loaders[backend]()
  factory, start, allowed = _stages[backend]
  if _factories.get(backend, factory) is not factory or not allowed():
    return None
  return _Ahead(schedule, backend, start, depth)


def run_schedule(schedule: list[ScheduleItem], backend: str | None = None) -> None:
  """Run every step of the schedule in order (its intermediates' memory planned first: plan_memory): a kernel on
  its buffers' device (`kernel_backend`), a COPY between devices (`copy_runner`, a "copy" trace context). The kernels
  are compiled ahead of their runs (`_Ahead`)."""
  level = debug.level()
  if level >= 1:
    debug.on_schedule(len(schedule))
  backend = backend or default_backend()  # (the environment read once a schedule, not once a kernel)
  outs_of = [((0, True),) if si.ast.op is Ops.COPY else output_slots(si.ast) for si in schedule]
  schedule = plan_memory(schedule, outs_of)
  if (hook := _schedule_hooks.get(backend)) is not None:
    hook([(si.ast, si.bufs) for si in schedule if si.ast.op is not Ops.COPY and si.bufs[0].device == "CPU"])
  ahead = _ahead(schedule, backend, level)
  try:
    for i, (si, outs) in enumerate(zip(schedule, outs_of)):
      turn = None if ahead is None else functools.partial(_run_item, si, outs, backend, level, i, ahead, True)
      if turn is None or not ahead.hand_over(i, turn):
        _run_item(si, outs, backend, level, i, ahead)
    if ahead is not None:
      ahead.finish()
  finally:
    if ahead is not None:
      ahead.close()
      ahead.end_unreached()


def _run_item(si: ScheduleItem, outs: tuple[tuple[int, bool], ...], backend: str, level: int, i: int,
              ahead: _Ahead | None, handed: bool = False) -> None:
  """Run schedule item i (its buffers allocated and prepared for its writes first); `handed`: its turn handed over
  (`_Ahead.hand_over`: untraced, on whichever thread runs turns, its compile done)."""
  bufs = si.bufs
  for j, b in enumerate(bufs):  # allocated on first use; an output written whole (and not read) is not zeroed
    if not b.allocated or _freed:
      b.ensure_allocated(zero=(j, True) not in outs or bufs.count(b) > 1)
  prepare_outputs(outs, bufs)
  traced = ahead if ahead is not None and ahead.traced and recorder.RECORDER is not None else None
  begun = None if traced is None else traced.begin(i)  # (its context, begun ahead)
  if si.ast.op is Ops.COPY:
    runner: Runner = copy_runner
    with trace_context(si.name, kind="copy", schedule=si.ctx, begun=begun):
      debug.run_kernel(si.name, runner, bufs)
  elif recorder.RECORDER is None and level < 2:
    runner = get_runner(si.ast, kernel_backend(si, backend)) if ahead is None else \
      ahead.take(i) if handed else ahead.runner(i)
    runner(bufs)
  else:
    from compiler.runtime.compiled import runs_recorded_here  # (lazy: the interp backend needs no LLVM)
    # a compile's passes and sources go into the kernel's context, and so does its run: a kernel compiled by an
    # earlier call (a schedule cache hit) filed its runs under that call's context, so this one read "not run"
    with trace_context(si.name, kind="kernel", schedule=si.ctx, begun=begun), runs_recorded_here():
      runner, made_s = (_runner(si.ast, kernel_backend(si, backend)) if traced is None else (traced.runner(i), None))
      debug.run_kernel(si.name, runner, bufs, made_s)
  if capturing is not None:
    capturing.append((si.name, runner, bufs, outs))
