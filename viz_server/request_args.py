"""Reading and checking a request's arguments, and answering errors, for the JSON API's routes (viz_server/api.py,
viz_server/rewrite_routes.py, viz_server/share.py): ids to the trace and rewrite they name, steps to those the viewer
replays, the app's store and views, and a refusal (`fail`) anywhere in a route to `{"error": message}` with its status
(docs/architecture.md, "JSON API")."""
from __future__ import annotations

from typing import Any, NoReturn

from flask import Response, current_app, jsonify, request

from viz_server.store import Rewrite, Trace, TraceStore
from viz_server.views import Views

# A cost bound per request (issue 14; api.py has the others): replaying a step costs every step before it, so a step
# past this is refused with 413 and says why
MAX_STEPS = 20_000  # the steps of a rewrite the viewer replays (~0.1 ms each on a small graph, incl. its layout)


class ApiError(Exception):
  def __init__(self, status: int, message: str) -> None:
    super().__init__(message)
    self.status, self.message = status, message


def fail(status: int, message: str) -> NoReturn:
  raise ApiError(status, message)


def api_error(e: ApiError) -> Any:
  """The answer to a refusal (viz_server.app registers it for every route)."""
  return jsonify({"error": e.message}), e.status


# what a browser says of a request's initiator (Fetch Metadata): a page of another site, or of another port here
FOREIGN_SITES = ("cross-site", "same-site")


def same_origin() -> None:
  """Refuse (403) a request that a page of another origin made the browser send: a foreign Origin header, or Fetch
  Metadata saying so (a plain GET carries no Origin; Sec-Fetch-Site comes with every request of today's browsers). For
  the routes that change state or start work beyond one answer (uploads, control requests, export and compare)."""
  origin = request.headers.get("Origin")
  if (origin is not None and origin.split("://", 1)[-1] != request.host) or \
     request.headers.get("Sec-Fetch-Site", "").lower() in FOREIGN_SITES:
    fail(403, "cross-origin request refused")


def store() -> TraceStore:
  return current_app.extensions["tinyviz"]["store"]


def views() -> Views:
  """The app's per-rewrite views (what the rewrite routes answer from)."""
  return current_app.extensions["tinyviz"]["views"]


def get_trace(t: int) -> Trace:
  tr = store().get(t)
  if tr is None:
    fail(404, f"no trace {t}")
  return tr


def get_rewrite(tr: Trace, r: int) -> Rewrite:
  rw = tr.rewrites.get(r)
  if rw is None:
    fail(404, f"no rewrite {r} in trace {tr.id}")
  return rw


def ascii_int(s: str) -> int | None:
  """s as an int if it is ASCII digits only (int() also takes '_', spaces, signs and other scripts' digits)."""
  return int(s) if s.isascii() and s.isdigit() and len(s) <= 18 else None


def int_arg(name: str, default: int | None = None, allow_end: int | None = None) -> int:
  """Query parameter `name` as an int >= 0 (`end`: allow_end, where given); missing: default, else a 400."""
  raw = request.args.get(name)
  if raw is None:
    if default is None:
      fail(400, f"missing query parameter {name!r}")
    return default
  if raw == "end" and allow_end is not None:
    return allow_end
  v = ascii_int(raw)
  if v is None:
    fail(400, f"query parameter {name!r} must be an integer >= 0 (ASCII digits), got {raw[:40]!r}")
  return v


def opt_int(name: str) -> int | None:
  """Query parameter `name` as an int, None where it is missing or not one (a link's parts the page may drop)."""
  raw = request.args.get(name, "")
  return ascii_int(raw) if raw else None


def compact_arg() -> bool:
  """Whether the request asks for the compact form of graph answers (`compact=1`; docs: JSON API)."""
  return request.args.get("compact", "0") not in ("0", "", "false")


def check_step(rw: Rewrite, k: int) -> None:
  if k > rw.matches:
    fail(404, f"rewrite {rw.id} has {rw.matches} steps, no step {k}")
  if k > MAX_STEPS:
    fail(413, f"rewrite {rw.id} has {rw.matches} steps; the viewer replays only the first {MAX_STEPS}")


def anchor_arg(rw: Rewrite) -> int:
  """The `anchor` of the layout chain a graph or delta is asked on (0, the stable chain, where missing): a step the
  viewer replays, as `step` (its chain to a step asked costs a derivation a step between, as step 0's does), or of an
  ended rewrite a far jump's, numbered past its steps (StepGraphs.at: the step is the number modulo matches + 1)."""
  a = int_arg("anchor", 0)
  check_step(rw, a % (rw.matches + 1) if rw.ended else a)
  return a


def last_step(rw: Rewrite) -> int:
  """What `end` means for a step: the last one the viewer replays."""
  return min(rw.matches, MAX_STEPS)


def json_answer(raw: bytes) -> Response:
  """An answer of JSON already encoded (graph answers are kept encoded)."""
  return Response(raw, mimetype="application/json")
