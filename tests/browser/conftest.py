"""Fixtures for the real-browser tests: recorded traces, a viz_server subprocess, Debian's chromium via Playwright.

Every page records console errors and uncaught exceptions; a test fails if any appear. The page carries a strict
Content-Security-Policy (templates/index.html), so an inline script, eval or style attribute would be such an error.
Screenshots go to test-artifacts/ (gitignored).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import tracegen
from support.browser import CHROMIUM, CHROMIUM_ARGS, REBUILD_STEPS, PageErrors, Server
from support.export_helpers import _rebuilding, moving_chains

# A browser test runs once more after a failure (Playwright's own runner retries on CI the same way): a real page on a
# loaded 2-core machine has races no test foresaw, and one of them must not sink a submission. A rerun is not hidden:
# tests/conftest.py prints each first failure in full, with the page's state, at the end of the run.
RERUNS = 1


def pytest_collection_modifyitems(items):
  for item in items:
    if "tests/browser/" in str(item.fspath).replace(os.sep, "/"):
      item.add_marker(pytest.mark.browser)
      item.add_marker(pytest.mark.flaky(reruns=RERUNS))


# what the page showed when a test failed: where it was, what it had selected, which panel, what had the focus
PAGE_STATE = """() => {
  const v = window.__viz, el = document.activeElement;
  const panels = [...document.querySelectorAll('#panels .panel')].map((p) =>
    `${p.dataset.panel}${p.hidden ? '' : '*'}: ${p.innerText.slice(0, 160).replace(/\\s+/g, ' ')}`);
  return JSON.stringify({url: location.hash, state: v ? v.state : null, ready: !!v,
    focus: el ? `${el.tagName}#${el.id}.${el.className}` : null, graph: document.body.dataset.graph ?? null, panels});
}"""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
  report = yield
  if report.failed and call.when == "call":
    for i, page in enumerate(getattr(item, "pages", [])):
      try:
        text = page.evaluate(PAGE_STATE)
      except Exception as e:  # noqa: BLE001 (a closed or crashed page: say so)
        text = f"unreadable: {e}"
      report.sections.append((f"page {i} state", str(text)))
  return report


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
def rebuild_server(tmp_path_factory):
  """A trace whose rewrite rebuilds, at every one of its REBUILD_STEPS steps, a chain of 30 nodes above what it replaced
  (packed as `rebuilt` runs): the step-delta and edge-key tests step through it. Beside it `moving`, whose steps
  rebuild chains of nodes with call sites and move them (support.export_helpers.moving_chains)."""
  d = tmp_path_factory.mktemp("rebuild-traces")
  _rebuilding(d / "rebuild.vztrace", depth=30, steps=REBUILD_STEPS)
  moving_chains(d / "moving.vztrace", depth=20, steps=REBUILD_STEPS)
  srv = Server(d, tmp_path_factory.mktemp("rebuild-log") / "server.log")
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


@pytest.fixture
def new_page(browser, request):
  """new_page() -> a Playwright page (1400x900) that fails the test on console errors or uncaught exceptions."""
  contexts, errors = [], []
  request.node.pages = []  # for the page's state in a failure's report (pytest_runtest_makereport)

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
    request.node.pages.append(page)
    return page

  yield make
  for ctx in contexts:
    ctx.close()
  problems = [e for err in errors for e in err.items]
  assert not problems, "errors in the page:\n" + "\n".join(problems)


@pytest.fixture
def page(new_page):
  return new_page()
