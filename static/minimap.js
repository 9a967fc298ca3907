// The minimap of a graph too big to read at fit (issue 30: a 570-step gradient graph fitted was a sliver without
// labels): a small overview of every box in its category's color with the view's rectangle on it; a click or a drag
// on it centers the main view there. static/graph.js's StepGraphView owns one and calls update() after each frame.
import {h} from "./dom.js";
import {TEXT_MIN_SCALE} from "./graphdraw.js";

const MAX_W = 200, MAX_H = 150;  // CSS px: the overview's largest box (its aspect is the graph's)
// steps in a row (an arrow key held or pressed again and again) redraw the boxes at most once in this many ms: each
// redraw fills every box (~3,000 on a GPT step's `add bufferize`, ~5 ms of a step's main thread, issue 30: an arrow
// step under 50 ms) for a picture a step changes by a few boxes; the last step's boxes come REDRAW_MS after it at most
const REDRAW_MS = 200;

export class Minimap {
  /** wrap: the element it floats in; view: the GraphView it shows and moves. */
  constructor(wrap, view) {
    this.view = view;
    this.off = false;        // the user hid it (key m)
    this.drawnFor = null;    // the model version the overview's boxes were drawn for
    this.drawnAt = -Infinity;  // when (performance.now()) they were drawn
    this.later = 0;          // the timer of a redraw put off (REDRAW_MS), 0 while none
    this.redrawMs = REDRAW_MS;  // (a test on a loaded machine widens it)
    this.boxDraws = 0;       // how many times the boxes were drawn (tests count them)
    this.scale = 1;          // overview px per graph px
    this.canvas = h("canvas", {id: "minimap", class: "minimap", title: "Overview: click or drag to move the view"});
    this.canvas.hidden = true;
    this.boxes = document.createElement("canvas");  // the boxes, redrawn only when the graph changed
    wrap.append(this.canvas);
    let dragging = false;
    const go = (ev) => {
      const r = this.canvas.getBoundingClientRect();
      this.view.centerAt((ev.clientX - r.left) / this.scale, (ev.clientY - r.top) / this.scale);
    };
    this.canvas.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0) return;
      dragging = true;
      this.canvas.setPointerCapture(ev.pointerId);
      go(ev);
    });
    this.canvas.addEventListener("pointermove", (ev) => { if (dragging) go(ev); });
    const end = () => { dragging = false; };
    this.canvas.addEventListener("pointerup", end);
    this.canvas.addEventListener("pointercancel", end);
  }

  /** Whether the graph needs it: fitted whole its labels would be too small to read, and the view shows only part of
   * it (at the fit itself the view is the overview). */
  needed() {
    const v = this.view;
    if (this.off || !v.nodes.size) return false;
    const fit = v.fitScale();
    return fit < TEXT_MIN_SCALE && v.view.k > fit * 1.05;
  }

  toggle() {
    this.off = !this.off;
    this.update();
  }

  /** Show or hide it for the graph on screen, and draw the view's rectangle (after each frame of the main view). */
  update() {
    const show = this.needed();
    this.canvas.hidden = !show;
    if (!show) return;
    const v = this.view, {width, height} = v.size;
    if (!width || !height) return;
    const s = Math.min(MAX_W / width, MAX_H / height);
    const cw = Math.max(20, Math.round(width * s)), ch = Math.max(20, Math.round(height * s));
    const dpr = window.devicePixelRatio || 1;
    if (this.drawnFor !== v.version || this.scale !== s) {
      const wait = this.drawnAt + this.redrawMs - performance.now();
      // a step's model soon after the boxes were drawn: the view's rectangle now, over the boxes drawn, and the
      // boxes once REDRAW_MS passed since (another graph, or a new size, draws them at once)
      if (wait > 0 && this.scale === s && v.version === v.stepVersion && this.drawnFor !== null) {
        if (!this.later) this.later = setTimeout(() => { this.later = 0; this.update(); }, Math.min(wait, REDRAW_MS));
      } else {
        this._drawBoxes(s, cw, ch, dpr);
      }
    }
    const c = this.canvas;
    if (c.width !== this.boxes.width || c.height !== this.boxes.height) {
      c.width = this.boxes.width;
      c.height = this.boxes.height;
      c.style.width = `${cw}px`;
      c.style.height = `${ch}px`;
    }
    const ctx = c.getContext("2d");
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, c.width, c.height);
    ctx.drawImage(this.boxes, 0, 0);
    // the part of the graph the main view shows
    const {x, y, k} = v.view;
    ctx.setTransform(dpr * s, 0, 0, dpr * s, 0, 0);
    ctx.strokeStyle = v.colors.accent;
    ctx.lineWidth = 1.5 / (dpr * s);
    ctx.strokeRect(-x / k, -y / k, v.cw / k, v.ch / k);
  }

  _drawBoxes(s, cw, ch, dpr) {
    const v = this.view, b = this.boxes;
    this.scale = s;
    this.drawnFor = v.version;
    this.drawnAt = performance.now();
    this.boxDraws++;
    clearTimeout(this.later);
    this.later = 0;
    b.width = Math.round(cw * dpr);
    b.height = Math.round(ch * dpr);
    const ctx = b.getContext("2d");
    ctx.fillStyle = v.colors.bg;
    ctx.fillRect(0, 0, b.width, b.height);
    ctx.setTransform(dpr * s, 0, 0, dpr * s, 0, 0);
    const byCat = new Map();
    const least = 1.5 / s;  // every box at least a pixel and a half, or small nodes vanish
    for (const n of v.nodes.values()) {
      const c = v.colors.cat[n.d.cat] ? n.d.cat : "other";
      if (!byCat.has(c)) byCat.set(c, new Path2D());
      const w = Math.max(least, n.w), ht = Math.max(least, n.h);
      byCat.get(c).rect(n.x - w / 2, n.y - ht / 2, w, ht);
    }
    for (const [c, p] of byCat) {
      ctx.fillStyle = v.colors.cat[c];
      ctx.fill(p);
    }
  }
}
