"""Size of `python -m compiler.trace export`'s page against its trace, and what each part of it costs: the page's
scripts (the UI's bundle and the export's own: as embedded, deflated in base 85), and the embedded data as collect()
makes it (deflated and base64, as the export embedded it before viz_server/export_pack.py, with the module inline as
text: the `unpacked` page) and as it is embedded now (packed, deflated, base 85), part by part (each deflated alone).

  python bench/bench_export_size.py [TRACE ...] [--open N]   (default: the full demo, examples/demo.py, recorded here)

--open N: also open each page N times from file:// in headless Chromium and report the median time from navigation
start to the first graph on screen (the page's own clock).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.table import format_table  # noqa: E402
from viz_server import export, export_pack  # noqa: E402
from viz_server.offline import OfflineApi  # noqa: E402


def record_demo(path: Path, scale: float, only: list[str]) -> Path:
  cmd = [sys.executable, str(ROOT / "examples" / "demo.py"), "--scale", str(scale)]
  cmd += ["--only", *only] if only else []
  subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT,
                 env={**os.environ, "VIZ": "-1", "VIZ_TRACE": str(path), "PYTHONPATH": str(ROOT)})
  return path


def deflated(obj) -> int:
  return len(zlib.compress(json.dumps(obj, separators=(",", ":")).encode("utf-8"), 9))


def measure(trace: Path) -> tuple[tuple, list[tuple]]:
  """(the trace's row, its parts' rows)."""
  with OfflineApi(trace) as api:
    data = export.collect(api)
  page = len(export.render(data, trace.name).encode("utf-8"))
  ui = export.ui_module()
  block = export.payload(data, ui)
  script, now = len(export.BOOT.read_bytes()) + len(block["ui"]["data"]), len(block["data"]["data"])
  unpacked = -(-deflated(data) // 3) * 4  # (base64's length)
  packed = export_pack.pack(data)
  tb = trace.stat().st_size
  before = page - script - now + len(ui.encode("utf-8")) + unpacked  # (the module inline, the data base64)
  row = (trace.name, tb, page, page / tb, before, before / tb, script, now)
  parts = [(trace.name, k, deflated(data[k]) if k in data else 0, deflated(v)) for k, v in packed.items()
           if k not in ("format", "trace", "redacted", "contexts_only")]
  parts += [(trace.name, f"deltas.{k}", 0, deflated(v)) for k, v in packed["deltas"].items()]
  return row, parts


def first_graph_ms(trace: Path, rounds: int) -> float:
  """Median ms from navigation start to the first graph drawn, opening trace's export from file:// in Chromium."""
  from playwright.sync_api import sync_playwright
  with tempfile.TemporaryDirectory() as d:
    html = Path(d) / "x.html"
    export.export(trace, html)
    times = []
    with sync_playwright() as p:
      browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"])
      for _ in range(rounds):
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(html.as_uri())
        page.wait_for_function("() => document.body.dataset.graph", polling="raf", timeout=120_000)
        times.append(page.evaluate("() => performance.now()"))
        page.close()
      browser.close()
  return statistics.median(times)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("traces", nargs="*", type=Path)
  ap.add_argument("--scale", type=float, default=1.0, help="the demo's --scale when no trace is given")
  ap.add_argument("--only", nargs="*", default=[], help="the demo's --only (default: every workload)")
  ap.add_argument("--open", type=int, default=0, metavar="N", help="time the first graph on opening, N rounds")
  args = ap.parse_args()
  with tempfile.TemporaryDirectory() as d:
    traces = args.traces or [record_demo(Path(d) / "demo.vztrace", args.scale, args.only)]
    rows, parts = [], []
    for t in traces:
      row, p = measure(t)
      rows.append(row)
      parts += p
      if args.open:
        print(f"{t.name}: first graph {first_graph_ms(t, args.open):.0f} ms after opening (median of {args.open}; "
              f"load {os.getloadavg()[0]:.1f})")
  print(format_table([("trace", "<24"), ("trace B", ">9"), ("page B", ">9"), ("ratio", ">6.2f"),
                      ("unpacked B", ">10"), ("ratio", ">6.2f"), ("scripts B", ">9"), ("data B", ">9")], rows))
  print("\neach part deflated alone (unpacked: as collect() makes it; 0 where the packing made the part)")
  print(format_table([("trace", "<24"), ("part", "<14"), ("unpacked B", ">10"), ("packed B", ">9")], parts))


if __name__ == "__main__":
  main()
