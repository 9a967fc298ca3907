"""Timers and answers that land in the middle of a navigation, made to land there every time: Playwright's clock fires
the page's timers when the test says so, and routes hold answers until then (on a loaded machine: only by chance)."""
from __future__ import annotations

from support.browser import open_page, wait_graph


def _view(page) -> tuple:
  """(context, rewrite, step) of the view the URL names."""
  return tuple(page.evaluate("""async () => {
    const {parseHash} = await import('/static/router.js');
    const v = parseHash(location.hash);
    return [v.ctx, v.rw, v.step];
  }"""))


def _back(page) -> None:
  """Go back, and wait until the URL names the entry before."""
  shown = page.evaluate("() => location.hash")
  page.go_back()
  page.wait_for_function("(h) => location.hash !== h", arg=shown)


def _picked(ctx: dict) -> dict:
  """The rewrite the page opens for a context (its first that changed something, else its first)."""
  return next((r for r in ctx["rewrites"] if r["changed"]), ctx["rewrites"][0])


def _wait_held(page, held: list) -> None:
  """Wait until the route handler holds the request (bounded by round trips, not by a clock)."""
  for _ in range(500):  # (each round trip lets Playwright dispatch the route event)
    if held:
      return
    page.evaluate("() => 0")
  raise AssertionError("the request was never made")


def _release_after_the_pause(page, held: list) -> None:
  """Let the page's pending timers fire while the held request is unanswered, then answer it."""
  _wait_held(page, held)
  page.clock.run_for(1000)
  held.pop().continue_()


def test_a_step_pending_its_url_write_never_lands_in_another_view(page, server):
  t = server.trace_id("demo.vztrace")
  ctxs = {c["name"]: c for c in server.api(f"/api/traces/{t}/contexts")}
  a, b = ctxs["E_32"], ctxs["r_16_4"]
  ra, rb = _picked(a), _picked(b)
  page.clock.install()
  open_page(page, server, f"#t={t}&c={a['id']}&r={ra['id']}&s=0")
  wait_graph(page, t, ra["id"], 0)
  page.clock.pause_at(page.evaluate("() => Date.now()") + 1000)  # (the start-up's timers fire here)
  held: list = []
  page.route(f"**/api/traces/{t}/rewrites/{rb['id']}", lambda r: held.append(r))
  # a step, then a click on another context before the step's URL write: the write is the step's view, the entry
  # back returns to (not B's rewrite under A's step, written while B's steps load)
  page.keyboard.press("ArrowRight")
  page.click(f"#contexts li[data-ctx='{b['id']}']")
  _release_after_the_pause(page, held)
  wait_graph(page, t, rb["id"], 0)
  assert _view(page) == (b["id"], rb["id"], 0)
  _back(page)
  assert _view(page) == (a["id"], ra["id"], 1)
  wait_graph(page, t, ra["id"], 1)
  # a step, then forward before its write: the URL already names B's entry, where A's step must not be written
  page.keyboard.press("ArrowRight")
  page.go_forward()
  _release_after_the_pause(page, held)
  wait_graph(page, t, rb["id"], 0)
  assert _view(page) == (b["id"], rb["id"], 0)
  _back(page)
  assert _view(page) == (a["id"], ra["id"], 1)


def test_a_live_refresh_answered_after_another_rewrite_was_picked_keeps_the_pick(page, server):
  """A live refresh asks again for the steps of the rewrite on screen; the user picks another rewrite before the
  answer comes: that answer must not become the picked rewrite's steps (slider, step panel)."""
  t = server.trace_id("demo.vztrace")
  ctx = next(c for c in server.api(f"/api/traces/{t}/contexts") if c["name"] == "E_32")
  first, other = ctx["rewrites"][0], ctx["rewrites"][1]
  open_page(page, server, f"#t={t}&c={ctx['id']}&r={first['id']}&s=0")
  wait_graph(page, t, first["id"], 0)
  grown = server.api(f"/api/traces/{t}/contexts")  # as a live trace's: the rewrite on screen has a match more
  next(r for c in grown for r in c["rewrites"] if r["id"] == first["id"])["matches"] += 1
  page.route(f"**/api/traces/{t}/contexts", lambda r: r.fulfill(json=grown))
  held: list = []
  page.route(f"**/api/traces/{t}/rewrites/{first['id']}", lambda r: held.append(r))
  page.evaluate("() => { window.__refresh = window.__viz.refreshContexts(); }")
  _wait_held(page, held)
  page.click(f"#rewrites li[data-rw='{other['id']}']")
  wait_graph(page, t, other["id"], 0)
  held[0].continue_()
  page.evaluate("() => window.__refresh")
  assert page.evaluate("() => [window.__viz.data.rw.id, window.__viz.state.rw]") == [other["id"], other["id"]]
  assert page.locator("#step-slider").get_attribute("max") == str(other["matches"])
