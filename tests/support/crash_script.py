"""A program that dies in each way a program can (an exception, a compiler error, sys.exit, ^C, a thread's
exception), run while recording: the crash tests of the trace, the viewer and the browser share it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""\
  import sys
  import threading

  from compiler.tensor import Tensor


  def main(kind):
    a = Tensor.arange(6).reshape(2, 3).float()
    (a * 2).sum().numpy()
    if kind == "error":
      raise ValueError(sys.argv[2])  # RAISE
    if kind == "compiler":
      a.reshape(4, 2)  # COMPILER
    if kind == "exit":
      sys.exit(3)  # EXIT
    if kind == "interrupt":
      raise KeyboardInterrupt  # INTERRUPT
    if kind == "caught-exit":
      try:
        sys.exit(2)
      except SystemExit as e:
        assert e.code == 2
    if kind == "thread":
      t = threading.Thread(target=lambda: 1 / 0, name="worker")  # THREAD
      t.start()
      t.join()


  main(sys.argv[1])
""")


LINES = {m: i + 1 for i, line in enumerate(SCRIPT.splitlines()) for m in ("RAISE", "COMPILER", "EXIT", "INTERRUPT",
                                                                          "THREAD") if f"# {m}" in line}


# a message with markup and terminal escapes (a title change, a color): shown as text everywhere
MESSAGE = "boom <img src=x onerror=alert(1)> \x1b]0;pwned\x07 \x1b[31mred"


def _env(trace: Path) -> dict:
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  return {**env, "VIZ": "-1", "VIZ_TRACE": str(trace), "PYTHONPATH": str(ROOT)}


def run_script(d: Path, kind: str, trace: Path | None = None,
               message: str = MESSAGE) -> tuple[subprocess.CompletedProcess, Path]:
  """Run SCRIPT in d (its working directory) recording to trace (default d/<kind>.vztrace)."""
  (d / "script.py").write_text(SCRIPT)
  trace = trace or d / f"{kind}.vztrace"
  p = subprocess.run([sys.executable, "script.py", kind, message], cwd=d, env=_env(trace), capture_output=True,
                     text=True, timeout=300)
  return p, trace
