"""`DEBUG=N` on the running program (the lines are vztrace/debuglines.py's): run_schedule calls these."""
from __future__ import annotations

import sys
import time
from typing import Any

from compiler.runtime.buffer import memory_in_use, memory_peak
from vztrace.debuglines import level, opts_line, plan_line, run_line, schedule_line


def on_schedule(kernels: int) -> None:
  if level() >= 1 and kernels:
    print(schedule_line(kernels), file=sys.stdout, flush=True)


def on_memory_plan(summary: str) -> None:
  if level() >= 2:
    print(plan_line(summary), file=sys.stdout, flush=True)


clock = time.perf_counter  # what times a run and a compile (a module attribute, so a test can give it a fake clock)


def run_kernel(name: str, runner: Any, bufs: list, compile_s: float | None = None) -> None:
  """Run a kernel; at DEBUG>=2 print the run's time (a compiled kernel's timing of its own code, else the call's)
  and the bytes buffers hold (and their peak), and, for a kernel compiled for this run, `compile_s` after it (3: its
  opts, 4: its LLVM IR)."""
  lv = level()
  if lv < 2:
    runner(bufs)
    return
  t0 = clock()
  runner(bufs)
  dt = clock() - t0
  own = getattr(runner, "last_s", None)  # without the first call's checks and planning
  if isinstance(own, float) and own > 0:
    dt = own
  prg = getattr(runner, "program", None)
  flops = prg.flops() if prg is not None and not prg.vars else None
  nbytes = sum(b.nbytes for b in bufs if hasattr(b, "nbytes"))
  line = run_line(name, dt, flops, nbytes, memory_in_use(), memory_peak())
  print(line if compile_s is None else f"{line}  (compiled in {compile_s * 1e3:.2f} ms)", flush=True)
  if lv >= 3:
    print(opts_line(_opts(runner)), flush=True)
  if lv >= 4 and prg is not None:
    print(prg.src, flush=True)


def _opts(runner: Any) -> list[tuple[Any, Any, Any]]:
  """The opts applied to a compiled kernel (engine.compile_runner keeps its AST's KernelInfo.opts)."""
  return [(getattr(o.op, "name", o.op), o.axis, o.arg) for o in getattr(runner, "opts", ())]
