"""Issue 27 in the browser: a trace whose program died shows a banner saying how it ended, its message as text (markup
in it is never parsed) and its traceback on request; a clean trace shows none."""
from __future__ import annotations

import pytest
from support.browser import Server, open_page, shot
from support.crash_script import LINES, run_script

MARKUP = "<img src=x onerror=\"document.body.dataset.pwned='1'\">"


@pytest.fixture(scope="module")
def crash_server(tmp_path_factory):
  d = tmp_path_factory.mktemp("crash")
  run_script(d, "error", d / "crash.vztrace", message=f"boom {MARKUP} <b>bold</b>")
  run_script(d, "clean", d / "clean.vztrace")
  srv = Server(d, tmp_path_factory.mktemp("log") / "server.log")
  yield srv
  srv.stop()


def test_the_banner_shows_how_the_program_ended_as_text(page, crash_server):
  t = crash_server.trace_id("crash.vztrace", ended=True)
  open_page(page, crash_server, f"#t={t}")
  banner = page.locator("#banner .exit")
  banner.wait_for()
  assert page.locator("#banner").is_visible() and banner.get_attribute("data-kind") == "exception"
  text = banner.inner_text()
  assert text.startswith("Program error The program ended with an error: ValueError: boom " + MARKUP + " <b>bold</b>")
  assert f"script.py:{LINES['RAISE']} in main" in text
  assert page.locator("#banner img, #banner b b").count() == 0  # the markup stayed text: no element made of it
  assert page.evaluate("() => document.body.dataset.pwned") is None
  assert not page.locator("#banner pre").is_visible()  # the traceback is folded until asked for
  banner.locator("summary").click()
  pre = page.locator("#banner pre")
  pre.wait_for()
  assert "raise ValueError(sys.argv[2])  # RAISE" in pre.inner_text()
  assert f'line {LINES["RAISE"]}, in main' in pre.inner_text()
  shot(page, "crash-banner")


def test_a_clean_trace_shows_no_banner(page, crash_server):
  t = crash_server.trace_id("clean.vztrace", ended=True)
  open_page(page, crash_server, f"#t={t}")
  page.wait_for_function("() => document.querySelector('#trace-status').textContent === 'ended'")
  assert page.locator("#banner").is_hidden() and page.locator("#banner .exit").count() == 0
