"""The panel registry (static/panels.js) is the one list of panels: the page's tabs, containers, keys and help line,
and the router's accepted `p=` values, are exactly its entries."""
from __future__ import annotations

from support.browser import open_page, state

REGISTRY = "async () => (await import('/static/panels.js')).PANELS.map((p) => ({id: p.id, label: p.label, key: p.key}))"


def registry(page) -> list[dict]:
  return page.evaluate(REGISTRY)


def test_page_panels_are_the_registry(page, server):
  open_page(page, server)
  reg = registry(page)
  ids = [p["id"] for p in reg]
  assert len(ids) >= 6 and len(set(ids)) == len(ids) and len({p["key"] for p in reg}) == len(reg)
  tabs = page.eval_on_selector_all("#panel-tabs button", "els => els.map((e) => [e.dataset.panel, e.textContent])")
  assert tabs == [[p["id"], p["label"]] for p in reg]
  boxes = page.eval_on_selector_all("#panels .panel", "els => els.map((e) => [e.id, e.dataset.panel])")
  assert boxes == [[f"panel-{i}", i] for i in ids]
  # nothing else in the page claims to be a panel (the layout's data-panel is the open one's id)
  others = page.eval_on_selector_all("[data-panel]:not(#layout):not(#panel-tabs button):not(#panels > .panel)",
                                     "els => els.map((e) => e.outerHTML)")
  assert others == []
  assert page.eval_on_selector_all("#panel-keys kbd", "els => els.map((e) => e.textContent)") == [
    p["key"] for p in reg]
  assert page.locator("#panel-keys td").nth(1).inner_text() == ", ".join(p["label"] for p in reg) + " panel"


def test_router_accepts_exactly_the_registry_ids(page, server):
  open_page(page, server)
  ids = [p["id"] for p in registry(page)]
  others = ["", "bogus", "Step", "STEP", " step", "step ", "constructor", "__proto__", "toString", "hasOwnProperty",
            ",".join(ids[:2]), "panel-step"]
  parsed = page.evaluate("""async (names) => {
    const {parseHash} = await import('/static/router.js');
    return names.map((n) => parseHash('#t=1&p=' + encodeURIComponent(n)).panel);
  }""", ids + others)
  assert parsed == ids + [None] * len(others)
  # a panel's parameters travel with it and only with it
  hashes = page.evaluate("""async (ids) => {
    const {formatHash, parseHash} = await import('/static/router.js');
    return ids.map((p) => formatHash({...parseHash('#t=1&p=' + p + '&a=1:2:3&b=1:2:end'), panel: p}));
  }""", ids)
  assert hashes == [f"#t=1&p={i}" + ("&a=1:2:3&b=1:2:end" if i == "diff" else "") for i in ids]


def test_each_panel_opens_by_key_tab_and_link(page, server):
  t = server.trace_id("demo.vztrace")
  open_page(page, server, f"#t={t}")
  reg = registry(page)
  opened = "(id) => window.__viz.state.panel === id && location.hash.includes('p=' + id)"
  shown = "els => els.filter((e) => !e.hidden).map((e) => e.dataset.panel)"
  for p in reversed(reg):  # from the last: the first is open at the start
    page.keyboard.press(p["key"])
    page.wait_for_function(opened, arg=p["id"])
    assert page.eval_on_selector_all("#panels .panel", shown) == [p["id"]]
    assert page.locator("#panel-tabs button.active").inner_text() == p["label"]
  for p in reg:
    page.click(f"#panel-tabs [data-panel={p['id']}]")
    page.wait_for_function(opened, arg=p["id"])
    assert page.eval_on_selector_all("#panels .panel", shown) == [p["id"]]
  for p in reversed(reg):
    page.evaluate("(h) => { location.hash = h; }", f"#t={t}&p={p['id']}")
    page.wait_for_function("(id) => window.__viz.state.panel === id", arg=p["id"])
    assert state(page)["panel"] == p["id"]
    assert page.eval_on_selector_all("#panels .panel", shown) == [p["id"]]
