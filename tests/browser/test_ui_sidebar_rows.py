"""The sidebar while a live trace grows (issue 18): a refresh keeps the rows that did not change (no rebuild and
relayout of every row, which was a long frame at hundreds of contexts) and leaves the list where the user scrolled it;
records that arrive between the first view and socket.io's connecting are shown too."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from support.browser import ROOT, open_page
from support.proc_helpers import open_gate, stop_writer

# contexts "a 0 ctx".."a N-1 ctx", flushed; then, once the test opens the gate (proc_helpers), "b 0 ctx".. and the end
WRITER = textwrap.dedent("""
  import sys
  from compiler import Ops, PatternMatcher, UOp, UPat, graph_rewrite
  from compiler.trace import recorder
  from support.proc_helpers import wait_at_gate

  path, n, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
  recorder.enable(path, announce=False)
  add0 = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), lambda x: x)], name="add0")
  x = UOp.variable("x", 0, 10)
  def contexts(prefix, count):
    for i in range(count):
      # (not "a 0", "a 1", ...: alike names fold into one row, and this test counts the rows)
      with recorder.trace_context(f"{prefix} {i} ctx", kind="schedule"):
        graph_rewrite((x + 0) * (i + 2), add0, name="changes")
  contexts("a", n)
  recorder.RECORDER.writer.flush()
  wait_at_gate()
  contexts("b", m)
  recorder.disable()
""")

ROWS = "() => document.querySelectorAll('#contexts li[data-ctx]').length"


def _writer(path, n: int, m: int) -> subprocess.Popen:
  env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
  return subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(n), str(m)], cwd=ROOT, env=env,
                          stdin=subprocess.PIPE)


def _contexts(server, t: int, n: int) -> None:
  server.wait_api(f"/api/traces/{t}/contexts", lambda cs: len([c for c in cs if c["rewrites"]]) >= n,
                  f"{n} contexts with rewrites on the server")


def test_a_live_refresh_keeps_unchanged_rows_and_the_scroll(new_page, server):
  path = server.dir / "sidebar-rows.vztrace"
  proc = _writer(path, 80, 5)
  try:
    t = server.trace_id(path.name)
    _contexts(server, t, 80)
    page = new_page()
    open_page(page, server, f"#t={t}")
    page.wait_for_function(f"() => ({ROWS})() >= 80")
    # mark the rows on screen, and scroll the list away from the selection (the first context)
    page.evaluate("""() => {
      for (const li of document.querySelectorAll('#contexts li[data-ctx]')) li.dataset.seen = 'yes';
      document.querySelector('#contexts').scrollTop = 600;
    }""")
    top = page.evaluate("() => document.querySelector('#contexts').scrollTop")
    assert top > 0 and page.evaluate(ROWS) == 80  # the writer waits at the gate: no "b" context yet
    open_gate(proc)
    assert proc.wait(60) == 0
    page.wait_for_function(f"() => ({ROWS})() >= 85", timeout=60_000)
    got = page.eval_on_selector_all("#contexts li[data-ctx]", "els => els.map(e => [e.title, e.dataset.seen || ''])")
    old = [seen for title, seen in got if ": a " in title]
    new = [seen for title, seen in got if ": b " in title]
    assert len(old) == 80 and all(old)  # the same elements: not rebuilt
    assert len(new) == 5 and not any(new)
    # a refresh keeps the selection, so it does not scroll back to it
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)))")
    assert page.evaluate("() => document.querySelector('#contexts').scrollTop") == top
  finally:
    stop_writer(proc)


def test_records_written_before_socketio_connects_are_shown(new_page, server):
  path = server.dir / "sidebar-early.vztrace"
  proc = _writer(path, 2, 3)
  held = []
  try:
    t = server.trace_id(path.name)
    _contexts(server, t, 2)
    page = new_page()
    # the socket.io client waits until the trace has grown and ended: no event tells the page about what came
    def hold(route) -> None:  # (the flag in the page: a wait there ends once this handler has run)
      held.append(route)
      page.evaluate("() => { window.__socketioHeld = true }")
    page.route("**/vendor/socket.io.esm.min.js", hold)
    open_page(page, server, f"#t={t}")
    page.wait_for_function("() => document.body.dataset.graph")
    assert page.evaluate(ROWS) == 2
    open_gate(proc)
    assert proc.wait(60) == 0
    server.wait_api("/api/traces", lambda ts: next(x for x in ts if x["id"] == t)["status"] == "ended",
                    "the trace to end")
    page.wait_for_function("() => window.__socketioHeld === true", timeout=60_000)  # the page asked for the client
    held[0].continue_()
    page.wait_for_function(f"() => ({ROWS})() === 5", timeout=60_000)
  finally:
    stop_writer(proc)


def test_an_older_refresh_answered_last_does_not_take_rows_back(new_page, server):
  # two live refreshes whose answers come back out of order (a loaded machine): the older one's fewer contexts must
  # not replace the newer one's, since no later event would bring them back (seen once in a loaded CI-like run)
  path = server.dir / "sidebar-order.vztrace"
  proc = _writer(path, 85, 0)
  held = []
  try:
    open_gate(proc)
    assert proc.wait(60) == 0
    t = server.trace_id(path.name)
    _contexts(server, t, 85)
    fresh = server.api(f"/api/traces/{t}/contexts")
    stale = fresh[:80]
    page = new_page()
    open_page(page, server, f"#t={t}")
    page.wait_for_function(f"() => ({ROWS})() === 85")

    def answer(route):
      if held:  # the newer request: answered by the server at once
        route.continue_()
      else:  # the older one: held, answered with the contexts it would have got earlier
        held.append(route)
    page.route(f"**/api/traces/{t}/contexts", answer)
    page.evaluate("() => { window.__older = window.__viz.refreshContexts(); }")
    page.evaluate("() => window.__viz.refreshContexts()")  # the newer refresh, to its end
    assert len(held) == 1 and page.evaluate(ROWS) == 85
    held[0].fulfill(json=stale)
    page.evaluate("() => window.__older")  # the older refresh, to its end
    assert page.evaluate(ROWS) == 85
  finally:
    stop_writer(proc)
