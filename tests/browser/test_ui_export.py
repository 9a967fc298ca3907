"""The single-file export opened from file:// with no server: the views show the API's data, no request leaves the
page, the shim rebuilds every step's graph and delta as the API answers them, and a hostile trace injects nothing."""
from __future__ import annotations

import pytest
from support import tracegen
from support.browser import Export, graph_ids, norm_graph, offline, open_export, shot, wait_graph  # noqa: E402
from support.export_helpers import _rebuilding

from viz_server.export.command import export
from viz_server.offline import OfflineApi


@pytest.fixture(scope="module")
def demo_export(trace_dir, tmp_path_factory):
  html = tmp_path_factory.mktemp("export") / "demo.html"
  export(trace_dir / "demo.vztrace", html)
  return Export(trace_dir / "demo.vztrace", html)






def test_views_show_the_apis_data_and_nothing_is_requested(page, demo_export):
  with OfflineApi(demo_export.trace) as api:
    t = api.t
    contexts = api.trace_get("contexts")
    kernels = api.trace_get("kernels")
    sched = next(c for c in contexts if c["kind"] == "schedule")
    rw = next(r for r in sched["rewrites"] if r["matches"])
    steps = {k: api.trace_get(f"rewrites/{rw['id']}/graph?step={k}") for k in range(rw["matches"] + 1)}
    kernel = api.trace_get(f"contexts/{kernels[0]['ctx']}/kernel")
  requests = open_export(page, demo_export, f"#t={t}&c={sched['id']}&r={rw['id']}&s=0")
  wait_graph(page, t, rw["id"], 0)
  assert "Read-only export of demo.vztrace" in page.locator("#export-note").inner_text()
  metrics = page.evaluate("() => window.__viz.labelMetrics()")
  assert metrics["char_w"] > 0 and metrics["line_h"] > 0  # the export carries the server's label metrics
  # contexts and rewrites
  for c in contexts:
    if c["rewrites"] or c["kind"] == "kernel":  # (the sidebar leaves out an empty default context)
      assert page.locator(f"#contexts li[data-ctx='{c['id']}']").count() == 1
  assert page.locator("#rewrites li[data-rw]").count() == len(sched["rewrites"])
  # the graph at every step, stepping forward (deltas) and jumping back (graphs)
  for k in range(rw["matches"] + 1):
    page.evaluate("(k) => window.__viz.setStep(k)", k)
    wait_graph(page, t, rw["id"], k)
    assert graph_ids(page) == {n["id"] for n in steps[k]["nodes"]}
  page.evaluate("() => window.__viz.setStep(0)")
  wait_graph(page, t, rw["id"], 0)
  assert graph_ids(page) == {n["id"] for n in steps[0]["nodes"]}
  # the step panel: the rule with its source
  page.evaluate("(k) => window.__viz.setStep(k)", 1)
  wait_graph(page, t, rw["id"], 1)
  page.locator("#panel-step [data-role=after]").wait_for()
  assert "mul_one" in page.locator("#panel-step").inner_text() or "add_zero" in page.locator("#panel-step").inner_text()
  # diff: the rewrite's first vs last step, as the API prints it
  page.click("#panel-tabs [data-panel=diff]")
  page.wait_for_function("() => document.querySelector('#panel-diff').innerText.includes('@@')")
  # kernel, source, runs, timeline
  page.click(f"#contexts li[data-ctx='{kernels[0]['ctx']}']")
  page.click("#panel-tabs [data-panel=kernel]")
  page.wait_for_function("() => document.querySelector('#panel-kernel').innerText.includes('UPCAST')")
  page.click("#panel-tabs [data-panel=source]")
  page.locator("#panel-source pre.source").wait_for()
  src = page.locator("#panel-source pre.source").evaluate("e => e.textContent")
  assert src in {s["text"] for s in kernel["sources"]}
  page.click("#panel-tabs [data-panel=runs]")
  page.locator("#panel-runs tbody tr").first.wait_for()
  assert page.locator("#panel-runs tbody tr").count() == len([k for k in kernels if k["run"]])
  page.click("#panel-tabs [data-panel=timeline]")
  page.wait_for_function("() => window.__viz.timelinePanel.hits && window.__viz.timelinePanel.hits.length > 0")
  shot(page, "export-timeline")
  assert requests and all(u.startswith(("file://", "data:")) for u in requests), requests
  assert [u for u in requests if u.startswith("file://")] == [demo_export.url.split("#")[0]]


def test_shim_answers_graphs_and_deltas_as_the_api(page, demo_export):
  open_export(page, demo_export)
  with OfflineApi(demo_export.trace) as api:
    t = api.t
    rws = [r for c in api.trace_get("contexts") for r in c["rewrites"] if r["matches"]]
    assert rws
    for rw in rws:
      n, base = rw["matches"], f"/api/traces/{t}/rewrites/{rw['id']}"
      for k in list(range(n + 1)) + ["end"]:
        got = offline(page, f"{base}/graph?step={k}")
        assert got["s"] == 200 and norm_graph(got["b"]) == norm_graph(api.get(f"{base}/graph?step={k}"))
      for k in range(1, n + 1):
        got = offline(page, f"{base}/delta?from={k - 1}&to={k}&compact=1")
        assert norm_graph(got["b"]) == norm_graph(api.get(f"{base}/delta?from={k - 1}&to={k}"))
      far = offline(page, f"{base}/delta?from={n}&to=0&compact=1")["b"]  # a jump: the difference of two graphs
      want = api.get(f"{base}/delta?from={n}&to=0")
      assert {x["id"] for x in far["nodes_added"]} == {x["id"] for x in want["nodes_added"]}
      assert set(far["nodes_removed"]) == set(want["nodes_removed"])
  with OfflineApi(demo_export.trace) as api:
    for nid in api.trace.nodes.ids():  # in a graph or not
      assert offline(page, f"/api/traces/{t}/nodes/{nid}")["b"] == api.trace_get(f"nodes/{nid}")
  # diffs between any two points, printed as the API prints them
  with OfflineApi(demo_export.trace) as api:
    ctxs = api.trace_get("contexts")
    rws = [r for c in ctxs for r in c["rewrites"]]
    kernels = [c for c in ctxs if c["kind"] == "kernel"]
    pairs = [(f"{t}:{r['id']}:0", f"{t}:{r['id']}:end") for r in rws]
    pairs += [(f"{t}:{a['id']}:end", f"{t}:{b['id']}:0") for a, b in zip(rws, rws[1:])]
    pairs += [(f"{t}:{kernels[0]['id']}", f"{t}:{kernels[1]['id']}"),
              (f"{t}:{rws[0]['id']}:1", f"{t}:{kernels[1]['id']}")]
    for a, b in pairs:
      want = api.get(f"/api/diff?a={a}&b={b}")
      got = offline(page, f"/api/diff?a={a}&b={b}")
      assert got["s"] == 200, (a, b, got)
      assert got["b"]["lines"] == want["lines"], (a, b)
      assert got["b"]["graph"] == want["graph"], (a, b)
  assert offline(page, f"/api/traces/{t}/nodes/999999")["s"] == 404
  assert offline(page, "/api/nothing")["s"] == 404


def test_hostile_trace_export_injects_nothing(page, trace_dir, tmp_path):
  html = tmp_path / "evil.html"
  export(trace_dir / "evil.vztrace", html)
  ex = Export(trace_dir / "evil.vztrace", html)
  with OfflineApi(ex.trace) as api:
    ctxs = api.trace_get("contexts")
  sched = next(c for c in ctxs if c["kind"] == "schedule")
  kernel = next(c for c in ctxs if c["kind"] == "kernel")
  rw = sched["rewrites"][0]
  requests = open_export(page, ex, f"#t=0&c={sched['id']}&r={rw['id']}&s=1")
  wait_graph(page, 0, rw["id"], 1)

  def no_injection():
    assert page.evaluate("() => window.__pwned") is None
    assert page.evaluate("() => document.querySelectorAll('img, iframe, object, embed').length") == 0
    assert page.evaluate("() => document.querySelectorAll('script').length") == 3  # data block, boot script, the UI
    on = "() => [...document.querySelectorAll('*')].some(e => [...e.attributes].some(a => a.name.startsWith('on')))"
    assert page.evaluate(on) is False

  # sidebar rows are `content-visibility: auto`: innerText is "" for a row no layout has yet found near the viewport
  # (a loaded machine asks first), so rows are read by their text nodes; HTML parsed from the string would have lost
  # its tags there too, and no_injection counts the page's elements
  assert tracegen.XSS in page.locator(f"#contexts li[data-ctx='{sched['id']}']").text_content()
  assert tracegen.XSS in page.locator(f"#rewrites li[data-rw='{rw['id']}']").text_content()
  no_injection()
  page.click(f"#contexts li[data-ctx='{kernel['id']}']")
  for panel in ("kernel", "source", "runs", "timeline", "diff", "step"):
    page.click(f"#panel-tabs [data-panel={panel}]")
    # the panel is on screen and has drawn an answer or a state (not its loading state)
    page.wait_for_function("(id) => { const el = document.querySelector('#panel-' + id);"
                           " return !!el && el.offsetParent !== null && el.childElementCount > 0"
                           " && !el.querySelector('[data-state=loading]'); }", arg=panel)
    no_injection()
  page.click("#panel-tabs [data-panel=source]")
  page.locator("#panel-source pre.source").wait_for()
  assert tracegen.XSS in page.locator("#panel-source pre.source").evaluate("e => e.textContent")
  no_injection()
  assert all(u.startswith(("file://", "data:")) for u in requests), requests


def test_rebuilt_nodes_steps_show_as_the_api_answers_them(page, tmp_path):
  """A rewrite whose every step rebuilds a chain (packed from compact deltas: the rebuilt nodes' in-edges made from
  the step before, tests/viewer/test_export_bounds.py): the page opens a step and every step's graph equals the
  API's."""
  path = _rebuilding(tmp_path / "rebuild.vztrace", depth=30, steps=8)
  html = tmp_path / "rebuild.html"
  export(path, html)
  ex = Export(path, html)
  with OfflineApi(path) as api:
    t = api.t
    base = f"/api/traces/{t}/rewrites/0"
    want = {k: api.get(f"{base}/graph?step={k}") for k in range(9)}
    deltas = {k: api.get(f"{base}/delta?from={k - 1}&to={k}") for k in range(1, 9)}
  open_export(page, ex, f"#t={t}&c=0&r=0&s=5")
  wait_graph(page, t, 0, 5)
  assert sorted(graph_ids(page)) == sorted(n["id"] for n in want[5]["nodes"])
  for k in range(9):
    got = offline(page, f"{base}/graph?step={k}")
    assert got["s"] == 200 and norm_graph(got["b"]) == norm_graph(want[k]), k
  for k in range(1, 9):
    assert norm_graph(offline(page, f"{base}/delta?from={k - 1}&to={k}&compact=1")["b"]) == norm_graph(deltas[k]), k
