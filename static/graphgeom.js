// The graph view's geometry (static/graph.js keeps the model, static/graphdraw.js paints it): the server's label
// metrics, the model entries of nodes and edges, the boxes they are drawn as (wider and taller with constants
// inlined), edge routes ended at those boxes, and the respacing that keeps inlined boxes apart. No document access.

// the label metrics the server sizes boxes by (GET /api/metrics, also in /api/boot): line height, width of one
// character at FONT_PX, a box's padding, the cut of an inlined constant's text, and the layout's NODE_GAP (the gap
// collapsed boxes keep unless they had less); set by the page before the first graph is drawn
let LINE_H = 0, CHAR_W = 0, PAD_W = 0, MAX_ARG = 0, CLEAR = 0;
export const FONT_PX = 11;     // the font the server's char_w was measured at
const BIN = 4;           // respacing: rows of this height in graph units
// an edge's key in a view's edge map: its end and its place among that node's sources, a number (a node's sources
// never change under its id, so (dst, index) names one edge; a step re-keys ~4,000 rebuilt in-edges, and numbers
// made no strings: issue 30). Exact while it is a safe integer (a replay's fresh ids start at 2**40); else, or an
// index past INDEX_SPAN, a string, which no number equals.
const INDEX_SPAN = 8;
export function edgeKey(src, dst, index) {
  const k = dst * INDEX_SPAN + index;
  return index >= 0 && index < INDEX_SPAN && Number.isSafeInteger(k) ? k : `${dst}>${index}`;
}

/** Take the server's label metrics (the /api/metrics answer); a GraphView draws only once they are set. */
export function setLabelMetrics(m) {
  const num = (k) => {
    const v = m && m[k];
    if (typeof v !== "number" || !(v > 0)) throw new Error(`label metrics: ${k} is not a positive number`);
    return v;
  };
  [LINE_H, CHAR_W, PAD_W, MAX_ARG, CLEAR] = ["line_h", "char_w", "pad_w", "max_arg_chars", "node_gap"].map(num);
}

/** The label metrics in use (for tests: they are the server's). */
export const labelMetrics = () => ({line_h: LINE_H, char_w: CHAR_W, pad_w: PAD_W, max_arg_chars: MAX_ARG,
  node_gap: CLEAR});

/** The height of a label line (the server's line_h). */
export const lineHeight = () => LINE_H;

/** The width node entry n is drawn at: wider for its inlined constants' line when collapsed. */
export function boxW(n, collapse) {
  return collapse && n.consts ? Math.max(n.w, n.consts.length * CHAR_W + PAD_W) : n.w;
}

/** The height node entry n is drawn at: a line more for its inlined constants when collapsed. */
export function boxH(n, collapse) {
  return collapse && n.consts ? n.h + LINE_H : n.h;
}

/** The model entry of a node answer. */
export function nodeObj(n) {
  const lines = String(n.label ?? n.op ?? "").split("\n");
  return {d: n, x: n.x, y: n.y, w: n.w || 60, h: n.h || 24, lines, consts: null};
}

/** The model entry of a node rebuilt from node entry `old` (a compact delta's `like`): old's fields with `own`'s (id,
 * src, x, y, created), its label lines and size shared, not split and measured again (a step of a big rewrite
 * rebuilds ~2,000 nodes, issue 30). */
export function nodeLike(old, own) {
  const d = {...old.d, ...own};
  if (own.site === null) delete d.site;  // (`"site": null`: it has none, its old node has one; a fresh load sends none)
  return {d, x: own.x, y: own.y, w: old.w, h: old.h, lines: old.lines, consts: null};
}

/** The line of node entry n's constant sources (in `nodes`, id -> entry) shown in its box when collapsed, or null;
 * each value cut like the args in the server's labels. */
export function constsLine(n, nodes) {
  if (n.d.cat === "const") return null;
  const cs = (n.d.src || []).map((s) => nodes.get(s)).filter((x) => x && x.d.cat === "const");
  return cs.length ? `← ${cs.map((c) => cutArg(String(c.d.arg ?? c.d.label))).join(", ")}` : null;
}

const cutArg = (s) => (s.length <= MAX_ARG ? s : `${s.slice(0, MAX_ARG - 1)}…`);

/** The model entry of an edge: its answer d, its drawn route pts and their bounds; the curve and the arrow head
 * (two Path2Ds) are made when first drawn: a graph seen whole at a far zoom draws its edges as one batch of
 * segments, and thousands of curves nobody draws cost more than the rest of the model. */
export class Edge {
  constructor(d, fromConst) {
    this.d = d;
    this.fromConst = fromConst;
    this.pts = null;
    this.box = null;
    this._path = this._arrow = null;
  }

  set(pts, box) {
    this.pts = pts;
    this.box = box;
    this._path = this._arrow = null;
    return this;
  }

  /** Drawn as edge entry `old` is (the same route between boxes of the same sizes): its points, bounds and curves
   * shared, not clipped and made again. */
  sameAs(old) {
    this.pts = old.pts;
    this.box = old.box;
    this._path = old._path;
    this._arrow = old._arrow;
    return this;
  }

  get path() { return this._path ?? (this._path = pathOf(this.pts)); }

  get arrow() { return this._arrow ?? (this._arrow = arrowOf(this.pts)); }
}

/** The model entry of an edge answer between node entries a and b (points: its route; none: a straight line). */
export function edgeObj(e, a, b, collapse) {
  const routed = e.points && e.points.length >= 2;
  if (!routed && !(a && b)) return null;
  // a straight edge runs between the layout's centers (not where the boxes are drawn when respaced)
  const d = routed ? e : {...e, points: [[a.d.x, a.d.y], [b.d.x, b.d.y]]};
  return route(new Edge(d, a ? a.d.cat === "const" : false), d.points, a, b, collapse);
}

/** Give edge entry obj the route pts, ended at the boxes of node entries a and b as they are drawn. */
export function route(obj, pts, a, b, collapse) {
  // the layout routes edges center to center; end them at the boxes so the arrow head shows
  pts = pts.slice();
  if (a) pts[0] = clip(pts[0], pts[1], boxW(a, collapse), a.h / 2, boxH(a, collapse) - a.h / 2);
  const z = pts.length - 1;
  if (b) pts[z] = clip(pts[z], pts[z - 1], boxW(b, collapse), b.h / 2, boxH(b, collapse) - b.h / 2);
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const [px, py] of pts) {
    x0 = Math.min(x0, px);
    y0 = Math.min(y0, py);
    x1 = Math.max(x1, px);
    y1 = Math.max(y1, py);
  }
  return obj.set(pts, [x0, y0, x1, y1]);
}

/** Every node and edge entry back where the layout put it (undoes `respace`). */
export function unspace(nodes, edges) {
  for (const n of nodes.values()) n.x = n.d.x;
  for (const e of edges.values()) route(e, e.d.points, nodes.get(e.d.src), nodes.get(e.d.dst), false);
}

/** Collapsed constants widen their users' boxes and add a line below their labels, where the server's layout
 * (which sized the boxes for their own labels) packed boxes NODE_GAP apart. Shift the drawn boxes and the edges'
 * bend points right, in order of x, so that boxes that overlap vertically keep at least min(CLEAR, the gap the
 * layout gave them) between them (a box's new line is kept CLEAR from everything); edges follow their ends and
 * bends. One sweep over rows of BIN units: O(nodes + bends). Returns the drawn boxes' bounds {x0, y0, x1, y1}. */
export function respace(nodes, edges) {
  const items = [];
  let ymin = Infinity, ymax = -Infinity;
  const add = (it) => { items.push(it); ymin = Math.min(ymin, it.top); ymax = Math.max(ymax, it.bot); };
  for (const n of nodes.values()) {
    if (n.d.cat === "const") continue;
    const top = n.d.y - n.h / 2;
    add({n, x: n.d.x, half: n.w / 2, e: boxW(n, true) - n.w, top, mid: top + n.h, bot: top + boxH(n, true)});
  }
  for (const ed of edges.values()) {
    if (ed.fromConst) continue;
    const p = ed.d.points;
    for (let i = 1; i < p.length - 1; i++) {
      add({ed, i, x: p[i][0], half: 0, e: 0, top: p[i][1], mid: p[i][1], bot: p[i][1]});
    }
  }
  items.sort((a, b) => a.x - b.x);
  const nb = items.length ? Math.floor((ymax - ymin) / BIN) + 1 : 0;
  const fill = () => new Float64Array(nb).fill(-Infinity);
  // per row: the largest shift of a right edge so far, the rightmost right edge so far (layout extents), and the
  // rightmost right edge of the boxes' and of the new lines' extents
  const moved = fill(), right = fill(), rightAll = fill(), rightLine = fill();
  const bin = (y) => Math.floor((y - ymin) / BIN);
  const bends = new Map();
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const it of items) {
    const b0 = bin(it.top), bm = bin(it.mid), b1 = bin(it.bot), line = it.bot > it.mid;
    const l0 = it.x - it.half;
    let need = -Infinity;
    for (let b = b0; b <= bm; b++) need = Math.max(need, Math.min(l0 + moved[b], right[b] + CLEAR));
    for (let b = b0; b <= b1; b++) need = Math.max(need, rightLine[b] + CLEAR);
    if (line) for (let b = bm; b <= b1; b++) need = Math.max(need, rightAll[b] + CLEAR);
    const dx = Math.max(0, need - (l0 - it.e / 2));
    const r = it.x + dx + it.half + it.e / 2, shift = dx + it.e / 2;
    for (let b = b0; b <= bm; b++) { moved[b] = Math.max(moved[b], shift); right[b] = Math.max(right[b], r); }
    for (let b = b0; b <= b1; b++) rightAll[b] = Math.max(rightAll[b], r);
    if (line) for (let b = bm; b <= b1; b++) rightLine[b] = Math.max(rightLine[b], r);
    if (it.n) {
      it.n.x = it.x + dx;
      x0 = Math.min(x0, r - 2 * it.half - it.e);
      x1 = Math.max(x1, r);
      y0 = Math.min(y0, it.top);
      y1 = Math.max(y1, it.bot);
    } else {
      if (!bends.has(it.ed)) bends.set(it.ed, it.ed.d.points.slice());
      bends.get(it.ed)[it.i] = [it.x + dx, it.top];
    }
  }
  for (const n of nodes.values()) if (n.d.cat === "const") n.x = n.d.x;
  for (const e of edges.values()) {
    const a = nodes.get(e.d.src), b = nodes.get(e.d.dst);
    const pts = (bends.get(e) || e.d.points).slice();
    const z = pts.length - 1;
    if (a) pts[0] = [pts[0][0] + a.x - a.d.x, pts[0][1]];
    if (b) pts[z] = [pts[z][0] + b.x - b.d.x, pts[z][1]];
    route(e, pts, a, b, true);
  }
  return {x0, y0, x1, y1};
}

/** The point where the segment from c toward p leaves the box around c: w wide, up above c and down below it. */
function clip(c, p, w, up, down) {
  const dx = p[0] - c[0], dy = p[1] - c[1];
  if (!dx && !dy) return c;
  const t = Math.min(dx ? w / 2 / Math.abs(dx) : Infinity, dy ? (dy < 0 ? up : down) / Math.abs(dy) : Infinity);
  if (t >= 1) return c;  // the next point is inside the box: keep the route as it is
  return [c[0] + dx * t, c[1] + dy * t];
}

/** A smooth curve through the layout's bend points: quadratic segments between midpoints. */
function pathOf(pts) {
  const p = new Path2D();
  p.moveTo(pts[0][0], pts[0][1]);
  if (pts.length === 2) { p.lineTo(pts[1][0], pts[1][1]); return p; }
  for (let i = 1; i < pts.length - 1; i++) {
    const [x, y] = pts[i], [nx, ny] = pts[i + 1];
    const last = i === pts.length - 2;
    p.quadraticCurveTo(x, y, last ? nx : (x + nx) / 2, last ? ny : (y + ny) / 2);
  }
  return p;
}

/** pathOf(pts)'s curve cut to the rectangle x0..x1, y0..y1 (and what little of it passes near), as a Path2D: each
 * quadratic piece (a straight edge: one with its control point halfway) lies in the triangle of its ends and its
 * control point, so a piece is kept whole when that triangle is inside, dropped when it is outside, else halved
 * (de Casteljau) and each half looked at again: the cost is the pieces seen and a few halvings where the curve
 * crosses the border. A dashed stroke is dashed along its whole length, seen or not, and an edge of a big graph runs
 * tens of thousands of px (issue 30: a step's ghosts took 0.3-3 s a frame). p: what receives moveTo and
 * quadraticCurveTo. */
export function clippedPath(pts, x0, y0, x1, y1, p = new Path2D()) {
  let penX = NaN, penY = NaN;
  const piece = (ax, ay, cx, cy, bx, by, depth) => {
    const lx = Math.min(ax, cx, bx), hx = Math.max(ax, cx, bx), ly = Math.min(ay, cy, by), hy = Math.max(ay, cy, by);
    if (hx < x0 || lx > x1 || hy < y0 || ly > y1) return;
    if ((lx >= x0 && hx <= x1 && ly >= y0 && hy <= y1) || depth >= CLIP_DEPTH) {
      if (ax !== penX || ay !== penY) p.moveTo(ax, ay);
      p.quadraticCurveTo(cx, cy, bx, by);
      penX = bx;
      penY = by;
      return;
    }
    const mx1 = (ax + cx) / 2, my1 = (ay + cy) / 2, mx2 = (cx + bx) / 2, my2 = (cy + by) / 2;
    const mx = (mx1 + mx2) / 2, my = (my1 + my2) / 2;
    piece(ax, ay, mx1, my1, mx, my, depth + 1);
    piece(mx, my, mx2, my2, bx, by, depth + 1);
  };
  if (pts.length === 2) {
    const [[ax, ay], [bx, by]] = pts;
    piece(ax, ay, (ax + bx) / 2, (ay + by) / 2, bx, by, 0);
    return p;
  }
  // a route running down (its points' y never decreasing: a layered layout's edges) is looked at only where it crosses
  // the view's rows: a long edge has a point a layer, ~900 on a big rewrite, and each frame drew hundreds of them
  const down = downward(pts), z = pts.length - 2;
  const lo = down ? Math.max(1, firstAtOrBelow(pts, y0) - 1) : 1;
  const hi = down ? Math.min(z, firstAtOrBelow(pts, y1 + 1e-9)) : z;
  let ax = pts[0][0], ay = pts[0][1];
  if (lo > 1) [ax, ay] = [(pts[lo - 1][0] + pts[lo][0]) / 2, (pts[lo - 1][1] + pts[lo][1]) / 2];
  for (let i = lo; i <= hi; i++) {
    const [cx, cy] = pts[i], [nx, ny] = pts[i + 1];
    const last = i === pts.length - 2;
    const bx = last ? nx : (cx + nx) / 2, by = last ? ny : (cy + ny) / 2;
    piece(ax, ay, cx, cy, bx, by, 0);
    ax = bx;
    ay = by;
  }
  return p;
}

const DOWN = new WeakMap();  // route points -> whether their y never decreases (looked at once per route)

function downward(pts) {
  let d = DOWN.get(pts);
  if (d === undefined) {
    d = true;
    for (let i = 1; i < pts.length && d; i++) d = pts[i][1] >= pts[i - 1][1];
    DOWN.set(pts, d);
  }
  return d;
}

/** The first index of downward points pts whose y is at least y (pts.length when none). */
function firstAtOrBelow(pts, y) {
  let lo = 0, hi = pts.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (pts[mid][1] < y) lo = mid + 1; else hi = mid;
  }
  return lo;
}

const CLIP_DEPTH = 24;  // halvings of a piece along the border: 2^-24 of a 100k px edge is well under a pixel

function arrowOf(pts) {
  const [tx, ty] = pts[pts.length - 1], [px, py] = pts[pts.length - 2];
  const len = Math.hypot(tx - px, ty - py) || 1;
  const ux = (tx - px) / len, uy = (ty - py) / len;
  const p = new Path2D();
  p.moveTo(tx, ty);
  p.lineTo(tx - ux * 7 - uy * 3.5, ty - uy * 7 + ux * 3.5);
  p.lineTo(tx - ux * 7 + uy * 3.5, ty - uy * 7 - ux * 3.5);
  p.closePath();
  return p;
}
