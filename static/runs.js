// The runs panel: every kernel run's time, GFLOP/s and GB/s as a sortable table and a bar chart; click to jump.
import {api} from "./api.js";
import {coloredName, fmtNum, fmtSeconds, h, put} from "./dom.js";
import {barChart, sortableTable} from "./table.js";

export class RunsPanel {
  /** onJump(ctx) selects the run's kernel context. kname colors come from the contexts list (ctxInfo(ctx)). */
  constructor(el, {onJump, ctxInfo}) {
    this.el = el;
    this.onJump = onJump;
    this.ctxInfo = ctxInfo;
    this.sort = ["median", -1];
    this.gen = 0;
  }

  async show(trace) {
    const gen = ++this.gen;
    if (trace === null) { put(this.el, h("div", {class: "empty-panel muted"}, "No trace.")); return; }
    let runs;
    try { runs = await api.runs(trace); } catch (e) {
      if (gen === this.gen) put(this.el, h("div", {class: "error-text"}, e.message));
      return;
    }
    if (gen !== this.gen) return;
    if (!runs.length) {
      put(this.el, h("div", {class: "empty-panel muted"}, "No kernel runs recorded in this trace."));
      return;
    }
    const rows = runs.map((r, i) => ({...r, i}));
    const total = rows.reduce((a, r) => a + (r.median || 0), 0);
    const chartBox = h("div", {class: "chart-box"});
    const name = (r) => {
      const c = this.ctxInfo(r.ctx);
      const el = coloredName(r.kname, c ? c.kname_colors : null, "kname clickable");
      el.title = `${r.kname} (context #${r.ctx}): click to open its kernel`;
      return el;
    };
    const label = (r) => {
      const c = this.ctxInfo(r.ctx);
      return c && c.kname_colors ? c.kname_colors.map((p) => p[0]).join("") : r.kname;
    };
    const drawChart = (sorted) => put(chartBox, barChart(sorted.map((r) => ({label: label(r), value: r.median,
      text: `${fmtSeconds(r.median)} · ${fmtNum(r.gflops)} GFLOP/s`, title: `${r.kname}: ${fmtSeconds(r.median)}`,
      onClick: () => this.onJump(r.ctx)})), {width: 600, labelW: 190}));
    const table = sortableTable([
      {key: "kname", label: "kernel", render: name},
      {key: "median", label: "median", num: true, render: (r) => fmtSeconds(r.median)},
      {key: "min", label: "min", num: true, render: (r) => fmtSeconds(r.min)},
      {key: "n", label: "runs", num: true, value: (r) => (r.times || []).length},
      {key: "gflops", label: "GFLOP/s", num: true, render: (r) => fmtNum(r.gflops)},
      {key: "gbs", label: "GB/s", num: true, render: (r) => fmtNum(r.gbs)},
      {key: "share", label: "%", num: true, value: (r) => (total ? (r.median || 0) / total : 0),
        render: (r) => (total ? `${((100 * (r.median || 0)) / total).toFixed(1)}` : "–")},
    ], rows, {sort: this.sort, onRow: (r) => this.onJump(r.ctx), onSort: (key, dir, sorted) => {
      this.sort = [key, dir];
      drawChart(sorted);
    }});
    drawChart(table.sorted);
    put(this.el,
      h("div", {class: "panel-head"}, h("div", {class: "title"}, "Kernel runs"),
        h("div", {class: "sub muted"}, `${rows.length} run${rows.length === 1 ? "" : "s"} · ${fmtSeconds(total)} total`
          + " (median)")),
      h("div", {class: "table-wrap"}, table), chartBox);
  }
}

