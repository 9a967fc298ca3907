// The page controller: owns the view state (trace, context, rewrite, step, node, panel), wires the panels, the
// keyboard, deep links and live updates.
import {api} from "./api.js";
import {$, $$, debounce, fmtNs, h, put} from "./dom.js";
import {afterPaint, StepGraphView} from "./graph.js";
import {labelMetrics, setLabelMetrics} from "./graphgeom.js";
import {startLive} from "./live.js";
import {NodeCard} from "./nodecard.js";
import {createPanel, PANEL_PARAMS, PANELS, panelSpec} from "./panels.js";
import {refitOnResize, wireSplitters} from "./resize.js";
import {Router} from "./router.js";
import {Sidebar} from "./sidebar.js";

const state = {trace: null, ctx: null, rw: null, step: 0, node: null, panel: "step",
  ...Object.fromEntries(PANEL_PARAMS.map((k) => [k, ""]))};
const data = {traces: [], contexts: [], ctxById: new Map(), rw: null, rwTrace: null};
const exported = document.documentElement.dataset.export === "yes";  // a single-file export: no server behind it

// ---------------------------------------------------------------- pieces

// the graph view fetches and draws the step showStep names (static/graph.js); this page reacts to what it shows
const graph = new StepGraphView($("#graph"), {wrap: $("#graph-wrap"), empty: $("#graph-empty"), legend: $("#legend"),
  onSelect: (id) => selectNode(id), onShown: () => onGraphShown(), onCleared: () => { nodeCard.hide(); setSlider(); }});
const sidebar = new Sidebar({
  onContext: (c) => selectContext(c, {push: true}),
  onRewrite: (r) => selectRewrite(r, {push: true}),
});
// what the panels' hooks (static/panels.js) may read and call
const app = {
  state, data,
  ctx: () => (state.ctx === null ? null : data.ctxById.get(state.ctx) || null),
  rwCurrent: () => rwCurrent(),
  node: (id) => graph.node(id) ?? graph.ghostNode(id),
  afterPaint: (fn) => afterPaint(fn),
  selectContext: (c, opts) => selectContext(c, opts),
  selectNode: (id, opts) => selectNode(id, opts),
  setStep: (k) => setStep(k),
  openPanel: (p) => openPanel(p),
  setParams: (params) => { Object.assign(state, params); syncUrl(true); },
};
const panels = buildPanels();
const nodeCard = new NodeCard($("#node-card"), {
  onNode: (id) => selectNode(id, {center: true}),
  onStep: (k) => setStep(k),
  onGoto: (ctx, rw, step, node) => selectContext(ctx, {rw, step, node, push: true}),
  onRelatives: (m) => setRelatives(m),
  onClose: () => selectNode(null),
  full: (id) => api.node(state.trace, id),
});
const router = new Router((v) => applyView(v));

// ---------------------------------------------------------------- traces

function traceLabel(t) {
  return `#${t.id} ${t.name}`;
}

let tracesSig = "";

function renderTraces() {
  const sel = $("#trace-select");
  // polling calls this every second: rebuilding an open <select> would close it, so only rebuild on change
  const sig = JSON.stringify([state.trace, data.traces.map((t) => [t.id, t.name, t.status, t.counts, t.exit?.text])]);
  if (sig === tracesSig) return;
  tracesSig = sig;
  const opts = data.traces.map((t) => h("option", {value: t.id}, `${traceLabel(t)} (${t.status})`));
  if (!opts.length) opts.push(h("option", {value: ""}, "no traces yet — open a file"));
  put(sel, ...opts);
  sel.value = state.trace === null ? "" : String(state.trace);
  panelHook("onTraces", {all: true});
  renderStatus();
}

function currentTrace() {
  return data.traces.find((t) => t.id === state.trace) || null;
}

let statusOf = null;  // the trace whose status the sidebar's rows were last drawn with

function renderStatus() {
  const t = currentTrace();
  const badge = $("#trace-status");
  const banner = $("#banner");
  if (!t) { badge.hidden = true; banner.hidden = true; put($("#trace-counts")); return; }
  badge.hidden = false;
  if (sidebar.live !== (t.status === "live")) {
    // the trace on screen just ended: the ends of its last rewrites come with the contexts that the status change
    // asks for again (onTraceList, onLiveEvent), and the rows are drawn then; drawn now, from the contexts before,
    // a rewrite that ended in the last records showed "cut off" until they came
    const ended = sidebar.live && statusOf === t.id;
    sidebar.live = t.status === "live";
    if (!ended) sidebar.renderRewrites();
  }
  statusOf = t.id;
  badge.className = `badge status-${t.status}`;
  badge.textContent = t.status === "live" ? "● live" : t.status;
  badge.title = t.status === "live" ? "the writing process is still running: new records appear as they arrive"
    : t.status === "ended" ? "the writing process finished" : "the trace file is damaged";
  const c = t.counts || {};
  put($("#trace-counts"), `${c.contexts ?? 0} contexts · ${c.rewrites ?? 0} rewrites · ${c.matches ?? 0} matches · `
    + `${c.kernels ?? 0} kernels · ${c.runs ?? 0} runs`);
  const d = t.damage || {};
  const damaged = t.status === "damaged" && h("div", null, h("b", null, "Trace damaged"),
    ` at byte ${d.offset ?? "?"}: ${d.reason ?? "unknown reason"}. `, "Everything recorded before that point is shown.");
  const off = offNote(t.meta?.off);
  banner.hidden = !damaged && !t.exit && !off;
  banner.className = `banner${damaged ? " damaged" : ""}${t.exit ? " exited" : ""}${off ? " switched" : ""}`;
  put(banner, damaged, t.exit && exitBanner(t.exit), off);
  if (t.exit) badge.title = `the program ${t.exit.text}`;
  document.title = `tinyviz — ${t.name}`;
}

const EXPORT_POLL_MS = 500;  // how often a running export's progress is asked for (GET /api/exports/<job>)
const EXIT_HEADINGS = {exception: "Program error", interrupt: "Program interrupted", exit: "Program exited",
  thread: "Error in a thread"};

/** How the program ended where it did not end cleanly (a trace entry's `exit`: vztrace/format.py exit_summary): its
 * line and, folded, its traceback; every text goes in as a text node, so markup in a message stays text. */
function exitBanner(ex) {
  const lines = (ex.traceback || []).flatMap((f) => [`  File "${f.file}", line ${f.line ?? "?"}, in ${f.function}`,
    ...(f.text ? [`    ${f.text}`] : [])]);
  if (ex.omitted) lines.unshift(`(${ex.omitted} earlier frames left out)`);
  return h("div", {class: "exit", dataset: {kind: ex.kind}},
    h("b", null, EXIT_HEADINGS[ex.kind] ?? "Program ended"), ` The program ${ex.text}.`,
    lines.length ? h("details", null, h("summary", null, "traceback"), h("pre", null, lines.join("\n"))) : null);
}

/** What the run turned off (the trace meta's `off`: compiler.rewrite.Switches.meta, from SKIP_RULES, SKIP_MATCHES and
 * SKIP_OPTS), so values and steps that differ from a plain run are not taken for the compiler's; null where nothing
 * was off. A stranger's file: only lists of strings and a string are read, every text goes in as a text node. */
function offNote(off) {
  if (!off || typeof off !== "object") return null;
  const names = (v) => (Array.isArray(v) ? v.filter((x) => typeof x === "string") : []);
  const rules = names(off.rules);
  const opts = names(off.opts);
  const matches = typeof off.matches === "string" ? off.matches : "";
  const parts = [
    rules.length && `rules ${rules.join(", ")}`,
    matches && `optional transformations ${matches}`,
    opts.length && (opts.includes("*") ? "every kernel opt" : `kernel opts ${opts.join(", ")}`),
  ].filter(Boolean);
  if (!parts.length) return null;
  return h("div", {class: "off"}, h("b", null, "Switches on"),
    ` This run was made with ${parts.join("; ")} turned off: its steps and values are not a plain run's.`);
}

function onTraceList(list) {
  const before = new Map(data.traces.map((t) => [t.id, t]));
  data.traces = list;
  for (const t of list) {
    const was = before.get(t.id);
    if (was && was.status === "live" && t.status !== "live" && t.id === state.trace) {
      const msg = t.status !== "ended" ? "The trace is damaged." : t.exit ? `The program ${t.exit.text}.`
        : "The writing process ended; the trace is complete.";
      toast(msg, t.exit ? "error" : t.status);
    }
    // the shown trace grew or ended where no event said so (records that came between the first view and
    // socket.io's connecting, whose fresh trace list this is): its contexts are asked again. Its status counts too: a
    // rewrite's end adds no record anyone counts, and a trace that ended meanwhile sends no event after
    const sig = (x) => JSON.stringify([x.status, x.counts]);
    if (booted && was && t.id === state.trace && sig(was) !== sig(t)) refreshLive();
  }
  renderTraces();
  if (booted && state.trace === null && list.length) selectTrace(pickDefaultTrace(list), {push: false});
}

const pickDefaultTrace = (list) => list[list.length - 1].id;

// ---------------------------------------------------------------- navigation

let navGen = 0;
let booted = false;  // the first selection comes from the URL; until then the trace list only fills the picker

/** Select a trace and, optionally, a full view inside it (from a deep link). landFirst: the page's first view is the
 * landing view (the summary), painted before the graph is drawn. */
async function selectTrace(t, {ctx = null, rw = null, step = null, node = null, push = true, landFirst = false} = {}) {
  if (push) settleUrl({write: true});
  const gen = ++navGen;
  state.trace = t;
  state.ctx = state.rw = state.node = null;
  state.step = 0;
  renderTraces();
  let contexts;
  try {
    contexts = await api.contexts(t, {reuse: true});
  } catch (e) {
    if (gen === navGen) { toast(`Trace ${t}: ${e.message}`, "error"); graph.clear(e.message); }
    return;
  }
  if (gen !== navGen) return;
  setContexts(contexts);
  liveSig = traceSig();
  if (ctx === null || !data.ctxById.has(ctx)) ctx = defaultContext();
  if (ctx === null) {
    sidebar.setSelection(null, null);
    graph.clear("This trace has no rewrites yet.");
    refreshPanel();
    syncUrl(push);
    return;
  }
  if (landFirst) {
    // the landing view, the summary and the sidebar with its selection, is painted before the graph is set up and
    // drawn, which its frame waited for (issue 30: ~30-40 ms of the main thread; at its place the graph's loading)
    const pick = pickRewrite(data.ctxById.get(ctx), rw);
    sidebar.setSelection(ctx, pick);
    if (pick !== null) graph.expect(t, pick, Math.max(0, step ?? 0));
    panelHook("onContexts");
    // (a task after the frame's first ones: what waits for that frame to be painted, afterPaint's callbacks queued
    // before this one, a load's paint-time mark, runs before the graph's set-up)
    await new Promise((done) => afterPaint(() => setTimeout(done, 0)));
    if (gen !== navGen) return;
  }
  const shown = selectContext(ctx, {rw, step, node, push, gen});
  // the panels of the whole trace (the summary, the landing view) need no graph: they show now, beside its loading,
  // not after it is drawn (issue 30: the first view's summary waited for the first graph)
  if (!landFirst) panelHook("onContexts");
  await shown;
  if (gen === navGen) panelHook("onTrace");
}

function setContexts(list) {
  data.contexts = list;
  data.ctxById = new Map(list.map((c) => [c.id, c]));
  sidebar.setContexts(list);
}

function defaultContext() {
  const withRw = data.contexts.find((c) => c.rewrites.length);
  return withRw ? withRw.id : null;
}

/** The rewrite of context entry ctx to show: rw where it is one of ctx's, else ctx's most interesting one, its first
 * that changed something (null: ctx has none). */
function pickRewrite(ctx, rw) {
  if (rw !== null && ctx.rewrites.some((r) => r.id === rw)) return rw;
  const pick = ctx.rewrites.find((r) => r.changed) || ctx.rewrites[0];
  return pick ? pick.id : null;
}

async function selectContext(c, {rw = null, step = null, node = null, push = false, gen = null} = {}) {
  if (push) { settleUrl({write: true}); leaveLanding(); }
  gen = gen ?? ++navGen;
  const ctx = data.ctxById.get(c);
  if (!ctx) return;
  const changed = state.ctx !== c;
  state.ctx = c;
  rw = pickRewrite(ctx, rw);
  sidebar.setSelection(c, rw);
  panelHook("onSelection", {all: true});
  if (changed) panelHook("onContext");
  if (rw === null) {
    state.rw = null;
    state.step = 0;
    graph.clear(ctx.kind === "kernel" ? "This kernel has no rewrites; see the Kernel and Source panels."
      : "No rewrites in this context.");
    panelHook("onStep");
    syncUrl(push);
    return;
  }
  await selectRewrite(rw, {step, node, push, gen});
}

async function selectRewrite(r, {step = null, node = null, push = false, gen = null} = {}) {
  if (push) { settleUrl({write: true}); leaveLanding(); }
  gen = gen ?? ++navGen;
  state.rw = r;
  state.node = null;
  sidebar.setSelection(state.ctx, r);
  panelHook("onSelection", {all: true});
  let detail;
  const moves = stepMoves;
  // a step's graph never changes (api.js caches it): ask for it now, beside the rewrite's steps, not after them
  const listed = data.ctxById.get(state.ctx)?.rewrites.some((x) => x.id === r);
  if (listed) graph.preload(state.trace, r, Math.max(0, step ?? 0));
  graph.expect(state.trace, r, Math.max(0, step ?? 0));  // the loading state at once, not after the steps came
  try {
    detail = await api.rewrite(state.trace, r);
  } catch (e) {
    if (gen === navGen) graph.clear(`Rewrite ${r}: ${e.message}`);
    return;
  }
  if (gen !== navGen) return;
  // the same rewrite selected again while it was loading (a click on its context, then on it): keep the steps the
  // user took in between
  const keep = step === null && moves !== stepMoves && data.rw && data.rw.id === r;
  data.rw = detail;
  data.rwTrace = state.trace;
  state.step = clampStep(keep ? state.step : step ?? 0);
  setSlider();
  await showStep({fit: true});
  if (gen !== navGen) return;
  if (node !== null) selectNode(node, {center: true, push: false});
  afterPaint(() => panelHook("onStep"));
  panelHook("onRewrite");
  syncUrl(push);
}

const clampStep = (k) => Math.max(0, Math.min(k, data.rw ? data.rw.steps.length : 0));

let stepMoves = 0;  // setStep calls so far (selectRewrite keeps a step the user chose while it was loading)

/** Go to step k of the current rewrite (the graph updates by delta). */
async function setStep(k, {push = false} = {}) {
  if (!data.rw) return;
  leaveLanding();
  stepMoves++;
  k = clampStep(k);
  if (k === state.step && graph.shown && graph.shown.step === k) return;
  state.step = k;
  setSlider();
  syncUrl(push);
  await showStep({});
  // after the frame that shows the new step: the panel's DOM work must not delay it
  if (state.step === k) afterPaint(() => { if (state.step === k) panelHook("onStep"); });
}

function setSlider() {
  const n = data.rw ? data.rw.steps.length : 0;
  const slider = $("#step-slider");
  slider.max = String(n);
  slider.value = String(state.step);
  slider.disabled = !n;
  const st = data.rw && state.step > 0 ? data.rw.steps[state.step - 1] : null;
  put($("#step-label"), data.rw ? `step ${state.step}/${n}` : "",
    st ? h("span", {class: "muted"}, ` · ${fmtNs(st.dt)}`) : null);
}

// ---------------------------------------------------------------- graph

/** Show the state's step in the graph view (it fetches the graph or delta and draws it); resolves once shown. */
function showStep({fit = false}) {
  const steps = data.rw ? data.rw.steps.length : 0;
  return graph.show({trace: state.trace, rw: state.rw, step: state.step, steps, fit});
}

/** The graph shows the step asked for: select the view's node in it (or drop it), and count the search's hits. */
function onGraphShown() {
  if (state.node !== null && graph.node(state.node)) graph.select(state.node);
  else if (state.node !== null) { state.node = null; nodeCard.hide(); }
  if (state.node !== null) showNodeCard(state.node);
  const q = $("#node-search").value;
  if (q) put($("#search-count"), hitText(graph.search(q)));
}

// ---------------------------------------------------------------- nodes

function selectNode(id, {center = false, push = false} = {}) {
  if (id !== null) leaveLanding();
  if (id !== null && !graph.node(id)) {
    // a node the last step removed (the "before" side of the step panel): show it at the step before
    if (graph.ghostNode(id) && state.step > 0) {
      setStep(state.step - 1, {push: true}).then(() => { if (graph.node(id)) selectNode(id, {center: true}); });
      return;
    }
    toast(`Node #${id} is not in the graph at this step.`, "info");
    return;
  }
  state.node = id;
  graph.select(id, {center});
  if (id === null) nodeCard.hide(); else showNodeCard(id);
  syncUrl(push);
}

function showNodeCard(id) {
  const d = graph.node(id);
  if (!d) return;
  const srcs = (d.src || []).map((s) => graph.node(s) || {id: s, op: "?"});
  const users = (graph.users.get(id) || []).map((u) => graph.node(u));
  nodeCard.show(d, srcs, users, createdStep(id), graph.relMode);
}

/** The step of the current rewrite that created node `id` (0: it was in the input graph) and the rule that fired;
 * for a node of the input graph, the earlier pass and step that made it (origin). */
async function createdStep(id) {
  const d = graph.node(id);
  // (null: unknown, a step the server has not computed may have brought it; after a far jump, most nodes)
  if (!d || d.created === undefined || d.created === null) return null;
  const {trace, rw} = state;
  if (d.created === 0) {
    let origin = null;
    try { origin = await api.origin(trace, id, rw); } catch { origin = null; }
    return {step: 0, origin: origin && origin.rewrite !== null ? origin : null};
  }
  const st = rwCurrent() ? data.rw.steps[d.created - 1] : null;
  if (!st) return {step: d.created};
  let rule = null;
  try { rule = (await api.pattern(trace, st.pattern)).name; } catch { rule = null; }
  return {step: d.created, rule};
}

function setRelatives(mode) {
  $("#relatives").value = mode;
  graph.setRelatives(mode);
  if (state.node !== null) showNodeCard(state.node);
}

// ---------------------------------------------------------------- panels

/** The panels' tabs, containers and help line, from the registry; id -> the panel object (a lazy entry's once its
 * module came: loadPanel). */
function buildPanels() {
  const tabs = $("#panel-tabs");
  const made = new Map();
  for (const spec of PANELS) {
    tabs.appendChild(h("button", {type: "button", role: "tab", "data-panel": spec.id}, spec.label));
    const el = h("div", {id: `panel-${spec.id}`, class: "panel", "data-panel": spec.id, hidden: true});
    $("#panels").appendChild(el);
    if (!spec.lazy) made.set(spec.id, createPanel(spec, el, app));
  }
  put($("#panel-keys"), h("td", null, ...PANELS.flatMap((p, i) => [i ? " " : null, h("kbd", null, p.key)])),
    h("td", null, `${PANELS.map((p) => p.label).join(", ")} panel`));
  return made;
}

/** Run hook `name` of the open panel (every panel's, with all) where it has one (a lazy panel: once it is made). */
function panelHook(name, {all = false} = {}) {
  for (const spec of PANELS) {
    if ((all || spec.id === state.panel) && spec[name] && panels.has(spec.id)) spec[name](panels.get(spec.id), app);
  }
}

const loadingPanels = new Map();  // id -> the promise of a lazy panel's object (null: its module did not load)

/** A lazy panel's object (static/panels.js: its module loaded once). Made after the hooks every panel gets had run,
 * it gets them now (the trace list, the selection), and its show where it is open. A module that failed to load is
 * asked for again by the next call (an open of the panel). */
function loadPanel(spec) {
  if (panels.has(spec.id)) return Promise.resolve(panels.get(spec.id));
  if (!loadingPanels.has(spec.id)) {
    loadingPanels.set(spec.id, spec.lazy().then((module) => {
      const p = createPanel(spec, $(`#panel-${spec.id}`), app, module);
      panels.set(spec.id, p);
      if (data.traces.length) spec.onTraces?.(p, app);
      if (state.ctx !== null) spec.onSelection?.(p, app);
      if (state.panel === spec.id) spec.show(p, app);
      return p;
    }).catch((e) => {
      loadingPanels.delete(spec.id);
      toast(`The ${spec.label} panel did not load: ${e.message}`, "error");
      return null;
    }));
  }
  return loadingPanels.get(spec.id);
}

const loadPanels = () => Promise.all(PANELS.filter((spec) => spec.lazy).map(loadPanel));

function openPanel(p, {push = true} = {}) {
  const spec = panelSpec(p);
  if (!spec) return;
  state.panel = p;
  landing = landing && p === "summary";
  for (const b of $$("#panel-tabs button")) b.classList.toggle("active", b.dataset.panel === p);
  for (const el of $$("#panels .panel")) el.hidden = el.dataset.panel !== p;
  $("#layout").dataset.panel = p;
  // tables that need room widen the panel (style.css), unless the user resized it for this panel (static/resize.js)
  $("#layout").dataset.width = spec.width || "";
  splitters.panel.restore();
  if (spec.lazy) loadPanel(spec);  // (a lazy panel not made yet shows once its module came: loadPanel)
  refreshPanel();
  syncUrl(push);
}

const refreshPanel = () => panelHook("show");

// the summary panel is the landing view (static/summary.js) where the link names no panel, context or rewrite; it
// gives way to the step panel once the user picks a context, rewrite, step or node (opened any other way, it stays)
let landing = false;

function leaveLanding() {
  if (landing && state.panel === "summary") openPanel("step", {push: false});
  landing = false;
}

/** data.rw is the selected rewrite's (not still the one before while the next one loads). */
function rwCurrent() {
  return data.rw !== null && data.rw.id === state.rw && data.rwTrace === state.trace;
}

// ---------------------------------------------------------------- URL

let urlTimer = 0;

/** Write the view into the URL. A history entry costs a same-document navigation (ms each), so step and node
 * changes are written once the user pauses; context/rewrite/panel changes (push) are written at once. */
function syncUrl(push = false) {
  if (state.trace === null) return;
  clearTimeout(urlTimer);
  urlTimer = 0;
  if (push) { router.lastPush = 0; router.update(state); return; }
  urlTimer = setTimeout(() => { urlTimer = 0; router.update(state); }, 250);
}

/** Before a navigation changes the view: a write still waiting for the pause describes the view being left, so it is
 * written now (a click), or dropped where the URL already moved on (back/forward). Left to fire later, it would write
 * the new context's rewrite under the old step while that rewrite loads: a history entry of a view never shown. */
function settleUrl({write}) {
  if (!urlTimer) return;
  clearTimeout(urlTimer);
  urlTimer = 0;
  if (write) router.update(state);
}

/** Restore a view from the URL (back/forward, a pasted link). */
async function applyView(v) {
  settleUrl({write: false});
  if (v.panel && v.panel !== state.panel) openPanel(v.panel, {push: false});
  if (PANEL_PARAMS.some((k) => v[k])) {
    for (const k of PANEL_PARAMS) state[k] = v[k];
    if (panelSpec(state.panel).params) refreshPanel();
  }
  if (v.trace === null) return;
  const inside = {rw: v.rw, step: v.step, node: v.node};
  if (v.trace !== state.trace) { await selectTrace(v.trace, {ctx: v.ctx, ...inside, push: false}); return; }
  if (v.ctx !== null && v.ctx !== state.ctx) { await selectContext(v.ctx, inside); return; }
  if (v.rw !== null && v.rw !== state.rw) { await selectRewrite(v.rw, {step: v.step, node: v.node}); return; }
  if (v.step !== null && v.step !== state.step) await setStep(v.step);
  if (v.node !== state.node) selectNode(v.node, {center: v.node !== null});
}

// ---------------------------------------------------------------- live updates

// the newest live refresh: answers come back in any order (a loaded server or machine), and an older refresh's
// answer arriving after a newer one's would put back fewer contexts than the trace has, with no event left to fix it
let liveSeq = 0;
// what the shown trace's entry said (status, counts) when its panels last showed it: a refresh that brings nothing new
// (a poll's first look at a trace, an ended one) leaves the panels as they are, their hovered and lit lines included
let liveSig = "";
const traceSig = () => JSON.stringify([currentTrace()?.status, currentTrace()?.counts]);

async function refreshContexts() {
  const t = state.trace;
  if (t === null) return;
  const seq = ++liveSeq;
  const current = () => t === state.trace && seq === liveSeq;
  let contexts;
  try { contexts = await api.contexts(t); } catch { return; }
  if (!current()) return;
  setContexts(contexts);
  if (state.ctx === null) {
    const c = defaultContext();
    if (c !== null) await selectContext(c, {});
    return;
  }
  const ctx = data.ctxById.get(state.ctx);
  const rwInfo = ctx && ctx.rewrites.find((r) => r.id === state.rw);
  if (state.rw === null && ctx && ctx.rewrites.length) { await selectContext(state.ctx, {}); return; }
  if (rwInfo && data.rw && rwInfo.matches !== (data.rw.steps_total ?? data.rw.steps.length)) {
    const r = state.rw;
    let rw;
    try { rw = await api.rewrite(t, r); } catch { return; }
    if (!current()) return;
    if (state.rw === r) {  // (else another rewrite was picked meanwhile: its steps come with its own answer)
      data.rw = rw;
      data.rwTrace = t;
      setSlider();
      panelHook("onStep");
    }
  }
  if (traceSig() === liveSig) return;
  liveSig = traceSig();
  panelHook("onLive");
}

const refreshLive = debounce(refreshContexts, 200);

function onLiveEvent(ev) {
  if (ev.type === "trace") {
    const i = data.traces.findIndex((t) => t.id === ev.entry.id);
    const list = [...data.traces];
    if (i >= 0) list[i] = ev.entry; else list.push(ev.entry);
    onTraceList(list);
    if (ev.entry.id === state.trace) refreshLive();
    return;
  }
  if (ev.trace === state.trace) refreshLive();
  else if (ev.type === "counts" || ev.type === "context") {
    // another trace grew; the picker's counts come with the next trace list
  }
}

// ---------------------------------------------------------------- upload

async function uploadFile(file) {
  if (!file) return;
  toast(`Uploading ${file.name}…`, "info");
  try {
    const entry = await api.upload(file);
    const list = await api.traces().catch(() => [...data.traces, entry]);
    onTraceList(list);
    toast(`Opened ${entry.name}`, "ok");
    await selectTrace(entry.id, {push: true});
  } catch (e) {
    toast(`Not opened: ${e.message}`, "error");
  }
}

// ---------------------------------------------------------------- small UI bits

/** Download the current trace's single-file HTML export (GET /api/traces/<t>/export, an attachment); fetched first,
 * so that a refusal (a trace too big to export here) is told in a toast rather than as a failed download. */
async function exportTrace(redact) {
  const t = state.trace;
  if (t === null) { toast("No trace to export.", "error"); return; }
  const what = `Exporting trace ${t}${redact.length ? " (redacted)" : ""}…`;
  // a toast that stays while the export runs and says how far it is (GET /api/exports/<job>, every EXPORT_POLL_MS)
  const note = h("div", {class: "toast info export-progress"}, what);
  $("#toasts").appendChild(note);
  const job = [...crypto.getRandomValues(new Uint8Array(8))].map((b) => b.toString(16).padStart(2, "0")).join("");
  let polling = true;
  const poll = async () => {
    while (polling) {
      await new Promise((done) => setTimeout(done, EXPORT_POLL_MS));
      const got = await api.exportProgress(job).catch(() => null);  // (not running before the child starts, once done)
      if (polling && got && got.running && got.total > 0) {
        const pct = Math.min(100, Math.floor((100 * got.steps) / got.total));
        note.textContent = `${what} ${got.steps.toLocaleString("en-US")} of ${got.total.toLocaleString("en-US")} `
          + `steps (${pct}%)`;
        note.dataset.steps = String(got.steps);
      }
    }
  };
  poll();
  let res, blob;
  try {
    res = await fetch(api.exportUrl(t, redact, job));
    if (!res.ok) {
      const body = await res.json().catch(() => null);
      throw new Error((body && body.error) || `${res.status} ${res.statusText}`);
    }
    blob = await res.blob();
  } catch (e) { toast(`Cannot export trace ${t}: ${e.message}`, "error"); return; } finally {
    polling = false;
    note.remove();
  }
  const name = /filename="([A-Za-z0-9_.-]+)"/.exec(res.headers.get("Content-Disposition") || "");
  const url = URL.createObjectURL(blob);
  const a = h("a", {href: url, download: name ? name[1] : `trace-${t}.html`, hidden: true});
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);  // the download has taken its copy by then
}

function toast(msg, kind = "info") {
  const el = h("div", {class: `toast ${kind}`}, msg);
  $("#toasts").appendChild(el);
  setTimeout(() => el.remove(), kind === "error" ? 8000 : 4000);
}

const hitText = (n) => (n ? `${n} hit${n === 1 ? "" : "s"}` : "no hits");

function toggleHelp(show) {
  $("#help").hidden = show === undefined ? !$("#help").hidden : !show;
}

function moveContext(dir) {
  const rows = sidebar.visibleContexts().map((r) => r.c.id);
  if (!rows.length) return;
  const i = rows.indexOf(state.ctx);
  const j = i < 0 ? 0 : Math.max(0, Math.min(rows.length - 1, i + dir));
  if (rows[j] !== state.ctx) selectContext(rows[j], {push: true});
}

function moveRewrite(dir) {
  const rws = sidebar.visibleRewrites().map((r) => r.id);
  if (!rws.length) return;
  const i = rws.indexOf(state.rw);
  const j = i < 0 ? 0 : Math.max(0, Math.min(rws.length - 1, i + dir));
  if (rws[j] !== state.rw) selectRewrite(rws[j], {push: true});
}

function onKey(ev) {
  const tgt = ev.target;
  const typing = tgt && (tgt.tagName === "INPUT" || tgt.tagName === "SELECT" || tgt.tagName === "TEXTAREA")
    && !(tgt.type === "checkbox" || tgt.type === "range");
  if (ev.key === "Escape") {
    if (!$("#help").hidden) { toggleHelp(false); return; }
    if (typing) { tgt.blur(); return; }
    selectNode(null);
    return;
  }
  if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const n = data.rw ? data.rw.steps.length : 0;
  const keys = {
    ArrowLeft: () => setStep(state.step - 1),
    ArrowRight: () => setStep(state.step + 1),
    ArrowUp: () => moveRewrite(-1),
    ArrowDown: () => moveRewrite(1),
    PageUp: () => moveContext(-1),
    PageDown: () => moveContext(1),
    Home: () => setStep(0),
    End: () => setStep(n),
    "/": () => { $("#node-search").focus(); $("#node-search").select(); },
    "?": () => toggleHelp(),
    f: () => graph.fit(),
    r: () => { if (!exported) graph.relayout(); },
    m: () => graph.minimap.toggle(),
    g: () => graph.toggleGroups(),
    c: () => { const cb = $("#collapse-consts"); cb.checked = !cb.checked; graph.setCollapse(cb.checked); },
    a: () => {
      const modes = ["ancestors", "descendants", "both", "none"];
      setRelatives(modes[(modes.indexOf(graph.relMode) + 1) % 4]);
    },
  };
  const panel = PANELS.find((p) => p.key === ev.key);
  const fn = keys[ev.key] || (panel && (() => openPanel(panel.id)));
  if (!fn) return;
  ev.preventDefault();
  fn();
}

let splitters = null;  // static/resize.js: the sidebar's and the panel column's (wire() makes them)
let lazyPanels = null;  // the lazy panels' objects, loaded after the first view was painted (main)

function wire() {
  $("#trace-select").addEventListener("change", (ev) => {
    if (ev.target.value !== "") selectTrace(Number(ev.target.value));
  });
  $("#open-file").addEventListener("click", () => $("#file-input").click());
  $("#file-input").addEventListener("change", (ev) => { uploadFile(ev.target.files[0]); ev.target.value = ""; });
  for (const b of $$(".export-button")) {
    // a single-file export has no server to export from (nor to compare with)
    if (document.documentElement.dataset.export === "yes") { b.hidden = true; continue; }
    b.addEventListener("click", () => exportTrace(b.dataset.redact ? b.dataset.redact.split(",") : []));
  }
  $("#help-button").addEventListener("click", () => toggleHelp(true));
  $("#help-close").addEventListener("click", () => toggleHelp(false));
  $("#help").addEventListener("click", (ev) => { if (ev.target.id === "help") toggleHelp(false); });
  $("#step-prev").addEventListener("click", () => setStep(state.step - 1, {push: true}));
  $("#step-next").addEventListener("click", () => setStep(state.step + 1, {push: true}));
  $("#step-slider").addEventListener("input", (ev) => setStep(Number(ev.target.value)));
  $("#fit").addEventListener("click", () => graph.fit());
  $("#relayout").addEventListener("click", () => graph.relayout());
  $("#relayout").hidden = exported;  // (an export holds the stable layouts only)
  $("#relatives").addEventListener("change", (ev) => setRelatives(ev.target.value));
  $("#collapse-consts").addEventListener("change", (ev) => graph.setCollapse(ev.target.checked));
  const search = $("#node-search");
  const runSearch = () => put($("#search-count"), search.value ? hitText(graph.search(search.value)) : "");
  search.addEventListener("input", debounce(runSearch, 120));
  search.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter") return;
    ev.preventDefault();
    runSearch();
    const id = graph.nextHit(ev.shiftKey ? -1 : 1);
    if (id !== null) selectNode(id, {center: true});
  });
  for (const b of $$("#panel-tabs button")) b.addEventListener("click", () => openPanel(b.dataset.panel));
  document.addEventListener("keydown", onKey);
  // an arrow key let go: stepping paused, the step panel shows the whole step now (static/step.js, REPEAT_MS)
  document.addEventListener("keyup", (ev) => {
    if (ev.key === "ArrowLeft" || ev.key === "ArrowRight") panels.get("step")?.settle();
  });
  splitters = wireSplitters({layout: $("#layout"), sidebar: $("#sidebar"), panels: $("#panels"),
    splitLeft: $("#split-left"), splitRight: $("#split-right"), panel: () => state.panel});
  refitOnResize($("#graph"), graph);
  // drag and drop a trace file anywhere
  let depth = 0;
  const zone = $("#drop-zone");
  window.addEventListener("dragenter", (ev) => {
    if (!hasFiles(ev)) return;
    depth++;
    zone.hidden = false;
    ev.preventDefault();
  });
  window.addEventListener("dragleave", () => { depth = Math.max(0, depth - 1); if (!depth) zone.hidden = true; });
  window.addEventListener("dragover", (ev) => { if (hasFiles(ev)) ev.preventDefault(); });
  window.addEventListener("drop", (ev) => {
    if (!hasFiles(ev)) return;
    ev.preventDefault();
    depth = 0;
    zone.hidden = true;
    uploadFile(ev.dataTransfer.files[0]);
  });
}

const hasFiles = (ev) => ev.dataTransfer && Array.from(ev.dataTransfer.types || []).includes("Files");

// ---------------------------------------------------------------- start

async function main() {
  wire();
  const v = router.initial();
  for (const k of PANEL_PARAMS) state[k] = v[k];
  const land = !v.panel && v.ctx === null && v.rw === null;
  openPanel(v.panel || (land ? "summary" : "step"), {push: false});
  landing = land;
  const forcePoll = new URLSearchParams(location.search).get("live") === "poll";
  // one round trip: the trace list, and the answers the first view's requests below will ask for (api.boot primes
  // them); without it (an export, an older server) the trace list and a deep-linked trace's contexts in parallel
  let list = [];
  try {
    const b = await api.boot(v).catch(() => null);
    if (b) {
      list = b.traces;
      setLabelMetrics(b.metrics);
    } else {
      const listing = api.traces();
      const metrics = api.metrics();
      if (v.trace !== null) api.contexts(v.trace, {reuse: true}).catch(() => {});
      list = await listing;
      setLabelMetrics(await metrics);
    }
  } catch (e) { toast(`Cannot list traces: ${e.message}`, "error"); }
  data.traces = list;
  renderTraces();
  const served = v.trace !== null && list.some((x) => x.id === v.trace);
  const t = served ? v.trace : list.length ? pickDefaultTrace(list) : null;
  if (v.trace !== null && t !== v.trace) toast(`Trace ${v.trace} is not served here.`, "error");
  booted = true;
  try {
    if (t === null) graph.clear("No traces yet. Open a trace file (or drop one here).");
    else if (t === v.trace) {
      await selectTrace(t, {ctx: v.ctx, rw: v.rw, step: v.step, node: v.node, push: false, landFirst: land});
    } else await selectTrace(t, {push: false, landFirst: land});
  } finally {
    api.unprime();
    // after the first view is painted: loading and starting the socket.io client took ~100 ms of main thread before
    // it (its module's compile must not land between the first graph and its frame); on connecting, it asks for the
    // trace list again, so nothing that happened meanwhile is missed
    afterPaint(() => startLive({onTraces: onTraceList, onEvent: onLiveEvent, onMode: (m) => put($("#live-mode"), m),
      isLive: () => currentTrace()?.status === "live", forcePoll}));
    // the panels the first view does not show (static/panels.js), after it is painted: their modules' fetch and
    // compile
    lazyPanels = new Promise((done) => afterPaint(() => done(loadPanels())));
  }
}

// for tests and bench/bench_ui.py: the view state and a few entry points; ready: the first view is shown and every
// panel is made (the lazy ones: loadPanel)
window.__viz = {state, data, perf: graph.perf, graph, panels, labelMetrics,
  get diffPanel() { return panels.get("diff"); }, get timelinePanel() { return panels.get("timeline"); },
  setStep, selectNode, selectRewrite, selectContext, openPanel, refreshContexts,
  ready: main().then(() => lazyPanels).catch((e) => { toast(`Start-up failed: ${e.message}`, "error"); throw e; })};
