"""`pip install .` (not only editable) must give a working viewer: the UI's templates and static files are package
data of viz_server, every compiler package is in the wheel, and so is the trace writer's C extension."""
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _wheel(tmp_path: Path, **env: str) -> set[str]:
  """The names in a wheel built from a copy of the tracked files (no in-place build of the extension in it)."""
  src, out = tmp_path / "src", tmp_path / "wheel"
  for f in subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0"):
    if f and (ROOT / f.decode()).is_file():
      (src / f.decode()).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(ROOT / f.decode(), src / f.decode())
  p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                      str(out), str(src)], capture_output=True, text=True, timeout=300, env={**os.environ, **env})
  assert p.returncode == 0, p.stderr
  return set(zipfile.ZipFile(next(out.glob("*.whl"))).namelist())


def _has_extension(names: set[str]) -> bool:
  return any(f"compiler/trace/_speedups{suffix}" in names for suffix in EXTENSION_SUFFIXES)


def test_wheel_contains_packages_templates_and_static(tmp_path):
  names = _wheel(tmp_path)
  assert "viz_server/templates/index.html" in names
  for f in (ROOT / "static").iterdir():
    if f.suffix in (".js", ".css", ".svg"):
      assert f"viz_server/static/{f.name}" in names, f.name
  for pkg in ("compiler", "compiler/trace", "compiler/schedule", "compiler/opt", "compiler/codegen",
              "compiler/runtime", "viz_server"):
    for f in (ROOT / pkg).glob("*.py"):
      assert f"{pkg}/{f.name}" in names, f"{pkg}/{f.name}"
  # the C extension (compiler/trace/_speedups.c) is built into the wheel, for this interpreter
  assert _has_extension(names), sorted(names)


def test_without_a_c_compiler_the_wheel_builds_without_the_extension(tmp_path):
  names = _wheel(tmp_path, CC="/bin/false")  # the extension is optional: the recorder falls back to Python
  assert not _has_extension(names) and "compiler/trace/columns.py" in names and "compiler/trace/native.py" in names
