// The graph view: the server's layout drawn on a <canvas>, with pan/zoom, highlights, search, collapsed constants and
// incremental step updates. A canvas redraw of a few thousand boxes costs a few ms, where an SVG of the same size
// pays style, layout, layerization and paint for every element on each change.
// Nodes and edges are kept by id, so a step change (/delta) updates only the model entries that changed.
import {h, put} from "./dom.js";

export const CATEGORIES = ["const", "buffer", "alu", "load", "store", "range", "reduce", "movement", "sink", "cast",
  "index", "other"];

// the label metrics the server sizes boxes by (GET /api/metrics, also in /api/boot): line height, width of one
// character at FONT_PX, a box's padding, the cut of an inlined constant's text, and the layout's NODE_GAP (the gap
// collapsed boxes keep unless they had less); set by the page before the first graph is drawn
let LINE_H = 0, CHAR_W = 0, PAD_W = 0, MAX_ARG = 0, CLEAR = 0;
const FONT_PX = 11;     // the font the server's char_w was measured at
const TEXT_MIN_SCALE = 0.45;  // below this zoom labels are unreadable: skip drawing them
const OVERVIEW_MIN = 0.2;  // a whole graph fitted below this zoom is a smear: the automatic view shows the change
const FOCUS_SCALE = 0.8;   // the zoom the automatic view centers a step's result at when the change is too big
const BIN = 4;           // respacing: rows of this height in graph units
const FADE_MS = 1200;
const STUB_PX = 14;      // a cut graph's stub: the drawn length of an edge to a node not shown
const GHOST_FROM = 0.9, GHOST_TO = 0.22;
const edgeKey = (src, dst, index) => `${src}>${dst}>${index}`;

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

export class GraphView {
  /** host: an empty element; onSelect(id|null) when a node (or the background) is clicked. */
  constructor(host, {onSelect} = {}) {
    this.host = host;
    this.onSelect = onSelect || (() => {});
    this.nodes = new Map();  // id -> {d, x, y, w, h, lines, consts}
    this.edges = new Map();  // key -> Edge {d, pts, box, path, arrow, fromConst}
    this.marked = {added: new Set(), changed: new Set(), result: null};
    this.ghosts = null;      // {nodes: [...], edges: [...], t0} removed by the last step, drawn fading
    this.cut = null;         // the answer's `cut` when the graph is too big to show whole: {shown, total, around, stubs}
    this.usersCache = null;
    this.edgeBatch = null;   // combined Path2Ds of all edges, rebuilt when edges change
    this.selected = null;
    this.relMode = "none";
    this.rel = null;         // ids related to the selection (ancestors/descendants) when relMode is on
    this.query = "";
    this.hits = [];
    this.hitSet = new Set();
    this.hitIndex = -1;
    this.collapse = false;
    this.spaced = null;      // bounds of the drawn boxes while respaced for collapsed constants (see _respace)
    this.view = {x: 0, y: 0, k: 1};
    this.autoFit = true;     // until the user pans or zooms, a step that changes the graph's size refits it
    this.size = {width: 0, height: 0};
    this.drawn = 0;          // nodes drawn in the last frame (tests and bench read it)
    this.frames = 0;
    this._raf = 0;
    this._readColors();
    this.canvas = h("canvas", {class: "graph-canvas", role: "img", "aria-label": "graph"});
    this.ctx = this.canvas.getContext("2d", {alpha: false});
    put(host, this.canvas);
    this._resize();
    new ResizeObserver(() => { this._resize(); this.redraw(); }).observe(host);
    this._wireInput();
  }

  _readColors() {
    const css = getComputedStyle(document.documentElement);
    const v = (name, dflt) => css.getPropertyValue(name).trim() || dflt;
    this.colors = {bg: v("--bg", "#0d1117"), fg: v("--fg", "#d5dde7"), edge: "#4a5668",
      accent: v("--accent", "#58a6ff"),
      add: v("--add", "#3fb950"), chg: v("--chg", "#d29922"), del: v("--del", "#f85149"), hit: "#6b5412",
      consts: "#c9a2ff", stub: v("--fg-dim", "#8b949e"), cat: {}, fill: {}};
    for (const c of CATEGORIES) {
      const col = v(`--c-${c}`, "#768390");
      this.colors.cat[c] = col;
      this.colors.fill[c] = mix(col, this.colors.bg, 0.16);
    }
  }

  _resize() {
    const r = this.host.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    this.cw = Math.max(1, r.width);
    this.ch = Math.max(1, r.height);
    this.dpr = dpr;
    this.canvas.width = Math.round(this.cw * dpr);
    this.canvas.height = Math.round(this.ch * dpr);
    this.canvas.style.width = `${this.cw}px`;
    this.canvas.style.height = `${this.ch}px`;
  }

  // ---- data

  /** Show a full graph answer (/graph); the nodes its step removed (removed_nodes, removed_edges) fade out. */
  setData(g) {
    this.nodes.clear();
    this.edges.clear();
    for (const n of g.nodes) this._addNode(n);
    for (const e of g.edges) this._addEdge(e);
    this.ghosts = null;
    if (g.removed_nodes && g.removed_nodes.length) {
      const gone = new Map(g.removed_nodes.map((n) => [n.id, nodeObj(n)]));
      const end = (id) => gone.get(id) || this.nodes.get(id);
      const edges = (g.removed_edges || []).map((e) => this._edgeObj(e, end(e.src), end(e.dst))).filter((e) => e);
      this.ghosts = {nodes: [...gone.values()], edges, t0: performance.now()};
    }
    this._refreshConsts(null);
    this.cut = g.cut || null;
    this.size = {width: g.width || 0, height: g.height || 0};
    this.spaced = null;  // the entries are new: nothing of them was respaced
    this._respace();
    this._changed();
    this._mark(g.added, g.changed, g.match);
    this._recompute();
  }

  /** Apply a /delta answer, full or compact (docs/architecture.md, "Deltas"); removed nodes and their edges stay as
   * fading ghosts until the next change. Returns false (and changes nothing) when the delta does not fit the graph
   * shown: a compact node rebuilt from a node that is not there. */
  applyDelta(d) {
    const removing = new Set(d.nodes_removed);
    if (d.nodes_added.some((a) => a.like !== undefined && !(removing.has(a.like) && this.nodes.has(a.like)))) {
      return false;
    }
    const ghosts = {nodes: [], edges: [], t0: performance.now()};
    const gone = new Map();  // removed id -> its model entry (a compact `like` refers to it)
    const goneEdges = new Map();  // key -> model entry of the removed nodes' in-edges
    const touched = new Set();
    const dropEdge = (k) => {
      const e = this.edges.get(k);
      if (!e) return null;
      this.edges.delete(k);
      touched.add(e.d.dst);
      return e;
    };
    for (const id of d.nodes_removed) {
      const n = this.nodes.get(id);
      if (!n) continue;
      // a removed node's in-edges go with it (its out-edges end at other removed nodes: their in-edges)
      (n.d.src || []).forEach((s, i) => {
        const k = edgeKey(s, id, i), e = dropEdge(k);
        if (e) { ghosts.edges.push(e); goneEdges.set(k, e); }
      });
      this.nodes.delete(id);
      gone.set(id, n);
      ghosts.nodes.push(n);
    }
    for (const [src, dst, index] of d.edges_removed || []) dropEdge(edgeKey(src, dst, index));
    const listed = new Set(d.edges_added.map((e) => edgeKey(e.src, e.dst, e.index)));
    const inherited = [];  // in-edges of rebuilt nodes, added after the delta's moves
    for (const a of d.nodes_added) {
      const like = a.like === undefined ? null : gone.get(a.like);
      const {like: _, ...own} = a;
      this._addNode(like ? {...like.d, ...own} : a);
      touched.add(a.id);
      if (!like) continue;
      // a rebuilt node's in-edges keep the routes of the node it was rebuilt from, unless listed in edges_added
      a.src.forEach((s, i) => {
        const old = goneEdges.get(edgeKey(like.d.src[i], like.d.id, i));
        if (old && !listed.has(edgeKey(s, a.id, i))) {
          inherited.push({src: s, dst: a.id, index: i, points: old.d.points});
        }
      });
    }
    for (const [id, xy] of Object.entries(d.nodes_moved || {})) {
      const n = this.nodes.get(Number(id));
      if (!n) continue;
      n.x = n.d.x = xy[0];
      n.y = n.d.y = xy[1];
    }
    for (const e of inherited) { this._addEdge(e); touched.add(e.dst); }
    for (const e of d.edges_added) { this._addEdge(e); touched.add(e.dst); }
    this._refreshConsts(touched);
    this.ghosts = ghosts.nodes.length || ghosts.edges.length ? ghosts : null;
    this.cut = d.cut || null;  // a delta to a cut graph carries its cut (stubs included); to a whole one, none
    this.size = {width: d.width || this.size.width, height: d.height || this.size.height};
    this._respace();
    this._changed();
    this._mark(d.added, d.changed, d.match);
    if (this.selected !== null && !this.nodes.has(this.selected)) this.selected = null;
    if (this.autoFit) this.autoView();
    this._recompute();
    return true;
  }

  _addNode(n) {
    this.nodes.set(n.id, nodeObj(n));
  }

  _addEdge(e) {
    const obj = this._edgeObj(e, this.nodes.get(e.src), this.nodes.get(e.dst));
    if (obj) this.edges.set(edgeKey(e.src, e.dst, e.index), obj);
  }

  /** The model entry of an edge answer between node entries a and b (points: its route; none: a straight line). */
  _edgeObj(e, a, b) {
    const routed = e.points && e.points.length >= 2;
    if (!routed && !(a && b)) return null;
    // a straight edge runs between the layout's centers (not where the boxes are drawn when respaced)
    const d = routed ? e : {...e, points: [[a.d.x, a.d.y], [b.d.x, b.d.y]]};
    return this._route(new Edge(d, a ? a.d.cat === "const" : false), d.points, a, b);
  }

  /** Give edge entry obj the route pts, ended at the boxes of node entries a and b as they are drawn. */
  _route(obj, pts, a, b) {
    // the layout routes edges center to center; end them at the boxes so the arrow head shows
    pts = pts.slice();
    if (a) pts[0] = clip(pts[0], pts[1], this._boxW(a), a.h / 2, this._boxH(a) - a.h / 2);
    const z = pts.length - 1;
    if (b) pts[z] = clip(pts[z], pts[z - 1], this._boxW(b), b.h / 2, this._boxH(b) - b.h / 2);
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const [px, py] of pts) {
      x0 = Math.min(x0, px);
      y0 = Math.min(y0, py);
      x1 = Math.max(x1, px);
      y1 = Math.max(y1, py);
    }
    return obj.set(pts, [x0, y0, x1, y1]);
  }

  /** Collapsed constants widen their users' boxes and add a line below their labels, where the server's layout
   * (which sized the boxes for their own labels) packed boxes NODE_GAP apart. Shift the drawn boxes and the edges'
   * bend points right, in order of x, so that boxes that overlap vertically keep at least min(CLEAR, the gap the
   * layout gave them) between them (a box's new line is kept CLEAR from everything); edges follow their ends and
   * bends. One sweep over rows of BIN units: O(nodes + bends). Without collapse everything is where the layout put
   * it (and nothing is done when nothing was respaced). */
  _respace() {
    if (!this.collapse) {
      if (!this.spaced) return;
      this.spaced = null;
      for (const n of this.nodes.values()) n.x = n.d.x;
      for (const e of this.edges.values()) this._route(e, e.d.points, this.nodes.get(e.d.src), this.nodes.get(e.d.dst));
      return;
    }
    const items = [];
    let ymin = Infinity, ymax = -Infinity;
    const add = (it) => { items.push(it); ymin = Math.min(ymin, it.top); ymax = Math.max(ymax, it.bot); };
    for (const n of this.nodes.values()) {
      if (n.d.cat === "const") continue;
      const top = n.d.y - n.h / 2;
      add({n, x: n.d.x, half: n.w / 2, e: this._boxW(n) - n.w, top, mid: top + n.h, bot: top + this._boxH(n)});
    }
    for (const ed of this.edges.values()) {
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
    for (const n of this.nodes.values()) if (n.d.cat === "const") n.x = n.d.x;
    for (const e of this.edges.values()) {
      const a = this.nodes.get(e.d.src), b = this.nodes.get(e.d.dst);
      const pts = (bends.get(e) || e.d.points).slice();
      const z = pts.length - 1;
      if (a) pts[0] = [pts[0][0] + a.x - a.d.x, pts[0][1]];
      if (b) pts[z] = [pts[z][0] + b.x - b.d.x, pts[z][1]];
      this._route(e, pts, a, b);
    }
    this.spaced = {x0, y0, x1, y1};
  }

  /** Constant sources shown inside their users' labels when collapsed: recompute for `ids` (all when null). */
  _refreshConsts(ids) {
    for (const id of ids === null ? this.nodes.keys() : ids) {
      const n = this.nodes.get(id);
      if (!n) continue;
      n.consts = null;
      if (n.d.cat === "const") continue;
      const cs = (n.d.src || []).map((s) => this.nodes.get(s)).filter((x) => x && x.d.cat === "const");
      if (cs.length) n.consts = `← ${cs.map((c) => cut(String(c.d.arg ?? c.d.label))).join(", ")}`;
    }
  }

  _changed() {
    this.usersCache = null;
    this.edgeBatch = null;
  }

  _mark(added, changed, match) {
    // result: the node the step's rule returned (where the automatic view goes when the change is too big to fit)
    this.marked = {added: new Set(added || []), changed: new Set(changed || []), result: match?.after ?? null};
  }

  // ---- queries

  get users() {
    if (!this.usersCache) {
      const u = new Map();
      for (const [id, n] of this.nodes) {
        for (const sid of n.d.src || []) {
          if (!u.has(sid)) u.set(sid, []);
          const list = u.get(sid);
          if (!list.includes(id)) list.push(id);
        }
      }
      this.usersCache = u;
    }
    return this.usersCache;
  }

  node(id) { return this.nodes.get(id)?.d; }

  /** Data of a node removed by the last step (still drawn as a ghost). */
  ghostNode(id) {
    const g = this.ghosts && this.ghosts.nodes.find((n) => n.d.id === id);
    return g ? g.d : undefined;
  }

  /** Ids of the nodes in the model (what is drawn, ghosts excluded). */
  ids() { return [...this.nodes.keys()]; }

  /** Where node id is on screen, in CSS pixels relative to the page (for tests that click it). */
  screenPos(id) {
    const n = this.nodes.get(id);
    if (!n) return null;
    const r = this.canvas.getBoundingClientRect();
    const {x, y, k} = this.view;
    return {x: r.left + x + n.x * k, y: r.top + y + n.y * k, w: this._boxW(n) * k, h: this._boxH(n) * k};
  }

  /** The box node id is drawn as, in graph coordinates ({x0, y0, x1, y1}), or null when it is not drawn. */
  box(id) {
    const n = this.nodes.get(id);
    if (!n || (this.collapse && n.d.cat === "const")) return null;
    const w = this._boxW(n), top = n.y - n.h / 2;
    return {x0: n.x - w / 2, y0: top, x1: n.x + w / 2, y1: top + this._boxH(n)};
  }

  relatives(id, mode) {
    const out = new Set();
    const walk = (next) => {
      const stack = [id];
      while (stack.length) {
        const x = stack.pop();
        for (const y of next(x)) if (!out.has(y)) { out.add(y); stack.push(y); }
      }
    };
    if (mode === "ancestors" || mode === "both") walk((x) => this.nodes.get(x)?.d.src || []);
    if (mode === "descendants" || mode === "both") walk((x) => this.users.get(x) || []);
    out.delete(id);
    return out;
  }

  /** Whether node id is drawn with `mark` (added, changed, selected, hit, related) in the current frame. */
  hasMark(id, mark) {
    if (mark === "added" || mark === "changed") return this.marked[mark].has(id) && this.nodes.has(id);
    if (mark === "selected") return this.selected === id;
    if (mark === "hit") return this.hitSet.has(id);
    if (mark === "related") return this.rel !== null && this.rel.has(id);
    return false;
  }

  // ---- highlight state

  select(id, {center = false} = {}) {
    this.selected = id !== null && this.nodes.has(id) ? id : null;
    this._recompute();
    if (center && this.selected !== null) this.centerOn(this.selected);
  }

  setRelatives(mode) { this.relMode = mode; this._recompute(); }

  setCollapse(on) {
    this.collapse = on;
    this._respace();
    this._changed();
    if (this.autoFit) this.autoView(); else this.redraw();
  }

  /** Mark nodes whose op/arg/label/#id contains q; returns the number of hits. */
  search(q) {
    this.query = q.trim().toLowerCase();
    this.hitIndex = -1;
    this._recompute();
    return this.hits.length;
  }

  /** Select and center the next (dir=1) or previous search hit; returns its id. */
  nextHit(dir = 1) {
    if (!this.hits.length) return null;
    this.hitIndex = (this.hitIndex + dir + this.hits.length) % this.hits.length;
    const id = this.hits[this.hitIndex];
    this.select(id, {center: true});
    return id;
  }

  _recompute() {
    this.rel = this.selected !== null && this.relMode !== "none" ? this.relatives(this.selected, this.relMode) : null;
    this.hits = [];
    const q = this.query;
    if (q) {
      for (const [id, n] of this.nodes) {
        const d = n.d;
        if (`#${id}` === q || String(d.op).toLowerCase().includes(q) || String(d.arg ?? "").toLowerCase().includes(q)
            || String(d.label ?? "").toLowerCase().includes(q)) this.hits.push(id);
      }
    }
    this.hitSet = new Set(this.hits);
    this.redraw();
  }

  // ---- view: pan / zoom / fit

  fit() {
    this.autoFit = true;
    // the layout's extent, or the drawn boxes' when respaced
    const s = this.spaced && this.spaced.x1 > this.spaced.x0 ? this.spaced : null;
    const x0 = s ? s.x0 : 0, y0 = s ? s.y0 : 0;
    const width = s ? s.x1 - s.x0 : this.size.width, height = s ? s.y1 - s.y0 : this.size.height;
    if (!width || !height) { this.view = {x: this.cw / 2, y: this.ch / 2, k: 1}; this.redraw(); return; }
    // keep clear of the legend at the bottom
    const k = Math.min(this.cw / (width + 40), (this.ch - 50) / (height + 30), 1.6);
    this.view = {k, x: (this.cw - width * k) / 2 - x0 * k, y: (this.ch - 50 - height * k) / 2 + 4 - y0 * k};
    this.redraw();
  }

  /** The view the graph opens with and keeps while the user has not panned or zoomed: all of it when that is legible;
   * else (a graph too big to see whole, such as a kernel's upcast lanes) the nodes the step added or changed, fitted
   * at a zoom where labels show, so stepping follows the rewrite, or if they are too many for that, the node the
   * step's rule returned. Fit (`f`) still shows everything. */
  autoView() {
    this.fit();
    if (this.view.k >= OVERVIEW_MIN || !this.marked) return;
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const set of [this.marked.added, this.marked.changed]) {
      for (const id of set) {
        const b = this.box(id);
        if (!b) continue;
        x0 = Math.min(x0, b.x0); y0 = Math.min(y0, b.y0); x1 = Math.max(x1, b.x1); y1 = Math.max(y1, b.y1);
      }
    }
    let k = x1 > x0 ? Math.min(this.cw / (x1 - x0 + 160), (this.ch - 50) / (y1 - y0 + 120), 1.2) : 0;
    if (k < TEXT_MIN_SCALE) {  // the change is too big to read whole: the rule's result, legibly
      const b = this.marked.result !== null ? this.box(this.marked.result) : null;
      if (!b) return;
      [x0, y0, x1, y1, k] = [b.x0, b.y0, b.x1, b.y1, FOCUS_SCALE];
    }
    this.view = {k, x: this.cw / 2 - ((x0 + x1) / 2) * k, y: (this.ch - 50) / 2 - ((y0 + y1) / 2) * k};
    this.redraw();
  }

  centerOn(id) {
    const n = this.nodes.get(id);
    if (!n) return;
    this.autoFit = false;
    const k = Math.max(this.view.k, 0.8);
    this.view = {k, x: this.cw / 2 - n.x * k, y: this.ch / 2 - n.y * k};
    this.redraw();
  }

  zoomBy(f, cx = this.cw / 2, cy = this.ch / 2) {
    this.autoFit = false;
    const k = Math.min(8, Math.max(0.005, this.view.k * f));
    const ratio = k / this.view.k;
    this.view = {k, x: cx - (cx - this.view.x) * ratio, y: cy - (cy - this.view.y) * ratio};
    this.redraw();
  }

  /** Draw on the next animation frame (many changes in one task draw once). */
  redraw() {
    if (this._raf) return;
    this._raf = requestAnimationFrame(() => { this._raf = 0; this.draw(); });
  }

  /** Draw now: the passes below, back to front. */
  draw() {
    const f = this._begin();
    const fadeLeft = this._drawGhosts(f);
    this._drawEdges(f);
    this._drawSelectedEdges(f);
    this._drawNodes(f);
    this._drawMarks(f);
    this.frames++;
    // a few redraws while the ghosts fade, not one per frame: each full redraw costs real time on big graphs
    clearTimeout(this._fadeTimer);
    if (fadeLeft > 0) this._fadeTimer = setTimeout(() => this.redraw(), Math.min(300, fadeLeft));
  }

  /** Clear the canvas, set the view's transform; what the passes share: the zoom, the visible region and tests. */
  _begin() {
    const {ctx, dpr, colors} = this;
    const {x, y, k} = this.view;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = colors.bg;
    ctx.fillRect(0, 0, this.cw, this.ch);
    ctx.setTransform(dpr * k, 0, 0, dpr * k, dpr * x, dpr * y);
    // visible region in graph coordinates, with a margin for boxes straddling the edge
    const vx0 = -x / k - 200, vy0 = -y / k - 60, vx1 = (this.cw - x) / k + 200, vy1 = (this.ch - y) / k + 60;
    const near = (n) => n.x >= vx0 && n.x <= vx1 && n.y >= vy0 && n.y <= vy1;
    // boxes widened by inlined constants may reach further than the margin
    const visible = !this.collapse ? near : (n) => n.y >= vy0 && n.y <= vy1
      && Math.abs(n.x - (vx0 + vx1) / 2) <= (vx1 - vx0) / 2 + Math.max(0, this._boxW(n) / 2 - 200);
    return {
      ctx, colors, k, vx0, vy0, vx1, vy1, visible,
      focus: this._focus(),
      hidden: (n) => this.collapse && n.d.cat === "const",
      hair: 1 / (k * dpr),  // 1 device pixel: Skia strokes hairlines on a much faster path than wider lines
      rounded: k * 20 >= 8,  // corners too small to see are not worth their cost
    };
  }

  /** Ghosts of the last step's removed nodes, fading; returns the ms of fading left. */
  _drawGhosts({ctx, colors, k, visible, hidden}) {
    if (!this.ghosts) return 0;
    const age = (performance.now() - this.ghosts.t0) / FADE_MS;
    ctx.globalAlpha = GHOST_FROM + (GHOST_TO - GHOST_FROM) * Math.min(1, age);
    // dash lengths in screen pixels: in graph units a zoomed-out edge would be thousands of dashes
    const s = 1 / Math.min(k, 1);
    ctx.setLineDash([4 * s, 3 * s]);
    ctx.strokeStyle = colors.del;
    ctx.lineWidth = 1.2 * s;
    for (const e of this.ghosts.edges) if (!(this.collapse && e.fromConst)) ctx.stroke(e.path);
    ctx.fillStyle = "#2a1216";
    const p = new Path2D();
    const shown = this.ghosts.nodes.filter((n) => visible(n) && !hidden(n));
    for (const n of shown) p.roundRect(n.x - this._boxW(n) / 2, n.y - n.h / 2, this._boxW(n), this._boxH(n), 4);
    ctx.fill(p);
    ctx.stroke(p);
    ctx.setLineDash([]);
    if (k >= TEXT_MIN_SCALE) {
      ctx.fillStyle = colors.del;
      this._labels(shown);
    }
    ctx.globalAlpha = 1;
    return Math.max(0, 1 - age) * FADE_MS;
  }

  /** Edges in one batch (only the visible ones when zoomed in), dimmed while some nodes are in focus. */
  _drawEdges({ctx, colors, k, vx0, vy0, vx1, vy1, focus, hair}) {
    ctx.globalAlpha = focus ? 0.18 : 1;
    ctx.strokeStyle = colors.edge;
    ctx.fillStyle = colors.edge;
    ctx.lineWidth = hair;
    if (k < 0.15) {
      // far out: straight segments, no arrow heads (they would be a fraction of a pixel)
      const batch = this._edgeBatch();
      ctx.stroke(this.collapse ? batch.flatNoConst : batch.flat);
    } else {
      const lines = new Path2D(), arrows = new Path2D();
      for (const e of this.edges.values()) {
        const [x0, y0, x1, y1] = e.box;
        if (x1 < vx0 || x0 > vx1 || y1 < vy0 || y0 > vy1 || (this.collapse && e.fromConst)) continue;
        lines.addPath(e.path);
        arrows.addPath(e.arrow);
      }
      ctx.stroke(lines);
      ctx.fill(arrows);
    }
    ctx.globalAlpha = 1;
  }

  /** The selected node's edges (or those among its highlighted relatives) on top of the others. */
  _drawSelectedEdges({ctx, colors, k}) {
    if (this.selected === null) return;
    const on = this.rel ? new Set(this.rel).add(this.selected) : null;
    const hl = new Path2D(), ha = new Path2D();
    for (const e of this.edges.values()) {
      const yes = on ? on.has(e.d.src) && on.has(e.d.dst) : e.d.src === this.selected || e.d.dst === this.selected;
      if (yes && !(this.collapse && e.fromConst)) { hl.addPath(e.path); ha.addPath(e.arrow); }
    }
    ctx.strokeStyle = colors.accent;
    ctx.fillStyle = colors.accent;
    ctx.lineWidth = 2 / k;
    ctx.stroke(hl);
    ctx.fill(ha);
  }

  /** Nodes, one path per category (few state changes), dimmed ones first; counts the drawn ones in this.drawn. */
  _drawNodes(f) {
    const dim = [], lit = [];
    let drawn = 0;
    for (const n of this.nodes.values()) {
      if (f.hidden(n) || !f.visible(n)) continue;
      drawn++;
      (f.focus && !f.focus.has(n.d.id) ? dim : lit).push(n);
    }
    this.drawn = drawn;
    if (dim.length) this._drawBoxes(f, dim, 0.25);
    if (lit.length) this._drawBoxes(f, lit, 1);
    f.ctx.globalAlpha = 1;
  }

  /** One group of nodes at one opacity: boxes, search hits' fill (opaque group only), labels. */
  _drawBoxes({ctx, colors, k, hair, rounded}, group, alpha) {
    ctx.globalAlpha = alpha;
    const byCat = new Map();
    for (const n of group) {
      const c = colors.cat[n.d.cat] ? n.d.cat : "other";
      if (!byCat.has(c)) byCat.set(c, new Path2D());
      const bw = this._boxW(n), bh = this._boxH(n);
      if (rounded) byCat.get(c).roundRect(n.x - bw / 2, n.y - n.h / 2, bw, bh, 4);
      else byCat.get(c).rect(n.x - bw / 2, n.y - n.h / 2, bw, bh);
    }
    ctx.lineWidth = rounded ? Math.max(hair, 1.2) : hair;
    const tiny = k * 20 < 4;  // boxes of a few pixels: a solid fill in the category color reads best
    for (const [c, p] of byCat) {
      ctx.fillStyle = tiny ? colors.cat[c] : colors.fill[c];
      ctx.fill(p);
      if (!tiny) { ctx.strokeStyle = colors.cat[c]; ctx.stroke(p); }
    }
    if (alpha === 1 && this.hits.length) {  // search hits: a fill under the labels
      ctx.fillStyle = colors.hit;
      const p = new Path2D();
      for (const n of group) {
        if (!this.hitSet.has(n.d.id)) continue;
        const bw = this._boxW(n);
        p.roundRect(n.x - bw / 2, n.y - n.h / 2, bw, this._boxH(n), 4);
      }
      ctx.fill(p);
    }
    if (k >= TEXT_MIN_SCALE) {
      ctx.fillStyle = colors.fg;
      this._labels(group);
    }
  }

  /** Rings on top: search hits, added, changed, related, selected. */
  _drawMarks({ctx, colors, k, visible, hidden}) {
    const ring = (ids, color, width, dash) => {
      const p = new Path2D();
      let any = false;
      for (const id of ids) {
        const n = this.nodes.get(id);
        if (!n || hidden(n) || !visible(n)) continue;
        const bw = this._boxW(n);
        p.roundRect(n.x - bw / 2 - 1, n.y - n.h / 2 - 1, bw + 2, this._boxH(n) + 2, 5);
        any = true;
      }
      if (!any) return;
      ctx.setLineDash((dash || []).map((x) => x / Math.min(k, 1)));
      ctx.strokeStyle = color;
      ctx.lineWidth = width / Math.min(k, 1);
      ctx.stroke(p);
      ctx.setLineDash([]);
    };
    if (this.hits.length) ring(this.hits, "#f2cc60", 1.5);
    ring(this.marked.added, colors.add, 3);
    ring(this.marked.changed, colors.chg, 3, [6, 3]);
    if (this.rel) ring(this.rel, colors.accent, 2);
    if (this.selected !== null) ring([this.selected], "#ffffff", 3);
    if (this.cut) this._drawStubs({ctx, colors, k, visible, hidden});
  }

  /** A cut graph's edges to nodes not shown: a dashed stub above a box per hidden source (sources are drawn above
   * their users), below it per hidden user, with the count when zoomed in enough to read it. */
  _drawStubs({ctx, colors, k, visible, hidden}) {
    const p = new Path2D(), texts = [];
    const len = STUB_PX / Math.min(k, 1);
    for (const [id, [srcs, users]] of Object.entries(this.cut.stubs || {})) {
      const n = this.nodes.get(Number(id));
      if (!n || hidden(n) || !visible(n)) continue;
      const top = n.y - n.h / 2, bottom = top + this._boxH(n);
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

  _boxW(n) {
    return this.collapse && n.consts ? Math.max(n.w, n.consts.length * CHAR_W + PAD_W) : n.w;
  }

  _boxH(n) {
    return this.collapse && n.consts ? n.h + LINE_H : n.h;
  }

  _labels(nodes) {
    const ctx = this.ctx;
    ctx.font = `${FONT_PX}px ${getMonoFont()}`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    const fg = ctx.fillStyle;
    for (const n of nodes) {
      const y0 = n.y - ((n.lines.length - 1) * LINE_H) / 2;
      for (let i = 0; i < n.lines.length; i++) ctx.fillText(n.lines[i], n.x, y0 + i * LINE_H);
      if (this.collapse && n.consts) {
        ctx.fillStyle = this.colors.consts;
        ctx.fillText(n.consts, n.x, y0 + n.lines.length * LINE_H);
        ctx.fillStyle = fg;
      }
    }
  }

  _focus() {
    if (this.rel) return new Set(this.rel).add(this.selected);
    if (this.query) {
      const f = new Set(this.hits);
      if (this.selected !== null) f.add(this.selected);
      return f;
    }
    return null;
  }

  _edgeBatch() {
    if (!this.edgeBatch) {
      const b = {flat: new Path2D(), flatNoConst: new Path2D()};
      for (const e of this.edges.values()) {
        for (const p of e.fromConst ? [b.flat] : [b.flat, b.flatNoConst]) {
          p.moveTo(e.pts[0][0], e.pts[0][1]);
          for (let i = 1; i < e.pts.length; i++) p.lineTo(e.pts[i][0], e.pts[i][1]);
        }
      }
      this.edgeBatch = b;
    }
    return this.edgeBatch;
  }

  /** The node under a point in canvas CSS pixels, or null. */
  hitTest(px, py) {
    const {x, y, k} = this.view;
    const gx = (px - x) / k, gy = (py - y) / k;
    let best = null;
    for (const n of this.nodes.values()) {
      if (this.collapse && n.d.cat === "const") continue;
      const bw = this._boxW(n);
      if (Math.abs(gx - n.x) <= bw / 2 && gy >= n.y - n.h / 2 && gy <= n.y - n.h / 2 + this._boxH(n)) best = n;
    }
    return best;
  }

  _wireInput() {
    const c = this.canvas;
    let drag = null;
    const local = (ev) => {
      const r = c.getBoundingClientRect();
      return [ev.clientX - r.left, ev.clientY - r.top];
    };
    c.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0) return;
      drag = {x: ev.clientX, y: ev.clientY, vx: this.view.x, vy: this.view.y, moved: false, id: ev.pointerId};
    });
    c.addEventListener("pointermove", (ev) => {
      if (!drag) {
        const n = this.hitTest(...local(ev));
        c.style.cursor = n ? "pointer" : "grab";
        c.title = n ? `#${n.d.id} ${n.d.op} ${n.d.dtype ?? ""} ${n.d.arg ?? ""}`.trim() : "";
        return;
      }
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!drag.moved) {
        drag.moved = true;
        this.autoFit = false;
        c.setPointerCapture(drag.id);
        c.style.cursor = "grabbing";
      }
      this.view = {...this.view, x: drag.vx + dx, y: drag.vy + dy};
      this.redraw();
    });
    const end = (ev) => {
      if (!drag) return;
      const wasDrag = drag.moved;
      drag = null;
      c.style.cursor = "grab";
      if (wasDrag || ev.type !== "pointerup") return;
      const n = this.hitTest(...local(ev));
      this.onSelect(n ? n.d.id : null);
    };
    c.addEventListener("pointerup", end);
    c.addEventListener("pointercancel", end);
    c.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      this.zoomBy(Math.exp(-ev.deltaY * (ev.ctrlKey ? 0.01 : 0.0015)), ...local(ev));
    }, {passive: false});
    c.addEventListener("dblclick", () => this.fit());
  }
}

/** The model entry of an edge: its answer d, its drawn route pts and their bounds; the curve and the arrow head
 * (two Path2Ds) are made when first drawn: a graph seen whole at a far zoom draws its edges as one batch of
 * segments, and thousands of curves nobody draws cost more than the rest of the model. */
class Edge {
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

  get path() { return this._path ?? (this._path = pathOf(this.pts)); }

  get arrow() { return this._arrow ?? (this._arrow = arrowOf(this.pts)); }
}

/** The model entry of a node answer. */
function nodeObj(n) {
  const lines = String(n.label ?? n.op ?? "").split("\n");
  return {d: n, x: n.x, y: n.y, w: n.w || 60, h: n.h || 24, lines, consts: null};
}

/** An inlined constant's text, cut like the args in the server's labels. */
function cut(s) {
  return s.length <= MAX_ARG ? s : `${s.slice(0, MAX_ARG - 1)}…`;
}

let monoFont = null;

function getMonoFont() {
  if (monoFont === null) {
    monoFont = getComputedStyle(document.documentElement).getPropertyValue("--mono").trim() || "monospace";
  }
  return monoFont;
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

/** `a` mixed into `b` with weight w (hex colors). */
function mix(a, b, w) {
  const p = (c) => [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
  if (!/^#[0-9a-f]{6}$/i.test(a) || !/^#[0-9a-f]{6}$/i.test(b)) return b;
  const [ca, cb] = [p(a), p(b)];
  return `rgb(${ca.map((v, i) => Math.round(v * w + cb[i] * (1 - w))).join(",")})`;
}

/** The category legend (CSS classes shared with the chips). */
export function renderLegend(host, counts) {
  const items = CATEGORIES.filter((c) => !counts || counts[c]).map((c) => h("span", {class: `legend-item cat-${c}`},
    h("i", {class: "swatch"}), c, counts ? h("span", {class: "muted"}, ` ${counts[c]}`) : null));
  put(host, ...items);
}
