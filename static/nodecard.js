// The details card of the selected node: op, dtype, arg, sources, users and the step that created it.
import {append, h, put} from "./dom.js";
import {Panel} from "./panel.js";
import {nodeChip} from "./step.js";

export class NodeCard extends Panel {
  /** onNode(id) selects another node; onStep(k) jumps to a step; onGoto(ctx, rw, step, node) opens another pass's
   * step with the node selected; onRelatives(mode); onClose(). */
  constructor(el, {onNode, onStep, onGoto, onRelatives, onClose, full}) {
    super(el);
    this.full = full;  // id -> a promise of the node with its texts whole (GET /nodes/<n>)
    el.addEventListener("click", (ev) => {
      const all = ev.target.closest("[data-show-all]");
      if (all) { this._showAll(all); return; }
      const go = ev.target.closest("[data-goto-rw]");
      if (go) {
        const g = go.dataset;
        onGoto(Number(g.gotoCtx), Number(g.gotoRw), Number(g.gotoStep), Number(g.gotoNode));
        return;
      }
      const chip = ev.target.closest("[data-node]");
      if (chip) { onNode(Number(chip.dataset.node)); return; }
      const st = ev.target.closest("[data-step]");
      if (st) { onStep(Number(st.dataset.step)); return; }
      const rel = ev.target.closest("[data-rel]");
      if (rel) { onRelatives(rel.dataset.rel); return; }
      if (ev.target.closest(".close")) onClose();
    });
  }

  hide() {
    this.begin();  // the hidden card's answers still on their way are dropped
    this.el.hidden = true;
  }

  /** A "show all" button after a text the server cut (graph answers send at most 4,096 chars of each: a MB-sized
   * one froze the page); the whole text is fetched and drawn only when asked for. */
  _more(d, k) {
    const n = d.cut && d.cut[k];
    if (!n || !this.full) return null;
    return h("button", {type: "button", class: "link small", dataset: {showAll: k, id: d.id},
      title: "fetch and show the whole text"}, ` … show all (${n.toLocaleString()} chars)`);
  }

  async _showAll(btn) {
    const gen = this.gen, k = btn.dataset.showAll;  // part of showing this node: showing another one drops it
    btn.disabled = true;
    let node;
    try { node = await this.full(Number(btn.dataset.id)); } catch { btn.disabled = false; return; }
    if (!this.fresh(gen)) return;
    const span = btn.parentElement.querySelector(`[data-field=${k}]`);
    if (span) span.textContent = node[k] ?? "";
    btn.remove();
  }

  /** d: node data; srcs/users: node data lists; created: a promise of {step, rule} or null. */
  show(d, srcs, users, created, relMode) {
    const gen = this.begin();
    this.el.hidden = false;
    const createdEl = h("span", {class: "muted"}, "…");
    const field = (k, v) => h("tr", null, h("th", null, k), h("td", null, v, this._more(d, k)));
    const relBtn = (mode, label) => h("button", {type: "button", class: relMode === mode ? "active" : null,
      dataset: {rel: mode}}, label);
    put(this.el,
      h("div", {class: "card-head"}, nodeChip(d),
        h("button", {type: "button", class: "close", title: "close (Esc)"}, "×")),
      h("table", {class: "fields"},
        field("op", h("span", {class: "mono", dataset: {field: "op"}}, d.op)),
        field("dtype", h("span", {class: "mono", dataset: {field: "dtype"}}, d.dtype ?? "")),
        field("arg", h("span", {class: "mono arg-text", dataset: {field: "arg"}}, d.arg ?? "")),
        d.site ? field("made at", h("span", {class: "mono", dataset: {field: "site"},
          title: "the line of your program that made this node (or the node the compiler made it of)"}, d.site)) : null,
        field("created", createdEl)),
      h("div", {class: "rel-list"}, h("h4", null, `sources (${srcs.length})`),
        srcs.length ? h("div", {class: "chips"}, ...srcs.map(nodeChip)) : h("span", {class: "muted small"}, "none")),
      h("div", {class: "rel-list"}, h("h4", null, `users (${users.length})`),
        users.length ? h("div", {class: "chips"}, ...users.map(nodeChip)) : h("span", {class: "muted small"}, "none")),
      h("div", {class: "card-actions"}, h("span", {class: "muted small"}, "highlight "),
        relBtn("ancestors", "ancestors"), relBtn("descendants", "descendants"), relBtn("both", "both"),
        relBtn("none", "off")));
    // (not known, or not found: "unknown")
    this.load(() => Promise.resolve(created).then((c) => c ?? null, () => null), {gen}).then((c) => {
      if (c === undefined) return;
      if (!c) put(createdEl, h("span", {class: "muted"}, "unknown"));
      else if (c.step === 0) {
        put(createdEl, h("a", {class: "link", dataset: {step: 0}}, "in the input graph (step 0)"));
        const o = c.origin;
        if (o) {
          append(createdEl, [h("span", {class: "muted"}, "; made by "), h("a", {class: "link origin",
            dataset: {gotoCtx: o.ctx, gotoRw: o.rewrite, gotoStep: o.step, gotoNode: d.id},
            title: "open that step of that pass"}, `${o.name} step ${o.step}`),
          o.rule ? h("span", {class: "muted"}, ` (${o.rule})`) : null]);
        }
      }
      else put(createdEl, h("a", {class: "link", dataset: {step: c.step}}, `step ${c.step}`),
        c.rule ? h("span", {class: "muted"}, ` by ${c.rule}`) : null);
    });
  }
}
