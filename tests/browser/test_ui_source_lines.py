"""Generated lines to nodes and back in the viewer (issue 32): hovering a source line lights its nodes up in the
kernel's graph, and a node selected in the graph lights its lines up in the source panel, scrolled into view."""
from __future__ import annotations

from support.browser import (
  graph_ids,
  ids_with_mark,
  open_page,
  record_matmul_relu,  # noqa: E402
  shot,
  wait_graph,
)


def test_source_lines_and_graph_nodes_light_each_other_up(page, server, trace_dir):
  record_matmul_relu(trace_dir / "lines.vztrace")
  t = server.trace_id("lines.vztrace", ended=True)
  k = next(k for k in server.api(f"/api/traces/{t}/kernels") if k["name"].startswith("r_"))
  ctx = next(c for c in server.api(f"/api/traces/{t}/contexts") if c["id"] == k["ctx"])
  rw = next(r["id"] for r in ctx["rewrites"] if r["name"] == "View Output AST")
  src = next(s for s in server.api(f"/api/traces/{t}/contexts/{k['ctx']}/kernel")["sources"] if s["kind"] == "asm")
  open_page(page, server, f"#t={t}&c={k['ctx']}&r={rw}&s=0&p=source")
  wait_graph(page, t, rw, 0)
  shown = graph_ids(page)
  page.click("#panel-source .subtabs button[data-kind='asm']")
  pre = page.locator("#panel-source pre.source[data-kind='asm']")
  pre.wait_for()
  assert pre.evaluate("e => e.textContent") == src["text"]  # the line spans keep the text as it is

  # hover a mapped instruction line whose nodes the graph shows: exactly those light up
  i = next(i for i, ids in enumerate(src["nodes"]) if ids and set(ids) <= shown and "\tv" in src["text"].split("\n")[i])
  assert ids_with_mark(page, "hit") == set()
  pre.locator(f".src-line[data-line='{i}']").hover()
  page.wait_for_function("(n) => window.__viz.graph.ids().some(id => window.__viz.graph.hasMark(id, 'hit'))", arg=i)
  assert ids_with_mark(page, "hit") == set(src["nodes"][i])
  assert f"#{src['nodes'][i][0]}" in page.locator("#panel-source .line-info").inner_text()
  shot(page, "source-line-hover")
  page.mouse.move(5, 5)  # leaving the source unlights them
  page.wait_for_function("() => !window.__viz.graph.ids().some(id => window.__viz.graph.hasMark(id, 'hit'))")

  # select a node in the graph: its lines light up, the first scrolled into view
  node = src["nodes"][i][0]
  want = {j for j, ids in enumerate(src["nodes"]) if node in ids}
  page.evaluate("(id) => window.__viz.graph.onSelect(id)", node)
  page.wait_for_function("(n) => document.querySelector('#panel-source').dataset.lineHits === String(n)", arg=len(want))
  lit = set(pre.evaluate("e => [...e.querySelectorAll('.src-line.src-hit')].map(x => +x.dataset.line)"))
  assert lit == want and i in lit
  first = pre.locator(f".src-line[data-line='{min(want)}']")
  box, view = first.bounding_box(), pre.bounding_box()
  assert box is not None and view is not None and view["y"] <= box["y"] <= view["y"] + view["height"]
  shot(page, "source-line-from-node")
