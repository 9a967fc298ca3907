// The diff panel: two points A and B, each picked with controls (trace, context, rewrite with its match count and a
// step, or a context's final AST) or typed as t:r:k / t:r:end / t:c; the unified text diff and the graph diff (the
// union of both graphs laid out by the server, drawn by graph.js: B's nodes, only-B ringed, only-A ghosted) side by
// side, with the only-A / only-B node lists under the drawing. "first divergence" compares two traces (GET /api/compare):
// A and B go to where they first diverge, and the kernels that differ are listed, each a way to their final ASTs.
import {api} from "./api.js";
import {append, h, put} from "./dom.js";
import {GraphView} from "./graph.js";
import {Panel} from "./panel.js";
import {nodeChip} from "./step.js";

const POINT_RE = /^\d+:\d+(:(\d+|end))?$/;
const KIND_ICON = {schedule: "S", kernel: "K"};
const FINAL = "final";

/** A point string as {trace, rw, step} (step: a number or "end") or {trace, ctx} (a context's final AST); null if
 * it is not one. */
function parsePoint(p) {
  if (!POINT_RE.test(p || "")) return null;
  const [t, x, k] = p.split(":");
  if (k === undefined) return {trace: Number(t), ctx: Number(x), rw: null, step: null};
  return {trace: Number(t), ctx: null, rw: Number(x), step: k === "end" ? "end" : Number(k)};
}

/** Contexts in tree order (parents before children, depth first) with their depth; the empty root "default"
 * context is left out as in the sidebar. */
function treeOrder(list) {
  const ids = new Set(list.map((c) => c.id));
  const kids = new Map();
  for (const c of list) {
    const p = ids.has(c.parent) ? c.parent : null;
    if (!kids.has(p)) kids.set(p, []);
    kids.get(p).push(c);
  }
  const out = [];
  const walk = (c, depth) => {
    const skip = c.kind === "default" && c.parent === null && !c.rewrites.length;
    if (!skip) out.push({c, depth});
    for (const k of kids.get(c.id) || []) walk(k, skip ? depth : depth + 1);
  };
  for (const root of kids.get(null) || []) walk(root, 0);
  return out;
}

/** " · shape 8 2 2": a kernel's shape after its opts (shape_colors' sizes, as the sidebar shows them). */
function shapeSuffix(c) {
  if (!Array.isArray(c.shape_colors) || !c.shape_colors.length) return "";
  return ` · shape ${c.shape_colors.map((p) => (Array.isArray(p) ? String(p[0] ?? "") : "")).join(" ")}`;
}

/** Whether a context or one below it has a finished rewrite (the API's t:c point needs one). */
function hasFinal(list, ctx) {
  const inside = new Set([ctx.id]);
  for (const c of list) if (inside.has(c.parent)) inside.add(c.id);  // record order: parents first
  return list.some((c) => inside.has(c.id) && c.rewrites.some((r) => r.ended));
}

/** The controls of one point (a Panel for its contexts' answers, which a newer pick drops). onPick(spec) when the
 * user changes any of them. */
class PointPicker extends Panel {
  constructor(which, {traces, contexts, onPick}) {
    super(h("div", {class: "point-ctl"}));
    this.which = which;
    this.traces = traces;
    this.contexts = contexts;
    this.onPick = onPick;
    this.v = null;  // {trace, ctx, rw, step, final}
    this.list = [];  // contexts of v.trace
    this.wanted = null;  // the trace last asked for (set at once; v.trace only once its contexts have loaded)
    // data-pick, not data-point: the text boxes are [data-point=a|b]
    const ctl = (tag, attrs) => h(tag, {...attrs, dataset: {pick: which, ctl: attrs.ctl}, ctl: undefined});
    this.traceSel = ctl("select", {ctl: "trace", title: `${which.toUpperCase()}: trace`});
    this.ctxSel = ctl("select", {ctl: "ctx", title: `${which.toUpperCase()}: context (K: kernel, S: schedule)`});
    this.whatSel = ctl("select", {ctl: "what", title: `${which.toUpperCase()}: a rewrite (matches) or the final AST`});
    this.range = ctl("input", {ctl: "range", type: "range", min: "0", max: "0", value: "0", title: "step"});
    this.num = ctl("input", {ctl: "step", type: "number", min: "0", value: "0", class: "step-num", title: "step"});
    this.end = ctl("input", {ctl: "end", type: "checkbox", title: "the rewrite's result (t:r:end)"});
    this.stepBox = h("span", {class: "point-step"}, this.range, this.num,
      h("label", {class: "inline small"}, this.end, "end"));
    this.traceSel.addEventListener("change", () => this._onTrace(Number(this.traceSel.value)));
    this.ctxSel.addEventListener("change", () => this._onCtx(Number(this.ctxSel.value)));
    this.whatSel.addEventListener("change", () => this._onWhat(this.whatSel.value));
    // a pick is a diff request and a history entry: while the slider is dragged or "12" typed, wait for a pause
    let timer = 0;
    const later = (el, other) => {
      if (el.value === "") return;
      other.value = el.value;
      clearTimeout(timer);
      timer = setTimeout(() => this._onStep(Number(el.value)), 200);
    };
    this.range.addEventListener("input", () => later(this.range, this.num));
    this.num.addEventListener("input", () => later(this.num, this.range));
    // arrow keys move this slider, not the main view's step (app.js listens on the document)
    this.range.addEventListener("keydown", (ev) => ev.stopPropagation());
    this.end.addEventListener("change", () => this._onEnd(this.end.checked));
    append(this.el, [this.traceSel, this.ctxSel, this.whatSel, this.stepBox]);
  }

  /** The point string of the controls' state. */
  spec() {
    const v = this.v;
    if (!v || v.ctx === null) return "";
    if (v.final) return `${v.trace}:${v.ctx}`;
    if (v.rw === null) return "";
    return `${v.trace}:${v.rw}:${v.step}`;
  }

  /** Show a point string in the controls (from a button, a deep link or the text box); does not call onPick. */
  async show(spec) {
    const p = parsePoint(spec);
    if (!p) return;
    if (spec === this.spec()) return;
    this.wanted = p.trace;
    const list = await this._load(p.trace);
    if (list === undefined) return;
    let ctx = p.ctx;
    if (p.rw !== null) ctx = (list.find((c) => c.rewrites.some((r) => r.id === p.rw)) || {id: null}).id;
    this.v = {trace: p.trace, ctx, rw: p.rw, step: p.step ?? 0, final: p.rw === null};
    this.render();
  }

  /** The contexts of trace t (none where they cannot be had), kept as this.list; undefined where a newer pick came. */
  async _load(t) {
    const list = await this.load(() => this.contexts(t).catch(() => []));
    if (list !== undefined) this.list = list;
    return list;
  }

  _ctx(id = this.v && this.v.ctx) { return this.list.find((c) => c.id === id) || null; }

  _rewrite() {
    const c = this._ctx();
    return c && this.v.rw !== null ? c.rewrites.find((r) => r.id === this.v.rw) || null : null;
  }

  renderTraces() {
    put(this.traceSel, ...this.traces().map((t) => h("option", {value: t.id}, `#${t.id} ${t.name}`)));
    this.traceSel.value = this.v ? String(this.v.trace) : "";
  }

  /** Fill the selects and the step controls from this.v (text set as text nodes: names come from traces). */
  render() {
    const v = this.v;
    this.renderTraces();
    put(this.ctxSel, ...treeOrder(this.list).map(({c, depth}) => h("option", {value: c.id},
      `${"\u00a0\u00a0".repeat(depth)}${KIND_ICON[c.kind] ?? "·"} ${c.name}${shapeSuffix(c)}`)));
    this.ctxSel.value = v && v.ctx !== null ? String(v.ctx) : "";
    const c = this._ctx();
    const opts = (c ? c.rewrites : []).map((r) => h("option", {value: r.id},
      `${r.name} · ${r.matches} match${r.matches === 1 ? "" : "es"}`));
    if (c && hasFinal(this.list, c)) {
      opts.push(h("option", {value: FINAL}, c.kind === "kernel" ? "kernel: final AST" : "final AST"));
    }
    put(this.whatSel, ...opts);
    this.whatSel.value = !v ? "" : v.final ? FINAL : v.rw === null ? "" : String(v.rw);
    const rw = this._rewrite();
    this.stepBox.hidden = !rw || v.final;
    const n = rw ? rw.matches : 0;
    this.range.max = this.num.max = String(n);
    const end = v && v.step === "end";
    const k = end ? n : Math.min(v ? v.step : 0, n);
    this.range.value = this.num.value = String(k);
    this.end.checked = end;
    this.range.disabled = this.num.disabled = end;
  }

  _pick() {
    const rw = this._rewrite();
    if (rw && this.v.step !== "end") this.v.step = Math.min(this.v.step, rw.matches);  // a step the rewrite has
    this.render();
    const s = this.spec();
    if (s) this.onPick(s);
  }

  /** Choose a rewrite in the context: keep the final AST if it was chosen, else one of the same name as before
   * (the same pass of the same kernel in another trace), else the first that changed something. */
  _chooseIn(c, rwName) {
    const v = this.v;
    if (v.final && hasFinal(this.list, c)) { v.rw = null; return; }
    v.final = false;
    const pick = (rwName && c.rewrites.find((r) => r.name === rwName)) || c.rewrites.find((r) => r.changed)
      || c.rewrites[0];
    if (pick) { v.rw = pick.id; return; }
    v.rw = null;
    v.final = hasFinal(this.list, c);
  }

  async _onTrace(t) {
    const old = this._ctx();
    const rwName = (this._rewrite() || {}).name;
    this.wanted = t;
    if (await this._load(t) === undefined) return;
    this.v = {...(this.v || {step: 0, final: false}), trace: t};
    // the same context (by kind and name, e.g. a kernel) in the other trace, else its first with rewrites
    const same = old && this.list.find((c) => c.kind === old.kind && c.name === old.name);
    const c = same || this.list.find((x) => x.rewrites.length) || null;
    this.v.ctx = c ? c.id : null;
    if (c) this._chooseIn(c, rwName); else this.v.rw = null;
    this._pick();
  }

  _onCtx(id) {
    const c = this._ctx(id);
    if (!c) return;
    const rwName = (this._rewrite() || {}).name;
    this.v.ctx = id;
    this._chooseIn(c, rwName);
    this._pick();
  }

  _onWhat(val) {
    this.v.final = val === FINAL;
    this.v.rw = this.v.final ? null : Number(val);
    this._pick();
  }

  _onStep(k) {
    const rw = this._rewrite();
    if (!rw || !Number.isFinite(k)) return;
    this.v.step = Math.max(0, Math.min(Math.trunc(k), rw.matches));
    this._pick();
  }

  _onEnd(on) {
    const rw = this._rewrite();
    this.v.step = on ? "end" : rw ? rw.matches : 0;
    this._pick();
  }
}

export class DiffPanel extends Panel {
  /** cur() -> {trace, rw, step, ctx} of the main view; traces() -> the served traces; onChange(a, b) when the
   * compared points change; onNode(id) when a node reference is clicked. */
  constructor(el, {cur, traces, onChange, onNode}) {
    super(el);
    this.cur = cur;
    this.traces = traces;
    this.onChange = onChange;
    this.onNode = onNode;
    this.a = "";
    this.b = "";
    this.ctxCache = new Map();  // trace -> contexts promise, for traces that no longer change
    this.gview = null;  // the drawn graph diff, made on first use (a GraphView measures its host)
    this.drawn = null;  // the last drawn answer's nodes by id
    this._build();
  }

  /** Contexts of trace t (kept once the trace has ended: a live trace grows). */
  contexts(t) {
    const entry = this.traces().find((x) => x.id === t);
    const frozen = entry && entry.status !== "live";
    if (frozen && this.ctxCache.has(t)) return this.ctxCache.get(t);
    const p = api.contexts(t);
    if (frozen) {
      this.ctxCache.set(t, p);
      p.catch(() => this.ctxCache.delete(t));
    }
    return p;
  }

  _build() {
    const text = (which) => {
      const input = h("input", {type: "text", class: "mono point", placeholder: "t:r:k", spellcheck: "false",
        title: "trace:rewrite:step (step may be 'end'), or trace:context for a kernel's final AST",
        dataset: {point: which}});
      input.addEventListener("change", () => this.set(which, input.value.trim()));
      input.addEventListener("keydown", (ev) => {
        if (ev.key !== "Enter") return;
        ev.preventDefault();
        this.set(which, input.value.trim());
      });
      return input;
    };
    this.aIn = text("a");
    this.bIn = text("b");
    const picker = (which) => new PointPicker(which, {traces: this.traces, contexts: (t) => this.contexts(t),
      onPick: (spec) => this.set(which, spec, {fromPicker: true})});
    this.aPick = picker("a");
    this.bPick = picker("b");
    const btn = (label, title, fn) => h("button", {type: "button", title, onclick: fn}, label);
    const here = () => this.cur();
    this.result = h("div", {class: "diff-result"});
    this.note = h("div", {class: "diff-divergence small"});  // what compare found (first divergence)
    // its own requests: a diff run while one is in flight does not cancel it
    this.divergence = new Panel(this.note);
    this.kernelList = h("div", {class: "diff-kernels small"});  // and the kernels that differ
    const row = (which, input, pick) => h("div", {class: `diff-point point-${which}`},
      h("div", {class: "point-line"}, h("b", {class: which === "a" ? "pa" : "pb"}, which.toUpperCase()), input,
        btn("here", `${which.toUpperCase()} = the current step`, () => this.setHere(which))),
      pick.el);
    put(this.el,
      h("div", {class: "panel-head"}, h("div", {class: "title"}, "Diff"),
        h("div", {class: "sub muted"},
          "Pick two points: a rewrite's step (or its end) or a context's final AST, in any trace.")),
      h("div", {class: "diff-points"}, row("a", this.aIn, this.aPick), row("b", this.bIn, this.bPick)),
      h("div", {class: "diff-quick"},
        btn("this step", "the step before vs the current step", () => {
          const c = here(); if (c.rw === null) return;
          this.setBoth(`${c.trace}:${c.rw}:${Math.max(0, c.step - 1)}`, `${c.trace}:${c.rw}:${c.step}`);
        }),
        btn("this rewrite", "the rewrite's input vs its result", () => {
          const c = here(); if (c.rw !== null) this.setBoth(`${c.trace}:${c.rw}:0`, `${c.trace}:${c.rw}:end`);
        }),
        btn("this kernel", "A = the current context's final AST", () => {
          const c = here(); if (c.ctx !== null) this.set("a", `${c.trace}:${c.ctx}`);
        }),
        btn("A → B", "B = A (then change what should differ, e.g. B's trace or kernel)", () => this.set("b", this.a)),
        btn("swap", "swap A and B", () => this.setBoth(this.b, this.a)),
        h("button", {type: "button", class: "first-divergence", onclick: () => this.firstDivergence(),
          hidden: document.documentElement.dataset.export === "yes",  // an export has one trace and no server
          title: "Compare A's trace with B's (pick B's trace above): A and B become where they first diverge; "
            + "the kernels that differ are listed"},
        "first divergence")),
      this.note,
      this.kernelList,
      this.result);
  }

  /** The traces of A and B: what each picker was last asked for (a trace just chosen whose contexts are still
   * loading counts), else its point's, else the main view's trace for A. */
  _pair() {
    const trace = (spec, pick) => pick.wanted ?? parsePoint(spec)?.trace ?? null;
    return [trace(this.a, this.aPick) ?? this.cur().trace, trace(this.b, this.bPick)];
  }

  /** Compare A's trace with B's (GET /api/compare) and set A and B to where they first diverge: the first differing
   * step of the diverging rewrite in each trace, else its input graphs (or results when the inputs are equal). */
  async firstDivergence() {
    const [ta, tb] = this._pair();
    const note = this.divergence;
    if (ta === null || tb === null || ta === tb) {
      note.empty("Pick another trace for B (its trace picker), then find the divergence.");
      return;
    }
    note.loading(`comparing traces ${ta} and ${tb}…`);
    const gen = note.begin();
    // stale: a newer request, or the user chose another trace for A or B meanwhile
    const stale = () => !note.fresh(gen) || String(this._pair()) !== String([ta, tb]);
    put(this.kernelList);
    delete this.kernelList.dataset.compared;
    let rep;
    try { rep = await api.compare(ta, tb); } catch (e) {
      if (!stale()) note.error(e.message);
      return;
    }
    if (stale()) return;
    this._showKernels(rep, ta, tb);
    const d = rep.first_divergence;
    if (!d) {
      note.empty(rep.same ? "The traces do not differ." : "No rewrite differs; see the kernels below.");
      return;
    }
    put(this.note, divergenceText(d));
    this.note.dataset.divergence = `${ta} ${tb}`;  // tests wait for it
    if (!d.a || !d.b) {  // in one trace only: show it against the other trace's current point
      const only = d.a ? `${ta}:${d.a.id}:0` : `${tb}:${d.b.id}:0`;
      if (d.a) this.set("a", only); else this.set("b", only);
      return;
    }
    // after the differing match (a trace with fewer matches: its last), else the inputs, else the results
    const k = (x) => (d.step ? Math.min(d.step.k, x.matches) : d.input_differs ? 0 : "end");
    this.setBoth(`${ta}:${d.a.id}:${k(d.a)}`, `${tb}:${d.b.id}:${k(d.b)}`);
  }

  /** The compare report's kernels that differ and those in one trace only, each with a button that diffs the two
   * final ASTs (t:c points) and a link to the kernel panel (a deep link: it may be in another trace than the main
   * view's). Names are text nodes: they come from traces. */
  _showKernels(rep, ta, tb) {
    const rows = differingKernels(rep);
    const total = (rep.kernels || []).length;
    const final = (t, c) => (c === null ? "" : `${t}:${c}`);
    const item = (r) => {
      const [pa, pb] = [final(ta, r.a), final(tb, r.b)];
      const diffBoth = () => (r.a !== null && r.b !== null ? this.setBoth(pa, pb) : this.set(pa ? "a" : "b", pa || pb));
      const [lt, lc, side] = r.a !== null ? [ta, r.a, "A"] : [tb, r.b, "B"];
      return h("li", {class: "diff-kernel", dataset: {kernel: r.name, kinds: r.kinds.join(" "),
        ratio: r.ratio === null ? "" : ratioText(r.ratio), a: pa, b: pb}},
      h("span", {class: "mono kname"}, r.name),
      r.bName !== r.name ? h("span", {class: "muted"}, " → ", h("span", {class: "mono"}, r.bName)) : null,
      ...r.kinds.map((k) => h("span", {class: `kdiff kdiff-${k}`}, kindLabel(k, r))),
      r.ratio === null ? null : h("span", {class: "kratio", title: "best run time of B / A"},
        `B/A ${ratioText(r.ratio)}×`),
      h("button", {type: "button", class: "kernel-asts", onclick: diffBoth,
        title: pa && pb ? "A and B = the two kernels' final ASTs" : `${side} = this kernel's final AST`},
      pa && pb ? "diff final ASTs" : `${side}: final AST`),
      h("a", {class: "kernel-link", href: `#t=${lt}&c=${lc}&p=kernel`, title: `${side}'s kernel in the Kernel panel`},
        `${side}'s kernel`));
    };
    const only = rows.filter((r) => r.a === null || r.b === null).length;
    put(this.kernelList,
      h("div", null, h("b", null, "kernels: "),
        `${rows.length - only} of ${total} in both traces differ in opts, source, beam or runtime`,
        only ? `; ${only} in one trace only` : ""),
      rows.length ? h("ul", {class: "kernel-diffs"}, ...rows.map(item)) : null);
    this.kernelList.dataset.compared = `${ta} ${tb}`;  // tests wait for it
  }

  /** The served traces changed (names, new ones): refresh the trace pickers. */
  tracesChanged() {
    this.aPick.renderTraces();
    this.bPick.renderTraces();
  }

  setHere(which) {
    const c = this.cur();
    if (c.rw !== null) this.set(which, `${c.trace}:${c.rw}:${c.step}`);
  }

  set(which, value, {fromPicker = false} = {}) {
    if (which === "a") this.a = value; else this.b = value;
    this._sync(fromPicker ? which : null);
    this.onChange(this.a, this.b);
    this.run();
  }

  setBoth(a, b, {notify = true} = {}) {
    this.a = a;
    this.b = b;
    this._sync();
    if (notify) this.onChange(this.a, this.b);
    this.run();
  }

  /** Show the points in the text boxes and the pickers (except the picker the change came from). */
  _sync(from = null) {
    this.aIn.value = this.a;
    this.bIn.value = this.b;
    if (from !== "a") this.aPick.show(this.a);
    if (from !== "b") this.bPick.show(this.b);
  }

  /** Fill in sensible defaults (the current rewrite's input vs result) when nothing is chosen yet. */
  ensureDefaults() {
    if (this.a && this.b) { this.run(); return; }
    const c = this.cur();
    if (c.trace === null || c.rw === null) {
      this.empty("Pick a rewrite, then choose A and B.", {slot: this.result});
      return;
    }
    this.setBoth(`${c.trace}:${c.rw}:0`, `${c.trace}:${c.rw}:end`);
  }

  async run() {
    const gen = this.begin();
    const {a, b} = this;
    if (!a || !b) return;
    const result = this.result;
    for (const [name, p] of [["A", a], ["B", b]]) {
      if (!POINT_RE.test(p)) {
        this.error(`${name}: "${p}" is not a point (t:r:k, t:r:end or t:c)`, result);
        return;
      }
    }
    delete result.dataset.shown;
    this.loading("comparing…", result);
    const missing = await this._noFinal([["A", a], ["B", b]]);
    if (!this.fresh(gen)) return;
    if (missing) {  // the server would answer 404: say why here instead of asking
      this.empty(missing, {slot: result});
      return;
    }
    // the text diff and the lists first (ms); the drawing's layout takes longer on big graphs (see "Drawn diff")
    const d = await this.load(() => api.diff(a, b), {gen, slot: result});
    if (d === undefined) return;
    const slot = h("div", {class: "diff-drawing"});
    this.loading("laying out the graph diff…", slot);
    this._show(d, slot);
    // (null: too many nodes to draw)
    const drawn = await this.load(async () => (await api.diff(a, b, {draw: true})).graph.drawn ?? null, {gen, slot});
    if (drawn === undefined) return;
    put(slot, this._drawing(drawn));
    if (drawn) this.gview.fit();
    this.result.dataset.shown = `${d.a} ${d.b}`;  // what is on screen (tests wait for it)
  }

  /** Why a t:c point has no final AST to compare (its context has no finished rewrite), or null. */
  async _noFinal(points) {
    for (const [name, spec] of points) {
      const p = parsePoint(spec);
      if (!p || p.ctx === null) continue;
      let list;
      try { list = await this.contexts(p.trace); } catch { continue; }  // the diff request will say what is wrong
      const c = list.find((x) => x.id === p.ctx);
      if (c && !hasFinal(list, c)) return `${name}: context ${p.ctx} has no finished rewrite, so no final AST to compare.`;
    }
    return null;
  }

  _show(d, slot) {
    const plus = d.lines.filter((l) => l.kind === "+").length, minus = d.lines.filter((l) => l.kind === "-").length;
    const text = h("div", {class: "diff-text code"}, ...d.lines.map((l) => h("div", {class: `dl ${kindClass(l.kind)}`},
      h("span", {class: "mark"}, l.kind === "@" ? "@" : l.kind), l.text)));
    const g = d.graph || {only_a: [], only_b: [], both: 0};
    const sum = d.summary;  // graphs too big to diff whole: the nodes nearest the roots (see summaryNote)
    const count = (side, nodes) => sum ? `${num(nodes.length)} of ${num(sum[side].only)}` : `${nodes.length}`;
    const list = (nodes, cls) => h("ul", {class: `node-list ${cls}`}, ...nodes.map((n) => h("li", null, nodeChip(n))));
    this.picked = h("div", {class: "diff-picked small muted"}, "click a node for its details");
    const graph = h("div", {class: "diff-graph"},
      slot,
      h("div", {class: "diff-key small"}, h("span", {class: "key-b"}, `only B (${count("b", g.only_b)})`),
        h("span", {class: "key-both"}, `in both: ${g.both}`),
        h("span", {class: "key-a"}, `only A (${count("a", g.only_a)})`)),
      this.picked,
      h("h3", null, h("span", {class: "pa"}, `only A (${count("a", g.only_a)})`)), list(g.only_a, "only-a"),
      h("h3", null, h("span", {class: "pb"}, `only B (${count("b", g.only_b)})`)), list(g.only_b, "only-b"),
      h("h3", null, `in both: ${g.both}`));
    graph.addEventListener("click", (ev) => {
      const chip = ev.target.closest("[data-node]");
      if (chip) this.onNode(Number(chip.dataset.node));
    });
    put(this.result,
      h("div", {class: "diff-summary small"}, h("span", {class: "pb"}, `+${plus}`), " ",
        h("span", {class: "pa"}, `−${minus}`),
        h("span", {class: "muted"}, ` lines · ${d.a} → ${d.b}`)),
      ...(sum ? [h("p", {class: "diff-cut-note small muted", role: "status"}, summaryNote(sum, g.both))] : []),
      h("div", {class: "diff-cols"},
        h("div", {class: "diff-left"}, d.lines.length ? text : h("p", {class: "muted"}, "identical")), graph));
  }

  /** The union graph drawn with the graph view: B's nodes (only-B ones with the "added" ring) and the only-A nodes
   * as the ghosts the view draws for removed nodes. */
  _drawing(drawn) {
    if (!drawn) {
      this.drawn = null;
      return h("p", {class: "muted small"}, "Too many nodes to draw the graph diff; see the lists below.");
    }
    if (!this.gview) {
      this.canvasHost = h("div", {class: "diff-canvas"});
      this.gview = new GraphView(this.canvasHost, {onSelect: (id) => this._pickDrawn(id)});
      // the view measures its host when it is laid out (after this answer is put in, or the panel is shown):
      // refit then, unless the user has panned or zoomed (this observer runs after the view's own)
      new ResizeObserver(() => { if (this.gview.autoFit) this.gview.fit(); }).observe(this.canvasHost);
    }
    this.drawn = new Map(drawn.nodes.map((n) => [n.id, n]));
    const ghost = new Set(drawn.nodes.filter((n) => n.side === "a").map((n) => n.id));
    this.gview.setData({
      nodes: drawn.nodes.filter((n) => !ghost.has(n.id)), edges: drawn.edges.filter((e) => !ghost.has(e.dst)),
      width: drawn.width, height: drawn.height,
      added: drawn.nodes.filter((n) => n.side === "b").map((n) => n.id), changed: [],
      removed_nodes: drawn.nodes.filter((n) => ghost.has(n.id)),
      removed_edges: drawn.edges.filter((e) => ghost.has(e.dst)),
    });
    this.gview.select(null);
    return this.canvasHost;
  }

  _pickDrawn(id) {
    this.gview.select(id);
    const n = id === null ? null : this.drawn && this.drawn.get(id);
    if (!n) { put(this.picked, "click a node for its details"); return; }
    const where = n.side === "both" ? "in A and B" : "only in B";
    put(this.picked, nodeChip({...n, id: n.node}), ` ${where} · ${n.hash}`);
  }
}

/** The kernels of a compare report that differ ({name, bName, a, b, kinds, ratio, sources}; a, b: context ids, null
 * on the side a kernel is missing from) in report order, then those in one trace only. */
const num = (n) => n.toLocaleString("en");

/** What a summarized diff (graphs over the server's whole-diff bound) shows of what. */
function summaryNote(sum, both) {
  const side = (x) => `the ${num(x.shown)} of ${num(x.only)}`;
  return `Big graphs (A: ${num(sum.a.nodes)} nodes, B: ${num(sum.b.nodes)}): showing ${side(sum.a)} nodes only in A `
    + `and ${side(sum.b)} only in B nearest the roots (at most ${num(sum.limit)} each), with their sources; `
    + `${num(both)} are in both.`;
}

function differingKernels(rep) {
  const rows = (rep.kernels || []).filter((k) => k.differs).map((k) => ({
    name: k.a.name, bName: k.b.name, a: k.a.id, b: k.b.id, ratio: typeof k.ratio === "number" ? k.ratio : null,
    sources: k.sources_differ || [],
    kinds: [k.opts_differ && "opts", (k.sources_differ || []).length && "source", k.ast_differs && "final AST",
      k.runtime_differs && "runtime", k.beam_a !== k.beam_b && "beam"].filter(Boolean),
  }));
  for (const side of ["a", "b"]) {
    for (const c of (rep.contexts || {})[`only_${side}`] || []) {
      if (c.kind !== "kernel") continue;
      rows.push({name: c.name, bName: c.name, a: side === "a" ? c.id : null, b: side === "b" ? c.id : null,
        ratio: null, sources: [], kinds: [`only_${side}`]});
    }
  }
  return rows;
}

const ratioText = (r) => r.toFixed(2);

function kindLabel(k, r) {
  if (k === "source") return `source (${r.sources.join(", ")})`;
  return {only_a: "only in A", only_b: "only in B"}[k] ?? k;
}

/** The first divergence in words (every name as a text node: they come from traces). */
function divergenceText(d) {
  const where = (x) => (x ? `rewrite ${x.id} ${x.name} in ${x.ctx_kind} ${x.ctx_name}` : "—");
  const rule = (st) => (st ? `${st.rule.name ?? "?"} on ${st.node.op ?? "?"} ${st.node.hash ?? ""}` : "no such step");
  const what = d.kind !== "differs" ? `only in ${d.kind === "only_a" ? "A" : "B"}`
    : d.step ? `match ${d.step.k} differs` : d.input_differs ? "input graphs differ" : "results differ";
  return h("div", {class: "divergence"},
    h("div", null, h("b", null, "first divergence: "), what),
    h("div", null, h("span", {class: "pa"}, "A "), where(d.a), d.step ? ` · ${rule(d.step.a)}` : ""),
    h("div", null, h("span", {class: "pb"}, "B "), where(d.b), d.step ? ` · ${rule(d.step.b)}` : ""));
}

const kindClass = (k) => (k === "+" ? "add" : k === "-" ? "del" : k === "@" ? "hunk" : "ctx");
