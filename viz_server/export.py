"""`export FILE -o out.html`: one self-contained HTML file showing a trace read-only, opened from disk with no server.

The file holds the viewer's own UI (static/*.js bundled into one inline module, static/style.css inline) and the API
answers the UI asks for, precomputed through the API itself (viz_server/offline.py; a rewrite's steps straight from its
StepGraphs as compact deltas, so a step costs what it changed: GraphPacker.rewrite), packed (viz_server/export_pack.py)
and embedded deflated and base-85 encoded in a <script type="application/json"> block (no `<`, `>` or `&` can appear
in it, so no trace string can end the block). A shim (viz_server/export_shim.js, after export_hash.js and
export_unpack.js) answers static/api.js's requests from that data: a rewrite's graph at any step is rebuilt from its
step-0 graph and one delta per step; diffs are printed with structural hashes the page computes. A
Content-Security-Policy meta tag allows only the page's own inline script and style (by hash) and no connection at all.
See "Trace tools" in docs/architecture.md."""
from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import os
import posixpath
import re
import secrets
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from viz_server.app import package_dir
from viz_server.export_pack import FIELDS as STATIC
from viz_server.export_pack import FRESH_BASE
from viz_server.export_pack import pack as pack_data
from viz_server.graphview import label, straight
from viz_server.offline import OfflineApi, OfflineError

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

# Every string of the export is redacted by what it holds, not by the field it is in (an error's text, a rule's source,
# generated code, a traceback, argv, call sites...): an absolute or home-relative path anywhere in a text, and with
# `host` the user's name and the host's. A folder becomes an HMAC-SHA256 token under a random key drawn per export
# and never written, so equal folders share a token within one export but no guessed folder can be checked against it.
_TOKEN_HEX = 12
_TOKEN = re.compile(rf"<[0-9a-f]{{{_TOKEN_HEX}}}>")
_C = r"[^\s/\\'\"`<>|:;,()\[\]{}*?=&$!]"  # a character of a path's component (a path ends at a space, quote, `:`...)
# a URL (kept, unless it is a file:// one), or a path starting after a delimiter (not inside a relative path, not
# right after a token: redacting is idempotent); `~` or `~user` begins a home-relative one
_PATHS = re.compile(rf"(?P<url>[A-Za-z][\w+.-]*://[^\s'\"`<>]*)"
                    rf"|(?:^|(?<=[\s'\"`(\[{{=,;:|>]))(?<!{_TOKEN.pattern})(?P<path>(?:~[\w.-]*)?/+{_C}+(?:/+{_C}+)*/?)")
_FILE_NAME = re.compile(r"[^.].*\.[A-Za-z0-9]{1,8}")  # a basename kept after its folder's token
_HOMES = ("/home", "/Users", "/var/home", "/export/home", "/root")
_PROCESS_KEY = secrets.token_bytes(32)  # redact_path's, where no Redactor is at hand


def _home_user(path: str | None) -> str | None:
  """The user whose home folder path is in (`/home/NAME/...`), if it is in one."""
  parts = (path or "").split("/")
  return parts[2] if len(parts) > 2 and "/".join(parts[:2]) in _HOMES[:4] and parts[2] else None


class Redactor:
  """Applies the chosen redactions to API answers: fields by kind (meta, sources) and every string by what it holds
  (string); key: the HMAC key of folder tokens (a fresh random one by default: tokens differ between exports)."""

  def __init__(self, what: Iterable[str], meta: dict | None, key: bytes | None = None) -> None:
    self.what = set(what)
    bad = self.what - set(REDACTABLE)
    if bad:
      raise ExportError(f"cannot redact {', '.join(sorted(bad))}: choose from {', '.join(REDACTABLE)}")
    meta = meta or {}
    cwd = meta.get("cwd") if isinstance(meta.get("cwd"), str) else None
    self.cwd = cwd
    # paths below the program's working directory stay readable relative to it (compiler/rewrite.py), unless it is
    # too near the root for that to hide anything
    self._root = posixpath.normpath(cwd) if cwd and cwd.startswith("/") and posixpath.normpath(cwd).count("/") >= 2 \
      else None
    self._key = key if key is not None else secrets.token_bytes(32)
    self._cache: dict[str, str] = {}
    names: dict[str, str] = {}
    if "host" in self.what:
      host = meta.get("host") if isinstance(meta.get("host"), str) else ""
      for n in (host, host.split(".")[0]):
        names.setdefault(n, "<host>")
      for n in (meta.get("user"), _home_user(cwd)):
        if isinstance(n, str):
          names[n] = "<user>"
    names = {n: t for n, t in names.items() if len(n) >= 2}
    # a name of 4 characters or more wherever it is, a shorter one only as a word (longest first)
    self._names = re.compile("|".join(re.escape(n) if len(n) >= 4 else rf"(?<![A-Za-z0-9]){re.escape(n)}(?![A-Za-z0-9])"
                                      for n in sorted(names, key=len, reverse=True))) if names else None
    self._name_token = names

  def token(self, folder: str) -> str:
    digest = hmac.new(self._key, folder.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return f"<{digest[:_TOKEN_HEX]}>"

  def path(self, path: str) -> str:
    """A path relative to the working directory when inside it, else its folder's token and its file name (a name
    with an extension, not a home folder's name; anything else is all token)."""
    norm = posixpath.normpath(path) if path.startswith("/") else path.rstrip("/") or path
    if self._root and (norm == self._root or norm.startswith(self._root + "/")):
      return posixpath.relpath(norm, self._root)
    head, tail = posixpath.split(norm)
    if head and _FILE_NAME.fullmatch(tail) and head not in _HOMES:
      return f"{self.token(head)}/{tail}"
    return self.token(norm)

  def _path_match(self, m: re.Match) -> str:
    if m.group("url") is not None:
      url = m.group("url")
      if url[:7].lower() == "file://" and url[7:8] == "/":
        return url[:7] + self.path(url[7:])
      return url
    return self.path(m.group("path"))

  def string(self, s: str) -> str:
    """s with every path (`paths`) and the user's and host's names (`host`) in it replaced by tokens."""
    got = self._cache.get(s)
    if got is not None:
      return got
    out = s
    if "paths" in self.what and ("/" in out or "~" in out):
      out = _PATHS.sub(self._path_match, out)
    if self._names is not None and self._names.search(out):  # (not inside a folder's token)
      pieces = _TOKEN.split(out)
      toks = _TOKEN.findall(out)
      pieces = [self._names.sub(lambda m: self._name_token[m.group()], p) for p in pieces]
      out = "".join(p + (toks[i] if i < len(toks) else "") for i, p in enumerate(pieces))
    if len(s) <= 4096 and len(self._cache) < 1 << 17:
      self._cache[s] = out
    return out

  def answer(self, obj: Any) -> Any:
    """obj with every string in it, dict keys too, through string (a copy; a loop, not recursion: any depth)."""
    if not self.what & {"paths", "host"}:
      return obj
    if isinstance(obj, str):
      return self.string(obj)
    if not isinstance(obj, (list, tuple, dict)):
      return obj
    top: list[Any] = [None]
    todo: list[tuple[Any, Any, Any]] = [(obj, top, 0)]
    while todo:
      src, parent, at = todo.pop()
      out: Any
      if isinstance(src, dict):
        out = {}
        for k, v in src.items():
          k = self.string(k) if isinstance(k, str) else k
          out[k] = self.string(v) if isinstance(v, str) else v
          if isinstance(v, (list, tuple, dict)):
            todo.append((v, out, k))
      else:
        out = list(src)
        for i, v in enumerate(out):
          if isinstance(v, str):
            out[i] = self.string(v)
          elif isinstance(v, (list, tuple, dict)):
            todo.append((v, out, i))
      parent[at] = out
    return top[0]

  def data(self, data: dict) -> dict:
    """collect()'s data with every string redacted, but for the answers' own URLs."""
    return {k: ({u: self.answer(a) for u, a in v.items()} if k == "answers" else self.answer(v))
            for k, v in data.items()}

  def meta(self, meta: dict | None) -> dict | None:
    if meta is None:
      return None
    m = dict(meta)
    if "argv" in self.what:
      m["argv"] = []
    if "host" in self.what:
      for k in ("host", "pid", "user", "cwd"):
        m.pop(k, None)
    return m

  def entry(self, entry: dict) -> dict:
    """The trace's entry (/api/traces): its meta, and how the program ended (the traceback's source lines are the
    user's source; its paths and names go with every other string's)."""
    ex = entry.get("exit")
    if ex is not None and "source" in self.what:
      ex = {**ex, "traceback": [{**f, "text": None} for f in ex["traceback"]]}
    return {**entry, "meta": self.meta(entry["meta"]), "exit": ex}

  def pattern(self, pat: dict) -> dict:
    if "source" in self.what:
      return {**pat, "src": None, "html": ""}
    # markup could split a path or a name across its spans: the Step panel shows the redacted source as plain text
    return {**pat, "html": None} if self.what & {"paths", "host"} else pat

  def kernel(self, body: dict) -> dict:
    if "source" in self.what:
      return {**body, "sources": []}
    # the Source panel shows plain text where a source has no html: its markup would triple the export's size
    return {**body, "sources": [{**src, "html": None} for src in body["sources"]]}

  def kernels(self, ks: list[dict]) -> list[dict]:
    return [{**k, "sources": []} for k in ks] if "source" in self.what else ks


def redact_path(path: Any, cwd: str | None, key: bytes | None = None) -> Any:
  """A string's paths redacted as an export's are (Redactor.string), under key (else one key for this process)."""
  if not isinstance(path, str) or not path:
    return path
  return Redactor(("paths",), {"cwd": cwd}, _PROCESS_KEY if key is None else key).string(path)


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
    pts = e.get("points")  # (none: a compact answer's straight edge)
    if pts is None or straight(pts, pos.get(e["src"]), pos.get(e["dst"])):
      return [e["src"], e["dst"], e["index"]]
    return [e["src"], e["dst"], e["index"], pts]

  def _fixed(self, nid: int, fresh: dict[int, list]) -> list | None:
    return (fresh if nid >= FRESH_BASE else self.statics).get(nid)

  def _like(self, n: dict, fresh: dict[int, list], ops: dict[int, str]) -> dict:
    """A compact delta's rebuilt node {id, like, src, x, y, created} as the full answer has it: like's fields (the
    same op, dtype and arg) with its own sources, and consts among them (ops: the op of each node the same step
    added, which the tables do not hold yet)."""
    fixed = self._fixed(n["like"], fresh)
    if fixed is None:
      raise ExportError(f"node {n['id']} is rebuilt from node {n['like']}, which no graph of the rewrite holds")
    got = dict(zip(STATIC, fixed))
    consts = [s for s in n["src"] if (ops[s] if s in ops else (self._fixed(s, fresh) or ("",))[0]) == "CONST"]
    return {"id": n["id"], **got, "src": list(n["src"]), "consts": consts, "x": n["x"], "y": n["y"],
            "created": n["created"]}

  def rewrite(self, g0: dict, deltas: Iterable[dict], rules: dict[int, dict]) -> dict:
    """A rewrite's graphs: its step-0 graph (an index into self.graphs: equal graphs are stored once) and its deltas,
    without what the shim derives: the in-edges of removed nodes, `removed` when it names the removed nodes, and a
    match's rule when it is its pattern's (rules: pattern id -> {file, line, name}). A delta may be compact (the
    API's `compact=1`): a rebuilt node's in-edges it does not list are its old node's (`like`), made here from the
    packed edges of the step before, so the cost of a step is what it changed, not the routes it kept (issue 30: a
    gradient's every step rebuilt ~200 nodes whose long routes were sent, rounded and packed again: 1 MB a step)."""
    fresh: dict[int, list] = {}
    pos = {n["id"]: [n["x"], n["y"]] for n in g0["nodes"]}
    graph = {**g0, "nodes": [self._node(n, fresh) for n in g0["nodes"]],
             "edges": [self._edge(e, pos) for e in g0["edges"]]}
    del graph["rewrite"]
    ins: dict[int, dict[int, list]] = {}  # node -> its packed in-edges by index, at the step packed last
    for e in graph["edges"]:
      ins.setdefault(e[1], {})[e[2]] = e
    key = json.dumps(graph, sort_keys=True)
    index = self._graph_ids.setdefault(key, len(self.graphs))
    if index == len(self.graphs):
      self.graphs.append(graph)
    out = []
    for d in deltas:
      gone = set(d["nodes_removed"])
      before = {nid: pos.get(nid) for nid in (*gone, *map(int, d["nodes_moved"]))}  # (where the old routes ran)
      for nid in gone:
        pos.pop(nid, None)
      pos.update((n["id"], [n["x"], n["y"]]) for n in d["nodes_added"])
      pos.update((int(nid), xy) for nid, xy in d["nodes_moved"].items())
      ops = {n["id"]: n["op"] if "like" not in n else (self._fixed(n["like"], fresh) or ("",))[0]
             for n in d["nodes_added"]}
      nodes = [self._like(n, fresh, ops) if "like" in n else n for n in d["nodes_added"]]
      listed = {(e["dst"], e["index"]): self._edge(e, pos) for e in d["edges_added"]}
      for n in d["nodes_added"]:
        if "like" in n:
          self._inherit(n, ins.get(n["like"], {}), listed, pos, before)
      for nid in gone:
        ins.pop(nid, None)
      edges = [listed[k] for k in sorted(listed)]  # (the full answer's order: by node, then index)
      for e in edges:
        ins.setdefault(e[1], {})[e[2]] = e
      packed = {**d, "nodes_added": [self._node(n, fresh) for n in nodes], "edges_added": edges,
                "edges_removed": [e for e in d["edges_removed"] if e[1] not in gone]}
      if set(d["removed"]) == gone and len(d["removed"]) == len(gone):
        packed["removed"] = None
      m = d["match"]
      if m is not None and m.get("rule") == rules.get(m.get("pattern")):
        packed["match"] = {k: v for k, v in m.items() if k != "rule"}
      out.append(packed)
    return {"g0": index, "deltas": out, "fresh": fresh}

  @staticmethod
  def _inherit(n: dict, old: dict[int, list], listed: dict, pos: dict, before: dict) -> None:
    """The in-edges of rebuilt node n that a compact delta leaves out: the route of its old node's edge at the same
    index (from that edge's source's center to the old node's, when it ran straight)."""
    nid, like = n["id"], n["like"]
    for i, s in enumerate(n["src"]):
      if (nid, i) in listed:
        continue
      e = old.get(i)
      if e is None:  # (the API lists every in-edge the old node cannot give)
        raise ExportError(f"node {nid}'s in-edge {i} is in neither the delta nor its old node {like}")
      pts = e[3] if len(e) > 3 else [before[e[0]] if e[0] in before else pos.get(e[0]), before.get(like)]
      listed[(nid, i)] = [s, nid, i] if straight(pts, pos.get(s), pos.get(nid)) else [s, nid, i, pts]


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


class Work:
  """What an export did, counted (tests bound it by the trace's records; the progress lines print it)."""

  def __init__(self) -> None:
    self.steps = 0  # deltas packed
    self.nodes = 0  # nodes those deltas added (a rebuilt node counts: it is sent)
    self.edges = 0  # edges they listed (a compact delta lists those its rebuilt nodes' old nodes cannot give)


PROGRESS_STEPS = 500  # a progress line every this many steps packed (about a second of work on the 2-core machine)


def _deltas(view: Any, n: int, work: Work, progress: Callable[[Work], None] | None) -> Iterator[dict]:
  """Steps 1..n of a rewrite as compact deltas, each from the step before (the viewer's own answers, without its
  JSON round trip: the page gets them packed anyway)."""
  for k in range(1, n + 1):
    d = view.delta(k - 1, k, compact=True)
    work.steps += 1
    work.nodes += len(d["nodes_added"])
    work.edges += len(d["edges_added"])
    if progress is not None and work.steps % PROGRESS_STEPS == 0:
      progress(work)
    yield d


def collect(api: OfflineApi, names: list[str] | None = None, redact: Iterable[str] = (),
            derive_edges: bool = True, work: Work | None = None,
            progress: Callable[[Work], None] | None = None) -> dict:
  """Everything the shim serves: API answers by path, graphs as step 0 plus per-step deltas, and the node table.
  derive_edges: leave out the edges the shim can make (leave_out_derived_edges); work: counts what was done;
  progress: called with it every PROGRESS_STEPS steps."""
  work = work if work is not None else Work()
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
  by_root: dict[int, int] = {}  # a rewrite's input root -> its step-0 graph's index in pack.graphs
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
      n, root = len(detail["steps"]), detail["root"]
      if n == 0 and isinstance(root, int) and root in by_root:
        # a rewrite that matched nothing over a graph already laid out: the step-0 graph is its root's subgraph, laid
        # out afresh, so it is that graph (a third of a training step's rewrites: passes that found nothing to do)
        graphs[str(r)] = {"g0": by_root[root], "deltas": [], "fresh": {}}
        continue
      view = api.view(r)
      graphs[str(r)] = got = pack.rewrite(view.graph(0), _deltas(view, n, work, progress), rules)
      api.forget(r)  # (its replay and layouts: the export holds one rewrite's at a time)
      if isinstance(root, int):
        by_root.setdefault(root, got["g0"])
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
  nodes = {}  # the trace's nodes that no graph holds (the others' fields are in pack.statics)
  for nid in tr.nodes.ids():
    if nid not in pack.statics:
      op, dtype, arg, src = tr.nodes.get(nid)  # type: ignore[misc]
      nodes[nid] = [op, dtype, arg, list(src), label(op, dtype, arg)]
  data = {"format": 1, "trace": t, "answers": answers, "graphs": graphs, "g0": pack.graphs, "statics": pack.statics,
          "nodes": nodes, "redacted": sorted(red.what), "contexts_only": sorted(names) if names else None}
  data = red.data(data)  # (last: every string the export holds, whatever field it is in)
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
           redact: Iterable[str] = (), progress: Callable[[Work], None] | None = None) -> dict:
  """Write the export of the trace at path to out; returns {bytes, trace_bytes, redacted}. progress: see collect."""
  with OfflineApi(path) as api:
    data = collect(api, names, redact, progress=progress)
    name = Redactor(data["redacted"], api.trace.meta).string(Path(path).name)  # (the user's name, say)
  page = render(data, name)
  Path(out).write_text(page, encoding="utf-8")
  return {"bytes": len(page.encode("utf-8")), "trace_bytes": os.path.getsize(path), "redacted": data["redacted"]}


def _progress(work: Work) -> None:
  print(f"export: {work.steps} steps packed ({work.nodes} nodes, {work.edges} edges)", file=sys.stderr, flush=True)


def run(args: Any) -> int:
  """The `export` command (progress lines on stderr when it is a terminal or with --progress)."""
  what = [w.strip() for w in (args.redact or "").split(",") if w.strip()]
  show = getattr(args, "progress", False) or sys.stderr.isatty()
  try:
    got = export(args.file, args.output, args.context, what, progress=_progress if show else None)
  except ExportError as e:
    print(f"export: {e}")
    return 2
  print(f"{args.output}: {got['bytes']} bytes ({got['bytes'] / max(1, got['trace_bytes']):.2f}x the trace); "
        f"redacted: {', '.join(got['redacted']) or 'nothing'}")
  return 0
