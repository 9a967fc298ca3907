"""The summary panel (static/summary.js) is the landing view: it shows when a trace opens (unless the link names a
context or rewrite), its numbers are the summary answer's, the header and the sidebar count what it counts, and a click
on a top kernel opens that kernel."""
from __future__ import annotations

from support.browser import open_page, shot, state

PANEL = "#panel-summary"


def test_the_summary_shows_on_open_and_a_top_kernel_opens_on_click(page, server):
  t = server.trace_id("demo.vztrace")
  want = server.api(f"/api/traces/{t}/summary")
  entry = next(e for e in server.api("/api/traces") if e["id"] == t)
  open_page(page, server, f"#t={t}")
  assert state(page)["panel"] == "summary"
  rows = page.locator(f"{PANEL} tr.top-kernel")
  rows.first.wait_for()
  assert page.locator(PANEL).is_visible() and page.locator("#panel-step").is_hidden()
  assert rows.count() == len(want["top"]) >= 2
  assert [rows.nth(i).get_attribute("data-kname") for i in range(rows.count())] == [k["kname"] for k in want["top"]]
  first = want["top"][0]
  cells = rows.first.locator("td")
  assert cells.nth(1).inner_text() == str(first["runs"])
  assert cells.nth(6).inner_text() == f"{first['gbs']:.2f}"
  phases = page.eval_on_selector_all(f"{PANEL} tr[data-phase]", "els => els.map((e) => e.dataset.phase)")
  assert phases == ["schedule", "optimize", "compile", "run", "other"]
  # work done at the same time as other work (compiles on a second thread) is said, the shares passing 100%
  assert page.locator(f"{PANEL} .summary-parallel").count() == (want["phases"]["parallel"] > 0)
  c = entry["counts"]
  assert page.locator(f"{PANEL} .panel-head .sub").inner_text().endswith(
    f"{c['contexts']} contexts · {c['kernels']} kernels · {c['runs']} runs")
  # the header and the sidebar count what the summary counts (vztrace.counts)
  assert f"{c['contexts']} contexts" in page.locator("#trace-counts").inner_text()
  assert f"{c['kernels']} kernels · {c['runs']} runs" in page.locator("#trace-counts").inner_text()
  page.wait_for_function("(n) => document.querySelector('#contexts-count').textContent === String(n)",
                         arg=c["contexts"])
  shot(page, "panel-summary")
  rows.first.click()
  page.wait_for_function("(c) => window.__viz.state.ctx === c && window.__viz.state.panel === 'kernel'",
                         arg=first["ctx"])
  page.locator("#panel-kernel .panel-head .sub").filter(has_text=f"context #{first['ctx']} ").wait_for()
  assert "selected" in page.locator(f"#contexts li[data-ctx='{first['ctx']}']").get_attribute("class")


def test_a_link_to_a_context_or_a_pick_in_the_sidebar_shows_the_steps(new_page, server):
  t = server.trace_id("demo.vztrace")
  ctxs = server.api(f"/api/traces/{t}/contexts")
  kernel = next(c for c in ctxs if c["kind"] == "kernel" and c["rewrites"])
  linked = new_page()
  open_page(linked, server, f"#t={t}&c={kernel['id']}")
  assert state(linked)["panel"] == "step"
  page = new_page()
  open_page(page, server, f"#t={t}")
  assert state(page)["panel"] == "summary"
  page.click(f"#contexts li[data-ctx='{kernel['id']}']")  # the landing view gives way to the step panel
  page.wait_for_function("(c) => window.__viz.state.ctx === c && window.__viz.state.panel === 'step'",
                         arg=kernel["id"])
  page.keyboard.press("0")  # opened by its key, it stays while the user picks rewrites
  page.wait_for_function("() => window.__viz.state.panel === 'summary'")
  page.click(f"#rewrites li[data-rw='{kernel['rewrites'][-1]['id']}']")
  page.wait_for_function("(r) => window.__viz.state.rw === r", arg=kernel["rewrites"][-1]["id"])
  assert state(page)["panel"] == "summary"


# what the frame that first shows the landing view (the summary's top kernels and the sidebar's selected row) holds,
# read in its animation frame callback
WATCH_LANDING_FRAME = """(() => {
  const mo = new MutationObserver(() => {
    if (!document.querySelector('#panel-summary tr.top-kernel') || !document.querySelector('#contexts li.selected')) {
      return;
    }
    mo.disconnect();
    requestAnimationFrame(() => {
      window.__landingFrame = {graph: document.body.dataset.graph ?? null,
        loading: document.querySelector('#graph-wrap').dataset.loading ?? null,
        empty: !document.querySelector('#graph-empty').hidden,
        selected: document.querySelector('#contexts li.selected').dataset.ctx};
    });
  });
  mo.observe(document, {childList: true, subtree: true, attributes: true, attributeFilter: ['class']});
})();"""


def test_the_landing_view_is_painted_before_the_graph(page, server):
  """Issue 30: the frame that first shows the landing view (the summary, the sidebar with its selection) does not wait
  for the default rewrite's graph to be set up and drawn: its place shows the graph's loading state, and the graph
  comes after it."""
  t = server.trace_id("demo.vztrace")
  page.add_init_script(WATCH_LANDING_FRAME)
  open_page(page, server, f"#t={t}")
  s = state(page)
  assert s["panel"] == "summary" and s["rw"] is not None
  got = page.evaluate("() => window.__landingFrame")
  assert got == {"graph": None, "loading": "rewrite", "empty": False, "selected": str(s["ctx"])}
  page.wait_for_function("(want) => document.body.dataset.graph === want", arg=f"{t}:{s['rw']}:0")
