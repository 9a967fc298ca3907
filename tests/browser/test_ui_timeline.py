"""The timeline panel draws a real compile's contexts, passes, LLVM compiles and kernel runs where the API's
/timeline places them; hover, click, wheel, drag and double click do what they say."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.browser import FRAME, HITS, ROOT, VIEW, Server, canvas_box, open_page, plot_of, shot, state, wait_graph  # noqa: E402
from support.proc_helpers import open_gate, stop_writer

from compiler.trace import recorder

WRITER = Path(__file__).resolve().parents[1] / "support" / "tracegen.py"


def write_timed(path) -> None:
  """Two kernels compiled with LLVM and run by the real compiler: contexts, rewrites, sources and runs, timed."""
  from compiler.tensor import Tensor
  a = np.arange(64, dtype=np.float32)
  recorder.enable(path, announce=False)
  try:
    total = (Tensor(a) * 2).sum().numpy()
    rows = (Tensor(a).reshape(8, 8) + 1).max(axis=1).numpy()
  finally:
    recorder.disable()
  assert total == 2 * a.sum() and np.array_equal(rows, a.reshape(8, 8).max(axis=1) + 1)


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
  """A server of its own: the session's trace directory is left as the other tests expect it."""
  d = tmp_path_factory.mktemp("timeline")
  write_timed(d / "timed.vztrace")
  srv = Server(d, tmp_path_factory.mktemp("timeline-log") / "server.log")
  yield srv
  srv.stop()




def open_timeline(page, srv) -> tuple[int, dict]:
  """Open the trace, then the panel with key 6; wait until it has drawn. -> (trace id, the API's timeline)."""
  t = srv.trace_id("timed.vztrace", ended=True)
  tl = srv.api(f"/api/traces/{t}/timeline")
  open_page(page, srv, f"#t={t}")
  assert state(page)["panel"] == "summary"  # (the landing view)
  page.keyboard.press("6")
  page.locator("#panel-timeline canvas").wait_for()
  page.wait_for_function("(n) => window.__viz.timelinePanel.hits.length > 0 && "
                         "window.__viz.timelinePanel.data?.rewrites?.id?.length === n", arg=len(tl["rewrites"]["id"]))
  assert state(page)["panel"] == "timeline"
  assert page.locator("#panel-tabs button.active").inner_text() == "Timeline"
  assert page.locator("#panel-step").is_hidden()
  settle(page)
  return t, tl


# true once the canvas's box and its hits have stayed the same for SETTLE_FRAMES frames (asked each frame)
SETTLE_FRAMES = 3
SETTLED = f"""() => {{
  const r = document.querySelector('#panel-timeline canvas').getBoundingClientRect();
  const now = JSON.stringify([r.x, r.y, r.width, r.height, ({HITS})()]);
  const s = window.__settle;
  s.frames = now === s.now ? s.frames + 1 : 0;
  s.now = now;
  return s.frames >= {SETTLE_FRAMES};
}}"""


def settle(page) -> None:
  """Wait until the canvas's place and what it draws stay the same over a few frames: tests that point at a span read
  its place from the hits, and a late layout change on a loaded machine (the page still filling in) would move it."""
  page.evaluate("() => { window.__settle = {now: null, frames: 0} }")
  page.wait_for_function(SETTLED, polling="raf", timeout=60_000)


def spans_of(tl: dict) -> list[tuple]:
  """(kind, ctx, rewrite, name, start, end) of every span the API gives."""
  out = [("context", c["id"], None, c["name"], c["start"], c["end"] if c["end"] is not None else tl["end"])
         for c in tl["contexts"]]
  rw = tl["rewrites"]
  out += [("pass", rw["ctx"][i], rw["id"][i], rw["names"][rw["name"][i]], rw["start"][i], rw["start"][i] + rw["dur"][i])
          for i in range(len(rw["id"]))]
  names = {c["id"]: c["name"] for c in tl["contexts"]}
  out += [("compile", c["ctx"], None, names[c["ctx"]], c["start"], c["start"] + c["dur"]) for c in tl["compiles"]]
  out += [("run", r["ctx"], None, r["kname"], r["start"], r["start"] + r["dur"]) for r in tl["runs"]]
  return out




def test_timeline_draws_the_apis_spans(page, timed):
  t, tl = open_timeline(page, timed)
  assert len(tl["contexts"]) >= 5 and len(tl["rewrites"]["id"]) > 10
  assert len(tl["compiles"]) == 2 and len(tl["runs"]) == 2, "each kernel is compiled and run once"
  view = page.evaluate(VIEW)
  assert view["t0"] == 0 and view["t1"] == pytest.approx(tl["end"]), "it opens on the whole trace"
  hits = page.evaluate(HITS)
  by_kind = {k: [h for h in hits if h["kind"] == k] for k in ("context", "pass", "compile", "run")}
  # the whole trace: every context, compile and run has a span of its own, with the API's names
  assert sorted((h["ctx"], h["name"]) for h in by_kind["context"]) == sorted((c["id"], c["name"])
                                                                            for c in tl["contexts"])
  assert sorted(h["ctx"] for h in by_kind["compile"]) == sorted(c["ctx"] for c in tl["compiles"])
  assert sorted((h["ctx"], h["name"]) for h in by_kind["run"]) == sorted((r["ctx"], r["kname"]) for r in tl["runs"])
  assert by_kind["pass"] and {h["name"] for h in by_kind["pass"]} <= set(tl["rewrites"]["names"])
  # lanes top to bottom: contexts, passes, LLVM compile, runs
  lanes = [by_kind[k] for k in ("context", "pass", "compile", "run")]
  for upper, lower in zip(lanes, lanes[1:]):
    assert max(h["y1"] for h in upper) <= min(h["y0"] for h in lower)
  # contexts nest by depth: a child's row is below its parent's
  depth = {c["id"]: c["depth"] for c in tl["contexts"]}
  ys = {h["ctx"]: h["y0"] for h in by_kind["context"]}
  assert len({depth[c] for c in ys}) > 1
  assert all((ys[a] < ys[b]) == (depth[a] < depth[b]) for a in ys for b in ys if depth[a] != depth[b])
  # x is linear in time: one scale and offset place every context's start and end
  ctx = {c["id"]: c for c in tl["contexts"]}
  first, last = by_kind["context"][0], max(by_kind["context"], key=lambda h: ctx[h["ctx"]]["start"])
  k = (last["x0"] - first["x0"]) / (ctx[last["ctx"]]["start"] - ctx[first["ctx"]]["start"])
  assert k > 0
  for h in by_kind["context"]:
    c = ctx[h["ctx"]]
    assert h["x0"] == pytest.approx(first["x0"] + k * (c["start"] - ctx[first["ctx"]]["start"]), abs=1.01)
    assert h["x1"] - h["x0"] == pytest.approx(max(1, k * (c["end"] - c["start"])), abs=1.01)
  # zoomed onto any one span, that span is drawn where the view puts it (the ones under a pixel share a column
  # with their neighbours in the whole view)
  found = page.evaluate("""async (spans) => {
    const p = window.__viz.timelinePanel, out = [];
    for (const [kind, ctx, rw, name, s, e] of spans) {
      const pad = Math.max((e - s) * 0.25, 2e-6);
      p.setView(s - pad, e + pad);
      await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
      const hit = p.hits.filter(x => x.kind === kind && x.ctx === ctx && x.rw === rw && x.name === name);
      out.push({n: hit.length, x0: hit.length ? hit[0].x0 : null, x1: hit.length ? hit[0].x1 : null,
                view: {...p.view}, w: p.cssW});
    }
    return out;
  }""", [list(s) for s in spans_of(tl)])
  left, plot = plot_of(hits, tl)
  for span, f in zip(spans_of(tl), found):
    kind, _, _, name, s, e = span
    assert f["n"] == 1, f"{kind} {name} at {s}: drawn {f['n']} times"
    v = f["view"]
    xs, xe = (left + (u - v["t0"]) / (v["t1"] - v["t0"]) * plot for u in (s, e))
    # clipped at the plot's edges; a span under a pixel takes the pixel column it starts in
    x0, x1 = max(left, xs), min(left + plot, xe)
    if xe - xs < 1:
      # its pixel column: the page's float arithmetic may put a start that is a whole pixel here on either side
      cols = {math.floor(xs - 1e-6), math.floor(xs + 1e-6)}
      assert f["x0"] in cols and f["x1"] == f["x0"] + 1, (span, f, xs)
      continue
    assert (f["x0"], f["x1"]) == (pytest.approx(x0, abs=0.01), pytest.approx(x1, abs=0.01)), span


def test_timeline_hover_click_zoom(page, timed):
  t, tl = open_timeline(page, timed)
  box = canvas_box(page)
  hits = page.evaluate(HITS)
  rw = tl["rewrites"]
  passes = sorted((h for h in hits if h["kind"] == "pass"), key=lambda h: h["x1"] - h["x0"])
  # hover the widest pass: the tooltip names it, with its matches
  wide = passes[-1]
  i = rw["id"].index(wide["rw"])
  page.mouse.move(box["x"] + (wide["x0"] + wide["x1"]) / 2, box["y"] + (wide["y0"] + wide["y1"]) / 2)
  tip = page.locator("#panel-timeline .timeline-tip")
  tip.wait_for()
  text = tip.inner_text()
  assert text.splitlines()[0] == rw["names"][rw["name"][i]], (wide, "hits unchanged:", page.evaluate(HITS) == hits)
  matches = rw["matches"][i]
  assert f"{matches} match{'' if matches == 1 else 'es'}" in text and f"rewrite #{wide['rw']}" in text
  shot(page, "panel-timeline")
  page.mouse.move(box["x"] + 5, box["y"] + 5)  # the axis: no span, no tooltip
  tip.wait_for(state="hidden")

  # click a kernel run: its kernel's context is selected
  run = next(h for h in hits if h["kind"] == "run" and h["ctx"] != state(page)["ctx"])
  page.mouse.click(box["x"] + (run["x0"] + run["x1"]) / 2, box["y"] + (run["y0"] + run["y1"]) / 2)
  page.wait_for_function("(c) => window.__viz.state.ctx === c", arg=run["ctx"])
  assert state(page)["panel"] == "timeline", "the timeline stays open"
  # click a pass of the other kernel (its first that matched, zoomed onto): that rewrite is selected, its graph shown
  kernel = next(c["id"] for c in tl["contexts"] if c["kind"] == "kernel" and c["id"] != run["ctx"])
  i = next(i for i in range(len(rw["id"])) if rw["ctx"][i] == kernel and rw["matches"][i] > 0)
  s, e = rw["start"][i], rw["start"][i] + rw["dur"][i]
  page.evaluate("([a, b]) => window.__viz.timelinePanel.setView(a, b)", [s - (e - s), e + (e - s)])
  page.evaluate(FRAME)
  other = next(h for h in page.evaluate(HITS) if h["rw"] == rw["id"][i])
  page.mouse.click(box["x"] + (other["x0"] + other["x1"]) / 2, box["y"] + (other["y0"] + other["y1"]) / 2)
  page.wait_for_function("(r) => window.__viz.state.rw === r", arg=other["rw"])
  assert state(page)["ctx"] == other["ctx"]
  wait_graph(page, t, other["rw"], 0)
  # the selected rewrite is outlined in the accent color (once the pointer's white hover outline is gone)
  page.mouse.move(box["x"] + 5, box["y"] + 5)
  page.evaluate(FRAME)
  top = pixel(page, (other["x0"] + other["x1"]) / 2, other["y0"] + 0.5)
  assert top == pytest.approx([0x58, 0xa6, 0xff], abs=24), "--accent"
  page.locator("#panel-timeline .timeline-fit").click()
  page.wait_for_function("() => { const p = window.__viz.timelinePanel; return p.view.t1 === p.extent[1]; }")
  page.evaluate(FRAME)
  _zoom_pan_and_fit(page, box, hits, tl)


def _zoom_pan_and_fit(page, box: dict, hits: list, tl: dict) -> None:
  """From the fitted view whose spans are `hits`: the wheel, a drag and a double click on the axis."""
  # the wheel zooms in around the pointer: the time under it stays there
  v0 = page.evaluate(VIEW)
  left, plot = plot_of(hits, tl)
  px = left + plot * 0.6
  page.mouse.move(box["x"] + px, box["y"] + 10)
  page.mouse.wheel(0, -300)
  page.wait_for_function("(t1) => window.__viz.timelinePanel.view.t1 !== t1", arg=v0["t1"])
  v1 = page.evaluate(VIEW)
  assert v1["t1"] - v1["t0"] < (v0["t1"] - v0["t0"]) * 0.9
  frac = (px - left) / plot
  t_before = v0["t0"] + frac * (v0["t1"] - v0["t0"])
  t_after = v1["t0"] + frac * (v1["t1"] - v1["t0"])
  assert t_after == pytest.approx(t_before, abs=(v0["t1"] - v0["t0"]) / plot * 2)
  page.evaluate(FRAME)
  zoomed = page.evaluate(HITS)
  assert zoomed != hits, "the spans are drawn at the new scale"
  # a drag pans: the width of the view stays, its start moves by the dragged time; nothing gets selected
  sel = (state(page)["ctx"], state(page)["rw"])
  page.mouse.move(box["x"] + px, box["y"] + 10)
  page.mouse.down()
  page.mouse.move(box["x"] + px + 40, box["y"] + 10, steps=4)
  page.mouse.move(box["x"] + px + 80, box["y"] + 10, steps=4)
  page.mouse.up()
  v2 = page.evaluate(VIEW)
  assert v2["t1"] - v2["t0"] == pytest.approx(v1["t1"] - v1["t0"])
  assert v2["t0"] == pytest.approx(max(0, v1["t0"] - 80 / plot * (v1["t1"] - v1["t0"])), rel=1e-6, abs=1e-12)
  assert (state(page)["ctx"], state(page)["rw"]) == sel
  # wheel out, then double click on the axis: the whole trace again
  page.mouse.wheel(0, 200)
  page.wait_for_function("(w) => { const v = window.__viz.timelinePanel.view; return v.t1 - v.t0 > w; }",
                         arg=v2["t1"] - v2["t0"])
  page.mouse.dblclick(box["x"] + px, box["y"] + 8)
  page.wait_for_function("(e) => { const v = window.__viz.timelinePanel.view; return v.t0 === 0 && v.t1 === e; }",
                         arg=page.evaluate("() => window.__viz.timelinePanel.extent[1]"))
  page.evaluate(FRAME)
  assert page.evaluate(HITS) == hits, "fit draws the first picture again"
  assert (state(page)["ctx"], state(page)["rw"]) == sel


def pixel(page, x: float, y: float) -> list[int]:
  """The canvas' RGB at (x, y) CSS px."""
  return page.evaluate("""([x, y]) => { const c = document.querySelector('#panel-timeline canvas');
    const d = devicePixelRatio; return Array.from(c.getContext('2d').getImageData(Math.floor(x * d),
    Math.floor(y * d), 1, 1).data.slice(0, 3)); }""", [x, y])


def test_timeline_many_passes(page, timed):
  """20000 passes over a second: the whole view draws at most one span per pixel column and row; zoomed in, each."""
  n, every, dur = 20000, 50e-6, 30e-6
  names = ["symbolic", "index fold", "expand", "lower", "symbolic + kernel cleanup", "vectorize", "devectorize"]
  fake = {"t0": 1.0, "end": 1.0,
          "contexts": [{"id": 0, "parent": None, "name": "default", "kind": "default", "start": 0, "end": 1.0,
                        "depth": 0},
                       {"id": 1, "parent": 0, "name": "E_big", "kind": "kernel", "start": 0, "end": None, "depth": 1}],
          "rewrites": {"names": names, "id": list(range(n)), "ctx": [1] * n, "name": [i % len(names) for i in range(n)],
                       "start": [i * every for i in range(n)], "dur": [dur] * n, "matches": [i % 5 for i in range(n)]},
          "compiles": [], "runs": []}
  page.route("**/timeline", lambda route: route.fulfill(json=fake))
  t = timed.trace_id("timed.vztrace")
  open_page(page, timed, f"#t={t}&p=timeline")  # a deep link to the panel
  page.wait_for_function("() => window.__viz.timelinePanel.hits.length > 0")
  hits = page.evaluate(HITS)
  passes = [h for h in hits if h["kind"] == "pass"]
  left, plot = plot_of(hits, fake)
  assert 0 < len(passes) <= plot + 1, "one span per pixel column"
  assert all(left <= h["x0"] < h["x1"] <= left + plot for h in passes)
  assert {h["kind"] for h in hits} == {"context", "pass"}, "no compile or run lanes without compiles or runs"
  # zoomed to the first millisecond: its 20 passes, each where its time puts it, with its own name
  page.evaluate("() => window.__viz.timelinePanel.setView(0, 0.001)")
  page.evaluate(FRAME)
  passes = [h for h in page.evaluate(HITS) if h["kind"] == "pass"]
  assert [h["rw"] for h in passes] == list(range(20))
  for h in passes:
    i = h["rw"]
    assert h["name"] == names[i % len(names)]
    assert h["x0"] == pytest.approx(left + i * every / 0.001 * plot, abs=0.01)
    assert h["x1"] - h["x0"] == pytest.approx(dur / 0.001 * plot, abs=0.01)


def test_timeline_overlapping_contexts_of_one_depth_get_rows_of_their_own(page, timed):
  """Kernels compiled ahead of their runs (each context begins at its optimize, up to COMPILE_AHEAD kernels before its
  run) overlap their siblings: each overlapping one is drawn on a row of its own below, one that starts after another
  ended shares its row, and every row of a depth is above the next depth's."""
  kern = [(2, 0.1, 0.5), (3, 0.2, 0.6), (4, 0.3, 0.7), (5, 0.55, 0.9)]  # (id, start, end): 5 starts after 2 ended
  fake = {"t0": 1.0, "end": 1.0,
          "contexts": [{"id": 0, "parent": None, "name": "default", "kind": "default", "start": 0, "end": 1.0,
                        "depth": 0},
                       {"id": 1, "parent": 0, "name": "schedule 0", "kind": "schedule", "start": 0.05, "end": 0.95,
                        "depth": 1}]
          + [{"id": i, "parent": 1, "name": f"E_{i}", "kind": "kernel", "start": s, "end": e, "depth": 2}
             for i, s, e in kern]
          + [{"id": 6, "parent": 2, "name": "inner", "kind": "context", "start": 0.15, "end": 0.2, "depth": 3}],
          "rewrites": {"names": [], "id": [], "ctx": [], "name": [], "start": [], "dur": [], "matches": []},
          "compiles": [], "runs": []}
  page.route("**/timeline", lambda route: route.fulfill(json=fake))
  t = timed.trace_id("timed.vztrace")
  open_page(page, timed, f"#t={t}&p=timeline")
  page.wait_for_function("() => window.__viz.timelinePanel.hits.length > 0")
  ys = {h["ctx"]: (h["y0"], h["y1"]) for h in page.evaluate(HITS) if h["kind"] == "context"}
  assert sorted(ys) == [0, 1, 2, 3, 4, 5, 6]
  assert ys[0][1] <= ys[1][0] and ys[1][1] <= ys[2][0], "depths top to bottom"
  rows = sorted({ys[i][0] for i in (2, 3, 4, 5)})
  assert len(rows) == 3 and ys[5][0] == ys[2][0], "three overlapping kernels on three rows; the fourth reuses the first"
  assert ys[2][0] < ys[3][0] < ys[4][0]
  assert max(ys[i][1] for i in (2, 3, 4, 5)) <= ys[6][0], "the next depth below every row of this one"


def test_timeline_compiles_at_once_get_rows_of_their_own(page, timed):
  """Two LLVM compiles at once (the compile worker's and the calling thread's, realize._Job) are drawn one above the
  other, not over each other; a compile that starts after another ended shares its row."""
  comp = [(2, 0.1, 0.3), (3, 0.2, 0.15), (4, 0.45, 0.1)]  # (ctx, start, dur): 3 runs during 2, 4 after both
  fake = {"t0": 1.0, "end": 1.0,
          "contexts": [{"id": 0, "parent": None, "name": "default", "kind": "default", "start": 0, "end": 1.0,
                        "depth": 0}]
          + [{"id": i, "parent": 0, "name": f"E_{i}", "kind": "kernel", "start": s, "end": s + d, "depth": 1}
             for i, s, d in comp],
          "rewrites": {"names": [], "id": [], "ctx": [], "name": [], "start": [], "dur": [], "matches": []},
          "compiles": [{"ctx": i, "start": s, "dur": d} for i, s, d in comp], "runs": []}
  page.route("**/timeline", lambda route: route.fulfill(json=fake))
  t = timed.trace_id("timed.vztrace")
  open_page(page, timed, f"#t={t}&p=timeline")
  page.wait_for_function("() => window.__viz.timelinePanel.hits.length > 0")
  ys = {h["ctx"]: (h["y0"], h["y1"]) for h in page.evaluate(HITS) if h["kind"] == "compile"}
  assert sorted(ys) == [2, 3, 4]
  assert ys[2][1] <= ys[3][0], "the compile that ran during another is drawn below it"
  assert ys[4] == ys[2], "a compile after both shares the first row"
  labels = page.evaluate("() => window.__viz.timelinePanel.rows.filter((r) => r.lane === 'compile')"
                         ".map((r) => r.label)")
  assert labels == ["LLVM compile", ""]


def test_timeline_crisp_and_empty(page, timed):
  open_timeline(page, timed)
  # the canvas backing store follows devicePixelRatio
  dims = page.evaluate("""() => { const c = document.querySelector('#panel-timeline canvas');
    return {w: c.width, h: c.height, cw: c.clientWidth, ch: c.clientHeight, dpr: devicePixelRatio}; }""")
  assert dims["w"] == round(dims["cw"] * dims["dpr"]) and dims["h"] == round(dims["ch"] * dims["dpr"])
  # a trace without timed events: the muted message instead of a canvas
  asked = []

  def no_events(route):
    asked.append(route.request.url)
    rewrites = {"names": [], "id": [], "ctx": [], "name": [], "start": [], "dur": [], "matches": []}
    route.fulfill(json={"t0": None, "end": 0.0, "contexts": [], "compiles": [], "runs": [], "rewrites": rewrites})
  page.route("**/timeline", no_events)
  # each key's panel is open before the next key (what failed once on CI is then named by the wait that timed out)
  page.keyboard.press("5")
  page.wait_for_function("() => window.__viz.state.panel === 'runs'")
  page.keyboard.press("6")
  page.wait_for_function("() => window.__viz.state.panel === 'timeline'")
  page.locator("#panel-timeline .empty-panel").wait_for()
  assert asked, "the panel asked for the timeline again"
  assert page.locator("#panel-timeline").inner_text().strip() == "No timed events in this trace."
  assert page.locator("#panel-timeline canvas").count() == 0


def test_timeline_follows_a_live_trace(page, timed):
  """New contexts appear while the trace is written; a zoomed view stays where the user put it."""
  path = timed.dir / "live-timeline.vztrace"
  # the writer waits at its gate (a read of its stdin) after its first kernel, still recording
  proc = subprocess.Popen([sys.executable, str(WRITER), "live", str(path), "3", "-"], cwd=ROOT, stdin=subprocess.PIPE)
  try:
    t = timed.trace_id(path.name)
    open_page(page, timed, f"#t={t}&p=timeline")
    has = "(name) => window.__viz.timelinePanel.hits.some(h => h.kind === 'context' && h.name === name)"
    page.wait_for_function(has, arg="live_kernel_0", timeout=60_000)
    # an open context (the default one, still recording) reaches the end of what was written
    tip_of = page.evaluate("() => window.__viz.timelinePanel.hits.find(h => h.ctx === 0 && h.kind === 'context')")
    box = canvas_box(page)
    page.mouse.move(box["x"] + (tip_of["x0"] + tip_of["x1"]) / 2, box["y"] + (tip_of["y0"] + tip_of["y1"]) / 2)
    assert "duration not ended" in page.locator("#panel-timeline .timeline-tip").inner_text()
    page.mouse.move(box["x"] + 5, box["y"] + 5)
    end0 = page.evaluate("() => window.__viz.timelinePanel.extent[1]")
    page.evaluate("(e) => window.__viz.timelinePanel.setView(e * 0.25, e * 0.5)", end0)
    view = page.evaluate(VIEW)
    open_gate(proc)
    page.wait_for_function("() => window.__viz.timelinePanel.data.contexts.some(c => c.name === 'live_kernel_2')",
                           timeout=60_000)
    assert page.evaluate("() => window.__viz.timelinePanel.extent[1]") > end0
    assert page.evaluate(VIEW) == view, "a live refresh keeps the zoom"
    proc.wait(120)
    page.wait_for_function("() => document.querySelector('#trace-status').textContent === 'ended'", timeout=60_000)
    page.locator("#panel-timeline .timeline-fit").click()
    kernels = page.evaluate("() => window.__viz.timelinePanel.data.contexts.filter(c => c.name.startsWith('live_'))")
    assert [k["name"] for k in kernels] == [f"live_kernel_{i}" for i in range(3)]
    fitted, extent = page.evaluate(VIEW), page.evaluate("() => window.__viz.timelinePanel.extent")
    assert fitted == {"t0": extent[0], "t1": extent[1]} and extent[1] >= kernels[2]["end"], "fit shows the grown trace"
    # the two kernels written after the gate, side by side: zoom to them (in the fitted view the gate's wait, as
    # long as the loaded machine made it, may leave them in one pixel column)
    page.evaluate("""(ks) => { const s = ks[1].start, e = ks[2].end, pad = (e - s) * 0.1;
      window.__viz.timelinePanel.setView(s - pad, e + pad); }""", kernels)
    page.evaluate(FRAME)
    names = page.evaluate("() => window.__viz.timelinePanel.hits.filter(h => h.kind === 'context').map(h => h.name)")
    assert [n for n in names if n.startswith("live_kernel")] == ["live_kernel_1", "live_kernel_2"]
  finally:
    stop_writer(proc)
