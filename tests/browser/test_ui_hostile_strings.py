"""Issue 14, items 8 and 9 in the browser: a node with MB-sized op, dtype and arg is drawn from cut texts (the card
offers "show all", fetched only when asked for), and the Diff panel does not ask for the final AST of a kernel
context that has no finished rewrite (a 404 in the console before)."""
from __future__ import annotations

import pytest
from support import hostile_traces as H
from support.browser import Server, open_page, wait_graph

SIZE = 2 << 20


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory):
  d = tmp_path_factory.mktemp("hostile")
  H.long_strings(d / "long.vztrace", SIZE)
  H.big_kernel(d / "kernel.vztrace", 1, 1 << 10)  # a kernel context with a source and no rewrite
  srv = Server(d, tmp_path_factory.mktemp("log") / "server.log")
  yield srv
  srv.stop()


def test_mb_sized_node_texts_are_cut_until_asked_for(page, hostile_server):
  t = hostile_server.trace_id("long.vztrace")
  seen = []
  page.on("request", lambda r: seen.append(r.url))
  open_page(page, hostile_server, f"#t={t}&c=0&r=0&s=0&n=0")
  wait_graph(page, t, 0, 0)
  card = page.locator("#node-card")
  card.locator("[data-field=arg]").wait_for()
  assert len(card.locator("[data-field=arg]").inner_text()) <= 4096
  assert len(card.locator("[data-field=op]").inner_text()) <= 4096
  assert max(len(x) for x in page.evaluate("() => window.__viz.graph.ids().map(id => "
                                           "window.__viz.graph.node(id).label)")) < 200
  assert not any(u.endswith(f"/api/traces/{t}/nodes/0") for u in seen)  # nothing whole fetched yet
  card.locator("[data-show-all=arg]").click()
  page.wait_for_function("(n) => document.querySelector('#node-card [data-field=arg]').textContent.length === n",
                         arg=SIZE)
  assert card.locator("[data-show-all=arg]").count() == 0 and card.locator("[data-show-all=op]").count() == 1


def test_diff_of_a_kernel_without_rewrites_is_not_asked_for(page, hostile_server):
  t = hostile_server.trace_id("kernel.vztrace")
  asked = []
  page.on("request", lambda r: asked.append(r.url) if "/api/diff" in r.url else None)
  open_page(page, hostile_server, f"#t={t}&c=0&p=diff&a={t}:0&b={t}:0")
  page.wait_for_function("() => (document.querySelector('#panel-diff .diff-result') || {}).textContent"
                         "?.includes('no finished rewrite')")
  assert asked == []  # and the page fixture fails the test on any console error (a 404 was one)
