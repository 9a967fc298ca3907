// Column widths the user sets (issue 30): the splitters beside the sidebar and the panel column drag, or move by
// keyboard (focus one: ←/→, Shift for big steps, Home/End, Enter resets), and each width is kept in localStorage:
// the sidebar's once, the panel column's per panel (a table wants more room than the step list), restored when that
// panel opens. A width applies as `min(saved, what the window leaves)`, so a smaller window never loses the graph and
// a bigger one gets the saved width back. And the graph refits when its box changes (a panel opened, closed or
// resized) until the user pans or zooms it.

const STORE = "tinyviz.width.";
const GRAPH_MIN_W = 480;  // what a panel leaves the graph (style.css's #layout[data-width] rules leave the same)
const SPLIT_W = 8;  // the two splitters
const PANEL_MIN_W = 280, SIDE_MIN_W = 160;
const KEY_STEP = 16, KEY_BIG = 96;  // px per arrow key press, with Shift

/** The stored width under key (px), or null (none, or storage refused: a sandboxed or private page). */
export function savedWidth(key) {
  try {
    const w = Number(localStorage.getItem(STORE + key));
    return Number.isFinite(w) && w > 0 ? w : null;
  } catch {
    return null;
  }
}

function storeWidth(key, w) {
  try {
    if (w === null) localStorage.removeItem(STORE + key);
    else localStorage.setItem(STORE + key, String(Math.round(w)));
  } catch { /* storage refused: the width holds for this page only */ }
}

/** A splitter resizing one column: `cssVar` on `layout` (a grid whose columns read it), `sign` +1 when dragging
 * right widens the column (the sidebar), -1 when it narrows it (the panel column); `key()` names the width stored. */
export class Splitter {
  constructor(el, {layout, column, cssVar, sign, key, min, room, label}) {
    Object.assign(this, {el, layout, column, cssVar, sign, key, min, room});
    el.tabIndex = 0;
    el.setAttribute("role", "separator");
    el.setAttribute("aria-orientation", "vertical");
    el.setAttribute("aria-label", label);
    el.title = `${label}: drag, or focus and press ←/→ (Enter: default width)`;
    this._wire();
  }

  /** The column's width now (px). */
  width() {
    return this.column.getBoundingClientRect().width;
  }

  /** The widest the column may be: the window's width less the other column and the graph's minimum. */
  max() {
    return Math.max(this.min, this.room());
  }

  /** Set the column to w px (clamped), kept under key() unless `save` is false. */
  set(w, {save = true} = {}) {
    const px = Math.round(Math.max(this.min, Math.min(this.max(), w)));
    this.layout.style.setProperty(this.cssVar, `min(${px}px, ${this._roomCss()})`);
    if (save) storeWidth(this.key(), px);
    this._aria(px);
  }

  /** The saved width of key() if any, else the default (style.css's). */
  restore() {
    const w = savedWidth(this.key());
    if (w === null) this.layout.style.removeProperty(this.cssVar);
    else this.set(w, {save: false});
    this._aria(w ?? this.width());
  }

  /** Forget key()'s width: the column goes back to its default. */
  reset() {
    storeWidth(this.key(), null);
    this.restore();
  }

  _roomCss() {
    // the bound of max() in CSS, so a window shrinking later still leaves the graph its room (the sidebar's cannot
    // read --panel-w, which reads --side-w: a cycle voids both, so it leaves room for the narrowest panel)
    const other = this.cssVar === "--side-w" ? `${PANEL_MIN_W}px` : "var(--side-w)";
    return `calc(100vw - ${other} - ${GRAPH_MIN_W + SPLIT_W}px)`;
  }

  _aria(w) {
    this.el.setAttribute("aria-valuemin", String(this.min));
    this.el.setAttribute("aria-valuemax", String(Math.round(this.max())));
    this.el.setAttribute("aria-valuenow", String(Math.round(w)));
  }

  _wire() {
    const el = this.el;
    el.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0) return;
      const start = ev.clientX, w0 = this.width();
      el.setPointerCapture(ev.pointerId);
      const move = (e) => this.set(w0 + this.sign * (e.clientX - start));
      const up = () => { el.removeEventListener("pointermove", move); el.removeEventListener("pointerup", up); };
      el.addEventListener("pointermove", move);
      el.addEventListener("pointerup", up);
    });
    el.addEventListener("dblclick", () => this.reset());
    el.addEventListener("keydown", (ev) => {
      const step = ev.shiftKey ? KEY_BIG : KEY_STEP;
      const moves = {
        ArrowLeft: () => this.set(this.width() - this.sign * step),
        ArrowRight: () => this.set(this.width() + this.sign * step),
        Home: () => this.set(this.min),
        End: () => this.set(this.max()),
        Enter: () => this.reset(),
      };
      const fn = moves[ev.key];
      if (!fn) return;
      // the page's keys (← → step the rewrite, Home/End jump) must not act on a key the splitter took
      ev.preventDefault();
      ev.stopPropagation();
      fn();
    });
  }
}

/** The page's two splitters: the sidebar's (one width) and the panel column's (a width per panel, `panel()` naming
 * the open one). Returns {side, panel}. */
export function wireSplitters({layout, sidebar, panels, splitLeft, splitRight, panel}) {
  const side = new Splitter(splitLeft, {layout, column: sidebar, cssVar: "--side-w", sign: 1, key: () => "sidebar",
    min: SIDE_MIN_W, room: () => innerWidth - panels.getBoundingClientRect().width - GRAPH_MIN_W - SPLIT_W,
    label: "Sidebar width"});
  const right = new Splitter(splitRight, {layout, column: panels, cssVar: "--panel-w", sign: -1,
    key: () => `panel.${panel()}`, min: PANEL_MIN_W,
    room: () => innerWidth - sidebar.getBoundingClientRect().width - GRAPH_MIN_W - SPLIT_W, label: "Panel width"});
  side.restore();
  return {side, panel: right};
}

/** Refit `graph` (static/graph.js's view) whenever `host` changes size, while its view is automatic (the user has not
 * panned or zoomed): a panel opening or a splitter moving otherwise leaves boxes cut at the graph's edge. */
export function refitOnResize(host, graph) {
  let last = null;
  const ro = new ResizeObserver(([entry]) => {
    const {width, height} = entry.contentRect;
    const size = `${Math.round(width)}x${Math.round(height)}`;
    const changed = last !== null && size !== last;
    last = size;
    // (graph.js's own observer, made first, has resized its canvas by now: observers run in the order made)
    if (changed && width > 0 && height > 0 && graph.autoFit) graph.autoView();
  });
  ro.observe(host);
  return ro;
}
