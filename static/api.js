// The JSON API (docs/architecture.md, "JSON API"). Immutable answers are cached; errors become ApiError.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// answers the boot request brought along, each taken by the first request for its path (docs: "JSON API", /api/boot)
const primed = new Map();

async function request(path, opts = {}) {
  if (primed.has(path) && !opts.method) {
    const body = primed.get(path);
    primed.delete(path);
    return body;
  }
  const offline = globalThis.tinyvizOffline;  // a single-file export answers from its data (viz_server/export/shim.js)
  if (offline) {
    const [status, body] = await offline(path, opts);
    if (status !== 200) throw new ApiError(status, body.error);
    return body;
  }
  return answer(fetch(path, {headers: {Accept: "application/json"}, ...opts}));
}

/** The JSON body of a pending fetch's response; errors (none, not JSON, not ok) become ApiError. */
async function answer(pending) {
  let res;
  try {
    res = await pending;
  } catch (e) {
    throw new ApiError(0, `server unreachable (${e.message})`);
  }
  let body = null;
  try {
    body = await res.json();
  } catch {
    throw new ApiError(res.status, `${res.status} ${res.statusText}: not JSON`);
  }
  if (!res.ok) throw new ApiError(res.status, (body && body.error) || `${res.status} ${res.statusText}`);
  return body;
}

const enc = encodeURIComponent;

// A small LRU for answers that never change (nodes, patterns, graphs and deltas of finished rewrites).
class Lru {
  constructor(size) { this.size = size; this.map = new Map(); }
  get(k) {
    const v = this.map.get(k);
    if (v !== undefined) { this.map.delete(k); this.map.set(k, v); }
    return v;
  }
  set(k, v) {
    this.map.set(k, v);
    if (this.map.size > this.size) this.map.delete(this.map.keys().next().value);
  }
  clear() { this.map.clear(); }
}

const cache = new Lru(400);

/** Fetch once per key; a failed fetch is not cached. */
function cached(key, path) {
  const hit = cache.get(key);
  if (hit) return hit;
  const p = request(path);
  cache.set(key, p);
  p.catch(() => { if (cache.get(key) === p) cache.map.delete(key); });
  return p;
}

const inflight = new Map();

/** One request at a time per path: a second ask while the first is in flight gets the same answer; nothing is kept
 * once it arrives (for answers that may change, such as a live trace's contexts). */
function shared(path) {
  const busy = inflight.get(path);
  if (busy) return busy;
  const p = request(path).finally(() => inflight.delete(path));
  inflight.set(path, p);
  return p;
}

/** The first view in one round trip: the trace list and, for the view the URL names (defaults resolved by the server
 * as app.js resolves them), its trace's contexts, its rewrite's steps and graph. The later requests of the usual flow
 * for those paths are answered from it. A single-file export has no boot answer: null, and the page asks as usual.
 * static/boot.js asks as soon as it arrives, while the modules still load; app.js's ask for the same view then
 * gets that request's answer (asked once per view: a second ask for it is the first one's promise). */
function boot(v) {
  if (globalThis.tinyvizOffline) return Promise.resolve(null);
  const q = [["t", v.trace], ["ctx", v.ctx], ["rw", v.rw], ["step", v.step]].filter(([, x]) => x !== null)
    .map(([k, x]) => `${k}=${enc(x)}`).concat(["compact=1", "pack=1"]).join("&");
  if (!booting.has(q)) booting.set(q, early(`/api/boot?${q}`).then(prime));
  return booting.get(q);
}

/** The answer to boot.js's request where it asked for path (once), else a request. */
function early(path) {
  const b = globalThis.tinyvizBoot;
  if (!b || b.path !== path) return request(path);
  globalThis.tinyvizBoot = null;
  return answer(b.response);
}

const booting = new Map();  // query -> the boot answer's promise

/** The contexts of a boot answer asked with pack=1 (viz_server/api.py _packed_contexts) as /contexts answers them:
 * each rewrite row made an entry again, its interned values looked up (a list: sent as they are). A plain loop: with
 * Object.fromEntries, parse and unpack took 7 ms where parsing the unpacked answer took 1.5 (1.5 so). */
function unpackContexts(p) {
  if (Array.isArray(p)) return p;
  const {keys, values} = p, n = keys.length, at = keys.map((k) => p.interned.includes(k));
  const entry = (row) => {
    const e = {};
    for (let i = 0; i < n; i++) e[keys[i]] = at[i] ? values[row[i]] : row[i];
    return e;
  };
  return p.contexts.map((c) => ({...c, rewrites: c.rewrites.map(entry)}));
}

function prime(b) {
  if (b.contexts) b.contexts = unpackContexts(b.contexts);
  if (b.trace !== null && b.contexts) primed.set(`/api/traces/${enc(b.trace)}/contexts`, b.contexts);
  if (b.rewrite) primed.set(`/api/traces/${enc(b.trace)}/rewrites/${enc(b.rw)}`, b.rewrite);
  if (b.graph) primed.set(graphPath(b.trace, b.rw, b.step), b.graph);
  if (b.summary) primed.set(`/api/traces/${enc(b.trace)}/summary`, b.summary);
  return b;
}

export const api = {
  boot,
  // after the first view: a boot answer nobody asked for would be stale later (a live trace grows)
  unprime() { primed.clear(); booting.clear(); },
  traces: () => request("/api/traces"),
  // the label metrics the server sizes node boxes by (also in the boot answer)
  metrics: () => request("/api/metrics"),
  upload(file) {
    const form = new FormData();
    form.append("file", file, file.name);
    return request("/api/traces", {method: "POST", body: form});
  },
  // reuse: take the answer of a request already in flight (a live refresh must not: it wants what came since)
  contexts: (t, {reuse = false} = {}) => (reuse ? shared : request)(`/api/traces/${enc(t)}/contexts`),
  rewrite: (t, r) => request(`/api/traces/${enc(t)}/rewrites/${enc(r)}`),
  // `frozen`: the rewrite ended, so its graphs can be cached; `anchor`: the anchor the page's layout chain starts from
  // (0: step 0's; a step laid out fresh, or a far jump's; docs/architecture.md, "Far jumps"): a graph answer says the
  // one it is on; `from`: the step on screen, whose layout a far jump's is derived from where it fits
  graph: (t, r, k, frozen, anchor = 0, from = null) => frozen
    ? cached(`g:${t}:${r}:${k}:${anchor}`, graphPath(t, r, k, anchor, from)) : request(graphPath(t, r, k, anchor, from)),
  // a far jump from step `from` on screen (on `anchor`'s chain): the compact=2 delta from it (`jump`: true, with the
  // anchor it is on) where the server lays step k out from the layout on screen, else k's graph; not cached (the
  // delta fits the page at `from` only)
  jump: (t, r, k, anchor, from) => request(`${graphPath(t, r, k, anchor, from)}&delta=2`),
  // `held`: a step back from j whose removed nodes' in-edges the page holds (graphghosts.js, StepMemo), null if none
  delta: (t, r, j, k, frozen, anchor = 0, held = null) => frozen
    ? cached(`d:${t}:${r}:${j}:${k}:${anchor}:${held}`, deltaPath(t, r, j, k, anchor, held))
    : request(deltaPath(t, r, j, k, anchor, held)),
  // step k laid out from scratch (the re-layout key: an anchor), not cached: it is asked for once per press
  graphFresh: (t, r, k) => request(`${graphPath(t, r, k)}&fresh=1`),
  pattern: (t, p) => cached(`p:${t}:${p}`, `/api/traces/${enc(t)}/patterns/${enc(p)}`),
  node: (t, n) => cached(`n:${t}:${n}`, `/api/traces/${enc(t)}/nodes/${enc(n)}`),
  // where a node of rewrite r's input graph was made: {rewrite, ctx, name, step, rule} or {rewrite: null}
  origin: (t, n, r) => request(`/api/traces/${enc(t)}/nodes/${enc(n)}/origin?before=${enc(r)}`),
  // draw: also the union of both graphs laid out (graph.drawn)
  diff: (a, b, {draw = false} = {}) => request(`/api/diff?a=${enc(a)}&b=${enc(b)}${draw ? "&draw=1" : ""}`),
  // the `compare` report of two traces (docs/architecture.md, "Trace tools"): first_divergence, rewrites, kernels
  compare: (a, b) => request(`/api/compare?a=${enc(a)}&b=${enc(b)}`),
  // the single-file HTML export of a trace, as a download (redact: a list of paths, source, argv, host)
  // job: a name for its progress, which exportProgress(job) answers while it runs ({steps, total})
  exportUrl: (t, redact = [], job = "") => `/api/traces/${enc(t)}/export?redact=${enc(redact.join(","))}`
    + (job ? `&job=${enc(job)}` : ""),
  exportProgress: (job) => request(`/api/exports/${enc(job)}`),
  kernels: (t) => request(`/api/traces/${enc(t)}/kernels`),
  kernel: (t, c) => request(`/api/traces/${enc(t)}/contexts/${enc(c)}/kernel`),
  runs: (t) => request(`/api/traces/${enc(t)}/runs`),
  // one row per kernel: runs, total, first (cold), median and min of the warm runs (viz_server/summary.py)
  kernelRuns: (t) => request(`/api/traces/${enc(t)}/runs/kernels`),
  // where the program's time went: phases, cold and warm runs, the top kernels (the landing view)
  summary: (t) => request(`/api/traces/${enc(t)}/summary`),
  // contexts, passes, LLVM compiles and kernel runs on one time axis (seconds since the earliest event)
  timeline: (t) => request(`/api/traces/${enc(t)}/timeline`),
  forget() { cache.clear(); },
};

// compact graphs: a straight edge (center to center) comes without points, as in compact deltas
const graphPath = (t, r, k, anchor = 0, from = null) =>
  `/api/traces/${enc(t)}/rewrites/${enc(r)}/graph?step=${enc(k)}&compact=1`
  + (anchor ? `&anchor=${enc(anchor)}` : "") + (from !== null ? `&from=${enc(from)}` : "");
// compact deltas (docs/architecture.md, "Deltas"): a rebuilt node refers to the one it replaces, see graph.js; at
// level 2 most rebuilt nodes come as runs of ids only, new nodes and straight edges as columns (graph.js's _unpack; an
// export's shim answers level 1, which graph.js reads too)
const deltaPath = (t, r, j, k, anchor = 0, held = null) =>
  `/api/traces/${enc(t)}/rewrites/${enc(r)}/delta?from=${enc(j)}&to=${enc(k)}&compact=2`
  + (anchor ? `&anchor=${enc(anchor)}` : "") + (held !== null ? `&held=${enc(held)}` : "");
