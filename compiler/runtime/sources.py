"""A compiled kernel's optimized IR and assembly, recorded into its trace context.

The traced compile makes both (compiler.runtime.llvm: its one run of the code generator emits the assembly, which is
then assembled into the code that runs), so compile_kernel records them at once, after the kernel's own sources
(uops, LLVM IR). They used to be made later by a thread of their own and recorded when ready: `record_ready` and
`settle` stay for the callers of that time, with nothing left to wait for.
"""
from __future__ import annotations

from concurrent.futures import Future

from compiler.trace import recorder


def defer(ctx: int, texts: Future, compile_s: float, ts: float) -> None:
  """Record the `opt_ir` and `asm` sources of `texts` (a future of the two) into context `ctx` of the current trace."""
  rec = recorder.RECORDER
  if rec is None:
    return
  try:
    opt_ir, asm = texts.result()
  except Exception as e:  # LLVM failed on a module it has compiled: say so where the text would be
    opt_ir = asm = f"; {type(e).__name__}: {e}"
  rec.record("source", kind="opt_ir", text=opt_ir, compile_s=compile_s, ts=ts, ctx=ctx)
  rec.record("source", kind="asm", text=asm, compile_s=compile_s, ts=ts, ctx=ctx)


def settle() -> None:
  """Nothing to wait for: every text is recorded when its kernel is compiled."""


def record_ready(wait: bool = False) -> None:
  """Nothing to record: every text is recorded when its kernel is compiled."""
