// The source panel: LLVM IR, optimized IR and assembly (or a CL kernel's OpenCL C) of the selected kernel,
// highlighted by the server.
import {api} from "./api.js";
import {fmtSeconds, h, kernelName, put, safeHighlighted} from "./dom.js";
import {Panel} from "./panel.js";

const KIND_NAMES = {llvm_ir: "LLVM IR", opt_ir: "optimized IR", asm: "assembly", opencl: "OpenCL C"};

/** An OpenCL kernel's launch sizes (the answer's `launch`): "global [..] local [..]", the driver's where none. */
export function launchText(launch) {
  const dims = (d) => `[${d.join(", ")}]`;
  return `global ${dims(launch.global)} local ${launch.local ? dims(launch.local) : "(the driver's)"}`;
}

// Lines to nodes and back (issue 32): a source's `nodes` name, per line, the trace nodes it came from. Hovering or
// clicking (to pin) a line asks the kernel's graph to light its nodes up ("source-nodes" on the document, which
// graph.js's StepGraphView hears); a node selected in the graph ("graph-select") lights its lines up here.
export const SOURCE_NODES = "source-nodes";
export const GRAPH_SELECT = "graph-select";
// (set through the CSSOM: the page's CSP allows no inline style sheet)
const LINE_HIT_BG = "rgba(250, 204, 21, 0.35)", LINE_PIN_OUTLINE = "1px solid rgba(250, 204, 21, 0.9)";

const WRAP_KEY = "tinyviz.source.wrap";

/** Whether long source lines wrap (the user's last choice, kept in localStorage; on until they turn it off); with
 * `set`, remember that choice. */
function wrapLines(set) {
  try {
    if (set !== undefined) localStorage.setItem(WRAP_KEY, set ? "1" : "0");
    return localStorage.getItem(WRAP_KEY) !== "0";
  } catch {
    return set ?? true;  // storage refused: the choice holds for this source only
  }
}

/** The highlighted fragment cut into one span per line (a token spanning lines keeps its text, not its color). */
function lineSpans(frag) {
  const lines = [];
  let cur = h("span", {class: "src-line"});
  for (const node of [...frag.childNodes]) {
    const text = node.textContent;
    if (!text.includes("\n")) { cur.appendChild(node); continue; }
    text.split("\n").forEach((part, i) => {
      if (i) { lines.push(cur); cur = h("span", {class: "src-line"}); }
      if (part) cur.appendChild(document.createTextNode(part));
    });
  }
  lines.push(cur);
  return lines;
}

export class SourcePanel extends Panel {
  constructor(el, {onPick}) {
    super(el);
    this.onPick = onPick;
    this.kind = "llvm_ir";
    this.lines = [];     // the shown source's line spans, and per line its node ids (null: no map)
    this.nodes = null;
    this.pinned = null;  // the clicked line, whose nodes stay lit until another click
    document.addEventListener(GRAPH_SELECT, (ev) => this.markNode(ev.detail.id));
  }

  /** A state replaced the source: its lines and their nodes go with it. */
  cleared() {
    this.lines = [];
    this.nodes = null;
    this.pinned = null;
  }

  /** Light up the lines that came from node `id` (none for null), the first scrolled into view; their count. */
  markNode(id) {
    let first = null, n = 0;
    this.lines.forEach((el, i) => {
      const on = id !== null && this.nodes !== null && (this.nodes[i] || []).includes(id);
      el.classList.toggle("src-hit", on);
      el.style.background = on ? LINE_HIT_BG : "";
      if (on) { n += 1; first = first ?? el; }
    });
    if (first) first.scrollIntoView({block: "nearest"});
    this.el.dataset.lineHits = String(n);
    return n;
  }

  /** Ask the graph to light up the nodes of line i (none for null), and name them and the kernel's call sites. */
  _lineNodes(i, k) {
    const ids = i === null || this.nodes === null ? [] : (this.nodes[i] || []);
    document.dispatchEvent(new CustomEvent(SOURCE_NODES, {detail: {ctx: k.ctx, ids}}));
    const info = this.el.querySelector(".line-info");
    if (!info) return;
    const sites = (k.callsites || []).map((c) => `${String(c.file).split("/").pop()}:${c.line} in ${c.function}`);
    put(info, i === null ? "" : `line ${i + 1}: ` + (ids.length ? `nodes ${ids.map((x) => `#${x}`).join(", ")}`
      + (sites.length ? ` · from ${sites.join(", ")}` : "") : "no node"));
  }

  async show(trace, ctx) {
    if (trace === null) { this.empty("No trace."); return; }
    if (ctx === null || ctx.kind !== "kernel") {
      const ks = await this.load(() => api.kernels(trace).catch(() => []));  // no list: no kernel to pick
      if (ks === undefined) return;
      const withSrc = ks.filter((k) => k.sources && k.sources.length);
      const item = (k) => h("li", {class: "clickable", onclick: () => this.onPick(k.ctx)},
        kernelName(k.name, k.shape_colors), h("span", {class: "muted small"}, ` ${k.sources.join(", ")}`));
      this.empty(withSrc.length ? "Pick a kernel:" : "No kernel sources in this trace.",
        {more: [h("ul", {class: "kernel-list"}, ...withSrc.map(item))]});
      return;
    }
    const k = await this.load(() => api.kernel(trace, ctx.id));
    if (k === undefined) return;
    this._render(k);
  }

  /** The source as one span per line (numbered by style.css in a gutter that a selection leaves out: the copied text
   * is the source), wrapped or not as the user last chose. */
  _code(cur) {
    const code = h("pre", {class: "code source highlight", dataset: {kind: cur.kind}});
    const holder = document.createDocumentFragment();
    holder.appendChild(cur.html ? safeHighlighted(cur.html) : document.createTextNode(cur.text ?? ""));
    this.nodes = Array.isArray(cur.nodes) ? cur.nodes : null;
    this.pinned = null;
    this.lines = lineSpans(holder);
    this.lines.forEach((el, i) => {
      el.dataset.line = String(i);
      if (this.nodes !== null && (this.nodes[i] || []).length) el.classList.add("src-mapped");
      if (i) code.appendChild(document.createTextNode("\n"));
      code.appendChild(el);
    });
    // (set through the CSSOM: the page's CSP allows no style attribute) the gutter fits the last line's number
    code.style.setProperty("--gutter", `${String(this.lines.length).length}ch`);
    code.classList.toggle("wrap", wrapLines());
    return code;
  }

  /** The "wrap lines" switch: long lines fold under themselves (indented past the numbers) or scroll sideways. */
  _wrapToggle(code) {
    const box = h("input", {type: "checkbox", class: "source-wrap"});
    box.checked = code.classList.contains("wrap");
    box.addEventListener("change", () => { code.classList.toggle("wrap", box.checked); wrapLines(box.checked); });
    return h("label", {class: "inline small", title: "Fold long lines instead of scrolling sideways"}, box,
      "wrap lines");
  }

  _render(k) {
    const srcs = k.sources || [];
    if (!srcs.length) {
      put(this.el, h("div", {class: "panel-head"}, h("div", {class: "title"}, kernelName(k.name, k.shape_colors))),
        h("p", {class: "muted"}, "No source recorded for this kernel."));
      return;
    }
    if (!srcs.some((x) => x.kind === this.kind)) this.kind = srcs[0].kind;
    const cur = srcs.find((x) => x.kind === this.kind);
    const tabs = h("div", {class: "subtabs"}, ...srcs.map((x) => h("button", {type: "button",
      class: x.kind === this.kind ? "active" : null, dataset: {kind: x.kind},
      onclick: () => { this.kind = x.kind; this._render(k); }}, KIND_NAMES[x.kind] ?? x.kind)));
    const code = this._code(cur);
    if (this.nodes !== null) {
      const lineOf = (ev) => { const el = ev.target.closest?.(".src-line"); return el ? Number(el.dataset.line) : null; };
      code.addEventListener("mouseover", (ev) => { if (this.pinned === null) this._lineNodes(lineOf(ev), k); });
      code.addEventListener("mouseleave", () => { if (this.pinned === null) this._lineNodes(null, k); });
      code.addEventListener("click", (ev) => {
        const i = lineOf(ev);
        this.pinned = i === this.pinned ? null : i;
        this.lines.forEach((el, j) => {
          el.classList.toggle("src-pinned", j === this.pinned);
          el.style.outline = j === this.pinned ? LINE_PIN_OUTLINE : "";
        });
        this._lineNodes(i, k);
      });
    }
    const lines = this.lines.length;
    put(this.el,
      h("div", {class: "panel-head"}, h("div", {class: "title"}, kernelName(k.name, k.shape_colors)),
        h("div", {class: "sub muted"}, `compile ${fmtSeconds(cur.compile_s)} · ${lines} lines`
          + (cur.kind === "opencl" && k.launch ? ` · ${launchText(k.launch)}` : ""))),
      h("div", {class: "source-tools"}, tabs, this._wrapToggle(code)),
      this.nodes !== null ? h("div", {class: "line-info muted small"}, "") : null, code,
      // the server sends a long text's start only (api.MAX_SOURCE_CHARS): say so rather than show it as whole
      cur.truncated ? h("p", {class: "muted small"}, `… cut: the first ${String(cur.text ?? "").length} of `
        + `${cur.chars} characters (the whole text is in the trace file)`) : null);
  }
}
