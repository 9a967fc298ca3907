// Deep links: the view lives in the URL hash (#t=1&c=3&r=5&s=2&n=17&p=kernel&a=..&b=..); back/forward restore it.

const INT_KEYS = {t: "trace", c: "ctx", r: "rw", s: "step", n: "node"};
const STR_KEYS = {p: "panel", a: "a", b: "b"};
export const PANELS = ["step", "diff", "kernel", "source", "runs", "timeline"];

/** The view described by a hash string (missing or malformed parts are null). */
export function parseHash(hash) {
  const q = new URLSearchParams(String(hash).replace(/^#/, ""));
  const out = {trace: null, ctx: null, rw: null, step: null, node: null, panel: null, a: "", b: ""};
  for (const [k, name] of Object.entries(INT_KEYS)) {
    const v = q.get(k);
    if (v !== null && /^\d+$/.test(v)) out[name] = Number(v);
  }
  for (const [k, name] of Object.entries(STR_KEYS)) {
    const v = q.get(k);
    if (v !== null) out[name] = v;
  }
  if (!PANELS.includes(out.panel)) out.panel = null;
  return out;
}

export function formatHash(v) {
  const q = new URLSearchParams();
  for (const [k, name] of Object.entries(INT_KEYS)) {
    if (v[name] !== null && v[name] !== undefined) q.set(k, String(v[name]));
  }
  if (v.panel) q.set("p", v.panel);
  if (v.panel === "diff" && v.a) q.set("a", v.a);
  if (v.panel === "diff" && v.b) q.set("b", v.b);
  return `#${q.toString().replace(/%3A/gi, ":")}`;
}

export class Router {
  /** onNavigate(view) runs on back/forward or a hand-edited hash. */
  constructor(onNavigate) {
    this.onNavigate = onNavigate;
    this.lastPush = 0;
    this.lastKeys = "";
    const go = () => {
      if (location.hash === this.current) return;
      this.current = location.hash;
      this.onNavigate(parseHash(location.hash));
    };
    window.addEventListener("popstate", go);
    window.addEventListener("hashchange", go);
    this.current = location.hash;
  }

  initial() { return parseHash(location.hash); }

  /** Record the view. Changes of only the step/node within a second of the last entry (holding an arrow key)
   * replace that entry instead of adding one. */
  update(v) {
    const hash = formatHash(v);
    if (hash === this.current) return;
    const keys = JSON.stringify([v.trace, v.ctx, v.rw, v.panel]);
    const now = performance.now();
    const minor = keys === this.lastKeys && now - this.lastPush < 1000;
    if (minor || !this.current || this.current === "#") history.replaceState(null, "", hash);
    else history.pushState(null, "", hash);
    this.current = hash;
    this.lastKeys = keys;
    this.lastPush = now;
  }
}
