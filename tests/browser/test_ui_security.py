"""A hostile trace: markup in node args, context/kernel/rewrite names and sources is shown as text; nothing runs."""
from __future__ import annotations

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from support import tracegen
from support.browser import open_page, shot, wait_graph

PAYLOAD_BITS = ["<img src=x onerror=", "<script>window.__pwned=2</script>"]


def no_injection(page):
  assert page.evaluate("() => window.__pwned") is None
  assert page.evaluate("() => document.querySelectorAll('img, iframe, object, embed').length") == 0
  # our modules (the early /api/boot and the app), nothing else
  # (boot.js is inline, allowed by its hash: tests/viewer/test_page_modules.py)
  scripts = "() => [...document.querySelectorAll('script')].map(s => s.src ? new URL(s.src).pathname : `#${s.id}`)"
  assert page.evaluate(scripts) == ["#tinyviz-boot", "/static/app.js"]
  handlers = "() => [...document.querySelectorAll('*')].some(e => [...e.attributes].some(a => a.name.startsWith('on')))"
  assert page.evaluate(handlers) is False


# a panel has drawn its answer: it has content and no loading state
PANEL_DRAWN = """(p) => { const el = document.querySelector(`#panel-${p}`), st = el && el.querySelector('[data-state]');
  return !!el && el.children.length > 0 && !(st && st.dataset.state === 'loading'); }"""


def test_payloads_render_as_text(page, server):
  t = server.trace_id("evil.vztrace")
  ctxs = server.api(f"/api/traces/{t}/contexts")
  sched = next(c for c in ctxs if c["kind"] == "schedule")
  kernel = next(c for c in ctxs if c["kind"] == "kernel")
  rw = sched["rewrites"][0]
  open_page(page, server, f"#t={t}&c={sched['id']}&r={rw['id']}&s=1")
  wait_graph(page, t, rw["id"], 1)
  # names in the sidebar, as text
  # sidebar rows are `content-visibility: auto`: innerText is "" for a row no layout has yet found near the viewport
  # (a loaded machine asks first), so rows are read by their text nodes; HTML parsed from the string would have lost
  # its tags there too, and no_injection counts the page's elements
  assert tracegen.XSS in page.locator(f"#contexts li[data-ctx='{sched['id']}']").text_content()
  assert tracegen.XSS in page.locator(f"#rewrites li[data-rw='{rw['id']}']").text_content()
  assert tracegen.XSS in page.locator(f"#contexts li[data-ctx='{kernel['id']}']").get_attribute("title")
  # a node whose arg is the payload: the card shows it verbatim
  g = server.api(f"/api/traces/{t}/rewrites/{rw['id']}/graph?step=1")
  evil = next(n for n in g["nodes"] if n["op"] == "NOOP")
  assert tracegen.XSS in evil["arg"]
  page.evaluate("(id) => window.__viz.selectNode(id)", evil["id"])
  assert tracegen.XSS in page.locator("#node-card [data-field=arg]").inner_text()
  page.locator("#panel-step [data-role=after]").wait_for()
  assert all(b in page.locator("#panel-step").inner_text() for b in PAYLOAD_BITS)
  page.fill("#node-search", "onerror")
  page.press("#node-search", "Enter")
  no_injection(page)
  shot(page, "security-graph")
  # kernel, source and runs panels with the payload in the kernel name and the sources
  page.click(f"#contexts li[data-ctx='{kernel['id']}']")
  for panel in ("kernel", "source", "runs", "timeline", "diff"):
    page.click(f"#panel-tabs [data-panel={panel}]")
    page.wait_for_function(PANEL_DRAWN, arg=panel)  # (what it draws is what is checked)
    no_injection(page)
  page.click("#panel-tabs [data-panel=source]")
  page.locator("#panel-source pre.source").wait_for()
  assert tracegen.XSS in page.locator("#panel-source pre.source").evaluate("e => e.textContent")
  page.click("#panel-tabs [data-panel=runs]")
  page.locator("#panel-runs tbody tr").first.wait_for()
  assert tracegen.XSS in page.locator("#panel-runs tbody tr").first.locator(".kname").get_attribute("title")
  no_injection(page)
  # the timeline draws names on its canvas; its tooltip shows the payload as text
  page.click("#panel-tabs [data-panel=timeline]")
  find = "() => window.__viz.timelinePanel.hits.find((h) => h.kind === 'pass' && h.name.startsWith('pass '))"
  tip = page.locator("#panel-timeline .timeline-tip")
  for _ in range(20):  # the canvas grows to the panel's height once it shows: point at the span where it is now
    page.wait_for_function(find)
    hit = page.evaluate(find)
    box = page.locator("#panel-timeline canvas").bounding_box()
    page.mouse.move(box["x"] + (hit["x0"] + hit["x1"]) / 2, box["y"] + (hit["y0"] + hit["y1"]) / 2)
    try:  # the tip shows on the frame after the move (read at once, it was never there under load)
      tip.wait_for(timeout=3000)
    except PlaywrightTimeout:
      continue  # pointed where the span was before the canvas grew
    if page.evaluate(find) == hit:
      break
  tip.wait_for()
  assert f"pass {tracegen.XSS}" in page.locator("#panel-timeline .timeline-tip").inner_text()
  no_injection(page)
  shot(page, "security-panels")
