"""`DEBUG=N`'s level and the lines it prints (as in tinygrad), shared by the running program (compiler/debug.py) and
`show --debug N`, which rebuilds them from a trace: 1 each schedule's kernel count, 2 each kernel run with its name,
time, GFLOP/s and GB/s, and the bytes buffers hold after it and their peak so far (as tinygrad's `mem`), and each
memory plan that shared buffers, 3 the opts applied, 4 the generated source (LLVM IR)."""
from __future__ import annotations

import os
from typing import Any, Iterable

SOURCE_KIND = "llvm_ir"


def level() -> int:
  """DEBUG as an int (0 when unset or not a number); here, where nothing of the compiler is imported, so that every
  part of it (the compile cache under the runtime too) reads it one way."""
  try:
    return int(os.environ.get("DEBUG", "0") or 0)
  except ValueError:
    return 0


def schedule_line(kernels: int) -> str:
  """A schedule about to run (an empty one prints nothing: a trace cannot tell it from a schedule never run)."""
  return f"*** scheduled {kernels} kernel{'' if kernels == 1 else 's'}"


def _num(x: Any) -> float | None:
  return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def run_line(name: str, seconds: Any, flops: Any, nbytes: Any, mem: Any = None, peak: Any = None) -> str:
  """A kernel's run; with `mem` (bytes buffers held after it) and `peak` (the most they held so far) at its end."""
  s, f, b = _num(seconds), _num(flops), _num(nbytes)
  m, p = _num(mem), _num(peak)
  tail = "" if m is None else f"  mem {m / 1e6:9.2f} MB" + ("" if p is None else f" (peak {p / 1e6:.2f} MB)")
  if s is None or s <= 0:
    return f"*** {name:<28s} {'?':>10s}{tail}"
  rate = f"{f / s / 1e9:9.2f} GFLOP/s" if f is not None else f"{'?':>9s} GFLOP/s"
  bw = f"{b / s / 1e9:9.2f} GB/s" if b is not None else f"{'?':>9s} GB/s"
  return f"*** {name:<28s} {s * 1e6:10.2f} us {rate} {bw}{tail}"


def plan_line(summary: str) -> str:
  """A schedule's memory plan that shared buffers (its summary is the name of its "memory" context in a trace)."""
  return f"*** {summary}"


def opts_line(opts: Iterable[tuple[Any, Any, Any]]) -> str:
  return "    opts: " + (" ".join(f"{op}({axis}, {arg})" for op, axis, arg in opts) or "none")
