// Collapsible groups of the graph view (issue 30: a kernel's 2.4k-node graph read as a mesh of edges): a kernel's
// index arithmetic under an INDEX (the ALU, constant and cast nodes that compute its index and feed nothing else)
// folded into one box, its first operand's, drawn as a stack with the count it stands for; and the nodes one line of
// the user's program made (their `site`, trace 2.7: a tensor graph's ops by the line that called them) folded into
// the lowest of them, labelled with that line. A click on the box expands that group; key g folds or unfolds them
// all. Nodes keep their layout positions: folding hides, it does not move anything. No document access
// (static/graph.js keeps the state, static/graphdraw.js draws it).
import {edgeObj} from "./graphgeom.js";

const FOLDABLE = new Set(["alu", "const", "cast"]);  // the categories of index arithmetic
export const GROUP_MIN_NODES = 400;  // graphs from this size open folded (small ones read fine unfolded)

/** The index groups of a graph: rep id -> {index, members} for each INDEX whose index operands' arithmetic (those
 * of `members`, at least two nodes, the rep among them) feeds nothing but that INDEX and itself; `expanded`: INDEX ids
 * the user unfolded. nodes: id -> model entry; users: id -> user ids. */
export function indexGroups(nodes, users, expanded) {
  const out = new Map();
  for (const [id, n] of nodes) {
    if (n.d.op !== "INDEX" || expanded.has(id)) continue;
    const roots = (n.d.src || []).slice(1).filter((s) => foldable(nodes.get(s)));
    const members = new Set();
    const stack = [...roots];
    while (stack.length) {  // everything foldable under the roots...
      const x = stack.pop();
      if (members.has(x)) continue;
      members.add(x);
      for (const s of nodes.get(x).d.src || []) if (foldable(nodes.get(s)) && !members.has(s)) stack.push(s);
    }
    for (let changed = true; changed;) {  // ...less what something outside the group uses (and what only it used)
      changed = false;
      for (const x of members) {
        if ((users.get(x) || []).some((u) => u !== id && !members.has(u))) { members.delete(x); changed = true; }
      }
    }
    const rep = roots.find((r) => members.has(r));
    if (rep !== undefined && members.size >= 2) out.set(rep, {index: id, members});
  }
  return out;
}

const foldable = (n) => n !== undefined && FOLDABLE.has(n.d.cat);

/** The call-site groups of a graph: rep id -> {index, site, members} for each line of the user's program (a node's
 * `site`) that made at least two of its nodes not in another group (`taken`), the rep the lowest of them (what the
 * line computed last, its output mostly; of two as low, the later id); `index` is the group's key in `expanded`, the groups the user unfolded. */
export function siteGroups(nodes, expanded, taken) {
  const by = new Map();
  for (const [id, n] of nodes) {
    const s = n.d.site;
    if (typeof s !== "string" || taken.has(id)) continue;
    const ids = by.get(s);
    if (ids) ids.push(id);
    else by.set(s, [id]);
  }
  const out = new Map();
  for (const [site, ids] of by) {
    if (ids.length < 2 || expanded.has(`site:${site}`)) continue;
    const low = (a, b) => { const ya = nodes.get(a).y, yb = nodes.get(b).y; return yb > ya || (yb === ya && b > a); };
    const rep = ids.reduce((a, b) => (low(a, b) ? b : a));
    out.set(rep, {index: `site:${site}`, site, members: new Set(ids)});
  }
  return out;
}

/** The users of nodes (id -> user ids, in the order of `nodes`, each once) of those in `ids` only (a Set; null: of
 * every node). A fold reads the users of its groups' members alone: the whole map was ~3,000 lists made every step of
 * a big rewrite for the ~500 a fold read, most of its time (issue 30). */
export function usersOf(nodes, ids = null) {
  const u = new Map();
  for (const [id, n] of nodes) {
    const src = n.d.src;
    if (!src) continue;
    for (let i = 0; i < src.length; i++) {
      const s = src[i];
      if (ids !== null && !ids.has(s)) continue;
      const list = u.get(s);
      if (list === undefined) u.set(s, [id]);
      else if (list[list.length - 1] !== id) list.push(id);  // (this node, listed last: a node of many users)
    }
  }
  return u;
}

/** What folding `groups` hides and draws instead: the hidden node ids (every member but the reps), and the edges
 * from outside a group into its members, redirected to its rep, and from its hidden members to users outside it,
 * redirected from its rep (straight, one per pair; an end hidden in another group is that group's rep). `made`: the
 * redirected edges of the fold before, by their ends' entries (a WeakMap of maps), kept where their ends have not
 * moved: a step renames ~2,000 entries in place (issue 30) and each fold made all its edges again; the returned
 * `made` is this fold's. users: id -> user ids (usersOf), at least of the groups' hidden members. */
export function foldedView(groups, nodes, collapse, users = new Map(), made = new WeakMap()) {
  const repOf = new Map();
  for (const [rep, g] of groups) for (const m of g.members) if (m !== rep) repOf.set(m, rep);
  // the pairs a, b added: found by their entries in `now` where it keeps them (a Set for each a was ~2,000 Sets made a
  // step, issue 30), else in seen (a -> the b of each pair; no string a pair)
  const hidden = new Set(repOf.keys()), edges = [], seen = new Map(), now = new WeakMap();
  const add = (s, d) => {
    const a = repOf.get(s) ?? s, b = repOf.get(d) ?? d;
    if (a === b) return;
    const na = nodes.get(a), nb = nodes.get(b), kept = na && nb && !collapse;
    if (kept) {
      if (now.get(na)?.has(nb)) return;
    } else {
      const to = seen.get(a);
      if (to === undefined) seen.set(a, new Set([b]));
      else if (to.has(b)) return;
      else to.add(b);
    }
    let e = kept ? made.get(na)?.get(nb) : undefined;
    if (e && e.ends[0] === na.d.x && e.ends[1] === na.d.y && e.ends[2] === nb.d.x && e.ends[3] === nb.d.y) {
      e.d.src = a;  // (the ids of entries renamed in place)
      e.d.dst = b;
    } else {
      e = edgeObj({src: a, dst: b, index: -1}, na, nb, collapse);
      if (!e) return;
      if (na && nb) e.ends = [na.d.x, na.d.y, nb.d.x, nb.d.y];
    }
    edges.push(e);
    if (kept) {
      const to = now.get(na);
      if (to === undefined) now.set(na, new Map([[nb, e]]));
      else to.set(nb, e);
    }
  };
  for (const [rep, g] of groups) {
    for (const m of g.members) {
      for (const s of nodes.get(m).d.src || []) if (!g.members.has(s)) add(s, rep);
      if (m !== rep) for (const u of users.get(m) || []) if (!g.members.has(u)) add(rep, u);
    }
  }
  return {hidden, edges, made: now};
}
