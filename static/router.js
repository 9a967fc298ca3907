// Deep links: the view lives in the URL hash (#t=1&c=3&r=5&s=2&n=17&p=kernel&a=..&b=..); back/forward restore it.
// `p` is one of the panel registry's ids (static/panels.js), and the keys after it are the parameters its panels keep.
import {PANEL_IDS, PANEL_PARAMS, panelSpec} from "./panels.js";

const INT_KEYS = {t: "trace", c: "ctx", r: "rw", s: "step", n: "node"};
// what the app fills in by default when a link leaves it out (the first context, its first rewrite, step 0, a panel)
const DEFAULTED = new Set(["c", "r", "s", "p"]);

/** Whether hash `to` is hash `from` with defaults filled in: every part of `from` kept, only defaulted parts added. */
function fillsIn(from, to) {
  const a = new URLSearchParams(String(from).replace(/^#/, "")), b = new URLSearchParams(String(to).replace(/^#/, ""));
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  for (const k of b.keys()) if (!a.has(k) && !DEFAULTED.has(k)) return false;
  return true;
}

/** The view described by a hash string (missing or malformed parts are null; a panel's parameters ""). */
export function parseHash(hash) {
  const q = new URLSearchParams(String(hash).replace(/^#/, ""));
  const out = {trace: null, ctx: null, rw: null, step: null, node: null, panel: null};
  for (const [k, name] of Object.entries(INT_KEYS)) {
    const v = q.get(k);
    if (v !== null && /^\d+$/.test(v)) out[name] = Number(v);
  }
  const p = q.get("p");
  if (PANEL_IDS.includes(p)) out.panel = p;
  for (const k of PANEL_PARAMS) out[k] = q.get(k) ?? "";
  return out;
}

export function formatHash(v) {
  const q = new URLSearchParams();
  for (const [k, name] of Object.entries(INT_KEYS)) {
    if (v[name] !== null && v[name] !== undefined) q.set(k, String(v[name]));
  }
  if (v.panel) q.set("p", v.panel);
  for (const k of panelSpec(v.panel)?.params || []) if (v[k]) q.set(k, v[k]);
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
   * replace that entry instead of adding one, and so does filling in the defaults of a link that left them out: an
   * entry reached by back/forward (or typed) that names only a context becomes that context's full view in place;
   * adding an entry there would drop every forward entry. */
  update(v) {
    const hash = formatHash(v);
    if (hash === this.current) return;
    const keys = JSON.stringify([v.trace, v.ctx, v.rw, v.panel]);
    const now = performance.now();
    const minor = keys === this.lastKeys && now - this.lastPush < 1000;
    if (minor || fillsIn(this.current || "", hash)) history.replaceState(null, "", hash);
    else history.pushState(null, "", hash);
    this.current = hash;
    this.lastKeys = keys;
    this.lastPush = now;
  }
}
