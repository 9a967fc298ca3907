"""Size of `python -m compiler.trace export`'s page against its trace, and what each part of it costs: the page's
scripts (the UI's bundle and the export's own: as embedded, deflated in base 85), and the embedded data as collect()
makes it (deflated and base64, as the export embedded it before viz_server/export/pack.py, with the module inline as
text: the `unpacked` page) and as it is embedded now (packed, deflated, base 85), part by part (each deflated alone).

  python bench/bench_export_size.py [TRACE ...] [--open N] [--gpt SIZE] [--cost] [--before ROOT]
  (default: the full demo, examples/demo.py, recorded here)

--open N: also open each page N times from file:// in headless Chromium and report the median time from navigation
start to the first graph on screen (the page's own clock).
--gpt SIZE: also record one GPT-2-shaped training step (bench/real_models.py's gpt_step at SIZE: tiny, quick, full)
with VIZ=-1, as the demo is recorded.
--cost: what `export` costs, each trace exported by the command in a child process: wall and CPU seconds and the
child's peak RSS (os.wait4), with the page's size against the trace's; --before ROOT: the same with ROOT's viz_server
(a checkout of the code before a change), a row each.

Issue 30, --cost (the 2-core machine shared with other jobs, load 4-6: compare the CPU column; one run each; before:
the export collected every step's graph, then packed, encoded and wrote the page as one text):
  trace                     code    trace B    CPU s  peak MB  ratio
  demo (examples/demo.py)   before   275806     8.92      194   2.45
  demo (examples/demo.py)   now      275806     8.31      114   2.46
  gpt_step tiny             before  1651390    84.33      848   2.59
  gpt_step tiny             now     1651390    90.27      563   2.58
The time is the viewer's own work, the same before and after: laying out each rewrite's step-0 graph (27 of the GPT
trace's ~90 s) and deriving each step's layout from the one before; the export's own packing is about a fifth.
Then (load 11-26: CPU times inflated; before and now interleaved, the demo's the median of 3): step-0 graphs of one
shape laid out once (export/layouts.py), bent routes keyed by tuples, not JSON text, kernel sources not highlighted:
  trace                     code    trace B    CPU s  peak MB  ratio
  demo (examples/demo.py)   before   278844     9.49      115   2.49
  demo (examples/demo.py)   now      278844     8.68      128   2.49
  gpt_step tiny             before  1598230   108.06      575   2.67
  gpt_step tiny             now     1598230    87.31      605   2.67
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.table import format_table  # noqa: E402
from viz_server.export.collect import collect  # noqa: E402
from viz_server.export.command import export  # noqa: E402
from viz_server.export.pack import pack  # noqa: E402
from viz_server.export.page import BOOT, payload, render, ui_module  # noqa: E402
from viz_server.offline import OfflineApi  # noqa: E402


def record_demo(path: Path, scale: float, only: list[str]) -> Path:
  cmd = [sys.executable, str(ROOT / "examples" / "demo.py"), "--scale", str(scale)]
  cmd += ["--only", *only] if only else []
  subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT,
                 env={**os.environ, "VIZ": "-1", "VIZ_TRACE": str(path), "PYTHONPATH": str(ROOT)})
  return path


def record_gpt(path: Path, size: str) -> Path:
  """One training step of bench/real_models.py's gpt_step at `size`, recorded with VIZ=-1."""
  code = ("import sys; from bench import real_models as rm; "
          f"rm.build('gpt_step', rm.tinyviz(), rm.SIZES[{size!r}])()")
  subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd=ROOT,
                 env={**os.environ, "VIZ": "-1", "VIZ_TRACE": str(path), "PYTHONPATH": str(ROOT)})
  return path


def cost(trace: Path, root: Path) -> tuple[float, float, float, int]:
  """(wall s, CPU s, peak RSS MB, page bytes) of `export trace` run by root's viz_server in a child process."""
  with tempfile.TemporaryDirectory() as d:
    out = Path(d) / "x.html"
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "viz_server.tools", "export", str(trace), "-o", str(out)], cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.DEVNULL)
    _, status, use = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
      raise SystemExit(f"export of {trace} failed under {root}")
    wall = time.perf_counter() - start
    return wall, use.ru_utime + use.ru_stime, use.ru_maxrss / 1024, out.stat().st_size


def deflated(obj) -> int:
  return len(zlib.compress(json.dumps(obj, separators=(",", ":")).encode("utf-8"), 9))


def measure(trace: Path) -> tuple[tuple, list[tuple]]:
  """(the trace's row, its parts' rows)."""
  with OfflineApi(trace) as api:
    data = collect(api)
  page = len(render(data, trace.name).encode("utf-8"))
  ui = ui_module()
  block = payload(data, ui)
  script, now = len(BOOT.read_bytes()) + len(block["ui"]["data"]), len(block["data"]["data"])
  unpacked = -(-deflated(data) // 3) * 4  # (base64's length)
  packed = pack(data)
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
    export(trace, html)
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
  ap.add_argument("--gpt", choices=("tiny", "quick", "full"), help="also a GPT training step's trace at this size")
  ap.add_argument("--cost", action="store_true", help="time and peak memory of the export command")
  ap.add_argument("--before", type=Path, metavar="ROOT", help="with --cost: also ROOT's export (older code)")
  args = ap.parse_args()
  with tempfile.TemporaryDirectory() as d:
    traces = args.traces or [record_demo(Path(d) / "demo.vztrace", args.scale, args.only)]
    traces += [record_gpt(Path(d) / f"gpt_step_{args.gpt}.vztrace", args.gpt)] if args.gpt else []
    if args.cost:
      costs = []
      for t in traces:
        for label, root in [("before", args.before)] * bool(args.before) + [("now", ROOT)]:
          wall, cpu, mb, size = cost(t, root)
          costs.append((t.name, label, t.stat().st_size, wall, cpu, mb, size / t.stat().st_size))
      print(format_table([("trace", "<24"), ("code", "<7"), ("trace B", ">9"), ("wall s", ">7.2f"), ("CPU s", ">7.2f"),
                          ("peak MB", ">8.0f"), ("ratio", ">6.2f")], costs))
      print(f"(load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)\n")
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
