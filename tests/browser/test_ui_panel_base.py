"""The panels' base class (static/panel.js): an answer that a newer request superseded is dropped even when it arrives
last, a state shown meanwhile is not overwritten either, and a failed request shows the base's error state (its text
escaped: a server's message may quote a stranger's trace). Each for several panels, through their API routes."""
from __future__ import annotations

import copy

from support.browser import open_page

MARK = 987654  # a number the panel shows only if it drew the held (older) answer

# panel id -> the route it asks (after /api/traces/<t>/), its show call (p: the panel, t: trace, c: kernel context),
# and where the answer holds a number the panel writes out
PANELS = {
  "runs": ("runs/kernels", "p.show(t)", lambda a: a.__setitem__("count", MARK)),
  "summary": ("summary", "p.show(t)", lambda a: a["counts"].__setitem__("contexts", MARK)),
  "kernel": ("contexts/{c}/kernel", "p.show(t, {id: c, kind: 'kernel'})", lambda a: a.__setitem__("ctx", MARK)),
}
PANEL_TEXT = "(id) => document.querySelector('#panel-' + id).textContent"


def open_panel(page, server, panel: str) -> tuple[int, int, str]:
  """The demo trace opened at a kernel with `panel` drawn, in a new document (a test goes through several panels in
  one page: a fresh one costs about a second of chromium's CPU); (trace, kernel context, the panel's route glob)."""
  t = server.trace_id("demo.vztrace")
  c = next(x["id"] for x in server.api(f"/api/traces/{t}/contexts") if x["name"] == "r_16_4")
  page.goto("about:blank")
  open_page(page, server, f"#t={t}&c={c}&p={panel}")
  page.locator(f"#panel-{panel} .panel-head").wait_for()
  return t, c, f"**/api/traces/{t}/" + PANELS[panel][0].format(c=c)


def show_js(panel: str, wait: bool) -> str:
  """A function of [id, t, c] calling the panel's show: awaited, or its promise kept as window.__older."""
  call = PANELS[panel][1]
  if wait:
    return f"async ([id, t, c]) => {{ const p = window.__viz.panels.get(id); await {call}; }}"
  return f"([id, t, c]) => {{ const p = window.__viz.panels.get(id); window.__older = {call}; }}"


def changed(server, panel: str, glob: str) -> dict:
  """The server's answer to the panel's request with MARK in it."""
  answer = copy.deepcopy(server.api(glob.removeprefix("**")))
  PANELS[panel][2](answer)
  return answer


def answered(answer: dict):
  """A route handler that answers every request with `answer` (one argument: Playwright passes the request to a
  handler that takes two)."""
  return lambda route: route.fulfill(json=answer)


def held_first(held: list):
  """A route handler that holds the first request and lets the later ones through to the server."""
  def handle(route):
    if held:
      route.continue_()
    else:
      held.append(route)
  return handle


def test_an_older_answer_arriving_last_is_dropped(page, server):
  for panel in PANELS:
    t, c, glob = open_panel(page, server, panel)
    args = [panel, t, c]
    stale = changed(server, panel, glob)
    held = []
    page.route(glob, held_first(held))
    page.evaluate(show_js(panel, wait=False), args)  # the older request: held
    page.evaluate(show_js(panel, wait=True), args)  # the newer one, answered by the server and drawn
    assert len(held) == 1, panel
    drawn = page.inner_html(f"#panel-{panel}")
    held[0].fulfill(json=stale)
    page.evaluate("() => window.__older")  # the older request, to its end
    assert page.inner_html(f"#panel-{panel}") == drawn, panel
    assert str(MARK) not in page.evaluate(PANEL_TEXT, panel), panel
    # the held answer is one the panel draws when it is the latest (so its absence above is the drop, not a failure)
    page.unroute(glob)
    page.route(glob, answered(stale))
    page.evaluate(show_js(panel, wait=True), args)
    assert str(MARK) in page.evaluate(PANEL_TEXT, panel), panel
    page.unroute(glob)


def test_an_answer_arriving_after_a_state_is_dropped(page, server):
  t, c, glob = open_panel(page, server, "runs")
  stale = changed(server, "runs", glob)
  page.route(glob, lambda route: route.fulfill(json=stale))
  # asked for the trace's runs, then the trace went away before the answer came
  page.evaluate("(t) => { const p = window.__viz.panels.get('runs'); window.__older = p.show(t); p.show(null); }", t)
  page.evaluate("() => window.__older")  # the request, to its end
  state = page.locator("#panel-runs > .panel-state")
  assert state.get_attribute("data-state") == "empty" and state.inner_text() == "No trace."
  assert page.locator("#panel-runs table").count() == 0 and str(MARK) not in page.evaluate(PANEL_TEXT, "runs")


def test_a_failed_request_shows_the_error_state(page, server):
  message = 'boom <b>bold</b> <img src=x onerror="window.__pwned=1">'
  page.errors.allowed.append("status of 500")
  for panel in PANELS:
    t, c, glob = open_panel(page, server, panel)
    page.route(glob, lambda route: route.fulfill(status=500, json={"error": message}))
    page.evaluate(show_js(panel, wait=True), [panel, t, c])
    el = page.locator(f"#panel-{panel} > .panel-state")
    assert el.count() == 1 and page.locator(f"#panel-{panel}").evaluate("e => e.children.length") == 1, panel
    assert el.get_attribute("data-state") == "error" and el.get_attribute("role") == "alert", panel
    assert set(el.get_attribute("class").split()) == {"panel-state", "error-text"}, panel
    assert el.inner_text() == (f"kernel {c}: " if panel == "kernel" else "") + message
    # the message stays text: no element made of it, nothing run
    assert el.evaluate("e => e.querySelectorAll('*').length") == 0, panel
    assert page.evaluate("() => window.__pwned") is None, panel
    page.unroute(glob)


def test_every_panel_is_a_panel(page, server):
  open_page(page, server)
  kinds = page.evaluate("""async () => {
    const {Panel} = await import('/static/panel.js');
    return [...window.__viz.panels].map(([id, p]) => [id, p instanceof Panel, p.constructor.name]);
  }""")
  assert len(kinds) >= 7 and all(is_panel and name.endswith("Panel") and name != "Panel" for _, is_panel, name in kinds)
