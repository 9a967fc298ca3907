// The runs panel: one row per kernel (GET /api/traces/<t>/runs/kernels, viz_server/summary.py): how often it ran, its
// total, its first (cold) run apart from the median and min of the warm ones, GFLOP/s and GB/s at the min, as a
// sortable table and a bar chart; click to jump to the context it first ran in.
import {api} from "./api.js";
import {fmtNum, fmtSeconds, h, kernelName, put} from "./dom.js";
import {Panel} from "./panel.js";
import {barChart, sortableTable} from "./table.js";

export class RunsPanel extends Panel {
  /** onJump(ctx) selects the kernel's context. kname colors come from the contexts list (ctxInfo(ctx)). */
  constructor(el, {onJump, ctxInfo}) {
    super(el);
    this.onJump = onJump;
    this.ctxInfo = ctxInfo;
    this.sort = ["median", -1];
  }

  async show(trace) {
    if (trace === null) { this.empty("No trace."); return; }
    const answer = await this.load(() => api.kernelRuns(trace));
    if (answer === undefined) return;
    const rows = answer.kernels;
    if (!rows.length) { this.empty("No kernel runs recorded in this trace."); return; }
    // a kernel's share is of the steady time (median x runs): a cold first run is not what the kernel costs
    const steady = rows.reduce((a, r) => a + (r.steady || 0), 0);
    const total = rows.reduce((a, r) => a + (r.total || 0), 0);
    const runs = rows.reduce((a, r) => a + r.runs, 0);
    const chartBox = h("div", {class: "chart-box"});
    const name = (r) => {
      const el = kernelName(r.kname, null, "kname clickable");
      el.title = `${r.kname} (context #${r.ctx}): click to open its kernel`;
      return el;
    };
    const drawChart = (sorted) => put(chartBox, barChart(sorted.map((r) => ({label: r.kname, value: r.median,
      text: `${fmtSeconds(r.median)} · ${fmtNum(r.gflops)} GFLOP/s`, title: `${r.kname}: ${fmtSeconds(r.median)}`,
      onClick: () => this.onJump(r.ctx)})), {width: 600, labelW: 190}));
    const table = sortableTable([
      {key: "kname", label: "kernel", render: name},
      {key: "runs", label: "runs", num: true, title: "times it ran, in every context"},
      {key: "median", label: "median", num: true, render: (r) => fmtSeconds(r.median),
        title: "median of the warm runs (all but the first), or the one run"},
      {key: "min", label: "min", num: true, render: (r) => fmtSeconds(r.min)},
      {key: "first", label: "first", num: true, render: (r) => fmtSeconds(r.first),
        title: "the first run: cold (code and memory never touched), kept apart"},
      {key: "total", label: "total", num: true, render: (r) => fmtSeconds(r.total)},
      {key: "gflops", label: "GFLOP/s", num: true, render: (r) => fmtNum(r.gflops)},
      {key: "gbs", label: "GB/s", num: true, render: (r) => fmtNum(r.gbs)},
      {key: "share", label: "%", num: true, value: (r) => (steady ? (r.steady || 0) / steady : 0),
        render: (r) => (steady ? `${((100 * (r.steady || 0)) / steady).toFixed(1)}` : "–"),
        title: "share of the steady time (median x runs)"},
    ], rows, {sort: this.sort, onRow: (r) => this.onJump(r.ctx), onSort: (key, dir, sorted) => {
      this.sort = [key, dir];
      drawChart(sorted);
    }});
    drawChart(table.sorted);
    const cut = answer.cut ? ` (the first ${rows.length} of ${answer.count})` : "";
    put(this.el,
      h("div", {class: "panel-head"}, h("div", {class: "title"}, "Kernel runs"),
        h("div", {class: "sub muted"}, `${answer.count} kernel${answer.count === 1 ? "" : "s"}${cut} · ${runs} `
          + `run${runs === 1 ? "" : "s"} · ${fmtSeconds(total)} total`)),
      h("div", {class: "table-wrap"}, table), chartBox);
  }
}
