"""The page's own latency on a big trace (issue 30): selecting a context of hundreds of rewrites shows the loading state
in the task of the click, its rewrites list drawn as a window of rows around the selection (moved as the list is
scrolled); the landing view's summary shows while the first graph loads, not after it is drawn."""
from __future__ import annotations

import pytest
from support.browser import Server, open_page, wait_graph
from support.server_helpers import recording

from compiler import Ops, PatternMatcher, UOp, UPat, graph_rewrite
from compiler.trace import recorder

MANY = 300  # rewrites of the big context: more than the page draws (static/sidebar.js: RW_ALL, RW_WINDOW)
WINDOW = 160
LOADING = "() => document.querySelector('#graph-wrap').dataset.loading ?? null"
RW_IDS = "() => [...document.querySelectorAll('#rewrites li[data-rw]')].map((li) => Number(li.dataset.rw))"
# a selection made, and the page read back in the same task (nothing painted in between)
SELECT_NOW = """([c, r]) => {
  window.__viz.selectContext(c, {rw: r, step: 0});
  const rows = [...document.querySelectorAll('#rewrites li[data-rw]')];
  return {loading: document.querySelector('#graph-wrap').dataset.loading ?? null, rows: rows.length,
    gaps: document.querySelectorAll('#rewrites li.rw-gap').length,
    selected: rows.filter((li) => li.classList.contains('selected')).map((li) => Number(li.dataset.rw)),
    count: document.querySelector('#rewrites-count').textContent};
}"""
IN_VIEW = """(r) => {
  const li = document.querySelector(`#rewrites li[data-rw="${r}"]`);
  if (!li) return false;
  const box = document.querySelector('#rewrites').getBoundingClientRect(), b = li.getBoundingClientRect();
  return b.top >= box.top - 1 && b.bottom <= box.bottom + 1;
}"""


@pytest.fixture(scope="module")
def many_server(tmp_path_factory):
  """A small context with one rewrite, then one with MANY rewrites (each drops an `x + 0`)."""
  d = tmp_path_factory.mktemp("many-rewrites")
  add0 = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), lambda x: x)], name="add0")
  x = UOp.variable("x", 0, 10)
  with recording(d / "many.vztrace"):
    with recorder.trace_context("small ctx", kind="schedule"):
      graph_rewrite((x + 0) * 2, add0, name="small")
    with recorder.trace_context("big ctx", kind="schedule"):
      for i in range(MANY):
        graph_rewrite((x + 0) * (i + 3), add0, name=f"many {i}")
  srv = Server(d, tmp_path_factory.mktemp("many-log") / "server.log")
  yield srv
  srv.stop()


def test_a_context_of_many_rewrites_draws_a_window_of_rows_around_the_selection(page, many_server):
  t = many_server.trace_id("many")
  ctxs = many_server.api(f"/api/traces/{t}/contexts")
  small, big = (next(c for c in ctxs if c["name"] == name) for name in ("small ctx", "big ctx"))
  ids = [r["id"] for r in big["rewrites"]]
  assert len(ids) == MANY
  open_page(page, many_server, f"#t={t}&c={small['id']}&r={small['rewrites'][0]['id']}&s=0")
  wait_graph(page, t, small["rewrites"][0]["id"], 0)
  mid = ids[200]
  now = page.evaluate(SELECT_NOW, [big["id"], mid])
  # in the task of the selection: the loading state, the selected rewrite's row among at most RW_WINDOW rows in
  # order, gaps keeping the others' place, and the count of them all
  assert now["loading"] == "rewrite"
  assert 0 < now["rows"] <= WINDOW and now["gaps"] == 2
  assert now["selected"] == [mid]
  assert now["count"] == f"{MANY}/{MANY}"
  drawn = page.evaluate(RW_IDS)
  assert drawn == ids[ids.index(drawn[0]):ids.index(drawn[0]) + len(drawn)]
  wait_graph(page, t, mid, 0)
  page.wait_for_function(IN_VIEW, arg=mid)
  page.wait_for_function("(c) => !!document.querySelector(`#contexts li.selected[data-ctx='${c}']`)", arg=big["id"])
  # scrolled to either end, the rows there are drawn
  for end, want in (("0", ids[0]), ("1e9", ids[-1])):
    page.evaluate(f"() => {{ document.querySelector('#rewrites').scrollTop = {end}; }}")
    page.wait_for_function(IN_VIEW, arg=want)
    assert len(page.evaluate(RW_IDS)) <= WINDOW
  # a rewrite picked outside the rows drawn (the list scrolled away from the selection): drawn, selected, in view
  page.evaluate("([c, r]) => window.__viz.selectContext(c, {rw: r, step: 0})", [big["id"], ids[100]])
  wait_graph(page, t, ids[100], 0)
  page.wait_for_function(IN_VIEW, arg=ids[100])
  assert page.locator("#rewrites li.selected").evaluate_all("(els) => els.map((li) => Number(li.dataset.rw))") \
    == [ids[100]]
  # scrolled away, then filtered: drawn again around the selection, and scrolled to it
  page.evaluate("() => { document.querySelector('#rewrites').scrollTop = 0; }")
  page.wait_for_function(IN_VIEW, arg=ids[0])
  page.fill("#filter", "many")
  page.wait_for_function(IN_VIEW, arg=ids[100])
  page.fill("#filter", "")
  # and back: the small context's one row, no gap
  one = small["rewrites"][0]["id"]
  page.evaluate("([c, r]) => window.__viz.selectContext(c, {rw: r, step: 0})", [small["id"], one])
  wait_graph(page, t, one, 0)
  assert page.evaluate(RW_IDS) == [one]
  assert page.locator("#rewrites li.rw-gap").count() == 0


def test_the_landing_summary_shows_while_the_first_graph_loads(page, server):
  # the boot answer without its graph, and the graph's own request held: the first graph is still loading
  held, hold = [], [True]

  def boot(route):
    resp = route.fetch()
    body = resp.json()
    body["graph"] = None
    route.fulfill(response=resp, json=body)

  def keep(route):
    if hold[0]:
      held.append(route)
    else:
      route.continue_()

  page.route("**/api/boot?*", boot)
  page.route("**/rewrites/*/graph?*", keep)
  # (the page asks for the graph before or after the summary shows: waited for as a request, which its held route
  # never answers; `held` itself fills only when Playwright dispatches the route, which may come later)
  with page.expect_request("**/rewrites/*/graph?*"):
    page.goto(f"{server.url}/")
  page.wait_for_function("() => !!document.querySelector('#panel-summary .panel-head')")
  assert page.evaluate(LOADING) == "rewrite"
  assert page.evaluate("() => document.body.dataset.graph ?? null") is None
  hold[0] = False  # (a route dispatched from here on goes on at once)
  for route in held:
    route.continue_()
  page.wait_for_function("() => document.body.dataset.graph !== undefined")
  assert page.evaluate(LOADING) is None
  assert page.locator("#panel-summary .panel-head").count() == 1
