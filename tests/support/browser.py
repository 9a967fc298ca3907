"""The real-browser tests' helpers: a viz_server subprocess (`Server`), the page's error log, and the waits and
reads of the UI's state (tests/browser/conftest.py makes the fixtures of them)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import numpy as np
from support.proc_helpers import Feed

from compiler.tensor import Tensor
from compiler.trace import recorder

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
# the steps of the rewrite the rebuild_server fixture (tests/browser/conftest.py) serves, each rebuilding a chain
REBUILD_STEPS = 8


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def get_json(url: str):
  with urllib.request.urlopen(url, timeout=30) as r:
    return json.loads(r.read())


class Server:
  """`python -m viz_server DIR` on a free port; the directory is watched, so traces written there show up."""

  def __init__(self, trace_dir: Path, log: Path):
    self.dir = trace_dir
    self.port = free_port()
    self.url = f"http://127.0.0.1:{self.port}"
    self.log = open(log, "w")
    self.proc = subprocess.Popen([sys.executable, "-m", "viz_server", str(trace_dir), "--port", str(self.port),
                                  "--host", "127.0.0.1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 env={**os.environ, "VIZ": "0", "PYTHONPATH": str(ROOT)})
    self.feed: Feed | None = None
    self.serving = threading.Event()  # its "serving ... at URL" line (printed once it listens), or its output's end
    self._tee_thread = threading.Thread(target=self._tee, daemon=True)
    self._tee_thread.start()
    if not self.serving.wait(120) or self.proc.poll() is not None:
      self.log.flush()
      raise RuntimeError(f"viz_server did not start: {log.read_text()[-2000:]}")

  def _tee(self) -> None:
    """Copy the viewer's output into its log, line by line, and say when it serves."""
    for line in iter(self.proc.stdout.readline, b""):
      self.log.write(line.decode(errors="replace"))
      self.log.flush()
      if line.startswith(b"tinyviz: serving "):
        self.serving.set()
    self.serving.set()

  def log_tail(self, chars: int = 2000) -> str:
    """The end of the viewer's output so far (for a failing test's message)."""
    self.log.flush()
    return Path(self.log.name).read_text(errors="replace")[-chars:]

  def api(self, path: str):
    return get_json(self.url + path)

  def wait_api(self, path: str, pred, what: str, timeout: float = 120):
    """pred(the answer at path)'s first truthy value, asked again after each socket.io event of the viewer (a
    proc_helpers.Feed, made at the first wait)."""
    if self.feed is None:
      self.feed = Feed(self.url)
    return self.feed.wait(path, pred, what, timeout)

  def trace_id(self, name: str, timeout: float = 60, ended: bool = False) -> int:
    """The id of the served trace whose name contains `name` (waits for the directory scan to find it; with `ended`,
    also for the store to have read it to its end record)."""
    def served(traces: list) -> tuple[int] | None:  # (a 1-tuple: trace id 0 is a falsy answer)
      return next(((t["id"],) for t in traces if name in t["name"] and (not ended or t["status"] == "ended")), None)
    return self.wait_api("/api/traces", served, f"trace {name}", timeout)[0]

  def stop(self):
    if self.feed is not None:
      self.feed.close()
    self.proc.terminate()
    try:
      self.proc.wait(10)
    except subprocess.TimeoutExpired:
      self.proc.kill()
    self._tee_thread.join(30)  # (its output ended with the process)
    self.log.close()


class PageErrors:
  def __init__(self):
    self.items: list[str] = []
    self.allowed: list[str] = []  # substrings of errors a test provokes on purpose

  def console(self, msg):
    if msg.type == "error" and not any(a in msg.text for a in self.allowed):
      self.items.append(f"console: {msg.text}")

  def pageerror(self, exc):
    self.items.append(f"pageerror: {exc}")


def shot(page, name: str) -> Path:
  """Save a screenshot under test-artifacts/."""
  ARTIFACTS.mkdir(exist_ok=True)
  path = ARTIFACTS / f"{name}.png"
  page.screenshot(path=str(path))
  return path


def wait_graph(page, trace: int, rw: int, step: int) -> None:
  """Wait until the graph of (trace, rewrite, step) is on screen."""
  page.wait_for_function("(want) => document.body.dataset.graph === want", arg=f"{trace}:{rw}:{step}")


def open_rebuilt_chain(page, server) -> int:
  """The rebuilding-chain trace (the `rebuild_server` fixture's) opened at its rewrite's step 0; the trace's id."""
  t = server.trace_id("rebuild")
  page.goto(f"{server.url}/#t={t}&c=0&r=0&s=0")
  wait_graph(page, t, 0, 0)
  return t


def graph_ids(page) -> set[int]:
  """Ids of the nodes the graph view draws (its model; ghosts of removed nodes excluded)."""
  return set(page.evaluate("() => window.__viz.graph.ids()"))


def ids_with_mark(page, mark: str) -> set[int]:
  """Ids drawn with a highlight: added, changed, selected, hit, related."""
  return set(page.evaluate("(m) => window.__viz.graph.ids().filter(id => window.__viz.graph.hasMark(id, m))", mark))


def state(page) -> dict:
  return page.evaluate("() => ({...window.__viz.state})")


def open_page(page, server, hash_: str = "") -> None:
  """Load the UI (optionally at a deep link) and wait for its start-up to finish."""
  page.goto(f"{server.url}/{hash_}")
  page.wait_for_function("() => window.__viz !== undefined")
  page.evaluate("() => window.__viz.ready")


def open_rewrite(page, server, trace: str, ctx: str | None = None, rewrite: str | None = None, step: int = 0,
                 panel: str | None = None) -> tuple[int, dict]:
  """Open the UI on a rewrite of a served trace at `step` (with `panel` open) and wait for its graph; -> (trace id,
  the rewrite). ctx / rewrite: the context's and the rewrite's names (None: the first context with a rewrite, its
  first rewrite)."""
  t = server.trace_id(trace)
  ctxs = server.api(f"/api/traces/{t}/contexts")
  c = next(c for c in ctxs if (c["name"] == ctx if ctx is not None else c["rewrites"]))
  rw = next(r for r in c["rewrites"] if rewrite is None or r["name"] == rewrite)
  open_page(page, server, f"#t={t}&c={c['id']}&r={rw['id']}&s={step}" + (f"&p={panel}" if panel else ""))
  wait_graph(page, t, rw["id"], step)
  return t, rw


def norm_graph(g: dict) -> dict:
  """A graph or delta answer with its lists in a canonical order (the shim builds them in another order)."""
  out = dict(g)
  for k in ("nodes", "nodes_added", "removed_nodes"):
    if k in out:
      out[k] = sorted(out[k], key=lambda n: n["id"])
  for k in ("edges", "edges_added", "removed_edges"):
    if k in out:
      out[k] = sorted(out[k], key=lambda e: (e["src"], e["dst"], e["index"]))
  for k in ("added", "changed", "removed", "nodes_removed"):
    if out.get(k) is not None:
      out[k] = sorted(out[k])
  if "edges_removed" in out:
    out["edges_removed"] = sorted(map(tuple, out["edges_removed"]))
  return json.loads(json.dumps(out, sort_keys=True))


class Export:
  def __init__(self, trace, html):
    self.trace, self.html = trace, html
    self.url = html.resolve().as_uri()


def open_export(page, ex: Export, hash_: str = "") -> list[str]:
  """Open the export; returns the list of every URL the page requests (filled while the page lives)."""
  requests: list[str] = []
  page.on("request", lambda r: requests.append(r.url))
  page.goto(ex.url + hash_)
  page.wait_for_function("() => window.__viz !== undefined")
  page.evaluate("() => window.__viz.ready")
  return requests


def offline(page, path: str):
  return page.evaluate("async (p) => { const [s, b] = await window.tinyvizOffline(p); return {s, b}; }", path)




def record_matmul_relu_fresh(path: Path) -> None:
  """record_matmul_relu in a fresh process: all its rewrites recorded (in this one, a schedule an earlier test made is
  a cache hit, which records none) and its schedule named `schedule 0`."""
  tests = Path(__file__).resolve().parents[1]
  code = "import sys; from pathlib import Path; from support.browser import record_matmul_relu; " \
         "record_matmul_relu(Path(sys.argv[1]))"
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
  subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=env, cwd=tests.parent, timeout=300)


def record_matmul_relu(path: Path) -> None:
  rng = np.random.default_rng(5)
  recorder.enable(path, announce=False)
  try:
    (Tensor(rng.standard_normal((16, 32)).astype(np.float32)) @
     Tensor(rng.standard_normal((32, 24)).astype(np.float32))).relu().realize()
  finally:
    recorder.disable()




FRAME = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"


# the spans drawn, without the panel's own references (CSS px relative to the canvas)
HITS = "() => window.__viz.timelinePanel.hits.map(({x0, x1, y0, y1, kind, ctx, rw, name}) => " \
       "({x0, x1, y0, y1, kind, ctx, rw, name}))"


VIEW = "() => ({...window.__viz.timelinePanel.view})"


def canvas_box(page) -> dict:
  return page.locator("#panel-timeline canvas").bounding_box()


def plot_of(hits: list[dict], tl: dict) -> tuple[float, float]:
  """(left edge, width) of the plot in CSS px: where the whole view draws the default context (start 0 to the end)."""
  default = next(c for c in tl["contexts"] if c["depth"] == 0)
  assert default["start"] == 0 and default["end"] == tl["end"]
  h = next(h for h in hits if h["kind"] == "context" and h["ctx"] == default["id"])
  return h["x0"], h["x1"] - h["x0"]




def choose(page, which: str, name: str, text: str) -> None:
  """Select, in control `name` of point `which`, the option whose visible text contains `text` (as a user would)."""
  sel = ctl(which, name)
  page.wait_for_function("([s, t]) => [...document.querySelector(s).options].some(o => o.text.includes(t))",
                         arg=[sel, text])
  value = page.evaluate("([s, t]) => [...document.querySelector(s).options].find(o => o.text.includes(t)).value",
                        [sel, text])
  page.select_option(sel, value)


def wait_diff(page, a: str, b: str) -> None:
  page.wait_for_function("(want) => document.querySelector('#panel-diff .diff-result').dataset.shown === want",
                         arg=f"{a} {b}")


def check_text(page, want: dict) -> None:
  added = page.eval_on_selector_all(".diff-text .dl.add", "els => els.map(e => e.lastChild.textContent)")
  removed = page.eval_on_selector_all(".diff-text .dl.del", "els => els.map(e => e.lastChild.textContent)")
  assert added == [ln["text"] for ln in want["lines"] if ln["kind"] == "+"]
  assert removed == [ln["text"] for ln in want["lines"] if ln["kind"] == "-"]




def ctl(which: str, name: str) -> str:
  return f"[data-pick={which}][data-ctl={name}]"


