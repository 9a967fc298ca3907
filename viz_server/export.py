"""`export FILE -o out.html`: one self-contained HTML file showing a trace read-only, opened from disk with no server.

The file holds the viewer's own UI (static/*.js bundled into one inline module, static/style.css inline) and the API
answers the UI asks for, precomputed through the API itself (viz_server/offline.py), packed (viz_server/export_pack.py)
and embedded deflated and base-85 encoded in a <script type="application/json"> block (no `<`, `>` or `&` can appear
in it, so no trace string can end the block). A shim (viz_server/export_shim.js, after export_hash.js and
export_unpack.js) answers static/api.js's requests from that data: a rewrite's graph at any step is rebuilt from its
step-0 graph and one delta per step; diffs are printed with structural hashes the page computes. A
Content-Security-Policy meta tag allows only the page's own inline script and style (by hash) and no connection at all.
See "Trace tools" in docs/architecture.md."""
from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import time
import zlib
from pathlib import Path
from typing import Any, Iterable

from viz_server.app import package_dir
from viz_server.export_pack import FIELDS as STATIC
from viz_server.export_pack import FRESH_BASE
from viz_server.export_pack import pack as pack_data
from viz_server.graphview import label, straight
from viz_server.offline import OfflineApi, OfflineError
from vztrace.format import exit_text

REDACTABLE = ("paths", "source", "argv", "host")
# the page's own scripts, before the UI's bundle in its module: the structural hash, the data's decoder, the API's
# answers; and the one script the page starts with (it inflates the module and runs it)
SHIM = tuple(Path(__file__).resolve().parent / f"export_{name}.js" for name in ("hash", "unpack", "shim"))
BOOT = Path(__file__).resolve().parent / "export_boot.js"
# RFC 1924's base-85 digits, with the four a page would have to escape swapped for unused ones (export_boot.js)
_B85 = str.maketrans("&<>`", ",./:")
# static/*.js import forms the bundler understands (anything else in a module is an error, not a silent miss)
_IMPORT = re.compile(r'^import \{([^}]*)\} from "\./([a-z_]+)\.js";\s*$', re.M)
_EXPORT = re.compile(r"^export (async function|function|class|const|let) ([A-Za-z_$][\w$]*)", re.M)
_FAVICON = "data:image/svg+xml;base64,"


class ExportError(ValueError):
  """The UI's files are not in a form the exporter can bundle, or an option names nothing in the trace."""


# ---- the UI as one script

def bundle(static: Path, entry: str = "app") -> str:
  """The UI's ES modules as one module script: each module's body in its own function scope, in dependency order;
  `import {a, b as c} from "./x.js"` becomes `const {a, b: c} = modules.x`, `export` declarations are returned."""
  sources: dict[str, str] = {}
  deps: dict[str, list[str]] = {}

  def load(name: str) -> None:
    if name in sources:
      return
    path = static / f"{name}.js"
    if not path.is_file():
      raise ExportError(f"static/{name}.js is imported but missing")
    text = path.read_text(encoding="utf-8")
    sources[name] = text
    deps[name] = [m.group(2) for m in _IMPORT.finditer(text)]
    if re.search(r"^\s*(import|export)\b", _IMPORT.sub("", _EXPORT.sub("", text)), re.M):
      raise ExportError(f"static/{name}.js: an import/export form the exporter does not bundle")
    for d in deps[name]:
      load(d)

  load(entry)
  order: list[str] = []
  state: dict[str, int] = {}

  def visit(name: str) -> None:
    if state.get(name) == 2:
      return
    if state.get(name) == 1:
      raise ExportError(f"static/{name}.js is part of an import cycle")
    state[name] = 1
    for d in deps[name]:
      visit(d)
    state[name] = 2
    order.append(name)

  visit(entry)
  parts = ["const modules = {};"]
  for name in order:
    text = sources[name]
    exported = [m.group(2) for m in _EXPORT.finditer(text)]
    body = _IMPORT.sub(lambda m: "const {" + m.group(1).replace(" as ", ": ") + "} = modules." + m.group(2) + ";",
                       text)
    body = _EXPORT.sub(lambda m: m.group(1) + " " + m.group(2), body)
    parts.append(f"modules.{name} = (() => {{\n{body}\nreturn {{{', '.join(exported)}}};\n}})();")
  # without comment lines and indentation (a fifth of the size; no module has a multi-line string literal)
  out = "\n".join(t for t in (line.strip() for line in "\n".join(parts).split("\n")) if t and not t.startswith("//"))
  if "`" in "".join(line for line in out.split("\n") if line.count("`") % 2):
    raise ExportError("a multi-line template literal in the UI: the bundler cannot strip indentation")
  if re.search(r"</script|<!--", out, re.I):
    raise ExportError("the UI's source contains '</script' or '<!--', which cannot be inlined")
  return out


# ---- redaction

def _hash8(s: str) -> str:
  return hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def redact_path(path: Any, cwd: str | None) -> Any:
  """A file path relative to the trace's working directory when inside it, else its folder hashed."""
  if not isinstance(path, str) or not path:
    return path
  if cwd and (path == cwd or path.startswith(cwd.rstrip("/") + "/")):
    return os.path.relpath(path, cwd)
  head, tail = os.path.split(path)
  return f"<{_hash8(head)}>/{tail}" if head else tail


def _walk_files(obj: Any, fix: Any) -> Any:
  """Every string under a key named `file`, anywhere in an answer, through fix."""
  if isinstance(obj, dict):
    return {k: (fix(v) if k == "file" else _walk_files(v, fix)) for k, v in obj.items()}
  if isinstance(obj, list):
    return [_walk_files(v, fix) for v in obj]
  return obj


class Redactor:
  """Applies the chosen redactions to API answers."""

  def __init__(self, what: Iterable[str], meta: dict | None) -> None:
    self.what = set(what)
    bad = self.what - set(REDACTABLE)
    if bad:
      raise ExportError(f"cannot redact {', '.join(sorted(bad))}: choose from {', '.join(REDACTABLE)}")
    self.cwd = (meta or {}).get("cwd") if isinstance((meta or {}).get("cwd"), str) else None

  def answer(self, obj: Any) -> Any:
    if "paths" in self.what:
      obj = _walk_files(obj, lambda p: redact_path(p, self.cwd))
    return obj

  def meta(self, meta: dict | None) -> dict | None:
    if meta is None:
      return None
    m = dict(meta)
    if "argv" in self.what:
      m["argv"] = []
    if "host" in self.what:
      for k in ("host", "pid", "user", "cwd"):
        m.pop(k, None)
    elif "paths" in self.what and isinstance(m.get("cwd"), str):
      m["cwd"] = "."
    return m

  def entry(self, entry: dict) -> dict:
    """The trace's entry (/api/traces): its meta, and how the program ended (the traceback's source lines are the
    user's source; its one-line text names the user's file, as a path the answers' walk redacts)."""
    ex = entry.get("exit")
    if ex is not None:
      if "source" in self.what:
        ex = {**ex, "traceback": [{**f, "text": None} for f in ex["traceback"]]}
      if "paths" in self.what:  # (the walk of every answer redacts the fields named `file` themselves, later)
        ex = {**ex, "text": exit_text(_walk_files(ex, lambda p: redact_path(p, self.cwd)))}
    return {**entry, "meta": self.meta(entry["meta"]), "exit": ex}

  def pattern(self, pat: dict) -> dict:
    return {**pat, "src": None, "html": ""} if "source" in self.what else pat

  def kernel(self, body: dict) -> dict:
    if "source" in self.what:
      return {**body, "sources": []}
    # the Source panel shows plain text where a source has no html: its markup would triple the export's size
    return {**body, "sources": [{**src, "html": None} for src in body["sources"]]}

  def kernels(self, ks: list[dict]) -> list[dict]:
    return [{**k, "sources": []} for k in ks] if "source" in self.what else ks


# ---- compact graphs (the shim rebuilds the API's answers)

class GraphPacker:
  """A graph node as [id, x, y, created] with its fixed fields once per id (per rewrite for replay-made ids), an edge
  as [src, dst, index] when it runs straight from center to center, else [src, dst, index, points]."""

  def __init__(self, nodes: Any) -> None:
    self.nodes = nodes  # the trace's node getter (sources of graph nodes are graph nodes: asked only as a fallback)
    self.statics: dict[int, list] = {}
    self.graphs: list[dict] = []  # distinct step-0 graphs
    self._graph_ids: dict[str, int] = {}

  def _node(self, n: dict, fresh: dict[int, list]) -> list:
    table = fresh if n["id"] >= FRESH_BASE else self.statics
    fixed = [n[k] for k in STATIC]
    if table.setdefault(n["id"], fixed) != fixed:
      raise ExportError(f"node {n['id']} has two different forms in the API's graphs")
    return [n["id"], n["x"], n["y"], n["created"]]

  @staticmethod
  def _edge(e: dict, pos: dict[int, list]) -> list:
    pts = e["points"]
    if straight(pts, pos.get(e["src"]), pos.get(e["dst"])):
      return [e["src"], e["dst"], e["index"]]
    return [e["src"], e["dst"], e["index"], pts]

  def rewrite(self, g0: dict, deltas: Iterable[dict], rules: dict[int, dict]) -> dict:
    """A rewrite's graphs: its step-0 graph (an index into self.graphs: equal graphs are stored once) and its deltas,
    without what the shim derives: the in-edges of removed nodes, `removed` when it names the removed nodes, and a
    match's rule when it is its pattern's (rules: pattern id -> {file, line, name})."""
    fresh: dict[int, list] = {}
    pos = {n["id"]: [n["x"], n["y"]] for n in g0["nodes"]}
    graph = {**g0, "nodes": [self._node(n, fresh) for n in g0["nodes"]],
             "edges": [self._edge(e, pos) for e in g0["edges"]]}
    del graph["rewrite"]
    key = json.dumps(graph, sort_keys=True)
    index = self._graph_ids.setdefault(key, len(self.graphs))
    if index == len(self.graphs):
      self.graphs.append(graph)
    out = []
    for d in deltas:
      gone = set(d["nodes_removed"])
      for nid in gone:
        pos.pop(nid, None)
      pos.update((n["id"], [n["x"], n["y"]]) for n in d["nodes_added"])
      pos.update((int(nid), xy) for nid, xy in d["nodes_moved"].items())
      packed = {**d, "nodes_added": [self._node(n, fresh) for n in d["nodes_added"]],
                "edges_added": [self._edge(e, pos) for e in d["edges_added"]],
                "edges_removed": [e for e in d["edges_removed"] if e[1] not in gone]}
      if set(d["removed"]) == gone and len(d["removed"]) == len(gone):
        packed["removed"] = None
      m = d["match"]
      if m is not None and m.get("rule") == rules.get(m.get("pattern")):
        packed["match"] = {k: v for k, v in m.items() if k != "rule"}
      out.append(packed)
    return {"g0": index, "deltas": out, "fresh": fresh}


# ---- collecting the answers

def _kept_contexts(contexts: list[dict], names: list[str] | None) -> tuple[set[int], set[int]]:
  """(contexts shown, contexts whose rewrites and kernel are included): the named ones with their descendants, and
  their ancestors for the tree."""
  if not names:
    ids = {c["id"] for c in contexts}
    return ids, ids
  unknown = set(names) - {c["name"] for c in contexts}
  if unknown:
    raise ExportError(f"no context named {', '.join(repr(n) for n in sorted(unknown))} in the trace")
  full: set[int] = set()
  for c in contexts:  # a parent begins before its children
    if c["name"] in names or c["parent"] in full:
      full.add(c["id"])
  by_id = {c["id"]: c for c in contexts}
  shown = set(full)
  for cid in full:
    p = by_id[cid]["parent"]
    while p is not None and p in by_id and p not in shown:
      shown.add(p)
      p = by_id[p]["parent"]
  return shown, full


def collect(api: OfflineApi, names: list[str] | None = None, redact: Iterable[str] = (),
            derive_edges: bool = True) -> dict:
  """Everything the shim serves: API answers by path, graphs as step 0 plus per-step deltas, and the node table.
  derive_edges: leave out the edges the shim can make (leave_out_derived_edges)."""
  t = api.t
  tr = api.trace
  red = Redactor(redact, tr.meta)
  answers: dict[str, Any] = {}
  base = f"/api/traces/{t}"
  contexts = api.trace_get("contexts")
  shown, full = _kept_contexts(contexts, names)
  contexts = [c if c["id"] in full else {**c, "rewrites": []} for c in contexts if c["id"] in shown]
  answers[f"{base}/contexts"] = contexts
  graphs: dict[str, Any] = {}
  pack = GraphPacker(tr.nodes.get)
  patterns: set[int] = set()
  rules: dict[int, dict] = {}
  for c in contexts:
    for entry in c["rewrites"]:
      r = entry["id"]
      try:
        detail = api.trace_get(f"rewrites/{r}")
      except OfflineError:  # one the viewer cannot serve either (a negative id, say): the page says so as it would
        continue
      answers[f"{base}/rewrites/{r}"] = detail
      for p in {st["pattern"] for st in detail["steps"]} - patterns:
        patterns.add(p)
        try:
          pat = api.trace_get(f"patterns/{p}")
        except OfflineError:
          continue
        answers[f"{base}/patterns/{p}"] = red.pattern(pat)
        rules[p] = {"file": pat["file"], "line": pat["line"], "name": pat["name"]}
      n = len(detail["steps"])
      graphs[str(r)] = pack.rewrite(api.trace_get(f"rewrites/{r}/graph?step=0"),
                                    (api.trace_get(f"rewrites/{r}/delta?from={k - 1}&to={k}") for k in range(1, n + 1)),
                                    rules)
  ks = [k for k in api.trace_get("kernels") if k["ctx"] in full]
  answers[f"{base}/kernels"] = red.kernels(ks)
  for k in ks:
    answers[f"{base}/contexts/{k['ctx']}/kernel"] = red.kernel(api.trace_get(f"contexts/{k['ctx']}/kernel"))
  answers[f"{base}/runs"] = [r for r in api.trace_get("runs") if r["ctx"] in full]
  answers[f"{base}/runs/kernels"] = api.trace_get("runs/kernels")  # (the Runs and Summary panels': whole-trace sums)
  answers[f"{base}/summary"] = api.trace_get("summary")
  answers[f"{base}/timeline"] = _timeline(api.trace_get("timeline"), full)
  entry = api.get("/api/traces")[0]
  answers["/api/traces"] = [red.entry(entry)]
  answers["/api/metrics"] = api.get("/api/metrics")  # the page sizes collapsed boxes by them
  answers = {k: red.answer(v) for k, v in answers.items()}
  graphs = {k: red.answer(v) for k, v in graphs.items()}
  nodes = {}  # the trace's nodes that no graph holds (the others' fields are in pack.statics)
  for nid in tr.nodes.ids():
    if nid not in pack.statics:
      op, dtype, arg, src = tr.nodes.get(nid)  # type: ignore[misc]
      nodes[nid] = [op, dtype, arg, list(src), label(op, dtype, arg)]
  data = {"format": 1, "trace": t, "answers": answers, "graphs": graphs, "g0": red.answer(pack.graphs),
          "statics": red.answer(pack.statics), "nodes": nodes,
          "redacted": sorted(red.what), "contexts_only": sorted(names) if names else None}
  return leave_out_derived_edges(data) if derive_edges else data


def leave_out_derived_edges(data: dict) -> dict:
  """Where a graph's edges (a step-0 graph's, or those a step added) are exactly the in-edges of its nodes (those the
  step added), source by source, as they always are, leave them out: the shim makes them from the nodes' `src`, and
  `bent` keeps those that do not run straight, by position: [k, r], their points between the two nodes' centers
  `routes[r]` (one route is often drawn again in later steps and rewrites, further apart than deflate's 32 KB window
  reaches). The edges were about half the graphs' compressed bytes: the demo's page went from 13.4 to 7.9 times its
  trace (bench/bench_export_size.py)."""
  statics = data["statics"]
  routes: dict[str, int] = {}

  def route(points: list) -> int:
    return routes.setdefault(json.dumps(points, separators=(",", ":")), len(routes))

  def bend(k: int, e: list, pos: dict) -> list[int]:
    """[k, r]: edge k's points are its source's center, routes[r], its user's center, as they nearly always are;
    else [k, r, 1]: its points are routes[r]."""
    pts = e[3]
    if len(pts) >= 2 and pts[0] == pos.get(e[0]) and pts[-1] == pos.get(e[1]):
      return [k, route(pts[1:-1])]
    return [k, route(pts), 1]

  def strip(holder: dict, key: str, fresh: dict, pos: dict) -> None:
    edges, nodes = holder[key], holder["nodes" if key == "edges" else "nodes_added"]
    derived = []
    for n in nodes:
      fixed = (fresh if n[0] >= FRESH_BASE else statics).get(n[0])
      if fixed is None:
        return
      derived += ([s, n[0], i] for i, s in enumerate(fixed[STATIC.index("src")]))
    if derived == [e[:3] for e in edges]:
      del holder[key]
      holder["bent"] = [bend(k, e, pos) for k, e in enumerate(edges) if len(e) > 3]

  for g in data["g0"]:  # (a step-0 graph holds trace nodes only: replay makes the others at later steps)
    strip(g, "edges", {}, {n[0]: [n[1], n[2]] for n in g["nodes"]})
  for r in data["graphs"].values():
    pos = {n[0]: [n[1], n[2]] for n in data["g0"][r["g0"]]["nodes"]}
    for d in r["deltas"]:  # (the places at the step, as GraphPacker.rewrite tracks them)
      for nid in d["nodes_removed"]:
        pos.pop(nid, None)
      pos.update((n[0], [n[1], n[2]]) for n in d["nodes_added"])
      pos.update((int(nid), list(xy)) for nid, xy in d["nodes_moved"].items())
      strip(d, "edges_added", r["fresh"], pos)
  data["routes"] = [json.loads(k) for k in routes]
  return data


def _timeline(tl: dict, keep: set[int]) -> dict:
  """The timeline of the kept contexts only."""
  out = dict(tl)
  out["contexts"] = [c for c in tl["contexts"] if c["id"] in keep]
  out["compiles"] = [c for c in tl["compiles"] if c["ctx"] in keep]
  out["runs"] = [r for r in tl["runs"] if r["ctx"] in keep]
  rw = tl["rewrites"]
  idx = [i for i, c in enumerate(rw["ctx"]) if c in keep]
  out["rewrites"] = {k: (v if not isinstance(v, list) or k == "names" else [v[i] for i in idx]) for k, v in rw.items()}
  return out


# ---- the page

def _sha256(text: str) -> str:
  return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def _script_json(obj: Any) -> str:
  """JSON safe inside a <script> element: no `<`, `>` or `&` (so no `</script>`), no line separators."""
  text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
  return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def ui_module() -> str:
  """The text of the page's module: the export's scripts, then the UI's bundle."""
  return "\n".join(p.read_text(encoding="utf-8") for p in SHIM) + "\n" + bundle(package_dir("static"))


def render(data: dict, source_name: str) -> str:
  """The HTML page for collected data."""
  static = package_dir("static")
  page = (package_dir("templates") / "index.html").read_text(encoding="utf-8")
  script = ui_module()
  boot = BOOT.read_text(encoding="utf-8")
  css = (static / "style.css").read_text(encoding="utf-8")
  if "</style" in css.lower():
    raise ExportError("static/style.css contains '</style', which cannot be inlined")
  icon = _FAVICON + base64.b64encode((static / "favicon.svg").read_bytes()).decode()
  csp = (f"default-src 'none'; script-src {_sha256(boot)} {_sha256(script)}; style-src {_sha256(css)}; img-src data:; "
         "connect-src 'none'; font-src 'none'; media-src 'none'; frame-src 'none'; worker-src 'none'; "
         "object-src 'none'; base-uri 'none'; form-action 'none'")
  blob = _script_json(payload(data, script))
  head = re.search(r'<meta http-equiv="Content-Security-Policy"\s+content="[^"]*">', page)
  if head is None:
    raise ExportError("templates/index.html: no Content-Security-Policy meta tag to replace")
  tag = f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp, quote=False)}">'
  page = page[:head.start()] + tag + page[head.end():]
  swaps = [
    ('<html lang="en">', '<html lang="en" data-socketio="no" data-export="yes">'),
    ('<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">',
     f'<link rel="icon" href="{icon}" type="image/svg+xml">'),
    ('<link rel="stylesheet" href="/static/style.css">', f"<style>{css}</style>"),
    ('<script src="/static/boot.js"></script>', ""),  # (the page's early /api/boot: none here)
    ('<script type="module" src="/static/app.js"></script>',
     f'<script type="application/json" id="tinyviz-export">{blob}</script>\n'
     f'  <script type="module">{boot}</script>'),
    ("<title>tinyviz</title>", f"<title>{html.escape(source_name)} - tinyviz export</title>"),
    ('<div id="banner" class="banner" hidden></div>',
     f'<div id="export-note" class="banner">{html.escape(note(data, source_name))}</div>\n'
     '  <div id="banner" class="banner" hidden></div>'),
  ]
  for old, new in swaps:
    if old not in page:
      raise ExportError(f"templates/index.html: {old!r} not found")
    page = page.replace(old, new, 1)
  page = re.sub(r'\s*<link rel="modulepreload" href="[^"]*">', "", page)  # the modules are inline
  left = re.search(r'\b(?:src|href)="(?!data:)[^"]*"', page)
  if left:
    raise ExportError(f"templates/index.html loads {left.group()}: the export would not be self-contained")
  return page


def _digits(text: str) -> dict:
  """UTF-8 text deflated and written in base-85 digits (export_boot.js inflates it)."""
  raw = zlib.compress(text.encode("utf-8"), 9)
  return {"n": len(raw), "data": base64.b85encode(raw, pad=True).decode("ascii").translate(_B85)}


def payload(data: dict, ui: str) -> dict:
  """The embedded block: the UI's module (its hash in the page's policy) and collect()'s data packed
  (export_pack.py), each deflated and in base-85 digits (the UI's 190 KB of script take 76 KB so)."""
  return {"format": 2, "encoding": "deflate+base85", "ui": _digits(ui),
          "data": _digits(json.dumps(pack_data(data), separators=(",", ":")))}


def note(data: dict, source_name: str) -> str:
  """The line the page shows above the views: what this file is and what was left out."""
  red = ", ".join(data["redacted"]) if data["redacted"] else "nothing"
  only = f"; only contexts {', '.join(data['contexts_only'])}" if data["contexts_only"] else ""
  return (f"Read-only export of {source_name} ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC); "
          f"redacted: {red}{only}")


def export(path: str | os.PathLike, out: str | os.PathLike, names: list[str] | None = None,
           redact: Iterable[str] = ()) -> dict:
  """Write the export of the trace at path to out; returns {bytes, trace_bytes, redacted}."""
  with OfflineApi(path) as api:
    data = collect(api, names, redact)
  name = Path(path).name
  if "paths" in data["redacted"]:
    name = redact_path(name, None)
  page = render(data, name)
  Path(out).write_text(page, encoding="utf-8")
  return {"bytes": len(page.encode("utf-8")), "trace_bytes": os.path.getsize(path), "redacted": data["redacted"]}


def run(args: Any) -> int:
  """The `export` command."""
  what = [w.strip() for w in (args.redact or "").split(",") if w.strip()]
  try:
    got = export(args.file, args.output, args.context, what)
  except ExportError as e:
    print(f"export: {e}")
    return 2
  print(f"{args.output}: {got['bytes']} bytes ({got['bytes'] / max(1, got['trace_bytes']):.2f}x the trace); "
        f"redacted: {', '.join(got['redacted']) or 'nothing'}")
  return 0
