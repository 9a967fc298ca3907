"""The routes of one rewrite in the JSON API (GET /api/traces/<t>/rewrites/<r>, its /graph and /delta;
docs/architecture.md, "JSON API"), beside viz_server/api.py's other routes: they read the request (request_args, which
also answers their errors) and answer from the rewrite's StepGraphs, which the app's views keep."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request

from viz_server.request_args import (
  anchor_arg,
  check_step,
  compact_arg,
  fail,
  get_rewrite,
  get_trace,
  int_arg,
  json_answer,
  last_step,
  store,
  views,
)
from viz_server.stepgraphs import dumps
from viz_server.store import Rewrite, Trace

bp = Blueprint("rewrite_routes", __name__, url_prefix="/api")


def rewrite_detail(rw: Rewrite) -> dict:
  """A rewrite with its steps (the caller holds the store's lock)."""
  steps = [rw.step(k) for k in range(1, last_step(rw) + 1)]
  return {"id": rw.id, "ctx": rw.ctx, "name": rw.name, "file": rw.file, "line": rw.line, "bottom_up": rw.bottom_up,
          "dt": rw.dt, "error": rw.error, "ended": rw.ended, "root": rw.root, "end_root": rw.end_root,
          "steps": steps, "steps_total": rw.matches}


def graph_at(tr: Trace, rw: Rewrite, k: int, compact: bool = False, fresh: bool = False, anchor: int = 0,
             shown: int | None = None, delta: bool = False) -> bytes:
  """The graph answer at step k, encoded (kept in caches.ANSWERS once the rewrite has ended); also /api/boot's.
  fresh: laid out from scratch (the page's re-layout); anchor: the chain of the layout the page shows, which step k
  stays on when one of its layouts is near, else step k is a new anchor: laid out from the layout of the step the
  page shows (`shown`) where that fits, else fresh (docs: "Far jumps"). delta: the page takes the compact=2 delta
  from `shown` where k was laid out from it (StepGraphs.jump_delta: a few KB where the graph is ~1 MB)."""
  answer = _graph_answer(tr, rw, k, compact, fresh, anchor, shown, delta)
  if rw.matches:  # (its steps' replays look nodes up next: the index is built while the page draws this answer)
    tr.nodes.index_ahead()
  return answer


def _graph_answer(tr: Trace, rw: Rewrite, k: int, compact: bool, fresh: bool, anchor: int, shown: int | None,
                  delta: bool) -> bytes:
  """graph_at's answer (see there)."""
  check_step(rw, k)
  all_views = views()
  view = all_views.get(tr, rw)
  if k and k not in view.replay.roots:  # (its marks need step k, computed from k - 1: the cursor goes there once)
    view.replay.step(k)
  view.last_step = k  # no prefetch yet: opening a graph is not stepping (the page asks for the neighbours itself)
  all_views.drop_wish(view)
  view.anchor = k if fresh and not view.big(k) else view.anchor_for(k, anchor)
  if view.anchor == k and k and not fresh and shown is not None:
    view.anchor = view.jump(k, shown, anchor) or k
    if delta and view.anchor != k:  # (laid out from the layout on screen)
      return dumps(view.jump_delta(shown, anchor, k, view.anchor))
  return view.graph_json(k, compact=compact, fresh=fresh, anchor=view.anchor)


@bp.get("/traces/<int:t>/rewrites/<int:r>")
def rewrite_answer(t: int, r: int) -> Any:
  tr = get_trace(t)
  with store().lock:
    return jsonify(rewrite_detail(get_rewrite(tr, r)))


@bp.get("/traces/<int:t>/rewrites/<int:r>/graph")
def graph_answer(t: int, r: int) -> Any:
  tr = get_trace(t)
  rw = get_rewrite(tr, r)
  fresh = request.args.get("fresh", "0") not in ("0", "", "false")
  shown = int_arg("from") if "from" in request.args else None  # the step on screen: a far jump's base
  if shown is not None:
    check_step(rw, shown)
  delta = shown is not None and request.args.get("delta") == "2"  # (the page takes a far jump as a delta from it)
  return json_answer(graph_at(tr, rw, int_arg("step", 0, allow_end=last_step(rw)), compact_arg(), fresh,
                              anchor_arg(rw), shown, delta))


@bp.get("/traces/<int:t>/rewrites/<int:r>/delta")
def delta_answer(t: int, r: int) -> Any:
  tr = get_trace(t)
  rw = get_rewrite(tr, r)
  j = int_arg("from", allow_end=last_step(rw))
  k = int_arg("to", allow_end=last_step(rw))
  check_step(rw, j)
  check_step(rw, k)
  a = anchor_arg(rw)
  all_views = views()
  view = all_views.get(tr, rw)
  if not view.knows(a):  # (a far jump's chain of a view rebuilt since: laid out anew, it would not be the page's)
    fail(409, f"rewrite {rw.id}: the layout of anchor {a} is gone; ask the step's graph")
  view.anchor = a
  # compact=2: also the rebuilt nodes as runs of ids (StepGraphs._rebuilt, _shifted), new nodes and straight edges as
  # columns (_pack_whole, _pack_straight); the export's answers are compact=1's. held=j: a step back from j whose
  # removed nodes' in-edges the page holds (_pack_held); any other value says it holds none
  rebuilt = request.args.get("compact") == "2"
  held = rebuilt and "held" in request.args and int_arg("held") == j
  out = json_answer(view.delta_json(j, k, compact=compact_arg(), rebuilt=rebuilt, anchor=a, held=held))
  all_views.prefetch(view, k, a)
  return out
