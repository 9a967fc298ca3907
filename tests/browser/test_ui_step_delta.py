"""An arrow step on a big rewrite (issue 30: a step rebuilds ~2,000 nodes): the graph a delta leaves is the graph a
fresh load of that step draws, for rebuilt nodes renamed in place as for the rest; and the fading ghosts of what a step
removed are drawn only where the view sees them (clippedPath)."""
from __future__ import annotations

import os

from support.browser import REBUILD_STEPS, open_rebuilt_chain, open_rewrite, record_matmul_relu_fresh, wait_graph
from support.export_helpers import long_edges

STEPS = REBUILD_STEPS

# the page's model, what it draws from: nodes (place, box, label, constants' line, sources), edges (drawn route and
# bounds), ghosts, marks; `fresh`: the same step's graph answer in a new GraphView (as a fresh load of the step)
MODEL = """async ({fresh}) => {
  const {GraphView} = await import("/static/graph.js");
  const {api} = await import("/static/api.js");
  const page = window.__viz.graph, s = window.__viz.state;
  let g = page;
  if (fresh) {
    const host = document.createElement("div");
    document.body.append(host);
    g = new GraphView(host);
    g.collapse = page.collapse;
    g.setData(await api.graph(s.trace, s.rw, s.step, true));
    host.remove();
  }
  const r = (x) => Math.round(x * 1000) / 1000;
  const pts = (ps) => ps.map(([x, y]) => [r(x), r(y)]);
  return {
    nodes: [...g.nodes].map(([id, n]) => [id, r(n.x), r(n.y), n.w, n.h, n.lines, n.consts, n.d.src, n.d.created,
      n.d.site ?? "none"]).sort((a, b) => a[0] - b[0]),
    edges: [...g.edges].map(([k, e]) => [k, pts(e.pts), e.box.map(r), e.fromConst]).sort(),
    ghosts: (g.ghosts?.nodes || []).map((n) => [n.d.id, n.d.site ?? "none"]).sort((a, b) => a[0] - b[0]),
    ghostEdges: (g.ghosts?.edges || []).map((e) => `${e.d.src}>${e.d.dst}>${e.d.index}`).sort(),
    drawnGhosts: (g.ghosts?.drawnNodes || []).map((n) => n.d.id).sort((a, b) => a - b),
    drawnGhostEdges: (g.ghosts?.drawnEdges || []).map((e) => `${e.d.src}>${e.d.dst}>${e.d.index}`).sort(),
    added: [...g.marked.added].sort(), changed: [...g.marked.changed].sort(), size: g.size,
  };
}"""


def test_a_step_by_delta_leaves_the_graph_a_fresh_load_draws(page, rebuild_server):
  t = open_rebuilt_chain(page, rebuild_server)
  for k in range(1, STEPS + 1):
    if k == STEPS // 2:
      page.keyboard.press("c")  # constants inline: boxes widened, edges respaced, on both sides alike
    page.keyboard.press("ArrowRight")
    wait_graph(page, t, 0, k)
    assert page.evaluate("() => window.__viz.perf.lastKind") == "delta"
    answer = rebuild_server.api(f"/api/traces/{t}/rewrites/0/delta?from={k - 1}&to={k}&compact=2")
    assert sum(answer.get("rebuilt", {}).get("id", [])[1::2]) >= 29, k  # the chain came as runs, renamed in place
    got, want = page.evaluate(MODEL, {"fresh": False}), page.evaluate(MODEL, {"fresh": True})
    assert len(got["ghosts"]) >= 30 and len(got["edges"]) >= 30
    assert got == want, k


def test_steps_that_drop_call_sites_and_move_rebuilt_nodes_leave_the_graph_a_fresh_load_draws(page, rebuild_server):
  """Rebuilt nodes that drop their old node's call site (fresh nodes over the user's program's), rebuilt nodes moved
  with their straight in-edges, and new nodes come as runs and columns (`nosite`, `shifted`, `straight`, `whole`:
  issue 30, answers under 10 KB), and stepping back, the trace's nodes made before over fresh ones, with their
  `created` and sites (`resite`); applied, each step leaves the model a fresh load of it makes, call sites included,
  and its call-site groups."""
  t = rebuild_server.trace_id("moving")
  page.goto(f"{rebuild_server.url}/#t={t}&c=0&r=0&s=0")
  wait_graph(page, t, 0, 0)
  seen = set()
  for k in range(1, STEPS + 1):
    page.keyboard.press("ArrowRight")
    wait_graph(page, t, 0, k)
    assert page.evaluate("() => window.__viz.perf.lastKind") == "delta"
    answer = rebuild_server.api(f"/api/traces/{t}/rewrites/0/delta?from={k - 1}&to={k}&compact=2")
    seen |= {f for f in ("shifted", "straight", "whole") if f in answer}
    seen |= {"nosite" for f in ("rebuilt", "shifted") if "nosite" in answer.get(f, {})}
    got, want = page.evaluate(MODEL, {"fresh": False}), page.evaluate(MODEL, {"fresh": True})
    assert got == want, k
    groups = page.evaluate(SITES, False)
    assert groups == page.evaluate(SITES, True) and (groups or k > STEPS // 2), k
  assert seen == {"shifted", "straight", "whole", "nosite"}
  for k in range(STEPS - 1, -1, -1):  # and back: the trace's nodes, made before and with sites, over fresh ones
    page.keyboard.press("ArrowLeft")
    wait_graph(page, t, 0, k)
    assert page.evaluate("() => window.__viz.perf.lastKind") == "delta"
    answer = rebuild_server.api(f"/api/traces/{t}/rewrites/0/delta?from={k + 1}&to={k}&compact=2")
    seen |= {f for f in ("created", "resite") if f in answer.get("rebuilt", {}) or f in answer.get("shifted", {})}
    got, want = page.evaluate(MODEL, {"fresh": False}), page.evaluate(MODEL, {"fresh": True})
    was = {n["id"]: n.get("site", "none")
           for n in rebuild_server.api(f"/api/traces/{t}/rewrites/0/graph?step={k + 1}&compact=1")["nodes"]}
    assert got["ghosts"] and all(was[n] == site for n, site in got["ghosts"]), k  # (their sites as they were)
    for m in (got, want):  # (the ghosts of a step back are what it took away, not what step k did)
      for key in ("ghosts", "ghostEdges", "drawnGhosts", "drawnGhostEdges"):
        del m[key]
    assert got == want, k
    assert page.evaluate(SITES, False) == page.evaluate(SITES, True), k
  assert {"created", "resite"} <= seen


# the /delta requests the page made (its own and its prefetches: api.js caches answers, so each once)
DELTAS = """() => performance.getEntriesByType("resource").map((e) => e.name).filter((u) => u.includes("/delta?"))"""


def _without_ghosts(m: dict) -> dict:
  """A MODEL without its ghosts (a step back's are what it took away, a fresh load's what the step did)."""
  return {k: v for k, v in m.items() if k not in ("ghosts", "ghostEdges", "drawnGhosts", "drawnGhostEdges")}


def test_a_step_back_takes_the_routes_it_brings_back_from_the_page(page, rebuild_server):
  """Each step removes a node with a long in-edge (routed through points); a step back brings it back. The page keeps
  each step's removed in-edges (static/graphghosts.js, StepMemo: from the step to it or its graph answer) and asks the
  step back with `held`, so the server leaves their routes out (issue 30: step 1 -> 0 of a GPT step's `add
  bufferize` resent 126 KB of them); the model each step back leaves is a fresh load's, after steps forward and
  after opening the last step by its graph (the steps back from there hold none: their answers send the routes)."""
  tmp = rebuild_server.dir / "long-edges.part"
  long_edges(tmp, depth=20, steps=STEPS)
  os.replace(tmp, rebuild_server.dir / "long-edges.vztrace")  # (whole when the directory scan finds it)
  t = rebuild_server.trace_id("long-edges", ended=True)
  page.goto(f"{rebuild_server.url}/#t={t}&c=0&r=0&s=0")
  wait_graph(page, t, 0, 0)
  for k in range(1, STEPS + 1):
    page.keyboard.press("ArrowRight")
    wait_graph(page, t, 0, k)
  for opened in (False, True):
    if opened:  # a fresh load of the last step: its graph answer's removed_edges are what the page holds
      page.goto(f"{rebuild_server.url}/#t={t}&c=0&r=0&s={STEPS}")
      page.reload()
      wait_graph(page, t, 0, STEPS)
    for k in range(STEPS - 1, -1, -1):
      page.keyboard.press("ArrowLeft")
      wait_graph(page, t, 0, k)
      assert page.evaluate("() => window.__viz.perf.lastKind") == "delta", (opened, k)
      # (opened at the last step, the page holds only that one's: the steps back before it came to none by a step on)
      held = not opened or k == STEPS - 1
      asked = [u for u in page.evaluate(DELTAS) if f"from={k + 1}&to={k}&" in u]
      assert asked and all((f"&held={k + 1}" in u) == held for u in asked), (opened, k, asked)
      answer = rebuild_server.api(f"/api/traces/{t}/rewrites/0/delta?from={k + 1}&to={k}&compact=2&held={k + 1}")
      assert answer["held"]["dst"] == [STEPS + 20 - k, 1] and "held" not in \
        rebuild_server.api(f"/api/traces/{t}/rewrites/0/delta?from={k + 1}&to={k}&compact=2"), k
      got, want = page.evaluate(MODEL, {"fresh": False}), page.evaluate(MODEL, {"fresh": True})
      assert _without_ghosts(got) == _without_ghosts(want), (opened, k)
      assert any(len(p) > 2 for _, p, _, _ in got["edges"])  # (a long edge's route drawn)


MEMO = """async () => {
  const {StepMemo} = await import("/static/graphghosts.js");
  const m = new StepMemo(5), routes = (n) => new Map([...Array(n).keys()].map((i) => [i, [0, null]]));
  const out = [];
  m.at("a").put(1, routes(3));
  m.put(2, routes(2));
  out.push([m.has(1), m.has(2), m.size]);
  m.put(3, routes(1));  // (6 in-edges: the step filed first goes)
  out.push([m.has(1), m.has(2), m.has(3), m.size]);
  m.put(4, routes(9));  // (more than the bound alone: kept, the others go)
  out.push([m.has(2), m.has(3), m.has(4), m.size]);
  m.at("b");
  out.push([m.has(4), m.size]);
  return out;
}"""


def test_the_step_memo_keeps_a_bounded_number_of_routes_of_one_chain(page, rebuild_server):
  open_rebuilt_chain(page, rebuild_server)
  assert page.evaluate(MEMO) == [[True, True, 5], [False, True, True, 3], [False, False, True, 9], [False, 0]]


# the call-site groups of the page's graph, or of a fresh load of the step shown (rep id -> members)
SITES = """async (fresh) => {
  const {GraphView} = await import("/static/graph.js");
  const {api} = await import("/static/api.js");
  const {siteGroups} = await import("/static/graphgroups.js");
  const s = window.__viz.state;
  let g = window.__viz.graph;
  if (fresh === true) {
    const host = document.createElement("div");
    document.body.append(host);
    g = new GraphView(host);
    g.setData(await api.graph(s.trace, s.rw, s.step, true));
    host.remove();
  }
  return [...siteGroups(g.nodes, new Set(), new Set())].map(([rep, x]) => [rep, x.site, [...x.members].sort()]).sort();
}"""


# pieces of clippedPath's output and of the whole curve (pathOf's pieces), as [ax, ay, cx, cy, bx, by], and whether
# every point of the whole curve inside the view lies on a piece kept (each piece sampled finely)
CLIP = """async ({pts, rect}) => {
  const {clippedPath} = await import("/static/graphgeom.js");
  const [x0, y0, x1, y1] = rect;
  const kept = [];
  let pen = null;
  clippedPath(pts, x0, y0, x1, y1, {
    moveTo: (x, y) => { pen = [x, y]; },
    quadraticCurveTo: (cx, cy, x, y) => { kept.push([...pen, cx, cy, x, y]); pen = [x, y]; },
  });
  const at = ([ax, ay, cx, cy, bx, by], t) => [(1 - t) * (1 - t) * ax + 2 * t * (1 - t) * cx + t * t * bx,
    (1 - t) * (1 - t) * ay + 2 * t * (1 - t) * cy + t * t * by];
  const whole = [];
  if (pts.length === 2) whole.push([...pts[0], (pts[0][0] + pts[1][0]) / 2, (pts[0][1] + pts[1][1]) / 2, ...pts[1]]);
  let a = pts[0];
  for (let i = 1; i < pts.length - 1; i++) {
    const last = i === pts.length - 2, b = last ? pts[i + 1] : [(pts[i][0] + pts[i + 1][0]) / 2,
      (pts[i][1] + pts[i + 1][1]) / 2];
    whole.push([...a, ...pts[i], ...b]);
    a = b;
  }
  const cells = new Set();  // the 1-px cells the kept pieces pass through (sampled every 0.25 px or finer)
  const samples = (q) => Math.ceil(4 * (Math.hypot(q[2] - q[0], q[3] - q[1]) + Math.hypot(q[4] - q[2], q[5] - q[3])));
  for (const q of kept) {
    const n = samples(q);
    for (let i = 0; i <= n; i++) { const [x, y] = at(q, i / n); cells.add(`${Math.floor(x)},${Math.floor(y)}`); }
  }
  const seen = (x, y) => [-1, 0, 1].some((i) => [-1, 0, 1].some((j) =>
    cells.has(`${Math.floor(x) + i},${Math.floor(y) + j}`)));
  let inside = 0, missed = 0;
  for (const q of whole) {
    if (Math.max(q[1], q[3], q[5]) < y0 || Math.min(q[1], q[3], q[5]) > y1) continue;  // (a piece out of view)
    const n = samples(q);
    for (let i = 0; i <= n; i += Math.max(1, Math.floor(n / 40000))) {
      const [x, y] = at(q, i / n);
      if (x < x0 || x > x1 || y < y0 || y > y1) continue;
      inside++;
      if (!seen(x, y)) missed++;
    }
  }
  const outside = kept.filter((q) => Math.max(q[0], q[2], q[4]) < x0 || Math.min(q[0], q[2], q[4]) > x1
    || Math.max(q[1], q[3], q[5]) < y0 || Math.min(q[1], q[3], q[5]) > y1).length;
  return {kept: kept.length, inside, missed, outside};
}"""


def test_a_ghost_edge_is_drawn_only_where_the_view_sees_it(page, rebuild_server):
  open_rebuilt_chain(page, rebuild_server)
  rect = [1000, 5000, 2400, 5900]  # a view of 1,400 x 900 graph px
  straight = [[1500, 0], [1900, 80000]]  # a straight edge (center to center) 80,000 px long through it
  routed = [[0, 0]] + [[1200 + 900 * ((i // 7) % 3), 60 * i] for i in range(1, 1500)] + [[3000, 90000]]
  for pts in (straight, routed):
    got = page.evaluate(CLIP, {"pts": pts, "rect": rect})
    assert got["inside"] > 100 and got["missed"] == 0, got  # all of it the view sees is drawn...
    assert got["outside"] == 0 and got["kept"] <= 120, got  # ...and little else: a bounded number of pieces


# what the page made and renamed in place since the last call, and the ghosts it draws (the rest lie under the
# rebuilt nodes that replaced them)
WORK = """() => {
  const g = window.__viz.graph, w = {...g.work};
  g.work.made = g.work.renamed = 0;
  return {...w, ghosts: g.ghosts ? g.ghosts.nodes.length : 0, drawn: g.ghosts ? g.ghosts.drawnNodes.length : 0,
    drawnEdges: g.ghosts ? g.ghosts.drawnEdges.length : 0, frames: g.frames};
}"""


def test_an_arrow_step_makes_what_it_adds_not_what_it_rebuilds(page, rebuild_server):
  """Each step rebuilds the chain of 30 NEGs (under new ids) and adds a CONST: the page renames the rebuilt entries in
  place and makes entries only for what the step added, and draws the ghost of what it replaced, not of the chain."""
  t = open_rebuilt_chain(page, rebuild_server)
  page.evaluate(WORK)
  for k in range(1, 4):
    page.keyboard.press("ArrowRight")
    wait_graph(page, t, 0, k)
    w = page.evaluate(WORK)
    assert w["renamed"] >= 2 * 29, w  # the chain's nodes and their in-edges, kept...
    assert w["made"] <= 4, w  # ...and entries made only for the new CONST, the NEG over it and its edge
    assert w["ghosts"] >= 31 and w["drawn"] == 1 and w["drawnEdges"] <= 1, w  # the old CONST's


# the step panel's whole renders (rule and before/after trees) from now on: each puts a new .before-after
COUNT_RENDERS = """() => {
  window.__renders = 0;
  new MutationObserver((ms) => {
    for (const m of ms) for (const n of m.addedNodes) if (n.classList?.contains('before-after')) window.__renders++;
  }).observe(document.querySelector('#panel-step'), {childList: true, subtree: true});
}"""
# an arrow step as bench/bench_ui.py times it: to the frame that shows it (the panel's update comes first)
STEP_FRAME = """async (k) => {
  await window.__viz.setStep(k);
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
}"""
PANEL = """() => {
  const p = document.querySelector('#panel-step'), q = (s) => p.querySelector(s)?.innerText ?? null;
  return {title: q('.step-title'), before: q('[data-role=before]'), after: q('[data-role=after]'),
    dimmed: [...p.querySelectorAll('.step-body > *')].filter((e) => e.style.opacity !== '').length,
    selected: p.querySelector('.step-row.selected')?.dataset.step ?? null};
}"""


def test_steps_in_a_row_render_the_step_panel_once_they_pause(page, rebuild_server):
  """Arrow steps one after another: each step's title and list row at once, the rule and before/after trees (a second
  frame a step, issue 30) once stepping pauses (the key let go, or REPEAT_MS without a step), then the last step's."""
  t = rebuild_server.trace_id("rebuild")
  steps = rebuild_server.api(f"/api/traces/{t}/rewrites/0")["steps"]
  page.goto(f"{rebuild_server.url}/#t={t}&c=0&r=0&s=1")
  wait_graph(page, t, 0, 1)
  page.wait_for_function("() => document.querySelector('#panel-step [data-role=after]')")
  page.evaluate(COUNT_RENDERS)
  # (no pause comes by the clock during the steps, however slow the machine: the key's release ends them)
  page.evaluate("() => { window.__viz.panels.get('step').repeatMs = 1e9; }")
  for k in range(2, STEPS + 1):
    page.evaluate(STEP_FRAME, k)
  got = page.evaluate(PANEL)
  assert got["title"].startswith(f"Step {STEPS} / {STEPS}") and got["selected"] == str(STEPS), got
  assert got["dimmed"] > 0, got  # (an earlier step's rule and trees, kept dimmed meanwhile)
  assert page.evaluate("() => window.__renders") <= 1  # (the first step may render whole: step 1 showed long ago)
  last = steps[STEPS - 1]
  page.keyboard.up("ArrowRight")
  page.wait_for_function("(want) => document.querySelector('#panel-step [data-role=before]')?.innerText"
                         ".includes(want)", arg=f"#{last['before']}")
  got = page.evaluate(PANEL)
  assert got["title"].startswith(f"Step {STEPS} / {STEPS}") and got["dimmed"] == 0, got
  assert f"#{last['before']}" in got["before"] and f"#{last['after']}" in got["after"], got
  renders = page.evaluate("() => window.__renders")
  assert renders <= 2
  # without the key (bench_ui, a click on the list): the step whole once REPEAT_MS pass without another
  page.evaluate("() => { window.__viz.panels.get('step').repeatMs = 50; }")
  page.evaluate(STEP_FRAME, STEPS - 1)
  prev = steps[STEPS - 2]
  page.wait_for_function("(want) => document.querySelector('#panel-step [data-role=before]')?.innerText"
                         ".includes(want) && ![...document.querySelectorAll('#panel-step .step-body > *')]"
                         ".some((e) => e.style.opacity !== '')", arg=f"#{prev['before']}")
  assert page.evaluate(PANEL)["title"].startswith(f"Step {STEPS - 1} / {STEPS}")


def test_the_automatic_view_follows_the_node_that_stands_for_the_rules_result(page, server, trace_dir):
  """The page marks as the step's result (where its automatic view centres when the change is too big to fit) the
  answer's `match.result`, a node of the graph, not `after`, the trace's node, which replay rebuilt at this step of a
  matmul's rangeify (viz_server/stepgraphs.py, _match)."""
  record_matmul_relu_fresh(trace_dir / "result.vztrace")
  t = server.trace_id("result.vztrace", ended=True)  # (every context read: open_rewrite looks one up by name)
  # (the schedule's number counts the process's schedules: its context is found by its rewrite)
  ctx = next(c["name"] for c in server.api(f"/api/traces/{t}/contexts")
             if any(r["name"] == "open kernel + rangeify" for r in c["rewrites"]))
  t, rw = open_rewrite(page, server, "result.vztrace", ctx=ctx, rewrite="open kernel + rangeify", step=0)
  k = rw["matches"]
  g = server.api(f"/api/traces/{t}/rewrites/{rw['id']}/graph?step={k}")
  ids = {n["id"] for n in g["nodes"]}
  assert g["match"]["result"] in ids and g["match"]["after"] not in ids
  page.evaluate("(k) => window.__viz.setStep(k)", k)
  wait_graph(page, t, rw["id"], k)
  got = page.evaluate("() => ({result: window.__viz.graph.marked.result, shown: [...window.__viz.graph.nodes.keys()]})")
  assert got["result"] == g["match"]["result"] and got["result"] in got["shown"]
