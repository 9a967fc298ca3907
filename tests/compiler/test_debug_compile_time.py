"""DEBUG=2's line of a kernel run times the run only; a kernel compiled for that run says its compile time apart.

A fake clock (compiler.debug.clock) and a backend whose compile and run advance it by known amounts: no timing."""
from __future__ import annotations

import re

import numpy as np
import pytest

from compiler import debug, realize
from compiler.runtime.interpreter import InterpretedKernel
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import Tensor

COMPILE_S, RUN_S = 5.0, 2e-6


@pytest.fixture
def fake(monkeypatch):
  now = [100.0]
  monkeypatch.setattr(debug, "clock", lambda: now[0])
  monkeypatch.setattr(realize, "_runners", {})
  monkeypatch.setenv("DEBUG", "2")

  def factory(ast):
    now[0] += COMPILE_S
    kernel = InterpretedKernel(ast)

    def run(bufs):
      kernel(bufs)
      now[0] += RUN_S
    return run
  monkeypatch.setitem(realize._factories, "slowcompile", factory)
  return now


def _lines(capsys) -> list[str]:
  return [line for line in capsys.readouterr().out.splitlines() if line.startswith("*** ") and "scheduled" not in line]


def test_the_first_run_line_times_the_run_and_names_the_compile_apart(fake, capsys):
  x = np.arange(6, dtype=np.float32)
  for _ in range(2):
    sched, becomes = create_schedule([(Tensor(x) * 2).uop])
    realize.run_schedule(sched, backend="slowcompile")
  first, second = _lines(capsys)
  assert re.search(r"\s2\.00 us\s", first) and first.endswith("(compiled in 5000.00 ms)")
  assert re.search(r"\s2\.00 us\s", second) and "compiled" not in second
  np.testing.assert_array_equal(sched[0].bufs[0].np, x * 2)


def test_a_compiled_kernels_own_run_time_is_reported(monkeypatch, capsys):
  # the call also did its first-call checks and planning (the clock moves a whole second): the line shows the run
  now = [0.0]
  monkeypatch.setattr(debug, "clock", lambda: now[0])
  monkeypatch.setenv("DEBUG", "2")

  class Runner:
    last_s = 3e-6

    def __call__(self, bufs):
      now[0] += 1.0
  debug.run_kernel("r_4", Runner(), [])
  line, = _lines(capsys)
  assert re.search(r"\s3\.00 us\s", line)
