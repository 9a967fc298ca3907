// GET /api/traces/<t>/rewrites/<r>/graph and /delta of a single-file export, answered in the page (the server's are
// viz_server/rewrite_routes.py's graph_answer and delta_answer, stepgraphs.py's StepGraphs.graph and .delta): a
// rewrite's graph at step k is its step-0 graph with the deltas of steps 1..k applied, from the nearest graph built
// before; a delta between any two steps is the difference of their graphs, a single-step one the API's own as
// graphs.py packed it. The browser tests (tests/browser/test_ui_export.py, test_export_firefox.py) compare every
// graph and single-step delta with the API's.
const tinyvizGraphs = (() => {
  const KEEP_EVERY = 32;  // a built graph kept every 32 steps, so a far step is at most 31 deltas away
  const edgeKey = (s, d, i) => `${s},${d},${i}`;
  const notHere = (what) => [404, {error: `${what} is not in this export`}];

  // the packed form (viz_server/export/graphs.py, GraphPacker): a node [id, x, y, created] with its fixed fields per
  // id, an edge [src, dst, index(, points)] (without points: straight from its source's center to its user's)
  const {FIELDS, SRC, fixedOf} = tinyvizUnpack;
  function unpackNode(data, R, [id, x, y, created]) {
    const fixed = fixedOf(data, R, id);
    const n = {id};
    FIELDS.forEach((k, i) => { if (fixed[i] !== null || k !== "site") n[k] = fixed[i]; });  // (no site: none sent)
    return Object.assign(n, {x, y, created});
  }
  function unpackEdge(nodes, [src, dst, index, points]) {
    if (points === undefined || points.between) {  // (between: the points between the two nodes' centers)
      const a = nodes.get(src), b = nodes.get(dst);
      points = [[a.x, a.y], ...(points ? points.between : []), [b.x, b.y]];
    }
    return {src, dst, index, points};
  }

  /** Packed edges: as given, or (viz_server/export/graphs.py, leave_out_derived_edges) the in-edges of the packed
   * nodes, source by source, with the route of the `bent` ones: [k, r] its points between its nodes, [k, r, 1] all. */
  function packedEdges(data, R, holder, key, nodes) {
    if (holder[key]) return holder[key];
    const out = [];
    for (const [id] of nodes) {
      const src = fixedOf(data, R, id)[SRC];
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
    return [200, structuredClone({rewrite: Number(r), step: k, nodes: [...st.nodes.values()],
      edges: [...st.edges.values()], width: st.width, height: st.height, added: st.added, changed: st.changed,
      removed: st.removed, match: st.match, removed_nodes: st.removed_nodes, removed_edges: st.removed_edges})];
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
      return [200, structuredClone({...api, nodes_added: d.nodes_added.map((n) => b.nodes.get(n[0])),
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
    return [200, structuredClone(out)];
  }

  return {notHere, stateAt, stepOf, graph, delta};
})();
