// The router of a single-file export (viz_server/export/page.py puts it last before the UI's bundle): static/api.js
// asks globalThis.tinyvizOffline(path) instead of fetch and gets [status, body], as the server's routes would answer
// (viz_server/api.py, rewrite_routes.py). The data is inflated by boot.js (which ran this script) and decoded by
// unpack.js; graphs and deltas come from graphs.js, diffs from diff.js, /nodes/<n> (api.py's node) from the node
// tables, every other answer as collect.py embedded it. Nothing here makes a request.
const tinyvizExport = (() => {
  const ready = (async () => {
    const block = tinyvizExportBoot.block;  // (boot.js: the embedded block, and the inflate it ran this script with)
    return tinyvizUnpack.unpack(JSON.parse(await tinyvizExportBoot.inflate(block.data)));
  })();

  /** The call site of trace node n ({file, line, function}) where the trace names one (collect.py's `sites`). */
  function siteOf(data, n) {
    if (!data.siteOf) {
      const s = data.sites || {ids: [], codes: [], table: []};
      data.siteOf = new Map();
      let id = 0;
      s.ids.forEach((d, j) => { id += d; data.siteOf.set(id, s.table[s.codes[j]]); });
    }
    return data.siteOf.get(n);
  }

  function node(data, n) {
    const fixed = data.statics[n];  // a node some graph holds, else one of the others
    const got = fixed ? [fixed[0], fixed[1], fixed[2], fixed[tinyvizUnpack.SRC], fixed[3]] : data.nodes[n];
    if (!got) return tinyvizGraphs.notHere(`node ${n}`);
    const [op, dtype, arg, src, label] = got;
    const out = {id: Number(n), op, dtype, arg, src: [...src], label};
    const site = siteOf(data, Number(n));
    if (site) out.site = {...site};
    return [200, out];
  }

  async function answer(path, opts = {}) {
    const data = await ready;
    if ((opts.method || "GET") !== "GET") return [405, {error: "this is a read-only export"}];
    const url = new URL(path, "http://export.invalid");  // parsing only
    const q = url.searchParams;
    const p = url.pathname;
    let m;
    if ((m = p.match(/^\/api\/traces\/\d+\/rewrites\/(\d+)\/graph$/))) return tinyvizGraphs.graph(data, m[1], q);
    if ((m = p.match(/^\/api\/traces\/\d+\/rewrites\/(\d+)\/delta$/))) return tinyvizGraphs.delta(data, m[1], q);
    if ((m = p.match(/^\/api\/traces\/\d+\/nodes\/(\d+)$/))) return node(data, m[1]);
    if (p === "/api/diff") return tinyvizDiff.diff(data, q);
    const got = Object.prototype.hasOwnProperty.call(data.answers, p) ? data.answers[p] : undefined;
    return got === undefined ? tinyvizGraphs.notHere(p) : [200, structuredClone(got)];
  }

  globalThis.tinyvizOffline = answer;
  return {ready, answer};
})();
