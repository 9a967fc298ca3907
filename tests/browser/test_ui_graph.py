"""The graph view itself: pan, zoom and fit, the legend, collapsed constants, relatives highlighting, step keys and
slider, fading ghosts of removed nodes, and a trace recorded from the real compiler."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from support import tracegen
from support.browser import ROOT, Server, graph_ids, ids_with_mark, open_page, shot, state, wait_graph

WIDE = {"width": 2200, "height": 1100}  # zoomed in enough (k >= 0.45) that the view draws labels

# screen rectangles of the drawn node boxes (graph.box in graph units, through the view transform)
SCREEN_BOXES = """() => {
  const g = window.__viz.graph, r = g.canvas.getBoundingClientRect(), {x, y, k} = g.view;
  return Object.fromEntries(g.ids().map((id) => [id, g.box(id)]).filter(([, b]) => b).map(([id, b]) =>
    [id, [r.left + x + b.x0 * k, r.top + y + b.y0 * k, r.left + x + b.x1 * k, r.top + y + b.y1 * k]]));
}"""

# every label text the next frame draws, with its fill style (a spy on the canvas context, removed after)
DRAWN_TEXTS = """() => {
  const g = window.__viz.graph, ctx = g.ctx, texts = [];
  ctx.fillText = function (t, x, y) {
    texts.push({t, x, y, style: ctx.fillStyle, alpha: ctx.globalAlpha, w: ctx.measureText(t).width});
    return CanvasRenderingContext2D.prototype.fillText.call(this, t, x, y);
  };
  try { g.draw(); } finally { delete ctx.fillText; }
  return texts;
}"""

# the color of the canvas pixel at graph point (gx, gy), after drawing the current state now
PIXEL = """([gx, gy]) => {
  const g = window.__viz.graph, {x, y, k} = g.view;
  g.draw();
  const d = g.ctx.getImageData(Math.round((x + gx * k) * g.dpr), Math.round((y + gy * k) * g.dpr), 1, 1).data;
  return [d[0], d[1], d[2]];
}"""

NEXT_FRAME = "() => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)))"


@pytest.fixture(scope="module")
def gserver(tmp_path_factory):
  """A server of its own (the shared one's trace list stays as the other tests expect): the demo trace, long
  constants, and a workload recorded by the real compiler in a separate process (fresh kernel caches)."""
  d = tmp_path_factory.mktemp("graph-traces")
  tracegen.write_demo(d / "demo.vztrace")
  tracegen.write_consts(d / "consts.vztrace")
  tracegen.write_wide(d / "wide.vztrace")
  script = "import sys; from support import tracegen; tracegen.write_compiled(sys.argv[1])"
  p = subprocess.run([sys.executable, "-c", script, str(d / "compiled.vztrace")], cwd=ROOT / "tests",
                     capture_output=True, text=True, timeout=300,
                     env={**os.environ, "PYTHONPATH": str(ROOT), "VIZ": "0",
                          "BEAM_CACHE_DIR": str(tmp_path_factory.mktemp("beam-cache"))})
  assert p.returncode == 0, p.stdout + p.stderr
  srv = Server(d, tmp_path_factory.mktemp("graph-log") / "server.log")
  yield srv
  srv.stop()


def open_rewrite(page, srv, trace_name, ctx_name, rw_name, step=0):
  """Open (trace, context, rewrite) at `step` by deep link; returns (trace id, context, rewrite entry)."""
  t = srv.trace_id(trace_name)
  ctx = next(c for c in srv.api(f"/api/traces/{t}/contexts") if c["name"] == ctx_name)
  rw = next(r for r in ctx["rewrites"] if r["name"] == rw_name)
  open_page(page, srv, f"#t={t}&c={ctx['id']}&r={rw['id']}&s={step}")
  wait_graph(page, t, rw["id"], step)
  return t, ctx, rw


def api_graph(srv, t, r, k):
  return srv.api(f"/api/traces/{t}/rewrites/{r}/graph?step={k}")


def view(page):
  return page.evaluate("() => ({...window.__viz.graph.view})")


def canvas_rect(page):
  return page.locator("#graph canvas").bounding_box()


def assert_all_inside(page):
  """Every drawn node box lies inside the canvas."""
  r = canvas_rect(page)
  boxes = page.evaluate(SCREEN_BOXES)
  assert boxes
  for nid, (x0, y0, x1, y1) in boxes.items():
    assert r["x"] - 0.5 <= x0 and x1 <= r["x"] + r["width"] + 0.5, (nid, x0, x1, r)
    assert r["y"] - 0.5 <= y0 and y1 <= r["y"] + r["height"] + 0.5, (nid, y0, y1, r)
  return boxes


def assert_fitted(page):
  """The view is fitted: all boxes inside the canvas and, unless at the zoom cap, filling one of its sides."""
  boxes = assert_all_inside(page)
  r = canvas_rect(page)
  w = max(b[2] for b in boxes.values()) - min(b[0] for b in boxes.values())
  h = max(b[3] for b in boxes.values()) - min(b[1] for b in boxes.values())
  assert view(page)["k"] == pytest.approx(1.6) or w > 0.8 * r["width"] or h > 0.7 * r["height"], (w, h, r)


def close(a, b, tol=1e-6):
  return all(abs(a[key] - b[key]) <= tol * max(1, abs(a[key])) for key in ("x", "y", "k"))


# ---------------------------------------------------------------- 1. pan, zoom, fit


def test_pan_zoom_and_fit(page, gserver):
  t, _, rw = open_rewrite(page, gserver, "demo.vztrace", "E_32", "simplify")
  v0 = view(page)
  assert_fitted(page)
  before = page.evaluate(SCREEN_BOXES)
  # drag on the background: the view moves by the drag, nothing is selected
  r = canvas_rect(page)
  sx, sy = r["x"] + 6, r["y"] + 6
  assert page.evaluate("([x, y]) => window.__viz.graph.hitTest(x, y)", [6, 6]) is None
  page.mouse.move(sx, sy)
  page.mouse.down()
  page.mouse.move(sx + 60, sy + 25, steps=5)
  page.mouse.move(sx + 120, sy + 50, steps=5)
  page.mouse.up()
  v1 = view(page)
  assert (v1["x"], v1["y"], v1["k"]) == pytest.approx((v0["x"] + 120, v0["y"] + 50, v0["k"]))
  after = page.evaluate(SCREEN_BOXES)
  for nid, b in before.items():
    assert after[nid] == pytest.approx([b[0] + 120, b[1] + 50, b[2] + 120, b[3] + 50])
  assert state(page)["node"] is None and page.locator("#node-card").is_hidden()
  # the wheel zooms about the pointer: the graph point under it stays put
  cx, cy = round(r["x"] + r["width"] * 0.3), round(r["y"] + r["height"] * 0.6)  # events have whole pixels
  page.mouse.move(cx, cy)
  under = ((cx - r["x"] - v1["x"]) / v1["k"], (cy - r["y"] - v1["y"]) / v1["k"])
  page.mouse.wheel(0, -200)
  page.wait_for_function("(k) => window.__viz.graph.view.k > k", arg=v1["k"])
  v2 = view(page)
  assert v2["k"] == pytest.approx(v1["k"] * math.exp(200 * 0.0015))
  assert ((cx - r["x"] - v2["x"]) / v2["k"], (cy - r["y"] - v2["y"]) / v2["k"]) == pytest.approx(under)
  page.mouse.wheel(0, 400)
  page.wait_for_function("(k) => window.__viz.graph.view.k < k", arg=v2["k"])
  v3 = view(page)
  assert v3["k"] == pytest.approx(v1["k"] * math.exp(-200 * 0.0015))
  assert ((cx - r["x"] - v3["x"]) / v3["k"], (cy - r["y"] - v3["y"]) / v3["k"]) == pytest.approx(under)
  # a step does not undo the user's view...
  page.keyboard.press("ArrowRight")
  wait_graph(page, t, rw["id"], 1)
  assert close(view(page), v3)
  # ...f fits it again; so do the Fit button and a double click
  page.keyboard.press("f")
  assert_fitted(page)
  v_fit = view(page)
  assert not close(v_fit, v3)
  page.keyboard.press("ArrowLeft")
  wait_graph(page, t, rw["id"], 0)
  assert close(view(page), v0), "back at step 0 the refitted view is the first one"
  for undo_fit in (lambda: page.click("#fit"), lambda: page.mouse.dblclick(sx, sy)):
    page.mouse.move(cx, cy)
    page.mouse.wheel(0, -300)
    page.wait_for_function("(k) => window.__viz.graph.view.k > k", arg=v0["k"] * 1.1)
    undo_fit()
    page.wait_for_function("(k) => Math.abs(window.__viz.graph.view.k - k) < 1e-9", arg=v0["k"])
    assert close(view(page), v0)
  assert_fitted(page)


def test_a_graph_too_wide_to_read_opens_on_the_change_and_follows_it(page, gserver):
  t, _, rw = open_rewrite(page, gserver, "wide.vztrace", "wide", "simplify", step=1)
  g = api_graph(gserver, t, rw["id"], 1)
  assert len(g["nodes"]) > 1000 and g["width"] > 20 * g["height"]
  for k in (1, 2, 3):
    if k > 1:
      page.keyboard.press("ArrowRight")
      wait_graph(page, t, rw["id"], k)
      g = api_graph(gserver, t, rw["id"], k)
    page.evaluate(NEXT_FRAME)
    # labels are drawn (zoom >= 0.45) and every node the step added or changed is on screen
    assert view(page)["k"] >= 0.45
    r = canvas_rect(page)
    boxes = page.evaluate(SCREEN_BOXES)
    for nid in g["added"] + g["changed"]:
      x0, y0, x1, y1 = boxes[str(nid)]
      assert r["x"] <= x0 and x1 <= r["x"] + r["width"] and r["y"] <= y0 and y1 <= r["y"] + r["height"], (k, nid)
  # f still shows everything, too small to read; a graph that fits legibly opens fitted (see test_pan_zoom_and_fit)
  page.keyboard.press("f")
  page.evaluate(NEXT_FRAME)
  assert view(page)["k"] < 0.2
  assert_fitted(page)
  # a step that changes too much to read whole: the view centers the node the rule returned, legibly
  t, _, rw = open_rewrite(page, gserver, "wide.vztrace", "wide", "all at once", step=1)
  g = api_graph(gserver, t, rw["id"], 1)
  assert len(g["added"]) + len(g["changed"]) > 300
  page.evaluate(NEXT_FRAME)
  assert view(page)["k"] == pytest.approx(0.8)
  r = canvas_rect(page)
  x0, y0, x1, y1 = page.evaluate(SCREEN_BOXES)[str(g["match"]["after"])]
  assert abs((x0 + x1) / 2 - (r["x"] + r["width"] / 2)) < 2 and r["y"] < y0 < y1 < r["y"] + r["height"]


# ---------------------------------------------------------------- 2. legend


def legend(page):
  """{category: count} as the legend shows it, in its order."""
  items = page.eval_on_selector_all("#legend .legend-item", """els => els.map(e => [
    [...e.classList].find(c => c.startsWith('cat-')).slice(4), e.querySelector('.muted').textContent.trim(),
    getComputedStyle(e.querySelector('.swatch')).backgroundColor])""")
  return {c: int(n) for c, n, _ in items}, {c: col for c, _, col in items}


def rgb(css):
  return tuple(int(v) for v in css[css.index("(") + 1:css.index(")")].split(",")[:3])


CATEGORIES = ["const", "buffer", "alu", "load", "store", "range", "reduce", "movement", "sink", "cast", "index",
              "other"]  # the legend's order (static/graph.js)


def category_counts(g):
  counts = {}
  for n in g["nodes"]:
    counts[n["cat"]] = counts.get(n["cat"], 0) + 1
  return {c: counts[c] for c in CATEGORIES if c in counts}


def test_legend_lists_present_categories_in_the_boxes_colors(new_page, gserver):
  page = new_page(**WIDE)
  t, _, rw = open_rewrite(page, gserver, "demo.vztrace", "r_16_4", "simplify")
  g = api_graph(gserver, t, rw["id"], 0)
  want = category_counts(g)
  got, colors = legend(page)
  assert got == want and list(got) == list(want)
  assert len(want) >= 5
  # each category's boxes are filled with its legend color over the background (the view's mix, weight 0.16)
  bg = rgb(page.evaluate("() => getComputedStyle(document.body).backgroundColor"))
  for cat, col in colors.items():
    n = next(n for n in g["nodes"] if n["cat"] == cat)
    inside = (n["x"] - n["w"] / 2 + 5, n["y"])  # between the border and the label
    px = page.evaluate(PIXEL, list(inside))
    fill = tuple(round(c * 0.16 + b * 0.84) for c, b in zip(rgb(col), bg))
    assert all(abs(a - b) <= 3 for a, b in zip(px, fill)), (cat, n["id"], px, fill)
  # stepping (the view applies deltas) keeps the legend's counts those of the graph shown
  for key, k in (("End", rw["matches"]), ("Home", 0), ("ArrowRight", 1)):
    page.keyboard.press(key)
    wait_graph(page, t, rw["id"], k)
    want_k = category_counts(api_graph(gserver, t, rw["id"], k))
    assert legend(page)[0] == want_k, (key, k)
  assert category_counts(api_graph(gserver, t, rw["id"], rw["matches"])) != want, "the steps change the counts"


# ---------------------------------------------------------------- 3. collapsed constants


def check_collapsed(page, srv, t, r, k):
  """Constants are not drawn, their values are in their users' boxes, no two drawn boxes overlap, edges end at
  the drawn boxes and every box fits in the view."""
  g = api_graph(srv, t, r, k)
  nodes = {n["id"]: n for n in g["nodes"]}
  consts = {i for i, n in nodes.items() if n["cat"] == "const"}
  assert consts
  page.evaluate(NEXT_FRAME)
  assert page.evaluate("() => window.__viz.graph.drawn") == len(nodes) - len(consts)
  texts = page.evaluate(DRAWN_TEXTS)
  drawn = [x["t"] for x in texts]
  assert "CONST" not in drawn
  boxes = page.evaluate("() => Object.fromEntries(window.__viz.graph.ids().map(i => [i, window.__viz.graph.box(i)]))")
  boxes = {int(i): b for i, b in boxes.items()}
  assert {i for i, b in boxes.items() if b is None} == consts
  widened = 0
  for i, n in nodes.items():
    cs = [nodes[s]["arg"] for s in n["src"] if s in consts]
    if i in consts or not cs:
      continue
    line = "← " + ", ".join(cs)
    assert line in drawn, (i, line)
    b = boxes[i]
    hit = next(x for x in texts if x["t"] == line and b["x0"] <= x["x"] <= b["x1"] and b["y0"] <= x["y"] <= b["y1"])
    assert hit["w"] <= b["x1"] - b["x0"], "the inlined values fit in the box"
    widened += b["x1"] - b["x0"] > n["w"] + 1
  assert widened
  shown = [(i, b) for i, b in boxes.items() if b is not None]
  for a, (i, p) in enumerate(shown):
    for j, q in shown[a + 1:]:
      apart = p["x1"] + 2 <= q["x0"] or q["x1"] + 2 <= p["x0"] or p["y1"] + 2 <= q["y0"] or q["y1"] + 2 <= p["y0"]
      assert apart, f"boxes #{i} {p} and #{j} {q} overlap"
  ends = page.evaluate("""() => [...window.__viz.graph.edges.values()].filter(e => !e.fromConst)
    .map(e => [e.d.src, e.d.dst, e.pts[0], e.pts[e.pts.length - 1]])""")
  assert len(ends) == sum(1 for e in g["edges"] if e["src"] not in consts)
  for src, dst, p0, p1 in ends:
    for nid, (px, py) in ((src, p0), (dst, p1)):
      b = boxes[nid]
      assert b["x0"] - 1 <= px <= b["x1"] + 1 and b["y0"] - 1 <= py <= b["y1"] + 1, (src, dst, nid, px, py, b)
  return g


def overlaps_in_layout(g, char_w=6.6, pad=16.0, line=13.0):
  """Whether users' boxes widened for their inlined constants overlap, left where the server's layout put them."""
  nodes = {n["id"]: n for n in g["nodes"]}
  rects = []
  for n in g["nodes"]:
    if n["cat"] == "const":
      continue
    cs = [nodes[s]["arg"] for s in n["src"] if nodes[s]["cat"] == "const"]
    w = max(n["w"], len("← " + ", ".join(cs)) * char_w + pad) if cs else n["w"]
    top = n["y"] - n["h"] / 2
    rects.append((n["x"] - w / 2, top, n["x"] + w / 2, top + n["h"] + (line if cs else 0)))
  return any(p[0] < q[2] and q[0] < p[2] and p[1] < q[3] and q[1] < p[3]
             for a, p in enumerate(rects) for q in rects[a + 1:])


def test_collapse_constants_without_overlaps(new_page, gserver):
  page = new_page(**WIDE)
  t, _, rw = open_rewrite(page, gserver, "consts.vztrace", "consts", "simplify")
  g0 = api_graph(gserver, t, rw["id"], 0)
  assert overlaps_in_layout(g0), "the trace has long constants whose users the layout packed side by side"
  layout = {n["id"]: (n["x"], n["y"]) for n in g0["nodes"]}
  page.keyboard.press("c")
  assert page.is_checked("#collapse-consts")
  check_collapsed(page, gserver, t, rw["id"], 0)
  assert_fitted(page)
  shot(page, "graph-collapsed")
  # stepping while collapsed (deltas) keeps the boxes apart
  for k in range(1, rw["matches"] + 1):
    page.keyboard.press("ArrowRight")
    wait_graph(page, t, rw["id"], k)
    check_collapsed(page, gserver, t, rw["id"], k)
  page.keyboard.press("Home")
  wait_graph(page, t, rw["id"], 0)
  # the control turns it off: everything back where the layout put it, constants drawn again
  page.click("#collapse-consts")
  assert not page.evaluate("() => window.__viz.graph.collapse")
  page.evaluate(NEXT_FRAME)
  assert page.evaluate("() => window.__viz.graph.drawn") == len(g0["nodes"])
  got = page.evaluate("() => [...window.__viz.graph.nodes].map(([id, n]) => [id, n.x, n.y])")
  assert {i: (x, y) for i, x, y in got} == layout
  assert "CONST" in [x["t"] for x in page.evaluate(DRAWN_TEXTS)]
  edges = page.evaluate("() => [...window.__viz.graph.edges.values()].map(e => [e.d.src, e.d.dst, e.d.points])")
  assert sorted((s, d, tuple(map(tuple, p))) for s, d, p in edges) == sorted(
    (e["src"], e["dst"], tuple(map(tuple, e["points"]))) for e in g0["edges"])
  # and the key turns it on again
  page.keyboard.press("c")
  assert page.is_checked("#collapse-consts")
  check_collapsed(page, gserver, t, rw["id"], 0)


# ---------------------------------------------------------------- 4. relatives


def closure(start, nxt):
  out, stack = set(), [start]
  while stack:
    for y in nxt.get(stack.pop(), ()):
      if y not in out:
        out.add(y)
        stack.append(y)
  out.discard(start)
  return out


def relatives(g, nid):
  srcs = {n["id"]: [e["src"] for e in g["edges"] if e["dst"] == n["id"]] for n in g["nodes"]}
  users = {n["id"]: [e["dst"] for e in g["edges"] if e["src"] == n["id"]] for n in g["nodes"]}
  anc, desc = closure(nid, srcs), closure(nid, users)
  return {"ancestors": anc, "descendants": desc, "both": anc | desc, "none": set()}


def test_relatives_highlighting(page, gserver):
  t, _, rw = open_rewrite(page, gserver, "demo.vztrace", "E_32", "simplify")
  g = api_graph(gserver, t, rw["id"], 0)
  load = next(n for n in g["nodes"] if n["op"] == "LOAD")
  want = relatives(g, load["id"])
  assert want["ancestors"] and want["descendants"]
  pos = page.evaluate("(id) => window.__viz.graph.screenPos(id)", load["id"])
  page.mouse.click(pos["x"], pos["y"])
  assert state(page)["node"] == load["id"]
  assert ids_with_mark(page, "related") == set()
  for mode in ("ancestors", "descendants", "both", "none"):
    page.keyboard.press("a")
    assert page.input_value("#relatives") == mode
    assert ids_with_mark(page, "related") == want[mode], mode
    active = page.eval_on_selector_all("#node-card [data-rel].active", "els => els.map(e => e.dataset.rel)")
    assert active == [mode]
  # the select sets the mode too; the set follows the graph when a step changes it
  page.select_option("#relatives", "both")
  assert ids_with_mark(page, "related") == want["both"]
  k = next(k for k in range(1, rw["matches"] + 1)
           if relatives(api_graph(gserver, t, rw["id"], k), load["id"])["both"] != want["both"])
  page.evaluate("(k) => window.__viz.setStep(k)", k)
  wait_graph(page, t, rw["id"], k)
  assert state(page)["node"] == load["id"]
  assert ids_with_mark(page, "related") == relatives(api_graph(gserver, t, rw["id"], k), load["id"])["both"]


# ---------------------------------------------------------------- 5. Home / End / slider


def at_step(page, srv, t, rw, k):
  wait_graph(page, t, rw["id"], k)
  n = rw["matches"]
  assert state(page)["step"] == k
  assert page.input_value("#step-slider") == str(k)
  assert page.locator("#step-label").inner_text().startswith(f"step {k}/{n}")
  assert graph_ids(page) == {x["id"] for x in api_graph(srv, t, rw["id"], k)["nodes"]}


def test_home_end_and_slider(page, gserver):
  t, _, rw = open_rewrite(page, gserver, "demo.vztrace", "E_32", "simplify")
  n = rw["matches"]
  assert n >= 4
  assert page.get_attribute("#step-slider", "max") == str(n)
  page.keyboard.press("End")
  at_step(page, gserver, t, rw, n)
  page.keyboard.press("Home")
  at_step(page, gserver, t, rw, 0)
  page.locator("#step-slider").fill("2")
  at_step(page, gserver, t, rw, 2)
  # arrow keys on the focused slider move one step (not the slider's own step plus the page's)
  page.focus("#step-slider")
  page.keyboard.press("ArrowRight")
  at_step(page, gserver, t, rw, 3)
  page.evaluate(NEXT_FRAME)
  assert state(page)["step"] == 3
  page.keyboard.press("ArrowLeft")
  at_step(page, gserver, t, rw, 2)
  page.keyboard.press("End")
  at_step(page, gserver, t, rw, n)
  page.keyboard.press("ArrowRight")  # past the end: stays
  page.evaluate(NEXT_FRAME)
  at_step(page, gserver, t, rw, n)


# ---------------------------------------------------------------- 6. ghosts and the step panel


def ghost_ids(page):
  return set(page.evaluate("() => (window.__viz.graph.ghosts?.nodes || []).map(n => n.d.id)"))


def test_removed_nodes_fade_and_go(page, gserver):
  t, _, rw = open_rewrite(page, gserver, "demo.vztrace", "r_16_4", "simplify")
  g0 = api_graph(gserver, t, rw["id"], 0)
  assert not ghost_ids(page)
  page.keyboard.press("ArrowRight")
  wait_graph(page, t, rw["id"], 1)
  g1 = api_graph(gserver, t, rw["id"], 1)
  assert page.evaluate("() => window.__viz.perf.lastKind") == "delta"
  gone = {n["id"] for n in g0["nodes"]} - {n["id"] for n in g1["nodes"]}
  assert gone and ghost_ids(page) == gone == set(g1["removed"])
  # the ghosts' labels are drawn in the removed color, but for those lying under the node rebuilt in their place
  # (same place, box and label: static/graphghosts.js), which the new box covers
  del_color = page.evaluate("() => window.__viz.graph.colors.del").lower()
  old = {n["id"]: n for n in g0["nodes"]}
  look = lambda n: (n["x"], n["y"], n["w"], n["h"], n["label"])  # noqa: E731
  under = {i for i in gone if look(old[i]) in {look(n) for n in g1["nodes"]}}
  assert under and gone - under, (under, gone)  # (the users rebuilt above the match; the node it replaced)
  red = {x["t"] for x in page.evaluate(DRAWN_TEXTS) if x["style"].lower() == del_color}
  assert red == {ln for i in gone - under for ln in old[i]["label"].split("\n")}
  # they fade: a ghost box's pixels go from nearly the ghost fill to nearly the background; a ghost not covered by
  # a box of the new graph is sampled
  boxes = {n["id"]: n for n in g1["nodes"]}

  def covered(x, y):
    return any(abs(x - b["x"]) <= b["w"] / 2 + 2 and abs(y - b["y"]) <= b["h"] / 2 + 2 for b in boxes.values())
  gh = next(old[i] for i in gone if not covered(old[i]["x"] - old[i]["w"] / 2 + 5, old[i]["y"]))
  at = [gh["x"] - gh["w"] / 2 + 5, gh["y"]]

  def pixel_at_age(ms):
    page.evaluate("(ms) => { window.__viz.graph.ghosts.t0 = performance.now() - ms; }", ms)
    return page.evaluate(PIXEL, at)
  bg = rgb(page.evaluate("() => getComputedStyle(document.body).backgroundColor"))
  ghost_fill = (0x2a, 0x12, 0x16)
  for ms, alpha in ((0, 0.9), (600, 0.9 + (0.22 - 0.9) * 0.5), (5000, 0.22)):
    want = tuple(round(f * alpha + b * (1 - alpha)) for f, b in zip(ghost_fill, bg))
    got = pixel_at_age(ms)
    assert all(abs(a - b) <= 3 for a, b in zip(got, want)), (ms, got, want)
  # left alone, the fade ends and the view stops redrawing
  page.evaluate("() => { window.__viz.graph.ghosts.t0 = performance.now(); window.__viz.graph.redraw(); }")
  # (idle: past the fade, no frame asked and no fade timer pending, so nothing can draw again without an event)
  page.wait_for_function("() => { const g = window.__viz.graph; return performance.now() - g.ghosts.t0 > 1600"
                         " && !g._raf && !g._fadeTimer; }", polling=100)
  frames = page.evaluate("() => window.__viz.graph.frames")
  page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
  assert page.evaluate("() => window.__viz.graph.frames") == frames
  # the step panel and the toolbar show how long the match took
  step = gserver.api(f"/api/traces/{t}/rewrites/{rw['id']}")["steps"][0]
  took = page.evaluate("async (ns) => (await import('/static/dom.js')).fmtNs(ns)", step["dt"])
  want = f"Step 1 / {rw['matches']} match took {took}"
  page.wait_for_function("(want) => (document.querySelector('#panel-step .step-title') || {}).innerText === want",
                         arg=want)
  assert page.locator("#step-label").inner_text() == f"step 1/{rw['matches']} · {took}"
  # the next step's removed nodes replace them
  page.keyboard.press("ArrowRight")
  wait_graph(page, t, rw["id"], 2)
  g2 = api_graph(gserver, t, rw["id"], 2)
  assert ghost_ids(page) == set(g2["removed"]) != gone
  page.keyboard.press("Home")
  wait_graph(page, t, rw["id"], 0)
  # the step panel renders after the graph (its own request): wait for it rather than read it at once
  page.wait_for_function("(want) => (document.querySelector('#panel-step .step-title') || {}).innerText"
                         "?.startsWith(want)", arg=f"Step 0 / {rw['matches']}")


# ---------------------------------------------------------------- 7. a trace of the real compiler


def test_real_compiler_trace(new_page, gserver):
  page = new_page(**WIDE)
  t = gserver.trace_id("compiled.vztrace")
  open_page(page, gserver, f"#t={t}")
  contexts = gserver.api(f"/api/traces/{t}/contexts")
  kernel = next(c for c in contexts if c["kind"] == "kernel" and c["rewrites"]
                and gserver.api(f"/api/traces/{t}/contexts/{c['id']}/kernel")["opts"])
  page.click(f"#contexts li[data-ctx='{kernel['id']}']")
  page.wait_for_function("(c) => window.__viz.state.ctx === c", arg=kernel["id"])
  longest = max(kernel["rewrites"], key=lambda r: r["matches"])
  assert longest["matches"] >= 3
  page.click(f"#rewrites li[data-rw='{longest['id']}']")
  for k in range(4):
    if k:
      page.keyboard.press("ArrowRight")
    wait_graph(page, t, longest["id"], k)
    g = api_graph(gserver, t, longest["id"], k)
    assert graph_ids(page) == {n["id"] for n in g["nodes"]}
    page.evaluate(NEXT_FRAME)
    assert page.evaluate("() => window.__viz.graph.drawn") == len(g["nodes"])
    assert ids_with_mark(page, "added") == set(g["added"])
    assert ids_with_mark(page, "changed") == set(g["changed"])
  page.wait_for_function("(want) => (document.querySelector('#panel-step .step-title') || {}).innerText"
                         "?.startsWith(want)", arg=f"Step 3 / {longest['matches']}")
  # the kernel panel lists the opts the optimizer applied
  page.keyboard.press("3")
  want = gserver.api(f"/api/traces/{t}/contexts/{kernel['id']}/kernel")["opts"]
  rows = page.locator("#panel-kernel .opts li")
  rows.first.wait_for()
  assert rows.count() == len(want)
  for i, o in enumerate(want):
    assert rows.nth(i).locator(".opname").inner_text().startswith(f"{o['op']}({o['axis']}")
  shot(page, "graph-real-compiler")


def test_node_card_links_a_node_to_the_pass_that_made_it(new_page, gserver):
  page = new_page(**WIDE)
  t = gserver.trace_id("compiled.vztrace")
  kernel = next(c for c in gserver.api(f"/api/traces/{t}/contexts") if c["kind"] == "kernel" and c["rewrites"])
  # a node of a later pass's input graph that an earlier pass of the kernel made
  found = None
  for rw in [r for r in kernel["rewrites"] if r["matches"]][1:]:
    for n in api_graph(gserver, t, rw["id"], 0)["nodes"]:
      o = gserver.api(f"/api/traces/{t}/nodes/{n['id']}/origin?before={rw['id']}")
      if o["rewrite"] is not None:
        found = (rw, n, o)
        break
    if found:
      break
  assert found, "no node of the compile was made by an earlier pass"
  rw, n, o = found
  open_page(page, gserver, f"#t={t}&c={kernel['id']}&r={rw['id']}&s=0&n={n['id']}")
  link = page.locator("#node-card a.origin")
  link.wait_for()
  assert link.inner_text() == f"{o['name']} step {o['step']}"
  link.click()
  page.wait_for_function("(o) => window.__viz.state.rw === o.rw && window.__viz.state.step === o.step"
                         " && window.__viz.state.node === o.node", arg={"rw": o["rewrite"], "step": o["step"],
                                                                     "node": n["id"]})
  wait_graph(page, t, o["rewrite"], o["step"])
  # there it is a node the step added or changed, and its card names the rule that made it
  marks = ids_with_mark(page, "added") | ids_with_mark(page, "changed")
  assert n["id"] in marks
  page.wait_for_function("(r) => (document.querySelector('#node-card') || {}).innerText?.includes(r)",
                         arg=o["rule"] or f"step {o['step']}")
