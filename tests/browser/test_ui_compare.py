"""The Diff panel's "first divergence": B's trace picked with its control, the button sets A and B to where the
two traces first diverge as GET /api/compare reports it, shows them side by side and says what differs; it lists the
kernels that differ (and those in one trace only), each a button to diff their final ASTs and a link to the kernel."""
from __future__ import annotations

import pytest
from support import tracegen
from support.browser import Server, check_text, choose, open_page, shot, wait_diff

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
  pm = tracegen.PatternMatcher([r.entry for r in tracegen.simplify_pm.rules if r.fn is not tracegen.add_zero],
                               name="simplify")
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("schedule 1", kind="schedule"):
      tracegen.graph_rewrite(tracegen.schedule_graph(), pm, name="early simplify")
  finally:
    recorder.disable()


def write_tuned(path):
  """The demo's program with E_32 made another way (one op more, other opts, one source, about twice as slow) and a
  kernel E_8 more: every kind of kernel difference the compare report has but beam."""
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("schedule 1", kind="schedule"):
      tracegen.graph_rewrite(tracegen.schedule_graph(), tracegen.simplify_pm, name="early simplify")
    tracegen.record_kernel("r_16_4", 16)
    with recorder.trace_context("E_32", kind="kernel"):
      ast = tracegen.track_graph(tracegen.kernel_ast("E_32", 32, 3), "View Base AST")
      tracegen.graph_rewrite(ast, tracegen.simplify_pm, name="simplify")
      recorder.record("opt", op="UPCAST", axis=0, arg=8, ok=True, reason=None, shape=[4, 8], colors=["cyan", "green"],
                      kname="E_32_8")
      recorder.record("source", kind="llvm_ir", text="define void @E_32() {\n  ret void\n}", compile_s=0.01)
      times = [8.0e-6, 8.2e-6, 8.4e-6]  # the demo's E_32 best is 3.8e-6: B/A 2.11, not near a rounding edge
      recorder.record("run", kname="E_32", times=times, min=min(times), median=times[1], flops=64.0, bytes=256.0,
                      gflops=64.0 / times[1] / 1e9, gbs=256.0 / times[1] / 1e9)
    tracegen.record_kernel("E_8", 8)
  finally:
    recorder.disable()


@pytest.fixture(scope="module")
def pair_server(tmp_path_factory):
  d = tmp_path_factory.mktemp("pair")
  tracegen.write_demo(d / "base.vztrace")
  write_variant(d / "variant.vztrace")
  write_without_rule(d / "norule.vztrace")
  write_tuned(d / "tuned.vztrace")
  tracegen.write_evil(d / "evil.vztrace")
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
  # the demo's kernel sources and runs depend on the name and size only: E_32 differs by its final AST alone (one op)
  assert [(r["kernel"], r["kinds"]) for r in want_kernels(rep, ta, tb)] == [("E_32", "final AST")]
  page.locator("#panel-diff .diff-kernel").first.wait_for()
  assert page.locator("#panel-diff .diff-kernel").count() == 1
  assert page.get_attribute("#panel-diff .diff-kernels", "data-compared") == f"{ta} {tb}"
  assert "1 of 2 in both traces differ" in page.text_content("#panel-diff .diff-kernels")


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


KERNEL_ROWS = """els => els.map(e => ({kernel: e.dataset.kernel, kinds: e.dataset.kinds, ratio: e.dataset.ratio,
  a: e.dataset.a, b: e.dataset.b, name: e.querySelector('.kname').textContent, text: e.textContent}))"""


def want_kernels(rep: dict, ta: int, tb: int) -> list[dict]:
  """The rows the list should show: the report's kernels that differ (their differences by kind, the ratio B/A to two
  places), then its kernel contexts in one trace only, each with the t:c points of its final ASTs."""
  rows = []
  for k in rep["kernels"]:
    if not k["differs"]:
      continue
    kinds = [n for n, d in (("opts", k["opts_differ"]), ("source", k["sources_differ"]),
                            ("final AST", k["ast_differs"]), ("runtime", k["runtime_differs"]),
                            ("beam", k["beam_a"] != k["beam_b"])) if d]
    rows.append({"kernel": k["a"]["name"], "kinds": " ".join(kinds),
                 "ratio": "" if k["ratio"] is None else f"{k['ratio']:.2f}",
                 "a": f"{ta}:{k['a']['id']}", "b": f"{tb}:{k['b']['id']}"})
  for side, t in (("a", ta), ("b", tb)):
    for c in rep["contexts"][f"only_{side}"]:
      if c["kind"] == "kernel":
        rows.append({"kernel": c["name"], "kinds": f"only_{side}", "ratio": "", "a": f"{t}:{c['id']}" * (side == "a"),
                     "b": f"{t}:{c['id']}" * (side == "b")})
  return rows


def compare_in_page(page, srv, a_name: str, b_name: str) -> tuple[int, int, dict, list[dict]]:
  """Open the Diff panel on trace a_name, pick b_name for B, run compare: the ids, the API's report, the rows."""
  ta, tb = srv.trace_id(a_name), srv.trace_id(b_name)
  rep = srv.api(f"/api/compare?a={ta}&b={tb}")
  open_page(page, srv, f"#t={ta}&p=diff")
  choose(page, "b", "trace", b_name)
  page.click("#panel-diff button.first-divergence")
  page.wait_for_function("(want) => document.querySelector('#panel-diff .diff-kernels').dataset.compared === want",
                         arg=f"{ta} {tb}")
  return ta, tb, rep, page.eval_on_selector_all("#panel-diff .diff-kernel", KERNEL_ROWS)


def wait_kernel_panel(page, ctx: int) -> None:
  """The Kernel panel shows context ctx (its title is the kernel's name after its opts, so read the context line)."""
  page.locator("#panel-kernel .panel-head .sub").filter(has_text=f"context #{ctx} ").wait_for()


def test_kernels_that_differ_are_listed(page, pair_server):
  srv = pair_server
  ta, tb, rep, rows = compare_in_page(page, srv, "base.vztrace", "tuned.vztrace")
  want = want_kernels(rep, ta, tb)
  assert [{k: r[k] for k in ("kernel", "kinds", "ratio", "a", "b")} for r in rows] == want
  # what the fixture made: E_32 differs in every way but beam (r_16_4 does not), E_8 is in B only
  assert [(r["kernel"], r["kinds"], r["ratio"]) for r in want] == [("E_32", "opts source final AST runtime", "2.11"),
                                                                    ("E_8", "only_b", "")]
  assert [r["name"] for r in rows] == ["E_32", "E_8"]
  assert "B/A 2.11×" in rows[0]["text"] and "only in B" in rows[1]["text"]
  e32 = rep["kernels"][[k["a"]["name"] for k in rep["kernels"]].index("E_32")]
  assert ", ".join(e32["sources_differ"]) in rows[0]["text"]
  # the button: A and B become the two kernels' final ASTs, and the diff shows what /api/diff answers for them
  a, b = want[0]["a"], want[0]["b"]
  page.click("#panel-diff .diff-kernel[data-kernel=E_32] button.kernel-asts")
  wait_diff(page, a, b)
  assert page.evaluate("() => [window.__viz.diffPanel.a, window.__viz.diffPanel.b]") == [a, b]
  got = srv.api(f"/api/diff?a={a}&b={b}")
  assert any(ln["kind"] == "+" for ln in got["lines"])  # tuned's E_32 has one op more
  check_text(page, got)
  shot(page, "diff-kernels")
  # the link: A's kernel in the Kernel panel
  page.click("#panel-diff .diff-kernel[data-kernel=E_32] a.kernel-link")
  page.wait_for_function("(c) => window.__viz.state.panel === 'kernel' && window.__viz.state.ctx === c",
                         arg=e32["a"]["id"])
  assert page.evaluate("() => window.__viz.state.trace") == ta
  wait_kernel_panel(page, e32["a"]["id"])


def test_a_kernel_in_one_trace_only(page, pair_server):
  srv = pair_server
  ta, tb, rep, rows = compare_in_page(page, srv, "base.vztrace", "tuned.vztrace")
  e8 = next(r for r in rows if r["kernel"] == "E_8")
  assert e8["a"] == "" and e8["b"].startswith(f"{tb}:")
  before = page.evaluate("() => window.__viz.diffPanel.a")
  page.click("#panel-diff .diff-kernel[data-kernel=E_8] button.kernel-asts")
  wait_diff(page, before, e8["b"])  # B only: A stays
  # its link opens the kernel in B's trace, which the main view was not showing
  page.click("#panel-diff .diff-kernel[data-kernel=E_8] a.kernel-link")
  page.wait_for_function("([t, c]) => window.__viz.state.trace === t && window.__viz.state.ctx === c"
                         " && window.__viz.state.panel === 'kernel'", arg=[tb, int(e8["b"].split(":")[1])])
  wait_kernel_panel(page, int(e8["b"].split(":")[1]))


def test_hostile_kernel_names_are_text(page, pair_server):
  srv = pair_server
  ta, tb, rep, rows = compare_in_page(page, srv, "evil.vztrace", "base.vztrace")
  assert [{k: r[k] for k in ("kernel", "kinds", "ratio", "a", "b")} for r in rows] == want_kernels(rep, ta, tb)
  evil = f"k_{tracegen.XSS}"
  assert evil in [r["name"] for r in rows]
  assert evil in page.text_content("#panel-diff .diff-kernels")
  assert page.evaluate("() => window.__pwned") is None
  # no image, no script but the page's own (its modules, and boot.js: a classic script, inline)
  injected = "img, script:not([type=module]):not(#tinyviz-boot)"
  assert page.evaluate("(q) => document.querySelectorAll(q).length", injected) == 0
