// The main graph view: a rewrite's step, fetched through static/api.js (the step's graph, or the delta from the step
// on screen) and drawn on a <canvas> with pan/zoom, highlights, search, collapsed constants and incremental updates.
// A canvas redraw of a few thousand boxes costs a few ms, where an SVG of the same size pays style, layout,
// layerization and paint for every element on each change. Nodes and edges are kept by id, so a step change (/delta)
// updates only the model entries that changed. Geometry: static/graphgeom.js; the canvas passes: static/graphdraw.js.
import {api} from "./api.js";
import {h, put} from "./dom.js";
import {CATEGORIES, paint, readColors, TEXT_MIN_SCALE} from "./graphdraw.js";
import {boxH, boxW, constsLine, Edge, edgeKey, edgeObj, nodeLike, nodeObj, respace, unspace} from "./graphgeom.js";
import {GRAPH_MARKS, legendBox} from "./legend.js";
import {foldedView, GROUP_MIN_NODES, indexGroups, siteGroups, usersOf} from "./graphgroups.js";
import {Ghosts, StepMemo, sortGhosts} from "./graphghosts.js";
import {Minimap} from "./minimap.js";

// steps within which the page asks for a delta on the chain it shows (viz_server/replay.py NEAR); farther, a graph
const NEAR_STEPS = 8;
// after a far jump, the neighbours' deltas are asked once the page stayed on it this long: a slider dragged or clicked
// again passes steps nobody steps from, and their deltas (with the server's prefetch after them, ~0.1-0.3 s of its
// CPU on a GPT step's `add bufferize`) took the server from the next jump (issue 30: a jump under 300 ms)
const JUMP_STAY_MS = 250;
const OVERVIEW_MIN = 0.2;  // a whole graph fitted below this zoom is a smear: the automatic view shows the change
const FOCUS_SCALE = 0.8;   // the zoom the automatic view centers a step's result at when the change is too big

/** Run fn once the next frame has been painted (rAF, then a task). */
export const afterPaint = (fn) => requestAnimationFrame(() => setTimeout(fn, 0));

export class GraphView {
  /** host: an empty element; onSelect(id|null) when a node (or the background) is clicked. */
  constructor(host, {onSelect} = {}) {
    this.host = host;
    this.onSelect = onSelect || (() => {});
    this.nodes = new Map();  // id -> {d, x, y, w, h, lines, consts}
    this.edges = new Map();  // key -> Edge {d, pts, box, path, arrow, fromConst}
    this.marked = {added: new Set(), changed: new Set(), result: null};
    this.ghosts = null;      // Ghosts (static/graphghosts.js): what the last step removed, drawn fading
    // model entries a step made and renamed in place (tests count them: a step makes what it adds, issue 30)
    this.work = {made: 0, renamed: 0};
    this.cut = null;         // the answer's `cut` when the graph is too big to show whole: {shown, total, around, stubs}
    this.usersCache = null;
    this.edgeBatch = null;   // combined Path2Ds of all edges, rebuilt when edges change
    this.selected = null;
    this.relMode = "none";
    this.rel = null;         // ids related to the selection (ancestors/descendants) when relMode is on
    this.query = "";
    this.hits = [];
    this.hitSet = new Set();
    this.hitIndex = -1;
    this.lineHits = new Set();  // the nodes of a hovered or pinned source line (static/source.js), drawn as hits
    this.collapse = false;
    this.spaced = null;      // bounds of the drawn boxes while respaced for collapsed constants (see _respace)
    this.view = {x: 0, y: 0, k: 1};
    this.autoFit = true;     // until the user pans or zooms, a step that changes the graph's size refits it
    this.size = {width: 0, height: 0};
    this.drawn = 0;          // nodes drawn in the last frame (tests and bench read it)
    this.frames = 0;
    this._fadeTimer = 0;     // the pending fade redraw's timer, 0 while none
    this.version = 0;        // bumped whenever nodes or edges change
    this.stepVersion = -1;   // the version a step's delta made (applyDelta), if the model is one
    // collapsible groups (static/graphgroups.js): off in this base view (the Diff panel's); the main view folds
    // big graphs (groupsOn null: by size)
    this.groupsOn = false;
    this.expanded = new Set();  // the groups the user unfolded: INDEX ids, and `site:<site>` for call-site groups
    this.fold = {groups: new Map(), hidden: new Set(), edges: [], made: new WeakMap(), version: -1, on: false};
    this._raf = 0;
    this.colors = readColors();
    this.canvas = h("canvas", {class: "graph-canvas", role: "img", "aria-label": "graph"});
    this.ctx = this.canvas.getContext("2d", {alpha: false});
    put(host, this.canvas);
    this._resize();
    new ResizeObserver(() => { this._resize(); this.redraw(); }).observe(host);
    this._wireInput();
  }

  _resize() {
    const r = this.host.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    this.cw = Math.max(1, r.width);
    this.ch = Math.max(1, r.height);
    this.dpr = dpr;
    this.canvas.width = Math.round(this.cw * dpr);
    this.canvas.height = Math.round(this.ch * dpr);
    this.canvas.style.width = `${this.cw}px`;
    this.canvas.style.height = `${this.ch}px`;
  }

  // ---- data

  /** Show a full graph answer (/graph); the nodes its step removed (removed_nodes, removed_edges) fade out. */
  setData(g) {
    this.nodes.clear();
    this.edges.clear();
    for (const n of g.nodes) this._addNode(n);
    for (const e of g.edges) this._addEdge(e);
    this.ghosts = null;
    if (g.removed_nodes && g.removed_nodes.length) {
      const gone = new Map(g.removed_nodes.map((n) => [n.id, nodeObj(n)]));
      const end = (id) => gone.get(id) || this.nodes.get(id);
      const edges = (g.removed_edges || []).map((e) => edgeObj(e, end(e.src), end(e.dst), this.collapse))
        .filter((e) => e);
      this.ghosts = new Ghosts();
      sortGhosts(this.ghosts, gone.values(), edges, this.nodes, this.edges);
    }
    this._refreshConsts(null);
    this.cut = g.cut || null;
    this.size = {width: g.width || 0, height: g.height || 0};
    this.spaced = null;  // the entries are new: nothing of them was respaced
    this._respace();
    this._changed();
    this._mark(g.added, g.changed, g.match);
    this._recompute();
  }

  /** Apply a /delta answer, full or compact (docs/architecture.md, "Deltas"); removed nodes and their edges stay as
   * fading ghosts until the next change. Returns false (and changes nothing) when the delta does not fit the graph
   * shown: a compact node rebuilt from a node that is not there. A compact=2 delta's `rebuilt` nodes keep their old
   * entries, renamed in place (_renameRebuilt): a step touches what it adds, not the ~2,000 nodes it rebuilds. */
  applyDelta(d) {
    const runs = d.rebuilt ? rebuiltRuns(d.rebuilt) : null;  // (unpacked once: ~2,000 ids a step, issue 30)
    d = this._unpack(d, runs);
    if (d === null) return false;
    const removing = new Set(d.nodes_removed);
    if (d.nodes_added.some((a) => a.like !== undefined && !(removing.has(a.like) && this.nodes.has(a.like)))) {
      return false;
    }
    if (runs && runs.likes.some((l) => !this.nodes.has(l) || removing.has(l))) return false;
    const renamed = new Map();  // old id -> new id of every rebuilt node (sources are renamed through it)
    for (const a of d.nodes_added) if (a.like !== undefined) renamed.set(a.like, a.id);
    if (runs) runs.likes.forEach((l, i) => renamed.set(l, runs.ids[i]));
    const ghosts = new Ghosts();
    const touched = new Set();
    const {gone, goneEdges} = this._remove(d, touched);
    // a step on: the removed nodes' in-edges, which a step back from d.to can then be asked without (_update)
    const routes = d.to === d.from + 1 ? new Map() : null;
    if (routes) for (const [k, e] of goneEdges) routes.set(k, [e.d.src, e.d.points]);
    this.lastRoutes = routes;
    const listed = new Set(d.edges_added.map((e) => edgeKey(e.src, e.dst, e.index)));
    if (runs) this._renameRebuilt(runs, renamed, listed, d.to, ghosts, routes);
    const inherited = [];  // in-edges of rebuilt nodes, added after the delta's moves
    const added = [];
    for (const a of d.nodes_added) {
      const like = a.like === undefined ? null : gone.get(a.like);
      touched.add(a.id);
      if (!like) { this._addNode(a); added.push(this.nodes.get(a.id)); continue; }
      const {like: _, ...own} = a;
      const n = nodeLike(like, own);
      n.own = true;  // (its data is this view's to change: _renameRebuilt)
      this.nodes.set(a.id, n);
      this.work.made++;
      added.push(n);
      // a rebuilt node's in-edges keep the routes of the node it was rebuilt from, unless listed in edges_added
      a.src.forEach((s, i) => {
        const old = goneEdges.get(edgeKey(like.d.src[i], like.d.id, i));
        if (old && !listed.has(edgeKey(s, a.id, i))) {
          const oldSrc = gone.get(old.d.src) ?? this.nodes.get(renamed.get(old.d.src) ?? old.d.src);
          inherited.push([{src: s, dst: a.id, index: i, points: old.d.points}, old, oldSrc, like]);
        }
      });
    }
    for (const [id, xy] of Object.entries(d.nodes_moved || {})) {
      const n = this.nodes.get(Number(id));
      if (!n) continue;
      ghosts.moving(n);
      if (!n.own) { n.d = {...n.d}; n.own = true; }  // (an answer's data, kept by api.js's cache: not changed)
      n.x = n.d.x = xy[0];
      n.y = n.d.y = xy[1];
    }
    for (const [e, ...was] of inherited) { this._inheritEdge(e, ...was); touched.add(e.dst); }
    for (const e of d.edges_added) { this._addEdge(e); touched.add(e.dst); }
    // the removed nodes' ghosts, drawn unless a node added in their place is drawn the same (a rebuilt node)
    const addedAt = new Map(added.map((n) => [n.d.id, n]));
    sortGhosts(ghosts, gone.values(), goneEdges.values(), addedAt, this.edges);
    if (d.kept_created) this._recreate(d.kept_created);
    this._refreshConsts(touched);
    this.ghosts = ghosts.any && !d.jump ? ghosts : null;  // (a far jump's graph shows none, as its graph answer)
    this.cut = d.cut || null;  // a delta to a cut graph carries its cut (stubs included); to a whole one, none
    this.size = {width: d.width || this.size.width, height: d.height || this.size.height};
    this._respace();
    this._changed();
    this.stepVersion = this.version;  // (a step's model: the minimap may redraw its boxes a little later)
    const changed = runs ? [...runs.changed, ...d.changed] : d.changed;
    this._mark(d.added, changed, d.match);
    if (this.selected !== null && !this.nodes.has(this.selected)) this.selected = null;
    if (this.autoFit) this.autoView();
    this._recompute();
    return true;
  }

  /** A far jump's `kept_created` (viz_server/stepgraphs.py, jump_delta): the `created` of the nodes both steps have
   * where the step jumped to says another (its ids as runs of differences, its values as runs). */
  _recreate(c) {
    const created = values(c.value);
    sums(c.id).forEach((id, i) => {
      const n = this.nodes.get(id);
      if (!n) return;
      if (!n.own) { n.d = {...n.d}; n.own = true; }  // (an answer's data, kept by api.js's cache: not changed)
      n.d.created = created[i];
    });
  }

  /** A compact=2 delta with its `whole` nodes, `shifted` nodes and `straight` edges as the compact entries they stand
   * for (nodes_added, with `like` for shifted ones, nodes_removed, edges_added without points; viz_server/
   * stepgraphs.py, _pack_whole, _shifted and _pack_straight), or null when a node they name is not in the graph (the
   * delta does not fit it). A step back's `held` edges (stepgraphs._pack_held) are those of the step it leaves that
   * the page holds (StepMemo), with their src and points. A new object: api.js caches answers. runs: d's rebuilt
   * nodes (rebuiltRuns), null for none. */
  _unpack(d, runs) {
    if (!d.shifted && !d.straight && !d.whole && !d.held) return d;
    const out = {...d};
    if (d.whole) out.nodes_added = [...d.nodes_added, ...wholeNodes(d.whole)];
    const ids = d.shifted ? sums(d.shifted.id) : [];
    let renamed = null;  // old id -> new id of every rebuilt node (a shifted node's sources are renamed through it)
    const rename = () => {
      if (renamed) return renamed;
      renamed = new Map();
      for (const a of d.nodes_added) if (a.like !== undefined) renamed.set(a.like, a.id);
      if (runs) runs.likes.forEach((l, i) => renamed.set(l, runs.ids[i]));
      if (d.shifted) sums(d.shifted.like).forEach((l, i) => renamed.set(l, ids[i]));
      return renamed;
    };
    if (d.shifted) {
      const likes = sums(d.shifted.like), xy = d.shifted.xy, {created, site} = ownColumns(d.shifted);
      const made = new Array(ids.length);
      for (let i = 0; i < ids.length; i++) {
        const old = this.nodes.get(likes[i]);
        if (!old) return null;
        const src = (old.d.src || []).map((s) => rename().get(s) ?? s);
        made[i] = {id: ids[i], like: likes[i], src, x: xy[2 * i], y: xy[2 * i + 1],
          created: created ? created[i] : d.to};
        if (site(i) !== undefined) made[i].site = site(i);
      }
      out.nodes_added = [...out.nodes_added, ...made];
      out.nodes_removed = [...d.nodes_removed, ...likes];
    }
    if (d.straight) {
      const srcOf = new Map(out.nodes_added.map((a) => [a.id, a.src]));
      const at = runs ? new Map(runs.ids.map((id, i) => [id, i])) : new Map();
      const dsts = sums(d.straight.dst), index = values(d.straight.index), made = new Array(dsts.length);
      for (let i = 0; i < dsts.length; i++) {
        let src = srcOf.get(dsts[i]);
        if (src === undefined && at.has(dsts[i])) {  // a rebuilt node renamed in place: its old node's, renamed
          const old = this.nodes.get(runs.likes[at.get(dsts[i])]);
          if (!old) return null;
          src = (old.d.src || []).map((s) => rename().get(s) ?? s);
          srcOf.set(dsts[i], src);
        }
        if (src === undefined || src[index[i]] === undefined) return null;
        made[i] = {src: src[index[i]], dst: dsts[i], index: index[i]};
      }
      out.edges_added = [...out.edges_added, ...made];
    }
    if (d.held) {
      const memo = this.memo?.get(d.from), dsts = sums(d.held.dst), index = sums(d.held.index);
      const made = new Array(dsts.length);
      for (let i = 0; i < dsts.length; i++) {
        const got = memo?.get(edgeKey(0, dsts[i], index[i]));
        if (!got) return null;
        made[i] = {src: got[0], dst: dsts[i], index: index[i], points: got[1]};
      }
      out.edges_added = [...out.edges_added, ...made];
    }
    return out;
  }

  /** Remove a delta's nodes_removed with their in-edges (a removed node's out-edges end at other removed nodes: their
   * in-edges), and its edges_removed; the ids of the nodes whose in-edges went go to `touched`. Returns the removed
   * nodes' entries by id (`gone`: a compact `like` refers to them) and their in-edges' by key (`goneEdges`). */
  _remove(d, touched) {
    const gone = new Map(), goneEdges = new Map();
    const dropEdge = (k) => {
      const e = this.edges.get(k);
      if (!e) return null;
      this.edges.delete(k);
      touched.add(e.d.dst);
      return e;
    };
    for (const id of d.nodes_removed) {
      const n = this.nodes.get(id);
      if (!n) continue;
      (n.d.src || []).forEach((s, i) => {
        const k = edgeKey(s, id, i), e = dropEdge(k);
        if (e) goneEdges.set(k, e);
      });
      this.nodes.delete(id);
      gone.set(id, n);
    }
    for (const [src, dst, index] of d.edges_removed || []) dropEdge(edgeKey(src, dst, index));
    return {gone, goneEdges};
  }

  /** Rename in place the nodes a compact=2 delta rebuilt (`runs`: ids and their old ids, likes): each at its old
   * node's place, with its label and size, and its sources its old node's renamed through `renamed`. The entry and
   * its in-edges' entries stay (their drawn boxes, labels and routes with them), re-keyed and their data's ids
   * changed (copied once from the answer they came from: api.js caches answers); an in-edge that `listed` (the
   * delta's edges_added) routes anew is removed (a ghost drawn) and comes from edges_added; `created` and `site`: their
   * own where not the delta's step and their old node's (ownColumns). The old ids go to ghosts as records
   * (static/graphghosts.js); their in-edges routed anew, as they ran into them, to `routes` where given
   * (applyDelta's: a step back sends only those of a node renamed back, StepMemo). */
  _renameRebuilt({ids, likes, created, site}, renamed, listed, step, ghosts, routes = null) {
    // (plain loops, no closure a node or an edge: this runs for ~2,000 nodes and ~4,000 edges a step, issue 30)
    const nodes = this.nodes, edges = this.edges, entries = new Array(likes.length);
    for (let j = 0; j < likes.length; j++) {
      entries[j] = nodes.get(likes[j]);
      nodes.delete(likes[j]);
    }
    const moved = [];  // [edge entry, new key] of the in-edges kept
    for (let j = 0; j < entries.length; j++) {
      const n = entries[j], id = ids[j], old = likes[j], src = n.d.src || [];
      if (!n.own) { n.d = {...n.d}; n.own = true; }
      const now = new Array(src.length);
      for (let i = 0; i < src.length; i++) {
        const s = src[i], to = renamed.get(s) ?? s, k = edgeKey(s, old, i), e = edges.get(k);
        now[i] = to;
        if (!e) continue;
        edges.delete(k);
        const nk = edgeKey(to, id, i);
        if (listed.has(nk)) {  // (one kept, same route both ways, comes back with its node: no step back sends it)
          if (routes) routes.set(k, [s, e.d.points]);  // (as it ran into the old node: a step back's `held`)
          ghosts.drawnEdges.push(e);
          continue;
        }
        if (!e.own) { e.d = {...e.d}; e.own = true; }
        e.d.src = to;
        e.d.dst = id;
        ghosts.renamedEdges.push(e, s, old);
        moved.push(e, nk);
      }
      const own = site(j);  // (undefined: its old node's call site; null: none, as a node replay made has)
      ghosts.rename(old, n, src, n.d.created, own === undefined ? undefined : n.d.site ?? null);
      if (own === null) delete n.d.site;
      else if (own !== undefined) n.d.site = own;
      n.d.id = id;
      n.d.src = now;
      n.d.created = created ? created[j] : step;
      nodes.set(id, n);
    }
    for (let i = 0; i < moved.length; i += 2) edges.set(moved[i + 1], moved[i]);
    this.work.renamed += entries.length + moved.length / 2;
  }

  _addNode(n) {
    this.nodes.set(n.id, nodeObj(n));
    this.work.made++;
  }

  _addEdge(e) {
    const obj = edgeObj(e, this.nodes.get(e.src), this.nodes.get(e.dst), this.collapse);
    if (obj) this.edges.set(edgeKey(e.src, e.dst, e.index), obj);
    this.work.made++;
  }

  /** Add edge answer e, a rebuilt node's in-edge with the route of edge entry `old`, which ran from oldSrc (a node
   * this delta removed; undefined: a node kept) to oldDst: drawn as old is when its ends' boxes are the sizes of
   * old's (a route is clipped at its ends' boxes; with collapsed constants _respace routes every edge again). */
  _inheritEdge(e, old, oldSrc, oldDst) {
    const a = this.nodes.get(e.src), b = this.nodes.get(e.dst), oa = oldSrc ?? this.nodes.get(old.d.src);
    if (!(a && b && oa && a.w === oa.w && a.h === oa.h && b.w === oldDst.w && b.h === oldDst.h)) {
      this._addEdge(e);
      return;
    }
    const obj = new Edge(e, a.d.cat === "const").sameAs(old);
    obj.own = true;
    this.edges.set(edgeKey(e.src, e.dst, e.index), obj);
    this.work.made++;
  }

  /** With collapsed constants, boxes (and edge bends) shifted right to keep clear of the boxes widened by their
   * constants' line (graphgeom.js's respace); without, everything where the layout put it (and nothing is done when
   * nothing was respaced). */
  _respace() {
    if (this.collapse) { this.spaced = respace(this.nodes, this.edges); return; }
    if (!this.spaced) return;
    this.spaced = null;
    unspace(this.nodes, this.edges);
  }

  /** Constant sources shown inside their users' labels when collapsed: recompute for `ids` (all when null). */
  _refreshConsts(ids) {
    for (const id of ids === null ? this.nodes.keys() : ids) {
      const n = this.nodes.get(id);
      if (n) n.consts = constsLine(n, this.nodes);
    }
  }

  _changed() {
    this.version++;  // (the minimap redraws its boxes for a new version)
    this.usersCache = null;
    this.edgeBatch = null;
  }

  _mark(added, changed, match) {
    // result: the node of the graph that stands for the step rule's result (where the automatic view goes when the
    // change is too big to fit): the server's `result`, not `after`, the trace's node, which replay often rebuilt
    this.marked = {added: new Set(added || []), changed: new Set(changed || []),
      result: match?.result ?? match?.after ?? null};
  }

  // ---- queries

  get users() {
    this.usersCache ??= usersOf(this.nodes);
    return this.usersCache;
  }

  node(id) { return this.nodes.get(id)?.d; }

  /** Data of a node removed by the last step (a ghost, drawn or lying under its rebuilt node). */
  ghostNode(id) {
    return this.ghosts ? this.ghosts.node(id) : undefined;
  }

  /** Ids of the nodes in the model (what is drawn, ghosts excluded). */
  ids() { return [...this.nodes.keys()]; }

  /** Where node id is on screen, in CSS pixels relative to the page (for tests that click it). */
  screenPos(id) {
    const n = this.nodes.get(id);
    if (!n) return null;
    const r = this.canvas.getBoundingClientRect();
    const {x, y, k} = this.view;
    const w = boxW(n, this.collapse), ht = boxH(n, this.collapse);
    return {x: r.left + x + n.x * k, y: r.top + y + n.y * k, w: w * k, h: ht * k};
  }

  /** The box node id is drawn as, in graph coordinates ({x0, y0, x1, y1}), or null when it is not drawn. */
  box(id) {
    const n = this.nodes.get(id);
    if (!n || (this.collapse && n.d.cat === "const")) return null;
    const w = boxW(n, this.collapse), top = n.y - n.h / 2;
    return {x0: n.x - w / 2, y0: top, x1: n.x + w / 2, y1: top + boxH(n, this.collapse)};
  }

  relatives(id, mode) {
    const out = new Set();
    const walk = (next) => {
      const stack = [id];
      while (stack.length) {
        const x = stack.pop();
        for (const y of next(x)) if (!out.has(y)) { out.add(y); stack.push(y); }
      }
    };
    if (mode === "ancestors" || mode === "both") walk((x) => this.nodes.get(x)?.d.src || []);
    if (mode === "descendants" || mode === "both") walk((x) => this.users.get(x) || []);
    out.delete(id);
    return out;
  }

  /** Whether node id is drawn with `mark` (added, changed, selected, hit, related) in the current frame. */
  hasMark(id, mark) {
    if (mark === "added" || mark === "changed") return this.marked[mark].has(id) && this.nodes.has(id);
    if (mark === "selected") return this.selected === id;
    if (mark === "hit") return this.hitSet.has(id);
    if (mark === "related") return this.rel !== null && this.rel.has(id);
    return false;
  }

  // ---- highlight state

  select(id, {center = false} = {}) {
    this.selected = id !== null && this.nodes.has(id) ? id : null;
    this._recompute();
    if (center && this.selected !== null) this.centerOn(this.selected);
  }

  setRelatives(mode) { this.relMode = mode; this._recompute(); }

  setCollapse(on) {
    this.collapse = on;
    this._respace();
    this._changed();
    if (this.autoFit) this.autoView(); else this.redraw();
  }

  /** Mark nodes whose op/arg/label/#id contains q; returns the number of hits. */
  search(q) {
    this.query = q.trim().toLowerCase();
    this.hitIndex = -1;
    this._recompute();
    return this.hits.length;
  }

  /** Select and center the next (dir=1) or previous search hit; returns its id. */
  nextHit(dir = 1) {
    if (!this.hits.length) return null;
    this.hitIndex = (this.hitIndex + dir + this.hits.length) % this.hits.length;
    const id = this.hits[this.hitIndex];
    this.select(id, {center: true});
    return id;
  }

  _recompute() {
    this.rel = this.selected !== null && this.relMode !== "none" ? this.relatives(this.selected, this.relMode) : null;
    this.hits = [];
    const q = this.query;
    if (q) {
      for (const [id, n] of this.nodes) {
        const d = n.d;
        if (`#${id}` === q || String(d.op).toLowerCase().includes(q) || String(d.arg ?? "").toLowerCase().includes(q)
            || String(d.label ?? "").toLowerCase().includes(q)) this.hits.push(id);
      }
    }
    this.hitSet = new Set(this.hits);
    for (const id of this.lineHits) if (this.nodes.has(id)) this.hitSet.add(id);
    this.redraw();
  }

  /** Mark the nodes a source line came from as hits (beside the search's); returns how many are in the graph. */
  markNodes(ids) {
    this.lineHits = new Set(ids);
    this._recompute();
    return [...this.lineHits].filter((id) => this.nodes.has(id)).length;
  }

  // ---- view: pan / zoom / fit

  /** The extent fit() fits: the layout's, or the drawn boxes' when respaced. */
  _extent() {
    const s = this.spaced && this.spaced.x1 > this.spaced.x0 ? this.spaced : null;
    return {x0: s ? s.x0 : 0, y0: s ? s.y0 : 0, width: s ? s.x1 - s.x0 : this.size.width,
      height: s ? s.y1 - s.y0 : this.size.height};
  }

  /** The zoom at which the whole graph fits (clear of the legend at the bottom), and each axis's alone. */
  fitScales() {
    const {width, height} = this._extent();
    const kx = this.cw / (width + 40), ky = (this.ch - 50) / (height + 30);
    return {k: Math.min(kx, ky, 1.6), kx: Math.min(kx, 1.2), ky: Math.min(ky, 1.2)};
  }

  fitScale() { return this.fitScales().k; }

  fit() {
    this.autoFit = true;
    const {x0, y0, width, height} = this._extent();
    if (!width || !height) { this.view = {x: this.cw / 2, y: this.ch / 2, k: 1}; this.redraw(); return; }
    const k = this.fitScale();
    this.view = {k, x: (this.cw - width * k) / 2 - x0 * k, y: (this.ch - 50 - height * k) / 2 + 4 - y0 * k};
    this.redraw();
  }

  /** Center the view on graph point (gx, gy) at the zoom shown (the minimap's click and drag). */
  centerAt(gx, gy) {
    this.autoFit = false;
    const k = this.view.k;
    this.view = {k, x: this.cw / 2 - gx * k, y: (this.ch - 50) / 2 - gy * k};
    this.redraw();
  }

  /** The view of a sliver (a graph fitted whole too small to read, but readable fitted across its short side): its
   * short side fitted, scrolled along the long one to the step's change (else its start); false when none reads. */
  _fitSliver() {
    const {x0, y0, width, height} = this._extent();
    const {kx, ky} = this.fitScales();
    const tall = kx >= ky, k = tall ? kx : ky;
    if (k < TEXT_MIN_SCALE || !width || !height) return false;
    let lo = Infinity, hi = -Infinity;  // the change's extent along the long side
    for (const set of [this.marked.added, this.marked.changed]) {
      for (const id of set) {
        const b = this.box(id);
        if (b) { lo = Math.min(lo, tall ? b.y0 : b.x0); hi = Math.max(hi, tall ? b.y1 : b.x1); }
      }
    }
    const mid = hi >= lo ? (lo + hi) / 2 : null;
    if (tall) {
      const y = mid === null ? 20 - y0 * k : (this.ch - 50) / 2 - mid * k;
      this.view = {k, x: (this.cw - width * k) / 2 - x0 * k, y};
    } else {
      const x = mid === null ? 20 - x0 * k : this.cw / 2 - mid * k;
      this.view = {k, x, y: (this.ch - 50 - height * k) / 2 + 4 - y0 * k};
    }
    this.redraw();
    return true;
  }

  /** The view the graph opens with and keeps while the user has not panned or zoomed: all of it when that is legible;
   * a sliver fitted across its short side when that is (_fitSliver); else, below OVERVIEW_MIN (a graph too big to
   * see whole, such as a kernel's upcast lanes) the nodes the step added or changed, fitted
   * at a zoom where labels show, so stepping follows the rewrite, or if they are too many for that, the node the
   * step's rule returned. Fit (`f`) still shows everything. */
  autoView() {
    this.fit();
    if (this.view.k >= TEXT_MIN_SCALE || !this.marked) return;
    // fitted, a big graph is a smear without labels: readable across its short side, a sliver is shown so (the
    // minimap shows the rest); a graph yet smaller fitted shows the step's change
    if (this.view.k >= OVERVIEW_MIN) {
      if (this.nodes.size >= GROUP_MIN_NODES) this._fitSliver();  // (a small graph reads well enough fitted)
      return;
    }
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const set of [this.marked.added, this.marked.changed]) {
      for (const id of set) {
        const b = this.box(id);
        if (!b) continue;
        x0 = Math.min(x0, b.x0); y0 = Math.min(y0, b.y0); x1 = Math.max(x1, b.x1); y1 = Math.max(y1, b.y1);
      }
    }
    let k = x1 > x0 ? Math.min(this.cw / (x1 - x0 + 160), (this.ch - 50) / (y1 - y0 + 120), 1.2) : 0;
    if (k < TEXT_MIN_SCALE) {  // the change is too big to read whole: the rule's result, legibly
      const b = this.marked.result !== null ? this.box(this.marked.result) : null;
      if (!b) return;
      [x0, y0, x1, y1, k] = [b.x0, b.y0, b.x1, b.y1, FOCUS_SCALE];
    }
    this.view = {k, x: this.cw / 2 - ((x0 + x1) / 2) * k, y: (this.ch - 50) / 2 - ((y0 + y1) / 2) * k};
    this.redraw();
  }

  centerOn(id) {
    const n = this.nodes.get(id);
    if (!n) return;
    this.autoFit = false;
    const k = Math.max(this.view.k, 0.8);
    this.view = {k, x: this.cw / 2 - n.x * k, y: this.ch / 2 - n.y * k};
    this.redraw();
  }

  zoomBy(f, cx = this.cw / 2, cy = this.ch / 2) {
    this.autoFit = false;
    const k = Math.min(8, Math.max(0.005, this.view.k * f));
    const ratio = k / this.view.k;
    this.view = {k, x: cx - (cx - this.view.x) * ratio, y: cy - (cy - this.view.y) * ratio};
    this.redraw();
  }

  /** Draw on the next animation frame (many changes in one task draw once). */
  redraw() {
    if (this._raf) return;
    this._raf = requestAnimationFrame(() => { this._raf = 0; this.draw(); });
  }

  /** Whether index groups are folded in the graph shown. */
  folding() {
    return this.groupsOn ?? this.nodes.size >= GROUP_MIN_NODES;
  }

  /** Fold or unfold every index group (key g); unfolding forgets the groups expanded one by one. */
  toggleGroups() {
    this.groupsOn = !this.folding();
    this.expanded.clear();
    this._changed();
    this.redraw();
  }

  /** The folded groups of the graph shown, recomputed when it changed (the nodes a step added or changed are never
   * folded away: their group stays open). */
  _refold() {
    const on = this.folding();
    if (this.fold.version === this.version && this.fold.on === on) return this.fold;
    let groups = new Map();
    // the users of every node only where an index group's search asks (a graph without INDEX nodes never does), else
    // those of the groups' hidden members (usersOf: most of a refold's time was the whole map, made each step)
    const allUsers = {get: (id) => this.users.get(id)};
    if (on) {
      groups = indexGroups(this.nodes, allUsers, this.expanded);
      const taken = new Set();
      for (const g of groups.values()) for (const m of g.members) taken.add(m);
      for (const [rep, g] of siteGroups(this.nodes, this.expanded, taken)) groups.set(rep, g);
      const {added, changed} = this.marked;  // (a step of a big rewrite marks ~2,000 nodes: look up members)
      for (const [rep, g] of [...groups]) {
        for (const m of g.members) if (added.has(m) || changed.has(m)) { groups.delete(rep); break; }
      }
    }
    const was = this.fold.made, hidden = new Set();
    if (!this.usersCache) for (const [rep, g] of groups) for (const m of g.members) if (m !== rep) hidden.add(m);
    const users = this.usersCache ?? (hidden.size ? usersOf(this.nodes, hidden) : new Map());
    const folded = foldedView(groups, this.nodes, this.collapse, users, was);
    this.fold = {groups, ...folded, version: this.version, on};
    this.edgeBatch = null;
    return this.fold;
  }

  /** Unfold the group whose box node id is; false when it is none. */
  expand(id) {
    const g = this.fold.groups.get(id);
    if (!g) return false;
    this.expanded.add(g.index);
    this._changed();
    this.redraw();
    return true;
  }

  /** Draw now (graphdraw.js's passes, back to front). */
  draw() {
    this._refold();
    const fadeLeft = paint(this);
    this.frames++;
    // a few redraws while the ghosts fade, not one per frame: each full redraw costs real time on big graphs
    // (the timer's id is 0 while none is pending: tests tell an idle view by it)
    clearTimeout(this._fadeTimer);
    const fade = () => { this._fadeTimer = 0; this.redraw(); };
    this._fadeTimer = fadeLeft > 0 ? setTimeout(fade, Math.min(300, fadeLeft)) : 0;
  }

  /** The node under a point in canvas CSS pixels, or null. */
  hitTest(px, py) {
    const {x, y, k} = this.view;
    const gx = (px - x) / k, gy = (py - y) / k;
    let best = null;
    const hidden = this._refold().hidden;
    for (const n of this.nodes.values()) {
      if ((this.collapse && n.d.cat === "const") || hidden.has(n.d.id)) continue;
      const top = n.y - n.h / 2;
      if (Math.abs(gx - n.x) <= boxW(n, this.collapse) / 2 && gy >= top && gy <= top + boxH(n, this.collapse)) best = n;
    }
    return best;
  }

  _wireInput() {
    const c = this.canvas;
    let drag = null;
    const local = (ev) => {
      const r = c.getBoundingClientRect();
      return [ev.clientX - r.left, ev.clientY - r.top];
    };
    c.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0) return;
      drag = {x: ev.clientX, y: ev.clientY, vx: this.view.x, vy: this.view.y, moved: false, id: ev.pointerId};
    });
    c.addEventListener("pointermove", (ev) => {
      if (!drag) {
        const n = this.hitTest(...local(ev));
        c.style.cursor = n ? "pointer" : "grab";
        c.title = n ? `#${n.d.id} ${n.d.op} ${n.d.dtype ?? ""} ${n.d.arg ?? ""}`.trim() : "";
        return;
      }
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!drag.moved) {
        drag.moved = true;
        this.autoFit = false;
        c.setPointerCapture(drag.id);
        c.style.cursor = "grabbing";
      }
      this.view = {...this.view, x: drag.vx + dx, y: drag.vy + dy};
      this.redraw();
    });
    const end = (ev) => {
      if (!drag) return;
      const wasDrag = drag.moved;
      drag = null;
      c.style.cursor = "grab";
      if (wasDrag || ev.type !== "pointerup") return;
      const n = this.hitTest(...local(ev));
      if (n && this.expand(n.d.id)) return;  // a folded group's box: open it
      this.onSelect(n ? n.d.id : null);
    };
    c.addEventListener("pointerup", end);
    c.addEventListener("pointercancel", end);
    c.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      this.zoomBy(Math.exp(-ev.deltaY * (ev.ctrlKey ? 0.01 : 0.0015)), ...local(ev));
    }, {passive: false});
    c.addEventListener("dblclick", () => this.fit());
  }
}

/** The page's graph view: it shows the step of a rewrite it is told to (`show`), fetching through api.js the step's
 * graph, or the delta from the step on screen when that is of the same rewrite. Updates run one at a time, so a delta
 * always applies to what is on screen; a rewrite's first graph prefetches its neighbouring steps' deltas once it is
 * painted, a step at once. Also the graph's empty text, legend, loading bar and cut note, and the first-graph marks. */
export class StepGraphView extends GraphView {
  /** els: the graph's container (`wrap`), its empty-state text (`empty`) and legend (`legend`); onShown(view) once
   * the view asked for is on screen, onCleared() when the graph is emptied (cleared, or a step that failed to load). */
  constructor(host, {wrap, empty, legend, onSelect, onShown, onCleared} = {}) {
    super(host, {onSelect});
    this.groupsOn = null;
    this.els = {wrap, empty, legend};
    this.onShown = onShown || (() => {});
    this.onCleared = onCleared || (() => {});
    this.want = null;    // {trace, rw, step, steps} of the last show (null once cleared)
    this.expecting = false;  // another rewrite was selected (expect) and its show has not come yet
    this.shown = null;   // {trace, rw, step} on screen
    this.pump = null;    // the running update
    this.wantFit = false;
    this.legendSig = "";
    // timings read by bench/bench_ui.py: ms since navigation start to the first painted graph; the last update split
    // into waiting for the server and building the model and view
    this.perf = {firstGraphMs: null, lastFetchMs: null, lastDomMs: null, lastKind: null};
    // a graph too big to show whole comes cut to the nodes around the step's change (the answers' `cut`): say so
    this.cutNote = h("div", {id: "cut-note", class: "cut-note", role: "status"});
    this.cutNote.hidden = true;
    // while the graph on screen is not the step named: what is coming (the wrap's data-loading says which kind)
    this.loadingNote = h("div", {id: "graph-loading", class: "graph-loading", role: "status"});
    this.loadingNote.hidden = true;
    wrap.append(this.cutNote, this.loadingNote);
    this.minimap = new Minimap(wrap, this);
    // lines to nodes and back with the source panel (static/source.js: SOURCE_NODES, GRAPH_SELECT)
    document.addEventListener("source-nodes", (ev) => this.markNodes(ev.detail.ids || []));
  }

  draw() {
    super.draw();
    this.minimap.update();
  }

  select(id, opts = {}) {
    super.select(id, opts);
    document.dispatchEvent(new CustomEvent("graph-select", {detail: {id: this.selected}}));
  }

  /** Show step `step` of rewrite `rw` of trace `trace` (`steps`: the rewrite's step count; `fit`: refit the view);
   * resolves once the latest view asked for is on screen (or failed to load). */
  show({trace, rw, step, steps = 0, fit = false}) {
    this.expecting = false;
    this.want = {trace, rw, step, steps};
    this.wantFit = this.wantFit || fit;
    if (!this.pump) this.pump = this._pump().finally(() => { this.pump = null; });
    return this.pump;
  }

  /** Lay the step on screen out from scratch (key r, the Re-layout button): after many steps placed among the nodes
   * that stay, the picture no longer reads top-down. The step becomes the anchor of the layouts shown: stepping on
   * derives from it, both ways, so nothing that stays moves. */
  relayout() {
    if (this.pump || !this.shown) return this.pump || Promise.resolve();
    const s = this.shown;
    this.pump = (async () => {
      this._loading(s);
      try {
        const g = await api.graphFresh(s.trace, s.rw, s.step);
        if (this.shown !== s) return;
        this.setData(g);
        this._legend(g.nodes);
        this.shown = {...s, dir: 0, anchor: g.anchor || 0, far: false};
        this.autoView();
      } catch (e) {
        this._loaded();
        this.clear(`Cannot lay out the graph: ${e.message}`);
        return;
      }
      await this._pump();
    })().finally(() => { this.pump = null; });
    return this.pump;
  }

  /** Another rewrite was selected and `show` comes once its steps are known: until then, the loading state (never the
   * previous rewrite's graph under the new selection). */
  expect(trace, rw, step) {
    if (sameRewrite(this.shown, {trace, rw})) return;
    this.expecting = true;
    this.want = null;  // an update in flight for what was asked before draws nothing more
    this._loading({trace, rw, step});
  }

  /** Ask for a step's graph ahead of `show` (it never changes, so show takes it from api.js's cache). */
  preload(trace, rw, step) {
    api.graph(trace, rw, step, true).catch(() => {});
  }

  /** Empty the graph and show msg in its place. */
  clear(msg) {
    this.want = null;
    this.expecting = false;
    this._blank();
    this._loaded();
    this.els.empty.hidden = false;
    this.els.empty.textContent = msg;
    this.onCleared();
  }

  async _pump() {
    for (;;) {
      const want = this.want;
      if (want === null || want.rw === null) break;  // (cleared meanwhile)
      if (sameStep(this.shown, want)) {
        this._loaded();
        this._afterShown(want.steps);
        return;
      }
      this._loading(want);
      try {
        await this._update(want);
      } catch (e) {
        this._loaded();
        this.clear(`Cannot load the graph: ${e.message}`);
        return;
      }
    }
    if (!this.expecting) this._loaded();  // (else another rewrite's steps are on their way: still loading)
  }

  /** Say at once that the graph on screen is not the step named. Another rewrite's graph is taken off screen (it took
   * seconds to open a big one, and its predecessor stayed under its label: issue 30); a step of the same rewrite
   * keeps the step shown, dimmed (style.css, "big graphs"), until its delta lands. */
  _loading(want) {
    const other = !sameRewrite(this.shown, want);
    if (other && this.shown) this._blank();
    const wrap = this.els.wrap;
    wrap.classList.add("loading");
    wrap.dataset.loading = other ? "rewrite" : "step";
    if (other) this.els.empty.hidden = true;
    this.loadingNote.textContent = other ? `loading the graph of step ${want.step}…` : `loading step ${want.step}…`;
    this.loadingNote.hidden = false;
  }

  _loaded() {
    this.els.wrap.classList.remove("loading");
    delete this.els.wrap.dataset.loading;
    this.loadingNote.hidden = true;
  }

  /** Take the graph off screen (nothing is shown until the next answer lands). */
  _blank() {
    this.shown = null;
    this.setData({nodes: [], edges: [], width: 0, height: 0});
    this._updateCutNote();
    delete document.body.dataset.graph;
    put(this.els.legend);
    this.legendSig = "";
  }

  /** Bring the graph on screen to `want`: by the delta from the step shown when that is of the same rewrite (and the
   * delta fits it), else by the step's graph. Changes nothing when another rewrite was asked for meanwhile. */
  async _update(want) {
    const shown = this.shown, perf = this.perf;
    const moved = () => this.want === null || this.want.trace !== want.trace || this.want.rw !== want.rw;
    const t0 = performance.now();
    let t1 = t0, done = false;
    const same = sameRewrite(shown, want);
    this.memo ??= new StepMemo();
    // a far jump asks for the step's graph: a new anchor, derived from the layout shown or laid out fresh, unless a
    // layout of the chain shown (or of another) is near it (a delta would make it lay out every step between)
    if (same && Math.abs(want.step - shown.step) <= NEAR_STEPS) {
      // (409: the server's view was rebuilt and a far jump's chain with it: the step's graph, laid out anew, instead)
      const held = this._held(shown, want.step);
      const d = await api.delta(want.trace, want.rw, shown.step, want.step, true, shown.anchor, held)
        .catch((e) => { if (e.status === 409) return null; throw e; });
      if (moved()) return;
      t1 = performance.now();
      this.memo.at(memoKey(want, shown.anchor));  // (_unpack reads a `held` answer's routes there)
      done = d !== null && this.applyDelta(d);
      if (done && this.lastRoutes) this.memo.put(want.step, this.lastRoutes);
      if (done) this._legend(nodeData(this.nodes));
      perf.lastKind = "delta";
    }
    let anchor = same ? shown.anchor : 0;
    if (!done && same) {  // a far jump: the delta from the step on screen where the server lays k out from its layout
      const d = await api.jump(want.trace, want.rw, want.step, anchor, shown.step);
      if (moved()) return;
      t1 = performance.now();
      done = d.jump ? this.applyDelta(d) : false;
      anchor = d.anchor || 0;
      if (done) {
        this._legend(nodeData(this.nodes));
        perf.lastKind = "jump";
        this.wantFit = true;
      } else if (!d.jump) {
        this._setGraph(want, d);
        done = true;
      }
    }
    if (!done) {
      const g = await api.graph(want.trace, want.rw, want.step, true, anchor, null);
      if (moved()) return;
      anchor = g.anchor || 0;
      t1 = performance.now();
      this._setGraph(want, g);
    }
    // dir: the way an arrow step went (a delta from the step next to it), 0 after a graph or a jump; far: a jump
    const dir = perf.lastKind === "delta" && Math.abs(want.step - shown.step) === 1 ? want.step - shown.step : 0;
    const far = same && perf.lastKind !== "delta";
    this.shown = {trace: want.trace, rw: want.rw, step: want.step, dir, anchor, far};
    if (this.wantFit) { this.autoView(); this.wantFit = false; }
    perf.lastFetchMs = t1 - t0;
    perf.lastDomMs = performance.now() - t1;
  }

  /** Show graph answer g of step want.step (_update's), filing its removed nodes' in-edges. */
  _setGraph(want, g) {
    this.setData(g);
    // its removed nodes' in-edges, as StepMemo keeps them (none where it sent only some: a cut graph's, between
    // nodes shown; none at all: a step laid out fresh, where no place of theirs fits)
    if (!g.cut && (g.removed_nodes || []).length === (g.removed || []).length) {
      this.memo.at(memoKey(want, g.anchor || 0)).put(want.step, new Map((g.removed_edges || [])
        .map((e) => [edgeKey(e.src, e.dst, e.index), [e.src, e.points]])));
    }
    this.perf.lastKind = "graph";
    this.els.empty.hidden = true;
    this._legend(g.nodes);
    this.wantFit = true;
  }

  /** The view asked for is on screen: say so (body's data-graph, the cut note, the first graph's paint time, onShown),
   * then prefetch the neighbouring steps. */
  _afterShown(steps) {
    const s = this.shown;
    this._updateCutNote();
    document.body.dataset.graph = `${s.trace}:${s.rw}:${s.step}`;
    // fresh: on the chain of a step laid out fresh (a deep link, the re-layout key, a far jump); jump: of a far jump
    // laid out from the layout that was on screen (its anchor is numbered past the steps); stable: step 0's
    document.body.dataset.layout = !s.anchor ? "stable" : s.anchor > steps ? "jump" : "fresh";
    document.body.dataset.anchor = String(s.anchor);
    if (this.perf.firstGraphMs === null) afterPaint(() => { this.perf.firstGraphMs = performance.now(); });
    this.onShown(s);
    // a rewrite's first graph: the neighbours' requests, and the layouts the server computes in the background after
    // them, wait for the frame that shows it (on 2 shared cores they took the CPU from drawing it: issue 18); after a
    // step they go at once, to be there for the next key press
    if (s.far) setTimeout(() => this._prefetch(s, steps), JUMP_STAY_MS);
    else if (this.perf.lastKind === "graph") afterPaint(() => this._prefetch(s, steps));
    else this._prefetch(s, steps);
  }

  /** Neighbouring steps are the likely next request: fetch their deltas while the user looks. After an arrow step
   * only the next one the same way: the one back cost the server a delta (and the page its parse) on every step,
   * taking a loaded 2-core machine's CPU from the step the user presses next (issue 30). */
  _prefetch(s, steps) {
    // (cleared or moved on meanwhile, or about to: that view prefetches its own)
    if (this.shown !== s || !sameStep(this.want, s)) return;
    // step - 1 first: the server's background layout goes on from the last step asked for, and forward is likelier
    const ahead = s.dir ? [s.step + s.dir] : [s.step - 1, s.step + 1];
    for (const k of ahead) {
      if (k < 0 || k > steps) continue;
      api.delta(s.trace, s.rw, s.step, k, true, s.anchor, this._held(s, k)).catch(() => {});
    }
  }

  /** What a delta from view `s` (on screen) to step k says the page holds: s.step where it is a step back and the
   * page keeps the in-edges s.step removed (StepMemo: the server leaves them out), else null. */
  _held(s, k) {
    this.memo ??= new StepMemo();
    return k === s.step - 1 && this.memo.at(memoKey(s, s.anchor)).has(s.step) ? s.step : null;
  }

  _updateCutNote() {
    const c = this.cut;
    this.cutNote.hidden = !c;
    if (c) {
      this.cutNote.textContent = `showing ${c.shown.toLocaleString("en")} of ${c.total.toLocaleString("en")} nodes `
        + "around the change (dashed stubs: edges to nodes not shown)";
    }
  }

  /** The legend of the categories of `nodes` (node data), with counts; a step applied as a delta calls it too. */
  _legend(nodes) {
    const counts = Object.fromEntries(CATEGORIES.map((c) => [c, 0]));
    for (const n of nodes) counts[n.cat in counts ? n.cat : "other"]++;
    const sig = JSON.stringify(counts);
    if (sig === this.legendSig && this.els.legend.childElementCount) return;  // most steps change no count
    // the same categories shown: only their counts' texts change (a step of a big rewrite adds a node or two; the
    // legend made again was ~18 DOM changes and a layout a step)
    const cats = CATEGORIES.filter((c) => counts[c]), shown = this.els.legend.querySelectorAll(".legend-item > .muted");
    if (this.legendSig && cats.join() === this.legendCats && shown.length === cats.length) {
      cats.forEach((c, i) => { const t = ` ${counts[c]}`; if (shown[i].textContent !== t) shown[i].textContent = t; });
    } else {
      renderLegend(this.els.legend, counts);
    }
    this.legendSig = sig;
    this.legendCats = cats.join();
  }
}

/** The data of a view's node entries (`nodes`: id -> entry), without an array of them. */
function* nodeData(nodes) {
  for (const n of nodes.values()) yield n.d;
}

// the layout chain a StepMemo's entries are of: a view's rewrite and anchor
const memoKey = (v, anchor) => `${v.trace}:${v.rw}:${anchor}`;
const sameRewrite = (a, b) => a !== null && a.trace === b.trace && a.rw === b.rw;
const sameStep = (a, b) => sameRewrite(a, b) && a.step === b.step;

/** A compact=2 delta's `rebuilt` ({id, like} as flat [difference, count, ...] runs: viz_server/stepgraphs.py,
 * _diff_runs) as {ids, likes}, the rebuilt ids marked changed (all but the column `unchanged`'s, flag runs) and their
 * own columns (ownColumns). */
function rebuiltRuns(r) {
  const ids = sums(r.id), same = flags(r.unchanged);
  return {ids, likes: sums(r.like), changed: ids.filter((_, i) => !same[i]), ...ownColumns(r)};
}

/** The columns of rebuilt nodes sent as runs that are not their old node's (stepgraphs._own_columns): `created`
 * (null: each was created at the delta's step), `site(i)`: undefined where the node has its old node's call site,
 * null where it has none, else its own. */
function ownColumns(r) {
  const drop = flags(r.nosite), mine = r.resite ? values(r.resite) : null;
  return {created: r.created ? values(r.created) : null,
    site: (i) => (mine && mine[i] ? r.sites[mine[i] - 1] : drop[i] ? null : undefined)};
}

/** [difference, count, ...] runs (stepgraphs._diff_runs) as the values: each the one before plus its difference. */
function sums(runs) {
  const out = [];
  let v = 0;
  for (let i = 0; i + 1 < runs.length; i += 2) for (let n = 0; n < runs[i + 1]; n++) out.push(v += runs[i]);
  return out;
}

/** A compact=2 delta's `whole` new nodes (columns: viz_server/stepgraphs.py, _pack_whole) as node answers. */
function wholeNodes(w) {
  const ids = sums(w.id), look = values(w.look), nsrc = values(w.nsrc), created = values(w.created);
  const site = values(w.site), out = new Array(ids.length);
  let at = 0;
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i], src = w.src.slice(at, at += nsrc[i]).map((x) => id - x);
    out[i] = {id, ...w.looks[look[i]], src, x: w.xy[2 * i], y: w.xy[2 * i + 1], consts: [], created: created[i]};
    if (site[i]) out[i].site = w.sites[site[i] - 1];
  }
  for (let i = 0; i < w.consts.length; i += 2) out[w.consts[i]].consts.push(w.consts[i + 1]);
  return out;
}

/** [value, count, ...] runs as the values. */
function values(runs) {
  const out = [];
  for (let i = 0; i + 1 < runs.length; i += 2) for (let n = 0; n < runs[i + 1]; n++) out.push(runs[i]);
  return out;
}

/** Run lengths, false first (stepgraphs._flag_runs: [3, 2, 1] is FFFTTF), as an array of booleans ([] for none). */
function flags(runs = []) {
  const out = [];
  runs.forEach((n, i) => { for (let j = 0; j < n; j++) out.push(i % 2 === 1); });
  return out;
}

/** The category legend (CSS classes shared with the chips), and the key of the rings a step draws over the boxes. */
function renderLegend(host, counts) {
  const items = CATEGORIES.filter((c) => !counts || counts[c]).map((c) => h("span", {class: `legend-item cat-${c}`},
    h("i", {class: "swatch"}), c, counts ? h("span", {class: "muted"}, ` ${counts[c]}`) : null));
  put(host, ...items, items.length ? legendBox(GRAPH_MARKS, {cls: "graph-marks"}) : null);
}
