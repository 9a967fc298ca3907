"""Imports run one way (docs/architecture.md, "Direction of imports"): viz_server -> vztrace, compiler -> vztrace.
Starting the viewer loads no compiler module (so VIZ in its environment cannot make it record), vztrace needs only
the standard library, and the compiler never imports the viewer or Flask."""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what a fresh interpreter reports: the top-level packages of sys.modules that must not be there
REPORT = ("import json, sys\n"
          "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'compiler', 'numpy'})))")


def _loaded(code: str) -> list[str]:
  """The forbidden top-level packages a fresh interpreter has loaded after running code (then REPORT)."""
  env = {**os.environ, "VIZ": "1", "PYTHONPATH": str(ROOT)}  # a compiler import here would arm the recorder
  p = subprocess.run([sys.executable, "-c", code + "\n" + REPORT], cwd=ROOT, env=env, capture_output=True, text=True,
                     timeout=120)
  assert p.returncode == 0, p.stderr
  return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("modules", ["viz_server.store", "viz_server.__main__", "viz_server.tools"])
def test_viewer_entry_loads_neither_compiler_nor_numpy(modules):
  assert _loaded(f"import {modules}") == []


def test_viewer_app_loads_no_compiler_module():
  # numpy is the layout's own dependency (viz_server/layout.py), not the compiler's
  assert "compiler" not in _loaded("import viz_server.app, viz_server.store, viz_server.__main__")


def test_viewer_launch_loads_neither_compiler_nor_numpy():
  # the command compiler/trace/launch.py starts, run in-process up to where --help exits
  code = ("import runpy, sys\nsys.argv = ['viz_server', '--help']\n"
          "try:\n  runpy.run_module('viz_server', run_name='__main__', alter_sys=True)\nexcept SystemExit:\n  pass")
  assert _loaded(code) == []


def _imported(path: Path) -> set[str]:
  """Top-level names of every module a file imports, function-level imports included; relative imports as '.'."""
  names = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      names |= {a.name.split(".")[0] for a in node.names}
    elif isinstance(node, ast.ImportFrom):
      names.add("." if node.level else node.module.split(".")[0])
  return names


def test_vztrace_imports_only_the_standard_library():
  files = sorted((ROOT / "vztrace").glob("*.py"))
  assert files
  bad = {f.name: sorted(n for n in _imported(f) - {"vztrace", "__future__"} if n not in sys.stdlib_module_names)
         for f in files}
  assert {f: names for f, names in bad.items() if names} == {}


def test_vztrace_loads_no_third_party_module():
  code = ("import pkgutil, importlib, sys, json, vztrace\nbase = set(sys.modules)\n"
          "for m in pkgutil.iter_modules(vztrace.__path__):\n  importlib.import_module('vztrace.' + m.name)\n"
          "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - base} - set(sys.stdlib_module_names)"
          " - {'vztrace'})))")
  p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr
  assert json.loads(p.stdout) == []


def test_compiler_never_imports_the_viewer():
  viewer = {"viz_server", "flask", "flask_socketio", "werkzeug", "socketio", "engineio"}
  bad = {str(f.relative_to(ROOT)): sorted(_imported(f) & viewer) for f in (ROOT / "compiler").rglob("*.py")}
  assert {f: names for f, names in bad.items() if names} == {}
