"""The whole suite's set-up (the hypothesis profile, this session's own compile cache) and the fixtures more than one
area uses (trace, fresh_caches). An area's own fixtures are in its conftest: compiler/ (backend), viewer/ (an
in-process viewer), browser/ (Playwright and a viewer subprocess)."""
import atexit
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings

from compiler.runtime import buffer as bufmod
from compiler.schedule.cache import SCHEDULES
from compiler.trace import recorder

# hypothesis's per-example deadline and its too-slow health check measure wall-clock time, which a loaded machine
# stretches: tests here never depend on timing (a test's own @settings still sets what it names)
settings.register_profile("tinyviz", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tinyviz")

# the compile cache on disk (compiler/runtime/diskcache.py) of this test session is its own, made empty: the suite never
# reads what another run (or the user's programs) left in the user's cache, nor writes there; subprocesses inherit it
os.environ["TINYVIZ_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="tinyviz-compile-")
atexit.register(shutil.rmtree, os.environ["TINYVIZ_COMPILE_CACHE"], ignore_errors=True)


# a browser test that failed once and was run again (tests/browser/conftest.py): its first failure, printed at the end
_RERUNS: list = []


def pytest_runtest_logreport(report):
  if report.outcome == "rerun":
    _RERUNS.append(report)


def pytest_terminal_summary(terminalreporter):
  """Print every rerun's failure in full: a rerun that passed is still a race in the page or a test to fix."""
  if not _RERUNS:
    return
  terminalreporter.section(f"{len(_RERUNS)} browser test(s) failed once and ran again: races to fix", sep="!")
  for r in _RERUNS:
    terminalreporter.line(f"--- {r.nodeid}")
    terminalreporter.line(r.longreprtext[-4000:])
    for name, text in r.sections:
      if name.startswith("page"):
        terminalreporter.line(f"[{name}] {text[-2000:]}")


@pytest.fixture
def trace(tmp_path):
  """Record into tmp_path/t.vztrace for the test (yields the path; recording ends after it)."""
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  yield path
  recorder.disable()


@pytest.fixture
def fresh_caches():
  """The buffer pool and the schedule cache empty before the test and after it: what it counts (an array reused, a
  schedule hit) starts from nothing, and what it left behind does not reach the next test."""
  bufmod.clear_pool()
  SCHEDULES.clear()
  yield
  bufmod.clear_pool()
  SCHEDULES.clear()
