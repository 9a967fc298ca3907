"""The Diff panel's "first divergence": B's trace picked with its control, the button sets A and B to where the
two traces first diverge as GET /api/compare reports it, shows them side by side and says what differs."""
from __future__ import annotations

import pytest
import tracegen
from conftest import Server, open_page
from test_ui_diff import choose, wait_diff

from compiler.trace import recorder


def write_variant(path):
  """The demo trace with one op more in kernel E_32 (extra=3): the same program but for one op."""
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("schedule 1", kind="schedule"):
      tracegen.graph_rewrite(tracegen.schedule_graph(), tracegen.simplify_pm, name="early simplify")
    tracegen.record_kernel("r_16_4", 16)
    tracegen.record_kernel("E_32", 32, colors=("cyan", "green"), beam=False, extra=3)
  finally:
    recorder.disable()


def write_without_rule(path):
  """The demo's schedule with `simplify` lacking its `x + 0` rule: same input graph, a different match."""
  pm = tracegen.PatternMatcher([(r.pat, r.fn) for r in tracegen.simplify_pm.rules if r.fn is not tracegen.add_zero],
                               name="simplify")
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("schedule 1", kind="schedule"):
      tracegen.graph_rewrite(tracegen.schedule_graph(), pm, name="early simplify")
  finally:
    recorder.disable()


@pytest.fixture(scope="module")
def pair_server(tmp_path_factory):
  d = tmp_path_factory.mktemp("pair")
  tracegen.write_demo(d / "base.vztrace")
  write_variant(d / "variant.vztrace")
  write_without_rule(d / "norule.vztrace")
  srv = Server(d, tmp_path_factory.mktemp("log") / "pair_server.log")
  yield srv
  srv.stop()


def test_first_divergence_sets_the_points(page, pair_server):
  srv = pair_server
  ta, tb = srv.trace_id("base.vztrace"), srv.trace_id("variant.vztrace")
  rep = srv.api(f"/api/compare?a={ta}&b={tb}")
  d = rep["first_divergence"]
  assert d["kind"] == "differs" and d["a"]["ctx_name"] == "E_32" and d["input_differs"]
  open_page(page, srv, f"#t={ta}&p=diff")
  # B's contexts are held until after the click: a user may click while B's trace choice is still loading, and the
  # button compares the trace B's picker shows (the diff that the pick then starts does not cancel it)
  held = []
  page.route(f"**/api/traces/{tb}/contexts", lambda route: held.append(route))
  choose(page, "b", "trace", "variant")
  page.click("#panel-diff button.first-divergence")
  page.wait_for_function("(want) => document.querySelector('#panel-diff .diff-divergence').dataset.divergence === want",
                         arg=f"{ta} {tb}")
  assert held, "B's contexts were requested"
  for route in held:
    route.continue_()
  page.unroute(f"**/api/traces/{tb}/contexts")
  # the inputs differ, so the points are the two rewrites' step 0
  a, b = f"{ta}:{d['a']['id']}:0", f"{tb}:{d['b']['id']}:0"
  wait_diff(page, a, b)
  got = page.evaluate("() => ({a: window.__viz.diffPanel.a, b: window.__viz.diffPanel.b})")
  assert got == {"a": a, "b": b}
  assert page.input_value("[data-point=a]") == a and page.input_value("[data-point=b]") == b
  note = page.text_content("#panel-diff .diff-divergence")
  assert "first divergence" in note and "input graphs differ" in note and d["a"]["name"] in note
  # the text diff is the API's diff of those two points: the one op more is in B only
  want = srv.api(f"/api/diff?a={a}&b={b}")
  assert any(ln["kind"] == "+" for ln in want["lines"])
  added = page.eval_on_selector_all(".diff-text .dl.add", "els => els.map(e => e.lastChild.textContent)")
  assert added == [ln["text"] for ln in want["lines"] if ln["kind"] == "+"]


def test_first_divergence_at_a_differing_match(page, pair_server):
  srv = pair_server
  ta, tb = srv.trace_id("base.vztrace"), srv.trace_id("norule.vztrace")
  d = srv.api(f"/api/compare?a={ta}&b={tb}")["first_divergence"]
  assert d["kind"] == "differs" and not d["input_differs"] and d["step"] is not None
  assert d["a"]["name"] == "early simplify"
  k = d["step"]["k"]
  a, b = f"{ta}:{d['a']['id']}:{min(k, d['a']['matches'])}", f"{tb}:{d['b']['id']}:{min(k, d['b']['matches'])}"
  open_page(page, srv, f"#t={ta}&p=diff")
  choose(page, "b", "trace", "norule")
  page.click("#panel-diff button.first-divergence")
  wait_diff(page, a, b)
  assert page.evaluate("() => [window.__viz.diffPanel.a, window.__viz.diffPanel.b]") == [a, b]
  note = page.text_content("#panel-diff .diff-divergence")
  assert f"match {k} differs" in note
  rule = (d["step"]["a"] or d["step"]["b"])["rule"]["name"]
  assert rule in note


def test_first_divergence_needs_another_trace(page, pair_server):
  srv = pair_server
  ta = srv.trace_id("base.vztrace")
  open_page(page, srv, f"#t={ta}&p=diff")
  choose(page, "b", "trace", "base")
  page.click("#panel-diff button.first-divergence")
  page.wait_for_function("() => document.querySelector('#panel-diff .diff-divergence').textContent"
                         ".includes('Pick another trace for B')")
