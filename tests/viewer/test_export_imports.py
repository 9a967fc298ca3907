"""The export (and every tool that answers the API in-process: viz_server/offline.py) starts without the socket.io
stack: Flask-SocketIO with python-socketio, engineio and requests was ~0.1 s of each tool's start-up (issue 30), and no
test client request reaches the feed. The served app keeps it (tests/viewer/test_live.py)."""
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
