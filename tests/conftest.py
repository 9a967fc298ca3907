"""Shared test set-up."""
import atexit
import os
import shutil
import tempfile
import threading

import pytest
from hypothesis import HealthCheck, settings

from compiler.runtime import buffer as bufmod
from compiler.schedule.cache import SCHEDULES
from compiler.trace import recorder
from viz_server.__main__ import bind
from viz_server.app import create_app

# hypothesis's per-example deadline and its too-slow health check measure wall-clock time, which a loaded machine
# stretches: tests here never depend on timing (a test's own @settings still sets what it names)
settings.register_profile("tinyviz", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tinyviz")

# the compile cache on disk (compiler/runtime/diskcache.py) of this test session is its own, made empty: the suite never
# reads what another run (or the user's programs) left in the user's cache, nor writes there; subprocesses inherit it
os.environ["TINYVIZ_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="tinyviz-compile-")
atexit.register(shutil.rmtree, os.environ["TINYVIZ_COMPILE_CACHE"], ignore_errors=True)


@pytest.fixture(autouse=True)
def _tensor_tests_use_the_interpreter(request, monkeypatch):
  # the Tensor op tests check the scheduler against numpy through the reference interpreter; test_llvm_tensor.py
  # re-runs the same tests compiled (the user-facing default backend)
  if request.module.__name__ in ("test_tensor", "test_tensor_movement", "test_tensor_nn"):
    monkeypatch.setenv("BACKEND", "interp")


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


@pytest.fixture
def server(tmp_path):
  """A viewer in this process serving the folder tmp_path/traces (yields the folder and the viewer's URL)."""
  d = tmp_path / "traces"
  d.mkdir()
  app = create_app([d], follow=False)
  srv = bind(app, "127.0.0.1", 0)
  store = app.extensions["tinyviz"]["store"]
  store.start()
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  yield d, f"http://127.0.0.1:{srv.port}"
  srv.shutdown()
  store.stop()
  srv.server_close()
