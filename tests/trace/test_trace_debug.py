"""DEBUG=N on a running program (compiler/debug.py) and the same lines rebuilt from its trace by `show --debug N`."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vztrace.debuglines import opts_line, run_line, schedule_line

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = """
import sys
import numpy as np
from compiler.tensor import Tensor
rng = np.random.default_rng(0)
a = Tensor(rng.standard_normal((8, 8)).astype(np.float32))
b = Tensor(rng.standard_normal((8, 8)).astype(np.float32))
((a @ b) + 1).sum(axis=1).numpy()
print("done")
"""
RUN = re.compile(r"^(\*\*\* \S+)\s+[0-9.?]+( us)?\s.*$")


def run_program(tmp_path: Path, level: int, **env: str) -> tuple[list[str], Path]:
  trace = tmp_path / f"d{level}.vztrace"
  e = {**os.environ, "DEBUG": str(level), "VIZ": "-1", "VIZ_TRACE": str(trace), "PYTHONPATH": str(ROOT), **env}
  e.pop("NOOPT", None)
  p = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=e, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr
  lines = p.stdout.splitlines()
  assert lines[-1] == "done"
  return [line for line in lines[:-1] if not line.startswith("VIZ:")], trace


def show_debug(trace: Path, level: int) -> list[str]:
  p = subprocess.run([sys.executable, "-m", "compiler.trace", "show", str(trace), "--debug", str(level)], cwd=ROOT,
                     capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr
  return p.stdout.splitlines()


def masked(lines: list[str]) -> list[str]:
  """Run lines without their times (the program's wall-clock call vs the trace's timing of it)."""
  return [RUN.sub(r"\1", line) for line in lines]


@pytest.mark.parametrize("level", [1, 3, 4])
def test_show_debug_rebuilds_the_programs_lines(tmp_path, level):
  live, trace = run_program(tmp_path, level)
  assert live[0] == schedule_line(2)
  if level >= 3:
    assert live[2].startswith("    opts: ") and live[2] != "    opts: none"  # the heuristics opted the matmul
  if level >= 4:
    assert any(line.startswith("define void @r_8_8_8(") for line in live)
  else:
    assert len(live) == (1 if level == 1 else 5)
  assert masked(show_debug(trace, level)) == masked(live)


def test_debug_off_prints_nothing(tmp_path):
  live, _ = run_program(tmp_path, 0)
  assert live == []


def test_lines():
  assert schedule_line(1) == "*** scheduled 1 kernel"
  line = run_line("r_4", 2e-6, 4000, 8000)
  assert line.startswith("*** r_4 ") and "2.00 us" in line and "2.00 GFLOP/s" in line and "4.00 GB/s" in line
  assert "?" in run_line("r_4", None, 1, 1)
  assert opts_line([("UPCAST", 0, 4), ("UNROLL", 1, 0)]) == "    opts: UPCAST(0, 4) UNROLL(1, 0)"
  assert opts_line([]) == "    opts: none"


CHAIN = """
import numpy as np
from compiler.tensor import Tensor
rng = np.random.default_rng(0)
y, b = (Tensor(rng.standard_normal((8, 8)).astype(np.float32)) for _ in range(2))
for _ in range(4):
  y = (y @ b * 0.1 + 1).contiguous()
y.sum().numpy()
print("done")
"""


def test_show_debug_rebuilds_the_memory_plan_line(tmp_path, monkeypatch):
  monkeypatch.setattr(sys.modules[__name__], "PROGRAM", CHAIN)
  live, trace = run_program(tmp_path, 2)
  plans = [line for line in live if line.startswith("*** memory plan")]
  assert len(plans) == 1, live  # the chain's intermediates share buffers: the plan is one of the lines DEBUG=2 printed
  assert masked(show_debug(trace, 2)) == masked(live)
