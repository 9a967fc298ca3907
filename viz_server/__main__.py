"""`tinyviz` / `python -m viz_server [TRACE_OR_DIR ...] [--host H] [--port P] [--open]`: serve traces to the browser
UI; `--stop` stops the viewer on a port, `--reuse` hands traces to it."""
from __future__ import annotations

import argparse
import atexit
import errno
import gc
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from vztrace.control import HEADER as TOKEN_HEADER
from vztrace.control import read_token, remove_token, write_token
from vztrace.paths import trace_dir

if TYPE_CHECKING:
  from viz_server.store import TraceStore

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, n))
VENDORED_CLIENT = Path(__file__).resolve().parent / "vendor" / "socket.io.esm.min.js"


def url_of(host: str, port: int) -> str:
  shown = f"[{host}]" if ":" in host else host
  return f"http://{shown}:{port}/"


class QuietHandler(WSGIRequestHandler):
  """Logs errors only: one line per request (and per socket.io poll) would bury the URL and warnings."""

  def version_string(self) -> str:  # `Server:` names no Werkzeug or Python version (issue 14, item 3)
    return "tinyviz"

  def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
    if str(code)[:1] == "5":
      super().log_request(code, size)

  def log_error(self, format: str, *args: object) -> None:
    if "Bad request syntax" not in format % args:  # a websocket closing frame read after the upgrade ended
      super().log_error(format, *args)


# Garbage collection in the serving process. A graph answer is thousands of short-lived dicts and lists; with
# Python's default thresholds (700, 10, 10) collections ran in the middle of building them, promoted them, and so
# triggered a full collection every ~15 requests, which walks every layout the caches hold (0.1-0.4 s, the load
# bench's p99). Answers free themselves by reference counting; a young collection only once 50,000 more containers
# live than died leaves cycles to be found later and the full scans to growth of the caches.
GC_THRESHOLDS = (50_000, 20, 10)


def tune_gc() -> None:
  """The serving process's collector settings (GC_THRESHOLDS); what start-up loaded moves out of its scans."""
  gc.collect()
  gc.freeze()  # the modules and the traces indexed at start-up: never garbage, no reason to walk them again
  gc.set_threshold(*GC_THRESHOLDS)


def _listen(host: str, port: int) -> socket.socket:
  family = socket.AF_INET6 if ":" in host else socket.AF_INET
  s = socket.socket(family, socket.SOCK_STREAM)
  try:
    if os.name == "posix":  # as Werkzeug does: a restarted viewer can bind while old connections linger
      s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(128)
  except BaseException:
    s.close()
    raise
  return s


def bind(app: object, host: str, port: int, busy_ok: bool = True) -> BaseWSGIServer:
  """A threaded Werkzeug server on host:port, or (busy_ok) on a free port if that one is taken (port 0: any).
  The socket is bound here (Werkzeug would exit the process on a busy port)."""
  try:
    sock = _listen(host, port)
  except OSError as e:
    if port == 0 or not busy_ok or e.errno not in (errno.EADDRINUSE, errno.EACCES):
      raise
    print(f"tinyviz: port {port} is busy, picking a free one", file=sys.stderr, flush=True)
    sock = _listen(host, 0)
  with sock:
    return make_server(host, sock.getsockname()[1], app, threaded=True,  # type: ignore[arg-type]
                       request_handler=QuietHandler, fd=sock.fileno())


class NotOurs(Exception):
  """The viewer on the port is not proved to be one this user started: it gets neither a token nor a path."""


def _post(url: str, body: dict, port: int, timeout: float = 2.0) -> dict:
  """POST a control request to this user's viewer on 127.0.0.1:port, with the token it left for this user; raises
  NotOurs, sending nothing, unless that viewer is proved to be the one listening there (control.live_viewer)."""
  token = read_token(port)
  if token is None:
    raise NotOurs(f"the viewer on port {port} is not one you started (no live control token of yours for it)")
  req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                               headers={"Content-Type": "application/json", TOKEN_HEADER: token})
  with urllib.request.urlopen(req, timeout=timeout) as resp:
    return json.loads(resp.read().decode())


def running_viewer(port: int, timeout: float = 0.5) -> bool:
  """True if a tinyviz viewer answers on 127.0.0.1:port."""
  try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/ping", timeout=timeout) as resp:
      return json.loads(resp.read().decode()).get("app") == "tinyviz"
  except (OSError, ValueError, urllib.error.URLError):
    return False


def handover(port: int, paths: list[Path]) -> int:
  """Ask the viewer on port to follow the trace files; 0 if it took them all."""
  url = url_of("127.0.0.1", port)
  rc = 0
  for p in paths:
    if not p.is_file():
      continue
    try:
      entry = _post(url + "api/traces/follow", {"path": str(p.resolve())}, port)
      print(f"tinyviz: the viewer at {url} now also serves {p} (trace {entry.get('id')})", flush=True)
    except NotOurs as e:
      print(f"tinyviz: not handing {p} over: {e}", file=sys.stderr, flush=True)
      return 1
    except urllib.error.HTTPError as e:
      print(f"tinyviz: the viewer at {url} refused {p}: {_reason(e)}", file=sys.stderr, flush=True)
      rc = 1
    except (OSError, ValueError) as e:
      print(f"tinyviz: the viewer at {url} refused {p}: {e}", file=sys.stderr, flush=True)
      rc = 1
  return rc


def _reason(e: urllib.error.HTTPError) -> str:
  try:
    return str(json.loads(e.read().decode()).get("error")) or str(e)
  except (ValueError, OSError, AttributeError):
    return str(e)


def build_parser() -> argparse.ArgumentParser:
  # the installed console script is `tinyviz` (pyproject.toml); `python -m viz_server` runs this module
  prog = "tinyviz" if Path(sys.argv[0] or "").name.startswith("tinyviz") else "python -m viz_server"
  ap = argparse.ArgumentParser(prog=prog, description=f"`{prog} [TRACE_OR_DIR ...]`: serve traces to the browser UI.")
  ap.add_argument("paths", nargs="*", help="trace files or directories (default: the recorder's trace folder)")
  ap.add_argument("--host", default="127.0.0.1",
                  help="address to bind (default 127.0.0.1; anything else exposes the traces to the network)")
  ap.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 or a busy port: a free one)")
  ap.add_argument("--open", action="store_true", help="open the UI in a web browser")
  ap.add_argument("--reuse", action="store_true",
                  help="if a tinyviz viewer already serves --port on 127.0.0.1, hand it the trace files and exit")
  ap.add_argument("--stop", action="store_true", help="stop the tinyviz viewer serving --port on 127.0.0.1")
  # VIZ=1 starts a viewer on a free port when VIZ_PORT is busy: the record says so, for later runs to reuse it
  ap.add_argument("--instead-of", type=int, default=None, help=argparse.SUPPRESS)
  return ap


def stop_viewer(port: int) -> int:
  if not running_viewer(port):
    print(f"tinyviz: no viewer on port {port}", file=sys.stderr)
    return 1
  try:
    _post(f"http://127.0.0.1:{port}/api/shutdown", {}, port)
  except NotOurs as e:
    print(f"tinyviz: refused to stop it: {e}", file=sys.stderr)
    return 1
  except urllib.error.HTTPError as e:
    print(f"tinyviz: the viewer on port {port} refused to stop: {_reason(e)}", file=sys.stderr)
    return 1
  print(f"tinyviz: stopped the viewer on port {port}")
  return 0


def open_store(paths: list[Path]) -> TraceStore | None:
  """A store serving every path it can take; a file that is not a trace is named and skipped. None (after saying
  why) when nothing is left to serve: every path was a file and none was a trace."""
  from viz_server.store import TraceStore
  from vztrace.format import TraceFormatError

  store, taken = TraceStore(), 0
  for p in paths:
    try:
      store.add_path(p)
      taken += 1
    except (TraceFormatError, OSError) as e:
      print(f"tinyviz: WARNING: not serving {p}: {e}", file=sys.stderr, flush=True)
    except Exception as e:  # a file the store cannot take must not keep the others from being served
      print(f"tinyviz: WARNING: not serving {p}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr, flush=True)
  if not taken:
    print("tinyviz: none of the given files is a trace; nothing to serve", file=sys.stderr)
    return None
  return store


def socketio_client() -> Path:
  """The socket.io browser client: the copy a wheel ships (setup.py takes it from npm's package at build time),
  else the checkout's node_modules (create_app's default)."""
  from viz_server.app import SOCKETIO_CLIENT
  return VENDORED_CLIENT if VENDORED_CLIENT.is_file() else SOCKETIO_CLIENT


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  if args.stop:
    return stop_viewer(args.port)

  paths = [Path(p) for p in args.paths]
  if not paths:
    paths = [trace_dir()]
    paths[0].mkdir(parents=True, exist_ok=True)
  for p in paths:
    if not p.exists():
      print(f"tinyviz: no such file or directory: {p}", file=sys.stderr)
      return 2

  if args.reuse and running_viewer(args.port):
    return handover(args.port, paths)

  from viz_server.app import create_app

  local = args.host in LOOPBACK_HOSTS
  if not local:
    print(f"tinyviz: WARNING: serving on {args.host}: anyone who can reach this address can read the traces "
          "(they contain your code's source lines, file paths and command line)", file=sys.stderr, flush=True)
  store = open_store(paths)
  if store is None:
    return 2
  app = create_app(follow=False, allowed_hosts=None if not local else {"127.0.0.1", "localhost", "::1"}, store=store,
                   socketio_client=socketio_client())
  try:
    srv = bind(app, args.host, args.port, busy_ok=not args.reuse)
  except OSError:  # --reuse and the port is taken: maybe a viewer started a moment ago by another script
    for _ in range(50):
      if running_viewer(args.port):
        store.stop()
        return handover(args.port, paths)
      time.sleep(0.1)
    srv = bind(app, args.host, 0)
  return serve(app, srv, args, local)


def serve(app: object, srv: BaseWSGIServer, args: argparse.Namespace, local: bool) -> int:
  """Serve until --stop, SIGTERM, SIGINT (Ctrl-C) or SIGHUP; every way out removes the control token and the upload
  folder (a token left behind would be handed to whoever listens on the port next) and kills the export and compare
  children (viz_server.share.Children)."""
  from viz_server.caches import limit_arenas

  state = app.extensions["tinyviz"]  # type: ignore[attr-defined]
  store, children = state["store"], state["children"]
  state["shutdown"] = stop = lambda: threading.Thread(target=srv.shutdown, daemon=True).start()
  token = None

  def on_signal(_signum: int, _frame: object) -> None:
    # SIGTERM, SIGINT, SIGHUP: serve_forever returns and the clean-up below runs. Not by raising here: an exception
    # thrown into whatever the main thread was doing (starting a request's thread, say) could leave it half done,
    # and the process hung on exit under load
    for s in STOP_SIGNALS:  # once: a second signal must not cut the clean-up short
      signal.signal(s, signal.SIG_IGN)
    children.kill_all()  # at once: an export must not run on while the requests end
    stop()
  handle = threading.current_thread() is threading.main_thread()  # (signal handlers can only be set from there)
  before = {s: signal.getsignal(s) for s in STOP_SIGNALS} if handle else {}
  for s in before:
    signal.signal(s, on_signal)
  try:
    if local:  # on another host the control endpoints stay off (and loopback-only anyway)
      state["control_token"] = token = write_token(srv.port, asked=args.instead_of or args.port or srv.port)
      atexit.register(remove_token, srv.port, token)  # if something still gets past the finally below
    tune_gc()
    limit_arenas()
    store.start()
    url = url_of(args.host if args.host != "0.0.0.0" else "127.0.0.1", srv.port)
    print(f"tinyviz: serving {len(store.traces)} trace(s) at {url}  (pid {os.getpid()}; Ctrl-C to stop)", flush=True)
    if args.open:
      webbrowser.open(url)
    srv.serve_forever()
  except KeyboardInterrupt:  # a Ctrl-C before the handlers were set
    pass
  finally:
    for s in STOP_SIGNALS if handle else ():
      signal.signal(s, signal.SIG_IGN)
    children.kill_all()  # every way out (--stop, a signal, an error): no export or compare outlives the viewer
    if token is not None:
      remove_token(srv.port, token)
    store.stop()  # also removes the upload folder
    srv.server_close()
    for s, h in before.items():  # the clean-up is done: a program that serves in-process gets its handlers back
      signal.signal(s, h if h is not None else signal.SIG_DFL)
  print("tinyviz: viewer stopped", flush=True)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
