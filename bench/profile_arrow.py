"""Where an arrow-key step's time goes in the browser (issue 30): bench_ui's GPT rewrite with the most steps opened,
then steps 1..N pressed as bench_ui presses them (the page's own prefetch), each split into waiting for the server's
answer, applying it to the model (`perf.lastDomMs`) and the frame that paints it, and the server's CPU a step; with
--cpu, Chromium's sampling profiler (CDP `Profiler.start`) over the steps, its self time summed per function; with
--trace, a Chromium trace: the page's main-thread CPU a step (what it cost, whatever else shares the machine) and the
self time of each event by thread; with --apply A B, the page's own parts in the page alone (no server between): the
same compact=2 delta from step s+1 to s+2 applied after step s's graph and the delta to s+1 (entries renamed before,
as when stepping), for s in A..B-1, each part's median (applyDelta, the legend, the groups' refold, the canvas pass
and its raster, forced by reading a pixel, the minimap) and a hash of the model it left (nodes with their call sites,
edges, ghosts, marks, the fold's groups and edges: the same in both trees when the change keeps it); with --frames
DIR also each step's frame (its RGBA pixels, drawn again with the ghosts' fade at its end so that it does not depend
on the clock), and --compare A B says which frames of two such folders differ and by how much; with --jumps N,
after the steps, bench_ui's far jumps (End, then N-1 slider clicks to seeded random steps) split the same way, with
the server's CPU each (what it did between the jump asked and its frame painted, its background work included).
TINYVIZ_ROOT=DIR measures another checkout's viewer (an A/B of two trees).

  PYTHONPATH=. .venv/bin/python bench/profile_arrow.py --gpt-trace T [--steps 40] [--cpu | --trace] [--top 25]
  [--jumps 4] [--apply 5 15 --reps 5 [--frames DIR]]; --compare DIR_A DIR_B
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.environ.get("TINYVIZ_ROOT", str(Path(__file__).resolve().parents[1])))

from bench import bench_ui as ui  # noqa: E402

TRACE_CATEGORIES = ["devtools.timeline", "disabled-by-default-devtools.timeline", "blink", "cc", "gpu", "v8"]
# one arrow step: (total ms to the painted frame, ms waiting for the answer, ms applying it, what the page touched)
STEP_SPLIT = """async (k) => {
  const v = window.__viz, t0 = performance.now();
  await v.setStep(k);
  const t1 = performance.now();
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  return [performance.now() - t0, v.perf.lastFetchMs, v.perf.lastDomMs, t1 - t0, v.perf.lastKind];
}"""
# a jump's graph request, from the page's resource timing: [ms to its first byte (the server's, from the request
# sent), ms receiving it, KB] (zeros if it came from api.js's cache)
GRAPH_TIMING = """() => {
  const got = performance.getEntriesByType('resource').filter((e) => e.name.includes('/graph?'));
  performance.clearResourceTimings();
  const e = got[got.length - 1];
  return e ? [e.responseStart - e.requestStart, e.responseEnd - e.responseStart, e.encodedBodySize / 1000] : [0, 0, 0];
}"""
# --apply: per part ms (median over steps and reps) of applying step s+1 -> s+2 in the page, and the model's hash
APPLY_PARTS = """async ([t, r, a, b, reps, frames]) => {
  const g = window.__viz.graph, GV = Object.getPrototypeOf(Object.getPrototypeOf(g));
  const flush = (c) => c.getContext("2d").getImageData(0, 0, 1, 1);
  const get = async (p) => (await fetch(`/api/traces/${t}/rewrites/${r}/${p}`)).json();
  // the deltas first, one after the other: the server's replay then reaches the steps in order and numbers their
  // fresh ids as in any other run (what the model's hash compares)
  const deltas = [];
  for (let s = 0; s <= b; s++) deltas.push(await get(`delta?from=${s}&to=${s + 1}&compact=2`));
  const cases = [];
  for (let s = a; s < b; s++) cases.push([await get(`graph?step=${s}&compact=1`), deltas[s], deltas[s + 1]]);
  const parts = {apply: [], legend: [], refold: [], draw: [], raster: [], minimap: []};
  let hash = 0;
  const pixels = [];  // with frames: each case's frame (first rep), its RGBA bytes in base64
  const b64 = (u8) => {
    let s = "";
    for (let i = 0; i < u8.length; i += 0x8000) s += String.fromCharCode(...u8.subarray(i, i + 0x8000));
    return btoa(s);
  };
  const mix = (x) => { for (let i = 0; i < x.length; i++) hash = (hash * 31 + x.charCodeAt(i)) | 0; };
  for (let rep = 0; rep < reps; rep++) {
    for (const [graph, d0, d] of cases) {
      g.setData(graph);
      if (!g.applyDelta(d0)) throw new Error("a delta did not fit");
      g.autoView();
      GV.draw.call(g);
      flush(g.canvas);
      const t0 = performance.now();
      if (!g.applyDelta(d)) throw new Error("a delta did not fit");
      const t1 = performance.now();
      g._legend(g.ids().map((id) => g.node(id)));
      const t2 = performance.now();
      g._refold();
      const t3 = performance.now();
      GV.draw.call(g);
      const t4 = performance.now();
      flush(g.canvas);
      const t5 = performance.now();
      g.minimap.update();
      flush(g.minimap.canvas);
      const t6 = performance.now();
      [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5].forEach((ms, i) => parts[Object.keys(parts)[i]].push(ms));
      if (rep) continue;
      const {width: fw, height: fh} = g.canvas;
      if (frames) {  // (drawn again with the ghosts' fading at its end: a frame that does not depend on the clock)
        if (g.ghosts) g.ghosts.t0 = -1e9;
        GV.draw.call(g);
        pixels.push(b64(new Uint8Array(g.ctx.getImageData(0, 0, fw, fh).data.buffer)));
      }
      [...g.nodes.values()].map((n) => `${n.d.id}:${n.x},${n.y}:${n.d.src}:${n.consts}:${n.d.site}:${n.d.created}:`
        + `${n.lines}:${n.w},${n.h}`).sort().forEach(mix);
      const edge = (e) => `${e.d.src}>${e.d.dst}>${e.d.index}`;
      [...g.edges.values()].map((e) => `${edge(e)}:${JSON.stringify(e.pts)}`).sort().forEach(mix);
      (g.ghosts?.edges || []).map(edge).sort().forEach(mix);
      (g.ghosts?.nodes || []).map((n) => `${n.d.id}:${n.d.site}`).sort().forEach(mix);
      (g.ghosts?.drawnNodes || []).map((n) => `drawn ${n.d.id}`).sort().forEach(mix);
      [...g.marked.added, ...g.marked.changed].map(String).sort().forEach(mix);
      // the fold: its groups, hidden nodes and redirected edges
      [...g.fold.groups].map(([rep, grp]) => `${rep}:${grp.index}:${[...grp.members].sort()}`).sort().forEach(mix);
      [...g.fold.hidden].map(String).sort().forEach(mix);
      g.fold.edges.map((e) => `${edge(e)}:${JSON.stringify(e.pts)}`).sort().forEach(mix);
    }
  }
  const med = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
  return {parts: Object.fromEntries(Object.entries(parts).map(([k, xs]) => [k, med(xs)])), hash, pixels,
    size: [g.canvas.width, g.canvas.height]};
}"""


def compare_frames(a: Path, b: Path) -> None:
  """Per frame of two --frames folders: the pixels that differ, and the largest difference of a channel."""
  worst = 0
  for fa in sorted(a.glob("*.rgba")):
    pa, pb = fa.read_bytes(), (b / fa.name).read_bytes()
    if pa == pb:
      print(f"{fa.stem}: identical")
      continue
    diff = [max(abs(x - y) for x, y in zip(pa[i:i + 4], pb[i:i + 4], strict=True)) for i in range(0, len(pa), 4)
            if pa[i:i + 4] != pb[i:i + 4]]
    worst = max(worst, max(diff))
    print(f"{fa.stem}: {len(diff)} of {len(pa) // 4} pixels differ, by at most {max(diff)} (of 255), "
          f"{sum(d > 32 for d in diff)} by more than 32")
  print(f"largest difference {worst}")


def self_times(profile: dict) -> dict[str, float]:
  """Self time (ms) per 'function file:line' of a CDP Profiler profile."""
  nodes = {n["id"]: n for n in profile["nodes"]}
  dt = defaultdict(float)
  for nid, delta in zip(profile.get("samples", []), profile.get("timeDeltas", []), strict=False):
    f = nodes[nid]["callFrame"]
    where = f"{f['functionName'] or '(anon)'} {f['url'].split('/')[-1]}:{f['lineNumber'] + 1}"
    dt[where] += delta / 1000
  return dt


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--gpt-trace", type=Path, help="the trace (all but --compare)")
  ap.add_argument("--steps", type=int, default=40)
  ap.add_argument("--cpu", action="store_true", help="also profile the page's CPU (sampling; slows it a little)")
  ap.add_argument("--trace", action="store_true", help="also a Chromium trace: time per event name and thread")
  ap.add_argument("--top", type=int, default=25)
  ap.add_argument("--jumps", type=int, default=0, help="after the steps: End and N-1 slider clicks (bench_ui's)")
  ap.add_argument("--apply", type=int, nargs=2, metavar=("A", "B"), help="the page's parts, steps A..B (see above)")
  ap.add_argument("--reps", type=int, default=5, help="with --apply: repetitions")
  ap.add_argument("--frames", type=Path, help="with --apply: save each step's frame (RGBA) in this folder")
  ap.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"), help="compare two --frames folders and exit")
  args = ap.parse_args()
  if args.compare:
    compare_frames(*args.compare)
    return
  if not args.gpt_trace:
    ap.error("--gpt-trace is required")
  from playwright.sync_api import sync_playwright

  with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
    proc, url = ui.start_server(args.gpt_trace, Path(tmp) / "server.log")
    browser = p.chromium.launch(executable_path=ui.CHROMIUM, headless=True, args=ui.CHROMIUM_ARGS)
    try:
      tid = ui.get_json(url + "/api/traces")[0]["id"]
      ctxs = ui.get_json(f"{url}/api/traces/{tid}/contexts")
      n, cbig, rbig = max((r["matches"], c["id"], r["id"]) for c in ctxs for r in c["rewrites"])
      page = browser.new_context(viewport=ui.VIEWPORT).new_page()
      page.goto(f"{url}/#t={tid}&c={cbig}&r={rbig}&s=0")
      ui.wait_first_graph(page)
      if args.apply:
        got = page.evaluate(APPLY_PARTS, [tid, rbig, *args.apply, args.reps, bool(args.frames)])
        if args.frames:
          args.frames.mkdir(parents=True, exist_ok=True)
          for s, px in zip(range(args.apply[0], args.apply[1]), got["pixels"], strict=True):
            (args.frames / f"step{s + 2:04d}_{got['size'][0]}x{got['size'][1]}.rgba").write_bytes(base64.b64decode(px))
        print(f"in-page parts of a step (ms, median of steps {args.apply[0] + 1}..{args.apply[1]} x {args.reps}), "
              f"model hash {got['hash']}:")
        for part, ms in got["parts"].items():
          print(f"  {part:8} {ms:6.2f}")
        print(f"  {'total':8} {sum(got['parts'].values()):6.2f}")
        return
      page.wait_for_timeout(1500)  # the first graph's neighbours prefetched
      cdp = page.context.new_cdp_session(page)
      if args.cpu:
        cdp.send("Profiler.enable")
        cdp.send("Profiler.setSamplingInterval", {"interval": 200})
        cdp.send("Profiler.start")
      if args.trace:
        browser.start_tracing(page=page, categories=TRACE_CATEGORIES)
      cpu0 = process_cpu_ms(proc.pid)
      rows = [page.evaluate(STEP_SPLIT, k) for k in range(1, min(args.steps, n) + 1)]
      server_ms = (process_cpu_ms(proc.pid) - cpu0) / len(rows)
      jumps = far_jumps(page, proc.pid, n, args.jumps) if args.jumps else []
      prof = cdp.send("Profiler.stop")["profile"] if args.cpu else None
      events = json.loads(browser.stop_tracing())["traceEvents"] if args.trace else None
    finally:
      browser.close()
      ui.stop_server(proc)
  tot, fetch, dom, shown = ([r[i] for r in rows] for i in range(4))
  paint = [a - b for a, b in zip(tot, shown, strict=True)]
  other = [s - f - d for s, f, d in zip(shown, fetch, dom, strict=True)]
  print(f"{len(rows)} arrow steps of a {n}-step rewrite ({sum(r[4] == 'delta' for r in rows)} by delta); "
        f"server CPU {server_ms:.1f} ms a step")
  print(f"{'part':32} {'median':>8} {'p95':>8} {'min':>8}")
  for name, xs in (("total (to the painted frame)", tot), ("waiting for the answer", fetch),
                   ("applying it (applyDelta, legend)", dom), ("show's other work", other),
                   ("the frame after (draw, paint)", paint)):
    print(f"{name:32} {statistics.median(xs):8.1f} {ui.p95(xs):8.1f} {min(xs):8.1f}")
  if jumps:
    print_jumps(jumps)
  print_profiles(prof, events, len(rows), args.top)


def print_profiles(prof: dict | None, events: list[dict] | None, steps: int, top: int) -> None:
  """The page's CPU profile (--cpu) and trace (--trace) over the steps, their `top` entries."""
  if prof:
    st = sorted(self_times(prof).items(), key=lambda kv: -kv[1])
    total = sum(v for _, v in st)
    print(f"\nCPU self time over the steps, {total:.0f} ms sampled:")
    for where, ms in st[:top]:
      print(f"{ms:8.1f} ms  {where}")
  if events:
    print(f"page's main thread CPU: {main_thread_cpu(events) / steps:.1f} ms a step")
    tt = sorted(thread_times(events).items(), key=lambda kv: -kv[1])
    print("\nTrace self time over the steps, by thread and event:")
    for (thread, name), ms in tt[:top]:
      print(f"{ms:8.1f} ms  {thread:24} {name}")


def far_jumps(page, pid: int, n: int, count: int) -> list[tuple[tuple[int, int], list, float]]:
  """bench_ui's jumps (End, then slider clicks to random.Random(0)'s steps), each split as STEP_SPLIT splits a step,
  with the server's CPU ms from the jump asked to its frame painted; ((from, to), split, server ms) each."""
  rng = random.Random(0)
  at = page.evaluate("() => window.__viz.graph.shown.step")
  out = []
  for k in [n] + [rng.randrange(n) for _ in range(count - 1)]:
    cpu0 = process_cpu_ms(pid)
    split = page.evaluate(STEP_SPLIT, k)
    out.append(((at, k), split + page.evaluate(GRAPH_TIMING), process_cpu_ms(pid) - cpu0))
    at = k
  return out


def print_jumps(jumps: list[tuple[tuple[int, int], list, float]]) -> None:
  """far_jumps' table: each jump's parts (ms) and the server's CPU, then their median."""
  print(f"\n{'far jump':16} {'total':>7} {'answer':>7} {'[ttfb':>7} {'recv]':>7} {'apply':>7} {'other':>7} "
        f"{'frame':>7} {'server':>7} {'KB':>7}  (ms; ttfb, recv: the graph request's; server: its CPU)")
  for (j, k), (tot_ms, fetch_ms, dom_ms, shown_ms, _, ttfb, recv, kb), srv in jumps:
    print(f"{f'{j} -> {k}':16} {tot_ms:7.1f} {fetch_ms:7.1f} {ttfb:7.1f} {recv:7.1f} {dom_ms:7.1f} "
          f"{shown_ms - fetch_ms - dom_ms:7.1f} {tot_ms - shown_ms:7.1f} {srv:7.1f} {kb:7.1f}")
  print(f"{'median':16} {statistics.median(r[1][0] for r in jumps):7.1f}")


def process_cpu_ms(pid: int) -> float:
  """CPU time (user + system, ms) process pid and its children that ended have used."""
  f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
  return sum(int(x) for x in f[11:15]) * 1000 / os.sysconf("SC_CLK_TCK")


def main_thread_cpu(events: list[dict]) -> float:
  """CPU time (ms, the events' thread durations) of the renderer's main thread's top-level tasks in a trace: what the
  page cost, whatever else shared the machine."""
  names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
  main = [e for e in events if e.get("ph") == "X" and "tdur" in e
          and names.get((e["pid"], e["tid"])) == "CrRendererMain"]
  main.sort(key=lambda e: (e["ts"], -e["dur"]))
  total, end = 0.0, -1.0
  for e in main:  # top-level events only (the nested ones are inside their parent's time)
    if e["ts"] >= end:
      total += e["tdur"] / 1000
      end = e["ts"] + e["dur"]
  return total


def thread_times(events: list[dict]) -> dict[tuple[str, str], float]:
  """Self time (ms) of each complete trace event, by (thread name, event name): nested events' time taken out."""
  names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
  by_thread: dict[tuple[int, int], list[dict]] = defaultdict(list)
  for e in events:
    if e.get("ph") == "X" and "dur" in e:
      by_thread[(e["pid"], e["tid"])].append(e)
  out: dict[tuple[str, str], float] = defaultdict(float)
  for key, evs in by_thread.items():
    evs.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack: list[list] = []  # [end, name, time of its children, duration]
    for e in [*evs, {"ts": float("inf"), "dur": 0, "name": None}]:
      while stack and stack[-1][0] <= e["ts"]:
        _, name, child, dur = stack.pop()
        out[(names.get(key, "?"), name)] += (dur - child) / 1000
        if stack:
          stack[-1][2] += dur
      stack.append([e["ts"] + e["dur"], e["name"], 0.0, e["dur"]])
  return out

if __name__ == "__main__":
  main()
