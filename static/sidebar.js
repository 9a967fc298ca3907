// The sidebar: the contexts tree and, for the selected context, its rewrites with match counts.
import {$, fmtNs, h, kernelName, put, siteText} from "./dom.js";

const KIND_ICON = {schedule: "S", kernel: "K", copy: "C", default: "·"};
const OPEN_UP_TO = 8;  // a parent with more children than this starts collapsed
// a context's rewrites list longer than RW_ALL is drawn as a window of RW_WINDOW rows (it shows ~16), moved when the
// rows in view come within RW_MARGIN of its ends
const [RW_ALL, RW_WINDOW, RW_MARGIN] = [200, 160, 40];
const MADE_BY_SCHEDULE = new Set(["kernel", "memory", "copy"]);  // kinds run from a schedule (see buildTree)

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
    this.tree = buildTree([], new Map());
    this.openByTrace = new Map();  // trace -> (row key -> open): the user's collapse/expand, remembered per trace
    this.ctx = null;
    this.rw = null;
    this._scrollPending = false;
    this._scrolledTo = null;  // the selection last scrolled into view
    this._soonTree = false;  // the tree waits to be drawn after the next paint (_renderSoon)
    this._rwAt = null;  // the row a long rewrites list's window is drawn around (renderRewrites)
    this._scrollQueued = false;
    this._rowPx = 21;  // a rewrite row's height (measured once drawn): a gap's height a row
    this._rwWindow = [0, 0, 0];  // [first, end, of how many]: the rewrites drawn
    this.rows = new Map();  // row key -> {sig, li}: the tree's rows, kept while unchanged (render)
    this.rwRows = new Map();  // rewrite id -> {sig, li}: the same for the rewrites list
    this.live = true;  // whether the trace's writer still runs: a rewrite without an end is running, else cut off
    // (another filter: a long rewrites list is drawn again around the selection: _rwAt)
    this.filterEl.addEventListener("input", () => { this._rwAt = null; this.render(); });
    this.hideEl.addEventListener("change", () => { this._rwAt = null; this.renderRewrites(); });
    this.groupEl.addEventListener("change", () => this.render());
    this.treeEl.addEventListener("click", (ev) => {
      const li = ev.target.closest("li[data-row]");
      if (!li) return;
      // a folded row has no context of its own: a click anywhere on it opens or closes it
      if (ev.target.closest(".twisty") || li.dataset.fold !== undefined) this.toggle(li.dataset.row);
      else this.onContext(Number(li.dataset.ctx));
    });
    // on a toggle, ArrowRight opens and ArrowLeft closes (Enter and Space click it, as any button); they do not
    // reach the page's keys, where the arrows step through the graph
    this.treeEl.addEventListener("keydown", (ev) => {
      const tw = ev.target.closest(".twisty");
      if (!tw || (ev.key !== "ArrowLeft" && ev.key !== "ArrowRight")) return;
      ev.stopPropagation();
      ev.preventDefault();
      const li = tw.closest("li[data-row]");
      if ((li.getAttribute("aria-expanded") === "true") !== (ev.key === "ArrowRight")) this.toggle(li.dataset.row);
    });
    this.rwEl.addEventListener("scroll", () => {
      if (this._scrollQueued) return;
      this._scrollQueued = true;
      requestAnimationFrame(() => { this._scrollQueued = false; this._followScroll(); });
    }, {passive: true});
    this.rwEl.addEventListener("click", (ev) => {
      const li = ev.target.closest("li[data-rw]");
      if (li) this.onRewrite(Number(li.dataset.rw));
    });
  }

  get hideUnchanged() { return this.hideEl.checked; }

  setContexts(list) {
    this.contexts = list;
    this.byId = new Map(list.map((c) => [c.id, c]));
    this.tree = buildTree(list, this.byId);
    this.render();
  }

  /** The open/closed choices for the trace on screen (its picker's value: the page selects it before its contexts). */
  get openState() {
    const t = $("#trace-select")?.value ?? "";
    if (!this.openByTrace.has(t)) this.openByTrace.set(t, new Map());
    return this.openByTrace.get(t);
  }

  /** Open or close the row `key` (a context's id, or "f" and the first id of a folded run), keeping the focus. */
  toggle(key) {
    const li = this.treeEl.querySelector(`li[data-row="${key}"]`);
    const focused = li && li.contains(document.activeElement);
    this.openState.set(key, !(li && li.getAttribute("aria-expanded") === "true"));
    this.render();
    if (focused) this.treeEl.querySelector(`li[data-row="${key}"] .twisty`)?.focus();
  }

  /** Row keys from the selection up to the top (its parents and the folded run it is in): all shown open. */
  _selectionPath() {
    const path = new Set();
    for (let k = this.tree.up.get(String(this.ctx)); k !== undefined; k = this.tree.up.get(k)) path.add(k);
    return path;
  }

  /** Whether row `key` (of n children) shows them: the user's choice, else open on the selection's path or when
   * small; everything under a filter. */
  _isOpen(key, n, path, q) {
    const st = this.openState;
    if (q) return true;  // a filter shows its hits wherever they are
    return st.has(key) ? st.get(key) : path.has(key) || (key[0] !== "f" && n <= OPEN_UP_TO);
  }

  setSelection(ctx, rw) {
    const ctxChanged = ctx !== this.ctx;
    const before = this._selectionPath();
    this.ctx = ctx;
    this.rw = rw;
    // (a rewrite not in the window drawn of a long list: the window moves to it)
    if (!ctxChanged && this.rwRows.has(rw)) { this._markSelection(); return; }
    if (!ctxChanged) { this.renderRewrites({center: true}); return; }
    // a newly selected context is shown: the rows above it open (and stay open when the selection moves on)
    const path = this._selectionPath();
    for (const k of path) this.openState.set(k, true);
    // the new context's rewrites now; the tree's rows, where they change (a row above the selection opens), after the
    // frame that shows the page's loading state (issue 30: rebuilt before it, they delayed that paint)
    this.renderRewrites({center: true});
    if (!this._treeKept(before, path)) this._renderSoon();
  }

  /** Whether the tree's rows as drawn are the rows of the selection whose path (row keys above it) is `path`, the one
   * drawn having had `before`: without a filter, the rows depend on the selection only through the rows open for
   * being on its path. */
  _treeKept(before, path) {
    const q = this.filterEl.value.trim().toLowerCase();
    if (q || this._soonTree) return false;
    if (this.grouped) return true;
    for (const k of new Set([...before, ...path])) {
      const row = this.rows.get(k);
      if (!row || (!row.top && row.open !== this._isOpen(k, row.n, path, q))) return false;
    }
    return true;
  }

  /** Draw the tree after the next paint (once, however many ask meanwhile). */
  _renderSoon() {
    if (this._soonTree) return;
    this._soonTree = true;
    requestAnimationFrame(() => setTimeout(() => { if (this._soonTree) this.render(); }, 0));
  }

  get grouped() { return this.groupEl.checked; }

  /** Contexts in display order (depth first), the ones the filter keeps and the open rows show (folded runs left
   * out); used for PageUp/PageDown too. Grouped by call site: the kernels only, each group's first row carrying its
   * heading (`group`). */
  visibleContexts() {
    return this.rowsShown().filter((r) => r.c);
  }

  /** The rows on screen: {c, depth, n, open, hit} for a context (hit: kept by the filter itself, not for a child),
   * {fold, key, depth, open} for a folded run of alike contexts. */
  rowsShown() {
    const q = this.filterEl.value.trim().toLowerCase();
    if (this.grouped) return this._byCallsite(q);
    const {kids, runs} = this.tree;
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
    if (q) for (const root of kids.get(null) || []) visit(root);
    const path = this._selectionPath();
    const out = [];
    const node = (c, depth) => {
      if (q && !shown.get(c.id)) return;
      const children = kids.get(c.id) || [];
      // the default context with nothing in it is noise: skip it (its children are the top rows)
      const top = c.kind === "default" && c.parent === null;
      const open = top || this._isOpen(String(c.id), children.length, path, q);
      if (!(top && !c.rewrites.length)) out.push({c, depth, n: children.length, open, top, hit: !q || keep(c)});
      if (open) level(c.id, top ? depth : depth + 1);
    };
    const level = (parent, depth) => {
      for (const run of runs.get(parent) || []) {
        if (run.length === 1 || q) { for (const c of run) node(c, depth); continue; }
        const key = `f${run[0].id}`, open = this._isOpen(key, run.length, path, q);
        out.push({fold: run, key, depth, open});
        if (open) for (const c of run) node(c, depth + 1);
      }
    };
    level(null, 0);
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
    this._soonTree = false;
    const rows = this.rowsShown();
    // a live trace re-renders the tree every few hundred ms: rows that did not change are kept (with their layout),
    // so a refresh costs what it adds, not a rebuild and relayout of every row (a long frame at hundreds of rows);
    // a parent's row shows whether it has children, not how many: a kernel added under it leaves it as it is
    const made = new Map();
    const items = rows.map((r) => {
      const {c, depth, n, open} = r;
      const key = c ? String(c.id) : r.key;
      const sig = c ? JSON.stringify([c.name, c.kind, c.ended, c.error, c.shape_colors, c.rewrites.length, depth,
        n > 0, open]) : JSON.stringify([r.fold.map((x) => [x.id, x.ended, x.error]), depth, open]);
      const old = this.rows.get(key);
      const li = old && old.sig === sig ? old.li : c ? this._contextRow(c, depth, n, open) : this._foldRow(r);
      // a row the filter keeps only for a hit below it (a kernel's schedule) is there for its place, not a hit
      if (c) li.classList.toggle("filter-parent", r.hit === false);
      // (open, n and top: what _treeKept compares a new selection's rows with)
      made.set(key, {sig, li, open, n: c ? n : r.fold.length, top: Boolean(r.top)});
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

  /** A row's toggle: a button (so Tab reaches it and Enter or Space works it) where the row has children. */
  _twisty(n, open) {
    if (!n) return h("span", {class: "twisty none"});
    return h("button", {class: "twisty", type: "button", title: open ? "collapse" : "expand",
      "aria-label": open ? "collapse" : "expand"}, open ? "▾" : "▸");
  }

  _contextRow(c, depth, n, open) {
    const name = c.kind === "kernel" ? kernelName(c.name, c.shape_colors) : h("span", {class: "cname"}, c.name);
    const li = h("li", {class: `ctx kind-${c.kind}${c.ended ? "" : " running"}${c.error ? " error" : ""}`,
      dataset: {ctx: c.id, row: c.id}, role: "treeitem", "aria-level": String(depth + 1),
      title: `${c.kind} #${c.id}: ${c.name}`},
    this._twisty(n, open), h("span", {class: "kind"}, KIND_ICON[c.kind] ?? String(c.kind).slice(0, 1).toUpperCase()),
    name, h("span", {class: "count muted"}, c.rewrites.length ? String(c.rewrites.length) : ""));
    if (n) li.setAttribute("aria-expanded", String(open));
    li.style.paddingLeft = `${4 + depth * 12}px`;
    return li;
  }

  /** The row of a run of alike contexts (repeated schedules, jit replays): "name ×count", opening onto them. */
  _foldRow({fold, key, depth, open}) {
    const [first, last] = [fold[0], fold[fold.length - 1]];
    const names = first.name === last.name ? first.name : `${first.name} … ${last.name}`;
    const li = h("li", {class: `ctx fold kind-${first.kind}${fold.some((c) => c.error) ? " error" : ""}`,
      dataset: {fold: key, row: key}, role: "treeitem", "aria-level": String(depth + 1), "aria-expanded": String(open),
      title: `${fold.length} alike ${first.kind} contexts (${names}), each with the same children`},
    this._twisty(fold.length, open),
    h("span", {class: "kind"}, KIND_ICON[first.kind] ?? String(first.kind).slice(0, 1).toUpperCase()),
    h("span", {class: "cname"}, baseName(first.name)), h("span", {class: "fold-count"}, `×${fold.length}`));
    li.style.paddingLeft = `${4 + depth * 12}px`;
    return li;
  }

  /** The selected context's rewrites. A list of more than RW_ALL is drawn as a window of RW_WINDOW rows, gaps of
   * their height keeping the place of the others (a 1,375-rewrite schedule's rows took 30-45 ms to make when selected,
   * and cost every frame after ~10 ms checking which rows are in view: issue 30): around the selection where `center`
   * (a new selection), else around the part of the list scrolled to (_followScroll). */
  renderRewrites({center = false} = {}) {
    const c = this.byId.get(this.ctx);
    const list = this.visibleRewrites();
    const made = new Map();
    let [lo, hi] = [0, list.length];
    if (list.length > RW_ALL) {
      if (center || this._rwAt === null) {
        if (this._rwAt === null) this._scrolledTo = null;  // (drawn anew around the selection: scrolled to it)
        this._rwAt = Math.max(0, list.findIndex((r) => r.id === this.rw));
      }
      hi = Math.min(list.length, Math.max(0, this._rwAt - RW_WINDOW / 2) + RW_WINDOW);
      lo = Math.max(0, hi - RW_WINDOW);
    }
    this._rwWindow = [lo, hi, list.length];
    const items = list.slice(lo, hi).map((r) => {
      const sig = JSON.stringify([r.name, r.file, r.line, r.bottom_up, r.ended, r.changed, r.error, r.matches, r.dt,
        this.live]);
      const old = this.rwRows.get(r.id);
      const li = old && old.sig === sig ? old.li : this._rewriteRow(r);
      made.set(r.id, {sig, li});
      return li;
    });
    const gap = (n) => h("li", {class: "rw-gap", "aria-hidden": "true", style: {height: `${n * this._rowPx}px`}});
    if (lo > 0) items.unshift(gap(lo));
    if (hi < list.length) items.push(gap(list.length - hi));
    this.rwRows = made;
    if (!c) items.push(h("li", {class: "empty-row muted"}, "pick a context"));
    else if (!list.length) {
      items.push(h("li", {class: "empty-row muted"}, c.rewrites.length ? "all hidden" : "no rewrites"));
    }
    reconcile(this.rwEl, items);
    put($("#rewrites-count"), c ? `${list.length}/${c.rewrites.length}` : "");
    this._markSelection();
  }

  /** The list was scrolled: a window whose rows in view come near its ends (RW_MARGIN) is drawn again around them. */
  _followScroll() {
    const [lo, hi, n] = this._rwWindow;
    if (hi - lo === n) return;
    const el = this.rwEl, px = this._measureRow();
    const first = Math.floor(el.scrollTop / px), last = Math.ceil((el.scrollTop + el.clientHeight) / px);
    if ((lo === 0 || first >= lo + RW_MARGIN) && (hi === n || last <= hi - RW_MARGIN)) return;
    this._rwAt = Math.floor((first + last) / 2);
    this.renderRewrites();
  }

  /** A drawn rewrite row's height (read where the layout is done anyway: a scroll's frame). */
  _measureRow() {
    const li = this.rwEl.querySelector("li[data-rw]");
    this._rowPx = (li && li.getBoundingClientRect().height) || this._rowPx;
    return this._rowPx;
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
    this._measureRow();
    if (cli && (rli || this.rw === null)) this._scrolledTo = `${this.ctx}:${this.rw}`;
  }
}

/** A context's name without its trailing number: "schedule 12" and "schedule 13" are alike. */
const baseName = (name) => String(name).replace(/\s+\d+$/, "");

/** The display tree of contexts, in O(contexts): `kids` (parent id -> contexts, null: the top), `runs` (parent id ->
 * its children in runs of alike ones, see foldKey) and `up` (row key -> the key of the row it sits under). */
function buildTree(list, byId) {
  const kids = new Map();
  for (const c of list) {
    const p = byId.has(c.parent) ? c.parent : null;
    if (!kids.has(p)) kids.set(p, []);
    kids.get(p).push(c);
  }
  // the recorder files a schedule's kernels (and memory plan, copies) beside it: they run after the schedule's context
  // ends, maybe after other contexts (a schedule run later, a cache hit's). One that names its schedule (`schedule`,
  // minor version 6) goes under it where that schedule is a sibling (so the tree stays a tree), leaving the run by
  // order as it was. One that does not (an older trace) goes by order: those that follow a schedule, up to any other
  // context, go under it; a jit replay ran no schedule: it stays
  for (const [p, siblings] of kids) {
    const scheds = new Map(siblings.filter((c) => c.kind === "schedule").map((c) => [c.id, c]));
    let owner = null;
    const stay = [];
    for (const c of siblings) {
      const linked = c.kind !== "schedule" && c.schedule != null ? scheds.get(c.schedule) : undefined;
      if (c.kind === "schedule") owner = c;
      else if (!linked && !(owner && MADE_BY_SCHEDULE.has(c.kind) && !String(c.name).startsWith("jit replay"))) {
        owner = null;
      }
      const under = linked || owner;
      if (!under || under === c) { stay.push(c); continue; }
      if (!kids.has(under.id)) kids.set(under.id, []);
      kids.get(under.id).push(c);
    }
    kids.set(p, stay);
  }
  const runs = new Map(), up = new Map();
  for (const [p, siblings] of kids) {
    const groups = [];
    let key = null;
    for (const c of siblings) {
      const k = foldKey(c, kids);
      if (k === key) groups[groups.length - 1].push(c); else groups.push([c]);
      key = k;
    }
    runs.set(p, groups);
    for (const run of groups) {
      const at = p === null ? undefined : String(p);
      if (run.length > 1) {
        if (at !== undefined) up.set(`f${run[0].id}`, at);
        for (const c of run) up.set(String(c.id), `f${run[0].id}`);
      } else if (at !== undefined) up.set(String(run[0].id), at);
    }
  }
  return {kids, runs, up};
}

/** Alike contexts fold into one row: same kind, same name but for a trailing number, children of the same names. */
function foldKey(c, kids) {
  return JSON.stringify([c.kind, baseName(c.name), (kids.get(c.id) || []).map((k) => k.name)]);
}

/** Make el's children exactly `items` (elements, in order), moving only what is out of place: appending rows to a
 * list touches only the new ones. */
function reconcile(el, items) {
  let at = el.firstChild;
  for (const item of items) {
    if (item === at) { at = at.nextSibling; continue; }
    el.insertBefore(item, at);
  }
  if (!at) return;
  // the rest at once (leaving a 1,375-row list: one removal, not one a row)
  const rest = document.createRange();
  rest.setStartBefore(at);
  rest.setEndAfter(el.lastChild);
  rest.deleteContents();
}
