// The step panel: the rule that fired at the current step (source, file:line), the matched node before/after, timing,
// and the list of steps of the rewrite.
import {api} from "./api.js";
import {fileLine, fmtNs, h, put, safeHighlighted} from "./dom.js";
import {Panel} from "./panel.js";

const TREE_DEPTH = 3;
const TREE_MAX = 40;
const LIST_WINDOW = 300;  // rows of the step list rendered at once; moving inside it only moves the highlight
const LIST_MARGIN = 30;
// the list's rows in blocks that skip style, layout and paint out of view (static/style.css, .step-block): the
// highlight moved each step made the panel record its ~300 rows again, ~5 ms of a step's main thread (issue 30)
const LIST_BLOCK = 25;
// a step shown within REPEAT_MS of the one before (an arrow key held or pressed again and again): its title and the
// list's highlight change at once, its rule and before/after trees once REPEAT_MS pass without another step. Built
// after every step's paint, they cost the page a second frame a step (~7-9 ms main thread, their node trees ~7 ms,
// and the panel's paint), taking the CPU from the next step's (issue 30: an arrow step under 50 ms)
export const REPEAT_MS = 200;

export class StepPanel extends Panel {
  /** onNode(id) selects a node in the graph; onStep(k) jumps to a step. */
  constructor(el, {onNode, onStep}) {
    super(el);
    this.onNode = onNode;
    this.onStep = onStep;
    this.list = null;  // {rw, lo, hi, el}: the rendered window of the step list
    this.lastShow = -Infinity;  // when show() was last called for a step (not for a deferred render)
    this.later = 0;  // the timer of a deferred render (REPEAT_MS)
    this.deferred = null;  // that render, until it runs (settle)
    this.repeatMs = REPEAT_MS;  // (a test on a loaded machine widens it)
    el.addEventListener("click", (ev) => {
      const chip = ev.target.closest("[data-node]");
      if (chip) { this.onNode(Number(chip.dataset.node)); return; }
      const row = ev.target.closest("[data-step]");
      if (row) this.onStep(Number(row.dataset.step));
    });
  }

  /** Another rewrite was selected (rwId): until its steps come, say so, never the previous rewrite's step under the
   * new selection (issue 30). */
  pending(rwId) {
    if (rwId === null || (this.list && this.list.rw.id === rwId && this.el.contains(this.list.el))) return;
    this.loading("loading the rewrite's steps…");
  }

  /** A state replaced the step and its list: the next show() renders them anew. */
  cleared() {
    this.list = null;
  }

  /** rw: the /rewrites/<r> answer; k: current step; lookup(id): node data known to the graph view (or undefined).
   * A step shown within REPEAT_MS of the one before gets its title and highlight now, the rest once stepping pauses
   * (whole: the deferred render's own call). */
  async show(trace, rw, k, lookup, whole = false) {
    clearTimeout(this.later);
    this.later = 0;
    this.deferred = null;
    const now = performance.now(), quick = !whole && now - this.lastShow < this.repeatMs;
    if (!whole) this.lastShow = now;
    const gen = this.begin();
    this.trace = trace;
    const n = rw.steps.length;
    const sameRw = this.list && this.list.rw === rw;
    const later = () => this.show(trace, rw, k, lookup, true);
    if (quick && sameRw && k > 0 && rw.steps[k - 1] && this._defer(rw, k, gen, later)) return;
    if (!sameRw || !this.head || !this.el.contains(this.head)) {
      this.head = h("div", {class: "panel-head"},
        h("div", {class: "title"}, h("span", {class: "rw-name"}, rw.name), " ", fileLine(rw.file, rw.line)),
        h("div", {class: "sub muted"},
          `${n} match${n === 1 ? "" : "es"} · ${fmtNs(rw.dt)}${rw.bottom_up ? " · bottom-up" : ""}`),
        rw.error ? h("div", {class: "error-text"}, rw.error) : null);
      const counts = this._ruleCounts(rw);
      if (counts) this.head.appendChild(counts);
      this.body = h("div", {class: "step-body"});
      this.list = null;
      put(this.el, this.head, this.body);
      if (counts) this._ruleNames(counts, trace);
    }
    const body = this.body;
    this._syncList(rw, k);
    if (k === 0 || !rw.steps[k - 1]) {
      put(body,
        h("div", {class: "step-title"}, h("b", null, `Step 0 / ${n}`),
          h("span", {class: "muted"}, " — the input graph")),
        h("p", {class: "muted small"}, n ? "Press → to apply the first match." : "No rule matched in this rewrite."));
      return;
    }
    const st = rw.steps[k - 1];
    // build off-screen and swap in once everything is known, so stepping does not flicker
    const got = await this.load(() => Promise.all([
      api.pattern(trace, st.pattern).catch((e) => ({error: e.message})),
      this._tree(trace, st.before, lookup),
      st.after === null || st.after === undefined ? null : this._tree(trace, st.after, lookup),
    ]), {gen, slot: body});
    if (got === undefined) return;
    const [pat, before, after] = got;
    let rule;
    if (pat.error) rule = h("div", {class: "error-text"}, `rule ${st.pattern}: ${pat.error}`);
    else {
      const code = h("pre", {class: "code rule-src highlight"});
      if (pat.html) code.appendChild(safeHighlighted(pat.html)); else code.textContent = pat.src ?? "";
      rule = [h("div", {class: "rule-head"}, h("span", {class: "rule-name"}, pat.name || "rule"), " ",
        fileLine(pat.file, pat.line)),
        code, pat.pat ? h("div", {class: "pat mono small muted", title: "the matched pattern"}, pat.pat) : null];
    }
    put(body,
      stepTitle(k, n, st),
      st.error ? h("div", {class: "error-text"}, `rule raised: ${st.error}`) : null,
      h("div", {class: "rule"}, rule),
      h("div", {class: "before-after"},
        h("div", null, h("h3", null, "before"), h("div", {class: "tree-box", dataset: {role: "before"}}, before)),
        h("div", null, h("h3", null, "after"), h("div", {class: "tree-box", dataset: {role: "after"}},
          after ?? h("span", {class: "muted"}, "— (the rule raised)")))));
  }

  /** While steps repeat: step k's title in place of the one shown and k highlighted in the list, what the title's step
   * showed below it dimmed, and render(), the whole step, REPEAT_MS after the last step unless a newer request (gen)
   * replaced it. False (nothing done) when the panel shows no step of rw's to keep meanwhile. */
  _defer(rw, k, gen, render) {
    const title = this.body && this.body.isConnected && this.body.querySelector(":scope > .step-title");
    if (!title) return false;
    this._syncList(rw, k);
    title.replaceWith(stepTitle(k, rw.steps.length, rw.steps[k - 1]));
    for (const el of this.body.children) if (!el.classList.contains("step-title")) el.style.opacity = "0.5";
    this.deferred = () => { if (this.fresh(gen)) render(); };
    this.later = setTimeout(() => this.settle(), this.repeatMs);
    return true;
  }

  /** The whole step now, where stepping deferred it: the arrow key was released (app.js), or REPEAT_MS passed. */
  settle() {
    const render = this.deferred;
    clearTimeout(this.later);
    [this.later, this.deferred] = [0, null];
    if (render) render();
  }

  /** Render the window of the step list around k if k is not well inside the rendered one; highlight k. */
  _syncList(rw, k) {
    const n = rw.steps.length;
    const L = this.list;
    const inside = L && L.rw === rw && L.n === n && (k >= L.lo + LIST_MARGIN || L.lo === 0)
      && (k <= L.hi - LIST_MARGIN || L.hi === n);
    if (!inside) {
      const lo = Math.max(0, Math.min(k - LIST_WINDOW / 2, n - LIST_WINDOW)), hi = Math.min(n, lo + LIST_WINDOW);
      const rows = [h("li", {class: "step-row", dataset: {step: 0}}, h("span", {class: "k"}, "0"),
        h("span", {class: "muted"}, "input graph"))];
      if (lo > 0) rows.push(h("li", {class: "muted small"}, `… ${lo} earlier`));
      for (let b = lo; b < hi; b += LIST_BLOCK) {
        const block = [];
        for (let i = b; i < Math.min(hi, b + LIST_BLOCK); i++) {
          const st = rw.steps[i];
          block.push(h("li", {class: `step-row${st.error ? " error" : ""}`, dataset: {step: st.k}},
            h("span", {class: "k"}, String(st.k)), h("span", {class: "mono"}, `#${st.before} → ${st.after ?? "✗"}`),
            h("span", {class: "muted pat-ref", dataset: {pat: st.pattern}}, `rule ${st.pattern}`),
            h("span", {class: "dt muted"}, fmtNs(st.dt))));
        }
        rows.push(h("li", {class: "step-block"}, h("ul", null, ...block)));
      }
      if (hi < n) rows.push(h("li", {class: "muted small"}, `… ${n - hi} more`));
      const el = h("details", {class: "step-list", open: true}, h("summary", null, "All steps"),
        h("ul", {class: "steps"}, ...rows));
      if (L && L.el.isConnected) L.el.replaceWith(el); else this.el.appendChild(el);
      this.list = {rw, n, lo, hi, el, sel: null};
      this._ruleNames(el, this.trace);
    }
    const cur = this.list;
    if (cur.sel) cur.sel.classList.remove("selected");
    cur.sel = cur.el.querySelector(`li[data-step="${k}"]`);
    if (cur.sel) cur.sel.classList.add("selected");
  }

  /** Matches per rule, most first, each row named by its rule and jumping to the rule's first step. */
  _ruleCounts(rw) {
    if (!rw.steps.length) return null;
    const by = new Map();  // pattern id -> {n, first}, in order of first match
    for (const st of rw.steps) {
      const c = by.get(st.pattern);
      if (c) c.n++; else by.set(st.pattern, {n: 1, first: st.k});
    }
    const rows = [...by].sort((x, y) => y[1].n - x[1].n).map(([pid, c]) =>
      h("li", {class: "rule-count", dataset: {step: c.first}, title: `first match: step ${c.first}`},
        h("span", {class: "n"}, `${c.n}×`), " ", h("span", {class: "pat-ref", dataset: {pat: pid}}, `rule ${pid}`)));
    const el = h("details", {class: "rule-counts", open: by.size <= 8},
      h("summary", null, `${by.size} rule${by.size === 1 ? "" : "s"}`), h("ul", null, ...rows));
    return el;
  }

  /** Replace "rule N" in `el` by the rules' names (few distinct rules, each fetched once). */
  async _ruleNames(el, trace) {
    const spans = [...el.querySelectorAll("[data-pat]")];
    for (const pid of new Set(spans.map((s) => s.dataset.pat))) {
      if (!el.isConnected) return;  // another rewrite's list replaced this one (maybe of another trace)
      let name;
      try { name = (await api.pattern(trace, Number(pid))).name; } catch { continue; }
      if (!name) continue;
      for (const s of spans) if (s.dataset.pat === pid) s.textContent = name;
    }
  }

  /** A depth-limited printout of the graph under `id`, each node a clickable chip. */
  async _tree(trace, id, lookup) {
    const get = async (x) => lookup(x) ?? await api.node(trace, x);
    const lines = [];
    const seen = new Set();
    const visit = async (x, depth) => {
      if (lines.length >= TREE_MAX) return;
      let d;
      try { d = await get(x); } catch (e) { lines.push({depth, text: `#${x} (${e.message})`, id: x}); return; }
      const again = seen.has(x);
      seen.add(x);
      lines.push({depth, id: x, d, again});
      if (again || depth >= TREE_DEPTH) return;
      for (const sid of d.src || []) await visit(sid, depth + 1);
    };
    await visit(id, 0);
    const pre = h("div", {class: "tree-print mono"});
    for (const ln of lines) {
      const row = h("div", {class: "tree-line"});
      row.style.paddingLeft = `${ln.depth * 14}px`;
      if (!ln.d) row.append(ln.text);
      else row.append(nodeChip(ln.d), ln.again ? h("span", {class: "muted"}, " (above)") : "",
        !ln.again && ln.depth >= TREE_DEPTH && (ln.d.src || []).length ? h("span", {class: "muted"}, " …") : "");
      pre.appendChild(row);
    }
    if (lines.length >= TREE_MAX) pre.appendChild(h("div", {class: "muted"}, "…"));
    return pre;
  }
}

/** The title of step k of n (st: its step of the /rewrites/<r> answer). */
function stepTitle(k, n, st) {
  return h("div", {class: "step-title"}, h("b", null, `Step ${k} / ${n}`), " ",
    h("span", {class: "muted"}, `match took ${fmtNs(st.dt)}`));
}

/** A clickable node reference: #id OP dtype arg. */
export function nodeChip(d) {
  return h("span", {class: `chip cat-${d.cat || "other"}`, dataset: {node: d.id}, title: `select #${d.id}`},
    h("span", {class: "nid"}, `#${d.id}`), " ", h("b", null, d.op),
    d.dtype ? h("span", {class: "muted"}, ` ${d.dtype}`) : null,
    hasArg(d.arg) ? h("span", {class: "arg"}, ` ${d.arg}`) : null);
}

function hasArg(arg) {
  return arg !== undefined && arg !== null && arg !== "" && arg !== "None";
}
