"""Issue 30, panels that fit their content at 1280x800: the panel column's splitter drags and takes the keyboard, each
panel keeps the width it was given (localStorage, across a reload), the graph keeps its 480 px, and the graph
refits whenever its box changes so no box is cut at its edge."""
from __future__ import annotations

import pytest
from support.browser import open_rewrite, shot, state

SMALL = {"width": 1280, "height": 800}
WIDTHS = """() => ({panel: document.querySelector('#panels').getBoundingClientRect().width,
  center: document.querySelector('#center').getBoundingClientRect().width,
  now: +document.querySelector('#split-right').getAttribute('aria-valuenow'),
  stored: {...localStorage}})"""


@pytest.fixture
def page_1280(new_page):
  return new_page(**SMALL)


def widths(page) -> dict:
  return page.evaluate(WIDTHS)


def test_a_dragged_width_is_the_panels_own_and_outlives_a_reload(page_1280, server):
  page = page_1280
  open_rewrite(page, server, "demo.vztrace", "r_16_4", "simplify", step=1, panel="step")
  w0 = widths(page)
  box = page.locator("#split-right").bounding_box()
  x, y = box["x"] + box["width"] / 2, box["y"] + 200
  page.mouse.move(x, y)
  page.mouse.down()
  page.mouse.move(x - 40, y, steps=4)
  page.mouse.up()
  w1 = widths(page)
  assert abs(w1["panel"] - (w0["panel"] + 40)) <= 1 and w1["stored"] == {"tinyviz.width.panel.step": str(round(
    w1["panel"]))}, (w0, w1)
  # another panel opens at its own width (the runs table's default), and the step panel gets its width back
  page.keyboard.press("5")
  page.wait_for_function("(w) => Math.abs(document.querySelector('#panels').getBoundingClientRect().width - w) > 1",
                         arg=w1["panel"])
  page.keyboard.press("1")
  page.wait_for_function("(w) => Math.abs(document.querySelector('#panels').getBoundingClientRect().width - w) <= 1",
                         arg=w1["panel"])
  page.reload()
  page.wait_for_function("() => window.__viz !== undefined")
  page.evaluate("() => window.__viz.ready")
  assert abs(widths(page)["panel"] - w1["panel"]) <= 1


def test_the_keyboard_resizes_without_stepping_and_enter_resets(page_1280, server):
  page = page_1280
  open_rewrite(page, server, "demo.vztrace", "r_16_4", "simplify", step=1, panel="step")
  w0 = widths(page)
  step0 = state(page)["step"]
  page.focus("#split-right")
  page.keyboard.press("ArrowLeft")
  page.keyboard.press("ArrowLeft")
  w1 = widths(page)
  assert abs(w1["panel"] - (w0["panel"] + 32)) <= 1 and w1["now"] == round(w1["panel"]), (w0, w1)
  assert state(page)["step"] == step0  # the arrows moved the splitter, not the rewrite's step
  # the widest it goes leaves the graph its 480 px; End and Home reach the bounds
  page.keyboard.press("End")
  assert abs(widths(page)["center"] - 480) <= 1, widths(page)
  page.keyboard.press("Home")
  assert abs(widths(page)["panel"] - 280) <= 1, widths(page)
  page.keyboard.press("Enter")
  w2 = widths(page)
  assert abs(w2["panel"] - w0["panel"]) <= 1 and w2["stored"] == {}, (w0, w2)


def test_the_graph_refits_when_a_wide_panel_opens(page_1280, server):
  page = page_1280
  open_rewrite(page, server, "demo.vztrace", "r_16_4", "simplify", step=1, panel="step")
  before = page.evaluate("() => ({...window.__viz.graph.view})")
  page.keyboard.press("6")  # the timeline: a wide panel, the graph narrower
  # the graph's canvas has taken its new width, and a frame has passed since (the refit comes with the resize)
  page.wait_for_function("() => Math.abs(window.__viz.graph.cw - document.querySelector('#center').clientWidth) <= 1")
  page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
  got = page.evaluate("""(old) => {
    const g = window.__viz.graph;
    const place = (v) => g.ids().map(id => g.box(id)).filter(Boolean)
      .map(b => [v.x + b.x0 * v.k, v.y + b.y0 * v.k, v.x + b.x1 * v.k, v.y + b.y1 * v.k]);
    const out = (v) => place(v)
      .filter(([x0, y0, x1, y1]) => x0 < -0.5 || y0 < -0.5 || x1 > g.cw + 0.5 || y1 > g.ch + 0.5);
    return {cutNow: out(g.view).length, cutBefore: out(old).length, n: g.ids().length,
            canvas: g.canvas.getBoundingClientRect().width, center: document.querySelector('#center').clientWidth};
  }""", before)
  # the old view would cut boxes at the narrower graph's edge; the refitted one shows them all, in the canvas
  assert got["n"] > 5 and got["cutBefore"] > 0 and got["cutNow"] == 0, got
  assert abs(got["canvas"] - got["center"]) <= 1, got
  shot(page, "issue30-refit-timeline-1280")
