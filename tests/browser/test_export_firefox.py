"""The single-file export opened from file:// in stock Firefox ESR (driven over WebDriver BiDi, tests/support/bidi.py):
the views show the API's data, the page's rebuilt graphs, deltas and diffs are the API's, the CSP blocks an injected
script and a connection, no request leaves the page, and Firefox is gone afterwards."""
from __future__ import annotations

import pytest
from support import tracegen
from support.bidi import Firefox
from support.browser import norm_graph
from support.proc_helpers import wait_group_exit

from viz_server.export.command import export
from viz_server.offline import OfflineApi

GRAPH = "(want) => document.body.dataset.graph === want"
OFFLINE = "async (p) => { const [s, b] = await window.tinyvizOffline(p); return {s, b}; }"
TEXT = "(sel) => { const e = document.querySelector(sel); return e ? e.innerText : null; }"
# a sidebar row is `content-visibility: auto`: Firefox's innerText is "" for it until a layout has found it near the
# viewport (a loaded machine can ask first), so rows are read by their text nodes (an HTML-parsed string would have
# lost its tags there too, and the test also counts the page's elements)
ROW_TEXT = "(sel) => { const e = document.querySelector(sel); return e ? e.textContent : null; }"
CLICK = "(sel) => { document.querySelector(sel).click(); return true; }"


@pytest.fixture(scope="module")
def opened(trace_dir, tmp_path_factory):
  """(Firefox with the demo's export open at a schedule rewrite's step 0, the API's answers, the page's URL)."""
  html = tmp_path_factory.mktemp("export-ff") / "demo.html"
  export(trace_dir / "demo.vztrace", html)
  with OfflineApi(trace_dir / "demo.vztrace") as api:
    contexts = api.trace_get("contexts")
    sched = next(c for c in contexts if c["kind"] == "schedule")
    rw = next(r for r in sched["rewrites"] if r["matches"])
    want = {"t": api.t, "contexts": contexts, "sched": sched, "rw": rw, "kernels": api.trace_get("kernels")}
    want["steps"] = {k: api.trace_get(f"rewrites/{rw['id']}/graph?step={k}") for k in range(rw["matches"] + 1)}
    want["kernel"] = api.trace_get(f"contexts/{want['kernels'][0]['ctx']}/kernel")
  url = html.resolve().as_uri()
  with Firefox() as ff:
    ff.navigate(f"{url}#t={want['t']}&c={sched['id']}&r={rw['id']}&s=0")
    ff.wait("() => window.__viz !== undefined")
    ff.call("async () => { await window.__viz.ready; return true; }")
    ff.wait(GRAPH, f"{want['t']}:{rw['id']}:0")
    yield ff, want, url, html
    pgid = ff.proc.pid
  wait_group_exit(pgid, "Firefox's processes to end")


def test_views_show_the_apis_data(opened):
  ff, want, _, _ = opened
  t, sched, rw = want["t"], want["sched"], want["rw"]
  assert "Read-only export of demo.vztrace" in ff.call(TEXT, "#export-note")
  metrics = ff.call("() => window.__viz.labelMetrics()")
  assert metrics["char_w"] > 0 and metrics["line_h"] > 0
  shown = set(ff.call("() => [...document.querySelectorAll('#contexts li[data-ctx]')].map(e => +e.dataset.ctx)"))
  assert {c["id"] for c in want["contexts"] if c["rewrites"] or c["kind"] == "kernel"} <= shown
  assert ff.call("() => document.querySelectorAll('#rewrites li[data-rw]').length") == len(sched["rewrites"])
  for k in list(range(rw["matches"] + 1)) + [0]:  # forward step by step (deltas), then a jump back (a graph)
    ff.call("(k) => { window.__viz.setStep(k); return true; }", k)
    ff.wait(GRAPH, f"{t}:{rw['id']}:{k}")
    assert set(ff.call("() => window.__viz.graph.ids()")) == {n["id"] for n in want["steps"][k]["nodes"]}
  ff.call("() => { window.__viz.setStep(1); return true; }")
  ff.wait(GRAPH, f"{t}:{rw['id']}:1")
  ff.wait("() => document.querySelector('#panel-step [data-role=after]')")
  step = ff.call(TEXT, "#panel-step")
  assert "mul_one" in step or "add_zero" in step
  ff.call(CLICK, "#panel-tabs [data-panel=diff]")
  ff.wait("() => document.querySelector('#panel-diff').innerText.includes('@@')")
  kctx = want["kernels"][0]["ctx"]
  ff.call(CLICK, f"#contexts li[data-ctx='{kctx}']")
  ff.call(CLICK, "#panel-tabs [data-panel=kernel]")
  ff.wait("() => document.querySelector('#panel-kernel').innerText.includes('UPCAST')")
  ff.call(CLICK, "#panel-tabs [data-panel=source]")
  src = ff.wait("() => { const e = document.querySelector('#panel-source pre.source'); return e && e.textContent; }")
  assert src in {s["text"] for s in want["kernel"]["sources"]}
  ff.call(CLICK, "#panel-tabs [data-panel=runs]")
  rows = ff.wait("() => document.querySelectorAll('#panel-runs tbody tr').length")
  assert rows == len([k for k in want["kernels"] if k["run"]])
  ff.call(CLICK, "#panel-tabs [data-panel=timeline]")
  ff.wait("() => window.__viz.timelinePanel.hits && window.__viz.timelinePanel.hits.length > 0")
  assert ff.errors == []


def test_page_rebuilds_graphs_deltas_and_diffs_as_the_api(opened, trace_dir):
  ff, want, _, _ = opened
  t = want["t"]
  with OfflineApi(trace_dir / "demo.vztrace") as api:
    rws = [r for c in api.trace_get("contexts") for r in c["rewrites"]]
    assert any(r["matches"] for r in rws)
    for rw in rws:
      n, base = rw["matches"], f"/api/traces/{t}/rewrites/{rw['id']}"
      for k in range(n + 1):
        got = ff.call(OFFLINE, f"{base}/graph?step={k}")
        assert got["s"] == 200 and norm_graph(got["b"]) == norm_graph(api.get(f"{base}/graph?step={k}")), (rw, k)
      for k in range(1, n + 1):
        got = ff.call(OFFLINE, f"{base}/delta?from={k - 1}&to={k}")
        assert norm_graph(got["b"]) == norm_graph(api.get(f"{base}/delta?from={k - 1}&to={k}")), (rw, k)
      a, b = f"{t}:{rw['id']}:0", f"{t}:{rw['id']}:end"
      got, diff = ff.call(OFFLINE, f"/api/diff?a={a}&b={b}"), api.get(f"/api/diff?a={a}&b={b}")
      assert got["s"] == 200 and got["b"]["lines"] == diff["lines"] and got["b"]["graph"] == diff["graph"], rw
  assert ff.errors == []


def test_csp_holds_and_no_request_leaves_the_page(opened):
  ff, _, url, _ = opened
  assert ff.requests, "no request seen at all: the network events are not arriving"
  assert all(u.startswith("data:") or u == url for u in ff.requests), ff.requests
  seen = len(ff.requests)
  # an injected inline script and a connection are refused by the page's policy, and reported as violations
  ff.call("""async () => {
    window.__violations = [];
    document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.effectiveDirective));
    const s = document.createElement("script");
    s.textContent = "window.__injected = 1";
    document.body.append(s);
    try { await fetch("http://127.0.0.1:9/x"); window.__fetched = "yes"; } catch (e) { window.__fetched = e.name; }
    return true;
  }""")
  got = ff.wait("""() => window.__violations.length >= 2 &&
    {injected: window.__injected ?? null, fetched: window.__fetched, violations: window.__violations}""")
  assert got["injected"] is None and got["fetched"] == "TypeError", got
  assert "script-src-elem" in got["violations"] or "script-src" in got["violations"], got
  assert "connect-src" in got["violations"], got
  assert ff.requests[seen:] == [], ff.requests[seen:]
  csp = ff.call("() => document.querySelector('meta[http-equiv=Content-Security-Policy]').content")
  assert "default-src 'none'" in csp and "connect-src 'none'" in csp and "'unsafe" not in csp
  ff.errors.clear()  # (the refusals above are reported as errors on purpose)


def test_hostile_trace_export_injects_nothing(trace_dir, tmp_path):
  html = tmp_path / "evil.html"
  export(trace_dir / "evil.vztrace", html)
  with OfflineApi(trace_dir / "evil.vztrace") as api:
    ctxs = api.trace_get("contexts")
  sched = next(c for c in ctxs if c["kind"] == "schedule")
  kernel = next(c for c in ctxs if c["kind"] == "kernel")
  rw = sched["rewrites"][0]
  injected = """() => ({pwned: window.__pwned ?? null, scripts: document.querySelectorAll('script').length,
    elements: document.querySelectorAll('img, iframe, object, embed').length,
    on: [...document.querySelectorAll('*')].some(e => [...e.attributes].some(a => a.name.startsWith('on')))})"""
  clean = {"pwned": None, "scripts": 3, "elements": 0, "on": False}  # (the data block, the boot script, the UI's)
  with Firefox() as ff:
    ff.navigate(f"{html.resolve().as_uri()}#t=0&c={sched['id']}&r={rw['id']}&s=1")
    ff.wait(GRAPH, f"0:{rw['id']}:1")
    assert tracegen.XSS in ff.call(ROW_TEXT, f"#contexts li[data-ctx='{sched['id']}']")
    assert tracegen.XSS in ff.call(ROW_TEXT, f"#rewrites li[data-rw='{rw['id']}']")
    assert ff.call(injected) == clean
    ff.call(CLICK, f"#contexts li[data-ctx='{kernel['id']}']")
    for panel in ("kernel", "runs", "timeline", "diff", "step", "source"):
      ff.call(CLICK, f"#panel-tabs [data-panel={panel}]")
      ff.wait("(p) => !document.querySelector('#panel-' + p).hidden", panel)
      assert ff.call(injected) == clean, panel
    src = ff.wait("() => { const e = document.querySelector('#panel-source pre.source'); return e && e.textContent; }")
    assert tracegen.XSS in src
    assert ff.call(injected) == clean
    assert all(u.startswith("data:") or u.startswith("file://") for u in ff.requests), ff.requests
    assert ff.errors == []
