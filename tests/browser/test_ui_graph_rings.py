"""The rings a step draws over its changed boxes, zoomed far out (issue 30: fitted, a step of a big rewrite marks
~2,400 rebuilt nodes changed, and their dashed rings, a few pixels each, were most of the frame's raster): a ring
around a box narrower than the ring's line is its box grown by half the line, filled, not stroked dashed (whose
outline Skia left with a partly uncovered middle); zoomed in, rings are stroked (dashed for changed nodes) as before."""
from __future__ import annotations

from support.browser import open_page, wait_graph

# a grid of n boxes, all marked changed, drawn at zoom k; the calls the rings made (strokes with a dash, and the fills
# and strokes in the changed color), the frame's pixels in the changed color and the boxes whose center pixel is it
RINGS = """([n, k]) => {
  const g = window.__viz.graph, ctx = g.ctx, calls = {dashed: 0, chgFills: 0, chgStrokes: 0};
  const nodes = [];
  for (let i = 0; i < n; i++) {
    nodes.push({id: 1000 + i, op: "ADD", label: "ADD", cat: "alu", src: [], x: 200 + (i % 20) * 400,
                y: 100 + Math.floor(i / 20) * 300, w: 60, h: 24});
  }
  g.autoFit = false;
  g.setData({nodes, edges: [], width: 8400, height: 6200, changed: nodes.map((d) => d.id)});
  g.view = {x: 10, y: 10, k};
  const chg = g.colors.chg;
  ctx.stroke = function (...a) {
    if (ctx.getLineDash().length) calls.dashed++;
    if (ctx.strokeStyle === chg) calls.chgStrokes++;
    return CanvasRenderingContext2D.prototype.stroke.apply(this, a);
  };
  ctx.fill = function (...a) {
    if (ctx.fillStyle === chg) calls.chgFills++;
    return CanvasRenderingContext2D.prototype.fill.apply(this, a);
  };
  try { g.draw(); } finally { delete ctx.stroke; delete ctx.fill; }
  const px = (c) => c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  const hex = (i) => [1, 3, 5].map((j) => parseInt(chg.slice(j, j + 2), 16))[i];
  const count = (d) => { let m = 0; for (let i = 0; i < d.length; i += 4) {
    if (Math.abs(d[i] - hex(0)) < 8 && Math.abs(d[i + 1] - hex(1)) < 8 && Math.abs(d[i + 2] - hex(2)) < 8) m++;
  } return m; };
  calls.colored = count(px(g.canvas));
  // each box's center, under its ring
  const d = px(g.canvas);
  calls.centers = nodes.filter((n) => {
    const i = (Math.round((10 + n.x * k) * g.dpr) + Math.round((10 + n.y * k) * g.dpr) * g.canvas.width) * 4;
    return [0, 1, 2].every((j) => Math.abs(d[i + j] - hex(j)) < 8);
  }).length;
  return calls;
}"""


def _open(page, server):
  t = server.trace_id("demo")
  ctx = next(c for c in server.api(f"/api/traces/{t}/contexts") if c["rewrites"])
  rw = ctx["rewrites"][0]["id"]
  open_page(page, server, f"#t={t}&c={ctx['id']}&r={rw}&s=0")
  wait_graph(page, t, rw, 0)


def test_far_out_a_changed_ring_is_a_fill_covering_what_its_stroke_did(page, server):
  _open(page, server)
  got = page.evaluate(RINGS, [400, 0.01])
  assert got["dashed"] == 0 and got["chgStrokes"] == 0 and got["chgFills"] == 1
  # each ring a blob of a few px (the box grown by half a 3 px line) over its box
  assert got["colored"] >= 400 * 4 and got["centers"] == 400


def test_zoomed_in_changed_rings_are_stroked_dashed(page, server):
  _open(page, server)
  got = page.evaluate(RINGS, [40, 0.8])
  assert got["dashed"] >= 1 and got["chgStrokes"] == 1 and got["chgFills"] == 0
