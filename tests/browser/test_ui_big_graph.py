"""A graph too big to show whole (issue 14, item 4): the page draws the nodes the server sent around the step's
change, says "showing n of N nodes around the change", and steps on (by delta) with the note kept up to date."""
from __future__ import annotations

import pytest
from support.browser import Server, graph_ids, open_page, shot, wait_graph
from support.server_helpers import mini, recording

from compiler.rewrite import graph_rewrite
from compiler.uop import UOp

LINKS = 11_000  # x + 1 + 2 + ...: 22,000 nodes, more than viz_server.cut.MAX_GRAPH_NODES (20,000)


@pytest.fixture(scope="module")
def bigserver(tmp_path_factory):
  d = tmp_path_factory.mktemp("big-traces")
  e = UOp.variable("x", 0, 10)
  for i in range(LINKS):
    e = e + (i + 1)
  with recording(d / "big.vztrace"):
    graph_rewrite((e * 1) + 0, mini, name="simplify")  # folds the constants in, one match at a time
  srv = Server(d, tmp_path_factory.mktemp("big-log") / "server.log")
  yield srv
  srv.stop()


def _note(page) -> str:
  el = page.locator("#cut-note")
  return el.inner_text() if el.is_visible() else ""


def test_a_cut_graph_is_drawn_with_a_note_and_steps(page, bigserver):
  t = bigserver.trace_id("big")
  ctx = next(c for c in bigserver.api(f"/api/traces/{t}/contexts") if c["rewrites"])
  rw = ctx["rewrites"][0]
  open_page(page, bigserver, f"#t={t}&c={ctx['id']}&r={rw['id']}&s=0")
  wait_graph(page, t, rw["id"], 0)
  g0 = bigserver.api(f"/api/traces/{t}/rewrites/{rw['id']}/graph?step=0")
  shown, total = g0["cut"]["shown"], g0["cut"]["total"]
  assert total > 20_000 and shown < total
  assert _note(page).startswith(f"showing {shown:,} of {total:,} nodes around the change")
  assert graph_ids(page) == {n["id"] for n in g0["nodes"]}
  page.wait_for_function("() => window.__viz.graph.frames > 0")
  assert page.evaluate("() => window.__viz.graph.drawn") > 0
  assert page.evaluate("() => Object.keys(window.__viz.graph.cut.stubs).length") > 0
  shot(page, "big-graph-cut")
  page.keyboard.press("ArrowRight")
  wait_graph(page, t, rw["id"], 1)
  g1 = bigserver.api(f"/api/traces/{t}/rewrites/{rw['id']}/graph?step=1")
  assert page.evaluate("() => window.__viz.perf.lastKind") == "delta"
  assert graph_ids(page) == {n["id"] for n in g1["nodes"]}  # the delta gave the page the cut graph of step 1
  assert _note(page).startswith(f"showing {g1['cut']['shown']:,} of {g1['cut']['total']:,} nodes")


def test_the_diff_panel_says_a_diff_of_big_graphs_is_summarized(page, bigserver):
  t = bigserver.trace_id("big")
  ctx = next(c for c in bigserver.api(f"/api/traces/{t}/contexts") if c["rewrites"])
  rw = ctx["rewrites"][0]
  a, b = f"{t}:{rw['id']}:0", f"{t}:{rw['id']}:1"
  want = bigserver.api(f"/api/diff?a={a}&b={b}")
  s = want["summary"]
  assert s["a"]["nodes"] > 20_000 and s["a"]["shown"] == len(want["graph"]["only_a"]) > 0
  open_page(page, bigserver, f"#t={t}&c={ctx['id']}&r={rw['id']}&s=0&p=diff&a={a}&b={b}")
  page.wait_for_function("(want) => document.querySelector('#panel-diff .diff-result').dataset.shown === want",
                         arg=f"{a} {b}")
  note = page.locator("#panel-diff .diff-cut-note").inner_text()
  assert note.startswith(f"Big graphs (A: {s['a']['nodes']:,} nodes, B: {s['b']['nodes']:,}): showing the "
                         f"{s['a']['shown']:,} of {s['a']['only']:,} nodes only in A")
  removed = page.eval_on_selector_all(".diff-text .dl.del", "els => els.map(e => e.lastChild.textContent)")
  assert removed == [ln["text"] for ln in want["lines"] if ln["kind"] == "-"]
  assert page.locator("#panel-diff .diff-key .key-a").inner_text() == \
    f"only A ({s['a']['shown']:,} of {s['a']['only']:,})"
  shot(page, "big-graph-diff")
