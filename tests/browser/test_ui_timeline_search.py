"""Issue 30, the timeline at 1280x800: the canvas takes the panel's height (rows grow to fill it), and a search over the
spans' names marks the matches, dims the rest, counts them, and Enter jumps from one to the next."""
from __future__ import annotations

import pytest
from support.browser import open_page, shot

SMALL = {"width": 1280, "height": 800}
# the mean brightness of each span's rectangle, from the canvas's pixels (hits: CSS px; the canvas: device px)
SHADES = """() => {
  const p = window.__viz.timelinePanel, cv = p.canvas, k = cv.width / p.cssW;
  const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
  return p.hits.filter(h => h.kind !== 'memory').map(h => {
    let sum = 0, n = 0;
    for (let y = Math.ceil((h.y0 + 2) * k); y < Math.floor((h.y1 - 2) * k); y++)
      for (let x = Math.ceil((h.x0 + 2) * k); x < Math.floor((h.x1 - 2) * k); x++) {
        const i = 4 * (y * cv.width + x); sum += px[i] + px[i + 1] + px[i + 2]; n++;
      }
    return [h.kind, h.name, h.span.s, n ? sum / n : null];
  });
}"""


@pytest.fixture
def page_1280(new_page):
  return new_page(**SMALL)


def open_timeline(page, server) -> dict:
  """The demo trace's timeline panel, drawn; -> the API's timeline."""
  t = server.trace_id("demo.vztrace")
  open_page(page, server, f"#t={t}&p=timeline")
  page.wait_for_function("() => window.__viz.timelinePanel.hits.length > 0")
  page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
  return server.api(f"/api/traces/{t}/timeline")


def names_of(tl: dict) -> list[str]:
  """Every span's name as the panel draws it: contexts, passes, compiles (their kernel's name) and runs."""
  ctx = {c["id"]: c["name"] for c in tl["contexts"]}
  rw = tl["rewrites"]
  return ([c["name"] for c in tl["contexts"]] + [rw["names"][k] for k in rw["name"]]
          + [ctx[c["ctx"]] for c in tl["compiles"]] + [r["kname"] for r in tl["runs"]])


def test_the_timeline_fills_the_panels_height(page_1280, server):
  page = page_1280
  open_timeline(page, server)
  got = page.evaluate("""() => {
    const p = window.__viz.timelinePanel, r = (e) => e.getBoundingClientRect();
    const panel = document.querySelector('#panel-timeline');
    return {canvas: r(p.canvas).height, wrap: r(p.wrap).bottom, panel: r(panel).bottom, panelH: panel.clientHeight,
            rowH: p.rowH, rows: p.rows.length, scroll: panel.scrollHeight - panel.clientHeight};
  }""")
  # the demo's few rows grow (up to 34 px) and the canvas reaches down to the legend: no 190 px strip
  assert got["rowH"] > 18 and got["canvas"] >= 0.6 * got["panelH"] and got["scroll"] <= 1, got
  assert got["canvas"] >= got["rows"] * got["rowH"], got
  # the search box shows its whole placeholder (its text as the value: a text wider than the box scrolls it)
  need, room = page.evaluate("""() => { const el = document.querySelector('#panel-timeline .timeline-search');
    el.value = el.placeholder; const got = [el.scrollWidth, el.clientWidth]; el.value = ''; return got; }""")
  assert need <= room, (need, room)


def test_search_marks_counts_dims_and_enter_jumps(page_1280, server):
  page = page_1280
  tl = open_timeline(page, server)
  want = sum("simplify" in n.lower() for n in names_of(tl))
  assert want >= 3, names_of(tl)  # the schedule's pass and each kernel's
  plain = {tuple(x[:3]): x[3] for x in page.evaluate(SHADES)}
  page.fill("#panel-timeline .timeline-search", "SimpliFy")  # any case
  page.wait_for_function("(n) => document.querySelector('#panel-timeline').dataset.searchHits === String(n)",
                         arg=want)
  assert page.inner_text("#panel-timeline .timeline-search-count") == f"{want} spans"
  page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
  shaded = {tuple(x[:3]): x[3] for x in page.evaluate(SHADES)}
  # a match keeps its colors (its outline is at the edge, outside the measured inside); the rest fade to the ground
  for key, before in plain.items():
    if before is None or key not in shaded:
      continue
    if "simplify" in key[1].lower():
      assert shaded[key] >= 0.95 * before, (key, before, shaded[key])
    else:
      assert shaded[key] <= 0.7 * before, (key, before, shaded[key])
  shot(page, "issue30-timeline-search-1280")
  # Enter: the first match in time, centred in view; again: the next one
  spans = page.evaluate("() => window.__viz.timelinePanel.search.matches.map(s => [s.s, s.e])")
  assert spans == sorted(spans)
  for i in range(2):
    page.press("#panel-timeline .timeline-search", "Enter")
    assert page.inner_text("#panel-timeline .timeline-search-count") == f"{i + 1} / {want}"
    view = page.evaluate("() => ({...window.__viz.timelinePanel.view})")
    s, e = spans[i]
    assert view["t0"] <= s and e <= view["t1"], (view, spans[i])
  page.press("#panel-timeline .timeline-search", "Shift+Enter")
  assert page.inner_text("#panel-timeline .timeline-search-count") == f"1 / {want}"
