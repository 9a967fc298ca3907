"""`pip install .` (not only editable) must give a working viewer: the UI's templates and static files are package
data of viz_server, every compiler package is in the wheel, and so is (built where npm's package is installed) the
socket.io browser client, so that the installed viewer updates live without npm; the wheel is pure Python."""
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


SOCKETIO_PACKAGE = ROOT / "node_modules" / "socket.io-client"
CLIENT = "viz_server/vendor/socket.io.esm.min.js"


def _wheel(tmp_path: Path, npm: bool = False, **env: str) -> Path:
  """A wheel built from a copy of the tracked files; npm: with npm's
  socket.io-client package installed in the copy, as `make` (npm ci) does."""
  src, out = tmp_path / "src", tmp_path / "wheel"
  for f in subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0"):
    if f and (ROOT / f.decode()).is_file():
      (src / f.decode()).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(ROOT / f.decode(), src / f.decode())
  if npm:
    shutil.copytree(SOCKETIO_PACKAGE, src / "node_modules" / "socket.io-client")
  p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                      str(out), str(src)], capture_output=True, text=True, timeout=300, env={**os.environ, **env})
  assert p.returncode == 0, p.stderr
  return next(out.glob("*.whl"))


def _names(wheel: Path) -> set[str]:
  return set(zipfile.ZipFile(wheel).namelist())


def test_wheel_contains_packages_templates_and_static(tmp_path):
  wheel = _wheel(tmp_path, npm=True)
  names = _names(wheel)
  assert "viz_server/templates/index.html" in names
  for f in (ROOT / "static").iterdir():
    if f.suffix in (".js", ".css", ".svg"):
      assert f"viz_server/static/{f.name}" in names, f.name
  export_js = sorted((ROOT / "viz_server" / "export").glob("*.js"))  # the export page's own scripts (package data)
  assert export_js and all(f"viz_server/export/{f.name}" in names for f in export_js)
  tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
  for f in tracked:  # every module of every package (a package missing from pyproject.toml's list is left out)
    if f.endswith(".py") and f.split("/")[0] in ("compiler", "viz_server"):
      assert f in names, f
  assert wheel.name.endswith("-py3-none-any.whl") and not any(f.endswith((".so", ".pyd", ".c")) for f in names)
  # npm's socket.io browser client (and its license), copied in at build time: none of it is tracked in git
  assert CLIENT in names and "viz_server/vendor/socket.io-client.LICENSE" in names
  assert not any(f.startswith("viz_server/vendor/") for f in tracked)
  _installed_viewer_serves_the_client(wheel, tmp_path)


def _installed_viewer_serves_the_client(wheel: Path, tmp_path: Path) -> None:
  """The wheel's files alone (no checkout, no node_modules on the path) make a viewer whose page uses socket.io."""
  site, cwd = tmp_path / "site", tmp_path / "elsewhere"
  zipfile.ZipFile(wheel).extractall(site)
  cwd.mkdir()
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  env.update(PYTHONPATH=str(site), XDG_CACHE_HOME=str(tmp_path / "cache"))
  where = subprocess.run([sys.executable, "-c", "import viz_server; print(viz_server.__file__)"], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=60)
  assert where.stdout.strip() == str(site / "viz_server" / "__init__.py"), where.stdout + where.stderr
  (cwd / "traces").mkdir()
  proc = subprocess.Popen([sys.executable, "-m", "viz_server", "traces", "--port", "0"], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    line = proc.stdout.readline()
    if " at http://127.0.0.1:" not in line:
      proc.kill()
      raise AssertionError(f"the installed viewer did not start: {line}{proc.communicate(timeout=30)[1]}")
    url = line.split(" at ")[1].split()[0]
    with urllib.request.urlopen(url, timeout=10) as r:
      assert 'data-socketio="yes"' in r.read().decode()
    with urllib.request.urlopen(url + "vendor/socket.io.esm.min.js", timeout=10) as r:
      assert r.read() == (SOCKETIO_PACKAGE / "dist" / "socket.io.esm.min.js").read_bytes()
  finally:
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)


def test_without_npm_the_wheel_leaves_the_client_out(tmp_path):
  names = _names(_wheel(tmp_path))
  assert CLIENT not in names  # (built without npm's package: the page polls)
  assert "compiler/trace/recorder.py" in names
