// The summary panel, the page's landing view (tlparse's landing page): where the program's time went (schedule,
// optimize, compile, run and the rest), its kernel runs with the first (cold) runs apart from the warm ones, and the
// top kernels by steady time (median x runs) with runs, median/min, GFLOP/s and GB/s; a click opens a kernel.
// The numbers are GET /api/traces/<t>/summary's (viz_server/summary.py, which says what each phase is made of).
import {api} from "./api.js";
import {fmtNum, fmtSeconds, h, kernelName, put} from "./dom.js";
import {Panel} from "./panel.js";

const PHASES = [
  ["schedule", "schedule", "the scheduler: tensor graph to kernels"],
  ["optimize", "optimize", "kernel opts: heuristics, BEAM, the applied opts"],
  ["compile", "compile", "codegen passes and LLVM"],
  ["run", "run", "kernel runs"],
  ["other", "other", "the rest: front end, gradients, memory planning, Python around the runs"],
];

const pct = (x, total) => (total > 0 ? `${((100 * x) / total).toFixed(1)}%` : "–");

export class SummaryPanel extends Panel {
  /** onJump(ctx) opens a kernel's context; onRuns() opens the Runs panel (every kernel); ctxInfo(ctx) its entry. */
  constructor(el, {onJump, onRuns, ctxInfo}) {
    super(el);
    this.onJump = onJump;
    this.onRuns = onRuns;
    this.ctxInfo = ctxInfo;
  }

  async show(trace) {
    if (trace === null) { this.empty("No trace."); return; }
    const s = await this.load(() => api.summary(trace));
    if (s === undefined) return;
    const c = s.counts;
    const plural = (n, what) => `${n} ${what}${n === 1 ? "" : "s"}`;
    put(this.el,
      h("div", {class: "panel-head"}, h("div", {class: "title"}, "Program summary"),
        h("div", {class: "sub muted"}, `${fmtSeconds(s.phases.total)} recorded · ${plural(c.contexts, "context")} · `
          + `${plural(c.kernels, "kernel")} · ${plural(c.runs, "run")}`)),
      this.phases(s.phases), this.runs(s.runs), this.top(s));
  }

  phases(p) {
    const rows = PHASES.map(([key, label, what]) => h("tr", {dataset: {phase: key}, title: what},
      h("td", null, label),
      h("td", {class: "bar-cell"}, h("span", {class: `phase-bar phase-${key}`,
        style: {width: `${p.total > 0 ? Math.min(100, (100 * p[key]) / p.total) : 0}%`}})),
      h("td", {class: "num"}, fmtSeconds(p[key])), h("td", {class: "num muted"}, pct(p[key], p.total))));
    // compiles ahead of their kernels run on a second thread, at the same time as the rest: the shares add up past 100%
    const parallel = p.parallel > 0 ? h("div", {class: "summary-parallel muted"}, `${fmtSeconds(p.parallel)} of this `
      + "work ran at the same time as other work (LLVM compiles on a second thread): the shares add up to more than 100%")
      : null;
    return h("div", {class: "summary-phases"}, h("div", {class: "summary-h"}, "Where the time went"),
      h("table", {class: "grid phases"}, h("tbody", null, ...rows)), parallel);
  }

  runs(r) {
    if (!r.count) return h("div", {class: "summary-runs muted"}, "No kernel runs recorded in this trace.");
    return h("div", {class: "summary-runs", dataset: {cold: r.cold, warm: r.warm}},
      h("div", {class: "summary-h"}, "Kernel runs"),
      h("div", null, `${r.count} runs of ${r.kernels} kernels, ${fmtSeconds(r.total)}: `,
        h("span", {class: "cold", title: "each kernel's first run: code and memory never touched"},
          `first (cold) runs ${fmtSeconds(r.cold)}`), ", ",
        h("span", {class: "warm"}, `warm runs ${fmtSeconds(r.warm)}`)));
  }

  top(s) {
    if (!s.top.length) return h("div");
    const head = h("tr", null, ...["kernel", "runs", "median", "min", "first", "GFLOP/s", "GB/s", "%"].map(
      (x, i) => h("th", {class: i ? "num" : null}, x)));
    const rows = s.top.map((k) => {
      const name = kernelName(k.kname, null, "kname clickable");
      name.title = `${k.kname} (context #${k.ctx}): click to open its kernel`;
      const tr = h("tr", {class: "top-kernel clickable", dataset: {ctx: k.ctx, kname: k.kname}},
        h("td", null, name), h("td", {class: "num"}, String(k.runs)),
        h("td", {class: "num"}, fmtSeconds(k.median)), h("td", {class: "num"}, fmtSeconds(k.min)),
        h("td", {class: "num cold"}, fmtSeconds(k.first)), h("td", {class: "num"}, fmtNum(k.gflops)),
        h("td", {class: "num"}, fmtNum(k.gbs)),
        h("td", {class: "num", title: "share of the steady time (median x runs)"},
          k.share === null ? "–" : (100 * k.share).toFixed(1)));
      tr.addEventListener("click", () => this.onJump(k.ctx));
      return tr;
    });
    const more = s.cut ? h("button", {type: "button", class: "link all-runs"}, `all ${s.runs.kernels} kernels`) : null;
    if (more) more.addEventListener("click", () => this.onRuns());
    return h("div", {class: "summary-top"},
      h("div", {class: "summary-h"}, `Top kernels by steady time (median × runs)`, more ? " · " : "", more),
      h("div", {class: "table-wrap"}, h("table", {class: "grid"}, h("thead", null, head), h("tbody", null, ...rows))));
  }
}
