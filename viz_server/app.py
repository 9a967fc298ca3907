"""The Flask app factory: JSON API, socket.io feed, the UI's page and static files."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

from flask import Flask, Response, abort, jsonify, request, send_file, send_from_directory
from werkzeug.exceptions import HTTPException
from werkzeug.routing import BaseConverter

from viz_server import gone
from viz_server.api import bp as api_bp
from viz_server.gate import REQUEST_GATE
from viz_server.highlight import stylesheet
from viz_server.pagejs import page_modules
from viz_server.peer import OwnerCheck
from viz_server.request_args import ApiError, api_error
from viz_server.rewrite_routes import bp as rewrite_bp
from viz_server.share import Children
from viz_server.share import bp as share_bp
from viz_server.store import TraceStore
from viz_server.views import Views

REPO_ROOT = Path(__file__).resolve().parent.parent
MAX_UPLOAD = 512 << 20
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
# the same policy as the page's own <meta> (the UI sets styles through the CSSOM only, which style-src allows), plus
# what only a header can say; 'self' in connect-src covers the page's own origin over ws: too (CSP level 3)
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SOCKETIO_CLIENT = REPO_ROOT / "node_modules" / "socket.io-client" / "dist" / "socket.io.esm.min.js"
PAGE_ROOT = '<html lang="en">'  # index.html's root tag, where the server says whether the socket.io client is served
BOOT_TAG = '<script src="/static/boot.js"></script>'  # index.html's first script, which the page is sent with inline


def package_dir(name: str) -> Path:
  """Where the UI's `templates` or `static` folder is: package data when installed (pyproject maps them into
  viz_server/), else the checkout's top-level folder."""
  installed = Path(__file__).resolve().parent / name
  return installed if installed.is_dir() else REPO_ROOT / name


SECURITY_HEADERS = (("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
                    ("X-Frame-Options", "DENY"))


def _host_only(host: str) -> str:
  if host.startswith("["):
    return host[1:].split("]", 1)[0]
  return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class AsciiInt(BaseConverter):
  """A route id: ASCII digits only (Werkzeug's int converter also takes other scripts' digits, e.g. Arabic-Indic)."""
  regex = r"[0-9]+"
  part_isolating = True

  def to_python(self, value: str) -> int:
    return int(value)

  def to_url(self, value: Any) -> str:
    return str(int(value))


class _HandshakeHeaders:
  """The client socket of a websocket request, adding the security headers to the handshake's 101 answer: the
  websocket library writes that answer straight to the socket, past the WSGI headers. Everything else passes through."""

  def __init__(self, sock: Any) -> None:
    self._sock = sock
    self._first = True

  def send(self, data: bytes, *args: Any) -> int:
    if self._first and data.startswith(b"HTTP/1.1 101"):
      self._first = False
      head, sep, rest = data.partition(b"\r\n\r\n")
      extra = b"".join(f"\r\n{k}: {v}".encode() for k, v in SECURITY_HEADERS if k.lower().encode() not in head.lower())
      self._sock.sendall(head + extra + sep + rest, *args)
      return len(data)
    return self._sock.send(data, *args)

  def __getattr__(self, name: str) -> Any:
    return getattr(self._sock, name)


def guard_socketio(wsgi_app: Any, hosts: set[str] | None, prefix: str = "/socket.io") -> Any:
  """The HTTP routes' checks for socket.io, which Flask-SocketIO answers before Flask sees a request: a loopback
  Host (DNS rebinding) and no foreign Origin, on every transport (polling requests and the websocket handshake),
  and the security headers on its answers."""

  def app(environ: dict, start_response: Any) -> Any:
    if not environ.get("PATH_INFO", "").startswith(prefix):
      return wsgi_app(environ, start_response)
    host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
    origin = environ.get("HTTP_ORIGIN")
    why = None
    if hosts is not None and _host_only(host).lower() not in hosts:
      why = "unexpected Host header"
    elif origin is not None and origin.split("://", 1)[-1] != host:
      why = "cross-origin request refused"
    if why is not None:
      body = b'{"error":"' + why.encode() + b'"}'
      start_response("403 FORBIDDEN", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                       *SECURITY_HEADERS])
      return [body]

    if environ.get("HTTP_UPGRADE", "").lower() == "websocket" and "werkzeug.socket" in environ:
      environ["werkzeug.socket"] = _HandshakeHeaders(environ["werkzeug.socket"])

    def start(status: str, headers: list, exc_info: Any = None) -> Any:
      have = {k.lower() for k, _ in headers}
      return start_response(status, headers + [(k, v) for k, v in SECURITY_HEADERS if k.lower() not in have],
                            exc_info)
    return wsgi_app(environ, start)
  return app


def owner_only(wsgi_app: Any, state: dict) -> Any:
  """Every request of every route (the page, static files, the API, socket.io) from the user who started the
  viewer, or with its control token (state["control_token"]); others are refused with 403 (viz_server/peer.py: on a
  shared machine every user can reach loopback, and a trace holds argv, host, user, cwd and sources)."""
  check = OwnerCheck()

  def app(environ: dict, start_response: Any) -> Any:
    why = check.refusal(environ, state.get("control_token"))
    if why is None:
      return wsgi_app(environ, start_response)
    body = json.dumps({"error": why}).encode()
    start_response("403 FORBIDDEN", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                     *SECURITY_HEADERS])
    return [body]
  return app


def create_app(paths: Iterable[str | os.PathLike] = (), *, follow: bool = True, poll_interval: float = 0.05,
               max_upload: int = MAX_UPLOAD, allowed_hosts: Iterable[str] | None = LOCAL_HOSTS,
               store: TraceStore | None = None, socketio_client: Path | None = SOCKETIO_CLIENT,
               live: bool = True) -> Flask:
  """A viewer app serving the given trace files and directories.

  follow: start the thread that tails live traces and watches directories (tests may poll by hand instead).
  allowed_hosts: accepted Host header names (guards a loopback server against DNS rebinding); None accepts any.
  socketio_client: the socket.io browser client served at /vendor/ (from npm; None or a missing file: the page polls).
  live: the socket.io feed; False (viz_server/offline.py: requests through the test client only) leaves it out, and
  Flask-SocketIO is then never imported (~0.1 s of a tool's start-up, with the requests and engineio it pulls in).
  The SocketIO object is `app.extensions["socketio"]`, the store `app.extensions["tinyviz"]["store"]`, the tool
  processes it runs `app.extensions["tinyviz"]["children"]` (viz_server.share.Children: whoever serves the app kills
  them when it stops).
  """
  store = store or TraceStore(poll_interval=poll_interval)
  for p in paths:
    store.add_path(p)
  static_dir = package_dir("static")
  templates_dir = package_dir("templates")
  app = Flask("viz_server", static_folder=str(static_dir), static_url_path="/static",
              template_folder=str(templates_dir), root_path=str(Path(__file__).resolve().parent),
              instance_path=str(Path(__file__).resolve().parent / "instance"))  # never created: we store nothing
  app.url_map.converters["int"] = AsciiInt  # before any route is added
  app.config["MAX_CONTENT_LENGTH"] = max_upload
  app.config["JSON_SORT_KEYS"] = False
  app.json.sort_keys = False  # type: ignore[attr-defined]
  app.json.compact = True  # type: ignore[attr-defined]
  app.extensions["tinyviz"] = {"store": store, "views": Views(store), "children": Children(),
                               "key": object()}  # (unique while an answer kept under it lives: caches.ANSWERS)
  hosts = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}
  app.register_blueprint(api_bp)
  app.register_blueprint(rewrite_bp)  # a rewrite's steps, graph and delta
  app.register_blueprint(share_bp)
  app.register_error_handler(ApiError, api_error)  # a route's refusal, in every blueprint

  _guard_requests(app, hosts, max_upload)
  _page_routes(app, templates_dir, static_dir, socketio_client)
  _static_route(app, static_dir, warm=live)
  if live:
    from flask_socketio import SocketIO

    from viz_server import live as feed
    socketio = SocketIO(app, async_mode="threading")
  app.wsgi_app = guard_socketio(app.wsgi_app, hosts)  # type: ignore[method-assign]
  app.wsgi_app = owner_only(app.wsgi_app, app.extensions["tinyviz"])  # type: ignore[method-assign]  # outermost
  if live:
    feed.attach(socketio, store)
  if follow:
    store.start()
  return app


def _guard_requests(app: Flask, hosts: set[str] | None, max_upload: int) -> None:
  """Every request: the Host check, turns with background work, stopping when the client goes, security headers,
  JSON errors."""

  @app.before_request
  def _check_host() -> Any:
    REQUEST_GATE.begin()  # background layout work waits while requests are served
    # marked on the request, not on `g`: a request made inside another (a test client's) shares the outer one's app
    # context, and its end took the outer one's mark, which then never ended: REQUEST_GATE.serving stayed 1 and the
    # process's prefetch worker waited for good
    request.environ["tinyviz.turn"] = True
    gone.start(request.environ.get("werkzeug.socket"))  # long work stops once the client has gone
    if hosts is not None and _host_only(request.host).lower() not in hosts:
      return jsonify({"error": "unexpected Host header"}), 403
    return None

  @app.teardown_request
  def _end_turn(_exc: BaseException | None) -> None:
    gone.stop()
    if request.environ.pop("tinyviz.turn", False):
      REQUEST_GATE.end()

  @app.errorhandler(gone.ClientGone)
  def _client_gone(_e: gone.ClientGone) -> Any:
    return Response(b"", status=499)  # nobody reads it: the work just stops

  @app.after_request
  def _headers(resp: Response) -> Response:
    for k, v in SECURITY_HEADERS:
      resp.headers.setdefault(k, v)
    if resp.mimetype == "text/html":
      resp.headers.setdefault("Content-Security-Policy", CSP)
    return resp

  @app.errorhandler(HTTPException)
  def _http_error(e: HTTPException) -> Any:  # routing errors (404, 405) and 413 happen outside the blueprint
    if e.code == 413:
      return jsonify({"error": f"upload too large (limit {max_upload} bytes)"}), 413
    return jsonify({"error": e.description if e.code != 404 else "not found"}), e.code


def _static_route(app: Flask, static_dir: Path, warm: bool) -> None:
  """/static/: the page's modules as viz_server/pagejs.py serves them (app.js the bundle of what it imports, so the
  first view asks for one script, not 19), every other file as Flask sends it. warm: make the bundle now, in the
  background (an app that serves pages; the trace tools' offline apps never send one)."""
  modules = page_modules(static_dir)
  if warm:
    modules.warm()

  def static(filename: str) -> Any:
    got = modules.get(filename)
    if got is None:
      return send_from_directory(static_dir, filename, max_age=app.get_send_file_max_age(filename))
    text, etag = got
    resp = Response(text, mimetype="text/javascript")
    resp.set_etag(etag)
    resp.headers["Cache-Control"] = "no-cache"  # asked again each load (304 while unchanged): an edit shows at once
    return resp.make_conditional(request)
  app.view_functions["static"] = static


def inline_boot(html: str, static_dir: Path) -> tuple[str, str | None]:
  """The page with static/boot.js inline (issue 30: its own request delayed the first view's other requests, the boot
  answer's and the modules', by a round trip: 35-140 ms on the loaded 2-core machine), and the CSP source that lets
  that script run, its hash, added to the page's own policy; (html, None) as it was where boot.js cannot be inlined."""
  try:
    text = (static_dir / "boot.js").read_text(encoding="utf-8")
  except OSError:
    return html, None
  if BOOT_TAG not in html or re.search(r"</script|<!--", text, re.I):
    return html, None
  digest = f"'sha256-{base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()}'"
  html = html.replace(BOOT_TAG, f'<script id="tinyviz-boot">{text}</script>', 1)
  return html.replace("script-src 'self'", f"script-src 'self' {digest}", 1), digest


def _page_routes(app: Flask, templates_dir: Path, static_dir: Path, socketio_client: Path | None) -> None:
  """The UI's page, the socket.io browser client and the highlighting stylesheet."""

  def client_js() -> Path | None:
    return socketio_client if socketio_client is not None and socketio_client.is_file() else None

  @app.get("/")
  def index() -> Any:
    page = templates_dir / "index.html"
    if not page.is_file():
      abort(404)
    # the page imports the socket.io client only when told it is there (a 404 would be a console error)
    html = page.read_text(encoding="utf-8").replace(
      PAGE_ROOT, f'<html lang="en" data-socketio="{"yes" if client_js() else "no"}">', 1)
    html, digest = inline_boot(html, static_dir)
    resp = Response(html, mimetype="text/html")
    resp.headers["Cache-Control"] = "no-cache"
    if digest is not None:
      resp.headers["Content-Security-Policy"] = CSP.replace("script-src 'self'", f"script-src 'self' {digest}", 1)
    return resp

  @app.get("/vendor/socket.io.esm.min.js")
  def vendor_socketio() -> Any:
    js = client_js()
    if js is None:
      abort(404)
    return send_file(js, mimetype="text/javascript")

  @app.get("/highlight.css")
  def highlight_css() -> Any:
    return Response(stylesheet(), mimetype="text/css")
