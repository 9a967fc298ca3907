// The diff panel: two points A and B (t:r:k, t:r:end or t:c for a kernel's final AST), the unified text diff and the
// graph diff (only in A, only in B, in both) side by side.
import {api} from "./api.js";
import {h, put} from "./dom.js";
import {nodeChip} from "./step.js";

const POINT_RE = /^\d+:\d+(:(\d+|end))?$/;

export class DiffPanel {
  /** cur() -> {trace, rw, step, ctx} of the main view; onChange(a, b) when the compared points change. */
  constructor(el, {cur, onChange, onNode}) {
    this.el = el;
    this.cur = cur;
    this.onChange = onChange;
    this.onNode = onNode;
    this.a = "";
    this.b = "";
    this.gen = 0;
    this._build();
  }

  _build() {
    const point = (which) => {
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
    this.aIn = point("a");
    this.bIn = point("b");
    const btn = (label, title, fn) => h("button", {type: "button", title, onclick: fn}, label);
    const here = () => this.cur();
    this.result = h("div", {class: "diff-result"});
    put(this.el,
      h("div", {class: "panel-head"}, h("div", {class: "title"}, "Diff"),
        h("div", {class: "sub muted"},
          "Compare any two points: trace:rewrite:step, trace:rewrite:end or trace:context (kernel AST).")),
      h("div", {class: "diff-points"},
        h("label", null, h("b", {class: "pa"}, "A"), this.aIn,
          btn("here", "A = the current step", () => this.setHere("a"))),
        h("label", null, h("b", {class: "pb"}, "B"), this.bIn,
          btn("here", "B = the current step", () => this.setHere("b")))),
      h("div", {class: "diff-quick"},
        btn("this step", "the step before vs the current step", () => {
          const c = here(); if (c.rw === null) return;
          this.setBoth(`${c.trace}:${c.rw}:${Math.max(0, c.step - 1)}`, `${c.trace}:${c.rw}:${c.step}`);
        }),
        btn("this rewrite", "the rewrite's input vs its result", () => {
          const c = here(); if (c.rw !== null) this.setBoth(`${c.trace}:${c.rw}:0`, `${c.trace}:${c.rw}:end`);
        }),
        btn("swap", "swap A and B", () => this.setBoth(this.b, this.a))),
      this.result);
  }

  setHere(which) {
    const c = this.cur();
    if (c.rw !== null) this.set(which, `${c.trace}:${c.rw}:${c.step}`);
  }

  set(which, value) {
    if (which === "a") this.a = value; else this.b = value;
    this._sync();
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

  _sync() {
    this.aIn.value = this.a;
    this.bIn.value = this.b;
  }

  /** Fill in sensible defaults (the current rewrite's input vs result) when nothing is chosen yet. */
  ensureDefaults() {
    if (this.a && this.b) { this.run(); return; }
    const c = this.cur();
    if (c.trace === null || c.rw === null) {
      put(this.result, h("p", {class: "muted"}, "Pick a rewrite, then choose A and B."));
      return;
    }
    this.setBoth(`${c.trace}:${c.rw}:0`, `${c.trace}:${c.rw}:end`);
  }

  async run() {
    const gen = ++this.gen;
    const {a, b} = this;
    if (!a || !b) return;
    for (const [name, p] of [["A", a], ["B", b]]) {
      if (!POINT_RE.test(p)) {
        put(this.result, h("div", {class: "error-text"}, `${name}: "${p}" is not a point (t:r:k, t:r:end or t:c)`));
        return;
      }
    }
    put(this.result, h("p", {class: "muted small"}, "comparing…"));
    let d;
    try { d = await api.diff(a, b); } catch (e) {
      if (gen === this.gen) put(this.result, h("div", {class: "error-text"}, e.message));
      return;
    }
    if (gen !== this.gen) return;
    const plus = d.lines.filter((l) => l.kind === "+").length, minus = d.lines.filter((l) => l.kind === "-").length;
    const text = h("div", {class: "diff-text code"}, ...d.lines.map((l) => h("div", {class: `dl ${kindClass(l.kind)}`},
      h("span", {class: "mark"}, l.kind === "@" ? "@" : l.kind), l.text)));
    const g = d.graph || {only_a: [], only_b: [], both: 0};
    const list = (nodes, cls) => h("ul", {class: `node-list ${cls}`}, ...nodes.map((n) => h("li", null, nodeChip(n))));
    const graph = h("div", {class: "diff-graph"},
      h("h3", null, h("span", {class: "pa"}, `only A (${g.only_a.length})`)), list(g.only_a, "only-a"),
      h("h3", null, h("span", {class: "pb"}, `only B (${g.only_b.length})`)), list(g.only_b, "only-b"),
      h("h3", null, `in both: ${g.both}`));
    graph.addEventListener("click", (ev) => {
      const chip = ev.target.closest("[data-node]");
      if (chip) this.onNode(Number(chip.dataset.node));
    });
    put(this.result,
      h("div", {class: "diff-summary small"}, h("span", {class: "pb"}, `+${plus}`), " ",
        h("span", {class: "pa"}, `−${minus}`),
        h("span", {class: "muted"}, ` lines · ${d.a} → ${d.b}`)),
      h("div", {class: "diff-cols"},
        h("div", {class: "diff-left"}, d.lines.length ? text : h("p", {class: "muted"}, "identical")), graph));
  }
}

const kindClass = (k) => (k === "+" ? "add" : k === "-" ? "del" : k === "@" ? "hunk" : "ctx");
