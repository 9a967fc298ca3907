"""Regenerate the README's screenshots: record the demo's trace, serve it, and photograph each panel in Debian's
chromium (the same browser the UI tests drive). Run: .venv/bin/python docs/screenshots.py [--size 1280x800]
[--out DIR]. tests/project/test_screenshots.py keeps SHOTS, the README and static/panels.js in step."""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
# the shots, each a panel open on a view of the demo (views() picks the context and rewrite): every registered panel
# has one, and the README shows each of them
SHOTS = {"summary": "summary", "schedule": "step", "step": "step", "diff": "diff", "kernel": "kernel",
         "source": "source", "runs": "runs", "timeline": "timeline"}
# a shot is taken once the page has settled: its panel has no loading state, and the graph (where a rewrite is
# named) shows the step the link names
SETTLED = """(p) => { const el = document.querySelector(`#panel-${p}`), st = el && el.querySelector('[data-state]');
  return window.__viz.state.trace !== null && el.children.length > 0
    && !(st && (st.dataset.state === 'loading' || st.textContent === 'No trace.'))
    && (p !== 'timeline' || window.__viz.timelinePanel.hits.length > 0)
    && (window.__viz.state.rw === null || document.body.dataset.graph !== undefined); }"""


def get(url: str):
  with urllib.request.urlopen(url, timeout=30) as r:
    return json.loads(r.read())


def views(base: str) -> dict[str, str]:
  """The link (URL hash) of each shot in SHOTS, from the served demo traces (0: the demo, 1: the BEAM one)."""
  contexts = get(base + "/api/traces/0/contexts")
  kernels = get(base + "/api/traces/0/kernels")
  mm = next(k for k in kernels if k["name"].startswith("r_") and "512" in k["name"])
  ctx = next(c for c in contexts if c["id"] == mm["ctx"])
  sched = next(c for c in contexts if c["kind"] == "schedule")
  srw = max(sched["rewrites"], key=lambda r: r["matches"])
  bmm = next(k for k in get(base + "/api/traces/1/kernels") if k["name"].startswith("r_") and "512" in k["name"])
  # the step and diff shots: a pass of that kernel that changes a small graph, so both drawings stay legible
  def end_nodes(r: dict) -> int:
    return len(get(f"{base}/api/traces/0/rewrites/{r['id']}/graph?step={r['matches']}")["nodes"])
  small = [r for r in ctx["rewrites"] if 2 <= r["matches"] <= 60]
  drw = min(small, key=lambda r: (end_nodes(r) > 60, -r["matches"])) if small else ctx["rewrites"][0]
  got = {
    "summary": "#t=0&p=summary",
    "schedule": f"#t=0&c={sched['id']}&r={srw['id']}&s=1&p=step",
    "step": f"#t=0&c={ctx['id']}&r={drw['id']}&s=1&p=step",
    "diff": f"#t=0&c={ctx['id']}&r={drw['id']}&s={drw['matches']}&p=diff&a=0:{drw['id']}:0&b=0:{drw['id']}:end",
    "kernel": f"#t=1&c={bmm['ctx']}&p=kernel",
    "source": f"#t=0&c={ctx['id']}&p=source",
    "runs": f"#t=0&c={ctx['id']}&p=runs",
    "timeline": f"#t=0&c={ctx['id']}&p=timeline",
  }
  assert got.keys() == SHOTS.keys()
  return got


def record(d: Path, env: dict) -> list[Path]:
  """The demo's trace, and a second where BEAM searched the matmul's opts (the kernel shot's candidates)."""
  trace, beam = d / "demo.vztrace", d / "demo-beam.vztrace"
  subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], check=True,
                 env={**env, "VIZ": "-1", "VIZ_TRACE": str(trace)})
  subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py"), "--only", "matmul"], check=True,
                 env={**env, "VIZ": "-1", "VIZ_TRACE": str(beam), "BEAM": "2", "IGNORE_BEAM_CACHE": "1"})
  return [trace, beam]


def photograph(base: str, out: Path, size: tuple[int, int]) -> None:
  from playwright.sync_api import sync_playwright
  with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=ARGS)
    for name, hash_ in views(base).items():
      page = browser.new_page(viewport={"width": size[0], "height": size[1]})
      page.goto(base + "/" + hash_)
      page.wait_for_function("() => window.__viz !== undefined")
      page.evaluate("() => window.__viz.ready")
      page.wait_for_function(SETTLED, arg=SHOTS[name], timeout=60_000)
      page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")  # drawn
      page.screenshot(path=str(out / f"{name}.png"))
      page.close()
      print("wrote", out / f"{name}.png")
    browser.close()


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--size", default="1600x900", help="the window, WIDTHxHEIGHT (the README's: 1600x900)")
  ap.add_argument("--out", type=Path, default=OUT, help="where the PNGs go (the README's: docs/img)")
  a = ap.parse_args()
  size = tuple(int(x) for x in a.size.lower().split("x"))
  a.out.mkdir(parents=True, exist_ok=True)
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  with tempfile.TemporaryDirectory() as d:
    traces = record(Path(d), env)
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "viz_server", *map(str, traces), "--port", str(port)],
                              env={**env, "VIZ": "0"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
      for _ in range(300):  # the server's start: polled, at most 30 s
        try:
          get(base + "/api/traces")
          break
        except OSError:
          time.sleep(0.1)
      photograph(base, a.out, size)
    finally:
      server.terminate()
      server.wait(timeout=10)


if __name__ == "__main__":
  main()
