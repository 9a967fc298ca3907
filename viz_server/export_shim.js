// The server of a single-file export (viz_server/export.py): static/api.js asks globalThis.tinyvizOffline(path)
// instead of fetch and gets [status, body]. Answers come from the data embedded in the page; a rewrite's graph at
// step k is its step-0 graph with the deltas of steps 1..k applied, from the nearest graph built before; a delta
// between any two steps is the difference of their graphs. The data is inflated by export_boot.js (which ran this
// script), decoded by export_unpack.js, and the diffs' structural hashes come from export_hash.js (both before this
// in the module). Nothing here makes a request.
const tinyvizExport = (() => {
  const KEEP_EVERY = 32;  // a built graph kept every 32 steps, so a far step is at most 31 deltas away
  const ready = (async () => {
    const block = tinyvizBoot.block;  // (export_boot.js: the embedded block, and the inflate it ran this script with)
    return tinyvizUnpack.unpack(JSON.parse(await tinyvizBoot.inflate(block.data)));
  })();

  const edgeKey = (s, d, i) => `${s},${d},${i}`;
  const copy = (x) => structuredClone(x);
  const notHere = (what) => [404, {error: `${what} is not in this export`}];

  // the packed form (viz_server/export.py, GraphPacker): a node [id, x, y, created] with its fixed fields per id, an
  // edge [src, dst, index(, points)] (without points: straight from its source's center to its user's)
  const STATIC = ["op", "dtype", "arg", "label", "cat", "w", "h", "src", "consts"];
  function unpackNode(data, R, [id, x, y, created]) {
    const fixed = id >= 2 ** 40 ? R.fresh[id] : data.statics[id];
    const n = {id};
    STATIC.forEach((k, i) => { n[k] = fixed[i]; });
    return Object.assign(n, {x, y, created});
  }
  function unpackEdge(nodes, [src, dst, index, points]) {
    if (points === undefined || points.between) {  // (between: the points between the two nodes' centers)
      const a = nodes.get(src), b = nodes.get(dst);
      points = [[a.x, a.y], ...(points ? points.between : []), [b.x, b.y]];
    }
    return {src, dst, index, points};
  }

  /** Packed edges: as given, or (viz_server/export.py, leave_out_derived_edges) the in-edges of the packed nodes,
   * source by source, with the route of the `bent` ones: [k, r] its points between its nodes, [k, r, 1] all. */
  function packedEdges(data, R, holder, key, nodes) {
    if (holder[key]) return holder[key];
    const out = [];
    for (const [id] of nodes) {
      const src = (id >= 2 ** 40 ? R.fresh[id] : data.statics[id])[7];
      src.forEach((s, i) => out.push([s, id, i]));
    }
    for (const [k, r, all] of holder.bent) {  // (routes are never changed: shared safely)
      out[k] = [...out[k], all ? data.routes[r] : {between: data.routes[r]}];
    }
    return out;
  }

  function stateOf(data, R) {
    const g = data.g0[R.g0];
    const nodes = new Map(g.nodes.map((n) => [n[0], unpackNode(data, R, n)]));
    const edges = new Map(packedEdges(data, R, g, "edges", g.nodes)
      .map((e) => [edgeKey(e[0], e[1], e[2]), unpackEdge(nodes, e)]));
    return {nodes, edges, width: g.width, height: g.height, added: g.added, changed: g.changed, removed: g.removed,
            match: g.match, removed_nodes: g.removed_nodes, removed_edges: g.removed_edges};
  }

  function ruleOf(data, p) {
    const pat = data.answers[`/api/traces/${data.trace}/patterns/${p}`];
    return {file: pat.file, line: pat.line, name: pat.name};
  }

  const inEdges = (st, n) => (n.src || []).map((s, i) => st.edges.get(edgeKey(s, n.id, i))).filter(Boolean);

  /** The state after one step's delta (a new state; node and edge objects are shared, never changed). */
  function apply(data, R, prev, d) {
    const st = {...prev, nodes: new Map(prev.nodes), edges: new Map(prev.edges)};
    const gone = (d.removed ?? d.nodes_removed).map((id) => prev.nodes.get(id)).filter(Boolean);
    st.removed_nodes = gone;
    st.removed_edges = gone.flatMap((n) => inEdges(prev, n));
    for (const id of d.nodes_removed) {
      const n = st.nodes.get(id);
      if (!n) continue;
      (n.src || []).forEach((s, i) => st.edges.delete(edgeKey(s, id, i)));
      st.nodes.delete(id);
    }
    for (const n of d.nodes_added) st.nodes.set(n[0], unpackNode(data, R, n));
    for (const [id, [x, y]] of Object.entries(d.nodes_moved)) {
      const n = st.nodes.get(Number(id));
      if (n) st.nodes.set(n.id, {...n, x, y});
    }
    for (const [s, dst, i] of d.edges_removed) st.edges.delete(edgeKey(s, dst, i));
    for (const e of packedEdges(data, R, d, "edges_added", d.nodes_added)) {
      st.edges.set(edgeKey(e[0], e[1], e[2]), unpackEdge(st.nodes, e));
    }
    for (const k of ["width", "height", "added", "changed"]) st[k] = d[k];
    st.removed = d.removed ?? d.nodes_removed;
    st.match = d.match && !d.match.rule ? {...d.match, rule: ruleOf(data, d.match.pattern)} : d.match;
    st.removedIn = d.nodes_removed.flatMap((id) => prev.nodes.has(id) ? inEdges(prev, prev.nodes.get(id)) : []);
    return st;
  }

  function stateAt(data, R, k) {
    R.built = R.built || new Map([[0, stateOf(data, R)]]);
    let j = 0;
    for (const b of R.built.keys()) if (b <= k && b > j) j = b;
    let st = R.built.get(j);
    for (let i = j + 1; i <= k; i++) {
      st = apply(data, R, st, R.deltas[i - 1]);
      if (i % KEEP_EVERY === 0) R.built.set(i, st);
    }
    return st;
  }

  function stepOf(R, s) {
    const k = s === "end" ? R.deltas.length : Number(s);
    return Number.isInteger(k) && k >= 0 && k <= R.deltas.length ? k : null;
  }

  function graph(data, r, q) {
    const R = data.graphs[r];
    if (!R) return notHere(`rewrite ${r}`);
    const k = stepOf(R, q.get("step") ?? "0");
    if (k === null) return [400, {error: `no step ${q.get("step")} in rewrite ${r}`}];
    const st = stateAt(data, R, k);
    return [200, copy({rewrite: Number(r), step: k, nodes: [...st.nodes.values()], edges: [...st.edges.values()],
      width: st.width, height: st.height, added: st.added, changed: st.changed, removed: st.removed, match: st.match,
      removed_nodes: st.removed_nodes, removed_edges: st.removed_edges})];
  }

  function delta(data, r, q) {
    const R = data.graphs[r];
    if (!R) return notHere(`rewrite ${r}`);
    const j = stepOf(R, q.get("from")), k = stepOf(R, q.get("to"));
    if (j === null || k === null) return [400, {error: "bad from/to"}];
    const a = stateAt(data, R, j), b = stateAt(data, R, k);
    if (k === j + 1) {  // the API's own delta, unpacked
      const d = R.deltas[k - 1];
      const {bent: _, ...api} = d;  // (bent: the packing's, not the API's)
      return [200, copy({...api, nodes_added: d.nodes_added.map((n) => b.nodes.get(n[0])),
        edges_added: packedEdges(data, R, d, "edges_added", d.nodes_added)
          .map((e) => b.edges.get(edgeKey(e[0], e[1], e[2]))),
        edges_removed: [...b.removedIn.map((e) => [e.src, e.dst, e.index]), ...d.edges_removed],
        removed: b.removed, match: b.match})];
    }
    const out = {from: j, to: k, nodes_added: [], nodes_removed: [], nodes_moved: {}, edges_added: [],
      edges_removed: [], width: b.width, height: b.height, added: b.added, changed: b.changed, removed: b.removed,
      match: b.match};
    for (const [id, n] of a.nodes) {
      const m = b.nodes.get(id);
      if (!m || m.created !== n.created) out.nodes_removed.push(id);
      else if (m.x !== n.x || m.y !== n.y) out.nodes_moved[id] = [m.x, m.y];
    }
    for (const [id, m] of b.nodes) {
      const n = a.nodes.get(id);
      if (!n || n.created !== m.created) out.nodes_added.push(m);
    }
    for (const [key, e] of a.edges) if (b.edges.get(key) !== e) out.edges_removed.push([e.src, e.dst, e.index]);
    for (const [key, e] of b.edges) if (a.edges.get(key) !== e) out.edges_added.push(e);
    return [200, copy(out)];
  }

  // ---- diffs, printed as viz_server/diff.py prints them (a port of difflib's unified_diff, so the lines are equal)
  function rootOf(st) {
    const used = new Set();
    for (const n of st.nodes.values()) for (const x of n.src) used.add(x);
    for (const id of st.nodes.keys()) if (!used.has(id)) return id;
    return null;
  }

  /** A diff point `t:r:k`, `t:r:end` or `t:c` as {order, nodes, hash} (sources first, depth-first from the root). */
  function point(data, spec) {
    const parts = String(spec).split(":");
    let R, k;
    if (parts.length === 3) {
      R = data.graphs[parts[1]];
      if (!R) return null;
      k = stepOf(R, parts[2]);
    } else {
      const c = Number(parts[1]);
      const ctxs = data.answers[`/api/traces/${data.trace}/contexts`];
      const inside = new Set([c]);
      for (const x of ctxs) if (inside.has(x.parent)) inside.add(x.id);
      let last = null;
      for (const x of ctxs) if (inside.has(x.id)) for (const r of x.rewrites) if (r.ended && (!last || r.id > last)) last = r.id;
      R = last === null ? null : data.graphs[last];
      if (!R) return null;
      k = R.deltas.length;
    }
    if (k === null) return null;
    const st = stateAt(data, R, k);
    const hash = hashOf(data, R);
    const root = rootOf(st), order = [], done = new Set(), stack = [[root, false]];
    while (stack.length) {
      const [x, expanded] = stack.pop();
      if (done.has(x)) continue;
      if (expanded) { done.add(x); order.push(x); continue; }
      stack.push([x, true]);
      const src = st.nodes.get(x).src;
      for (let i = src.length - 1; i >= 0; i--) if (!done.has(src[i])) stack.push([src[i], false]);
    }
    return {order, nodes: st.nodes, hash};
  }

  /** The 8-hex structural hash of a node of rewrite R's graphs (viz_server/export_hash.js; memoized). */
  function hashOf(data, R) {
    data.traceDigests = data.traceDigests || new Map();
    R.hash = R.hash || tinyvizHash.hasher((id) => {
      const f = (id >= 2 ** 40 ? R.fresh : data.statics)[id];
      if (f) return [f[0], f[1], f[2], f[7]];
      const [op, dtype, arg, src] = data.nodes[id];
      return [op, dtype, arg, src];
    }, data.traceDigests);
    return R.hash;
  }

  function printGraph(p) {
    return p.order.map((x) => {
      const n = p.nodes.get(x);
      const tail = n.arg === "None" ? "" : "  " + n.arg.replaceAll("\n", "\\n");
      return `${p.hash(x)} ${n.op.padEnd(14)} ${n.dtype.padEnd(10)} (${n.src.map(p.hash).join(", ")})${tail}`;
    });
  }

  function matchingBlocks(a, b) {
    const b2j = new Map();
    b.forEach((x, j) => { if (!b2j.has(x)) b2j.set(x, []); b2j.get(x).push(j); });
    if (b.length >= 200) {  // difflib's autojunk: lines in more than 1% of b are not used to start a match
      const ntest = Math.floor(b.length / 100) + 1;
      for (const [x, js] of [...b2j]) if (js.length > ntest) b2j.delete(x);
    }
    const longest = (alo, ahi, blo, bhi) => {
      let bi = alo, bj = blo, bk = 0, j2len = new Map();
      for (let i = alo; i < ahi; i++) {
        const next = new Map();
        for (const j of b2j.get(a[i]) || []) {
          if (j < blo) continue;
          if (j >= bhi) break;
          const k = (j2len.get(j - 1) || 0) + 1;
          next.set(j, k);
          if (k > bk) { bi = i - k + 1; bj = j - k + 1; bk = k; }
        }
        j2len = next;
      }
      while (bi > alo && bj > blo && a[bi - 1] === b[bj - 1]) { bi--; bj--; bk++; }
      while (bi + bk < ahi && bj + bk < bhi && a[bi + bk] === b[bj + bk]) bk++;
      return [bi, bj, bk];
    };
    const blocks = [], queue = [[0, a.length, 0, b.length]];
    while (queue.length) {
      const [alo, ahi, blo, bhi] = queue.pop();
      const [i, j, k] = longest(alo, ahi, blo, bhi);
      if (!k) continue;
      blocks.push([i, j, k]);
      if (alo < i && blo < j) queue.push([alo, i, blo, j]);
      if (i + k < ahi && j + k < bhi) queue.push([i + k, ahi, j + k, bhi]);
    }
    blocks.sort((x, y) => x[0] - y[0] || x[1] - y[1] || x[2] - y[2]);
    const out = [];
    let [i1, j1, k1] = [0, 0, 0];
    for (const [i2, j2, k2] of blocks) {
      if (i1 + k1 === i2 && j1 + k1 === j2) k1 += k2;
      else { if (k1) out.push([i1, j1, k1]); [i1, j1, k1] = [i2, j2, k2]; }
    }
    if (k1) out.push([i1, j1, k1]);
    out.push([a.length, b.length, 0]);
    return out;
  }

  function groupedOpcodes(a, b, n = 3) {
    const codes = [];
    let i = 0, j = 0;
    for (const [ai, bj, size] of matchingBlocks(a, b)) {
      const tag = i < ai && j < bj ? "replace" : i < ai ? "delete" : j < bj ? "insert" : "";
      if (tag) codes.push([tag, i, ai, j, bj]);
      i = ai + size; j = bj + size;
      if (size) codes.push(["equal", ai, i, bj, j]);
    }
    if (!codes.length) codes.push(["equal", 0, 1, 0, 1]);
    if (codes[0][0] === "equal") {
      const [t, i1, i2, j1, j2] = codes[0];
      codes[0] = [t, Math.max(i1, i2 - n), i2, Math.max(j1, j2 - n), j2];
    }
    if (codes[codes.length - 1][0] === "equal") {
      const [t, i1, i2, j1, j2] = codes[codes.length - 1];
      codes[codes.length - 1] = [t, i1, Math.min(i2, i1 + n), j1, Math.min(j2, j1 + n)];
    }
    const groups = [];
    let group = [];
    for (let [t, i1, i2, j1, j2] of codes) {
      if (t === "equal" && i2 - i1 > 2 * n) {
        group.push([t, i1, Math.min(i2, i1 + n), j1, Math.min(j2, j1 + n)]);
        groups.push(group);
        group = [];
        i1 = Math.max(i1, i2 - n); j1 = Math.max(j1, j2 - n);
      }
      group.push([t, i1, i2, j1, j2]);
    }
    if (group.length && !(group.length === 1 && group[0][0] === "equal")) groups.push(group);
    return groups;
  }

  const range = (start, stop) => {
    const len = stop - start;
    return len === 1 ? `${start + 1}` : `${len ? start + 1 : start},${len}`;
  };

  function diff(data, q) {
    const a = point(data, q.get("a")), b = point(data, q.get("b"));
    if (!a || !b) return notHere("a diff point");
    const pa = printGraph(a), pb = printGraph(b);
    const lines = [];
    for (const g of groupedOpcodes(pa, pb)) {
      const first = g[0], last = g[g.length - 1];
      lines.push({kind: "@", text: `@@ -${range(first[1], last[2])} +${range(first[3], last[4])} @@`});
      for (const [t, i1, i2, j1, j2] of g) {
        if (t === "equal") { for (const l of pa.slice(i1, i2)) lines.push({kind: " ", text: l}); continue; }
        if (t !== "insert") for (const l of pa.slice(i1, i2)) lines.push({kind: "-", text: l});
        if (t !== "delete") for (const l of pb.slice(j1, j2)) lines.push({kind: "+", text: l});
      }
    }
    const ha = new Set(a.order.map(a.hash)), hb = new Set(b.order.map(b.hash));
    const only = (p, other) => p.order.filter((x) => !other.has(p.hash(x))).map((x) => {
      const n = p.nodes.get(x);
      return {id: x, op: n.op, dtype: n.dtype, arg: n.arg, hash: p.hash(x)};
    });
    const graph = {only_a: only(a, hb), only_b: only(b, ha), both: [...ha].filter((x) => hb.has(x)).length};
    if (!["0", "", "false", null].includes(q.get("draw"))) graph.drawn = null;  // no layouts in the page
    return [200, {a: q.get("a"), b: q.get("b"), text: "", lines, graph}];
  }

  function node(data, n) {
    const fixed = data.statics[n];  // a node some graph holds, else one of the others
    const got = fixed ? [fixed[0], fixed[1], fixed[2], fixed[7], fixed[3]] : data.nodes[n];
    if (!got) return notHere(`node ${n}`);
    const [op, dtype, arg, src, label] = got;
    return [200, {id: Number(n), op, dtype, arg, src: [...src], label}];
  }

  async function answer(path, opts = {}) {
    const data = await ready;
    if ((opts.method || "GET") !== "GET") return [405, {error: "this is a read-only export"}];
    const url = new URL(path, "http://export.invalid");  // parsing only
    const q = url.searchParams;
    const p = url.pathname;
    let m;
    if ((m = p.match(/^\/api\/traces\/\d+\/rewrites\/(\d+)\/graph$/))) return graph(data, m[1], q);
    if ((m = p.match(/^\/api\/traces\/\d+\/rewrites\/(\d+)\/delta$/))) return delta(data, m[1], q);
    if ((m = p.match(/^\/api\/traces\/\d+\/nodes\/(\d+)$/))) return node(data, m[1]);
    if (p === "/api/diff") return diff(data, q);
    const got = Object.prototype.hasOwnProperty.call(data.answers, p) ? data.answers[p] : undefined;
    return got === undefined ? notHere(p) : [200, copy(got)];
  }

  globalThis.tinyvizOffline = answer;
  return {ready, answer};
})();
