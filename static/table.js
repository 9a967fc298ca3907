// A sortable table and two small SVG charts (bars, scatter); all text goes in as text nodes.
import {h, s, put} from "./dom.js";

/**
 * columns: [{key, label, value(row) -> sortable, render(row) -> string|Node, num: bool, title}]
 * opts: {sort: [key, dir], onRow(row), rowClass(row), onSort(key, dir)}
 */
export function sortableTable(columns, rows, opts = {}) {
  let [sortKey, dir] = opts.sort || [null, 1];
  const table = h("table", {class: "grid sortable"});
  const thead = h("thead");
  const tbody = h("tbody");
  table.append(thead, tbody);
  const draw = () => {
    const col = columns.find((c) => c.key === sortKey);
    const sorted = col ? [...rows].sort((a, b) => cmp(val(col, a), val(col, b), dir)) : rows;
    put(thead, h("tr", null, ...columns.map((c) => h("th", {
      class: `${c.num ? "num" : ""}${c.key === sortKey ? (dir > 0 ? " asc" : " desc") : ""}`,
      dataset: {key: c.key}, title: c.title || `sort by ${c.label}`}, c.label))));
    put(tbody, ...sorted.map((r) => {
      const tr = h("tr", {class: opts.rowClass ? opts.rowClass(r) : null},
        ...columns.map((c) => h("td", {class: c.num ? "num" : null},
          c.render ? c.render(r) : String(val(c, r) ?? ""))));
      tr._row = r;
      return tr;
    }));
    return sorted;
  };
  thead.addEventListener("click", (ev) => {
    const th = ev.target.closest("th");
    if (!th) return;
    if (sortKey === th.dataset.key) dir = -dir; else { sortKey = th.dataset.key; dir = 1; }
    const sorted = draw();
    if (opts.onSort) opts.onSort(sortKey, dir, sorted);
  });
  if (opts.onRow) {
    tbody.addEventListener("click", (ev) => {
      const tr = ev.target.closest("tr");
      if (tr && tr._row) opts.onRow(tr._row);
    });
  }
  table.sorted = draw();
  return table;
}

const val = (col, row) => (col.value ? col.value(row) : row[col.key]);

function cmp(a, b, dir) {
  const na = a === null || a === undefined || (typeof a === "number" && !Number.isFinite(a));
  const nb = b === null || b === undefined || (typeof b === "number" && !Number.isFinite(b));
  if (na || nb) return na === nb ? 0 : na ? 1 : -1;  // missing values last, in either direction
  if (typeof a === "number" && typeof b === "number") return (a - b) * dir;
  return String(a).localeCompare(String(b), undefined, {numeric: true}) * dir;
}

/** Horizontal bars: items [{label: Node|string, value, text, cls, onClick}] */
export function barChart(items, {width = 400, barH = 16, gap = 4, labelW = 120} = {}) {
  const max = Math.max(...items.map((i) => i.value || 0), 1e-30);
  const hgt = items.length * (barH + gap) + gap;
  const svgEl = s("svg", {class: "chart bars", width, height: hgt, viewBox: `0 0 ${width} ${hgt}`});
  items.forEach((it, i) => {
    const y = gap + i * (barH + gap);
    const w = Math.max(1, ((width - labelW - 150) * (it.value || 0)) / max);
    const g = s("g", {class: `bar ${it.cls || ""}`, transform: `translate(0,${y})`});
    g.append(
      s("title", null, it.title ?? String(it.label)),
      s("text", {x: labelW - 6, y: barH / 2, dy: "0.35em", "text-anchor": "end", class: "bar-label"},
        truncate(String(it.label), Math.floor((labelW - 8) / 6.8))),  // 11px mono: ~6.6px a character
      s("rect", {x: labelW, y: 0, width: w, height: barH, rx: 2}),
      s("text", {x: labelW + w + 4, y: barH / 2, dy: "0.35em", class: "bar-value"}, it.text ?? ""));
    if (it.onClick) { g.classList.add("clickable"); g.addEventListener("click", it.onClick); }
    svgEl.appendChild(g);
  });
  return svgEl;
}

export const truncate = (str, n) => (str.length > n ? `${str.slice(0, n - 1)}…` : str);
