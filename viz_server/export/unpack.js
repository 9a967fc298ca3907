// The decoder of a single-file export's packed data (viz_server/export/pack.py's pack, the other way; no server
// route): columns back to rows, differences back to values, and what a step leaves out rebuilt from the step before.
// tests/support/export_unpack.py's unpack is this in Python; tests/viewer/test_export_pack.py holds the two to
// collect.py's data.
const tinyvizUnpack = (() => {
  const FRESH_BASE = 2 ** 40;
  const FIELDS = ["op", "dtype", "arg", "label", "cat", "w", "h", "src", "consts", "site"];  // (pack.py's)
  const SRC = FIELDS.indexOf("src");
  const decId = (e) => (e >= 0 ? e : FRESH_BASE - e - 1);

  function sums(ds) {
    const out = new Array(ds.length);
    let acc = 0;
    for (let i = 0; i < ds.length; i++) { acc += ds[i]; out[i] = acc; }
    return out;
  }
  const idsOf = (col) => sums(col).map(decId);
  const numsOf = (col) => ("t" in col ? sums(col.t).map((n) => n / 10) : col.r.slice());

  function fieldsRows(cols, ids) {
    const num = {w: numsOf(cols.w), h: numsOf(cols.h)};
    const src = ids === null ? cols.src.map((r) => r.map(decId)) : cols.src.map((r, j) => r.map((s) => ids[j] - s));
    return cols.op.map((_, j) => FIELDS.map((k) => (k in num ? num[k][j] : k === "src" ? src[j] : cols[k][j])));
  }

  function nodesOf(col) {
    const ids = idsOf(col.id), x = numsOf(col.x), y = numsOf(col.y), c = numsOf(col.c);
    return ids.map((id, j) => [id, x[j], y[j], c[j]]);
  }

  /** Bent edges (pack.py's Bends): route numbers counted over every graph in packing order. */
  function bends(top = -1) {
    return ([ks, rels, full = []]) => {
      const out = sums(ks).map((k, j) => {
        const r = top + 1 - rels[j];
        top = Math.max(top, r);
        return [k, r];
      });
      for (const j of full) out[j].push(1);
      return out;
    };
  }

  function restOf(rest, k, flags, ids, bent) {
    const d = {...rest};
    if (d.bent) d.bent = bent(d.bent);
    if (!("from" in d)) { d.from = k - 1; d.to = k; }
    if (!("added" in d)) {
      d.added = ids.filter((_, j) => flags[j] === 1);
      d.changed = ids.filter((_, j) => flags[j] === 2);
    }
    if (d.match && typeof d.match === "object" && !("k" in d.match)) d.match = {k, ...d.match};
    return d;
  }

  function derived(fixed, rid, sub) {
    const f = fixed(rid);
    if (!f) return null;
    return [...f.slice(0, SRC), f[SRC].map((s) => (sub.has(s) ? sub.get(s) : s)), ...f.slice(SRC + 1, -1), null];
  }

  /** One rewrite's steps from the shared columns (cur: where each column is read up to). */
  function steps(D, cols, cur, g, g0, statics, bent) {
    const fresh = new Map();
    const early = fieldsRows(g.f0x, null);
    idsOf(g.f0).forEach((id, j) => fresh.set(id, early[j]));
    const fixed = (i) => (i >= FRESH_BASE ? fresh.get(i) : statics[i]);
    const pos = new Map(g0.nodes.map((n) => [n[0], [n[1], n[2]]]));
    const deltas = [];
    for (let k = 1; k <= g.n; k++) {
      const s = cur.d++;
      const removed = cols.rid.slice(cur.r, cur.r + D.nr[s]);
      cur.r += D.nr[s];
      const at = removed.map((i) => pos.get(i));
      for (const i of removed) pos.delete(i);
      const added = [], flags = [], sub = new Map(), first = cur.a;
      for (let j = 0; j < D.na[s]; j++) {
        const a = cur.a++, ref = D.ref[a];
        let x, y;
        if (ref) {
          [x, y] = at[ref - 1];
          sub.set(removed[ref - 1], cols.aid[a]);
        } else {
          x = cols.ax[cur.xy]; y = cols.ay[cur.xy]; cur.xy++;
        }
        added.push([cols.aid[a], x, y, cols.created.has(a) ? cols.created.get(a) : k]);
        flags.push(D.fl[a]);
      }
      added.forEach((n, j) => {
        pos.set(n[0], [n[1], n[2]]);
        if (n[0] < FRESH_BASE || fresh.has(n[0])) return;
        const ref = D.ref[first + j];
        fresh.set(n[0], D.fd[cur.fd++] ? derived(fixed, removed[ref - 1], sub) : cols.fx[cur.fx++]);
      });
      const d = restOf(D.rest[s], k, flags, added.map((n) => n[0]), bent);
      for (const [id, xy] of Object.entries(d.nodes_moved)) pos.set(Number(id), xy);
      deltas.push({...d, nodes_added: added, nodes_removed: removed});
    }
    const freshObj = {};
    for (const [id, f] of fresh) freshObj[id] = f;
    return {deltas, fresh: freshObj};
  }

  /** The packed data as viz_server/export/collect.py's collect made it. */
  function unpack(packed) {
    const sIds = sums(packed.statics.id);
    const statics = {};
    fieldsRows(packed.statics, sIds).forEach((f, j) => { statics[sIds[j]] = f; });
    const bent = bends();
    const g0 = packed.g0.map((g) => {
      const out = {...g, nodes: nodesOf(g.nodes)};
      if (g.bent) out.bent = bent(g.bent);
      return out;
    });
    const D = packed.deltas;
    const cols = {rid: idsOf(D.rid), aid: idsOf(D.aid), ax: numsOf(D.ax), ay: numsOf(D.ay),
                  fx: fieldsRows(D.fx, null), created: new Map(D.cr)};
    const graphs = {};
    for (const g of packed.graphs) {  // a rewrite's steps decoded when first asked for (`at`: where they start)
      const {r, g0: i, n: _n, at, f0: _f, f0x: _x, ...extra} = g;
      let got = null;
      Object.defineProperty(graphs, r, {enumerable: true, get: () => {
        if (got) return got;
        const [d, rr, a, xy, fd, fx, top] = at;
        got = {g0: i, ...steps(D, cols, {d, r: rr, a, xy, fd, fx}, g, g0[i], statics, bends(top)), ...extra};
        return got;
      }});
    }
    const routes = [];
    if (packed.routes) {  // (else every edge is as the API drew it)
      const rx = numsOf(packed.routes.x), ry = numsOf(packed.routes.y);
      let j = 0;
      for (const n of packed.routes.n) {
        const route = [];
        for (let i = j; i < j + n; i++) route.push([rx[i], ry[i]]);
        routes.push(route);
        j += n;
      }
    }
    const {statics: _s, graphs: _g, g0: _g0, routes: _r, deltas: _d, ...rest} = packed;
    return {...rest, format: 1, statics, g0, graphs, routes};
  }

  /** A graph node's fixed fields (in FIELDS' order): a replay-made id's are its rewrite R's, any other the trace's. */
  const fixedOf = (data, R, id) => (id >= FRESH_BASE ? R.fresh : data.statics)[id];

  return {unpack, FIELDS, SRC, fixedOf};
})();
