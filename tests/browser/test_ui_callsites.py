"""Kernels to the user's code in the viewer: the kernel panel lists the lines that made a kernel's ops, and the sidebar
groups kernels by the line that made each one's output."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from support.browser import open_page, shot, state

from compiler.tensor import Tensor
from compiler.trace import recorder

FN = "record_program"


def record_program(path: Path) -> dict[str, int]:
  """A program whose kernels come from known lines of this file: the line of each op, by name."""
  rng = np.random.default_rng(3)
  recorder.enable(path, announce=False)
  try:
    x = Tensor(rng.standard_normal((8, 64)).astype(np.float32))
    p = x.softmax(); soft = sys._getframe().f_lineno  # noqa: E702
    y = (x * 3).sum(); summed = sys._getframe().f_lineno  # noqa: E702
    Tensor.realize(p, y)
  finally:
    recorder.disable()
  return {"softmax": soft, "sum": summed}


def test_kernel_panel_and_sidebar_name_the_call_sites(page, server, trace_dir):
  lines = record_program(trace_dir / "callsites.vztrace")
  here = str(Path(__file__).resolve())
  t = server.trace_id("callsites.vztrace", ended=True)
  kernels = server.api(f"/api/traces/{t}/kernels")
  last = {k["ctx"]: k["callsites"][-1] for k in kernels}
  assert all(s["file"] == here and s["function"] == FN for s in last.values())
  by_line: dict[int, list[int]] = {}
  for k in kernels:
    by_line.setdefault(last[k["ctx"]]["line"], []).append(k["ctx"])
  assert len(by_line[lines["softmax"]]) == 2 and len(by_line[lines["sum"]]) == 1

  # the kernel panel: "called from" this file's lines
  soft = by_line[lines["softmax"]][1]
  open_page(page, server, f"#t={t}&c={soft}&p=kernel")
  panel = page.locator("#panel-kernel")
  panel.locator(".callsites").wait_for()
  want = [f"test_ui_callsites.py:{s['line']} in {FN}" for s in
          server.api(f"/api/traces/{t}/contexts/{soft}/kernel")["callsites"]]
  assert panel.locator(".callsites li").all_inner_texts() == want and want[-1].endswith(f":{lines['softmax']} in {FN}")
  assert panel.locator(".callsites li").first.get_attribute("title").startswith(here)

  # the sidebar: kernels grouped by the line of their output, each heading followed by its kernels
  page.check("#group-callsite")
  page.locator("#contexts li.site-group").first.wait_for()
  rows = page.eval_on_selector_all("#contexts li", """els => els.map(e => e.classList.contains('site-group')
    ? {group: e.querySelector('.mono').textContent, n: +e.querySelector('.count').textContent}
    : {ctx: +e.dataset.ctx})""")
  got: dict[str, list[int]] = {}
  for r in rows:
    if "group" in r:
      group = r["group"]
      got[group] = []
      n = r["n"]
    else:
      got[group].append(r["ctx"])
  assert got == {f"test_ui_callsites.py:{line} in {FN}": ctxs for line, ctxs in by_line.items()}
  assert all(len(v) for v in got.values()) and n == len(got[group])
  # a kernel picked from a group is selected as from the tree
  page.click(f"#contexts li[data-ctx='{by_line[lines['sum']][0]}']")
  page.wait_for_function("(c) => window.__viz.state.ctx === c", arg=by_line[lines["sum"]][0])
  assert state(page)["ctx"] == by_line[lines["sum"]][0]
  shot(page, "sidebar-callsites")
  page.uncheck("#group-callsite")
  assert page.locator("#contexts li.site-group").count() == 0


def test_a_lines_nodes_fold_into_one_box_and_the_card_names_the_line(page, server, trace_dir):
  """Trace 2.7: the tensor graph's nodes name the line that made them; key g folds each line's nodes into the lowest
  of them, labelled with the line, a click opens it, and the node card says where a node was made."""
  lines = record_program(trace_dir / "sites.vztrace")
  t = server.trace_id("sites.vztrace", ended=True)
  soft = f"test_ui_callsites.py:{lines['softmax']} {FN}"
  graph = lambda r: server.api(f"/api/traces/{t}/rewrites/{r['id']}/graph?step=0")  # noqa: E731
  ctx, rw, g0 = next((c, r, g) for c in server.api(f"/api/traces/{t}/contexts") for r in c["rewrites"]
                     for g in [graph(r)] if sum(n.get("site") == soft for n in g["nodes"]) > 1)
  by_site: dict[str, list[dict]] = {}
  for n in g0["nodes"]:
    if n.get("site"):
      by_site.setdefault(n["site"], []).append(n)
  want = {max(ns, key=lambda n: (n["y"], n["id"]))["id"]: (s, sorted(n["id"] for n in ns))
          for s, ns in by_site.items() if len(ns) > 1}
  open_page(page, server, f"#t={t}&c={ctx['id']}&r={rw['id']}&s=0")
  page.wait_for_function("(want) => document.body.dataset.graph === want", arg=f"{t}:{rw['id']}:0")
  page.keyboard.press("g")
  page.wait_for_function("() => window.__viz.graph.fold.groups.size > 0")
  got = page.evaluate("""() => Object.fromEntries([...window.__viz.graph.fold.groups].map(([r, g]) =>
    [r, [g.site, [...g.members].sort((a, b) => a - b)]]))""")
  assert {int(r): (s, ms) for r, (s, ms) in got.items()} == want
  rep = next(r for r, (s, _) in want.items() if s == soft)
  assert page.evaluate("() => window.__viz.graph.fold.hidden.size") == sum(len(ms) - 1 for _, ms in want.values())
  page.evaluate("(id) => window.__viz.graph.centerOn(id)", rep)
  pos = page.evaluate("(id) => window.__viz.graph.screenPos(id)", rep)  # (the box's center)
  page.mouse.click(pos["x"], pos["y"])
  page.wait_for_function("(r) => !window.__viz.graph.fold.groups.has(r)", arg=rep)
  page.evaluate("(id) => window.__viz.selectNode(id)", want[rep][1][0])
  page.wait_for_function("(s) => document.querySelector('#node-card [data-field=site]')?.textContent === s", arg=soft)
  shot(page, "site-groups")


# a fold of the graph shown, made again with the users of every node (usersOf), against the one the page made
FOLD_WITH_ALL_USERS = """async () => {
  const g = window.__viz.graph, m = await import("/static/graphgroups.js");
  const pairs = (es) => es.map((e) => `${e.d.src}>${e.d.dst}`).sort().join();
  const whole = m.foldedView(g.fold.groups, g.nodes, g.collapse, m.usersOf(g.nodes));
  return {edges: g.fold.edges.length, same: pairs(whole.edges) === pairs(g.fold.edges),
    hidden: [...whole.hidden].sort().join() === [...g.fold.hidden].sort().join()};
}"""


def test_a_fold_lists_the_users_of_its_hidden_members_alone(page, server, trace_dir):
  """A refold (every step of a big rewrite) lists the users of its groups' hidden members only, not every node's
  (issue 30: the whole map was most of its time), and folds the graph as the whole map does: the edges from a hidden
  member to its users outside leave from its group's box."""
  lines = record_program(trace_dir / "fold_users.vztrace")
  t = server.trace_id("fold_users.vztrace", ended=True)
  soft = f"test_ui_callsites.py:{lines['softmax']} {FN}"
  graph = lambda r: server.api(f"/api/traces/{t}/rewrites/{r['id']}/graph?step=0")  # noqa: E731
  ctx, rw = next((c, r) for c in server.api(f"/api/traces/{t}/contexts") for r in c["rewrites"]
                 if sum(n.get("site") == soft for n in graph(r)["nodes"]) > 1)
  open_page(page, server, f"#t={t}&c={ctx['id']}&r={rw['id']}&s=0")
  page.wait_for_function("(want) => document.body.dataset.graph === want", arg=f"{t}:{rw['id']}:0")
  page.keyboard.press("g")
  page.wait_for_function("() => window.__viz.graph.fold.groups.size > 0")
  assert page.evaluate("() => window.__viz.graph.usersCache") is None  # (the whole map, not made)
  got = page.evaluate(FOLD_WITH_ALL_USERS)
  assert got == {"edges": got["edges"], "same": True, "hidden": True}, got
  assert got["edges"] > 0
