"""The export (and every tool that answers the API in-process: viz_server/offline.py) starts without the socket.io
stack: Flask-SocketIO with python-socketio, engineio and requests was ~0.1 s of each tool's start-up (issue 30), and no
test client request reaches the feed. The served app keeps it (tests/viewer/test_live.py). `python -m compiler.trace
show|compare|export` becomes the tool before the compiler's modules are imported (compiler/__init__.py: ~0.2 s of
CPU, numpy most of it, that the tool never used)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.trace_tools_helpers import record_small

ROOT = Path(__file__).resolve().parents[2]
FEED = ("flask_socketio", "socketio", "engineio", "requests")


@pytest.fixture
def small_trace(trace):
  return record_small(trace)


def test_export_imports_no_socketio(small_trace, tmp_path):
  code = ("import json, sys\nfrom viz_server.export.command import export\n"
          f"export({str(small_trace)!r}, {str(tmp_path / 'out.html')!r}, jobs=1)\n"
          f"print(json.dumps([m for m in {FEED!r} if m in sys.modules]))\n")
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
  assert got.returncode == 0, got.stderr
  assert json.loads(got.stdout.splitlines()[-1]) == []
  assert (tmp_path / "out.html").stat().st_size > 0


def test_the_served_app_keeps_its_feed():
  from viz_server.app import create_app
  app = create_app(follow=False)
  assert "socketio" in app.extensions


def test_compiler_trace_tools_start_without_the_compiler():
  # -X importtime: the first interpreter's imports on stderr (the exec'd tool's are not timed, and --help imports
  # nothing of the export)
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  got = subprocess.run([sys.executable, "-X", "importtime", "-m", "compiler.trace", "export", "--help"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
  assert got.returncode == 0, got.stderr
  assert "usage: python -m viz_server.tools export" in got.stdout
  imported = {line.rsplit("|", 1)[-1].strip() for line in got.stderr.splitlines() if line.startswith("import time:")}
  # (compiler itself is never done importing: its __init__ execs the tool)
  assert "site" in imported and not {"compiler", "compiler.dtype", "compiler.trace", "numpy"} & imported


@pytest.mark.parametrize(("orig", "argv", "want"), [
  (["py", "-m", "compiler.trace", "export", "f", "-o"], ["-m", "export", "f", "-o"], ["export", "f", "-o"]),
  (["py", "-X", "importtime", "-mcompiler.trace", "show", "f"], ["-m", "show", "f"], ["show", "f"]),
  (["py", "-m", "compiler.trace", "compare", "-m", "x"], ["-m", "compare", "-m", "x"], ["compare", "-m", "x"]),
  (["py", "-m", "compiler.trace", "info", "f"], ["-m", "info", "f"], None),  # (the compiler's own commands)
  (["py", "-m", "compiler.trace"], ["-m"], None),
  (["py", "-m", "compiler.trace.cli", "export", "f"], ["-m", "export", "f"], None),  # (another module)
  (["py", "-m", "compiler", "export", "f"], ["-m", "export", "f"], None),
  (["py", "-c", "import compiler", "export"], ["-c", "export"], None),  # (not run as a module)
  (["py", "script.py", "export"], ["script.py", "export"], None),
  (["py", "-m", "compiler.trace", "export", "f"], ["-m", "export", "g"], None),  # (argv no longer the command's)
])
def test_which_commands_become_the_tool(orig, argv, want):
  import compiler
  assert compiler._tool_argv(orig, argv) == want


def test_the_tools_are_the_clis():
  import compiler
  from compiler.trace.cli import TOOLS
  assert set(compiler._TOOLS) == set(TOOLS)
