// The kernel panel: applied opts in order with the colored shape after each, refused opts with their reason, and the
// BEAM candidates as a sortable table and a scatter plot with the chosen one marked.
import {api} from "./api.js";
import {coloredName, colorOf, fmtNum, fmtSeconds, h, put, siteText} from "./dom.js";
import {Panel} from "./panel.js";
import {scatterPlot, sortableTable} from "./table.js";

export class KernelPanel extends Panel {
  /** onPick(ctx): a kernel picked from the list shown when the selected context is not a kernel. */
  constructor(el, {onPick}) {
    super(el);
    this.onPick = onPick;
  }

  async show(trace, ctx) {
    if (trace === null) { this.empty("No trace."); return; }
    if (ctx === null || ctx.kind !== "kernel") { await this._list(trace); return; }
    const k = await this.load(() => api.kernel(trace, ctx.id), {what: `kernel ${ctx.id}`});
    if (k === undefined) return;
    const run = k.runs && k.runs.length ? k.runs[k.runs.length - 1] : null;
    const applied = k.opts.filter((o) => o.ok), refused = k.opts.filter((o) => !o.ok);
    put(this.el,
      h("div", {class: "panel-head"},
        h("div", {class: "title"}, coloredName(k.name, k.kname_colors)),
        h("div", {class: "sub muted"}, `context #${k.ctx} · ${plural(applied.length, "opt")} applied`
          + `${refused.length ? `, ${refused.length} refused` : ""} · ${plural(k.beam.length, "BEAM candidate")}`
          + (run ? ` · ${fmtSeconds(run.median)} median, ${fmtNum(run.gflops)} GFLOP/s` : ""))),
      h("h3", null, "Called from"),
      callsitesList(k.callsites || [], k.callsites_more || 0),
      h("h3", null, "Opts"),
      k.opts.length ? optsList(k.opts) : h("p", {class: "muted small"}, "No opts recorded for this kernel."),
      h("h3", null, "BEAM search"),
      k.beam.length ? beamView(k.beam) : h("p", {class: "muted small"}, "No BEAM search recorded."));
  }

  /** The trace's kernels to pick from (no kernel context is selected). */
  async _list(trace) {
    const ks = await this.load(() => api.kernels(trace));
    if (ks === undefined) return;
    this.empty(ks.length ? "Pick a kernel:" : "This trace has no kernels.", {more: [
      h("ul", {class: "kernel-list"}, ...ks.map((k) => h("li", {class: "clickable", dataset: {ctx: k.ctx},
        onclick: () => this.onPick(k.ctx)}, coloredName(k.name, k.kname_colors),
      h("span", {class: "muted small"}, ` ${k.opts.length} opts${k.run ? ` · ${fmtSeconds(k.run.median)}` : ""}`))))]});
  }
}

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

// the user's lines that made the kernel's ops, in the order they are computed (its output's last)
function callsitesList(sites, more) {
  if (!sites.length) return h("p", {class: "muted small"}, "No call sites recorded for this kernel.");
  return h("ol", {class: "callsites"}, ...sites.map((c) => h("li", {class: "callsite", title: `${c.file}:${c.line}`},
    h("span", {class: "mono"}, siteText(c)), h("span", {class: "muted"}, ` in ${c.function}`))),
  more ? h("li", {class: "muted small"}, `and ${plural(more, "more line")}`) : null);
}

export function optText(op, axis, arg) {
  return `${op}(${axis ?? ""}${arg !== undefined && arg !== null ? `, ${arg}` : ""})`;
}

function shapeView(shape, colors) {
  const el = h("span", {class: "shape"});
  (shape || []).forEach((n, i) => {
    const title = colors && colors[i] ? `axis ${i}: ${colors[i]}` : `axis ${i}`;
    const cell = h("span", {class: "dim", title}, String(n));
    const c = colorOf(colors && colors[i]);
    if (c) { cell.style.color = c; cell.style.borderColor = c; }
    el.appendChild(cell);
  });
  return el;
}

function optsList(opts) {
  let n = 0;
  return h("ol", {class: "opts"}, ...opts.map((o) => {
    const li = h("li", {class: `opt ${o.ok ? "ok" : "refused"}`},
      h("span", {class: "idx muted"}, o.ok ? String(++n) : "✗"),
      h("span", {class: "mono opname"}, optText(o.op, o.axis, o.arg)),
      o.ok ? shapeView(o.shape, o.colors) : h("span", {class: "reason"}, String(o.reason ?? "refused")));
    if (o.ok && o.kname) li.title = `kernel name after: ${o.kname}`;
    return li;
  }));
}

function beamView(beam) {
  const label = (b) => (b.opts || []).map((o) => optText(o[0], o[1], o[2])).join(" ") || "(none)";
  const rows = beam.map((b, i) => ({...b, i, label: label(b)}));
  const table = sortableTable([
    {key: "i", label: "#", num: true},
    {key: "round", label: "round", num: true},
    {key: "label", label: "opts", render: (r) => h("span", {class: "mono"}, r.label)},
    {key: "time", label: "time", num: true,
      render: (r) => (r.error ? h("span", {class: "error-text", title: r.error}, "error") : fmtSeconds(r.time))},
    {key: "chosen", label: "chosen", value: (r) => (r.chosen ? 0 : 1), render: (r) => (r.chosen ? "★" : "")},
  ], rows, {sort: ["time", 1], rowClass: (r) => (r.chosen ? "chosen" : r.error ? "failed" : null)});
  const plot = scatterPlot(rows.map((r) => ({x: r.round ?? r.i, y: r.error ? null : r.time,
    cls: r.chosen ? "chosen" : r.error ? "failed" : "", title: `${r.label}: ${r.error ?? fmtSeconds(r.time)}`})),
  {xLabel: "round", yLabel: "time", yFmt: fmtSeconds});
  return h("div", {class: "beam"}, plot, h("div", {class: "table-wrap"}, table));
}
