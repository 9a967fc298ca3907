"""The diff panel: points picked with its controls only (no ids typed), the text diff and the drawn graph diff equal
what /api/diff answers, and a deep link restores the whole diff view."""
from __future__ import annotations

import pytest
from support import tracegen
from support.browser import (  # noqa: E402
  Server,
  check_text,
  choose,
  ctl,  # noqa: E402
  open_page,
  shot,
  state,
  wait_diff,
  wait_graph,
)

from compiler.trace import recorder


def demo(server):
  t = server.trace_id("demo.vztrace")
  return t, {c["name"]: c for c in server.api(f"/api/traces/{t}/contexts")}










def check_drawing(page, server, a: str, b: str) -> dict:
  """The drawn graph marks exactly the API's sets: only-B nodes with the added ring, only-A nodes as ghosts (and not
  in the model), nodes in both plain."""
  want = server.api(f"/api/diff?a={a}&b={b}")["graph"]
  drawn = server.api(f"/api/diff?a={a}&b={b}&draw=1")["graph"]["drawn"]
  got = page.evaluate("""() => {
    const g = window.__viz.diffPanel.gview;
    return {model: g.ids(), added: g.ids().filter((id) => g.hasMark(id, "added")),
            changed: g.ids().filter((id) => g.hasMark(id, "changed")),
            ghosts: (g.ghosts?.nodes || []).map((n) => n.d.id)};
  }""")
  side = {s: [n for n in drawn["nodes"] if n["side"] == s] for s in ("a", "b", "both")}
  by_id = {n["id"]: n for n in drawn["nodes"]}
  # the drawing's sets, mapped back to each graph's own node ids, are the API's only_a / only_b / both
  assert sorted(by_id[i]["node"] for i in got["ghosts"]) == sorted(n["id"] for n in want["only_a"])
  assert sorted(by_id[i]["node"] for i in got["added"]) == sorted(n["id"] for n in want["only_b"])
  plain = set(got["model"]) - set(got["added"])
  assert len({by_id[i]["hash"] for i in plain}) == want["both"]
  assert {by_id[i]["hash"] for i in plain}.isdisjoint(n["hash"] for n in want["only_a"] + want["only_b"])
  assert set(got["model"]).isdisjoint(got["ghosts"]) and not got["changed"]
  assert plain == {n["id"] for n in side["both"]}
  # the lists under the drawing too
  only_a = page.eval_on_selector_all(".node-list.only-a [data-node]", "els => els.map(e => +e.dataset.node)")
  only_b = page.eval_on_selector_all(".node-list.only-b [data-node]", "els => els.map(e => +e.dataset.node)")
  assert only_a == [n["id"] for n in want["only_a"]] and only_b == [n["id"] for n in want["only_b"]]
  # fitted: every node of B is inside the canvas, not shrunk to dots
  page.wait_for_function("""() => {
    const g = window.__viz.diffPanel.gview, r = g.canvas.getBoundingClientRect();
    return r.width > 100 && g.ids().every((id) => {
      const p = g.screenPos(id);
      return p.h >= 5 && p.x >= r.left && p.x <= r.right && p.y >= r.top && p.y <= r.bottom;
    });
  }""")
  return want


def test_pick_two_points_with_the_controls(page, server):
  t, ctxs = demo(server)
  e32, r16 = ctxs["E_32"], ctxs["r_16_4"]
  simplify = next(r for r in e32["rewrites"] if r["name"] == "simplify")
  open_page(page, server, f"#t={t}&c={r16['id']}&p=diff")
  page.locator(ctl("a", "ctx")).wait_for()
  step_before = state(page)["step"]
  # A: E_32's simplify after its first match; B: the other kernel's final AST ("this kernel vs another kernel")
  choose(page, "a", "trace", "demo.vztrace")
  choose(page, "a", "ctx", "K E_32")
  choose(page, "a", "what", f"simplify · {simplify['matches']} matches")
  page.wait_for_function("(s) => !document.querySelector(s).closest('.point-step').hidden", arg=ctl("a", "range"))
  page.locator(ctl("a", "range")).focus()
  page.keyboard.press("Home")
  page.keyboard.press("ArrowRight")
  choose(page, "b", "trace", "demo.vztrace")
  choose(page, "b", "ctx", "K r_16_4")
  choose(page, "b", "what", "kernel: final AST")
  a, b = f"{t}:{simplify['id']}:1", f"{t}:{r16['id']}"
  page.wait_for_function("([a, b]) => window.__viz.state.a === a && window.__viz.state.b === b", arg=[a, b])
  assert state(page)["step"] == step_before, "the diff's slider keys do not step the main view"
  assert page.locator(ctl("a", "step")).input_value() == "1"
  assert page.locator(ctl("b", "range")).locator("xpath=..").is_hidden()
  wait_diff(page, a, b)
  want = server.api(f"/api/diff?a={a}&b={b}")
  check_text(page, want)
  assert any(ln["kind"] in "+-" for ln in want["lines"])
  check_drawing(page, server, a, b)
  # the rewrite's end, then its first vs last step with the end box
  page.check(ctl("a", "end"))
  page.wait_for_function("(a) => window.__viz.state.a === a", arg=f"{t}:{simplify['id']}:end")
  assert page.locator(ctl("a", "step")).is_disabled()
  wait_diff(page, f"{t}:{simplify['id']}:end", b)
  shot(page, "diff-controls")
  # the URL holds both points
  assert f"a={t}:{simplify['id']}:end" in page.url and f"b={b}" in page.url


def test_names_from_a_hostile_trace_are_text_in_the_controls(page, server):
  t = server.trace_id("evil.vztrace")
  open_page(page, server, f"#t={t}&p=diff")
  choose(page, "b", "trace", "evil.vztrace")
  choose(page, "b", "ctx", f"ctx {tracegen.XSS}")
  texts = page.eval_on_selector_all(f"{ctl('b', 'ctx')} option, {ctl('b', 'what')} option",
                                    "els => els.map(e => e.textContent)")
  assert any(tracegen.XSS in x for x in texts) and any(f"pass {tracegen.XSS}" in x for x in texts)
  assert page.evaluate("() => window.__pwned") is None
  # no image, no script but the page's own (its modules, and boot.js: a classic script, inline)
  injected = "img, script:not([type=module]):not(#tinyviz-boot)"
  assert page.evaluate("(q) => document.querySelectorAll(q).length", injected) == 0


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
  """Two traces of the same kernel (E_32) recorded with different math, in a server of their own."""
  d = tmp_path_factory.mktemp("two_runs")
  for name, extra in (("run1.vztrace", 1), ("run2.vztrace", 3)):
    recorder.enable(d / name, announce=False)
    try:
      tracegen.record_kernel("E_32", 32, extra=extra, beam=False)
    finally:
      recorder.disable()
  srv = Server(d, tmp_path_factory.mktemp("two_runs_log") / "server.log")
  yield srv
  srv.stop()


def test_same_kernel_in_two_traces(page, two_runs):
  t1, t2 = two_runs.trace_id("run1.vztrace"), two_runs.trace_id("run2.vztrace")
  k1 = next(c for c in two_runs.api(f"/api/traces/{t1}/contexts") if c["name"] == "E_32")
  k2 = next(c for c in two_runs.api(f"/api/traces/{t2}/contexts") if c["name"] == "E_32")
  open_page(page, two_runs, f"#t={t1}&c={k1['id']}&p=diff")
  wait_graph(page, t1, state(page)["rw"], 0)
  page.click("#panel-diff button:text-is('this kernel')")
  page.wait_for_function("(a) => window.__viz.state.a === a", arg=f"{t1}:{k1['id']}")
  page.click("#panel-diff button:text-is('A → B')")
  page.wait_for_function("(a) => window.__viz.state.b === a", arg=f"{t1}:{k1['id']}")
  assert page.locator(ctl("b", "what")).input_value() == "final"
  # B's trace changes; the picker finds the same kernel there by name and keeps "final AST"
  choose(page, "b", "trace", "run2.vztrace")
  a, b = f"{t1}:{k1['id']}", f"{t2}:{k2['id']}"
  page.wait_for_function("(b) => window.__viz.state.b === b", arg=b)
  wait_diff(page, a, b)
  check_text(page, two_runs.api(f"/api/diff?a={a}&b={b}"))
  g = check_drawing(page, two_runs, a, b)
  assert g["only_a"] and g["only_b"] and g["both"]
  # the same pass of the same kernel: picking a rewrite keeps its name when the trace changes back
  choose(page, "b", "what", "simplify")
  choose(page, "b", "trace", "run1.vztrace")
  rw1 = next(r for r in k1["rewrites"] if r["name"] == "simplify")
  page.wait_for_function("(p) => window.__viz.state.b.startsWith(p)", arg=f"{t1}:{rw1['id']}:")
  shot(page, "diff-two-traces")


def test_deep_link_restores_the_diff_view(page, server):
  t, ctxs = demo(server)
  e32, r16 = ctxs["E_32"], ctxs["r_16_4"]
  simplify = next(r for r in e32["rewrites"] if r["name"] == "simplify")
  a, b = f"{t}:{simplify['id']}:2", f"{t}:{r16['id']}"
  open_page(page, server, f"#t={t}&c={e32['id']}&r={simplify['id']}&s=1&p=diff&a={a}&b={b}")
  wait_diff(page, a, b)
  assert not page.locator("#panel-diff").is_hidden()
  assert (state(page)["a"], state(page)["b"]) == (a, b)
  # the controls show the linked points
  page.wait_for_function("(s) => document.querySelector(s).value === '2'", arg=ctl("a", "step"))
  assert page.locator(ctl("a", "ctx")).input_value() == str(e32["id"])
  assert page.locator(ctl("a", "what")).input_value() == str(simplify["id"])
  assert page.locator(ctl("b", "ctx")).input_value() == str(r16["id"])
  assert page.locator(ctl("b", "what")).input_value() == "final"
  check_text(page, server.api(f"/api/diff?a={a}&b={b}"))
  check_drawing(page, server, a, b)
  # a new pick is a history entry: back restores the linked view
  choose(page, "a", "what", "View Base AST")
  page.wait_for_function("(a) => window.__viz.state.a !== a", arg=a)
  new_a = state(page)["a"]
  wait_diff(page, new_a, b)
  page.go_back()
  page.wait_for_function("(a) => window.__viz.state.a === a", arg=a)
  wait_diff(page, a, b)
  page.wait_for_function("([s, v]) => document.querySelector(s).value === v", arg=[ctl("a", "what"),
                                                                                   str(simplify["id"])])
  check_drawing(page, server, a, b)
