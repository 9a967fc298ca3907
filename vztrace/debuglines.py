"""The lines `DEBUG=N` prints (as in tinygrad), shared by the running program (compiler/debug.py) and
`show --debug N`, which rebuilds them from a trace: 1 each schedule's kernel count, 2 each kernel run with its name,
time, GFLOP/s and GB/s, 3 the opts applied, 4 the generated source (LLVM IR)."""
from __future__ import annotations

from typing import Any, Iterable

SOURCE_KIND = "llvm_ir"


def schedule_line(kernels: int) -> str:
  """A schedule about to run (an empty one prints nothing: a trace cannot tell it from a schedule never run)."""
  return f"*** scheduled {kernels} kernel{'' if kernels == 1 else 's'}"


def _num(x: Any) -> float | None:
  return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def run_line(name: str, seconds: Any, flops: Any, nbytes: Any) -> str:
  s, f, b = _num(seconds), _num(flops), _num(nbytes)
  if s is None or s <= 0:
    return f"*** {name:<28s} {'?':>10s}"
  rate = f"{f / s / 1e9:9.2f} GFLOP/s" if f is not None else f"{'?':>9s} GFLOP/s"
  bw = f"{b / s / 1e9:9.2f} GB/s" if b is not None else f"{'?':>9s} GB/s"
  return f"*** {name:<28s} {s * 1e6:10.2f} us {rate} {bw}"


def opts_line(opts: Iterable[tuple[Any, Any, Any]]) -> str:
  return "    opts: " + (" ".join(f"{op}({axis}, {arg})" for op, axis, arg in opts) or "none")
