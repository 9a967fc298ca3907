// The timeline's memory lanes: bytes of buffers in use over time, one lane per device (the API's timeline.memory
// for the CPU, timeline.memory_devices[i] for another device: step points and the peak), each drawn as a step line under the other lanes, the peak marked with its value and the buffer whose allocation
// reached it. The panel (static/timeline.js) gives it rows, calls draw() after its own passes, and describes the
// lane's hover spans through describe(). Values come from strangers: every number is checked before use.
import {fmtSeconds} from "./dom.js";

const ROWS = 3;  // the lane's height, in the panel's rows
const LINE = "#d29922";
const FILL = "rgba(210, 153, 34, 0.18)";
const TOP_PAD = 13;  // room for the peak's label above the highest point

const num = (x) => (typeof x === "number" && Number.isFinite(x) ? x : null);

/** Bytes as people read them: 512 B, 7.8 KiB, 1.5 MiB. */
export function fmtBytes(n) {
  if (num(n) === null) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, x = Math.abs(n);
  while (x >= 1024 && i < units.length - 1) { x /= 1024; i++; }
  return `${n < 0 ? "-" : ""}${i ? x.toFixed(1) : String(Math.round(x))} ${units[i]}`;
}

export class MemoryLane {
  /** device: null for the CPU's lane (timeline.memory), else a name in timeline.memory_devices. */
  constructor(labelW, rowH, device = null) {
    this.device = device;
    this.labelW = labelW;
    this.rowH = rowH;
    this.rows = [];
    this.segs = [];
    this.peak = null;
    this.drawn = null;  // what the last draw put on the canvas (for tests): {peak: {x, y, label}, points}
  }

  /** The lane's rows for the panel (none when the trace recorded no allocation), from the API's answer. */
  model(d) {
    const m = (this.device === null ? d && d.memory : MemoryLane.deviceEntry(d, this.device)) || {};
    const ts = Array.isArray(m.t) ? m.t : [], bs = Array.isArray(m.bytes) ? m.bytes : [];
    const pts = [];
    for (let i = 0; i < Math.min(ts.length, bs.length); i++) {
      const t = num(ts[i]), b = num(bs[i]);
      if (t !== null && b !== null && b >= 0) pts.push([t, b]);
    }
    const end = Math.max(num(d && d.end) ?? 0, pts.length ? pts[pts.length - 1][0] : 0);
    // a level from one event to the next: what hovering shows
    this.segs = pts.map(([t, b], i) => ({kind: "memory", s: t, e: i + 1 < pts.length ? pts[i + 1][0] : end, bytes: b,
      ctx: null, rw: null, name: fmtBytes(b), open: false, dev: this.device}));
    const p = m.peak && typeof m.peak === "object" ? m.peak : null;
    this.peak = p && num(p.t) !== null && num(p.bytes) !== null && p.bytes > 0 ? {t: p.t, bytes: p.bytes,
      buf: num(p.buf), dtype: typeof p.dtype === "string" ? p.dtype : null, size: num(p.size),
      bufBytes: num(p.buf_bytes)} : null;
    this.max = Math.max(1, this.peak ? this.peak.bytes : 0);
    for (const [, b] of pts) if (b > this.max) this.max = b;
    // one lane per device: named by its device where the trace has any besides the CPU
    const others = MemoryLane.devices(d).length > 0;
    const label = this.device !== null ? `memory ${this.device}` : others ? "memory CPU" : "memory";
    this.rows = pts.length ? Array.from({length: ROWS}, (_, i) => ({lane: `memory:${this.device ?? "CPU"}`,
      label: i === 0 ? label : i === 1 && this.peak ? `≤ ${fmtBytes(this.peak.bytes)}` : "", spans: []})) : [];
    return this.rows;
  }

  /** The names of the devices other than the CPU the API's answer has a lane for (strings only, at most 8). */
  static devices(d) {
    const list = d && Array.isArray(d.memory_devices) ? d.memory_devices : [];
    return list.filter((x) => x && typeof x === "object" && typeof x.device === "string").slice(0, 8)
      .map((x) => x.device);
  }

  static deviceEntry(d, device) {
    const list = d && Array.isArray(d.memory_devices) ? d.memory_devices : [];
    return list.find((x) => x && typeof x === "object" && x.device === device) || null;
  }

  /** The peak's words on the canvas: its value and the buffer whose allocation reached it. */
  peakLabel() {
    const p = this.peak;
    if (!p) return "";
    const what = p.dtype !== null && p.size !== null ? `${p.dtype} x${p.size}` : fmtBytes(p.bufBytes);
    return `peak ${fmtBytes(p.bytes)} · buffer ${p.buf ?? "?"} (${what})`;
  }

  /** Draw the lane into the panel's canvas (after the panel's own passes) and add its hover spans to panel.hits;
   * `hovered`: the panel's hover before its passes ran (they keep only their own spans). */
  draw(panel, hovered) {
    this.drawn = null;
    if (!this.rows.length || !panel.canvas || !panel.cssW || this.rows[0].y === undefined) return;
    const g = panel.canvas.getContext("2d");
    const {t0, t1} = panel.view;
    const left = this.labelW, right = left + panel._plotW();
    const k = (right - left) / (t1 - t0);
    const X = (t) => Math.max(left - 1, Math.min(right + 1, left + (t - t0) * k));
    const top = this.rows[0].y + 1, bottom = this.rows[this.rows.length - 1].y + this.rowH - 2;
    const Y = (b) => bottom - (b / this.max) * (bottom - top - TOP_PAD);
    g.save();
    g.beginPath();
    g.rect(left, top, right - left, bottom - top + 1);
    g.clip();
    g.beginPath();
    g.moveTo(left, bottom);
    let y = bottom;  // nothing is in use before the first event
    for (const sp of this.segs) {
      const x = X(sp.s);
      g.lineTo(x, y);
      y = Y(sp.bytes);
      g.lineTo(x, y);
    }
    g.lineTo(right, y);
    g.strokeStyle = LINE;
    g.lineWidth = 1.5;
    g.stroke();
    g.lineTo(right, bottom);
    g.lineTo(left, bottom);
    g.closePath();
    g.fillStyle = FILL;
    g.fill();
    let peak = null;
    if (this.peak) {
      const px = X(this.peak.t), py = Y(this.peak.bytes), label = this.peakLabel();
      g.fillStyle = LINE;
      g.beginPath();
      g.arc(px, py, 3, 0, 2 * Math.PI);
      g.fill();
      const w = g.measureText(label).width;
      const lx = px + 6 + w <= right ? px + 6 : Math.max(left + 2, px - 6 - w);
      g.fillStyle = "#f0f6fc";
      g.textAlign = "left";
      g.fillText(label, lx, Math.max(top + 6, py - 6));
      peak = {x: px, y: py, label, lx};
    }
    const hits = this._hits(X, top, bottom, left, right);
    const hv = hovered && hovered.kind === "memory" && hovered.span && hovered.span.dev === this.device ? hits.find((x) => x.span === hovered.span) : null;
    if (hv) {
      g.strokeStyle = "#ffffff";
      g.lineWidth = 1;
      g.strokeRect(hv.x0 + 0.5, top + 0.5, Math.max(1, hv.x1 - hv.x0 - 1), bottom - top - 1);
      panel.hover = hv;
    }
    g.restore();
    panel.hits.push(...hits);
    this.drawn = {peak, points: this.segs.length};
  }

  /** One hover span per level on screen; levels under a pixel share it, the highest of them shown. */
  _hits(X, y0, y1, left, right) {
    const hits = [];
    for (const sp of this.segs) {
      let x0 = X(sp.s), x1 = X(sp.e);
      if (x1 < left || x0 > right) continue;
      x0 = Math.max(x0, left);
      x1 = Math.min(Math.max(x1, x0 + 1), right);
      const last = hits[hits.length - 1];
      if (last && Math.floor(x0) <= Math.floor(last.x0) && x1 - x0 < 1) {
        if (sp.bytes > last.span.bytes) last.span = sp;
        continue;
      }
      hits.push({x0, x1, y0, y1, kind: "memory", ctx: null, rw: null, name: sp.name, span: sp});
    }
    return hits;
  }

  /** The tooltip's lines for a hover span of the lane. */
  describe(sp) {
    const lines = [`${fmtBytes(sp.bytes)} in use (${sp.bytes} bytes)`,
      `from ${fmtSeconds(sp.s)} to ${fmtSeconds(sp.e)}`];
    if (this.peak) lines.push(this.peakLabel());
    return lines;
  }
}
