"""A compiled kernel's optimized IR and assembly, recorded into its trace context once LLVM's text thread made them.

Emitting the assembly runs LLVM's code generator a second time (about as long as the JIT compile itself), which
used to be on the program's path whenever it was recorded. Now compile_kernel records the kernel's own sources (uops,
LLVM IR) at once and queues the other two here; they are recorded, in compile order and into the context the kernel
was compiled in, from the thread that records everything else (the recorder is not thread-safe):
- whenever they are ready, at the next compile or traced run of any kernel (`record_ready()`);
- at the latest before the trace closes: at exit (an exit hook that runs before the recorder's) for a trace that
  VIZ in the environment started, and before compile_kernel returns for one a program enabled itself, which it
  may close at any moment (`settle()`).
"""
from __future__ import annotations

import atexit
from collections import deque
from concurrent.futures import Future
from typing import Any

from compiler.trace import recorder

# (the recorder, kernel context, texts future -> (opt_ir, asm), compile_s, ts of the compile)
_PENDING: deque[tuple[Any, int, Future, float, float]] = deque()


def defer(ctx: int, texts: Future, compile_s: float, ts: float) -> None:
  """Record the `opt_ir` and `asm` sources of `texts` into context `ctx` of the current trace when they are ready."""
  rec = recorder.RECORDER
  if rec is None:
    return
  _PENDING.append((rec, ctx, texts, compile_s, ts))
  # atexit runs hooks last-registered first: (re)registering after the recorder's own (enable() registers it) makes
  # this one run before the trace closes
  atexit.unregister(_at_exit)
  atexit.register(_at_exit)
  settle()


def settle() -> None:
  """Wait for the queued texts unless the trace closes at exit (VIZ set in the environment), where _at_exit does."""
  if _PENDING and recorder.viz_level() == 0:
    record_ready(wait=True)


def record_ready(wait: bool = False) -> None:
  """Record the queued texts that are ready, in order (all of them, waiting, when `wait`)."""
  while _PENDING:
    rec, ctx, texts, compile_s, ts = _PENDING[0]
    if not wait and not texts.done():
      return
    _PENDING.popleft()
    try:
      opt_ir, asm = texts.result()
    except Exception as e:  # LLVM failed on a module it has compiled: say so where the text would be
      opt_ir = asm = f"; {type(e).__name__}: {e}"
    if recorder.RECORDER is not rec:  # that trace was closed (or another began): these texts are not its
      continue
    rec.record("source", kind="opt_ir", text=opt_ir, compile_s=compile_s, ts=ts, ctx=ctx)
    rec.record("source", kind="asm", text=asm, compile_s=compile_s, ts=ts, ctx=ctx)


def _at_exit() -> None:
  record_ready(wait=True)
