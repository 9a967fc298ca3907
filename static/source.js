// The source panel: LLVM IR, optimized IR and assembly of the selected kernel, highlighted by the server.
import {api} from "./api.js";
import {coloredName, fmtSeconds, h, put, safeHighlighted} from "./dom.js";

const KIND_NAMES = {llvm_ir: "LLVM IR", opt_ir: "optimized IR", asm: "assembly"};

export class SourcePanel {
  constructor(el, {onPick}) {
    this.el = el;
    this.onPick = onPick;
    this.kind = "llvm_ir";
    this.gen = 0;
  }

  async show(trace, ctx) {
    const gen = ++this.gen;
    if (trace === null) { put(this.el, h("div", {class: "empty-panel muted"}, "No trace.")); return; }
    if (ctx === null || ctx.kind !== "kernel") {
      let ks = [];
      try { ks = await api.kernels(trace); } catch (e) { ks = []; }
      if (gen !== this.gen) return;
      const withSrc = ks.filter((k) => k.sources && k.sources.length);
      const item = (k) => h("li", {class: "clickable", onclick: () => this.onPick(k.ctx)},
        coloredName(k.name, k.kname_colors), h("span", {class: "muted small"}, ` ${k.sources.join(", ")}`));
      const note = withSrc.length ? "Pick a kernel:" : "No kernel sources in this trace.";
      put(this.el, h("div", {class: "empty-panel muted"}, note),
        h("ul", {class: "kernel-list"}, ...withSrc.map(item)));
      return;
    }
    let k;
    try { k = await api.kernel(trace, ctx.id); } catch (e) {
      if (gen === this.gen) put(this.el, h("div", {class: "error-text"}, e.message));
      return;
    }
    if (gen !== this.gen) return;
    this._render(k);
  }

  _render(k) {
    const srcs = k.sources || [];
    if (!srcs.length) {
      put(this.el, h("div", {class: "panel-head"}, h("div", {class: "title"}, coloredName(k.name, k.kname_colors))),
        h("p", {class: "muted"}, "No source recorded for this kernel."));
      return;
    }
    if (!srcs.some((x) => x.kind === this.kind)) this.kind = srcs[0].kind;
    const cur = srcs.find((x) => x.kind === this.kind);
    const tabs = h("div", {class: "subtabs"}, ...srcs.map((x) => h("button", {type: "button",
      class: x.kind === this.kind ? "active" : null, dataset: {kind: x.kind},
      onclick: () => { this.kind = x.kind; this._render(k); }}, KIND_NAMES[x.kind] ?? x.kind)));
    const code = h("pre", {class: "code source highlight", dataset: {kind: cur.kind}});
    if (cur.html) code.appendChild(safeHighlighted(cur.html)); else code.textContent = cur.text ?? "";
    const lines = String(cur.text ?? "").split("\n").length;
    put(this.el,
      h("div", {class: "panel-head"}, h("div", {class: "title"}, coloredName(k.name, k.kname_colors)),
        h("div", {class: "sub muted"}, `compile ${fmtSeconds(cur.compile_s)} · ${lines} lines`)),
      tabs, code,
      // the server sends a long text's start only (api.MAX_SOURCE_CHARS): say so rather than show it as whole
      cur.truncated ? h("p", {class: "muted small"}, `… cut: the first ${String(cur.text ?? "").length} of `
        + `${cur.chars} characters (the whole text is in the trace file)`) : null);
  }
}
