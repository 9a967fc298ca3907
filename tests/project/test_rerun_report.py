"""A browser test that fails once runs again, and the run's end prints that first failure in full (tests/conftest.py,
tests/browser/conftest.py): a race that a rerun hid still reaches the reader of CI's output."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the project's own hooks, loaded by path into a throwaway session whose one browser test fails on its first run
# (a stand-in page answers the state script)
CONFTEST = f"""
import importlib.util
def _load(name, path):
  spec = importlib.util.spec_from_file_location(name, path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod
_top = _load("top_conftest", {str(ROOT / "tests" / "conftest.py")!r})
_browser = _load("browser_conftest", {str(ROOT / "tests" / "browser" / "conftest.py")!r})
pytest_runtest_logreport = _top.pytest_runtest_logreport
pytest_terminal_summary = _top.pytest_terminal_summary
pytest_collection_modifyitems = _browser.pytest_collection_modifyitems
pytest_runtest_makereport = _browser.pytest_runtest_makereport
"""

FLAKY = """
from pathlib import Path
class Page:  # (what the hook asks a Playwright page: its state, as the page script answers)
  def evaluate(self, script):
    return '{"url": "#t=0&p=timeline", "focus": "BODY#."}'
def test_races(request):
  request.node.pages = [Page()]
  seen = Path(__file__).with_name("seen")
  first = not seen.exists()
  seen.touch()
  assert not first, "the page was not ready: a race"
def test_steady():
  pass
"""


def test_a_browser_test_that_failed_once_is_run_again_and_its_failure_printed(tmp_path):
  (tmp_path / "conftest.py").write_text(CONFTEST)
  (tmp_path / "tests" / "browser").mkdir(parents=True)
  (tmp_path / "tests" / "browser" / "test_flaky.py").write_text(FLAKY)
  out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                        str(tmp_path / "tests")], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
  assert out.returncode == 0, out.stdout + out.stderr
  last = out.stdout.strip().splitlines()[-1]
  assert "2 passed" in last and "1 rerun" in last, last
  assert "1 browser test(s) failed once and ran again: races to fix" in out.stdout
  assert "test_flaky.py::test_races" in out.stdout and "the page was not ready: a race" in out.stdout
  assert '[page 0 state] {"url": "#t=0&p=timeline", "focus": "BODY#."}' in out.stdout  # (what the page showed)
