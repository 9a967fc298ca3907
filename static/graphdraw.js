// The graph view's canvas passes (static/graph.js paints each frame with `paint`), back to front: the fading ghosts
// of the nodes the last step removed, the edges, the selection's edges, the boxes by category with their labels, then
// the rings (hits, added, changed, related, selected) and a cut graph's stubs; and the colors they use.
import {boxH, boxW, clippedPath, FONT_PX, lineHeight} from "./graphgeom.js";

export const CATEGORIES = ["const", "buffer", "alu", "load", "store", "range", "reduce", "movement", "sink", "cast",
  "index", "other"];

export const TEXT_MIN_SCALE = 0.45;  // below this zoom labels are unreadable: skip drawing them
const FADE_MS = 1200;
const FAR_K = 0.15;      // zoomed out below this, edges are straight segments in one stroke
const STUB_PX = 14;      // a cut graph's stub: the drawn length of an edge to a node not shown
const GHOST_FROM = 0.9, GHOST_TO = 0.22;

/** The colors of the page's theme (CSS variables) the passes draw with. */
export function readColors() {
  const css = getComputedStyle(document.documentElement);
  const v = (name, dflt) => css.getPropertyValue(name).trim() || dflt;
  const colors = {bg: v("--bg", "#0d1117"), fg: v("--fg", "#d5dde7"), edge: "#4a5668",
    accent: v("--accent", "#58a6ff"),
    add: v("--add", "#3fb950"), chg: v("--chg", "#d29922"), del: v("--del", "#f85149"), hit: "#6b5412",
    consts: "#c9a2ff", stub: v("--fg-dim", "#8b949e"), cat: {}, fill: {}};
  for (const c of CATEGORIES) {
    const col = v(`--c-${c}`, "#768390");
    colors.cat[c] = col;
    colors.fill[c] = mix(col, colors.bg, 0.16);
  }
  return colors;
}

/** Draw graph view g (a GraphView) on its canvas now; sets g.drawn and returns the ms of ghost fading left. */
export function paint(g) {
  const f = begin(g);
  const fadeLeft = drawGhosts(g, f);
  drawEdges(g, f);
  drawSelectedEdges(g, f);
  drawNodes(g, f);
  drawMarks(g, f);
  return fadeLeft;
}

/** Clear the canvas, set the view's transform; what the passes share: the zoom, the visible region and tests. */
function begin(g) {
  const {ctx, dpr, colors, collapse} = g;
  const {x, y, k} = g.view;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = colors.bg;
  ctx.fillRect(0, 0, g.cw, g.ch);
  ctx.setTransform(dpr * k, 0, 0, dpr * k, dpr * x, dpr * y);
  // visible region in graph coordinates, with a margin for boxes straddling the edge
  const vx0 = -x / k - 200, vy0 = -y / k - 60, vx1 = (g.cw - x) / k + 200, vy1 = (g.ch - y) / k + 60;
  const near = (n) => n.x >= vx0 && n.x <= vx1 && n.y >= vy0 && n.y <= vy1;
  // boxes widened by inlined constants may reach further than the margin
  const visible = !collapse ? near : (n) => n.y >= vy0 && n.y <= vy1
    && Math.abs(n.x - (vx0 + vx1) / 2) <= (vx1 - vx0) / 2 + Math.max(0, boxW(n, true) / 2 - 200);
  return {
    ctx, colors, k, vx0, vy0, vx1, vy1, visible,
    focus: focusOf(g),
    hidden: (n) => (collapse && n.d.cat === "const") || g.fold.hidden.has(n.d.id),
    bw: (n) => boxW(n, collapse),
    bh: (n) => boxH(n, collapse),
    hair: 1 / (k * dpr),  // 1 device pixel: Skia strokes hairlines on a much faster path than wider lines
    rounded: k * 20 >= 8,  // corners too small to see are not worth their cost
  };
}

/** The nodes drawn in full while others are dimmed (the selection's relatives, or the search hits), or null. */
function focusOf(g) {
  if (g.rel) return new Set(g.rel).add(g.selected);
  if (g.query) {
    const f = new Set(g.hits);
    if (g.selected !== null) f.add(g.selected);
    return f;
  }
  return null;
}

/** Ghosts of the last step's removed nodes, fading; returns the ms of fading left. */
function drawGhosts(g, f) {
  const {ctx, colors, k, visible, hidden, bw, bh} = f;
  // (the ghosts lying under the rebuilt nodes that replaced them are not drawn: static/graphghosts.js)
  if (!g.ghosts || !(g.ghosts.drawnNodes.length || g.ghosts.drawnEdges.length)) return 0;
  const age = (performance.now() - g.ghosts.t0) / FADE_MS;
  ctx.globalAlpha = GHOST_FROM + (GHOST_TO - GHOST_FROM) * Math.min(1, age);
  // dash lengths in screen pixels: in graph units a zoomed-out edge would be thousands of dashes
  const s = 1 / Math.min(k, 1);
  ctx.strokeStyle = colors.del;
  drawGhostEdges(g, f, s);
  ctx.setLineDash([4 * s, 3 * s]);  // (the boxes' outlines are dashed at every zoom)
  ctx.lineWidth = 1.2 * s;
  ctx.fillStyle = "#2a1216";
  const p = new Path2D();
  const shown = g.ghosts.drawnNodes.filter((n) => visible(n) && !hidden(n));
  for (const n of shown) p.roundRect(n.x - bw(n) / 2, n.y - n.h / 2, bw(n), bh(n), 4);
  ctx.fill(p);
  ctx.stroke(p);
  ctx.setLineDash([]);
  if (k >= TEXT_MIN_SCALE) {
    ctx.fillStyle = colors.del;
    drawLabels(g, shown);
  }
  ctx.globalAlpha = 1;
  return Math.max(0, 1 - age) * FADE_MS;
}

/** The ghosts' edges (the in-edges of the removed nodes), dashed (s: graph units a screen pixel) where they are seen,
 * as hairlines when far out. */
function drawGhostEdges(g, f, s) {
  const ctx = f.ctx;
  if (f.k < FAR_K) {
    // far out, as the edges: straight hairlines in one stroke (dashed, a stroke an edge, they took 0.1-0.3 s a frame)
    ctx.lineWidth = f.hair;
    const lines = new Path2D();
    for (const e of g.ghosts.drawnEdges) {
      if (g.collapse && e.fromConst) continue;
      lines.moveTo(e.pts[0][0], e.pts[0][1]);
      for (let i = 1; i < e.pts.length; i++) lines.lineTo(e.pts[i][0], e.pts[i][1]);
    }
    ctx.stroke(lines);
  } else {
    // only what the view sees of them: a step of a big rewrite removes thousands of edges (each rebuilt node's old
    // in-edges, many tens of thousands of px long), and dashed whole they took 0.3-3 s a frame (issue 30); a stroke
    // an edge (one dashed stroke of them all was slower)
    ctx.setLineDash([4 * s, 3 * s]);
    ctx.lineWidth = 1.2 * s;
    for (const e of g.ghosts.drawnEdges) {
      const [x0, y0, x1, y1] = e.box;
      if (x1 < f.vx0 || x0 > f.vx1 || y1 < f.vy0 || y0 > f.vy1 || (g.collapse && e.fromConst)) continue;
      const inside = x0 >= f.vx0 && x1 <= f.vx1 && y0 >= f.vy0 && y1 <= f.vy1;  // (its curve made once, kept)
      ctx.stroke(inside ? e.path : clippedPath(e.pts, f.vx0, f.vy0, f.vx1, f.vy1));
    }
  }
}

/** Edges in one batch (only the visible ones when zoomed in), dimmed while some nodes are in focus. */
function drawEdges(g, {ctx, colors, k, vx0, vy0, vx1, vy1, focus, hair}) {
  ctx.globalAlpha = focus ? 0.18 : 1;
  ctx.strokeStyle = colors.edge;
  ctx.fillStyle = colors.edge;
  ctx.lineWidth = hair;
  if (k < FAR_K) {
    // far out: straight segments, no arrow heads (they would be a fraction of a pixel)
    const batch = edgeBatch(g);
    ctx.stroke(g.collapse ? batch.flatNoConst : batch.flat);
  } else {
    const lines = new Path2D(), arrows = new Path2D();
    for (const e of drawnEdges(g)) {
      const [x0, y0, x1, y1] = e.box;
      if (x1 < vx0 || x0 > vx1 || y1 < vy0 || y0 > vy1 || (g.collapse && e.fromConst)) continue;
      // an edge inside the view whole: its curve, made once; else only what the view sees of it (a long edge of a big
      // rewrite crosses ~900 layers: stroked whole, the edges across the view were most of a step's raster, issue 30)
      if (x0 >= vx0 && x1 <= vx1 && y0 >= vy0 && y1 <= vy1) lines.addPath(e.path);
      else clippedPath(e.pts, vx0, vy0, vx1, vy1, lines);
      arrows.addPath(e.arrow);
    }
    ctx.stroke(lines);
    ctx.fill(arrows);
  }
  ctx.globalAlpha = 1;
}

/** All edges as straight segments in two Path2Ds (with and without the constants' edges), kept in g.edgeBatch until
 * the edges change. */
function edgeBatch(g) {
  if (!g.edgeBatch) {
    const b = {flat: new Path2D(), flatNoConst: new Path2D()};
    for (const e of drawnEdges(g)) {
      for (const p of e.fromConst ? [b.flat] : [b.flat, b.flatNoConst]) {
        p.moveTo(e.pts[0][0], e.pts[0][1]);
        for (let i = 1; i < e.pts.length; i++) p.lineTo(e.pts[i][0], e.pts[i][1]);
      }
    }
    g.edgeBatch = b;
  }
  return g.edgeBatch;
}

/** The edges drawn: those not into or out of a node a folded group hides, and the group boxes' redirected ones
 * (listed once per fold: g._refold makes a new one whenever the graph changed). */
function drawnEdges(g) {
  const fold = g.fold, hidden = fold.hidden;
  if (!hidden.size) return g.edges.values();
  if (!fold.drawn) {
    fold.drawn = [];
    for (const e of g.edges.values()) if (!hidden.has(e.d.src) && !hidden.has(e.d.dst)) fold.drawn.push(e);
    for (const e of fold.edges) fold.drawn.push(e);
  }
  return fold.drawn;
}

/** A folded group's box: a second outline behind it (a stack) and the count of the nodes it stands for (a call-site
 * group's: and the line of the user's program). */
function drawGroups(g, {ctx, colors, k, hair, visible, bw, bh}) {
  if (!g.fold.groups.size) return;
  const stack = new Path2D(), d = 4;
  const labels = [];
  for (const [rep, grp] of g.fold.groups) {
    const n = g.nodes.get(rep);
    if (!n || !visible(n)) continue;
    stack.rect(n.x - bw(n) / 2 + d, n.y - n.h / 2 - d, bw(n), bh(n));
    labels.push([n, grp.members.size, grp.site]);
  }
  ctx.strokeStyle = colors.cat.index;
  ctx.lineWidth = Math.max(hair, 1.2);
  ctx.stroke(stack);
  if (k < TEXT_MIN_SCALE) return;
  ctx.fillStyle = colors.cat.index;
  ctx.font = `${FONT_PX}px ${getMonoFont()}`;
  ctx.textAlign = "left";
  ctx.textBaseline = "bottom";
  for (const [n, size, site] of labels) {
    ctx.fillText(site ? `+${size - 1} ${site}` : `+${size - 1}`, n.x + bw(n) / 2 + d + 2, n.y - n.h / 2);
  }
}

/** The selected node's edges (or those among its highlighted relatives) on top of the others. */
function drawSelectedEdges(g, {ctx, colors, k}) {
  if (g.selected === null) return;
  const on = g.rel ? new Set(g.rel).add(g.selected) : null;
  const hl = new Path2D(), ha = new Path2D();
  for (const e of drawnEdges(g)) {
    const yes = on ? on.has(e.d.src) && on.has(e.d.dst) : e.d.src === g.selected || e.d.dst === g.selected;
    if (yes && !(g.collapse && e.fromConst)) { hl.addPath(e.path); ha.addPath(e.arrow); }
  }
  ctx.strokeStyle = colors.accent;
  ctx.fillStyle = colors.accent;
  ctx.lineWidth = 2 / k;
  ctx.stroke(hl);
  ctx.fill(ha);
}

/** Nodes, one path per category (few state changes), dimmed ones first; counts the drawn ones in g.drawn. */
function drawNodes(g, f) {
  const dim = [], lit = [];
  let drawn = 0;
  for (const n of g.nodes.values()) {
    if (f.hidden(n) || !f.visible(n)) continue;
    drawn++;
    (f.focus && !f.focus.has(n.d.id) ? dim : lit).push(n);
  }
  g.drawn = drawn;
  f.shown = lit.length ? (dim.length ? [...dim, ...lit] : lit) : dim;  // (drawMarks looks among them)
  drawGroups(g, f);
  if (dim.length) drawBoxes(g, f, dim, 0.25);
  if (lit.length) drawBoxes(g, f, lit, 1);
  f.ctx.globalAlpha = 1;
}

/** One group of nodes at one opacity: boxes, search hits' fill (opaque group only), labels. */
function drawBoxes(g, {ctx, colors, k, hair, rounded, bw, bh}, group, alpha) {
  ctx.globalAlpha = alpha;
  const byCat = new Map();
  for (const n of group) {
    const c = colors.cat[n.d.cat] ? n.d.cat : "other";
    if (!byCat.has(c)) byCat.set(c, new Path2D());
    const w = bw(n), ht = bh(n);
    if (rounded) byCat.get(c).roundRect(n.x - w / 2, n.y - n.h / 2, w, ht, 4);
    else byCat.get(c).rect(n.x - w / 2, n.y - n.h / 2, w, ht);
  }
  ctx.lineWidth = rounded ? Math.max(hair, 1.2) : hair;
  const tiny = k * 20 < 4;  // boxes of a few pixels: a solid fill in the category color reads best
  for (const [c, p] of byCat) {
    ctx.fillStyle = tiny ? colors.cat[c] : colors.fill[c];
    ctx.fill(p);
    if (!tiny) { ctx.strokeStyle = colors.cat[c]; ctx.stroke(p); }
  }
  if (alpha === 1 && g.hits.length) {  // search hits: a fill under the labels
    ctx.fillStyle = colors.hit;
    const p = new Path2D();
    for (const n of group) {
      if (!g.hitSet.has(n.d.id)) continue;
      p.roundRect(n.x - bw(n) / 2, n.y - n.h / 2, bw(n), bh(n), 4);
    }
    ctx.fill(p);
  }
  if (k >= TEXT_MIN_SCALE) {
    ctx.fillStyle = colors.fg;
    drawLabels(g, group);
  }
}

/** The labels of node entries `nodes` in the current fill color, inlined constants (when collapsed) in theirs. */
function drawLabels(g, nodes) {
  const ctx = g.ctx, lh = lineHeight();
  ctx.font = `${FONT_PX}px ${getMonoFont()}`;
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  const fg = ctx.fillStyle;
  for (const n of nodes) {
    const y0 = n.y - ((n.lines.length - 1) * lh) / 2;
    for (let i = 0; i < n.lines.length; i++) ctx.fillText(n.lines[i], n.x, y0 + i * lh);
    if (g.collapse && n.consts) {
      ctx.fillStyle = g.colors.consts;
      ctx.fillText(n.consts, n.x, y0 + n.lines.length * lh);
      ctx.fillStyle = fg;
    }
  }
}

/** Rings on top: search hits, added, changed, related, selected. */
function drawMarks(g, f) {
  const {ctx, colors, k, visible, hidden, bw, bh} = f;
  const ring = (ids, color, width, dash) => {
    const p = new Path2D(), solid = new Path2D();
    let any = false, anySolid = false;
    // a ring around a box narrower than the ring's line has no hole: it is its outline grown by half the line, filled
    // (a fill is a fraction of a stroke's cost: zoomed out on a step of a big rewrite, ~2,400 rings of changed nodes a
    // few pixels each were most of a frame's raster, issue 30); dashed, only when it is shorter than the first dash
    const line = width / Math.min(k, 1), on = dash ? dash[0] / Math.min(k, 1) : Infinity, half = line / 2;
    const add = (n) => {
      const x = n.x - bw(n) / 2 - 1, y = n.y - n.h / 2 - 1, w = bw(n) + 2, ht = bh(n) + 2;
      if (Math.min(w, ht) <= line && 2 * (w + ht) <= on) {
        solid.roundRect(x - half, y - half, w + line, ht + line, Math.min(5, w / 2, ht / 2) + half);
        anySolid = true;
      } else {
        p.roundRect(x, y, w, ht, 5);
        any = true;
      }
    };
    if (ids instanceof Set && ids.size > f.shown.length) {
      // a step of a big rewrite marks ~2,000 rebuilt nodes changed, a few dozen of them in view: look among those
      for (const n of f.shown) if (ids.has(n.d.id)) add(n);
    } else {
      for (const id of ids) {
        const n = g.nodes.get(id);
        if (n && !hidden(n) && visible(n)) add(n);
      }
    }
    if (anySolid) {
      ctx.fillStyle = color;
      ctx.fill(solid);
    }
    if (!any) return;
    ctx.setLineDash((dash || []).map((x) => x / Math.min(k, 1)));
    ctx.strokeStyle = color;
    ctx.lineWidth = line;
    ctx.stroke(p);
    ctx.setLineDash([]);
  };
  if (g.hits.length) ring(g.hits, "#f2cc60", 1.5);
  ring(g.marked.added, colors.add, 3);
  ring(g.marked.changed, colors.chg, 3, [6, 3]);
  if (g.rel) ring(g.rel, colors.accent, 2);
  if (g.selected !== null) ring([g.selected], "#ffffff", 3);
  if (g.cut) drawStubs(g, f);
}

/** A cut graph's edges to nodes not shown: a dashed stub above a box per hidden source (sources are drawn above
 * their users), below it per hidden user, with the count when zoomed in enough to read it. */
function drawStubs(g, {ctx, colors, k, visible, hidden, bh}) {
  const p = new Path2D(), texts = [];
  const len = STUB_PX / Math.min(k, 1);
  for (const [id, [srcs, users]] of Object.entries(g.cut.stubs || {})) {
    const n = g.nodes.get(Number(id));
    if (!n || hidden(n) || !visible(n)) continue;
    const top = n.y - n.h / 2, bottom = top + bh(n);
    if (srcs) { p.moveTo(n.x, top); p.lineTo(n.x, top - len); texts.push([`+${srcs}`, n.x + 3, top - len / 2]); }
    if (users) {
      p.moveTo(n.x, bottom); p.lineTo(n.x, bottom + len);
      texts.push([`+${users}`, n.x + 3, bottom + len / 2]);
    }
  }
  ctx.setLineDash([3 / Math.min(k, 1), 3 / Math.min(k, 1)]);
  ctx.strokeStyle = colors.stub;
  ctx.lineWidth = 1.5 / Math.min(k, 1);
  ctx.stroke(p);
  ctx.setLineDash([]);
  if (k < TEXT_MIN_SCALE) return;
  ctx.fillStyle = colors.stub;
  ctx.font = `${FONT_PX - 2}px ${getMonoFont()}`;
  ctx.textAlign = "left";
  ctx.textBaseline = "middle";
  for (const [t, x, y] of texts) ctx.fillText(t, x, y);
}

let monoFont = null;

function getMonoFont() {
  if (monoFont === null) {
    monoFont = getComputedStyle(document.documentElement).getPropertyValue("--mono").trim() || "monospace";
  }
  return monoFont;
}

/** `a` mixed into `b` with weight w (hex colors). */
function mix(a, b, w) {
  const p = (c) => [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
  if (!/^#[0-9a-f]{6}$/i.test(a) || !/^#[0-9a-f]{6}$/i.test(b)) return b;
  const [ca, cb] = [p(a), p(b)];
  return `rgb(${ca.map((v, i) => Math.round(v * w + cb[i] * (1 - w))).join(",")})`;
}
