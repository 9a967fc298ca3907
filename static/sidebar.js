// The sidebar: the contexts tree and, for the selected context, its rewrites with match counts.
import {$, coloredName, fmtNs, h, put, siteText} from "./dom.js";

const KIND_ICON = {schedule: "S", kernel: "K", default: "·"};

export class Sidebar {
  /** onContext(ctxId), onRewrite(rwId) */
  constructor({onContext, onRewrite}) {
    this.onContext = onContext;
    this.onRewrite = onRewrite;
    this.treeEl = $("#contexts");
    this.rwEl = $("#rewrites");
    this.filterEl = $("#filter");
    this.hideEl = $("#hide-unchanged");
    // kernels grouped by the user's line that made each one's output (its last call site), instead of the tree
    this.groupEl = h("input", {id: "group-callsite", type: "checkbox"});
    $("#contexts-section h2").append(h("label", {class: "inline small",
      title: "Group kernels by the line of your program that made them"}, this.groupEl, " by call site"));
    this.contexts = [];
    this.byId = new Map();
    this.collapsed = new Set();
    this.ctx = null;
    this.rw = null;
    this._scrollPending = false;
    this._scrolledTo = null;  // the selection last scrolled into view
    this.rows = new Map();  // context id -> {sig, li}: the tree's rows, kept while unchanged (render)
    this.rwRows = new Map();  // rewrite id -> {sig, li}: the same for the rewrites list
    this.live = true;  // whether the trace's writer still runs: a rewrite without an end is running, else cut off
    this.filterEl.addEventListener("input", () => this.render());
    this.hideEl.addEventListener("change", () => this.renderRewrites());
    this.groupEl.addEventListener("change", () => this.render());
    this.treeEl.addEventListener("click", (ev) => {
      const tw = ev.target.closest(".twisty");
      const li = ev.target.closest("li[data-ctx]");
      if (!li) return;
      const id = Number(li.dataset.ctx);
      if (tw) {
        if (this.collapsed.has(id)) this.collapsed.delete(id); else this.collapsed.add(id);
        this.render();
        return;
      }
      this.onContext(id);
    });
    this.rwEl.addEventListener("click", (ev) => {
      const li = ev.target.closest("li[data-rw]");
      if (li) this.onRewrite(Number(li.dataset.rw));
    });
  }

  get hideUnchanged() { return this.hideEl.checked; }

  setContexts(list) {
    this.contexts = list;
    this.byId = new Map(list.map((c) => [c.id, c]));
    this.render();
  }

  setSelection(ctx, rw) {
    const ctxChanged = ctx !== this.ctx;
    this.ctx = ctx;
    this.rw = rw;
    if (ctxChanged) this.render();
    else this._markSelection();
  }

  get grouped() { return this.groupEl.checked; }

  /** Contexts in display order (depth first), the ones the filter keeps; used for PageUp/PageDown too. Grouped by
   * call site: the kernels only, each group's first row carrying its heading (`group`). */
  visibleContexts() {
    const q = this.filterEl.value.trim().toLowerCase();
    if (this.grouped) return this._byCallsite(q);
    const kids = new Map();
    for (const c of this.contexts) {
      const p = this.byId.has(c.parent) ? c.parent : null;
      if (!kids.has(p)) kids.set(p, []);
      kids.get(p).push(c);
    }
    // the selected context stays, whatever the filter: the graph still shows it (issue 30)
    const keep = (c) => c.id === this.ctx || this.matches(c, q);
    // a context is shown if it or any descendant matches the filter
    const shown = new Map();
    const visit = (c) => {
      let any = keep(c);
      for (const k of kids.get(c.id) || []) any = visit(k) || any;
      shown.set(c.id, any);
      return any;
    };
    for (const root of kids.get(null) || []) visit(root);
    const out = [];
    const walk = (c, depth) => {
      if (!shown.get(c.id)) return;
      const children = kids.get(c.id) || [];
      // the default context with nothing in it is noise: skip it
      if (!(c.kind === "default" && !c.rewrites.length && c.parent === null)) out.push({c, depth, n: children.length});
      const inner = c.kind === "default" && c.parent === null ? depth : depth + 1;
      if (!this.collapsed.has(c.id) || q) for (const k of children) walk(k, inner);
    };
    for (const root of kids.get(null) || []) walk(root, 0);
    return out;
  }

  visibleRewrites() {
    const c = this.byId.get(this.ctx);
    if (!c) return [];
    const q = this.filterEl.value.trim().toLowerCase();
    const nameHit = !q || String(c.name).toLowerCase().includes(q);
    // a rewrite still running has changed === null (not known yet): it is not "unchanged", so never hidden
    return c.rewrites.filter((r) => r.id === this.rw || ((!this.hideUnchanged || r.changed || !r.ended)
      && (nameHit || String(r.name).toLowerCase().includes(q))));
  }

  /** Whether the filter's text q (lower case) matches context c: its name, one of its rewrites' names, or (grouped by
   * call site) one of its call sites. */
  matches(c, q) {
    const has = (text) => String(text).toLowerCase().includes(q);
    if (!q || has(c.name)) return true;
    if (this.grouped) return (c.callsites || []).some((s) => has(`${s.file}:${s.line} ${s.function}`));
    return c.rewrites.some((r) => has(r.name));
  }

  _byCallsite(q) {
    const groups = new Map();  // site key -> {site, rows}, in order of first appearance
    for (const c of this.contexts) {
      if (c.kind !== "kernel") continue;
      const sites = c.callsites || [];
      const site = sites.length ? sites[sites.length - 1] : null;
      const key = site ? `${site.file}:${site.line}:${site.function}` : "";
      if (c.id !== this.ctx && !this.matches(c, q)) continue;
      if (!groups.has(key)) groups.set(key, {key, site, rows: []});
      groups.get(key).rows.push({c, depth: 1, n: 0});
    }
    const out = [];
    for (const g of groups.values()) {
      g.rows[0].group = g;
      out.push(...g.rows);
    }
    return out;
  }

  _groupRow(g) {
    const text = g.site ? `${siteText(g.site)} in ${g.site.function}` : "(no call site)";
    return h("li", {class: "site-group", dataset: {site: g.key}, role: "group",
      title: g.site ? `${g.site.file}:${g.site.line} in ${g.site.function}` : "kernels of no recorded line"},
    h("span", {class: "mono"}, text), h("span", {class: "count muted"}, String(g.rows.length)));
  }

  render() {
    const rows = this.visibleContexts();
    // a live trace re-renders the tree every few hundred ms: rows that did not change are kept (with their layout),
    // so a refresh costs what it adds, not a rebuild and relayout of every row (a long frame at hundreds of rows)
    const made = new Map();
    const items = rows.map(({c, depth, n}) => {
      const sig = JSON.stringify([c.name, c.kind, c.ended, c.error, c.kname_colors, c.rewrites.length, depth, n,
        n && this.collapsed.has(c.id)]);
      const old = this.rows.get(c.id);
      const li = old && old.sig === sig ? old.li : this._contextRow(c, depth, n);
      made.set(c.id, {sig, li});
      return li;
    });
    this.rows = made;
    if (this.grouped) {  // a heading before each group's first kernel
      for (let i = rows.length - 1; i >= 0; i--) if (rows[i].group) items.splice(i, 0, this._groupRow(rows[i].group));
      if (!rows.length) items.push(h("li", {class: "empty-row muted"}, "no kernels"));
    }
    reconcile(this.treeEl, items);
    const real = this.contexts.filter((c) => !(c.kind === "default" && !c.rewrites.length));
    put($("#contexts-count"), String(real.length));
    this.renderRewrites();
  }

  _contextRow(c, depth, n) {
    const name = c.kind === "kernel" ? coloredName(c.name, c.kname_colors) : h("span", {class: "cname"}, c.name);
    const twisty = n ? h("span", {class: "twisty"}, this.collapsed.has(c.id) ? "▸" : "▾")
      : h("span", {class: "twisty none"});
    const li = h("li", {class: `ctx kind-${c.kind}${c.ended ? "" : " running"}${c.error ? " error" : ""}`,
      dataset: {ctx: c.id}, role: "treeitem", title: `${c.kind} #${c.id}: ${c.name}`},
    twisty, h("span", {class: "kind"}, KIND_ICON[c.kind] ?? String(c.kind).slice(0, 1).toUpperCase()), name,
    h("span", {class: "count muted"}, c.rewrites.length ? String(c.rewrites.length) : ""));
    li.style.paddingLeft = `${4 + depth * 12}px`;
    return li;
  }

  renderRewrites() {
    const c = this.byId.get(this.ctx);
    const list = this.visibleRewrites();
    const made = new Map();
    const items = list.map((r) => {
      const sig = JSON.stringify([r.name, r.file, r.line, r.bottom_up, r.ended, r.changed, r.error, r.matches, r.dt,
        this.live]);
      const old = this.rwRows.get(r.id);
      const li = old && old.sig === sig ? old.li : this._rewriteRow(r);
      made.set(r.id, {sig, li});
      return li;
    });
    this.rwRows = made;
    if (!c) items.push(h("li", {class: "empty-row muted"}, "pick a context"));
    else if (!list.length) {
      items.push(h("li", {class: "empty-row muted"}, c.rewrites.length ? "all hidden" : "no rewrites"));
    }
    reconcile(this.rwEl, items);
    put($("#rewrites-count"), c ? `${list.length}/${c.rewrites.length}` : "");
    this._markSelection();
  }

  _rewriteRow(r) {
    const open = this.live ? [" running", " (in progress)", "running…"]
      : [" cut error", " (never ended: the writing process stopped first)", "cut off"];
    return h("li", {
      class: `rw${!r.ended ? open[0] : r.changed ? "" : " unchanged"}${r.error ? " error" : ""}`,
      dataset: {rw: r.id},
      title: `${r.name} (${r.file}:${r.line})${r.bottom_up ? " bottom-up" : ""}${r.ended ? "" : open[1]}`},
    h("span", {class: "rname"}, r.name),
    h("span", {class: "matches", title: "matches"}, String(r.matches ?? 0)),
    h("span", {class: "dt muted"}, r.ended ? fmtNs(r.dt) : open[2]));
  }

  _markSelection() {
    for (const el of [this.treeEl, this.rwEl]) {
      for (const li of el.querySelectorAll("li.selected, li.off-filter")) li.classList.remove("selected", "off-filter");
    }
    const cli = this.treeEl.querySelector(`li[data-ctx="${this.ctx}"]`);
    const rli = this.rwEl.querySelector(`li[data-rw="${this.rw}"]`);
    // a selection the filter (or "hide unchanged") would hide is shown anyway, marked as kept only for being selected
    const q = this.filterEl.value.trim().toLowerCase(), c = this.byId.get(this.ctx);
    if (cli) cli.classList.add("selected", ...(c && !this.matches(c, q) ? ["off-filter"] : []));
    const r = c && c.rewrites.find((x) => x.id === this.rw);
    const rwHidden = r && ((this.hideUnchanged && r.ended && !r.changed)
      || !(!q || String(c.name).toLowerCase().includes(q) || String(r.name).toLowerCase().includes(q)));
    if (rli) rli.classList.add("selected", ...(rwHidden ? ["off-filter"] : []));
    // scrolling forces a layout (~30 ms of the first view on a slow machine, once per call): do it once, in the
    // next frame, where the layout is computed anyway, and only for a selection not scrolled to yet (a live refresh
    // keeps the selection: it must not force a layout, nor take the list back from where the user scrolled it)
    if (`${this.ctx}:${this.rw}` === this._scrolledTo) return;
    if (!this._scrollPending) {
      this._scrollPending = true;
      requestAnimationFrame(() => { this._scrollPending = false; this._scrollToSelection(); });
    }
  }

  _scrollToSelection() {
    const [cli, rli] = [this.treeEl.querySelector("li.selected"), this.rwEl.querySelector("li.selected")];
    for (const li of [cli, rli]) if (li) li.scrollIntoView({block: "nearest"});
    if (cli && (rli || this.rw === null)) this._scrolledTo = `${this.ctx}:${this.rw}`;
  }
}

/** Make el's children exactly `items` (elements, in order), moving only what is out of place: appending rows to a
 * list touches only the new ones. */
function reconcile(el, items) {
  let at = el.firstChild;
  for (const item of items) {
    if (item === at) { at = at.nextSibling; continue; }
    el.insertBefore(item, at);
  }
  while (at) {
    const next = at.nextSibling;
    at.remove();
    at = next;
  }
}
