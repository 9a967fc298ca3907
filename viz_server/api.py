"""The JSON API (docs/architecture.md, "JSON API"). Every parameter is an int id or a step; none names a file,
except POST /api/traces/follow, which only a local process holding the viewer's control token may call (it is how
`VIZ=1` reuses a running viewer; vztrace/control.py)."""
from __future__ import annotations

import json
import os
from typing import Any

from flask import Blueprint, current_app, jsonify, request

from viz_server import caches, request_args
from viz_server.diff import BaseGetter, DiffError, DiffTooBig, diff_graphs
from viz_server.highlight import highlight
from viz_server.labels import label, label_metrics
from viz_server.peer import client_uid
from viz_server.request_args import (
  ApiError,
  ascii_int,
  check_step,
  compact_arg,
  fail,
  get_rewrite,
  get_trace,
  int_arg,
  json_answer,
  last_step,
  opt_int,
  same_origin,
  store,
  views,
)
from viz_server.rewrite_routes import graph_at, rewrite_detail
from viz_server.stepgraphs import BLOCK, dumps
from viz_server.store import Context, Rewrite, Trace, context_entry, run_entry, shape_colors
from viz_server.summary import kernel_runs_answer, summary
from viz_server.timeline import timeline
from vztrace.control import HEADER as TOKEN_HEADER
from vztrace.control import token_matches
from vztrace.counts import kernel_key
from vztrace.format import TraceFormatError
from vztrace.linemap import record_lines

bp = Blueprint("api", __name__, url_prefix="/api")
APP_NAME = "tinyviz"
LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


# Cost bounds per request (issue 14; the steps replayed: request_args.MAX_STEPS): laying a graph out grows with its
# nodes, and highlighting with its text; past these a request is refused with 413 and says why, or the answer is
# cut and says so, so that no request on a small hostile file costs more than a few seconds. (A graph of more than
# viz_server.cut.MAX_GRAPH_NODES nodes is sent cut to the CUT_NODES nodes around the step's change.)
MAX_SOURCE_CHARS = 256 << 10  # of one source text sent and highlighted (the html is ~10x the text)
MAX_KERNEL_CHARS = 1 << 20  # of all the source texts of one kernel answer
MAX_LIST = 10_000  # opts, beam candidates, runs and errors of one kernel answer


# ---- traces

@bp.get("/ping")
def ping() -> Any:
  return jsonify({"app": APP_NAME, "version": 1, "pid": os.getpid()})


@bp.get("/metrics")
def metrics() -> Any:
  """The label metrics node boxes are sized by and the layout's gaps (also in /api/boot)."""
  return jsonify(label_metrics())


@bp.get("/traces")
def traces() -> Any:
  """Each entry encoded on its own: one trace that cannot be shown must not take the whole list down."""
  dumps = current_app.json.dumps
  parts = []
  for e in store().entries():
    try:
      parts.append(dumps(e))
    except (TypeError, ValueError, RecursionError) as err:
      parts.append(dumps({"id": e.get("id"), "name": str(e.get("name")), "status": "damaged", "meta": None,
                          "damage": {"offset": None, "reason": f"cannot be listed: {type(err).__name__}"},
                          "counts": e.get("counts"), "anomalies": e.get("anomalies")}))
  return current_app.response_class("[" + ",".join(parts) + "]", mimetype="application/json")


def _same_user() -> None:
  """Refuse an upload unless it comes with the control token or from a socket of the user running the viewer (the
  page in their browser): another user of the machine could otherwise fill this user's disk and memory."""
  expected = current_app.extensions["tinyviz"].get("control_token")
  if token_matches(expected, request.headers.get(TOKEN_HEADER)):
    return
  port = request.environ.get("REMOTE_PORT")
  if port is None:  # not over a socket: a caller in this process (a WSGI test client)
    return
  uid = client_uid(request.environ)
  if uid is None or uid != os.getuid():
    fail(403, "uploads are taken only from the user who started the viewer (or with its control token)")


@bp.post("/traces")
def upload() -> Any:
  same_origin()
  _same_user()
  f = request.files.get("file")
  if f is None:
    fail(400, "expected a multipart upload with a field named 'file'")
  try:
    tr = store().add_upload(f.stream, f.filename or "")
  except TraceFormatError as e:
    fail(400, f"not a trace file: {e}")
  with store().lock:
    return jsonify(tr.entry()), 201


def _local_json_request() -> dict:
  """Guard for the endpoints a local process uses: loopback peer, the control token (another user of the machine
  can reach loopback too), JSON body (so a web page cannot send it without a CORS preflight, which this server never
  grants), and no foreign Origin."""
  if request.remote_addr not in LOOPBACK:
    fail(403, "only a process on this machine may do this")
  expected = current_app.extensions["tinyviz"].get("control_token")
  if expected is None:
    fail(404, "this server takes no control requests (only a viewer started by `python -m viz_server` does)")
  if not token_matches(expected, request.headers.get(TOKEN_HEADER)):
    fail(403, "wrong or missing control token (it is in the cache folder of the user who started the viewer)")
  same_origin()
  body = request.get_json(silent=True) if request.is_json else None
  if not isinstance(body, dict):
    fail(400, "expected a JSON object body (Content-Type: application/json)")
  return body


@bp.post("/traces/follow")
def follow() -> Any:
  body = _local_json_request()
  path = body.get("path")
  if not isinstance(path, str) or not os.path.isabs(path):
    fail(400, "'path' must be an absolute path")
  if not os.path.isfile(path):
    fail(404, "no such file")
  try:
    tr = store().follow(path)
  except TraceFormatError:  # no detail: the reader's message quotes the file's first bytes
    fail(400, "not a trace file")
  except OSError as e:
    fail(400, f"cannot read the file: {e.strerror}")
  with store().lock:
    return jsonify(tr.entry())


@bp.post("/shutdown")
def shutdown() -> Any:
  _local_json_request()
  stop = current_app.extensions["tinyviz"].get("shutdown")
  if stop is None:
    fail(404, "this server cannot be stopped from the API")
  resp = jsonify({"ok": True})
  resp.call_on_close(stop)  # once the answer is written: stopping sooner can end the process before it is sent
  return resp


# ---- contexts (a rewrite's steps, graphs and deltas: viz_server/rewrite_routes.py's routes)

@bp.get("/traces/<int:t>/contexts")
def contexts(t: int) -> Any:
  tr = get_trace(t)
  with store().lock:
    return jsonify([context_entry(tr, c) for c in list(tr.contexts.values())])


# ---- the first view in one round trip

def _default_view(contexts: list[dict], ctx: int | None, r: int | None) -> tuple[int | None, int | None]:
  """(context, rewrite) the page shows for a link naming ctx and r (either may be missing or unknown), resolved over
  the contexts' entries as static/app.js does: the first context with rewrites, its first rewrite that changed
  something, else its first."""
  c = next((x for x in contexts if x["id"] == ctx), None) if ctx is not None else None
  if c is None:
    c = next((x for x in contexts if x["rewrites"]), None)
    if c is None:
      return None, None
  rws = c["rewrites"]
  if r is not None and any(x["id"] == r for x in rws):
    return c["id"], r
  pick = next((x for x in rws if x["changed"]), rws[0] if rws else None)
  return c["id"], None if pick is None else pick["id"]


# what a packed boot answer interns of each rewrite entry (_packed_contexts)
INTERNED = ("name", "file")


def _packed_contexts(entries: list[dict]) -> dict | list[dict]:
  """The contexts' entries as `/api/boot?pack=1` sends them (docs: "JSON API"): each rewrite entry a row of its values
  in the order of `keys`, those of `interned` an index into `values`; static/api.js makes the entries again. A GPT
  step's 2,430 rewrite entries were 430 KB of its 509 KB boot answer, mostly the same few file paths over and over.
  Entries whose rewrites do not all have the same keys, or an interned value that is not a string (1 and True would
  be one key of `values`), go as they are."""
  rows = [r for c in entries for r in c["rewrites"]]
  keys = list(rows[0]) if rows else []
  if any(list(r) != keys or not all(type(r[k]) is str for k in INTERNED if k in r) for r in rows):
    return entries
  values: dict[Any, int] = {}
  at = [k in INTERNED for k in keys]

  def row(r: dict) -> list:
    return [values.setdefault(v, len(values)) if i else v for v, i in zip(r.values(), at)]
  contexts = [{**c, "rewrites": [row(r) for r in c["rewrites"]]} for c in entries]
  return {"keys": keys, "interned": [k for k in keys if k in INTERNED], "values": list(values), "contexts": contexts}


@bp.get("/boot")
def boot() -> Any:
  """What the page's first view needs (docs: "JSON API", /api/boot): the trace list; for the trace the link names
  (else the last one) its contexts (packed with pack=1); for the view's rewrite its steps and the graph at the view's
  step. All but the graph is kept for an ended trace (in caches.ANSWERS, under the app's key): the same trace list and
  link make the same answer (a trace that is not live gets no more records), which made anew was ~15-35 ms of the
  server's CPU while the page waited; the graph comes from graph_at each time (kept too, with what asking it tells the
  rewrite's view)."""
  listing = traces().get_data()
  entries = json.loads(listing)
  ids = [e["id"] for e in entries]
  t = opt_int("t")
  linked = t in ids  # the page keeps the rest of the link only for a trace it serves
  t = t if linked else (ids[-1] if ids else None)
  link = (opt_int("ctx"), opt_int("rw"), opt_int("step")) if linked else (None, None, None)
  pack = request.args.get("pack", "0") not in ("0", "", "false")
  tr = store().get(t) if t is not None else None
  key = (current_app.extensions["tinyviz"]["key"], "boot", listing, t, link, pack)
  got = caches.ANSWERS.get(key) if tr is not None and not tr.live else None
  if got is None:
    got = _boot_head(entries, t, tr, link, pack)
    if tr is not None and not tr.live:
      caches.ANSWERS.put(key, got, len(got[0]) + len(listing))
  head, rw_id, step = got
  rw = tr.rewrites.get(rw_id) if tr is not None and rw_id is not None else None
  graph = None
  if rw is not None and step is not None:
    try:
      graph = graph_at(tr, rw, step, compact_arg())
    except ApiError:  # too many steps, say: the page asks for it and shows the error as it would without this answer
      pass
  return json_answer(head + b',"graph":' + (graph if graph is not None else b"null") + b"}")


def _boot_head(entries: list[dict], t: int | None, tr: Trace | None, link: tuple, pack: bool
               ) -> tuple[bytes, int | None, int | None]:
  """The boot answer's JSON without its graph and closing brace, its rewrite and its step (link: the ctx, rw and step
  the link names, each None if it does not)."""
  out: dict[str, Any] = {"traces": entries, "trace": t, "contexts": None, "ctx": None, "rw": None, "rewrite": None,
                         "step": None, "metrics": label_metrics(), "summary": None}
  rw = None
  if tr is not None:
    if link[0] is None and link[1] is None:  # the page lands on the summary panel
      out["summary"] = summary(tr)
    with store().lock:
      out["contexts"] = [context_entry(tr, c) for c in list(tr.contexts.values())]
      out["ctx"], out["rw"] = _default_view(out["contexts"], link[0], link[1])
      rw = tr.rewrites.get(out["rw"]) if out["rw"] is not None else None
      if rw is not None:
        out["rewrite"] = rewrite_detail(rw)
    if pack:
      out["contexts"] = _packed_contexts(out["contexts"])
    if rw is not None:
      out["step"] = min(link[2] or 0, last_step(rw))
  return dumps(out)[:-1], out["rw"], out["step"]


# ---- patterns and nodes

@bp.get("/traces/<int:t>/patterns/<int:p>")
def pattern(t: int, p: int) -> Any:
  tr = get_trace(t)
  pat = tr.patterns.get(p)
  if pat is None:
    fail(404, f"no pattern {p} in trace {t}")
  src = pat["src"] or ""
  shown = src[:MAX_SOURCE_CHARS]  # like a kernel's sources: a rule's source text is cut, and says so
  return jsonify({**pat, "src": shown, "html": highlight(shown, "python"), "chars": len(src),
                  "truncated": len(shown) < len(src)})


@bp.get("/traces/<int:t>/nodes/<int:n>")
def node(t: int, n: int) -> Any:
  tr = get_trace(t)
  got = tr.nodes.get(n)
  if got is None:
    fail(404, f"no node {n} in trace {t}")
  op, dtype, arg, src = got
  out = {"id": n, "op": op, "dtype": dtype, "arg": arg, "src": list(src), "label": label(op, dtype, arg)}
  site = tr.nodes.site(n)
  if site is not None:
    out["site"] = dict(zip(("file", "line", "function"), site))
  return jsonify(out)


ORIGIN_REWRITES = 64  # earlier rewrites searched for where a node was made (each one searched is replayed)
# the nodes of the searched rewrites' input graphs, in all (replaying one resolves its whole input graph first: 64
# rewrites of a 100k-node graph once cost one request 73 s of CPU); the search stops after the rewrite that passes it
ORIGIN_NODES = 200_000


@bp.get("/traces/<int:t>/nodes/<int:n>/origin")
def origin(t: int, n: int) -> Any:
  """Where node n was made, for a node already in the input graph of rewrite `before`: the latest earlier rewrite
  (trace order) whose result holds n although its input did not, and the step of it that added n."""
  tr = get_trace(t)
  if n not in tr.nodes:
    fail(404, f"no node {n} in trace {t}")
  before = int_arg("before", 0)
  with store().lock:
    most = request_args.MAX_STEPS  # (the module's: the bound check_step applies, also where a test lowers it)
    rws = sorted((rw for rw in tr.rewrites.values() if rw.id < before and rw.ended and 0 < rw.matches <= most),
                 key=lambda rw: rw.id, reverse=True)[:ORIGIN_REWRITES]
  total = 0  # steps replayed in all: searching costs at most what one far step does
  for i, rw in enumerate(rws):
    total += rw.matches
    if total > most:
      del rws[i:]
      break
  nodes = 0
  for searched, rw in enumerate(rws, 1):
    if nodes > ORIGIN_NODES:  # the rest is not searched, and the answer says so
      return jsonify({"rewrite": None, "searched": searched - 1, "cut": True})
    rp = views().replay(tr, rw)
    nodes += rp.sizes[0]
    if n not in rp.members(rw.matches):
      continue
    k = rp.created(n, rw.matches)
    if k == 0:  # in that rewrite's input too: made earlier still
      continue
    step = rw.step(k)
    pat = tr.patterns.get(step["pattern"])
    return jsonify({"rewrite": rw.id, "ctx": rw.ctx, "name": rw.name, "step": k,
                    "rule": None if pat is None else pat["name"]})
  return jsonify({"rewrite": None, "searched": len(rws), "cut": False})


# ---- diffs

DIFF_CHAIN = 4 * BLOCK  # B's layout is the main view's if computing it takes at most this many steps' layouts


def _base(tr: Trace, rw: Rewrite, k: int) -> BaseGetter:
  """The main view's layout of step k as the drawn diff's base (docs: "Drawn diff")."""
  all_views = views()
  return lambda: all_views.get(tr, rw).reusable(k, DIFF_CHAIN)


def _point(spec: str | None, which: str) -> tuple[int, Any, str, BaseGetter | None, tuple, bool]:
  """(root, node getter, label, B's layout getter, cache key, final) of a diff POINT: `t:r:k` (k may be `end`) or
  `t:c` (a kernel context's final AST: the end of its last finished rewrite, drawn with that rewrite's last step);
  final: the point's trace has ended, so its graph cannot change."""
  if not spec:
    fail(400, f"missing query parameter {which!r}")
  parts = spec.split(":")
  ints = [None if p == "end" and i == 2 else ascii_int(p) for i, p in enumerate(parts)]
  if len(parts) not in (2, 3) or any(v is None for v in ints[:2]) or (len(parts) == 3 and ints[2] is None
                                                                      and parts[2] != "end"):
    fail(400, f"{which}={spec[:60]!r}: expected trace:rewrite:step or trace:context")
  if len(parts) == 3:
    t, r, k = ints  # type: ignore[misc]
  else:
    t, c = ints  # type: ignore[misc]
  tr = get_trace(t)
  if len(parts) == 3:
    rw = get_rewrite(tr, r)
    key = (t, r, k)
    if k is None and rw.ended and rw.end_root is not None and rw.end_root in tr.nodes:
      return (rw.end_root, tr.nodes.get, f"{tr.name} {rw.name} (rewrite {r}) end", _base(tr, rw, rw.matches), key,
              tr.ended)
    k = rw.matches if k is None else k
    check_step(rw, k)
    rp = views().get(tr, rw).replay
    return rp.root(k), rp.node, f"{tr.name} {rw.name} (rewrite {r}) step {k}", _base(tr, rw, k), key, tr.ended
  ctx = tr.contexts.get(c)
  if ctx is None:
    fail(404, f"no context {c} in trace {t}")
  last = _final_ast(tr, ctx)
  if last is None:
    fail(404, f"context {c} of trace {t} has no finished rewrite")
  root: int = last.end_root  # type: ignore[assignment]  # _final_ast only picks rewrites with an end_root
  return root, tr.nodes.get, f"{tr.name} {ctx.name} (context {c})", _base(tr, last, last.matches), (t, c), tr.ended


def _final_ast(tr: Trace, ctx: Context) -> Rewrite | None:
  with store().lock:
    return tr.final_ast(ctx)


@bp.get("/diff")
def diff() -> Any:
  a = _point(request.args.get("a"), "a")
  b = _point(request.args.get("b"), "b")
  draw = request.args.get("draw", "0") not in ("0", "", "false")
  cache = (views().drawn, (a[4], b[4])) if a[5] and b[5] else None  # ended traces: the drawing cannot change
  try:
    out = diff_graphs(a[:3], b[:3], draw=draw, base=b[3], cache=cache)
  except DiffTooBig as e:
    fail(413, str(e))
  except DiffError as e:
    fail(400, str(e))
  return jsonify({"a": request.args["a"], "b": request.args["b"], **out})


# ---- kernels and runs

def _opt(o: dict) -> dict:
  return {k: o.get(k) for k in ("op", "axis", "arg", "ok", "reason", "shape", "colors", "kname")}


@bp.get("/traces/<int:t>/kernels")
def kernels(t: int) -> Any:
  tr = get_trace(t)
  with store().lock:
    stats = {r["kname"]: r for r in kernel_runs_answer(tr)["kernels"]}  # the kernel's runs in every context
    out = []
    for cid in list(tr.kernels):
      c = tr.contexts[cid]
      out.append({"ctx": cid, "name": c.name, "shape_colors": shape_colors(c), "opts": [_opt(o) for o in c.opts],
                  "n_beam": len(c.beam), "sources": [s["kind"] for s in c.sources],
                  "run": run_entry(c.runs[-1]) if c.runs else None, "callsites": c.callsites,
                  "callsites_more": c.callsites_more,
                  "stats": stats.get(kernel_key(c.runs[-1])) if c.runs else None})
    return jsonify(out)


@bp.get("/traces/<int:t>/contexts/<int:c>/kernel")
def kernel(t: int, c: int) -> Any:
  tr = get_trace(t)
  with store().lock:
    ctx = tr.contexts.get(c)
    if ctx is None:
      fail(404, f"no context {c} in trace {t}")
    beam = [{k: b.get(k) for k in ("round", "opts", "time", "error", "chosen")} for b in ctx.beam[:MAX_LIST]]
    sources = [(s["kind"], s["text"], s.get("compile_s"), s.get("chars"), line_nodes(s))
               for s in ctx.sources[:MAX_LIST]]
    body = {"ctx": c, "name": ctx.name, "shape_colors": shape_colors(ctx),
            "opts": [_opt(o) for o in ctx.opts[:MAX_LIST]], "beam": beam,
            "runs": [run_entry(r) for r in ctx.runs[:MAX_LIST]], "errors": ctx.errors[:MAX_LIST],
            "callsites": ctx.callsites, "callsites_more": ctx.callsites_more, "launch": launch(ctx.sources),
            "cut": {"opts": len(ctx.opts), "beam": len(ctx.beam), "runs": len(ctx.runs), "errors": len(ctx.errors),
                    "sources": len(ctx.sources)}}
  body["cut"] = {k: n for k, n in body["cut"].items() if n > MAX_LIST}  # totals of the lists cut to MAX_LIST
  body["sources"] = _sources(sources, html=request.args.get("html") != "0")
  return jsonify(body)


def launch(sources: list[dict]) -> dict | None:
  """An OpenCL kernel's launch sizes, from its "opencl" source record (format 2.5): {"global": [...], "local": [...]
  or null where the driver picks the work-groups}; None for a kernel without them."""
  def dims(v: Any) -> list | None:
    return [x for x in v if type(x) in (int, str)] if type(v) is list else None
  for s in sources:
    if (gsize := dims(s.get("global_size"))) is not None:
      return {"global": gsize, "local": dims(s.get("local_size"))}
  return None


def line_nodes(src: dict) -> list[list[int]] | None:
  """Per line of a source record, the trace node ids of the UOps it came from (its line map through its `uops`: the
  map it has, or from 2.8 the one its text tells, vztrace.linemap); None for a record without them (before 2.4). A
  position that is no int or names no UOp is left out."""
  lines, uops = record_lines(src), src.get("uops")
  if type(lines) is not list or type(uops) is not list:
    return None
  n = len(uops)
  return [[uops[i] for i in ln if type(i) is int and 0 <= i < n and type(uops[i]) is int] if type(ln) is list else []
          for ln in lines]


def _sources(sources: list[tuple[str, str, Any, int | None, list | None]], html: bool = True) -> list[dict]:
  """The kernel's source texts, each cut to MAX_SOURCE_CHARS and all to MAX_KERNEL_CHARS (`chars`: the whole
  text's length, also where the store kept only its start; `truncated`: whether it was cut); `nodes`: per line shown,
  the node ids it came from (line_nodes; null without a map); `html` the text highlighted, null with html=False
  (`?html=0`: the export, which shows plain text)."""
  out, room = [], MAX_KERNEL_CHARS
  for kind, text, cs, chars, nodes in sources:
    shown = text[:max(0, min(MAX_SOURCE_CHARS, room))]
    room -= len(shown)
    whole = len(text) if chars is None else chars
    if nodes is not None:
      nodes = nodes[:shown.count("\n") + 1]
    out.append({"kind": kind, "text": shown, "html": highlight(shown, kind) if html else None, "compile_s": cs,
                "chars": whole, "truncated": len(shown) < whole, "nodes": nodes})
  return out


@bp.get("/traces/<int:t>/runs")
def runs(t: int) -> Any:
  tr = get_trace(t)
  with store().lock:
    return jsonify([run_entry(r) for r in tr.runs])


@bp.get("/traces/<int:t>/runs/kernels")
def runs_per_kernel(t: int) -> Any:
  """The runs, one row per kernel (viz_server.summary.kernel_runs): count, total, first (cold), median, min."""
  tr = get_trace(t)
  with store().lock:
    return jsonify(kernel_runs_answer(tr))


@bp.get("/traces/<int:t>/summary")
def trace_summary(t: int) -> Any:
  """Where the program's time went (viz_server.summary): the page's landing view."""
  tr = get_trace(t)
  with store().lock:
    return jsonify(summary(tr))


@bp.get("/traces/<int:t>/timeline")
def trace_timeline(t: int) -> Any:
  tr = get_trace(t)
  with store().lock:
    out = timeline(tr)
  return jsonify(out)
