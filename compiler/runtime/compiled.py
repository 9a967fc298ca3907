"""Compile a kernel AST and run it: `compile_kernel(ast) -> CompiledKernel`, called on numpy-backed buffers.

Multi-core: the kernel function takes a (start, end) range of its parallel loop (the THREAD axis, else the
outermost loop every store depends on); a call splits that range into contiguous chunks, one per core, that the
calling thread and the native workers of compiler.runtime.threadpool claim and run. Small kernels, and kernels
whose split runs measure slower than their runs on one thread, run on the calling thread only.
`THREADS=n` caps the thread count (default: the CPUs this process may use), as for the optimizer."""
from __future__ import annotations

import contextlib
import ctypes
import os
import statistics
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from compiler.codegen import Program, format_uops, get_program
from compiler.codegen.llvmir import bufs_in_array
from compiler.runtime.buffer import Buffer, array_address
from compiler.runtime.llvm import get_jit
from compiler.runtime.threadpool import MAX_JOB_WORDS, entry_for, get_pool, job_words, run_serial
from compiler.trace import recorder
from compiler.uop import UOp

# a chunk should have at least this much work (flops + bytes moved) to be worth a thread (~10-30 us)
MIN_WORK_PER_THREAD = 1 << 20
# ... and a kernel whose runs take less CPU time than the pool's measured hand-off allows (threadpool.split_min_s:
# a few hand-offs' worth), at most this much, runs on one thread (decided from the kernel's measured runs). The cap:
# a pool that measured its hand-off on a momentarily loaded machine does not rule out splitting for good
PARALLEL_MIN_S = 3e-4
# ... and one with the work whose split runs measure slower by the clock than its runs on one thread (a loaded
# machine: a worker that waited for a core) runs on one; every SPLIT_RETRY-th run goes the other way, so the
# medians of the RECENT_RUNS last runs of each way follow the machine's load
SPLIT_RETRY = 32
# ... but a kernel whose runs on one thread take at least LONG_RUN_S tries a split again every SERIAL_RETRY-th run:
# its hand-off is noise beside its run, so a split that loses (the other threads busy) costs little, while staying on
# one thread once the load went away halves its speed for SPLIT_RETRY runs (MNIST's step runs each kernel once: 32
# steps on one thread after a busy warm-up)
SERIAL_RETRY = 4
LONG_RUN_S = 0.02
RECENT_RUNS = 3
FAST_PLANS = 4  # plans of Buffer calls kept per kernel (by the buffers' addresses)
# .on: this thread's compiled kernels record their runs into the current trace context, not the one they were compiled
# in (runs_recorded_here; per thread, so another thread's kernels keep recording where they did)
_RUNS_HERE = threading.local()


@contextlib.contextmanager
def runs_recorded_here() -> Iterator[None]:
  """Within (this thread): a compiled kernel's run records go to the current trace context (a TinyJit replay's,
  which holds its kernels' runs), not the context the kernel was compiled in."""
  prev = getattr(_RUNS_HERE, "on", False)
  _RUNS_HERE.on = True
  try:
    yield
  finally:
    _RUNS_HERE.on = prev


def default_threads() -> int:
  env = os.environ.get("THREADS")
  if env:
    return max(1, int(env))
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except AttributeError:  # not on Linux
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class KernelTiming:
  """Times (s) of repeated runs with the work they did."""
  kname: str
  times: tuple[float, ...]
  min: float
  median: float
  flops: int
  bytes: int

  @property
  def gflops(self) -> float:
    return self.flops / self.min / 1e9 if self.min > 0 else 0.0

  @property
  def gbs(self) -> float:
    return self.bytes / self.min / 1e9 if self.min > 0 else 0.0


def as_array(b: Any) -> np.ndarray:
  """The numpy array behind a buffer argument (an ndarray, or a Buffer with `.np`)."""
  if isinstance(b, np.ndarray):
    return b
  arr = getattr(b, "np", None)
  if isinstance(arr, np.ndarray):
    return arr
  raise TypeError(f"kernel buffers must be numpy arrays or Buffers, got {type(b).__name__}")


class CompiledKernel:
  """A kernel compiled to machine code. Call it with buffers in slot order (numpy arrays or Buffers)."""

  def __init__(self, prg: Program, address: int, compile_s: float, ctx: int | None, engine: Any = None):
    """engine: the ScratchJit the code at `address` lives in (None: the process's JIT, where code stays)."""
    self.program, self.name, self.address, self.compile_s, self.ctx = prg, prg.name, address, compile_s, ctx
    self.engine = engine
    self.fxn = self._cfunc(address)
    self._alias_fxn: Any = None
    self.threads = default_threads()
    # the plan of the last run, reused while the same arrays come back (a repeat call costs no pointer reads,
    # overlap checks or chunking); weak references, so a cached kernel keeps no buffer alive
    self._last: tuple | None = None
    self._serial = False  # its runs were measured too short, or its split runs slower, to be split across threads
    self._walls: tuple[deque, deque] = (deque(maxlen=RECENT_RUNS), deque(maxlen=RECENT_RUNS))  # (split, one thread)
    self._runs = 0  # runs with enough work to split since the way last changed (every SPLIT_RETRY-th: the other)
    self._switched = False  # the way just changed: the next plan is of arrays that ran before (its run is a sample)
    self.last_s = 0.0  # how long the last run took (the kernel's code only: no checks, no planning)
    # the scheduler's Buffers, in a kernel without variables: what each slot needs ((dtype, elements), None where
    # no check applies), checked against the Buffer's own dtype and size; and the last FAST_PLANS such calls' plans
    # by the buffers' addresses and sizes (ints: nothing kept alive, and an equal address of a new array is the same
    # plan; more than one: two pooled arrays of one kind trade places between an intermediate and an output from one
    # call to the next, as the order their buffers die in changes). False: a bound below 0, no Buffer plan ever
    self._needs: list[tuple[Any, int]] | bool | None = None
    self._plain = not prg.vars  # (read once: a launch tests it every run)
    self._fast: dict[tuple, tuple] = {}
    self._static: tuple[int | None, int] | None = None  # (parallel loop's extent, flops) of a kernel without variables

  def _cfunc(self, address: int) -> Any:
    prg = self.program
    wide = prg.par_size is not None and prg.par_size.dtype.itemsize == 8  # an int64-indexed parallel loop
    core = ctypes.c_int64 if wide else ctypes.c_int32
    ptrs = 1 if bufs_in_array(prg.nbufs) else prg.nbufs
    argtypes = [ctypes.c_void_p] * ptrs + [ctypes.c_int32] * len(prg.vars) + [core] * 2
    return ctypes.CFUNCTYPE(None, *argtypes)(address)

  def _fxn_for(self, arrs: list[np.ndarray], addrs: list[int] | None = None) -> Any:
    """The compiled function; a variant without `noalias` when an output overlaps another buffer (in-place)."""
    if addrs is None:
      addrs = [array_address(a) for a in arrs]
    spans = [(p, p + a.nbytes) for p, a in zip(addrs, arrs)]

    def overlaps(i: int, j: int) -> bool:
      return i != j and spans[i][0] < spans[j][1] and spans[j][0] < spans[i][1]
    if not any(overlaps(i, j) for i in self.program.outs for j in range(len(arrs))):
      return self.fxn
    if self._alias_fxn is None:
      src = self.program.src.replace("ptr noalias %data", "ptr %data")
      jf, _ = get_jit().compile(src, self.program.fname, want_text=False)
      self._alias_fxn = self._cfunc(jf.address)
    return self._alias_fxn

  def __repr__(self) -> str:
    return f"<CompiledKernel {self.name} bufs={self.program.nbufs} vars={list(self.program.var_names)}>"

  # ---- argument checks (every way to run the kernel starts with _arrays)
  def _arrays(self, bufs: Sequence[Any]) -> list[np.ndarray]:
    if self.engine is not None and self.engine.closed:  # its code is freed: calling it would jump into nothing
      raise RuntimeError(f"kernel {self.name!r}: its machine code was freed (a BEAM candidate, after the search)")
    prg = self.program
    if len(bufs) != prg.nbufs:
      raise ValueError(f"kernel {self.name!r} takes {prg.nbufs} buffers, got {len(bufs)}")
    arrs = [as_array(b) for b in bufs]
    for slot, (a, dt) in enumerate(zip(arrs, prg.buf_dtypes)):
      if dt is None:
        continue
      if a.dtype != dt.np:
        raise TypeError(f"kernel {self.name!r}: buffer {slot} must be {dt.np}, got {a.dtype}")
      if not a.flags.c_contiguous:
        raise ValueError(f"kernel {self.name!r}: buffer {slot} is not C-contiguous")
      if slot in prg.outs and not a.flags.writeable:
        raise ValueError(f"kernel {self.name!r}: output buffer {slot} is read-only")
    return arrs

  def _vars(self, var_vals: Mapping[str, int] | None) -> list[int]:
    vv = dict(var_vals or {})
    out = []
    for v in self.program.vars:
      name, lo, hi = v.arg
      if name not in vv:
        raise ValueError(f"kernel {self.name!r}: no value for variable {name!r}")
      x = int(vv[name])
      if not lo <= x <= hi:
        raise ValueError(f"kernel {self.name!r}: variable {name}={x} is outside [{lo}, {hi}]")
      out.append(x)
    return out

  def _check_bounds(self, arrs: list[np.ndarray], var_vals: Mapping[str, int] | None) -> None:
    for slot, (lo, hi) in self.program.index_bounds(var_vals).items():
      if lo < 0 or hi >= arrs[slot].size:
        raise IndexError(f"kernel {self.name!r}: buffer {slot} has {arrs[slot].size} elements, the kernel "
                         f"accesses [{lo}, {hi}]")

  def _buffer_needs(self) -> list[tuple[Any, int]] | bool:
    """Per slot (dtype, least size) a Buffer must have to pass _arrays and _check_bounds; False (remembered, so a
    call does not redo the bounds) if a bound is < 0: the general path checks every such call."""
    if self._needs is None:
      bounds = self.program.index_bounds(None)
      if any(lo < 0 for lo, _ in bounds.values()):
        self._needs = False
      else:
        self._needs = [(dt, bounds[i][1] + 1 if i in bounds else 0) for i, dt in enumerate(self.program.buf_dtypes)]
    return self._needs

  def _buffer_plan(self, bufs: Sequence[Any]) -> tuple | None:
    """The plan of a plain call on allocated Buffers (whose arrays are their own: 1-D, C-contiguous, writable),
    checked as _arrays and _check_bounds would; None where the general path must decide (and raise)."""
    needs = self._needs if self._needs is not None else self._buffer_needs()
    if not needs or len(bufs) != len(needs) or (self.engine is not None and self.engine.closed):
      return None
    addrs = []
    for b, (dt, least) in zip(bufs, needs):
      if type(b) is not Buffer or not b.addr or b.size < least or (dt is not None and b.dtype is not dt and
                                                                     b.dtype.np != dt.np):
        return None
      addrs.append(b.addr)
    key = (*addrs, *[b.size for b in bufs])
    fast = self._fast
    plan = fast.get(key)
    if plan is not None:
      return plan
    plan = self._plan([b.np for b in bufs], [], None, None, addrs=addrs)
    if len(fast) >= FAST_PLANS:
      del fast[next(iter(fast))]
    fast[key] = plan
    return plan

  # ---- running
  def __call__(self, bufs: Sequence[Any], var_vals: Mapping[str, int] | None = None,
               threads: int | None = None) -> None:
    """Run the kernel once on `bufs` (slot order); `threads` caps the cores used (default: all)."""
    if var_vals is None and threads is None and self._plain and recorder.RECORDER is None:
      plan = self._buffer_plan(bufs)
      if plan is not None:
        self._run_plan(plan)
        return
    arrs = self._arrays(bufs)
    vals = self._vars(var_vals)
    self._check_bounds(arrs, var_vals)
    if recorder.RECORDER is None:
      self._run(arrs, vals, var_vals, threads)
      return
    # while tracing, the run the program makes is timed and recorded (no extra runs: what the trace costs a program
    # is what it costs to record, bench/bench_viz_program.py); ck.time() measures steadier figures on request
    plan = self._plan(arrs, vals, var_vals, threads)
    ts = time.time()
    t0 = time.perf_counter()
    self._run(arrs, vals, var_vals, threads, plan)
    dt = time.perf_counter() - t0
    self._record(KernelTiming(self.name, (dt,), dt, dt, self.program.flops(var_vals), self.nbytes(arrs)), ts)

  def _chunks(self, var_vals: Mapping[str, int] | None, arrs: list[np.ndarray], threads: int | None) -> list:
    prg = self.program
    if prg.vars:
      n, flops = prg.par_extent(var_vals), prg.flops(var_vals)
    else:  # (a walk of the loop's size expression and a cache lookup, once, not every call)
      if self._static is None:
        self._static = (prg.par_extent(None), prg.flops(None))
      n, flops = self._static
    if n is None:
      return [(0, 1)]
    if n <= 0:
      return []
    work = flops + self._nbytes(arrs)
    t = 1 if self._serial else min(threads or self.threads, n, max(1, work // MIN_WORK_PER_THREAD))
    bounds = [n * i // t for i in range(t + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(t) if bounds[i] < bounds[i + 1]]

  def launch(self, bufs: Sequence[Any]) -> None:
    """`self(bufs)` (no variable values, no thread cap) in the fewest Python steps: Buffers at addresses seen
    before run their remembered plan at once (TinyJit's replay launches every kernel this way)."""
    if self._plain and recorder.RECORDER is None:
      plan = self._buffer_plan(bufs)
      if plan is not None:
        self._run_plan(plan)
        return
    self(bufs)

  def _run(self, arrs: list[np.ndarray], vals: list[int], var_vals: Mapping[str, int] | None,
           threads: int | None, plan: tuple | None = None) -> None:
    self._run_plan(plan if plan is not None else self._plan(arrs, vals, var_vals, threads))

  def _run_plan(self, plan: tuple) -> None:
    fxn, args, chunks, job, ran = plan
    t0 = time.perf_counter()
    if len(chunks) == 1:
      fxn(*args, *chunks[0])
    elif job is None or not job[0].run(job[1]):  # (no workers, or another thread's job holds them: this thread)
      run_serial(fxn, args, chunks)
    self.last_s = dt = time.perf_counter() - t0
    # what says nothing about splitting is no sample: a plan's first run (its buffers' first touch, page faults: 0.37
    # ms of softmax's 0.04 ms kernel), and a split run that had to wake a parked worker (a run after compiling, or
    # after a while on one thread: 0.17 ms of mlp's 0.06; the next split run finds it spinning; beside a run of
    # LONG_RUN_S the wake-up is noise, and a kernel run once a step would otherwise never find a worker spinning)
    if not ran[0] or (job is not None and job[0].woke and dt < LONG_RUN_S):
      ran[0] = True
      return
    if len(chunks) > 1 or self._serial:
      self._observe(dt, len(chunks))
    else:  # (what _observe does with such a run, without the call)
      self._walls[1].append(dt)

  def _observe(self, dt: float, nchunks: int) -> None:
    """Decide from a run's duration whether later runs split across threads (the plan is made anew on a change):
    not when the work is too little, nor while split runs take longer by the clock than runs on one thread."""
    split, single = self._walls
    (split if nchunks > 1 else single).append(dt)
    if nchunks <= 1 and not self._serial:
      return  # a run on one thread of a kernel not made serial: nothing to decide (a sample for when it splits)
    # about the CPU time of the whole run (a split run's overhead counted: the way back from one thread is harder)
    cpu = dt * max(1, nchunks)
    serial = cpu < _split_min_s(self.threads - 1)
    if not serial:  # enough work to split: the way that measured faster, and now and then the other way once
      serial = bool(split and single) and statistics.median(single) < statistics.median(split)
      self._runs += 1
      retry = SERIAL_RETRY if serial and statistics.median(single) >= LONG_RUN_S else SPLIT_RETRY
      if not single or self._runs % retry == 0:
        serial = not serial
        # the way tried again is judged by what it does now, not by samples from another load
        (single if serial else split).clear()
    if serial != self._serial and (nchunks > 1 or self._serial):
      self._serial, self._last, self._switched, self._runs = serial, None, True, 0
      self._fast.clear()
      if not serial and self.threads > 1:  # the next run splits: workers parked since the last split start now
        # (that run is measured without their wake-up)
        get_pool(self.threads - 1).wake()

  def _plan(self, arrs: list[np.ndarray], vals: list[int], var_vals: Mapping[str, int] | None,
            threads: int | None, addrs: list[int] | None = None) -> tuple:
    """(function, leading arguments, (start, end) chunks, the pool's job or None, [ran before]) of one run; the last
    one is reused for the same arrays
    (an ndarray's address and size never change, and a dead array's weak reference no longer matches). Given the
    arrays' addresses (Buffers know theirs), made anew and not remembered here (the Buffer path keeps its own)."""
    key = (tuple(vals), threads)
    last = self._last
    keep = addrs is None
    if keep and last is not None and last[0] == key and len(last[1]) == len(arrs) and \
        all(r() is a for r, a in zip(last[1], arrs)):
      return last[2]
    if addrs is None:
      addrs = [array_address(a) for a in arrs]
    ptrs: Any = addrs
    if bufs_in_array(self.program.nbufs):  # one array of pointers (the tuple keeps it alive while the plan runs)
      ptrs = [(ctypes.c_void_p * len(ptrs))(*ptrs)]
    fxn, chunks = self._fxn_for(arrs, addrs), self._chunks(var_vals, arrs, threads)
    # [ran before]: a plan made anew only because the way changed is of arrays already touched (its run is a sample)
    plan = (fxn, (*ptrs, *vals), chunks, self._job(fxn, ptrs, vals, chunks, threads), [self._switched])
    self._switched = False
    if not keep:
      return plan
    try:
      self._last = (key, tuple(weakref.ref(a) for a in arrs), plan)
    except TypeError:  # an array type without weak references: no reuse
      self._last = None
    return plan

  def _job(self, fxn: Any, ptrs: list, vals: list[int], chunks: list, threads: int | None) -> tuple | None:
    """(pool, job words) of a split run's chunks; None for one chunk, or without workers (THREADS=1)."""
    workers = self.threads - 1
    if len(chunks) <= 1 or workers < 1 or len(ptrs) + len(vals) > MAX_JOB_WORDS:
      return None
    pool = get_pool(workers)
    prg = self.program
    wide = prg.par_size is not None and prg.par_size.dtype.itemsize == 8
    addrs = [p if isinstance(p, int) else ctypes.addressof(p) for p in ptrs]  # (an array of pointers: its address)
    joiners = min(workers, (threads or self.threads) - 1, len(chunks) - 1)
    entry = entry_for(len(addrs), len(vals), wide)
    fn = ctypes.cast(fxn, ctypes.c_void_p).value
    return pool, job_words(entry, fn, chunks[-1][1], len(chunks), joiners, [*addrs, *vals])

  def nbytes(self, bufs: Sequence[Any]) -> int:
    """Bytes moved by one run: sizes of the buffers read plus the buffers written."""
    return self._nbytes([as_array(b) for b in bufs])

  def _nbytes(self, arrs: list[np.ndarray]) -> int:
    return sum(arrs[i].nbytes for i in self.program.ins) + sum(arrs[i].nbytes for i in self.program.outs)

  def time(self, bufs: Sequence[Any], var_vals: Mapping[str, int] | None = None, reps: int = 10, warmup: int = 1,
           threads: int | None = None, record: bool = True) -> KernelTiming:
    """Run `warmup` + `reps` times; the timing of the reps (min, median, FLOPs, bytes) also goes into the trace."""
    if reps < 1:
      raise ValueError("reps must be >= 1")
    arrs = self._arrays(bufs)
    vals = self._vars(var_vals)
    self._check_bounds(arrs, var_vals)
    plan = self._plan(arrs, vals, var_vals, threads)
    for _ in range(warmup):
      self._run(arrs, vals, var_vals, threads, plan)
    times = []
    ts = time.time()
    for _ in range(reps):
      t0 = time.perf_counter()
      self._run(arrs, vals, var_vals, threads, plan)
      times.append(time.perf_counter() - t0)
    tm = KernelTiming(self.name, tuple(times), min(times), statistics.median(times), self.program.flops(var_vals),
                      self.nbytes(arrs))
    if record:
      self._record(tm, ts)
    return tm

  def _record(self, tm: KernelTiming, ts: float) -> None:
    """A `run` record of the timed runs that began at `ts` (epoch seconds: the viewer's timeline places them)."""
    fields = {"ctx": self.ctx} if self.ctx is not None and not getattr(_RUNS_HERE, "on", False) else {}
    recorder.record("run", kname=self.name, times=list(tm.times), min=tm.min, median=tm.median, flops=tm.flops,
                    bytes=tm.bytes, gflops=tm.gflops, gbs=tm.gbs, ts=ts, **fields)


def _split_min_s(workers: int) -> float:
  """The least CPU time of a run worth splitting: the pool's measured hand-off's worth, at most PARALLEL_MIN_S."""
  return min(PARALLEL_MIN_S, get_pool(workers).split_min_s) if workers >= 1 else PARALLEL_MIN_S


# how a staged compile's LLVM part runs: `submit(job)` runs job() now or on a worker thread and returns a getter of its
# result, which raises the job's exception (compiler.realize's compile-ahead gives a worker's; `run_now` runs it here)
Submit = Callable[[Callable[[], Any]], Callable[[], Any]]


def shared(job: Callable[[], Any]) -> Callable[[], Any]:
  """Mark `job` as one that may run on any thread, at the same time as other such jobs (LLVMJit.compile_object's:
  each compile in an LLVM context and target machine of its own): compile-ahead's waiting thread may run it itself
  rather than wait for the worker to reach it (compiler.realize._Ahead)."""
  job.shared = True  # type: ignore[attr-defined]
  return job


def run_now(job: Callable[[], Any]) -> Callable[[], Any]:
  """Submit that runs the job at once, on this thread (an exception is raised here, as the job's caller's)."""
  got = job()
  return lambda: got


def compile_for_disk(ast: UOp, tag: str) -> tuple[CompiledKernel, str, bytes | None]:
  """compile_kernel untraced, through object code for the disk cache: (kernel, its symbol (the kernel's function
  name and `tag`, the cache entry's name: unique to its code), its object code, None where the IR was compiled
  before in this process)."""
  return start_for_disk(ast, tag, run_now)()


def start_for_disk(ast: UOp, tag: str, submit: Submit) -> Callable[[], tuple[CompiledKernel, str, bytes | None]]:
  """compile_for_disk in two stages: codegen now (Python, on this thread), LLVM's part (which releases the GIL)
  through `submit`; the getter it returns gives compile_for_disk's answer (or raises what the compile raised)."""
  prg = get_program(ast)
  symbol = f"{prg.fname}_c{tag}"
  jit = get_jit()
  got = submit(shared(lambda: jit.compile_object(prg.src, prg.fname, symbol)))

  def finish() -> tuple[CompiledKernel, str, bytes | None]:
    jf, obj = got()
    return CompiledKernel(prg, jf.address, jf.compile_s if obj is not None else 0.0, None), jf.symbol, obj
  return finish


def start_untraced(ast: UOp, submit: Submit) -> Callable[[], CompiledKernel]:
  """compile_kernel while nothing records, in compile_for_disk's two stages (no object code kept: the disk cache
  is off)."""
  prg = get_program(ast)
  jit = get_jit()
  got = submit(lambda: jit.compile(prg.src, prg.fname, want_text=False))

  def finish() -> CompiledKernel:
    jf, cached = got()
    return CompiledKernel(prg, jf.address, 0.0 if cached else jf.compile_s, None)
  return finish


def load_kernel(prg: Program, symbol: str, obj: bytes) -> CompiledKernel:
  """The kernel of a Program and its object code from the disk cache (compile_for_disk's), linked into the JIT."""
  t0 = time.perf_counter()
  address = get_jit().link_cached(obj, symbol)
  return CompiledKernel(prg, address, time.perf_counter() - t0, None)


def start_traced(ast: UOp, submit: Submit) -> Callable[[], CompiledKernel]:
  """compile_kernel while recording, in two stages: codegen (its traced passes) and the uops listing now, into the
  current context (a kernel's, maybe opened ahead of its turn: compiler.realize._Ahead); LLVM's part through `submit`
  (maybe a worker thread, which touches no recorder: the optimized IR and assembly come back as texts; a `shared`
  job, LLVMJit.compile_traced, which the thread waiting for it may run itself, two compiles at once); the getter
  records the sources into that context, at the kernel's turn, and gives the kernel (later runs recorded there too)."""
  prg = get_program(ast)
  rec = recorder.RECORDER
  ctx = rec.current_ctx
  # each position's trace node (in prg.uops): with each line's positions, which a reader makes from the text
  # (vztrace.linemap, format 2.8: not recorded), the viewer's way from a line to its nodes in the kernel's graph
  uops = [rec.node_id(u) for u in prg.uops]
  listing = format_uops(prg.uops)
  jit = get_jit()
  # (named here, in run order: the names compiling each kernel at its turn gives, whichever thread compiles it)
  symbol = jit.symbol_for(prg.src, prg.fname)

  def llvm_part() -> tuple[float, Any, bool]:
    ts = time.time()  # when the LLVM compile began (with compile_s, its span on the viewer's timeline)
    if symbol is None:  # (compiled before, or being compiled without texts)
      return (ts, *jit.compile(prg.src, prg.fname, want_text=True))
    return (ts, *jit.compile_traced(prg.src, prg.fname, symbol))
  got = submit(llvm_part if symbol is None else shared(llvm_part))

  def finish() -> CompiledKernel:
    ts, jf, cached = got()
    compile_s = 0.0 if cached else jf.compile_s
    for kind, text, cs in (("uops", listing, 0.0), ("llvm_ir", prg.src, compile_s), ("opt_ir", jf.opt_ir, compile_s),
                           ("asm", jf.asm, compile_s)):
      recorder.record("source", kind=kind, text=text, compile_s=cs, ts=ts, uops=uops, ctx=ctx)
    return CompiledKernel(prg, jf.address, compile_s, ctx)
  return finish


def compile_kernel(ast: UOp) -> CompiledKernel:
  """Codegen (traced passes) + LLVM JIT of a kernel AST. Its sources (uops, LLVM IR, optimized IR, assembly: the
  traced compile makes the last two, compiler.runtime.llvm) and compile time go into the current trace context;
  later runs are recorded into the same context."""
  return (start_untraced if recorder.RECORDER is None else start_traced)(ast, run_now)()
