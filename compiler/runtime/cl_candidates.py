"""How BEAM times a candidate on the OpenCL device (BACKEND=cl): rendered to OpenCL C, built by the device's compiler,
launched on device buffers that stay on the device for the whole search, timed by OpenCL's profiling events, and
its output checked against the reference kernel's.

The runtime's half of BEAM on CL, as compiler.runtime.candidates is the LLVM one: it knows kernel ASTs and OpenCL
programs, never the optimizer's Kernel (compiler.engine hands `ClEvaluator` to compiler.opt.search). Candidates are
built here, not through `Device.build`: that keeps every kernel it built for the process's life, and a search
builds hundreds that are run a few times each. A search builds each distinct OpenCL source once (candidates whose
opts differ may render alike), and a round's candidates in threads (`prefetch`): pyopencl lets go of the GIL while
the device's compiler runs, and pocl's takes 0.1-2 s a kernel."""
from __future__ import annotations

import math
import os
import statistics
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from compiler.codegen.opencl import ClProgram, cl_program
from compiler.runtime.candidates import CUTOFF, MAX_REPS, MIN_REPS, MIN_TIME, beam_buffers
from compiler.runtime.opencl import BUILD_OPTIONS, Device, OpenCLError, get_device
from compiler.uop import Ops, UOp, toposort


def build_threads() -> int:
  """Threads that build a round's candidates: BEAM_WORKERS if set, else the cores this process may use."""
  env = os.environ.get("BEAM_WORKERS", "")
  if env:
    return max(1, int(env))
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except (AttributeError, OSError):
    return os.cpu_count() or 1


class ClEvaluator:
  """`evaluate(ast) -> seconds` for beam_search on the OpenCL device: the candidate AST rendered and built, run at
  least MIN_REPS times and MIN_TIME seconds of device time (at most MAX_REPS; one run when its first is CUTOFF times
  the best so far), the median of its runs after the first, which is checked against the reference kernel `ast`'s
  output. The buffers (copies of `bufs`, or random data) are copied to the device once; close() frees them."""

  def __init__(self, ast: UOp, bufs: Sequence[Any] | None, device: Device | None = None, check: bool = True):
    self.dev = device if device is not None else get_device()
    self.arrays = beam_buffers(ast, bufs)
    self.var_vals = {v.arg[0]: v.arg[2] for v in toposort(ast) if v.op is Ops.DEFINE_VAR}  # (the largest value)
    self.outs = sorted({s.src[0].src[0].arg for s in ast.src})
    self.dbufs = [self.dev.alloc(a.nbytes) for a in self.arrays]
    for d, a in zip(self.dbufs, self.arrays):
      self.dev.copy_in(d, a)
    self.best = math.inf
    self.builds = 0  # programs built (a search's cost, counted): one per distinct source
    self._programs: dict[UOp, ClProgram] = {}  # (rendering costs ~0.1 s a candidate: once per AST)
    self._built: dict[str, Any] = {}  # source -> its cl.Kernel, or the OpenCLError its build raised
    self.want: list[np.ndarray] | None = None
    if check:
      prg, kernel = self._build(ast)
      self._poison()
      self._launch(prg, kernel)
      self.want = [self._read(i) for i in self.outs]

  def _program(self, ast: UOp) -> ClProgram:
    if (prg := self._programs.get(ast)) is None:
      prg = self._programs[ast] = cl_program(ast, self.dev.limits.fp16)
    return prg

  def _compile(self, prg: ClProgram) -> Any:
    """The cl.Kernel of prg's source, or the OpenCLError its build raised (run in build threads)."""
    import pyopencl as cl  # (installed wherever a Device could be made)
    try:
      return cl.Kernel(cl.Program(self.dev.ctx, prg.src).build(options=list(BUILD_OPTIONS)), prg.fname)
    except cl.Error as e:
      return OpenCLError(f"OpenCL build of kernel {prg.fname!r} failed: {str(e)[:500]}")

  def prefetch(self, asts: Sequence[UOp]) -> None:
    """Build the distinct sources of a round's candidates not built yet, in build_threads() threads, before any is
    timed (a build beside a timed run would slow it). A candidate that fails to render is left to __call__."""
    todo: dict[str, ClProgram] = {}
    for ast in asts:
      try:
        prg = self._program(ast)
      except Exception:  # (__call__ renders it again and the search records the error)
        continue
      if prg.src not in self._built:
        todo.setdefault(prg.src, prg)
    n = min(build_threads(), len(todo))
    if n <= 1:
      results = [self._compile(p) for p in todo.values()]
    else:
      with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(self._compile, todo.values()))
    self._built.update(zip(todo, results))
    self.builds += len(todo)

  def _build(self, ast: UOp) -> tuple[ClProgram, Any]:
    prg = self._program(ast)
    if prg.src not in self._built:
      self._built[prg.src] = self._compile(prg)
      self.builds += 1
    kernel = self._built[prg.src]
    if isinstance(kernel, OpenCLError):
      raise kernel
    return prg, kernel

  def _launch(self, prg: ClProgram, kernel: Any) -> float:
    gsize, lsize = prg.global_dims(self.var_vals), prg.local_dims(self.var_vals)
    lim = self.dev.limits
    if lsize is not None and (math.prod(lsize) > lim.max_work_group_size or
                              any(n > m for n, m in zip(lsize, lim.max_work_item_sizes))):
      raise OpenCLError(f"work-group {lsize} exceeds the device's limits")
    args = self.dbufs + [np.int32(self.var_vals[v]) for v in prg.var_names]
    return self.dev.launch(kernel, gsize, lsize, args)

  def _poison(self) -> None:
    # outputs start as garbage, so a candidate that skips elements can't pass on its predecessor's results
    for i in self.outs:
      a = self.arrays[i]
      self.dev.copy_in(self.dbufs[i], np.full_like(a, np.nan if a.dtype.kind == "f" else 7))

  def _read(self, slot: int) -> np.ndarray:
    out = np.empty_like(self.arrays[slot])
    self.dev.copy_out(out, self.dbufs[slot])
    return out

  def _check(self) -> None:
    assert self.want is not None
    for i, w in zip(self.outs, self.want):
      close = np.isclose(self._read(i), w, rtol=1e-3, atol=1e-3, equal_nan=True)
      if not close.all():
        raise ValueError(f"wrong result: {int(np.sum(~close))} of {w.size} elements of buffer {i} differ")

  def __call__(self, ast: UOp) -> float:
    prg, kernel = self._build(ast)
    times: list[float] = []
    while len(times) < MAX_REPS and (len(times) < MIN_REPS or sum(times) < MIN_TIME):
      if not times and self.want is not None:
        self._poison()
      times.append(self._launch(prg, kernel))
      if len(times) == 1 and self.want is not None:
        self._check()
      if times[0] > CUTOFF * self.best:
        break  # clearly slower than the best: one run says enough
    t = statistics.median(times[1:]) if len(times) > 2 else min(times)
    self.best = min(self.best, t)
    return t

  def close(self) -> None:
    """Free the device buffers and the search's programs."""
    for d in self.dbufs:
      d.release()
    self.dbufs = []
    self._built.clear()
    self._programs.clear()


__all__ = ["ClEvaluator"]
