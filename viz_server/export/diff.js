// GET /api/diff of a single-file export, answered in the page: viz_server/diff.py's diff_graphs (print_graph's lines
// over structural hashes hash.js computes) and a port of difflib's unified_diff (SequenceMatcher's matching blocks,
// autojunk included, and get_grouped_opcodes), so its lines and node lists equal the API's. `drawn` is null: there
// is no layout in the page. tests/viewer/test_export_pack.py holds unifiedLines to diff.py's _unified on generated
// lines; the browser tests compare whole diffs with the API's.
const tinyvizDiff = (() => {
  function rootOf(st) {
    const used = new Set();
    for (const n of st.nodes.values()) for (const x of n.src) used.add(x);
    for (const id of st.nodes.keys()) if (!used.has(id)) return id;
    return null;
  }

  /** A diff point `t:r:k`, `t:r:end` or `t:c` (viz_server/api.py's _point) as {order, nodes, hash}: the order is
   * diff.py's toposort (sources first, depth-first from the root). */
  function point(data, spec) {
    const parts = String(spec).split(":");
    let R, k;
    if (parts.length === 3) {
      R = data.graphs[parts[1]];
      if (!R) return null;
      k = tinyvizGraphs.stepOf(R, parts[2]);
    } else {
      const c = Number(parts[1]);
      const ctxs = data.answers[`/api/traces/${data.trace}/contexts`];
      const inside = new Set([c]);
      for (const x of ctxs) if (inside.has(x.parent)) inside.add(x.id);
      let last = null;
      for (const x of ctxs) {
        if (inside.has(x.id)) for (const r of x.rewrites) if (r.ended && (!last || r.id > last)) last = r.id;
      }
      R = last === null ? null : data.graphs[last];
      if (!R) return null;
      k = R.deltas.length;
    }
    if (k === null) return null;
    const st = tinyvizGraphs.stateAt(data, R, k);
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

  /** The 8-hex structural hash of a node of rewrite R's graphs (hash.js; memoized). */
  function hashOf(data, R) {
    data.traceDigests = data.traceDigests || new Map();
    R.hash = R.hash || tinyvizHash.hasher((id) => {
      const f = tinyvizUnpack.fixedOf(data, R, id);
      if (f) return [f[0], f[1], f[2], f[tinyvizUnpack.SRC]];
      const [op, dtype, arg, src] = data.nodes[id];
      return [op, dtype, arg, src];
    }, data.traceDigests);
    return R.hash;
  }

  /** diff.py's print_graph: a line per node, its hash, op, dtype, its sources' hashes and its arg. */
  function printGraph(p) {
    return p.order.map((x) => {
      const n = p.nodes.get(x);
      const tail = n.arg === "None" ? "" : "  " + n.arg.replaceAll("\n", "\\n");
      return `${p.hash(x)} ${n.op.padEnd(14)} ${n.dtype.padEnd(10)} (${n.src.map(p.hash).join(", ")})${tail}`;
    });
  }

  /** difflib's SequenceMatcher(None, a, b).get_matching_blocks(). */
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

  /** difflib's SequenceMatcher(None, a, b).get_grouped_opcodes(n). */
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

  /** The unified diff of two lists of lines as the API's `lines` (viz_server/diff.py's _unified, 3 lines of context):
   * [{kind: "@" | " " | "-" | "+", text}], without the file header. */
  function unifiedLines(pa, pb) {
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
    return lines;
  }

  function diff(data, q) {
    const a = point(data, q.get("a")), b = point(data, q.get("b"));
    if (!a || !b) return tinyvizGraphs.notHere("a diff point");
    const lines = unifiedLines(printGraph(a), printGraph(b));
    const ha = new Set(a.order.map(a.hash)), hb = new Set(b.order.map(b.hash));
    const only = (p, other) => p.order.filter((x) => !other.has(p.hash(x))).map((x) => {
      const n = p.nodes.get(x);
      return {id: x, op: n.op, dtype: n.dtype, arg: n.arg, hash: p.hash(x)};
    });
    const graph = {only_a: only(a, hb), only_b: only(b, ha), both: [...ha].filter((x) => hb.has(x)).length};
    if (!["0", "", "false", null].includes(q.get("draw"))) graph.drawn = null;  // no layouts in the page
    return [200, {a: q.get("a"), b: q.get("b"), text: "", lines, graph}];
  }

  return {diff, unifiedLines};
})();
