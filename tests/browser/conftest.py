"""Fixtures for the real-browser tests: recorded traces, a viz_server subprocess, Debian's chromium via Playwright.

Every page records console errors and uncaught exceptions; a test fails if any appear. The page carries a strict
Content-Security-Policy (templates/index.html), so an inline script, eval or style attribute would be such an error.
Screenshots go to test-artifacts/ (gitignored).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tracegen  # noqa: E402
from proc_helpers import wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def pytest_collection_modifyitems(items):
  for item in items:
    if "tests/browser/" in str(item.fspath).replace(os.sep, "/"):
      item.add_marker(pytest.mark.browser)


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def get_json(url: str):
  with urllib.request.urlopen(url, timeout=30) as r:
    return json.loads(r.read())


class Server:
  """`python -m viz_server DIR` on a free port; the directory is watched, so traces written there show up."""

  def __init__(self, trace_dir: Path, log: Path):
    self.dir = trace_dir
    self.port = free_port()
    self.url = f"http://127.0.0.1:{self.port}"
    self.log = open(log, "w")
    self.proc = subprocess.Popen([sys.executable, "-m", "viz_server", str(trace_dir), "--port", str(self.port),
                                  "--host", "127.0.0.1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 env={**os.environ, "VIZ": "0", "PYTHONPATH": str(ROOT)})
    self.serving = threading.Event()  # its "serving ... at URL" line (printed once it listens), or its output's end
    self._tee_thread = threading.Thread(target=self._tee, daemon=True)
    self._tee_thread.start()
    if not self.serving.wait(120) or self.proc.poll() is not None:
      self.log.flush()
      raise RuntimeError(f"viz_server did not start: {log.read_text()[-2000:]}")

  def _tee(self) -> None:
    """Copy the viewer's output into its log, line by line, and say when it serves."""
    for line in iter(self.proc.stdout.readline, b""):
      self.log.write(line.decode(errors="replace"))
      self.log.flush()
      if line.startswith(b"tinyviz: serving "):
        self.serving.set()
    self.serving.set()

  def api(self, path: str):
    return get_json(self.url + path)

  def trace_id(self, name: str, timeout: float = 60, ended: bool = False) -> int:
    """The id of the served trace whose name contains `name` (waits for the directory scan to find it; with `ended`,
    also for the store to have read it to its end record)."""
    def served() -> tuple[int] | None:  # (a 1-tuple: trace id 0 is a falsy answer for wait_until)
      return next(((t["id"],) for t in self.api("/api/traces")
                   if name in t["name"] and (not ended or t["status"] == "ended")), None)
    try:
      return wait_until(served, f"trace {name}", timeout=timeout)[0]
    except AssertionError:
      raise AssertionError(f"trace {name} not served: {self.api('/api/traces')}") from None

  def stop(self):
    self.proc.terminate()
    try:
      self.proc.wait(10)
    except subprocess.TimeoutExpired:
      self.proc.kill()
    self._tee_thread.join(30)  # (its output ended with the process)
    self.log.close()


@pytest.fixture(scope="session")
def trace_dir(tmp_path_factory) -> Path:
  d = tmp_path_factory.mktemp("traces")
  tracegen.write_demo(d / "demo.vztrace")
  tracegen.write_evil(d / "evil.vztrace")
  tracegen.write_jumps(d / "jumps.vztrace")
  return d


@pytest.fixture(scope="session")
def server(trace_dir, tmp_path_factory):
  srv = Server(trace_dir, tmp_path_factory.mktemp("log") / "server.log")
  yield srv
  srv.stop()


@pytest.fixture(scope="session")
def browser():
  if not os.path.exists(CHROMIUM):
    pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (make chromium)")
  from playwright.sync_api import sync_playwright
  with sync_playwright() as p:
    b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    yield b
    b.close()


class PageErrors:
  def __init__(self):
    self.items: list[str] = []
    self.allowed: list[str] = []  # substrings of errors a test provokes on purpose

  def console(self, msg):
    if msg.type == "error" and not any(a in msg.text for a in self.allowed):
      self.items.append(f"console: {msg.text}")

  def pageerror(self, exc):
    self.items.append(f"pageerror: {exc}")


@pytest.fixture
def new_page(browser):
  """new_page() -> a Playwright page (1400x900) that fails the test on console errors or uncaught exceptions."""
  contexts, errors = [], []

  def make(width: int = 1400, height: int = 900):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    page = ctx.new_page()
    page.set_default_timeout(30_000)  # generous: a loaded 2-core machine is slow, and a wait ends when its event comes
    err = PageErrors()
    page.on("console", err.console)
    page.on("pageerror", err.pageerror)
    page.errors = err
    contexts.append(ctx)
    errors.append(err)
    return page

  yield make
  for ctx in contexts:
    ctx.close()
  problems = [e for err in errors for e in err.items]
  assert not problems, "errors in the page:\n" + "\n".join(problems)


@pytest.fixture
def page(new_page):
  return new_page()


def shot(page, name: str) -> Path:
  """Save a screenshot under test-artifacts/."""
  ARTIFACTS.mkdir(exist_ok=True)
  path = ARTIFACTS / f"{name}.png"
  page.screenshot(path=str(path))
  return path


def wait_graph(page, trace: int, rw: int, step: int) -> None:
  """Wait until the graph of (trace, rewrite, step) is on screen."""
  page.wait_for_function("(want) => document.body.dataset.graph === want", arg=f"{trace}:{rw}:{step}")


def graph_ids(page) -> set[int]:
  """Ids of the nodes the graph view draws (its model; ghosts of removed nodes excluded)."""
  return set(page.evaluate("() => window.__viz.graph.ids()"))


def ids_with_mark(page, mark: str) -> set[int]:
  """Ids drawn with a highlight: added, changed, selected, hit, related."""
  return set(page.evaluate("(m) => window.__viz.graph.ids().filter(id => window.__viz.graph.hasMark(id, m))", mark))


def state(page) -> dict:
  return page.evaluate("() => ({...window.__viz.state})")


def open_page(page, server, hash_: str = "") -> None:
  """Load the UI (optionally at a deep link) and wait for its start-up to finish."""
  page.goto(f"{server.url}/{hash_}")
  page.wait_for_function("() => window.__viz !== undefined")
  page.evaluate("() => window.__viz.ready")
