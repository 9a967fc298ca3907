"""The panels the first view does not show load after it (static/panels.js `lazy`, issue 30): their modules are asked
for only once the landing view is painted, and a panel opened before its module came shows once it comes."""
from __future__ import annotations

from support.browser import open_page

# the lazy panels' modules and what only they import (tests/project/test_static_modules.py checks the registry)
LAZY = ("diff", "kernel", "source", "runs", "timeline", "memlane", "table")

# when the landing view (the summary's numbers and the sidebar's rows) was first in the DOM, in performance.now() ms
WATCH_LANDING = """(() => {
  const mo = new MutationObserver(() => {
    if (document.querySelector('#panel-summary .summary-phases') && document.querySelector('#contexts li[data-ctx]')) {
      window.__landed = performance.now();
      mo.disconnect();
    }
  });
  mo.observe(document, {childList: true, subtree: true});
})();"""


def test_lazy_panel_modules_are_asked_for_after_the_landing_view(page, server):
  page.add_init_script(WATCH_LANDING)
  open_page(page, server)
  asked = page.evaluate("""() => Object.fromEntries(performance.getEntriesByType('resource')
    .filter((e) => e.name.includes('/static/')).map((e) => [e.name.split('/').pop(), e.startTime]))""")
  landed = page.evaluate("() => window.__landed")
  assert landed is not None
  for m in LAZY:  # each asked for (ready waits for every panel), after the landing view was in the page
    assert asked[f"{m}.js"] > landed, (m, asked.get(f"{m}.js"), landed)
  # before it, one script: app.js, which the server sends with every module it imports (the summary's and the
  # sidebar's among them; viz_server/pagejs.py); boot.js is in the page
  assert {m for m, at in asked.items() if m.endswith(".js") and at < landed} == {"app.js"}
  kinds = page.evaluate("() => [...window.__viz.panels].map(([id, p]) => [id, p.constructor.name])")
  assert {k for k, _ in kinds} == set(page.evaluate("() => [...document.querySelectorAll('#panel-tabs button')]"
                                                    ".map((b) => b.dataset.panel)"))


def test_a_panel_opened_before_its_module_came_shows_once_it_comes(page, server):
  held = []
  page.route("**/static/timeline.js", lambda route: held.append(route))
  with page.expect_request("**/static/timeline.js"):
    page.goto(f"{server.url}/")
  page.wait_for_selector("#contexts li[data-ctx]")
  page.click('#panel-tabs button[data-panel="timeline"]')
  assert page.evaluate("() => [window.__viz.state.panel, window.__viz.panels.has('timeline')]") == ["timeline", False]
  assert page.locator("#panel-timeline").is_visible()
  held[0].continue_()
  page.wait_for_function("() => window.__viz.timelinePanel && window.__viz.timelinePanel.hits.length > 0")
  page.evaluate("() => window.__viz.ready")
  assert "p=timeline" in page.evaluate("() => location.hash")


def test_a_deep_link_to_a_lazy_panel_shows_it(page, server):
  t = server.trace_id("demo.vztrace")
  kernel = next(c for c in server.api(f"/api/traces/{t}/contexts") if c["kind"] == "kernel")
  open_page(page, server, f"#t={t}&c={kernel['id']}&p=kernel")
  page.wait_for_selector("#panel-kernel .panel-head")
  assert page.evaluate("() => window.__viz.state.panel") == "kernel"
  assert not page.locator("#panel-summary").is_visible()
