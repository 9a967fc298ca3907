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
from support.browser import CHROMIUM, CHROMIUM_ARGS, PageErrors, Server


def pytest_collection_modifyitems(items):
  for item in items:
    if "tests/browser/" in str(item.fspath).replace(os.sep, "/"):
      item.add_marker(pytest.mark.browser)


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
