"""`pip install .` (not only editable) must give a working viewer: the UI's templates and static files are package
data of viz_server, every compiler package is in the wheel, and so is the trace writer's C extension."""
import subprocess
import sys
import zipfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_packages_templates_and_static(tmp_path):
  p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                      str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr
  wheel = next(tmp_path.glob("*.whl"))
  names = set(zipfile.ZipFile(wheel).namelist())
  assert "viz_server/templates/index.html" in names
  for f in (ROOT / "static").iterdir():
    if f.suffix in (".js", ".css", ".svg"):
      assert f"viz_server/static/{f.name}" in names, f.name
  for pkg in ("compiler", "compiler/trace", "compiler/schedule", "compiler/opt", "compiler/codegen",
              "compiler/runtime", "viz_server"):
    for f in (ROOT / pkg).glob("*.py"):
      assert f"{pkg}/{f.name}" in names, f"{pkg}/{f.name}"
  # the C extension (compiler/trace/_speedups.c) is built into the wheel, for this interpreter
  assert any(f"compiler/trace/_speedups{suffix}" in names for suffix in EXTENSION_SUFFIXES), sorted(names)
