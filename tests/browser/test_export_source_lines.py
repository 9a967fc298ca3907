"""Generated lines to nodes in the HTML export (issue 32): `python -m compiler.trace export` keeps every source's
per-line node ids, and the export opened from file:// lights nodes and lines up both ways as the live viewer does."""
from __future__ import annotations

import os
import subprocess
import sys

from support.browser import (
  ROOT,
  Export,
  graph_ids,
  ids_with_mark,
  offline,
  open_export,
  record_matmul_relu,
  shot,
  wait_graph,
)

from viz_server.offline import OfflineApi


def test_export_keeps_line_maps_and_lights_both_ways(page, tmp_path):
  trace, html = tmp_path / "lines.vztrace", tmp_path / "lines.html"
  record_matmul_relu(trace)
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  p = subprocess.run([sys.executable, "-m", "compiler.trace", "export", str(trace), "-o", str(html)], cwd=ROOT,
                     env=env, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr[-2000:]
  with OfflineApi(trace) as api:
    t = api.t
    k = next(k for k in api.trace_get("kernels") if k["name"].startswith("r_"))
    ctx = next(c for c in api.trace_get("contexts") if c["id"] == k["ctx"])
    rw = next(r["id"] for r in ctx["rewrites"] if r["name"] == "View Output AST")
    sources = api.trace_get(f"contexts/{k['ctx']}/kernel")["sources"]
  src = next(s for s in sources if s["kind"] == "asm")
  assert any(src["nodes"]), "the asm of the kernel maps no line to a node"

  open_export(page, Export(trace, html), f"#t={t}&c={k['ctx']}&r={rw}&s=0&p=source")
  s, body = offline(page, f"/api/traces/{t}/contexts/{k['ctx']}/kernel").values()
  assert s == 200 and [x["nodes"] for x in body["sources"]] == [x["nodes"] for x in sources]  # every kind's map

  wait_graph(page, t, rw, 0)
  shown = graph_ids(page)
  page.click("#panel-source .subtabs button[data-kind='asm']")
  pre = page.locator("#panel-source pre.source[data-kind='asm']")
  pre.wait_for()
  assert pre.evaluate("e => e.textContent") == src["text"]
  i = next(i for i, ids in enumerate(src["nodes"]) if ids and set(ids) <= shown and "\tv" in src["text"].split("\n")[i])
  assert ids_with_mark(page, "hit") == set()
  pre.locator(f".src-line[data-line='{i}']").hover()  # a line lights its nodes in the graph
  page.wait_for_function("() => window.__viz.graph.ids().some(id => window.__viz.graph.hasMark(id, 'hit'))")
  assert ids_with_mark(page, "hit") == set(src["nodes"][i])
  shot(page, "export-source-line-hover")
  page.mouse.move(5, 5)
  page.wait_for_function("() => !window.__viz.graph.ids().some(id => window.__viz.graph.hasMark(id, 'hit'))")

  node = src["nodes"][i][0]  # a node lights its lines in the source, the first scrolled into view
  want = {j for j, ids in enumerate(src["nodes"]) if node in ids}
  page.evaluate("(id) => window.__viz.graph.onSelect(id)", node)
  page.wait_for_function("(n) => document.querySelector('#panel-source').dataset.lineHits === String(n)", arg=len(want))
  lit = set(pre.evaluate("e => [...e.querySelectorAll('.src-line.src-hit')].map(x => +x.dataset.line)"))
  assert lit == want and i in lit
  # the first lit line is scrolled into the source view (waited on: the scroll may land after lineHits is set)
  page.wait_for_function("""(n) => {
    const pre = document.querySelector("#panel-source pre.source[data-kind='asm']");
    const el = pre && pre.querySelector(`.src-line[data-line='${n}']`);
    if (!el) return false;
    const a = el.getBoundingClientRect(), b = pre.getBoundingClientRect();
    return b.height > 0 && b.top <= a.top && a.top <= b.bottom;
  }""", arg=min(want))
