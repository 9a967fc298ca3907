"""Real traces for the trace tools' tests (show, export, summary), recorded here, and `show` run in this process."""
from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import IO

import numpy as np

from compiler.tensor import Tensor
from compiler.trace import recorder
from viz_server import show


def record_small(trace: Path) -> Path:
  """Finish the `trace` fixture's recording with a 4x4 sum: a schedule, one kernel, its opts, sources and a run."""
  a = Tensor.arange(16).reshape(4, 4).float()
  (a * 2 + 1).sum(axis=1).numpy()
  recorder.disable()
  return trace


def record_loop(trace: Path, steps: int = 4) -> Path:
  """Finish the `trace` fixture's recording with relu(x @ w + 1).sum() `steps` times: two kernels, compiled by the
  first step, schedule cache hits after."""
  x = Tensor(np.arange(32 * 32, dtype=np.float32).reshape(32, 32) / 100)
  w = Tensor(np.ones((32, 32), dtype=np.float32))
  for _ in range(steps):
    (x @ w + 1).relu().sum().numpy()
  recorder.disable()
  return trace


def run_show(path: Path, out: IO[str] | None = None, **kw) -> str:
  """`show`'s output for a trace file, with args as the CLI parses them (kw: rewrite, kernels, source, json, ...)."""
  args = argparse.Namespace(file=str(path), rewrite=None, kernels=False, source=None, kernel=None, json=False)
  for k, v in kw.items():
    setattr(args, k, v)
  out = out if out is not None else io.StringIO()
  assert show.run(args, out) == 0
  return out.getvalue()
