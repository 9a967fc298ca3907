"""How BEAM times a candidate for real: codegen in a worker process, LLVM JIT and timed runs in this one, on
private copies of the kernel's buffers, with every candidate's output checked against the reference kernel's.

This is the runtime's half of BEAM: it knows kernel ASTs, Programs and machine code, never the optimizer's Kernel.
The driver (compiler.engine) hands `runtime_evaluator` to compiler.opt.search, which only sees (prepare, evaluate)."""
from __future__ import annotations

import itertools
import os
import statistics
import time
from typing import Any, Callable, Sequence

import numpy as np

from compiler.codegen import Program, get_program
from compiler.runtime.compiled import CompiledKernel, as_array
from compiler.runtime.llvm import ScratchJit, get_jit
from compiler.uop import KernelInfo, Ops, UOp, toposort

# timing one candidate: at least MIN_REPS runs (the first also checks the output) and MIN_TIME seconds, at most
# MAX_REPS runs; its time is the median of the runs after the first (steady on a loaded machine, where a minimum
# rewards one lucky run); a candidate whose first run is CUTOFF times slower than the best so far is not timed further
MIN_REPS, MAX_REPS, MIN_TIME, CUTOFF = 4, 15, 3e-3, 2.0


def load_program(prg: Program) -> CompiledKernel:
  """The LLVM half of compiling, in this process: a CompiledKernel for a codegen Program."""
  jf, _ = get_jit().compile(prg.src, prg.fname, want_text=False)
  return CompiledKernel(prg, jf.address, jf.compile_s, None)


_symbols = itertools.count()


def prepare_candidate(ast: UOp) -> tuple[str, Any]:
  """Runs in a BEAM worker: codegen and the whole LLVM compile (the slow part) down to object code, which this
  process's JIT then only links. ("obj", (program, symbol, object bytes)), or ("ir", program) if that fails."""
  prg = get_program(ast)
  try:
    symbol = f"{prg.fname}_beam{os.getpid()}_{next(_symbols)}"  # unique in the parent's engine
    return "obj", (prg, symbol, get_jit().object_code(prg.src, prg.fname, symbol))
  except RuntimeError:  # LLVM refused: the parent compiles the IR (and says why)
    return "ir", prg


def load_candidate(prepared: tuple[str, Any], scratch: ScratchJit | None = None) -> CompiledKernel:
  """The CompiledKernel of what prepare_candidate made: its object code linked into `scratch` (a ScratchJit, whose
  close() frees it), or into the process's JIT for good."""
  kind, payload = prepared
  if kind == "ir":
    return load_program(payload)
  prg, symbol, obj = payload
  if scratch is None:
    return CompiledKernel(prg, get_jit().add_object(obj, symbol), 0.0, None)
  return CompiledKernel(prg, scratch.add_object(obj, symbol), 0.0, None, engine=scratch)


def _name(ast: UOp) -> str:
  return ast.arg.name if isinstance(ast.arg, KernelInfo) else "kernel"


def beam_buffers(ast: UOp, bufs: Sequence[Any] | None, seed: int = 0) -> list[np.ndarray]:
  """Private arrays for every DEFINE_GLOBAL slot of a kernel AST: copies of `bufs` when given, else random data."""
  gl = {u.arg: u for u in toposort(ast) if u.op is Ops.DEFINE_GLOBAL}
  n = max(gl, default=-1) + 1
  if bufs is not None:
    if len(bufs) != n:
      raise ValueError(f"kernel {_name(ast)} has {n} buffers, got {len(bufs)}")
    return [np.array(as_array(b), copy=True) for b in bufs]
  rng = np.random.default_rng(seed)
  out = []
  for slot in range(n):
    if slot not in gl:
      raise ValueError(f"kernel {_name(ast)} skips buffer slot {slot}")
    dt, size = gl[slot].dtype.base, gl[slot].dtype.size
    if size < 0:
      raise ValueError(f"kernel {_name(ast)}: buffer {slot} has no size")
    npdt = dt.np
    if npdt.kind == "f":
      out.append(rng.standard_normal(size).astype(npdt))
    elif npdt.kind == "b":
      out.append(rng.integers(0, 2, size).astype(npdt))
    else:
      out.append(rng.integers(0, 8, size).astype(npdt))
  return out


def _var_vals(ast: UOp) -> dict[str, int]:
  # the largest value of each variable: the buffers are sized for it
  return {v.arg[0]: v.arg[2] for v in toposort(ast) if v.op is Ops.DEFINE_VAR}


class RuntimeEvaluator:
  """`evaluate(prepared) -> seconds` for beam_search; checks each candidate's output against the reference kernel
  `ast`'s first (`check`). The candidates' code goes into an engine of its own, freed by close() (beam_search calls it
  when it made the evaluator)."""

  def __init__(self, ast: UOp, bufs: Sequence[Any] | None, check: bool = True, threads: int | None = None):
    self.threads = threads  # the cores a candidate runs on (None: all, as a kernel runs by default)
    self.scratch = get_jit().scratch()
    self.arrays = beam_buffers(ast, bufs)
    self.var_vals = _var_vals(ast)
    self.outs = sorted({s.src[0].src[0].arg for s in ast.src})
    self.best = float("inf")
    self.want: list[np.ndarray] | None = None
    if check:
      ref = load_candidate(prepare_candidate(ast), self.scratch)
      self._poison()
      ref(self.arrays, self.var_vals)
      self.want = [self.arrays[i].copy() for i in self.outs]

  def _poison(self) -> None:
    # outputs start as garbage, so a candidate that skips elements can't pass on its predecessor's results
    for i in self.outs:
      a = self.arrays[i]
      a.fill(np.nan if a.dtype.kind == "f" else 7)

  def close(self) -> None:
    """Free the candidates' machine code."""
    self.scratch.close()

  def __call__(self, prepared: Any) -> float:
    ck = load_candidate(prepared, self.scratch)
    times: list[float] = []
    t_start = time.perf_counter()
    while len(times) < MAX_REPS and (len(times) < MIN_REPS or time.perf_counter() - t_start < MIN_TIME):
      if not times and self.want is not None:
        self._poison()
      t0 = time.perf_counter()
      ck(self.arrays, self.var_vals, threads=self.threads)
      times.append(time.perf_counter() - t0)
      if len(times) == 1 and self.want is not None:
        self._check()
      if times[0] > CUTOFF * self.best:
        break  # clearly slower than the best: one run says enough
    t = statistics.median(times[1:]) if len(times) > 2 else min(times)  # the first run warms caches (and checks)
    self.best = min(self.best, t)
    return t

  def _check(self) -> None:
    assert self.want is not None
    for i, w in zip(self.outs, self.want):
      got = self.arrays[i]
      close = np.isclose(got, w, rtol=1e-3, atol=1e-3, equal_nan=True)
      if not close.all():
        raise ValueError(f"wrong result: {int(np.sum(~close))} of {w.size} elements of buffer {i} differ")


def scratch_arrays(bufs: Sequence[Any]) -> dict[int, np.ndarray]:
  """id(buffer) -> a private copy of each distinct buffer (zeros where it has no memory yet), for running a
  schedule's kernels without touching the real buffers (an in-place update must run once, on real data)."""
  out: dict[int, np.ndarray] = {}
  for b in bufs:
    if id(b) not in out:
      out[id(b)] = np.array(b.np, copy=True) if b.allocated else np.zeros(b.size, dtype=b.dtype.np)
  return out


def time_in_sequence(steps: Sequence[Sequence[Callable[[], Any]]], rounds: int,
                     clock: Callable[[], float] = time.perf_counter, min_time: float = 0.0,
                     max_rounds: int = 0) -> list[list[list[float]]]:
  """Run the steps in order, round after round, and time each variant of a step that has more than one in its place
  in the sequence (after the steps before it, with the caches they leave). Round r runs variant r % n of each step of
  n variants; the first rounds, one per variant, only warm up. times[i][v]: variant v of step i's times, `rounds`
  of them, more (up to max_rounds) while some variant's add up to less than `min_time` seconds (one run of a short
  kernel says little); empty for a step of one variant."""
  n = max((len(vs) for vs in steps), default=1)
  times: list[list[list[float]]] = [[[] for _ in vs] for vs in steps]

  def run_round(r: int, timed: bool) -> None:
    for i, variants in enumerate(steps):
      if len(variants) == 1:
        variants[0]()
        continue
      v = r % len(variants)
      t0 = clock()
      variants[v]()
      t = clock() - t0
      if timed:
        times[i][v].append(t)

  for r in range(n):  # warm-up: each variant once
    run_round(r, False)
  done = 0
  while done < rounds or (done < max_rounds and any(sum(t) < min_time for ts in times if len(ts) > 1 for t in ts)):
    for r in range(n):
      run_round(r, True)
    done += 1
  return times


def runtime_evaluator(ast: UOp, bufs: Sequence[Any] | None, check: bool = True, threads: int | None = None) -> tuple[
    Callable[[UOp], Any], RuntimeEvaluator]:
  """(prepare, evaluate) that compile with compiler.codegen + compiler.runtime and time on real buffers; `ast` is the
  reference kernel every candidate's output is checked against."""
  return prepare_candidate, RuntimeEvaluator(ast, bufs, check, threads)
