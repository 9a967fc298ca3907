// The panels on the right, one entry each. app.js builds their tabs, containers (#panel-<id>), number keys and help
// line from this list and calls their hooks; the router accepts exactly these ids as the URL's `p=`. Adding a panel is
// an entry here plus its module (imported here, the server sends it within app.js: viz_server/pagejs.py; or lazy);
// tests/browser/test_ui_panel_registry.py checks the page against the list.
//
// An entry: id, label (the tab's text), key (its keyboard shortcut), create(el, app) -> the panel object (a Panel of
// static/panel.js, which keeps its answers in order and draws its loading, error and empty states), show (it
// opened, or what it shows changed) and optional hooks; each hook is (panel, app) => void, and app is the page's
// controller (app.js: state, data, ctx(), rwCurrent(), node(id), afterPaint(fn), selectContext, selectNode, setStep,
// openPanel, setParams). Hooks called only while the panel is open:
//   onContexts another trace was selected and its contexts came (its first graph is on its way)
//   onTrace    another trace was selected and its view loaded
//   onContext  another context was selected
//   onRewrite  another rewrite was selected and its steps loaded
//   onStep     the step shown, or the selected rewrite's steps, changed (called after the graph's frame is painted)
//   onLive     the selected trace grew (a live trace)
// and for every panel, open or not:
//   onSelection  the selected context or rewrite changed
//   onTraces     the list of served traces changed
// params: the URL hash keys (app.state fields, strings) the panel keeps while open; width: "medium" or "wide", the
// panel column's default width while it is open (style.css, #layout[data-width]).
//
// lazy: () => import() of its module, for a panel the first view does not show (issue 30: the first view of a GPT
// step's trace waited for 25 modules, 7 of them these panels' and what only they import): its module is loaded after
// the first view is painted, or at once when it is opened before that; create is then (el, app, module). app.js
// makes its tab and container at start, its object once the module came (its hooks run from then on).
import {Panel} from "./panel.js";
import {StepPanel} from "./step.js";
import {SummaryPanel} from "./summary.js";

const showStep = (p, app) => {
  const {state, data} = app;
  if (state.panel !== "step") return;  // called after a paint: the user may have switched panels meanwhile
  if (!data.rw || state.rw === null) { p.empty("No rewrite selected."); return; }
  if (!app.rwCurrent()) return;  // the selection changed: the new rewrite's panel comes when it has loaded
  p.show(state.trace, data.rw, state.step, (id) => app.node(id));
};

const showDiff = (p, {state}) => {
  if (state.a && state.b && (p.a !== state.a || p.b !== state.b)) p.setBoth(state.a, state.b, {notify: false});
  else p.ensureDefaults();
};

const showContext = (p, app) => p.show(app.state.trace, app.ctx());
const showTrace = (p, app) => p.show(app.state.trace);

export const PANELS = [
  {
    // the landing view: open when a trace opens, unless the link names a context, rewrite or panel (app.js)
    id: "summary", label: "Summary", key: "0", width: "medium",
    create: (el, app) => new SummaryPanel(el, {
      onJump: (c) => { app.selectContext(c, {push: true}); app.openPanel("kernel"); },
      onRuns: () => app.openPanel("runs"),
      ctxInfo: (c) => app.data.ctxById.get(c),
    }),
    show: showTrace, onContexts: showTrace, onLive: showTrace,
  },
  {
    id: "step", label: "Step", key: "1",
    create: (el, app) => new StepPanel(el, {
      onNode: (id) => app.selectNode(id, {center: true}),
      onStep: (k) => app.setStep(k),
    }),
    show: showStep, onStep: showStep, onSelection: (p, app) => p.pending(app.state.rw),
  },
  {
    id: "diff", label: "Diff", key: "2", params: ["a", "b"], width: "wide", lazy: () => import("./diff.js"),
    create: (el, app, {DiffPanel}) => new DiffPanel(el, {
      cur: () => ({trace: app.state.trace, rw: app.state.rw, step: app.state.step, ctx: app.state.ctx}),
      traces: () => app.data.traces,
      onChange: (a, b) => app.setParams({a, b}),  // a new pair of points: a history entry
      onNode: (id) => app.selectNode(id, {center: true}),
    }),
    show: showDiff, onTrace: showDiff,
    onRewrite: (p) => { if (!(p.a && p.b)) p.ensureDefaults(); },
    onTraces: (p) => p.tracesChanged(),
  },
  {
    id: "kernel", label: "Kernel", key: "3", lazy: () => import("./kernel.js"),
    create: (el, app, {KernelPanel}) => new KernelPanel(el, {onPick: (c) => app.selectContext(c, {push: true})}),
    show: showContext, onTrace: showContext, onContext: showContext, onLive: showContext,
  },
  {
    id: "source", label: "Source", key: "4", width: "wide",  // LLVM IR and asm lines are long (issue 30)
    lazy: () => import("./source.js"),
    create: (el, app, {SourcePanel}) => new SourcePanel(el, {onPick: (c) => app.selectContext(c, {push: true})}),
    show: showContext, onTrace: showContext, onContext: showContext, onLive: showContext,
  },
  {
    id: "runs", label: "Runs", key: "5", width: "medium", lazy: () => import("./runs.js"),
    create: (el, app, {RunsPanel}) => new RunsPanel(el, {
      onJump: (c) => { app.selectContext(c, {push: true}); app.openPanel("kernel"); },
      ctxInfo: (c) => app.data.ctxById.get(c),
    }),
    show: showTrace, onContexts: showTrace, onLive: showTrace,
  },
  {
    id: "timeline", label: "Timeline", key: "6", width: "wide", lazy: () => import("./timeline.js"),
    // a click on the timeline opens the context or rewrite in the graph and keeps the timeline in view
    create: (el, app, {TimelinePanel}) => new TimelinePanel(el, {
      onJumpContext: (c) => app.selectContext(c, {push: true}),
      onJumpRewrite: (c, r) => app.selectContext(c, {rw: r, push: true}),
      selection: () => ({ctx: app.state.ctx, rw: app.state.rw}),
    }),
    show: showTrace, onContexts: showTrace, onLive: showTrace,
    onSelection: (p) => p.redraw(),
  },
];

export const PANEL_IDS = PANELS.map((p) => p.id);

/** The URL hash keys some panel keeps (each an app.state field holding a string, "" when unset). */
export const PANEL_PARAMS = [...new Set(PANELS.flatMap((p) => p.params || []))];

export const panelSpec = (id) => PANELS.find((p) => p.id === id) || null;

/** The panel object of an entry, in its container el (module: a lazy entry's module); every panel is a Panel (no
 * copies of what the base does). */
export function createPanel(spec, el, app, module = null) {
  const panel = spec.create(el, app, module);
  if (!(panel instanceof Panel)) throw new TypeError(`panel "${spec.id}": create() made no Panel (static/panel.js)`);
  return panel;
}
