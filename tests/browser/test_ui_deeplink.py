"""Deep links restore the view in a fresh page; back/forward move between views."""
from __future__ import annotations

from support.browser import open_page, shot, state, wait_graph


def test_deep_link_restores_view(new_page, server):
  t = server.trace_id("demo.vztrace")
  ctxs = {c["name"]: c for c in server.api(f"/api/traces/{t}/contexts")}
  kernel = ctxs["E_32"]
  rw = next(r for r in kernel["rewrites"] if r["name"] == "simplify")
  g = server.api(f"/api/traces/{t}/rewrites/{rw['id']}/graph?step=2")
  node = next(n for n in g["nodes"] if n["op"] == "LOAD")
  first = new_page()
  open_page(first, server, f"#t={t}")
  first.click(f"#contexts li[data-ctx='{kernel['id']}']")
  first.click(f"#rewrites li[data-rw='{rw['id']}']")
  wait_graph(first, t, rw["id"], 0)
  first.keyboard.press("ArrowRight")
  first.keyboard.press("ArrowRight")
  wait_graph(first, t, rw["id"], 2)
  first.evaluate("(id) => window.__viz.selectNode(id)", node["id"])
  first.click("#panel-tabs [data-panel=kernel]")
  first.wait_for_function("(n) => location.hash.includes('n=' + n) && location.hash.includes('p=kernel')",
                          arg=node["id"])
  url = first.url
  want = state(first)
  second = new_page()
  second.goto(url)
  second.wait_for_function("() => window.__viz !== undefined")
  second.evaluate("() => window.__viz.ready")
  wait_graph(second, t, rw["id"], 2)
  got = state(second)
  assert {k: got[k] for k in ("trace", "ctx", "rw", "step", "node", "panel")} == \
    {k: want[k] for k in ("trace", "ctx", "rw", "step", "node", "panel")} == \
    {"trace": t, "ctx": kernel["id"], "rw": rw["id"], "step": 2, "node": node["id"], "panel": "kernel"}
  # the node card and the kernel panel fill in from their own requests: wait for them, not for a moment
  second.wait_for_function("() => document.querySelector('#node-card [data-field=op]')?.textContent === 'LOAD'")
  assert second.locator("#panel-tabs [data-panel=kernel]").get_attribute("class") == "active"
  second.wait_for_selector("#panel-kernel .opts", state="visible")
  assert "selected" in second.locator(f"#rewrites li[data-rw='{rw['id']}']").get_attribute("class")
  shot(second, "deep-link")


def test_back_and_forward(page, server):
  t = server.trace_id("demo.vztrace")
  ctxs = {c["name"]: c for c in server.api(f"/api/traces/{t}/contexts")}
  a, b = ctxs["r_16_4"], ctxs["E_32"]
  open_page(page, server, f"#t={t}&c={a['id']}")
  page.click(f"#contexts li[data-ctx='{b['id']}']")
  page.wait_for_function("(c) => location.hash.includes('c=' + c)", arg=b["id"])
  page.click("#panel-tabs [data-panel=runs]")
  page.wait_for_function("() => location.hash.includes('p=runs')")
  page.go_back()
  page.wait_for_function("() => window.__viz.state.panel === 'step'")
  assert state(page)["ctx"] == b["id"]
  page.go_back()
  page.wait_for_function("(c) => window.__viz.state.ctx === c", arg=a["id"])
  page.go_forward()
  page.wait_for_function("(c) => window.__viz.state.ctx === c", arg=b["id"])
  assert "selected" in page.locator(f"#contexts li[data-ctx='{b['id']}']").get_attribute("class")


def test_filling_in_a_link_keeps_the_forward_entries(page, server):
  """A hash that names only a context gets its rewrite, step and panel filled in place: going back to such an entry
  (one written before the page had filled it in) and forward again must find the forward entries still there."""
  t = server.trace_id("demo.vztrace")
  ctxs = {c["name"]: c for c in server.api(f"/api/traces/{t}/contexts")}
  a, b = ctxs["r_16_4"], ctxs["E_32"]
  open_page(page, server, f"#t={t}&c={b['id']}")
  page.wait_for_function("() => /[#&]r=\\d+/.test(location.hash) && window.__viz.state.ctx !== null")
  page.evaluate("(h) => { location.hash = h; }", f"#t={t}&c={a['id']}")  # typed: an entry naming only a context
  page.wait_for_function("(c) => window.__viz.state.ctx === c && /[#&]r=\\d+/.test(location.hash)", arg=a["id"])
  page.go_back()
  page.wait_for_function("(c) => window.__viz.state.ctx === c", arg=b["id"])
  page.go_forward()
  page.wait_for_function("(c) => window.__viz.state.ctx === c && /[#&]r=\\d+/.test(location.hash)", arg=a["id"])
  page.go_back()
  page.wait_for_function("(c) => window.__viz.state.ctx === c", arg=b["id"])


def test_opening_a_step_directly_shows_what_it_removed_and_when_nodes_were_made(page, server):
  t = server.trace_id("demo.vztrace")
  ctxs = {c["name"]: c for c in server.api(f"/api/traces/{t}/contexts")}
  kernel = ctxs["r_16_4"]
  rw = next(r for r in kernel["rewrites"] if r["name"] == "simplify")
  k = next(k for k in range(1, rw["matches"] + 1)
           if server.api(f"/api/traces/{t}/rewrites/{rw['id']}/graph?step={k}")["removed"])
  g = server.api(f"/api/traces/{t}/rewrites/{rw['id']}/graph?step={k}")
  open_page(page, server, f"#t={t}&c={kernel['id']}&r={rw['id']}&s={k}")
  wait_graph(page, t, rw["id"], k)
  # the removed nodes fade out as they do when stepping there
  ghosts = page.evaluate("() => (window.__viz.graph.ghosts?.nodes || []).map(n => n.d.id)")
  assert sorted(ghosts) == sorted(g["removed"])
  assert page.evaluate("(id) => window.__viz.graph.ghostNode(id)?.op", g["removed"][0]) == next(
    n["op"] for n in g["removed_nodes"] if n["id"] == g["removed"][0])
  # the card of a node this step made says so, with the rule; one from the input graph says step 0
  step = server.api(f"/api/traces/{t}/rewrites/{rw['id']}")["steps"][k - 1]
  rule = server.api(f"/api/traces/{t}/patterns/{step['pattern']}")["name"]
  made = next(n for n in g["nodes"] if n["created"] == k)
  page.evaluate("(id) => window.__viz.selectNode(id)", made["id"])
  created = page.locator("#node-card .fields tr", has_text="created")
  page.wait_for_function("() => !document.querySelector('#node-card').textContent.includes('…')")
  assert created.inner_text().split(None, 1)[1] == f"step {k} by {rule}"
  old = next(n for n in g["nodes"] if n["created"] == 0)
  page.evaluate("(id) => window.__viz.selectNode(id)", old["id"])
  page.wait_for_function("() => !document.querySelector('#node-card').textContent.includes('…')")
  assert "step 0" in page.locator("#node-card .fields tr", has_text="created").inner_text()
  shot(page, "direct-step")
