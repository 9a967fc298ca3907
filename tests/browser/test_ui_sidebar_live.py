"""The sidebar while a rewrite is still running: its `changed` is not known yet (null), so it must show as in progress,
neither dimmed nor hidden by "hide unchanged", and become an ordinary (here: unchanged) rewrite once it ends."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap

from support.browser import ROOT, open_page, shot
from support.proc_helpers import open_gate, stop_writer

# ctx "live ctx": a rewrite that changes the graph, one that does not, then one whose rule waits at a gate the test
# opens (proc_helpers; the recorder's background thread flushes meanwhile, so the viewer sees the rewrite begun but not
# ended). argv: path, then "die" to die inside the blocked rewrite
WRITER = textwrap.dedent("""
  import os, sys
  from compiler import Ops, PatternMatcher, UOp, UPat, graph_rewrite
  from compiler.trace import recorder
  from support.proc_helpers import wait_at_gate

  def wait_for_gate(x):
    wait_at_gate()
    if sys.argv[2:] == ["die"]:  # the writer dies inside the rewrite: it never ends
      recorder.RECORDER.writer.flush()
      os._exit(3)
    return None

  recorder.enable(sys.argv[1], announce=False)
  add0 = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), lambda x: x)], name="add0")
  gate = PatternMatcher([(UPat(Ops.MUL, name="x"), wait_for_gate)], name="gate")
  x = UOp.variable("x", 0, 10)
  with recorder.trace_context("live ctx", kind="schedule"):
    graph_rewrite((x + 0) * 2, add0, name="changes")
    graph_rewrite(x * 3, add0, name="no change")
    graph_rewrite(x * 4, gate, name="blocked")
  recorder.disable()
""")


_ATTEMPT = itertools.count()  # a rerun of a test writes a new file: the server still serves the first attempt's


def _path(server, stem: str):
  """A trace file of its own for this test attempt."""
  return server.dir / f"{stem}-{next(_ATTEMPT)}.vztrace"


def _writer(path, *args: str) -> subprocess.Popen:
  env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
  return subprocess.Popen([sys.executable, "-c", WRITER, str(path), *args], cwd=ROOT, env=env, stdin=subprocess.PIPE)


def _rows(page) -> dict[str, dict]:
  """The rewrite rows on screen: name -> {cls, opacity, dt}."""
  got = page.eval_on_selector_all("#rewrites li[data-rw]", """els => els.map(e => ({
    name: e.querySelector('.rname').textContent, cls: e.className, opacity: getComputedStyle(e).opacity,
    dt: e.querySelector('.dt').textContent}))""")
  return {r["name"]: r for r in got}


def _begun(server, t: int) -> list:
  """The trace's contexts once its rewrite "blocked" has begun (asked again on each of the viewer's events)."""
  return server.wait_api(f"/api/traces/{t}/contexts", lambda cs: "blocked" in _rewrites(cs) and cs,
                         "the blocked rewrite to begin")


def _rewrites(ctxs) -> dict[str, dict]:
  return {r["name"]: r for c in ctxs for r in c["rewrites"]}


def _open_running(page, server, path) -> int:
  """Open the page on the writer's "live ctx" once its rewrite "blocked" runs (shown as running); the trace's id."""
  t = server.trace_id(path.name)
  ctxs = _begun(server, t)
  ctx = next(c["id"] for c in ctxs if c["name"] == "live ctx")
  open_page(page, server, f"#t={t}&c={ctx}&r={_rewrites(ctxs)['changes']['id']}")
  page.wait_for_selector("#rewrites li.running >> text=blocked")
  return t


def test_a_rewrite_cut_off_by_a_dead_writer_is_marked_so(page, server):
  path = _path(server, "sidebar-dead")
  proc = _writer(path, "die")
  try:
    t = server.trace_id(path.name)
    ctxs = _begun(server, t)
    ctx = next(c["id"] for c in ctxs if c["name"] == "live ctx")
    open_page(page, server, f"#t={t}&c={ctx}")
    page.wait_for_selector("#rewrites li[data-rw] >> text=blocked")
    assert _rows(page)["blocked"]["dt"] == "running…"
    open_gate(proc)
    assert proc.wait(30) == 3
    page.wait_for_function("() => document.querySelector('#trace-status').textContent === 'damaged'", timeout=60_000)
    page.wait_for_function("() => document.querySelector('#rewrites li.cut')")
    row = _rows(page)["blocked"]
    assert "running" not in row["cls"].split() and "cut" in row["cls"].split() and row["dt"] == "cut off"
    page.check("#hide-unchanged")  # not "unchanged" either: nobody knows what it would have changed
    page.wait_for_function("() => !document.querySelector('#rewrites li[data-rw][class~=unchanged]')")
    assert "blocked" in _rows(page)
  finally:
    stop_writer(proc)


def test_a_running_rewrite_is_neither_dimmed_nor_hidden(page, server):
  path = _path(server, "sidebar-live")
  proc = _writer(path)
  try:
    t = server.trace_id(path.name)
    ctxs = _begun(server, t)
    rws = _rewrites(ctxs)
    assert (rws["blocked"]["ended"], rws["blocked"]["changed"]) == (False, None)  # what the sidebar is given
    assert (rws["changes"]["changed"], rws["no change"]["changed"]) == (True, False)
    ctx = next(c["id"] for c in ctxs if c["name"] == "live ctx")
    open_page(page, server, f"#t={t}&c={ctx}&r={rws['changes']['id']}")
    page.wait_for_selector("#rewrites li[data-rw] >> text=blocked")
    rows = _rows(page)
    assert "running" in rows["blocked"]["cls"].split() and "unchanged" not in rows["blocked"]["cls"].split()
    assert float(rows["blocked"]["opacity"]) == 1.0 and rows["blocked"]["dt"] == "running…"
    assert "unchanged" in rows["no change"]["cls"].split() and float(rows["no change"]["opacity"]) < 1.0
    assert float(rows["changes"]["opacity"]) == 1.0
    page.check("#hide-unchanged")
    page.wait_for_function("() => !document.querySelector('#rewrites li[data-rw][class~=unchanged]')")
    assert set(_rows(page)) == {"changes", "blocked"}  # the running rewrite stays; the finished unchanged one goes
    shot(page, "sidebar-running-rewrite")
    # once it ends without a change it is an unchanged rewrite like any other: hidden, live, without a reload
    open_gate(proc)
    assert proc.wait(30) == 0
    page.wait_for_function("() => document.querySelector('#trace-status').textContent === 'ended'", timeout=60_000)
    page.wait_for_function("() => document.querySelectorAll('#rewrites li[data-rw]').length === 1")
    assert set(_rows(page)) == {"changes"}
    page.uncheck("#hide-unchanged")
    page.wait_for_function("() => document.querySelectorAll('#rewrites li[data-rw]').length === 3")
    rows = _rows(page)
    assert "unchanged" in rows["blocked"]["cls"].split() and "running" not in rows["blocked"]["cls"].split()
    assert rows["blocked"]["dt"] != "running…"
  finally:
    stop_writer(proc)


def test_a_rewrite_that_ends_before_the_live_feed_connects_is_shown_ended(page, server):
  # the socket.io client is held until the writer is done: its first trace list says "ended" with the same counts
  # (a rewrite's end adds no counted record), and no event follows; the page must ask for the contexts again anyway
  path = _path(server, "sidebar-late")
  proc = _writer(path)
  held = []
  page.route("**/vendor/socket.io*", lambda route: held.append(route))
  try:
    with page.expect_request("**/vendor/socket.io*"):
      _open_running(page, server, path)
    open_gate(proc)
    assert proc.wait(30) == 0
    server.trace_id(path.name, ended=True)
    page.evaluate("() => 1")  # a round trip: the held request's route has reached its handler
    assert held, "the page asked for the socket.io client"
    for route in held:
      route.continue_()
    page.wait_for_function("() => document.querySelector('#trace-status').textContent === 'ended'", timeout=60_000)
    # (the status shows the end at once; the rows follow with the contexts that change asks for)
    page.wait_for_selector("#rewrites li.unchanged >> text=blocked")
    assert not page.query_selector("#rewrites li.running, #rewrites li.cut")
  finally:
    stop_writer(proc)


def test_a_rewrite_that_ends_with_its_trace_is_never_shown_cut_off(page, server):
  # the trace's end flips its status at once, while the ends of its last rewrites come with the contexts asked for
  # after it (held here): until those come the rows stay as they were, never "cut off" from the contexts before
  path = _path(server, "sidebar-end")
  proc = _writer(path)
  try:
    t = _open_running(page, server, path)
    held = []
    page.route(f"**/api/traces/{t}/contexts", lambda route: held.append(route))
    with page.expect_request(f"**/api/traces/{t}/contexts"):
      open_gate(proc)
      assert proc.wait(30) == 0
    page.wait_for_function("() => document.querySelector('#trace-status').textContent === 'ended'", timeout=60_000)
    page.evaluate("() => 1")  # a round trip: the held requests' routes have reached their handler
    assert held, "the page asked for the contexts again"
    assert not page.query_selector("#rewrites li.cut")
    for route in held:
      route.continue_()
    page.unroute(f"**/api/traces/{t}/contexts")
    page.wait_for_selector("#rewrites li.unchanged >> text=blocked")
    assert not page.query_selector("#rewrites li.running, #rewrites li.cut")
  finally:
    stop_writer(proc)
