"""Regenerate the README's screenshots: record the demo's trace, serve it, and photograph each panel in Debian's
chromium (the same browser the UI tests drive). Run: .venv/bin/python docs/screenshots.py"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def get(url: str):
  with urllib.request.urlopen(url, timeout=30) as r:
    return json.loads(r.read())


def main() -> None:
  OUT.mkdir(parents=True, exist_ok=True)
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  with tempfile.TemporaryDirectory() as d:
    trace = Path(d) / "demo.vztrace"
    subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], check=True,
                   env={**env, "VIZ": "-1", "VIZ_TRACE": str(trace)})
    # a second trace where BEAM searched the matmul's opts, so the kernel panel shows candidates and the scatter
    beam = Path(d) / "demo-beam.vztrace"
    subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py"), "--only", "matmul"], check=True,
                   env={**env, "VIZ": "-1", "VIZ_TRACE": str(beam), "BEAM": "2", "IGNORE_BEAM_CACHE": "1"})
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "viz_server", str(trace), str(beam), "--port", str(port)],
                              env={**env, "VIZ": "0"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
      for _ in range(100):
        try:
          get(base + "/api/traces")
          break
        except OSError:
          time.sleep(0.1)
      contexts = get(base + "/api/traces/0/contexts")
      kernels = get(base + "/api/traces/0/kernels")
      mm = next(k for k in kernels if k["name"].startswith("r_") and "512" in k["name"])
      ctx = next(c for c in contexts if c["id"] == mm["ctx"])
      rw = max((r for r in ctx["rewrites"] if r["matches"] <= 40), key=lambda r: r["matches"])  # a legible one
      sched = next(c for c in contexts if c["kind"] == "schedule")
      srw = max(sched["rewrites"], key=lambda r: r["matches"])
      bkernels = get(base + "/api/traces/1/kernels")
      bmm = next(k for k in bkernels if k["name"].startswith("r_") and "512" in k["name"])
      # the diff shot: a pass of that kernel that changes a small graph, so both drawings stay legible
      def end_nodes(r: dict) -> int:
        return len(get(f"{base}/api/traces/0/rewrites/{r['id']}/graph?step={r['matches']}")["nodes"])
      small = [r for r in ctx["rewrites"] if 2 <= r["matches"] <= 60]
      drw = min(small, key=lambda r: (end_nodes(r) > 60, -r["matches"])) if small else rw
      views = {
        "step": f"#t=0&c={ctx['id']}&r={drw['id']}&s=1&p=step",
        "schedule": f"#t=0&c={sched['id']}&r={srw['id']}&s=1&p=step",
        "diff": f"#t=0&c={ctx['id']}&r={drw['id']}&s={drw['matches']}&p=diff&a=0:{drw['id']}:0&b=0:{drw['id']}:end",
        "kernel": f"#t=1&c={bmm['ctx']}&p=kernel",
        "source": f"#t=0&c={ctx['id']}&p=source",
        "runs": f"#t=0&c={ctx['id']}&p=runs",
        "timeline": f"#t=0&c={ctx['id']}&p=timeline",
      }
      with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=ARGS)
        for name, hash_ in views.items():
          page = browser.new_page(viewport={"width": 1600, "height": 900})
          page.goto(base + "/" + hash_)
          page.wait_for_timeout(2500)
          page.screenshot(path=str(OUT / f"{name}.png"))
          page.close()
          print("wrote", OUT / f"{name}.png")
        browser.close()
    finally:
      server.terminate()
      server.wait(timeout=10)


if __name__ == "__main__":
  main()
