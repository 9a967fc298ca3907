// The timeline panel: where the traced program's time went. The trace contexts (rows per nesting depth; overlapping
// ones, kernels compiled ahead, packed below), the graph_rewrite passes inside them, each kernel's LLVM compile
// (compiles at once on rows of their own) and each kernel run, on one time axis drawn on a canvas. Wheel zooms around
// the pointer, drag pans, double click (or Fit) shows the whole trace; click a span to open its context or rewrite.
// Trace strings reach the page only as canvas text and tooltip textContent.
import {api} from "./api.js";
import {fmtSeconds, h, put} from "./dom.js";
import {legendBox} from "./legend.js";
import {MemoryLane} from "./memlane.js";
import {Panel} from "./panel.js";

const LABEL_W = 92;  // the lane labels' column
const PAD_R = 8;
const AXIS_H = 22;
const ROW_H = 18;  // the least a row gets; with room to spare (the panel's height) rows grow up to MAX_ROW_H
const MAX_ROW_H = 34;
const TWO_LINES_H = 30;  // a row this tall shows a span's duration under its name
const LANE_GAP = 5;
const MAX_PASS_ROWS = 6;  // nested passes get rows of their own; past this they share the last one
const MAX_CONTEXT_ROWS = 10;  // so do overlapping contexts of one depth (compile-ahead: COMPILE_AHEAD + 1 by default)
const MAX_COMPILE_ROWS = 4;  // LLVM compiles at once: the compile worker's and the calling thread's (realize._Job)
const MIN_VIEW_S = 1e-7;  // the deepest zoom: 100 ns across the canvas
const DRAG_PX = 3;  // a press that moves less than this is a click, not a pan
const HOVER_SLACK = 3;  // px either side of a span that still hovers it (1 px spans are hard to hit)
const FONT = '11px ui-monospace, "JetBrains Mono", "SF Mono", Menlo, Consolas, "DejaVu Sans Mono", monospace';

const KIND_COLORS = {default: "#3a4556", schedule: "#6e40c9", kernel: "#1f6feb", context: "#1b7c83"};
const COMPILE_COLOR = "#c4661f";
const RUN_COLOR = "#2f9e44";
const MATCH_COLOR = "#facc15";  // the spans a search found (the current one: white)
const DIM_ALPHA = 0.22;  // the spans it did not

/** A pass name's color: a hue from a hash of the name, so a pass has the same color in every trace. */
export function passColor(name) {
  let x = 2166136261;  // FNV-1a
  for (let i = 0; i < name.length; i++) x = Math.imul(x ^ name.charCodeAt(i), 16777619);
  const u = x >>> 0;
  return `hsl(${u % 360}, ${42 + (u >>> 9) % 20}%, ${40 + (u >>> 17) % 12}%)`;
}

/** Ticks' text: the unit follows the magnitude of the times on screen, the decimals the tick step, so neighbouring
 * ticks always read differently (deep zooms far from t0 included). */
export function fmtTick(t, step, mag) {
  const [unit, name] = mag >= 1 ? [1, "s"] : mag >= 1e-3 ? [1e-3, "ms"] : mag >= 1e-6 ? [1e-6, "µs"] : [1e-9, "ns"];
  const dec = Math.max(0, Math.min(9, Math.ceil(-Math.log10(step / unit) - 1e-9)));
  return `${(t / unit).toFixed(dec)} ${name}`;
}

/** The smallest 1, 2 or 5 times a power of ten that is at least x. */
function niceStep(x) {
  const p = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 5, 10]) if (m * p >= x * (1 - 1e-9)) return m * p;
  return 10 * p;
}

const num = (x) => (typeof x === "number" && Number.isFinite(x) ? x : null);

export class TimelinePanel extends Panel {
  /** onJumpContext(ctx): a context, compile or run span was clicked; onJumpRewrite(ctx, rw): a pass was clicked.
   * selection() -> {ctx, rw}: what the page has selected, outlined (call redraw() when it changes). */
  constructor(el, {onJumpContext, onJumpRewrite, selection = () => ({ctx: null, rw: null})}) {
    super(el);
    this.onJumpContext = onJumpContext;
    this.onJumpRewrite = onJumpRewrite;
    this.selection = selection;
    this.trace = null;
    this.data = null;
    this.rows = [];  // [{lane, label, y, spans: [{s, e, kind, ctx, rw, name, color, ...}]}]
    this.extent = [0, 1];  // the whole trace, seconds
    this.view = {t0: 0, t1: 1};  // what the canvas shows
    this.zoomed = false;  // the user moved the view: a live refresh keeps it
    this.hits = [];  // the spans drawn: {x0, x1, y0, y1, kind, ctx, rw, name} in CSS px relative to the canvas
    this.hover = null;
    this.frame = 0;
    this.canvas = null;
    this.memLane = new MemoryLane(LABEL_W, ROW_H);  // static/memlane.js: bytes in use, below the other lanes
    this.devLanes = [];  // ... and one lane per other device (CL), after the CPU's
    this.rowH = ROW_H;
    this.search = {query: "", matches: [], cur: -1};  // the spans whose name holds the query, in time order
    this.resizer = typeof ResizeObserver === "function" ? new ResizeObserver(() => this.redraw()) : null;
  }

  async show(trace) {
    if (trace === null) { this.empty("No trace."); return; }
    const data = await this.load(() => api.timeline(trace));
    if (data === undefined) return;
    const sameTrace = trace === this.trace;
    this.trace = trace;
    this.data = data;
    this._model(data);
    if (!this.rows.some((r) => r.spans.length)) { this.empty("No timed events in this trace."); return; }
    if (!this.canvas || !this.el.contains(this.canvas)) this._build();
    // a live refresh keeps the range the user zoomed to; anything else shows the whole trace
    if (!(sameTrace && this.zoomed)) this.fit();
    this.find(this.search.query);  // the new model's matches
    this._setHover(null, null);  // its span is gone with the old model
    this._head();
    this.redraw();
  }

  /** Show the whole trace. */
  fit() {
    this.zoomed = false;
    this.view = {t0: this.extent[0], t1: this.extent[1]};
    this.redraw();
  }

  /** Show the times [t0, t1] (seconds since the trace's t0), within the zoom limits. */
  setView(t0, t1) {
    this.zoomed = true;
    this.view = this._clamp(t0, t1);
    this.redraw();
  }

  /** Draw on the next frame (several changes in one frame draw once). */
  redraw() {
    if (this.frame || !this.canvas) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      const hv = this.hover;  // the memory lane's hovered span, which the panel's own passes do not keep
      this.draw();
      this.memLane.draw(this, hv);
      for (const lane of this.devLanes) lane.draw(this, hv);
    });
  }

  // ------------------------------------------------------------ model

  _model(d) {
    const contexts = Array.isArray(d.contexts) ? d.contexts : [];
    const rw = d.rewrites || {};
    const ids = rw.id || [];
    const compiles = Array.isArray(d.compiles) ? d.compiles : [];
    const runs = Array.isArray(d.runs) ? d.runs : [];
    const end = num(d.end) ?? 0;
    const ctxById = new Map(contexts.map((c) => [c.id, c]));
    this.ctxById = ctxById;
    const rows = [];
    // contexts: rows per depth; an unfinished one reaches the trace's end
    const byDepth = [];
    for (const c of contexts) {
      const s = num(c.start);
      if (s === null) continue;
      const depth = Math.max(0, num(c.depth) ?? 0);
      (byDepth[depth] = byDepth[depth] || []).push({s, e: Math.max(s, num(c.end) ?? end), kind: "context",
        ctx: c.id, rw: null, name: String(c.name ?? ""), ckind: String(c.kind ?? "context"), open: num(c.end) === null,
        color: KIND_COLORS[c.kind] || KIND_COLORS.context});
    }
    // a depth's contexts that overlap (kernels compiled ahead of their runs: each begins at its optimize, up to
    // COMPILE_AHEAD kernels before its run) get rows of their own below it
    for (let i = 0; i < byDepth.length; i++) {
      packSpans(sortSpans(byDepth[i] || []), MAX_CONTEXT_ROWS).forEach((spans, k) =>
        rows.push({lane: "contexts", label: i === 0 && k === 0 ? "contexts" : "", spans}));
    }
    // passes: packed into rows, a pass that starts before the row's last one ended goes below (nested rewrites)
    const names = (rw.names || []).map((n) => String(n));
    const colors = names.map(passColor);
    const passes = [];
    for (let i = 0; i < ids.length; i++) {
      const s = num(rw.start[i]);
      if (s === null) continue;
      const k = rw.name[i];
      passes.push({s, e: s + Math.max(0, num(rw.dur[i]) ?? 0), kind: "pass", ctx: rw.ctx[i], rw: ids[i],
        name: names[k] ?? "?", matches: rw.matches ? rw.matches[i] : null, open: false,
        color: colors[k] ?? "#768390"});
    }
    const packed = packSpans(sortSpans(passes), MAX_PASS_ROWS);
    packed.forEach((spans, i) => rows.push({lane: "passes", label: i === 0 ? "passes" : "", spans}));
    const named = (c) => { const x = ctxById.get(c); return x ? String(x.name ?? "") : `context #${c}`; };
    const simple = (list, kind, color, nameOf) => sortSpans(list.filter((x) => num(x.start) !== null).map((x) => ({
      s: x.start, e: x.start + Math.max(0, num(x.dur) ?? 0), kind, ctx: x.ctx, rw: null, name: nameOf(x), color})));
    // old traces have no timed compiles or runs: their lanes are left out
    if (compiles.length) {
      // two compiles at once (the compile worker and the thread that would wait for it) get a row each
      const spans = simple(compiles, "compile", COMPILE_COLOR, (x) => named(x.ctx));
      packSpans(spans, MAX_COMPILE_ROWS).forEach((row, i) =>
        rows.push({lane: "compile", label: i === 0 ? "LLVM compile" : "", spans: row}));
    }
    if (runs.length) {
      rows.push({lane: "runs", label: "runs", spans: simple(runs, "run", RUN_COLOR,
        (x) => String(x.kname ?? named(x.ctx)))});
    }
    rows.push(...this.memLane.model(d));
    this.devLanes = MemoryLane.devices(d).map((dev) => new MemoryLane(LABEL_W, ROW_H, dev));
    for (const lane of this.devLanes) rows.push(...lane.model(d));
    this.rows = rows;
    this.minHeight = this._layout(ROW_H);
    let hi = end;
    for (const r of rows) for (const sp of r.spans) hi = Math.max(hi, sp.e);
    this.extent = [0, hi > 0 ? hi : 1e-6];
    this.counts = {contexts: contexts.length, passes: passes.length, compiles: compiles.length, runs: runs.length};
  }

  /** Place the rows rowH px tall (the memory lane's too); the canvas height they take. */
  _layout(rowH) {
    let y = AXIS_H + 2;
    let prev = null;
    for (const r of this.rows) {
      if (prev !== null && r.lane !== prev) y += LANE_GAP;
      r.y = y;
      y += rowH;
      prev = r.lane;
    }
    this.rowH = this.memLane.rowH = rowH;
    for (const lane of this.devLanes) lane.rowH = rowH;
    this.height = y + 4;
    return this.height;
  }

  /** The row height that fills `avail` px of canvas (ROW_H at least, MAX_ROW_H at most). */
  _rowHFor(avail) {
    const gaps = new Set(this.rows.map((r) => r.lane)).size - 1;
    const free = avail - AXIS_H - 6 - Math.max(0, gaps) * LANE_GAP;
    return Math.max(ROW_H, Math.min(MAX_ROW_H, Math.floor(free / Math.max(1, this.rows.length))));
  }

  // ------------------------------------------------------------ search

  /** Mark the spans whose name holds `query` (any case; "" clears): the others are drawn dimmed. Their number. */
  find(query) {
    const q = String(query ?? "").trim().toLowerCase();
    const was = this.search.matches[this.search.cur];
    const matches = q ? this.rows.flatMap((r) => r.spans).filter((sp) => sp.name.toLowerCase().includes(q))
      .sort((a, b) => a.s - b.s || a.e - b.e) : [];
    // a live refresh keeps the span the user jumped to (the same kind, context and start)
    const cur = was ? matches.findIndex((sp) => sp.kind === was.kind && sp.ctx === was.ctx && sp.s === was.s) : -1;
    this.search = {query: q, matches, cur};
    this._searchCount();
    this.redraw();
    return matches.length;
  }

  /** Jump to the next match (dir -1: the previous): the view centres it, zoomed in until it is 60 px wide. */
  nextMatch(dir = 1) {
    const {matches, cur} = this.search;
    if (!matches.length) return null;
    const i = cur < 0 ? (dir > 0 ? 0 : matches.length - 1) : (cur + dir + matches.length) % matches.length;
    this.search.cur = i;
    const sp = matches[i], dur = Math.max(sp.e - sp.s, MIN_VIEW_S / 10);
    const plot = this._plotW();
    let w = this.view.t1 - this.view.t0;
    if (dur > 0.8 * w) w = dur / 0.6;  // wider than the view: all of it, with room either side
    else if ((dur / w) * plot < 60) w = Math.max(dur / 0.6, (dur * plot) / 60);  // too thin to read: zoom in
    const mid = (sp.s + sp.e) / 2;
    this.setView(mid - w / 2, mid + w / 2);
    this._searchCount();
    return sp;
  }

  _searchCount() {
    const {query, matches, cur} = this.search;
    const n = matches.length;
    this.el.dataset.searchHits = String(n);
    this.el.dataset.searchCur = String(cur);
    if (!this.countEl) return;
    put(this.countEl, !query ? "" : !n ? "no spans" : cur < 0 ? `${n} span${n === 1 ? "" : "s"}` : `${cur + 1} / ${n}`);
  }

  // ------------------------------------------------------------ DOM

  /** A state replaced the canvas: forget it and what was drawn on it. */
  cleared() {
    if (this.resizer && this.wrap) this.resizer.unobserve(this.wrap);
    this.canvas = this.wrap = this.tip = this.countEl = null;
    this.hits = [];
    this.hover = null;
  }

  _build() {
    this.canvas = h("canvas", {class: "timeline-canvas"});
    this.tip = h("div", {class: "timeline-tip", role: "tooltip"});
    this.tip.hidden = true;
    this.wrap = h("div", {class: "timeline-wrap"}, this.canvas, this.tip);
    this.headEl = h("div", {class: "panel-head"});
    const fitBtn = h("button", {type: "button", class: "timeline-fit", title: "Show the whole trace (double click)"},
      "Fit");
    fitBtn.addEventListener("click", () => this.fit());
    const find = h("input", {type: "search", class: "timeline-search", placeholder: "Find spans (kernel, pass)",
      spellcheck: "false", autocomplete: "off", "aria-label": "Find spans by name",
      title: "Spans whose name holds this; Enter: next, Shift+Enter: previous"});
    find.value = this.search.query;
    find.addEventListener("input", () => this.find(find.value));
    find.addEventListener("keydown", (ev) => {
      if (ev.key !== "Enter") return;
      ev.preventDefault();
      if (find.value.trim().toLowerCase() !== this.search.query) this.find(find.value);
      this.nextMatch(ev.shiftKey ? -1 : 1);
    });
    this.countEl = h("span", {class: "timeline-search-count muted small", role: "status"});
    const legend = legendBox([...[...Object.entries(KIND_COLORS), ["LLVM compile", COMPILE_COLOR], ["run", RUN_COLOR]]
      .map(([label, color]) => ({label, color})),
    {label: "rewrite passes: a hue per name", color: `linear-gradient(90deg, ${passColor("a")}, ${passColor("b")})`},
    {label: "selected", color: "var(--accent)", look: "ring"}, {label: "found", color: MATCH_COLOR, look: "ring"}],
    {cls: "timeline-legend muted"});
    put(this.el, h("div", {class: "timeline-top"}, this.headEl, find, this.countEl, fitBtn), this.wrap, legend,
      h("p", {class: "muted small"}, "Wheel: zoom around the pointer · drag: pan · double click: fit · "
        + "click a span to open its context or rewrite."));
    this._wire();
    if (this.resizer) this.resizer.observe(this.wrap);
  }

  _head() {
    const c = this.counts;
    const pl = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
    put(this.headEl, h("div", {class: "title"}, "Timeline"),
      h("div", {class: "sub muted"}, `${pl(c.contexts, "context")} · ${pl(c.passes, "pass", "passes")}`
        + ` · ${pl(c.compiles, "compile")} · ${pl(c.runs, "run")} · ${fmtSeconds(this.extent[1])}`));
  }

  _wire() {
    const cv = this.canvas;
    let drag = null;
    cv.addEventListener("wheel", (ev) => this._wheel(ev), {passive: false});
    cv.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0) return;
      cv.setPointerCapture(ev.pointerId);
      drag = {x: ev.clientX, view: {...this.view}, moved: false};
    });
    cv.addEventListener("pointermove", (ev) => {
      const p = this._point(ev);
      if (drag && (drag.moved || Math.abs(ev.clientX - drag.x) >= DRAG_PX)) {
        drag.moved = true;
        cv.classList.add("dragging");
        const dt = ((ev.clientX - drag.x) * (drag.view.t1 - drag.view.t0)) / this._plotW();
        this.setView(drag.view.t0 - dt, drag.view.t1 - dt);
        this._setHover(null, p);
        return;
      }
      this._setHover(this.hitAt(p.x, p.y), p);
    });
    const release = (ev) => {
      if (!drag) return;
      const clicked = !drag.moved;
      drag = null;
      cv.classList.remove("dragging");
      if (clicked && ev.type === "pointerup") {
        const p = this._point(ev);
        this._click(this.hitAt(p.x, p.y));
      }
    };
    cv.addEventListener("pointerup", release);
    cv.addEventListener("pointercancel", release);
    cv.addEventListener("pointerleave", () => { if (!drag) this._setHover(null, null); });
    cv.addEventListener("dblclick", (ev) => { ev.preventDefault(); this.fit(); });
  }

  _point(ev) {
    const r = this.canvas.getBoundingClientRect();
    return {x: ev.clientX - r.left, y: ev.clientY - r.top};
  }

  _plotW() {
    return Math.max(1, (this.cssW || 0) - LABEL_W - PAD_R);
  }

  _clamp(t0, t1) {
    const [lo, hi] = this.extent;
    const full = hi - lo;
    const span = Math.min(full, Math.max(MIN_VIEW_S, t1 - t0 || full));
    const a = Math.max(lo, Math.min(hi - span, (t0 + t1) / 2 - span / 2));
    return {t0: a, t1: a + span};
  }

  _wheel(ev) {
    ev.preventDefault();
    const {t0, t1} = this.view;
    const span = t1 - t0;
    const plot = this._plotW();
    const px = ev.deltaMode === 1 ? 16 : ev.deltaMode === 2 ? plot : 1;  // lines / pages to pixels
    if (Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {  // a sideways swipe pans
      const dt = (ev.deltaX * px * span) / plot;
      this.setView(t0 + dt, t1 + dt);
      return;
    }
    const x = Math.max(0, Math.min(plot, this._point(ev).x - LABEL_W));
    const at = t0 + (x / plot) * span;  // the time under the pointer stays under it
    const [lo, hi] = this.extent;
    const next = Math.min(hi - lo, Math.max(MIN_VIEW_S, span * Math.exp(ev.deltaY * px * 0.0015)));
    const a = at - (x / plot) * next;
    this.zoomed = true;
    // at the edges the zoom keeps the pointer's time and the view inside the trace (no clamp by the middle)
    const lo2 = Math.max(lo, Math.min(hi - next, a));
    this.view = {t0: lo2, t1: lo2 + next};
    this._setHover(null, null);
    this.redraw();
  }

  _setHover(hit, p) {
    const same = hit === this.hover || (hit && this.hover && hit.kind === this.hover.kind && hit.ctx === this.hover.ctx
      && hit.rw === this.hover.rw && hit.x0 === this.hover.x0 && hit.y0 === this.hover.y0);
    if (!same) {
      this.hover = hit;
      this.redraw();
    }
    if (!this.tip) return;
    this.canvas.classList.toggle("over-span", !!hit);
    if (!hit || !p) { this.tip.hidden = true; return; }
    this.tip.textContent = this._describe(hit.span).join("\n");
    this.tip.hidden = false;
    // beside the pointer, kept inside the panel
    const w = this.tip.offsetWidth, hgt = this.tip.offsetHeight;
    const x = p.x + 14 + w > this.cssW ? Math.max(0, p.x - 10 - w) : p.x + 14;
    const y = p.y + 16 + hgt > this.cssH ? Math.max(0, p.y - 8 - hgt) : p.y + 16;
    this.tip.style.left = `${x}px`;
    this.tip.style.top = `${y}px`;
  }

  _describe(sp) {
    const dur = sp.open ? "not ended" : fmtSeconds(sp.e - sp.s);
    const when = `start ${fmtSeconds(sp.s)} · duration ${dur}`;
    const ctxName = () => { const c = this.ctxById.get(sp.ctx); return c ? ` ${c.name}` : ""; };
    switch (sp.kind) {
      case "memory": return (this.devLanes.find((x) => x.device === sp.dev) || this.memLane).describe(sp);
      case "context": return [sp.name, `${sp.ckind} context #${sp.ctx}`, when];
      case "pass": return [sp.name, `pass (rewrite #${sp.rw}) in context #${sp.ctx}${ctxName()}`, when,
        `${sp.matches ?? "?"} match${sp.matches === 1 ? "" : "es"}`];
      case "compile": return [`LLVM compile: ${sp.name}`, `kernel context #${sp.ctx}`, when];
      default: return [`run: ${sp.name}`, `kernel context #${sp.ctx}`, when];
    }
  }

  _click(hit) {
    if (!hit) return;
    if (hit.kind === "pass") this.onJumpRewrite(hit.ctx, hit.rw);
    else if (hit.ctx !== null && hit.ctx !== undefined) this.onJumpContext(hit.ctx);
  }

  /** The span drawn at (x, y) (CSS px relative to the canvas), or one within a few px of it in that row. */
  hitAt(x, y) {
    let best = null, bestD = HOVER_SLACK + 1;
    for (const hit of this.hits) {
      if (y < hit.y0 || y >= hit.y1) continue;
      const d = x < hit.x0 ? hit.x0 - x : x > hit.x1 ? x - hit.x1 : 0;
      // inside: the narrowest wins (an outer pass drawn under a nested one); outside: the nearest
      if (d < bestD || (d === 0 && bestD === 0 && hit.x1 - hit.x0 < best.x1 - best.x0)) { best = hit; bestD = d; }
    }
    return best;
  }

  // ------------------------------------------------------------ drawing

  /** Draw now: the passes below, back to front. */
  draw() {
    const f = this._begin();
    if (!f) return;
    this._drawAxis(f);
    this._drawSpans(f);
    this._drawLanes(f);
  }

  /** Size the canvas and clear it; what the passes share: sizes, colors, the time -> x map. Null while hidden. */
  _begin() {
    const cv = this.canvas;
    if (!cv || !this.wrap) return null;
    const W = this.wrap.clientWidth;
    if (!W) return null;  // hidden: the resize observer draws when the panel shows again
    // the rows fill the panel's height (style.css: the wrap takes what the panel leaves, at least the rows' least)
    this.wrap.style.minHeight = `${this.minHeight}px`;
    const avail = this.wrap.clientHeight;
    if (this._rowHFor(avail) !== this.rowH) this._layout(this._rowHFor(avail));
    const H = Math.max(this.height, avail);
    const dpr = window.devicePixelRatio || 1;
    if (this.cssW !== W || this.cssH !== H || this.dpr !== dpr) {
      this.cssW = W; this.cssH = H; this.dpr = dpr;
      cv.width = Math.round(W * dpr);
      cv.height = Math.round(H * dpr);
      cv.style.width = `${W}px`;
      cv.style.height = `${H}px`;
    }
    const css = getComputedStyle(this.el);
    const v = (name, dflt) => css.getPropertyValue(name).trim() || dflt;
    const colors = {bg: v("--bg", "#0d1117"), bg1: v("--bg1", "#131922"), line: v("--line", "#2b3544"),
      fg: v("--fg", "#d5dde7"), dim: v("--fg-dim", "#8592a3"), accent: v("--accent", "#58a6ff")};
    const g = cv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = colors.bg;
    g.fillRect(0, 0, W, H);
    g.font = FONT;
    g.textBaseline = "middle";
    const {t0, t1} = this.view;
    const plot = this._plotW();
    const k = plot / (t1 - t0);
    return {g, W, H, colors, t0, t1, plot, charW: g.measureText("0").width || 6.6, X: (t) => LABEL_W + (t - t0) * k,
      right: LABEL_W + plot};
  }

  /** The time axis: ticks about every 90 px, grid lines through the lanes. */
  _drawAxis({g, W, H, colors, t0, t1, plot, charW, X}) {
    const step = niceStep((t1 - t0) / Math.max(2, plot / 90));
    const mag = Math.max(Math.abs(t0), Math.abs(t1));
    g.fillStyle = colors.bg1;
    g.fillRect(0, 0, W, AXIS_H);
    g.strokeStyle = colors.line;
    g.lineWidth = 1;
    g.beginPath();
    g.moveTo(0, AXIS_H - 0.5);
    g.lineTo(W, AXIS_H - 0.5);
    g.textAlign = "left";
    const ticks = [];
    for (let i = Math.ceil(t0 / step); i * step <= t1 + step * 1e-9; i++) {
      const x = Math.round(X(i * step)) + 0.5;
      g.moveTo(x, AXIS_H - 5);
      g.lineTo(x, H);
      ticks.push([x, fmtTick(i * step, step, mag)]);
    }
    g.stroke();
    g.fillStyle = colors.dim;
    for (const [x, label] of ticks) if (x + 3 + label.length * charW <= W) g.fillText(label, x + 3, AXIS_H / 2);
  }

  /** The spans, clipped to the plot, then outlines of the selection and the hovered span; keeps them in this.hits. */
  _drawSpans({g, H, colors, charW, X, right}) {
    g.save();
    g.beginPath();
    g.rect(LABEL_W, AXIS_H, right - LABEL_W, H - AXIS_H);
    g.clip();
    const hits = [];
    const sel = this.selection() || {};
    const marked = [];  // the selected context and rewrite, outlined once everything is drawn
    const rowH = this.rowH, two = rowH >= TWO_LINES_H;
    const {query, matches, cur} = this.search;
    const found = query ? new Set(matches) : null;  // while searching, the other spans are dimmed
    const lit = [];  // the matches drawn, outlined on top
    for (const row of this.rows) {
      const y0 = row.y + 1, hgt = rowH - 2;
      let lastPx = -Infinity;  // spans under a pixel wide: one per pixel column is drawn (and can be hit)
      for (const sp of row.spans) {
        let x0 = X(sp.s), x1 = X(sp.e);
        if (x1 < LABEL_W - 1 || x0 > right + 1) continue;
        if (x1 - x0 < 1) {
          const px = Math.floor(x0);
          if (px <= lastPx) continue;
          lastPx = px;
          x0 = px;
          x1 = px + 1;
        }
        x0 = Math.max(x0, LABEL_W);
        x1 = Math.min(x1, right);
        if (x1 <= x0) continue;
        const w = x1 - x0;
        g.globalAlpha = found && !found.has(sp) ? DIM_ALPHA : 1;
        g.fillStyle = sp.color;
        g.fillRect(x0, y0, w > 4 ? w - 1 : w, hgt);  // a 1 px gap keeps neighbours apart
        if (w > 3 * charW) {
          const n = Math.floor((w - 6) / charW);
          const cut = (t) => (t.length > n ? `${t.slice(0, Math.max(1, n - 1))}…` : t);
          g.fillStyle = "#f0f6fc";
          g.fillText(cut(sp.name), x0 + 3, two ? row.y + rowH / 2 - 7 : row.y + rowH / 2);
          if (two) g.fillText(cut(sp.open ? "not ended" : fmtSeconds(sp.e - sp.s)), x0 + 3, row.y + rowH / 2 + 7);
        }
        g.globalAlpha = 1;
        const hit = {x0, x1, y0, y1: y0 + hgt, kind: sp.kind, ctx: sp.ctx, rw: sp.rw, name: sp.name, span: sp};
        hits.push(hit);
        if (found && found.has(sp)) lit.push(hit);
        if ((sp.kind === "context" && sp.ctx === sel.ctx) || (sp.kind === "pass" && sp.rw === sel.rw)) marked.push(hit);
      }
    }
    const outline = (x, color) => {
      g.strokeStyle = color;
      g.lineWidth = 1.5;
      g.strokeRect(x.x0 + 0.75, x.y0 + 0.75, Math.max(1, x.x1 - x.x0 - 1.5), x.y1 - x.y0 - 1.5);
    };
    for (const x of lit) outline(x, x.span === matches[cur] ? "#ffffff" : MATCH_COLOR);
    for (const x of marked) outline(x, colors.accent);
    const hv = this.hover && hits.find((x) => x.span === this.hover.span);
    if (hv) outline(hv, "#ffffff");
    g.restore();
    this.hits = hits;
    if (this.hover) this.hover = hv || null;
  }

  /** The lane labels over their column, lines between lanes, and the view's width in time. */
  _drawLanes({g, W, H, colors, t0, t1}) {
    g.fillStyle = colors.bg1;
    g.fillRect(0, AXIS_H, LABEL_W, H - AXIS_H);
    g.strokeStyle = colors.line;
    g.beginPath();
    g.moveTo(LABEL_W - 0.5, 0);
    g.lineTo(LABEL_W - 0.5, H);
    let prev = null;
    for (const row of this.rows) {
      if (prev !== null && row.lane !== prev) {
        const y = Math.round(row.y - LANE_GAP / 2) + 0.5;
        g.moveTo(0, y);
        g.lineTo(W, y);
      }
      prev = row.lane;
    }
    g.stroke();
    g.fillStyle = colors.fg;
    g.textAlign = "left";
    for (const row of this.rows) if (row.label) g.fillText(row.label, 6, row.y + this.rowH / 2);
    g.fillStyle = colors.dim;
    g.fillText(fmtSeconds(t1 - t0), 6, AXIS_H / 2);  // the width of the view
  }
}

function sortSpans(list) {
  return list.sort((a, b) => a.s - b.s || b.e - a.e);
}

/** Spans sorted by start, packed into rows: each in the first row whose spans all ended by its start, a new row while
 * there are fewer than `max`, else the last (at least one row, maybe empty). */
function packSpans(spans, max) {
  const rows = [];
  const ends = [];
  for (const sp of spans) {
    let r = ends.findIndex((e) => e <= sp.s);
    if (r < 0 && ends.length < max) { r = ends.length; ends.push(-Infinity); rows.push([]); }
    if (r < 0) r = ends.length - 1;
    ends[r] = Math.max(ends[r], sp.e);
    rows[r].push(sp);
  }
  if (!rows.length) rows.push([]);
  return rows;
}
