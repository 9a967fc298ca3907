// The kernel panel: applied opts in order with the colored shape after each, refused opts with their reason, and the
// BEAM candidates as a sortable table and a scatter plot with the chosen one marked.
import {api} from "./api.js";
import {colorOf, kernelName, fmtNum, fmtSeconds, h, put, s, siteText} from "./dom.js";
import {axisColorsLegend, legendBox} from "./legend.js";
import {Panel} from "./panel.js";
import {launchText} from "./source.js";
import {sortableTable} from "./table.js";

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
        h("div", {class: "title"}, kernelName(k.name, k.shape_colors)),
        h("div", {class: "sub muted"}, `context #${k.ctx} · ${plural(applied.length, "opt")} applied`
          + `${refused.length ? `, ${refused.length} refused` : ""} · ${plural(k.beam.length, "BEAM candidate")}`
          + (run ? ` · ${fmtSeconds(run.median)} median, ${fmtNum(run.gflops)} GFLOP/s` : ""))),
      // an OpenCL kernel's launch (issue 33): its work-items and work-groups
      k.launch ? h("p", {class: "launch mono small"}, launchText(k.launch)) : null,
      h("h3", null, "Called from"),
      callsitesList(k.callsites || [], k.callsites_more || 0),
      h("h3", null, "Opts"),
      k.opts.length ? [optsList(k.opts), axisColorsLegend()]
        : h("p", {class: "muted small"}, "No opts recorded for this kernel."),
      h("h3", null, "BEAM search"),
      k.beam.length ? beamView(k.beam) : h("p", {class: "muted small"}, "No BEAM search recorded."));
  }

  /** The trace's kernels to pick from (no kernel context is selected). */
  async _list(trace) {
    const ks = await this.load(() => api.kernels(trace));
    if (ks === undefined) return;
    this.empty(ks.length ? "Pick a kernel:" : "This trace has no kernels.", {more: [
      h("ul", {class: "kernel-list"}, ...ks.map((k) => h("li", {class: "clickable", dataset: {ctx: k.ctx},
        onclick: () => this.onPick(k.ctx)}, kernelName(k.name, k.shape_colors),
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

// The search marks, each round, the candidates it kept for the next one (the beam: several when its width is more than
// one), and its confirmation round the variant kept (compiler/opt/search.py): the kernel's final choice is the best
// kept candidate of the last round that kept any. The others kept are shown as kept, not as chosen.
export function finalChoice(rows) {
  const kept = rows.filter((r) => r.chosen);
  if (!kept.length) return null;
  const last = Math.max(...kept.map((r) => r.round ?? 0));
  const time = (r) => (Number.isFinite(r.time) ? r.time : Infinity);
  return kept.filter((r) => (r.round ?? 0) === last).reduce((a, b) => (time(b) < time(a) ? b : a));
}

function beamView(beam) {
  const label = (b) => (b.opts || []).map((o) => optText(o[0], o[1], o[2])).join(" ") || "(none)";
  const rows = beam.map((b, i) => ({...b, i, label: label(b)}));
  const best = finalChoice(rows);
  const mark = (r) => (r === best ? "chosen" : r.error ? "failed" : r.chosen ? "kept" : "");
  const table = sortableTable([
    {key: "i", label: "#", num: true},
    {key: "round", label: "round", num: true},
    {key: "label", label: "opts", render: (r) => h("span", {class: "mono beam-opts"}, r.label)},
    {key: "time", label: "time", num: true,
      render: (r) => (r.error ? h("span", {class: "error-text", title: r.error}, "error") : fmtSeconds(r.time))},
    {key: "chosen", label: "chosen", value: (r) => (r === best ? 0 : r.chosen ? 1 : 2),
      render: (r) => (r === best ? "★" : r.chosen ? h("span", {class: "muted small"}, "kept") : "")},
  ], rows, {sort: ["time", 1], rowClass: (r) => mark(r) || null});
  const rounds = new Set(rows.map((r) => r.round ?? 0)).size;
  const note = best ? `chosen: #${best.i} in round ${best.round ?? 0} of ${rounds}, ${fmtSeconds(best.time)}`
    : "no candidate was chosen";
  const plot = beamPlot(rows.map((r) => ({round: r.round ?? 0, time: r.error ? null : r.time, cls: mark(r),
    title: `#${r.i} round ${r.round ?? 0}: ${r.label}: ${r.error ?? fmtSeconds(r.time)}`})));
  return h("div", {class: "beam"}, h("p", {class: "beam-choice small"}, note), plot, legendBox([
    {label: "chosen", color: "var(--ok)", look: "fill", cls: "big"}, {label: "kept for the next round",
      color: "var(--accent)", look: "ring"}, {label: "candidate", color: "var(--accent)"},
    {label: "failed", color: "var(--bad)", look: "text", mark: "×"}], {cls: "beam-legend"}),
  h("div", {class: "table-wrap"}, table));
}

const UNITS = [["ns", -9], ["µs", -6], ["ms", -3], ["s", 0]];

/** 10^k seconds as "1 µs", "10 µs", "100 µs", "1 ms"... */
export function decadeText(k) {
  const [unit, at] = UNITS.findLast(([, e]) => k >= e) ?? UNITS[0];
  return `${k >= at ? 10 ** (k - at) : (10 ** (k - at)).toPrecision(1)} ${unit}`;
}

/** The candidates' times by round on a log axis (a PADTO outlier slower by 1000x leaves the rest readable): ticks
 * at decades, each round's candidates side by side in its column, the failed ones (no time) in a band above. */
function beamPlot(points, {width = 380, height = 210} = {}) {
  const pad = {l: 52, r: 10, t: 30, b: 30}, bandY = 14;
  const ok = points.filter((p) => Number.isFinite(p.time) && p.time > 0);
  const lo = Math.floor(Math.log10(Math.min(...ok.map((p) => p.time), 1e-6)));
  const hi = Math.max(Math.ceil(Math.log10(Math.max(...ok.map((p) => p.time), 1e-6))), lo + 1);
  const rounds = [...new Set(points.map((p) => p.round))].sort((a, b) => a - b);
  const colW = (width - pad.l - pad.r) / rounds.length;
  const Y = (t) => height - pad.b - ((Math.log10(t) - lo) / (hi - lo)) * (height - pad.t - pad.b);
  const svgEl = s("svg", {class: "chart scatter beam-plot", width, height, viewBox: `0 0 ${width} ${height}`});
  svgEl.append(
    s("line", {class: "axis x-axis", x1: pad.l, y1: height - pad.b, x2: width - pad.r, y2: height - pad.b}),
    s("line", {class: "axis y-axis", x1: pad.l, y1: pad.t, x2: pad.l, y2: height - pad.b}),
    s("line", {class: "band-line", x1: pad.l, y1: pad.t - 6, x2: width - pad.r, y2: pad.t - 6}),
    s("text", {class: "axis-label", x: 4, y: bandY, dy: "0.35em"}, "failed"),
    s("text", {class: "axis-label", x: (width + pad.l) / 2, y: height - 4, "text-anchor": "middle"}, "round"));
  const step = Math.ceil((hi - lo) / 6);  // at most 7 labelled decades
  for (let k = lo; k <= hi; k += step) {
    const y = Y(10 ** k);
    svgEl.append(s("line", {class: "grid-line", x1: pad.l, y1: y, x2: width - pad.r, y2: y}),
      s("text", {class: "tick y-tick", x: pad.l - 4, y, dy: "0.35em", "text-anchor": "end"}, decadeText(k)));
  }
  rounds.forEach((rnd, j) => {
    const x0 = pad.l + j * colW, mine = points.filter((p) => p.round === rnd);
    svgEl.append(s("text", {class: "tick x-tick", x: x0 + colW / 2, y: height - pad.b + 13, "text-anchor": "middle"},
      String(rnd)));
    mine.forEach((p, n) => {
      const x = x0 + colW * (0.15 + (0.7 * (n + 0.5)) / mine.length);
      const g = s("g", {class: `pt ${p.cls}`.trim()}, s("title", null, p.title));
      if (!Number.isFinite(p.time) || p.time <= 0) {
        g.append(s("text", {x, y: bandY, dy: "0.35em", "text-anchor": "middle", class: "fail"}, "×"));
      } else g.append(s("circle", {cx: x, cy: Y(p.time), r: p.cls === "chosen" ? 6 : 3.5}));
      svgEl.appendChild(g);
    });
  });
  return svgEl;
}
