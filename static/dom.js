// DOM helpers. Every string that may come from a trace goes through text nodes, never through HTML parsing.

const SVG_NS = "http://www.w3.org/2000/svg";

/** h("div", {class: "x", title: "t", onclick: fn, dataset: {id: 1}}, "text", child) */
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** The same for SVG elements. */
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

function fill(el, attrs, children) {
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") el.setAttribute("class", v);
      else if (k === "dataset") Object.assign(el.dataset, v);
      else if (k === "text") el.textContent = String(v);
      else if (k === "style") Object.assign(el.style, v);  // CSSOM, allowed under a strict CSP
      else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  append(el, children);
  return el;
}

/** Append children: nodes as they are, everything else as a text node. */
export function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.lastChild) el.removeChild(el.lastChild);
  return el;
}

/** Replace an element's children. */
export function put(el, ...children) {
  clear(el);
  return append(el, children);
}

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

// The highlighter's HTML from the server is escaped already; as a second line of defence it is parsed inertly and only
// <span>/<pre>/<div>/<code>/<br> elements with a class survive (no attributes other than class, no URLs, no handlers).
const SAFE_TAGS = new Set(["SPAN", "PRE", "DIV", "CODE", "BR"]);

export function safeHighlighted(html) {
  const doc = new DOMParser().parseFromString(`<!doctype html><body>${String(html)}`, "text/html");
  const out = document.createDocumentFragment();
  const copy = (src, dst) => {
    for (const n of src.childNodes) {
      if (n.nodeType === Node.TEXT_NODE) dst.appendChild(document.createTextNode(n.nodeValue));
      else if (n.nodeType === Node.ELEMENT_NODE) {
        if (!SAFE_TAGS.has(n.tagName)) { dst.appendChild(document.createTextNode(n.textContent)); continue; }
        const el = document.createElement(n.tagName.toLowerCase());
        const cls = n.getAttribute("class");
        if (cls) el.setAttribute("class", cls);
        copy(n, el);
        dst.appendChild(el);
      }
    }
  };
  copy(doc.body, out);
  return out;
}

// ---- formatting

/** "file:line" of a call site ({file, line, function}), the file by its last path part. */
export function siteText(site) {
  return `${String(site.file).split(/[\\/]/).pop()}:${site.line}`;
}

export function fmtNs(ns) {
  if (ns === null || ns === undefined) return "–";
  return fmtSeconds(ns / 1e9);
}

export function fmtSeconds(sec) {
  if (sec === null || sec === undefined || !Number.isFinite(sec)) return "–";
  const a = Math.abs(sec);
  if (a >= 1) return `${sec.toFixed(2)} s`;
  if (a >= 1e-3) return `${(sec * 1e3).toFixed(2)} ms`;
  if (a >= 1e-6) return `${(sec * 1e6).toFixed(1)} µs`;
  return `${(sec * 1e9).toFixed(0)} ns`;
}

export function fmtNum(x, digits = 2) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "–";
  if (Math.abs(x) >= 1e5) return x.toExponential(2);
  return x.toFixed(digits);
}

export function basename(path) {
  const p = String(path ?? "");
  const i = Math.max(p.lastIndexOf("/"), p.lastIndexOf("\\"));
  return i >= 0 ? p.slice(i + 1) : p;
}

/** "file.py:12" with the full path as a tooltip. */
export function fileLine(file, line) {
  return h("span", {class: "fileline mono", title: `${file ?? ""}:${line ?? ""}`}, `${basename(file)}:${line ?? "?"}`);
}

// ---- kernel name colors (the compiler's axis color names; UPPER case means the bright variant)

const COLORS = {
  black: "#7f8794", red: "#e5534b", green: "#57ab5a", yellow: "#c69026", blue: "#539bf5", magenta: "#b083f0",
  cyan: "#39c5cf", white: "#adbac7", BLACK: "#a0a8b4", RED: "#ff6e66", GREEN: "#7ee787", YELLOW: "#f2cc60",
  BLUE: "#79c0ff", MAGENTA: "#d2a8ff", CYAN: "#56d4dd", WHITE: "#f0f6fc",
};

export function colorOf(name) {
  if (name === null || name === undefined) return null;
  const key = String(name);
  return COLORS[key] ?? COLORS[key.toLowerCase()] ?? null;
}

/** A kernel's name (fixed by the scheduler: one name on every surface), then its shape after the opts as sizes in
 * their axis colors (the API's shape_colors: [[size, color], ...]) where given. */
export function kernelName(name, shape, cls = "kname") {
  const el = h("span", {class: cls}, h("span", {class: "kname-text"}, String(name ?? "")));
  if (Array.isArray(shape) && shape.length) {
    const box = h("span", {class: "kshape", title: "shape after the opts, each size in its axis color"});
    for (const part of shape) {
      if (!Array.isArray(part)) continue;
      const seg = h("span", null, String(part[0] ?? ""));
      const c = colorOf(part[1]);
      if (c) seg.style.color = c;
      box.appendChild(seg);
    }
    el.appendChild(box);
  }
  return el;
}

export function debounce(fn, ms) {
  let t = null;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}
