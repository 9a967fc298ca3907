"""UI speed in the real browser (Debian's chromium via Playwright) against a viz_server subprocess.

Measures: time to the first painted graph after page load, a step change on a ~2,000-node graph (with the server's
/delta answer already in the browser, as after the page's prefetch, and end to end), and the first render of a
~5,000-node graph (server answer and drawing separately). Prints each figure and its ratio to the budget of the
"Browser UI" issue (50 ms per step, 1 s per first render; ratio < 1 is within budget).

  python bench/bench_ui.py [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compiler.dtype import dtypes  # noqa: E402
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite  # noqa: E402
from compiler.trace import recorder  # noqa: E402
from compiler.uop import AxisType, KernelInfo, Ops, UOp  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
SETTLE_S = 3.0
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def drop_mul_one(x):
  return x


bench_pm = PatternMatcher([(UPat.var("x") * 1, drop_mul_one)], name="drop *1")


def big_kernel(n_nodes: int, name: str) -> UOp:
  """A kernel AST of about n_nodes nodes: a balanced sum over loads at shifted indices, each load times 1."""
  out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), arg=0)
  inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), arg=1)
  r = UOp.range(64, 0, AxisType.LOOP)
  leaves = []
  for i in range(max(2, n_nodes // 7)):  # each leaf adds CONST i, ADD, INDEX, LOAD, MUL, CONST c and the sum's ADD
    v = inp.index(r + i).load() * 1
    leaves.append(v * float(i % 7 + 2))
  while len(leaves) > 1:
    leaves = [leaves[i] + leaves[i + 1] if i + 1 < len(leaves) else leaves[i] for i in range(0, len(leaves), 2)]
  return UOp.sink(out.index(r).store(leaves[0]), arg=KernelInfo(name=name))


def write_trace(path: Path, sizes: list[int]) -> None:
  recorder.enable(path, announce=False)
  try:
    for n in sizes:
      with recorder.trace_context(f"big_{n}", kind="kernel"):
        graph_rewrite(big_kernel(n, f"big_{n}"), bench_pm, name=f"drop *1 ({n})")
  finally:
    recorder.disable()


def get_json(url: str):
  with urllib.request.urlopen(url, timeout=120) as r:
    return json.loads(r.read())


def start_server(trace: Path, log: Path) -> tuple[subprocess.Popen, str]:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  proc = subprocess.Popen([sys.executable, "-m", "viz_server", str(trace), "--port", str(port), "--host", "127.0.0.1"],
                          cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                          env={**os.environ, "VIZ": "0", "PYTHONPATH": str(ROOT)})
  url = f"http://127.0.0.1:{port}"
  deadline = time.time() + 60
  while True:
    try:
      get_json(url + "/api/traces")
      return proc, url
    except OSError:
      if proc.poll() is not None or time.time() > deadline:
        raise RuntimeError(f"viz_server did not start: {log.read_text()[-2000:]}") from None
      time.sleep(0.1)


# after the graph for `want` is on screen, wait for the frame that paints it (rAF, then a task)
PAINTED = "() => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)))"
WARM = """async (k) => {
  const v = window.__viz;
  await window.__vizApi.delta(v.state.trace, v.state.rw, v.state.step, k, true);
}"""
STEP = """async (k) => {
  const t0 = performance.now();
  await window.__viz.setStep(k);
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  return performance.now() - t0;
}"""
OPEN_RW = """async ([ctx, rw]) => {
  const t0 = performance.now();
  await window.__viz.selectContext(ctx, {rw, step: 0});
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  const p = window.__viz.perf;
  return {total: performance.now() - t0, fetch: p.lastFetchMs, dom: p.lastDomMs,
          nodes: window.__viz.graph.nodes.size};
}"""


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--quick", action="store_true", help="fewer repetitions")
  args = ap.parse_args()
  reps = 5 if args.quick else 20
  if not os.path.exists(CHROMIUM):
    print(f"bench_ui: {CHROMIUM} not found (install Debian's chromium: make chromium); skipped", file=sys.stderr)
    return
  from playwright.sync_api import sync_playwright

  with tempfile.TemporaryDirectory() as tmp:
    trace = Path(tmp) / "bench.vztrace"
    write_trace(trace, [2000, 5000])
    proc, url = start_server(trace, Path(tmp) / "server.log")
    try:
      tid = get_json(url + "/api/traces")[0]["id"]
      ctxs = get_json(f"{url}/api/traces/{tid}/contexts")
      rw = {c["name"]: (c["id"], c["rewrites"][0]["id"]) for c in ctxs if c["rewrites"]}
      (c2, r2), (c5, r5) = rw["big_2000"], rw["big_5000"]
      n_steps = len(get_json(f"{url}/api/traces/{tid}/rewrites/{r2}")["steps"])
      g2 = get_json(f"{url}/api/traces/{tid}/rewrites/{r2}/graph?step=0")
      get_json(f"{url}/api/traces/{tid}/rewrites/{r5}/graph?step=0")  # warm the server's layout cache
      rows = []
      with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 900})
        # 1. first graph after page load (the 2,000-node rewrite, deep-linked)
        firsts = []
        for _ in range(3 if args.quick else 5):
          page.goto(f"{url}/#t={tid}&c={c2}&r={r2}&s=0")
          page.wait_for_function("() => window.__viz && window.__viz.perf.firstGraphMs !== null", timeout=60_000)
          firsts.append(page.evaluate("() => window.__viz.perf.firstGraphMs"))
        rows.append((f"first graph after page load, {len(g2['nodes'])} nodes: median of {len(firsts)}",
                     statistics.median(firsts), 1000.0))
        # 2. step changes on the 2,000-node graph: with the server's answer already in the browser (what the page
        # does when it prefetched the neighbouring step), and end to end including the server's answer
        page.evaluate("async () => { window.__vizApi = (await import('/static/api.js')).api; }")
        warm, cold = [], []
        for i in range(min(reps, n_steps - 1)):
          page.evaluate(WARM, i + 1)
          page.evaluate(PAINTED)
          warm.append(page.evaluate(STEP, i + 1))
        for i in range(min(reps, n_steps // 2 - 2)):
          k = n_steps - 1 - 2 * i  # jumps of 2 steps backwards: never prefetched
          page.evaluate(PAINTED)
          cold.append(page.evaluate(STEP, k))
        n2 = len(g2["nodes"])
        rows.append((f"step change, {n2}-node graph, answer in the browser: median of {len(warm)}",
                     statistics.median(warm), 50.0))
        rows.append((f"step change, {n2}-node graph, answer in the browser: best of {len(warm)}", min(warm), 50.0))
        rows.append((f"step change, {n2}-node graph, incl. server answer: median of {len(cold)}",
                     statistics.median(cold), 50.0))
        # 3. first render of the 5,000-node graph (server layout cached), and of the 2,000 one for comparison; after
        # a pause, so that the layouts the server computes in the background after the steps above (the blocks a
        # user stepping on would reach next) do not share the CPU with this measurement
        time.sleep(SETTLE_S)
        r5s = []
        for _ in range(2 if args.quick else 4):
          r5s.append(page.evaluate(OPEN_RW, [c5, r5]))
          page.evaluate(OPEN_RW, [c2, r2])  # switch away so the next open renders from scratch
        # the first open waits for the server (its layout is cached); later ones reuse the browser's copy
        n5 = r5s[0]["nodes"]
        rows.append((f"first render, {n5}-node graph: total incl. server answer", r5s[0]["total"], 1000.0))
        rows.append((f"first render, {n5}-node graph: server answer", r5s[0]["fetch"], 1000.0))
        rows.append((f"first render, {n5}-node graph: model + draw + paint (median of {len(r5s)})",
                     statistics.median(r["total"] - r["fetch"] for r in r5s), 1000.0))
        b.close()
    finally:
      proc.terminate()
      proc.wait(10)
  w = max(len(r[0]) for r in rows)
  print(f"{'measure':<{w}}  {'ms':>9}  {'budget':>7}  {'ratio':>6}")
  for name, ms, budget in rows:
    print(f"{name:<{w}}  {ms:9.1f}  {budget:7.0f}  {ms / budget:6.2f}")


if __name__ == "__main__":
  main()
