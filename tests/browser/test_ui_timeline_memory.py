"""The timeline's memory lane (static/memlane.js): a real program's bytes in use drawn as a step line below the other
lanes, the peak marked with the API's value and buffer, hover showing the bytes; a trace of nonsense mem records
draws without an error."""
from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest
from support import hostile_traces as ht
from support.browser import FRAME, HITS, VIEW, Server, canvas_box, open_page, plot_of, shot

from compiler.tensor import Tensor
from compiler.trace import recorder

DRAWN = "() => window.__viz.timelinePanel.memLane.drawn"


def fmt_bytes(n: int) -> str:
  """static/memlane.js's fmtBytes."""
  units, i, x = ["B", "KiB", "MiB", "GiB", "TiB"], 0, float(n)
  while x >= 1024 and i < len(units) - 1:
    x, i = x / 1024, i + 1
  return f"{x:.1f} {units[i]}" if i else f"{round(x)} B"


def write_program(path: Path) -> None:
  """4000 bytes in, a 4000-byte product (the peak, 8000), both dropped, then a kernel over 100 floats (800 bytes)."""
  recorder.enable(path, announce=False)
  try:
    a = Tensor(np.arange(1000, dtype=np.float32))
    b = (a * 2).realize()
    b.numpy()
    del a, b
    gc.collect()
    (Tensor(np.ones(100, dtype=np.float32)) + 1).numpy()
  finally:
    recorder.disable()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
  d = tmp_path_factory.mktemp("memlane")
  write_program(d / "program.vztrace")
  ht.bad_memory(d / "nonsense.vztrace")
  s = Server(d, tmp_path_factory.mktemp("memlane-log") / "server.log")
  yield s
  s.stop()


def open_lane(page, srv, name: str) -> tuple[dict, dict]:
  """The trace's timeline panel once the memory lane is drawn -> (the API's timeline, what the lane drew)."""
  t = srv.trace_id(name)
  open_page(page, srv, f"#t={t}")
  page.keyboard.press("6")
  page.locator("#panel-timeline canvas").wait_for()
  page.wait_for_function("() => { const d = window.__viz.timelinePanel.memLane.drawn; return d && d.peak; }")
  return srv.api(f"/api/traces/{t}/timeline"), page.evaluate(DRAWN)


def test_the_lane_marks_the_apis_peak_and_hover_shows_bytes(page, srv):
  tl, drawn = open_lane(page, srv, "program.vztrace")
  m = tl["memory"]
  peak = m["peak"]
  assert peak["bytes"] == 8000 and max(m["bytes"]) == 8000
  assert drawn["points"] == len(m["t"])
  assert drawn["peak"]["label"] == f"peak {fmt_bytes(8000)} · buffer {peak['buf']} (float32 x1000)"
  hits = page.evaluate(HITS)
  left, plot = plot_of(hits, tl)
  v = page.evaluate(VIEW)
  assert drawn["peak"]["x"] == pytest.approx(left + (peak["t"] - v["t0"]) / (v["t1"] - v["t0"]) * plot, abs=0.5)
  lane = [h for h in hits if h["kind"] == "memory"]
  others = [h for h in hits if h["kind"] != "memory"]
  assert lane and min(h["y0"] for h in lane) >= max(h["y1"] for h in others), "the lane is below the others"
  shot(page, "panel-timeline-memory")
  # zoomed onto the peak's level: hovering it says its bytes
  i = m["bytes"].index(8000)
  s, e = m["t"][i], m["t"][i + 1]
  page.evaluate("([a, b]) => window.__viz.timelinePanel.setView(a, b)", [s - (e - s) * 0.2, e + (e - s) * 0.2])
  page.evaluate(FRAME)
  top = next(h for h in page.evaluate(HITS) if h["kind"] == "memory" and h["name"] == fmt_bytes(8000))
  box = canvas_box(page)
  page.mouse.move(box["x"] + (top["x0"] + top["x1"]) / 2, box["y"] + (top["y0"] + top["y1"]) / 2)
  tip = page.locator("#panel-timeline .timeline-tip")
  tip.wait_for()
  assert tip.inner_text().splitlines()[0] == f"{fmt_bytes(8000)} in use (8000 bytes)"


def test_nonsense_mem_records_draw_what_makes_sense(page, srv):
  tl, drawn = open_lane(page, srv, "nonsense.vztrace")
  assert tl["memory"]["skipped"] == ht.BAD_MEMORY_SKIPPED
  assert drawn["peak"]["label"] == f"peak {fmt_bytes(800)} · buffer 7 (float32 x125)"
  assert drawn["points"] == len(tl["memory"]["t"]) == 4
