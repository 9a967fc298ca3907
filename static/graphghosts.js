// What the last step removed, drawn as fading ghosts until the next change (static/graph.js keeps them, static/
// graphdraw.js draws them). A step of a big rewrite rebuilds ~2,000 nodes under new ids (issue 30), each at its old
// node's place with its label, size and edge routes: the view renames such a node's entry in place (graph.js,
// _renameRebuilt) and keeps only a record of its old id, sources and step here, so a step makes no entry for it. A
// ghost that lies under a live node drawn the same (same place, size and label; an edge: the same route into such a
// node) is not drawn: it showed nothing but a wall of red dashes along every rebuilt edge, and drawing it was most of
// the step's frame. No document access.
import {Edge, edgeKey} from "./graphgeom.js";

export class Ghosts {
  constructor() {
    this.t0 = performance.now();
    this.drawnNodes = [];  // node entries drawn (fading)
    this.drawnEdges = [];  // edge entries drawn (fading)
    this.underNodes = [];  // node entries under a live node drawn the same: not drawn
    this.underEdges = [];  // edge entries under a live edge drawn the same: not drawn
    // nodes renamed in place: old id, the live entry (null once moved: then a drawn entry), old sources, old step
    // and its old call site where the live entry's is another (null: it had none; else undefined)
    this.renamed = {old: [], live: [], src: [], created: [], site: []};
    this.renamedEdges = [];  // flat [live edge entry, old src id, old dst id, ...] of the renamed nodes' in-edges
    this._nodes = null;
    this._edges = null;
    this._at = null;
  }

  /** Whether anything was removed. */
  get any() {
    return this.drawnNodes.length + this.underNodes.length + this.renamed.old.length + this.drawnEdges.length
      + this.underEdges.length > 0;
  }

  /** Every removed node's entry (the renamed ones made now, once): for tests and lookups, not the drawing. */
  get nodes() {
    if (!this._nodes) {
      const r = this.renamed, out = [...this.drawnNodes, ...this.underNodes];
      for (let i = 0; i < r.old.length; i++) if (r.live[i]) out.push(this._was(i, r.live[i]));
      this._nodes = out;
    }
    return this._nodes;
  }

  /** Every removed edge's entry (the renamed nodes' in-edges made now, once). */
  get edges() {
    if (!this._edges) {
      const out = [...this.drawnEdges, ...this.underEdges], re = this.renamedEdges;
      for (let i = 0; i < re.length; i += 3) {
        const e = re[i];
        out.push(new Edge({...e.d, src: re[i + 1], dst: re[i + 2]}, e.fromConst).sameAs(e));
      }
      this._edges = out;
    }
    return this._edges;
  }

  /** The data of removed node id, or undefined. */
  node(id) {
    const n = this.drawnNodes.find((x) => x.d.id === id) || this.underNodes.find((x) => x.d.id === id);
    if (n) return n.d;
    const i = this.renamed.old.indexOf(id);
    return i >= 0 && this.renamed.live[i] ? this._was(i, this.renamed.live[i]).d : undefined;
  }

  /** Node `old` renamed in place as live entry n (its sources were src, it was made at step created; site: its call
   * site, null for none, where n's is another; else undefined). */
  rename(old, n, src, created, site) {
    const r = this.renamed;
    r.old.push(old);
    r.live.push(n);
    r.src.push(src);
    r.created.push(created);
    r.site.push(site);
  }

  /** Renamed node entry n is about to move (nodes_moved): its old self is drawn at its old place, as any removed
   * node's. */
  moving(n) {
    if (!this._at) this._at = new Map(this.renamed.live.map((x, i) => [x, i]));  // (a step that moves nodes: rare)
    const i = this._at.get(n);
    if (i === undefined || !this.renamed.live[i]) return;
    this.drawnNodes.push(this._was(i, n));
    this.renamed.live[i] = null;
  }

  /** The entry renamed node i was, where `at` (an entry) is. */
  _was(i, at) {
    const r = this.renamed, n = r.live[i] || at;
    const d = {...n.d, id: r.old[i], src: r.src[i], created: r.created[i], x: at.d.x, y: at.d.y};
    if (r.site[i] === null) delete d.site;
    else if (r.site[i] !== undefined) d.site = r.site[i];
    return {d, x: at.x, y: at.y, w: n.w, h: n.h, lines: n.lines, consts: n.consts};
  }
}

/** Sort removed entries `nodes` and `edges` (ghost in-edges, keyed by their answer's src, dst and index) into those
 * drawn and those lying under a live node of `live` (id -> entry) drawn the same, or an edge of `liveEdges` (key ->
 * entry) into it along the same route; the layout's places and routes are compared (what respacing does to both alike
 * does not matter). */
export function sortGhosts(ghosts, nodes, edges, live, liveEdges) {
  const at = new Map();  // a place (x + y * PLACE_Y) -> the live entry there (checked exactly: a float key may collide)
  for (const n of live.values()) at.set(n.d.x + n.d.y * PLACE_Y, n);
  const cover = new Map();  // removed id -> the live entry it lies under
  for (const n of nodes) {
    const c = at.get(n.d.x + n.d.y * PLACE_Y);
    const under = c !== undefined && c.d.x === n.d.x && c.d.y === n.d.y && c.w === n.w && c.h === n.h
      && sameLines(c.lines, n.lines);
    if (under) cover.set(n.d.id, c);
    (under ? ghosts.underNodes : ghosts.drawnNodes).push(n);
  }
  for (const e of edges) {
    const c = cover.get(e.d.dst), src = c && c.d.src ? c.d.src[e.d.index] : undefined;
    const le = src === undefined ? undefined : liveEdges.get(edgeKey(src, c.d.id, e.d.index));
    (le && samePoints(le.d.points, e.d.points) ? ghosts.underEdges : ghosts.drawnEdges).push(e);
  }
}

const PLACE_Y = 1 << 22;  // a layout's x stays far below this

const sameLines = (a, b) => a === b || (a.length === b.length && a.every((x, i) => x === b[i]));

function samePoints(a, b) {
  if (a === b) return true;
  if (!a || !b || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i][0] !== b[i][0] || a[i][1] !== b[i][1]) return false;
  return true;
}

/** Per step of the rewrite and layout chain shown (`key`), the in-edges of the nodes the step removed as they ran on
 * the step before's layout ({edgeKey: [src, points]}): what the step's graph answer sent as removed_edges, or the
 * step to it from the one before took away. A step back from such a step asks its delta with `held`, and the server
 * leaves those routes out (viz_server/stepgraphs.py, _pack_held; step 1 -> 0 of a GPT step's `add bufferize` sent
 * 126 KB of them). A chain's layouts never change, so a step's entry stays true while the page shows that chain. It
 * keeps at most `limit` in-edges in all (of a node renamed in place only those routed anew: steps 0..81 of that
 * rewrite kept 2,232), the steps filed least recently dropped first. */
export class StepMemo {
  constructor(limit = 200000) {
    this.limit = limit;
    this.key = null;
    this.steps = new Map();
    this.size = 0;  // in-edges kept
  }

  /** Use the entries of chain `key` (those of another are dropped). */
  at(key) {
    if (key !== this.key) { this.key = key; this.steps.clear(); this.size = 0; }
    return this;
  }

  /** File step `step`'s removed in-edges (`routes`). */
  put(step, routes) {
    this.size -= this.steps.get(step)?.size ?? 0;
    this.steps.delete(step);
    this.steps.set(step, routes);
    this.size += routes.size;
    for (const [s, r] of this.steps) {
      if (this.size <= this.limit || s === step) break;
      this.steps.delete(s);
      this.size -= r.size;
    }
  }

  has(step) { return this.steps.has(step); }

  /** Step `step`'s removed in-edges, or undefined. */
  get(step) { return this.steps.get(step); }
}
