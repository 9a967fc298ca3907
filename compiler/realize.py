"""Running a schedule: every kernel on a pluggable backend, each inside a "kernel" trace context.

A backend is a factory `ast -> runner`, where `runner(bufs)` runs the kernel on the Buffers in slot order. "llvm"
(the default) optimizes, compiles and runs through compiler.engine (the driver); "interp" is the numpy reference
interpreter. `BACKEND` (env) picks the default; other backends can be added with `register_backend`.
"""
from __future__ import annotations

import os
import weakref
from typing import Callable, Sequence

from compiler import debug
from compiler.runtime.buffer import Buffer
from compiler.schedule import ScheduleItem
from compiler.trace import recorder
from compiler.trace.recorder import trace_context
from compiler.uop import UOp

Runner = Callable[[Sequence[Buffer]], None]
BackendFactory = Callable[[UOp], Runner]

DEFAULT_BACKEND = "llvm"
RUNNER_CACHE_SIZE = 512


def _interp_factory() -> BackendFactory:
  from compiler.runtime.interpreter import InterpretedKernel
  return lambda ast: InterpretedKernel(ast)


def _llvm_factory() -> BackendFactory:
  """The LLVM backend: optimize, compile and run (`compiler.engine.get_runner`, the driver)."""
  from compiler.engine import get_runner  # lazy: loads llvmlite only when a kernel runs on it
  return get_runner


_loaders: dict[str, Callable[[], BackendFactory]] = {"interp": _interp_factory, "llvm": _llvm_factory}
_factories: dict[str, BackendFactory] = {}
# (runner, a weak reference to the recorder it was compiled under): a trace gets every kernel's passes and sources,
# so a kernel compiled before it started (or for another trace) is compiled again, once, for it, and its runs name
# this trace's context (weak: an ended trace's recorder, and the nodes it holds, must not live on here)
_runners: dict[tuple[str, UOp], tuple[Runner, weakref.ref | None]] = {}


def register_backend(name: str, factory: BackendFactory) -> None:
  """Make `name` a backend: `factory(ast)` returns a runner `runner(bufs)`."""
  _factories[name] = factory
  for key in [k for k in _runners if k[0] == name]:
    del _runners[key]


def backend_names() -> list[str]:
  return sorted(set(_loaders) | set(_factories))


def default_backend() -> str:
  return os.environ.get("BACKEND", "") or DEFAULT_BACKEND


def get_runner(ast: UOp, backend: str | None = None) -> Runner:
  """The runner for a kernel AST on a backend (compiled once per AST)."""
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
    runner = factory(ast)
    tracing = recorder.RECORDER  # (a pending recorder became a real one at the first traced event)
  _runners[key] = (runner, None if tracing is None else weakref.ref(tracing))
  if len(_runners) > RUNNER_CACHE_SIZE:
    del _runners[next(iter(_runners))]
  return runner


def run_schedule(schedule: list[ScheduleItem], backend: str | None = None) -> None:
  """Run every kernel of the schedule in order."""
  debug.on_schedule(len(schedule))
  for si in schedule:
    for b in si.bufs:
      b.ensure_allocated()  # outputs are allocated on first use
    with trace_context(si.name, kind="kernel"):
      debug.run_kernel(si.name, get_runner(si.ast, backend), si.bufs)
