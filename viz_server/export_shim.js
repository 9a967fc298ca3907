// The server of a single-file export (viz_server/export.py): static/api.js asks globalThis.tinyvizOffline(path)
// instead of fetch and gets [status, body]. Answers come from the data embedded in the page; a rewrite's graph at
// step k is its step-0 graph with the deltas of steps 1..k applied, from the nearest graph built before; a delta
// between any two steps is the difference of their graphs. Nothing here makes a request.
const tinyvizExport = (() => {
  const KEEP_EVERY = 32;  // a built graph kept every 32 steps, so a far step is at most 31 deltas away
  const ready = (async () => {
    const block = JSON.parse(document.getElementById("tinyviz-export").textContent);
    const bin = atob(block.data);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return JSON.parse(await new Response(stream).text());
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
    if (points === undefined) {
      const a = nodes.get(src), b = nodes.get(dst);
      points = [[a.x, a.y], [b.x, b.y]];
    }
    return {src, dst, index, points};
  }

  function stateOf(data, R) {
    const g = data.g0[R.g0];
    const nodes = new Map(g.nodes.map((n) => [n[0], unpackNode(data, R, n)]));
    const edges = new Map(g.edges.map((e) => [edgeKey(e[0], e[1], e[2]), unpackEdge(nodes, e)]));
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
    for (const e of d.edges_added) st.edges.set(edgeKey(e[0], e[1], e[2]), unpackEdge(st.nodes, e));
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
      return [200, copy({...d, nodes_added: d.nodes_added.map((n) => b.nodes.get(n[0])),
        edges_added: d.edges_added.map((e) => b.edges.get(edgeKey(e[0], e[1], e[2]))),
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

  function node(data, n) {
    const got = data.nodes[n];
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
    if (p === "/api/diff") {
      const got = data.answers[`/api/diff?a=${q.get("a")}&b=${q.get("b")}`];
      return got ? [200, copy(got)] : notHere("this diff (the export holds each rewrite's first vs last step)");
    }
    const got = Object.prototype.hasOwnProperty.call(data.answers, p) ? data.answers[p] : undefined;
    return got === undefined ? notHere(p) : [200, copy(got)];
  }

  globalThis.tinyvizOffline = answer;
  return {ready, answer};
})();
