"""Big graphs read top-down (issue 30): the loading state whenever the graph shown is not the step named, the
re-layout key, the minimap of a graph too big to read at fit, and a kernel's index arithmetic folded into one box."""
from __future__ import annotations

import pytest
from support.browser import Server, open_page, open_rewrite, wait_graph
from support.server_helpers import recording

from compiler import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from compiler.uop import AxisType
from viz_server import replay, views

GRAPH_OF = "() => document.body.dataset.graph ?? null"
LOADING = "() => document.querySelector('#graph-wrap').dataset.loading ?? null"


def _two_rewrites(server) -> tuple[int, int, dict, dict]:
  """(trace, context, a rewrite with steps, another rewrite of that context) of the demo trace."""
  t = server.trace_id("demo")
  for c in server.api(f"/api/traces/{t}/contexts"):
    many = [r for r in c["rewrites"] if r["matches"] >= 2]
    if many and len(c["rewrites"]) >= 2:
      other = next(r for r in c["rewrites"] if r["id"] != many[0]["id"])
      return t, c["id"], many[0], other
  raise AssertionError("the demo trace has no context with two rewrites")


def test_loading_state_while_the_answer_is_held_back(page, server):
  t, c, rw, other = _two_rewrites(server)
  open_page(page, server, f"#t={t}&c={c}&r={other['id']}&s=0")
  wait_graph(page, t, other["id"], 0)
  held, hold = [], [True]  # the requests for rw's graphs and deltas, answered once the test lets them go

  def keep(route):
    if hold[0]:
      held.append(route)
    else:
      route.continue_()

  def release():
    hold[0] = False
    for route in held:
      route.continue_()
    held.clear()

  page.route(f"**/rewrites/{rw['id']}**", keep)  # its steps, graphs and deltas
  page.evaluate("([c, r]) => { window.__viz.selectContext(c, {rw: r, step: 0}); }", [c, rw["id"]])
  page.wait_for_function(LOADING)
  # at once: another rewrite's graph is off screen, the note says what comes, the step panel does not show the old
  assert page.evaluate(LOADING) == "rewrite"
  assert page.evaluate("() => window.__viz.graph.nodes.size") == 0
  assert page.evaluate(GRAPH_OF) is None
  assert page.locator("#graph-loading").is_visible()
  assert "loading" in page.locator("#graph-loading").inner_text()
  assert page.locator("#panel-step [data-state=loading]").count() == 1
  page.wait_for_function("() => document.querySelector('#panel-step').textContent.includes('loading')")
  release()
  wait_graph(page, t, rw["id"], 0)
  assert page.evaluate(LOADING) is None and not page.locator("#graph-loading").is_visible()
  shown = page.evaluate("() => window.__viz.graph.nodes.size")
  assert shown == len(server.api(f"/api/traces/{t}/rewrites/{rw['id']}/graph?step=0")["nodes"])
  # a jump in the same rewrite: the step shown stays (dimmed) under the note until the delta lands
  last = rw["matches"]
  hold[0] = True
  page.keyboard.press("End")
  page.wait_for_function(LOADING)
  assert page.evaluate(LOADING) == "step"
  assert page.evaluate(GRAPH_OF) == f"{t}:{rw['id']}:0"
  assert page.evaluate("() => window.__viz.graph.nodes.size") == shown
  assert page.locator("#graph-loading").inner_text() == f"loading step {last}…"
  release()
  wait_graph(page, t, rw["id"], last)
  assert page.evaluate(LOADING) is None


LEAVES = 80  # loads summed by a balanced tree: ~560 nodes (index groups fold from 400), ~7,000 px wide
GROUPS = LEAVES - 1  # (the first load's index is the RANGE itself: no arithmetic to fold)


@pytest.fixture(scope="module")
def kserver(tmp_path_factory):
  """A kernel-shaped graph: a sum over LEAVES loads at shifted indices (INDEX(buf, RANGE + i)), each load times 1;
  the rewrite drops the `* 1`s one step at a time."""
  d = tmp_path_factory.mktemp("kernel-traces")
  out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), arg=0)
  inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), arg=1)
  r = UOp.range(64, 0, AxisType.LOOP)
  leaves = [inp.index(r + i).load() * 1 for i in range(LEAVES)]
  while len(leaves) > 1:
    leaves = [leaves[i] + leaves[i + 1] if i + 1 < len(leaves) else leaves[i] for i in range(0, len(leaves), 2)]
  with recording(d / "kernel.vztrace"):
    graph_rewrite(UOp.sink(out.index(r).store(leaves[0])), PatternMatcher([(UPat.var("x") * 1, lambda x: x)]),
                  name="drop *1")
  srv = Server(d, tmp_path_factory.mktemp("kernel-log") / "server.log")
  yield srv
  srv.stop()


def _index_groups(g: dict) -> dict[int, int]:
  """{rep: INDEX} as static/graphgroups.js should fold them here: each load's INDEX's ADD(RANGE, CONST i), whose
  CONST feeds nothing else (the RANGE is every INDEX's: it stays out)."""
  by_id = {n["id"]: n for n in g["nodes"]}
  users: dict[int, list[int]] = {}
  for n in g["nodes"]:
    for s in n["src"]:
      users.setdefault(s, []).append(n["id"])
  out = {}
  for n in g["nodes"]:
    if n["op"] == "INDEX" and by_id[n["src"][1]]["op"] == "ADD" and users[n["src"][1]] == [n["id"]]:
      add = by_id[n["src"][1]]
      if any(by_id[s]["op"] == "CONST" and users[s] == [add["id"]] for s in add["src"]):
        out[add["id"]] = n["id"]
  return out


def test_index_groups_fold_and_open_and_the_minimap_moves_the_view(page, kserver):
  t, rw = open_rewrite(page, kserver, "kernel")
  g0 = kserver.api(f"/api/traces/{t}/rewrites/{rw['id']}/graph?step=0")
  want = _index_groups(g0)
  assert len(want) == GROUPS  # (the store's INDEX is the RANGE's too)
  groups = "() => Object.fromEntries([...window.__viz.graph.fold.groups].map(([r, g]) => [r, g.index]))"
  page.wait_for_function("() => window.__viz.graph.fold.groups.size > 0")
  assert {int(r): i for r, i in page.evaluate(groups).items()} == want
  assert page.evaluate("() => window.__viz.graph.fold.hidden.size") == GROUPS  # one CONST under each
  # a click on a folded box opens its group
  rep = min(want)
  page.evaluate("(id) => window.__viz.graph.centerOn(id)", rep)
  pos = page.evaluate("(id) => window.__viz.graph.screenPos(id)", rep)
  page.mouse.click(pos["x"], pos["y"])  # (screenPos gives the box's center: its edge is a hit or not by rounding)
  page.wait_for_function("(r) => !window.__viz.graph.fold.groups.has(r)", arg=rep)
  assert page.evaluate("() => window.__viz.graph.fold.hidden.size") == GROUPS - 1
  page.keyboard.press("g")  # all unfolded, then folded again
  page.wait_for_function("() => window.__viz.graph.fold.groups.size === 0 && window.__viz.graph.frames > 0")
  page.keyboard.press("g")
  page.wait_for_function(f"() => window.__viz.graph.fold.groups.size === {GROUPS}")
  # too wide to read fitted: the fit is the overview, zoomed in the minimap shows; a click on it centers the view there
  page.keyboard.press("f")
  mm = page.locator("#minimap")
  page.wait_for_function("() => window.__viz.graph.frames > 0")
  assert not mm.is_visible()
  r = page.locator("#graph canvas").bounding_box()
  page.mouse.move(r["x"] + r["width"] / 2, r["y"] + r["height"] / 2)
  page.mouse.wheel(0, -600)
  mm.wait_for(state="visible")
  box = mm.bounding_box()
  page.mouse.click(box["x"] + box["width"] * 0.8, box["y"] + box["height"] * 0.5)
  gx = page.evaluate("() => { const g = window.__viz.graph; return (g.cw / 2 - g.view.x) / g.view.k; }")
  assert abs(gx - 0.8 * g0["width"]) < 0.05 * g0["width"]
  page.keyboard.press("m")
  mm.wait_for(state="hidden")


def test_relayout_and_far_jumps_anchor_the_layout_and_stepping_keeps_nodes_in_place(page, kserver):
  """The re-layout key lays the step out fresh, an anchor; a far jump (End) is an anchor laid out from the layout on
  screen, so the nodes both steps have stay where they were; stepping on from either (either way) derives from it,
  so the nodes that stay never move."""
  t = kserver.trace_id("kernel")
  rw, ctx = max(((r, c) for c in kserver.api(f"/api/traces/{t}/contexts") for r in c["rewrites"]),
                key=lambda rc: rc[0]["matches"])
  n, k = rw["matches"], 2
  assert n > k + 1 + 2 * 8, n  # (End is a far jump: more than replay.NEAR steps away)
  open_page(page, kserver, f"#t={t}&c={ctx['id']}&r={rw['id']}&s={k}")
  wait_graph(page, t, rw["id"], k)
  assert page.evaluate("() => document.body.dataset.layout") == "stable"  # (near step 0: its chain)
  xy = "() => Object.fromEntries(window.__viz.graph.ids().map((id) => [id, [window.__viz.graph.node(id).x, " \
       "window.__viz.graph.node(id).y]]))"
  base = f"/api/traces/{t}/rewrites/{rw['id']}/graph?compact=1&step="

  def served(step: int, anchor: int) -> dict:
    return {str(d["id"]): [d["x"], d["y"]] for d in kserver.api(base + f"{step}&anchor={anchor}")["nodes"]}

  def step_keeps_places(key: str, step: int, anchor: int) -> None:
    before = page.evaluate(xy)
    page.keyboard.press(key)
    wait_graph(page, t, rw["id"], step)
    after = page.evaluate(xy)
    assert page.evaluate("() => document.body.dataset.anchor") == str(anchor)
    assert after == served(step, anchor)
    kept = before.keys() & after.keys()
    assert kept and all(before[i] == after[i] for i in kept), key

  page.keyboard.press("r")
  page.wait_for_function("() => document.body.dataset.layout === 'fresh'")
  fresh = kserver.api(base + f"{k}&fresh=1")
  assert fresh["anchor"] == k and page.evaluate(xy) == {str(d["id"]): [d["x"], d["y"]] for d in fresh["nodes"]}
  step_keeps_places("ArrowRight", k + 1, k)  # stepping on from the re-layout: its chain
  before = page.evaluate(xy)
  page.keyboard.press("End")
  wait_graph(page, t, rw["id"], n)
  jump = int(page.evaluate("() => document.body.dataset.anchor"))
  assert jump > n and jump % (n + 1) == n and page.evaluate("() => document.body.dataset.layout") == "jump"
  after = page.evaluate(xy)
  assert after == served(n, jump)
  kept = before.keys() & after.keys()
  assert kept and all(before[i] == after[i] for i in kept)  # (the far jump moved nothing both steps show)
  step_keeps_places("ArrowLeft", n - 1, jump)  # back from a far jump: derived backward from it
  step_keeps_places("ArrowLeft", n - 2, jump)


# the page's model (nodes with place, box, label lines, sources, created and site; edges with drawn route and bounds;
# ghosts; marks); `fresh`: the graph answer of the step shown on the anchor shown, in a new GraphView (a fresh load)
JUMP_MODEL = """async ({fresh}) => {
  const {GraphView} = await import("/static/graph.js");
  const {api} = await import("/static/api.js");
  const page = window.__viz.graph, s = window.__viz.state;
  let g = page;
  if (fresh) {
    const host = document.createElement("div");
    document.body.append(host);
    g = new GraphView(host);
    g.collapse = page.collapse;
    g.setData(await api.graph(s.trace, s.rw, s.step, true, Number(document.body.dataset.anchor)));
    host.remove();
  }
  const r = (x) => Math.round(x * 1000) / 1000;
  return {
    nodes: [...g.nodes].map(([id, n]) => [id, r(n.x), r(n.y), n.w, n.h, n.lines, n.consts, n.d.src, n.d.created,
      n.d.site ?? "none"]).sort((a, b) => a[0] - b[0]),
    edges: [...g.edges].map(([k, e]) => [k, e.pts.map(([x, y]) => [r(x), r(y)]), e.box.map(r), e.fromConst]).sort(),
    ghosts: (g.ghosts?.nodes || []).map((n) => n.d.id), added: [...g.marked.added].sort(),
    changed: [...g.marked.changed].sort(), size: g.size,
  };
}"""


def test_a_far_jump_comes_as_a_delta_from_the_step_on_screen_and_draws_what_a_fresh_load_draws(page, kserver,
                                                                                               tmp_path):
  """A far jump laid out from the layout on screen (End, slider clicks) comes as the delta from the step on screen
  (`/graph?...&from=j&delta=2`: issue 30, a jump's ~1 MB graph answer took as long to make and parse as the rest of
  the jump): the nodes both steps have stay as they were, and the model it leaves is the one a fresh load of the
  step on that anchor makes (places, boxes, sources, routes, `created` where known, marks; no ghosts). Its
  neighbours' deltas are asked once the page stays on it (JUMP_STAY_MS), not when it moves on at once."""
  srv = Server(kserver.dir, tmp_path / "server.log")  # (its own: a step near a chain laid out before goes on it)
  try:
    _jumps_by_delta(page, srv)
  finally:
    srv.stop()


def _jumps_by_delta(page, server) -> None:
  t = server.trace_id("kernel")
  rw, ctx = max(((r, c) for c in server.api(f"/api/traces/{t}/contexts") for r in c["rewrites"]),
                key=lambda rc: rc[0]["matches"])
  n = rw["matches"]
  open_page(page, server, f"#t={t}&c={ctx['id']}&r={rw['id']}&s=2")
  wait_graph(page, t, rw["id"], 2)
  xy = "() => Object.fromEntries(window.__viz.graph.ids().map((id) => [id, [window.__viz.graph.node(id).x, " \
       "window.__viz.graph.node(id).y]]))"
  # each more than NEAR (8) steps from every layout laid out before, the server's prefetch's included: it lays out at
  # most PREFETCH (12) steps from a step the page asked for (2 and its neighbours, then each jump's, once stayed on)
  assert n >= 80 and views.PREFETCH + replay.NEAR < 25
  for k in (n, n - 30, n - 55):
    before = page.evaluate(xy)
    page.evaluate("(k) => window.__viz.setStep(k)", k)
    wait_graph(page, t, rw["id"], k)
    assert page.evaluate("() => window.__viz.perf.lastKind") == "jump", k
    assert page.evaluate("() => document.body.dataset.layout") == "jump", k
    after = page.evaluate(xy)
    kept = before.keys() & after.keys()
    assert kept and all(before[i] == after[i] for i in kept), k
    got, want = page.evaluate(JUMP_MODEL, {"fresh": False}), page.evaluate(JUMP_MODEL, {"fresh": True})
    assert not got["ghosts"] and got["added"] + got["changed"], k
    # (`created` null is "unknown": the steps the server computed since, its prefetch's, may tell it to a later load)
    for a, b in zip(got["nodes"], want["nodes"], strict=True):
      if a[8] is None:
        b[8] = None
    assert got == want, k
  # a far step left at once (a slider clicked again): its neighbours are not asked once the page wants another step
  assert page.evaluate(PREFETCH_LEFT, n) == 0
  # the step stayed on: they are
  page.evaluate("() => performance.clearResourceTimings()")
  page.evaluate("() => window.__viz.setStep(40)")
  wait_graph(page, t, rw["id"], 40)
  page.wait_for_function("() => performance.getEntriesByType('resource').some((e) => e.name.includes('/delta?from=40&"
                         "to=41&'))")


# the deltas a far jump's prefetch asks (the page's api.delta calls) when it runs after the page was told to go on to
# another step (StepGraphView._prefetch, JUMP_STAY_MS after the jump is shown)
PREFETCH_LEFT = """async (n) => {
  const {api} = await import("/static/api.js");
  const g = window.__viz.graph;
  await window.__viz.setStep(18);
  const s = g.shown, real = api.delta, calls = [];
  api.delta = (...a) => { calls.push(a); return real(...a); };
  try {
    g.want = {...s, step: 40};
    g._prefetch(s, n);
  } finally {
    g.want = s;
    api.delta = real;
  }
  return calls.length;
}"""


# the step list's rows, and those the page draws (checkVisibility: false where content-visibility skips a row)
STEP_ROWS = """() => {
  const rows = [...document.querySelectorAll('#panel-step .step-row')];
  const sel = document.querySelector('#panel-step .step-row.selected');
  return {rows: rows.length, drawn: rows.filter((r) => r.checkVisibility({contentVisibilityAuto: true})).length,
          selected: sel?.dataset.step ?? null, selectedDrawn: sel ? sel.checkVisibility({contentVisibilityAuto: true})
          : null};
}"""


def test_the_step_list_draws_only_its_rows_in_view(new_page, kserver):
  """The step list's rows (up to 300 around the step) come in blocks that the page skips out of view: a step moved the
  list's highlight and the panel recorded every row again, ~5 ms of an arrow step on `add bufferize` (issue 30)."""
  page = new_page(1400, 500)  # (a short page: Chromium draws what lies within about a viewport of the view too)
  t, rw = open_rewrite(page, kserver, "kernel", step=1, panel="step")
  n = rw["matches"]
  page.wait_for_function(f"() => document.querySelectorAll('#panel-step .step-row').length === {n + 1}")
  for k in (2, 3):
    page.keyboard.press("ArrowRight")
    wait_graph(page, t, rw["id"], k)
  page.wait_for_function("() => document.querySelector('#panel-step .step-row.selected')?.dataset.step === '3'")
  got = page.evaluate(STEP_ROWS)
  assert got["rows"] == n + 1 and got["selectedDrawn"], got
  assert 0 < got["drawn"] <= n + 1 - 25, got  # (a block, static/step.js LIST_BLOCK, or more skipped)
  # scrolled to, the last row is drawn
  page.evaluate(f"() => document.querySelector('#panel-step li[data-step=\"{n}\"]').scrollIntoView()")
  page.wait_for_function(f"() => document.querySelector('#panel-step li[data-step=\"{n}\"]')"
                         ".checkVisibility({contentVisibilityAuto: true})")


# the minimap's state: how often its boxes were drawn, and whether they are the graph's version's
MINIMAP = """() => {
  const g = window.__viz.graph, m = g.minimap;
  return {draws: m.boxDraws, current: m.drawnFor === g.version, shown: !m.canvas.hidden, pending: m.later !== 0};
}"""


def test_steps_in_a_row_redraw_the_minimaps_boxes_once_they_pause(page, kserver):
  """Arrow steps one after another redraw the minimap's boxes (every box of the graph, ~5 ms a step on `add
  bufferize`, issue 30) at most once per REDRAW_MS, the last step's after it; another graph's at once."""
  t, rw = open_rewrite(page, kserver, "kernel", step=1)
  r = page.locator("#graph canvas").bounding_box()
  page.mouse.move(r["x"] + r["width"] / 2, r["y"] + r["height"] / 2)
  page.mouse.wheel(0, -600)  # (zoomed in past the fit: the minimap shows)
  page.locator("#minimap").wait_for(state="visible")
  page.wait_for_function("() => window.__viz.graph.minimap.drawnFor === window.__viz.graph.version")
  # (no pause comes by the clock during the steps, however slow the machine)
  page.evaluate("() => { window.__viz.graph.minimap.redrawMs = 1e9; }")
  before = page.evaluate(MINIMAP)
  for k in range(2, 6):
    page.keyboard.press("ArrowRight")
    wait_graph(page, t, rw["id"], k)
  got = page.evaluate(MINIMAP)
  assert got["shown"] and got["draws"] == before["draws"] and not got["current"] and got["pending"], (before, got)
  page.evaluate("() => { window.__viz.graph.minimap.redrawMs = 0; }")  # the pause: the last step's boxes
  page.wait_for_function("() => window.__viz.graph.minimap.drawnFor === window.__viz.graph.version")
  assert page.evaluate(MINIMAP)["draws"] == before["draws"] + 1
  # a graph (a far jump's, laid out fresh: not a step's delta) draws its boxes at once
  page.evaluate("() => { window.__viz.graph.minimap.redrawMs = 1e9; }")
  page.keyboard.press("r")  # (re-layout: the step's graph, fresh)
  page.wait_for_function("() => document.body.dataset.layout === 'fresh'")
  page.wait_for_function("() => window.__viz.graph.minimap.drawnFor === window.__viz.graph.version")
