"""A small real trace for the trace tools' tests (show, export): one schedule and one kernel, recorded here."""
from __future__ import annotations

from pathlib import Path

from compiler.tensor import Tensor
from compiler.trace import recorder


def record_small(trace: Path) -> Path:
  """Finish the `trace` fixture's recording with a 4x4 sum: a schedule, one kernel, its opts, sources and a run."""
  a = Tensor.arange(16).reshape(4, 4).float()
  (a * 2 + 1).sum(axis=1).numpy()
  recorder.disable()
  return trace
