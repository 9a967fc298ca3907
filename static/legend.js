// Legends: what a color or outline on the page means, one swatch and a label an entry. Every panel that colors
// something builds its key here, so the swatches look alike everywhere; labels go in as text nodes.
import {colorOf, h} from "./dom.js";

/** The colors of a kernel's shape and name (compiler/opt/kernel.py AXIS_COLORS): [color name, axis type]. */
export const AXIS_COLOR_NAMES = [
  ["blue", "global"], ["BLUE", "thread"], ["cyan", "local"], ["green", "group reduce"], ["red", "reduce"],
  ["magenta", "unroll"], ["yellow", "upcast"],
];

/** The graph's rings over the boxes (static/graphdraw.js drawMarks, drawGhosts): label, CSS color, swatch look. */
export const GRAPH_MARKS = [
  {label: "added", color: "var(--add)", look: "ring"},
  {label: "changed", color: "var(--chg)", look: "dashed"},
  {label: "removed (fading)", color: "var(--del)", look: "ghost"},
];

/**
 * A legend: entries [{label, color (any CSS color), look: "fill" | "ring" | "dashed" | "ghost" | "text", mark}]
 * (`mark`: the character a "text" entry shows, as the chart draws it). title: a heading before the entries.
 */
export function legendBox(entries, {title = "", cls = ""} = {}) {
  return h("div", {class: `legend-box small ${cls}`.trim(), role: "list", "aria-label": title || "legend"},
    title ? h("span", {class: "legend-title muted"}, String(title)) : null, ...entries.map(legendEntry));
}

export function legendEntry({label, color = null, look = "fill", mark = "", cls = ""}) {
  const sw = h("i", {class: `legend-swatch look-${look} ${cls}`.trim()}, look === "text" ? String(mark) : null);
  if (color) sw.style.setProperty("--sw", String(color));  // CSSOM: allowed under the page's strict CSP
  return h("span", {class: "legend-entry", role: "listitem", dataset: {look}}, sw, String(label ?? ""));
}

/** The key of the kernel shape colors. */
export function axisColorsLegend() {
  return legendBox(AXIS_COLOR_NAMES.map(([name, what]) => ({label: what, color: colorOf(name), cls: `axis-${name}`})),
    {title: "axis colors", cls: "axis-legend"});
}
