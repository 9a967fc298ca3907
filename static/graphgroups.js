// Collapsible groups of the graph view (issue 30: a kernel's 2.4k-node graph read as a mesh of edges): a kernel's
// index arithmetic under an INDEX (the ALU, constant and cast nodes that compute its index and feed nothing else)
// folded into one box, its first operand's, drawn as a stack with the count it stands for. A click on the box
// expands that group; key g folds or unfolds them all. Nodes keep their layout positions: folding hides, it does not
// move anything. No document access (static/graph.js keeps the state, static/graphdraw.js draws it).
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

/** What folding `groups` hides and draws instead: the hidden node ids (every member but the reps), and the edges
 * from outside a group into its hidden members, redirected to its rep (straight, one per source). */
export function foldedView(groups, nodes, collapse) {
  const hidden = new Set(), edges = [];
  for (const [rep, g] of groups) {
    const from = new Set();
    for (const m of g.members) {
      if (m !== rep) hidden.add(m);
      for (const s of nodes.get(m).d.src || []) if (!g.members.has(s)) from.add(s);
    }
    for (const s of from) {
      const e = edgeObj({src: s, dst: rep, index: -1}, nodes.get(s), nodes.get(rep), collapse);
      if (e) edges.push(e);
    }
  }
  return {hidden, edges};
}
