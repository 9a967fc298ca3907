"""Navigate a recorded trace with mouse and keys; the graph, its highlights and the step panel follow the API."""
from __future__ import annotations

import os

from support.browser import graph_ids, ids_with_mark, open_page, shot, state, wait_graph


def demo_ids(server):
  """(trace id, {context name: context}) of the demo trace."""
  t = server.trace_id("demo.vztrace")
  return t, {c["name"]: c for c in server.api(f"/api/traces/{t}/contexts")}


def rewrite_named(ctx, name):
  return next(r for r in ctx["rewrites"] if r["name"] == name)


def check_graph(page, server, t, r, k):
  """The graph view shows exactly the API's nodes for (t, r, k), all drawn, with the API's highlights."""
  wait_graph(page, t, r, k)
  g = server.api(f"/api/traces/{t}/rewrites/{r}/graph?step={k}")
  assert graph_ids(page) == {n["id"] for n in g["nodes"]}
  page.evaluate("() => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)))")
  assert page.evaluate("() => window.__viz.graph.drawn") == len(g["nodes"])
  assert ids_with_mark(page, "added") == set(g["added"])
  assert ids_with_mark(page, "changed") == set(g["changed"])
  return g


def test_mouse_navigation(page, server):
  t, ctxs = demo_ids(server)
  open_page(page, server, f"#t={t}")
  kernel = ctxs["r_16_4"]
  simplify = rewrite_named(kernel, "simplify")
  page.click(f"#contexts li[data-ctx='{kernel['id']}']")
  page.click(f"#rewrites li[data-rw='{simplify['id']}']")
  g0 = check_graph(page, server, t, simplify["id"], 0)
  assert page.locator("#step-label").inner_text().startswith(f"step 0/{simplify['matches']}")
  page.click("#step-next")
  g1 = check_graph(page, server, t, simplify["id"], 1)
  assert g1["added"] or g1["changed"], "the first match of simplify changes the graph"
  assert {n["id"] for n in g0["nodes"]} != {n["id"] for n in g1["nodes"]}
  # the step panel shows the rule that fired: its name, source text and file:line
  step = server.api(f"/api/traces/{t}/rewrites/{simplify['id']}")["steps"][0]
  pat = server.api(f"/api/traces/{t}/patterns/{step['pattern']}")
  panel = page.locator("#panel-step")
  panel.locator(".rule-src").wait_for()
  assert panel.locator(".rule-name").inner_text() == pat["name"]
  assert panel.locator(".rule-src").inner_text().strip() == pat["src"].strip()
  assert panel.locator(".rule-head .fileline").inner_text() == f"{os.path.basename(pat['file'])}:{pat['line']}"
  assert f"#{step['before']}" in panel.locator("[data-role=before]").inner_text()
  assert f"#{step['after']}" in panel.locator("[data-role=after]").inner_text()
  # click a node on the canvas: the card shows its fields, sources and users as the API has them
  target = next(n for n in g1["nodes"] if n["op"] == "LOAD")
  pos = page.evaluate("(id) => window.__viz.graph.screenPos(id)", target["id"])
  page.mouse.click(pos["x"], pos["y"])
  card = page.locator("#node-card")
  card.wait_for()
  assert card.locator("[data-field=op]").inner_text() == "LOAD"
  assert card.locator("[data-field=dtype]").inner_text() == target["dtype"]
  src_chips = card.locator(".rel-list").first.locator("[data-node]")
  assert [int(x) for x in src_chips.evaluate_all("els => els.map(e => e.dataset.node)")] == target["src"]
  users = sorted(n["id"] for n in g1["nodes"] if target["id"] in n["src"])
  user_chips = card.locator(".rel-list").nth(1).locator("[data-node]")
  got_users = user_chips.evaluate_all("els => els.map(e => +e.dataset.node)")
  assert sorted(got_users) == users
  assert state(page)["node"] == target["id"]
  card.locator("[data-rel=ancestors]").click()
  related = ids_with_mark(page, "related")
  assert set(target["src"]) <= related and not set(users) & related
  # clicking the background clears the selection
  box = page.locator("#graph").bounding_box()
  page.mouse.click(box["x"] + box["width"] - 5, box["y"] + 5)
  assert card.is_hidden() and state(page)["node"] is None
  shot(page, "panel-step")


def test_keyboard_navigation(page, server):
  t, ctxs = demo_ids(server)
  kernel = ctxs["r_16_4"]
  simplify = rewrite_named(kernel, "simplify")
  open_page(page, server, f"#t={t}&c={kernel['id']}&r={simplify['id']}&s=0")
  wait_graph(page, t, simplify["id"], 0)
  page.keyboard.press("ArrowRight")
  page.keyboard.press("ArrowRight")
  check_graph(page, server, t, simplify["id"], 2)
  page.keyboard.press("ArrowLeft")
  check_graph(page, server, t, simplify["id"], 1)
  page.keyboard.press("End")
  check_graph(page, server, t, simplify["id"], simplify["matches"])
  # ↓/↑ move through the context's rewrites in order
  order = [r["id"] for r in kernel["rewrites"]]
  i = order.index(simplify["id"])
  page.keyboard.press("ArrowDown")
  wait_graph(page, t, order[i + 1], 0)
  page.keyboard.press("ArrowUp")
  wait_graph(page, t, order[i], 0)
  # PageDown/PageUp move through the contexts in the sidebar's order
  shown = page.eval_on_selector_all("#contexts li[data-ctx]", "els => els.map(e => +e.dataset.ctx)")
  j = shown.index(kernel["id"])
  page.keyboard.press("PageDown")
  page.wait_for_function("(c) => window.__viz.state.ctx === c", arg=shown[j + 1])
  assert page.locator(f"#contexts li[data-ctx='{shown[j + 1]}']").get_attribute("class").count("selected") == 1
  page.keyboard.press("PageUp")
  page.wait_for_function("(c) => window.__viz.state.ctx === c", arg=kernel["id"])
  # ? shows the keys, Escape closes; / focuses the node search
  page.keyboard.press("?")
  assert page.locator("#help").is_visible()
  assert "PgUp" in page.locator("#help").inner_text()
  page.keyboard.press("Escape")
  assert page.locator("#help").is_hidden()
  page.keyboard.press("/")
  assert page.evaluate("() => document.activeElement.id") == "node-search"
  # the whole query in one input event: typed key by key on a loaded machine, the debounced search ran on "L"
  page.locator("#node-search").fill("LOAD")
  page.wait_for_function("() => document.querySelector('#search-count').textContent !== ''")
  g = server.api(f"/api/traces/{t}/rewrites/{order[i]}/graph?step=0")
  loads = {n["id"] for n in g["nodes"] if "load" in (n["op"] + n["arg"] + n["label"]).lower()}
  assert ids_with_mark(page, "hit") == loads and loads
  page.keyboard.press("Enter")
  assert state(page)["node"] in loads


def test_stepping_by_delta_matches_full_graphs(page, server):
  """Walking every step forward and back (the view applies compact /delta answers) lands on the API's full graph each
  time: nodes, positions, creation steps and edge routes."""
  t, ctxs = demo_ids(server)
  kernel = ctxs["E_32"]
  rw = rewrite_named(kernel, "simplify")
  assert rw["matches"] >= 3
  open_page(page, server, f"#t={t}&c={kernel['id']}&r={rw['id']}&s=0")
  wait_graph(page, t, rw["id"], 0)
  for k in list(range(1, rw["matches"] + 1)) + list(range(rw["matches"] - 1, -1, -1)):
    page.evaluate("(k) => window.__viz.setStep(k)", k)
    g = check_graph(page, server, t, rw["id"], k)
    same_model(page, g)


def same_model(page, g):
  """The graph view's model is the API's graph g: nodes, positions, labels, creation steps and edge routes."""
  got = page.evaluate("""() => ({
    nodes: [...window.__viz.graph.nodes].map(([id, n]) => [id, n.x, n.y, n.d.created, n.d.label]),
    edges: [...window.__viz.graph.edges.values()].map((e) => [e.d.src, e.d.dst, e.d.index, e.d.points])})""")
  assert sorted(map(tuple, got["nodes"])) == sorted((n["id"], n["x"], n["y"], n["created"], n["label"])
                                                    for n in g["nodes"])
  assert sorted(map(tuple, (e[:3] + [tuple(map(tuple, e[3]))] for e in got["edges"]))) == sorted(
    (e["src"], e["dst"], e["index"], tuple(map(tuple, e["points"]))) for e in g["edges"])


def test_jumps_between_distant_steps_match_full_graphs(page, server):
  """Jumps (one compact delta between distant steps) too, also when a node left and came back in between."""
  t = server.trace_id("jumps.vztrace")
  ctx = next(c for c in server.api(f"/api/traces/{t}/contexts") if c["name"] == "jumps")
  rw = ctx["rewrites"][0]
  n, base = rw["matches"], f"/api/traces/{t}/rewrites/{rw['id']}"

  def comes_back(k):
    d = server.api(f"{base}/delta?from=0&to={k}&compact=1")
    return {a["id"] for a in d["nodes_added"]} & set(d["nodes_removed"])
  back = next(k for k in range(1, n + 1) if comes_back(k))
  open_page(page, server, f"#t={t}&c={ctx['id']}&r={rw['id']}&s=0")
  wait_graph(page, t, rw["id"], 0)
  for k in [back, 0, n, n // 2, 1, back, n]:
    page.evaluate("(k) => window.__viz.setStep(k)", k)
    same_model(page, check_graph(page, server, t, rw["id"], k))


def test_sidebar_filter_and_unchanged(page, server):
  t, ctxs = demo_ids(server)
  kernel = ctxs["r_16_4"]
  open_page(page, server, f"#t={t}&c={kernel['id']}")
  rows = page.locator("#rewrites li[data-rw]")
  assert rows.count() == len(kernel["rewrites"])
  unchanged = [r for r in kernel["rewrites"] if not r["changed"]]
  assert unchanged, "the demo kernel has rewrites that changed nothing"
  for r in unchanged:
    assert "unchanged" in page.locator(f"#rewrites li[data-rw='{r['id']}']").get_attribute("class")
  page.check("#hide-unchanged")
  shown = {int(x) for x in rows.evaluate_all("els => els.map(e => e.dataset.rw)")}
  current = state(page)["rw"]
  assert shown == {r["id"] for r in kernel["rewrites"] if r["changed"] or r["id"] == current}
  page.uncheck("#hide-unchanged")
  page.fill("#filter", "E_32")
  names = page.eval_on_selector_all("#contexts li[data-ctx]:not(.off-filter):not(.filter-parent)",
                                    "els => els.map(e => e.title)")
  assert names and all("E_32" in n for n in names)
  # the kernel's schedule is there (the tree keeps a hit's parents), marked as shown for its kernel only (issue 30)
  parents = page.eval_on_selector_all("#contexts li.filter-parent", "els => els.map(e => +e.dataset.ctx)")
  assert parents == [ctxs["schedule 1"]["id"]]
  # the selected context stays, marked: the graph still shows it (issue 30, tests/browser/test_ui_fit_1280.py)
  assert page.locator("#contexts li.off-filter").evaluate_all("els => els.map(e => +e.dataset.ctx)") == [kernel["id"]]
  # kernels show their colored names
  page.fill("#filter", "")
  segs = page.locator(f"#contexts li[data-ctx='{kernel['id']}'] .kname span")
  colored = [s for s in segs.evaluate_all("els => els.map(e => e.style.color)") if s]
  assert colored, "kernel names are drawn in their axis colors"
