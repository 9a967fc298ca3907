"""Issue 32 in the browser: a trace recorded with switches on (SKIP_RULES, SKIP_OPTS) says so in a note under the
header, built from text nodes (a rule name holding markup stays text); a plain trace shows none."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.browser import ROOT, Server, open_page, shot

MARKUP = "<img src=x onerror=\"document.body.dataset.pwned='1'\">"
PROGRAM = """
import numpy as np
from compiler.tensor import Tensor
a = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
print(((a + 1) * 3).sum(axis=1).numpy())
"""


def _record(d: Path, name: str, **switches: str) -> None:
  (d / "prog.py").write_text(PROGRAM)
  env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(d), "DISABLE_COMPILER_CACHE": "1",
         "VIZ": "-1", "VIZ_TRACE": str(d / f"{name}.vztrace"), **switches}
  p = subprocess.run([sys.executable, "prog.py"], cwd=d, env=env, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr[-2000:]


@pytest.fixture(scope="module")
def switched_server(tmp_path_factory):
  d = tmp_path_factory.mktemp("switched")
  _record(d, "switched", SKIP_RULES=f"commutative_order,{MARKUP}", SKIP_OPTS="1")
  _record(d, "plain")
  srv = Server(d, tmp_path_factory.mktemp("log") / "server.log")
  yield srv
  srv.stop()


def test_the_banner_says_what_was_off(page, switched_server):
  t = switched_server.trace_id("switched.vztrace", ended=True)
  open_page(page, switched_server, f"#t={t}")
  note = page.locator("#banner .off")
  note.wait_for()
  assert page.locator("#banner").is_visible() and "switched" in page.locator("#banner").get_attribute("class")
  text = note.inner_text()
  assert text.startswith("Switches on This run was made with rules ")
  assert "commutative_order" in text and MARKUP in text and "every kernel opt" in text
  assert page.locator("#banner img").count() == 0 and page.evaluate("() => document.body.dataset.pwned") is None
  shot(page, "switches-banner")


def test_a_plain_trace_shows_no_switches_note(page, switched_server):
  t = switched_server.trace_id("plain.vztrace", ended=True)
  open_page(page, switched_server, f"#t={t}")
  page.wait_for_function("() => document.querySelector('#trace-status').textContent === 'ended'")
  assert page.locator("#banner").is_hidden() and page.locator("#banner .off").count() == 0


def test_show_says_what_was_off(switched_server):
  env = {k: v for k, v in os.environ.items() if not k.startswith(("VIZ", "SKIP_"))}
  def show(name: str) -> str:
    return subprocess.run([sys.executable, "-m", "compiler.trace", "show", str(switched_server.dir / name)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300).stdout
  head = show("switched.vztrace").splitlines()[1]
  assert head.startswith("off: rules ") and "commutative_order" in head
  assert head.endswith("opts * (switches: not a plain run)")
  assert "off:" not in show("plain.vztrace")
