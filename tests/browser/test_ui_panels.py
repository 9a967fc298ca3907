"""The diff, kernel, source and runs panels show what the trace recorded; upload adds a trace."""
from __future__ import annotations

from support.browser import open_page, shot, state, wait_graph


def demo(server):
  t = server.trace_id("demo.vztrace")
  return t, {c["name"]: c for c in server.api(f"/api/traces/{t}/contexts")}


def test_diff_panel(page, server):
  t, ctxs = demo(server)
  kernel = ctxs["E_32"]
  rw = next(r for r in kernel["rewrites"] if r["name"] == "simplify")
  open_page(page, server, f"#t={t}&c={kernel['id']}&r={rw['id']}&s=0&p=diff")
  a, b = f"{t}:{rw['id']}:1", f"{t}:{rw['id']}:end"
  page.fill("[data-point=a]", a)
  page.press("[data-point=a]", "Enter")
  page.fill("[data-point=b]", b)
  page.press("[data-point=b]", "Enter")
  want = server.api(f"/api/diff?a={a}&b={b}")
  page.wait_for_function("(b) => window.__viz.state.b === b", arg=b)
  page.locator(".diff-cols").wait_for()
  added = page.eval_on_selector_all(".diff-text .dl.add", "els => els.map(e => e.lastChild.textContent)")
  removed = page.eval_on_selector_all(".diff-text .dl.del", "els => els.map(e => e.lastChild.textContent)")
  assert added == [ln["text"] for ln in want["lines"] if ln["kind"] == "+"]
  assert removed == [ln["text"] for ln in want["lines"] if ln["kind"] == "-"]
  assert added or removed
  only_a = page.eval_on_selector_all(".node-list.only-a [data-node]", "els => els.map(e => +e.dataset.node)")
  only_b = page.eval_on_selector_all(".node-list.only-b [data-node]", "els => els.map(e => +e.dataset.node)")
  assert only_a == [n["id"] for n in want["graph"]["only_a"]]
  assert only_b == [n["id"] for n in want["graph"]["only_b"]]
  assert f"in both: {want['graph']['both']}" in page.locator(".diff-graph").evaluate("e => e.textContent")
  # the "this step" shortcut compares the step before with the current one
  page.evaluate("() => window.__viz.setStep(2)")
  page.click("text=this step")
  page.wait_for_function("(a) => window.__viz.state.a === a", arg=f"{t}:{rw['id']}:1")
  assert state(page)["b"] == f"{t}:{rw['id']}:2"
  shot(page, "panel-diff")


def test_kernel_panel(page, server):
  t, ctxs = demo(server)
  kernel = ctxs["r_16_4"]
  open_page(page, server, f"#t={t}&c={kernel['id']}&p=kernel")
  want = server.api(f"/api/traces/{t}/contexts/{kernel['id']}/kernel")
  panel = page.locator("#panel-kernel")
  panel.locator(".opts").wait_for()
  rows = panel.locator(".opts li")
  assert rows.count() == len(want["opts"])
  for i, o in enumerate(want["opts"]):
    row = rows.nth(i)
    assert row.locator(".opname").inner_text().startswith(f"{o['op']}({o['axis']}")
    if o["ok"]:
      assert row.locator(".dim").all_inner_texts() == [str(s) for s in o["shape"]]
      colors = row.locator(".dim").evaluate_all("els => els.map(e => e.style.color)")
      assert all(colors), "every axis of the shape is colored"
    else:
      assert row.locator(".reason").inner_text() == o["reason"]
  # BEAM: one table row per candidate, the chosen one marked, sortable by time
  beam = panel.locator(".beam tbody tr")
  assert beam.count() == len(want["beam"])
  chosen = [b for b in want["beam"] if b["chosen"]]
  assert panel.locator(".beam tr.chosen").count() == len(chosen) == 1
  assert "★" in panel.locator(".beam tr.chosen").inner_text()
  assert panel.locator(".scatter .pt.chosen circle").count() == 1
  times = [b["time"] for b in want["beam"] if b.get("time") is not None]
  panel.locator("th[data-key=time]").click()  # ascending → descending
  first = panel.locator(".beam tbody tr").first.locator("td").nth(3).inner_text()
  assert first.startswith(f"{max(times) * 1e6:.1f}")
  shot(page, "panel-kernel")


def test_source_panel(page, server):
  t, ctxs = demo(server)
  kernel = ctxs["r_16_4"]
  open_page(page, server, f"#t={t}&c={kernel['id']}&p=source")
  want = server.api(f"/api/traces/{t}/contexts/{kernel['id']}/kernel")["sources"]
  panel = page.locator("#panel-source")
  panel.locator("pre.source").wait_for()
  assert panel.locator(".subtabs button").count() == len(want)
  for i, src in enumerate(want):
    panel.locator(".subtabs button").nth(i).click()
    pre = panel.locator(f"pre.source[data-kind='{src['kind']}']")
    pre.wait_for()
    assert pre.evaluate("e => e.textContent").strip() == src["text"].strip()
    assert pre.locator("span[class]").count() > 0, "the source is highlighted"
    assert f"compile {src['compile_s'] * 1e3:.2f} ms" in panel.locator(".panel-head").inner_text()
  shot(page, "panel-source")


def test_runs_panel(page, server):
  t, ctxs = demo(server)
  open_page(page, server, f"#t={t}&p=runs")
  want = server.api(f"/api/traces/{t}/runs/kernels")["kernels"]  # (one row per kernel)
  panel = page.locator("#panel-runs")
  panel.locator("table").wait_for()
  rows = panel.locator("tbody tr")
  assert rows.count() == len(want) == 2
  assert panel.locator(".bars .bar").count() == len(want)
  # sorted by median time, slowest first
  slow = max(want, key=lambda r: r["median"])
  assert f"{slow['median'] * 1e6:.1f} µs" in rows.first.inner_text()
  assert f"{slow['gflops']:.2f}" in rows.first.inner_text()
  assert f"{slow['gbs']:.2f}" in rows.first.inner_text()
  shot(page, "panel-runs")
  # a header click sorts by that column (ascending, then descending), and the bar chart follows the table's order
  fast = min(want, key=lambda r: r["median"])

  def order() -> tuple[list[str], list[str]]:
    return ([rows.nth(i).locator(".kname").first.get_attribute("title").split(" (context")[0]
             for i in range(rows.count())],
            [panel.locator(".bars .bar title").nth(i).text_content().split(":")[0] for i in range(len(want))])
  median_th = panel.locator("thead th[data-key='median']")
  median_th.click()
  asc = sorted(want, key=lambda r: r["median"])
  page.wait_for_function("() => document.querySelector(\"#panel-runs thead th[data-key='median']\")"
                         ".classList.contains('asc')")
  assert order() == ([r["kname"] for r in asc], [r["kname"] for r in asc])
  median_th.click()
  page.wait_for_function("() => document.querySelector(\"#panel-runs thead th[data-key='median']\")"
                         ".classList.contains('desc')")
  assert order() == ([r["kname"] for r in asc[::-1]], [r["kname"] for r in asc[::-1]])
  # a click on a bar jumps like a click on its row: the fast kernel's bar is the last one now
  panel.locator(".bars .bar").nth(len(want) - 1).click()
  page.wait_for_function("(c) => window.__viz.state.ctx === c && window.__viz.state.panel === 'kernel'",
                         arg=fast["ctx"])
  assert "selected" in page.locator(f"#contexts li[data-ctx='{fast['ctx']}']").get_attribute("class")
  # a click on a row does the same (back on the runs panel, still sorted slowest first)
  page.keyboard.press("5")
  page.wait_for_function("() => window.__viz.state.panel === 'runs'")
  rows.nth(1).wait_for()
  rows.first.click()
  page.wait_for_function("(c) => window.__viz.state.ctx === c && window.__viz.state.panel === 'kernel'",
                         arg=slow["ctx"])
  assert "selected" in page.locator(f"#contexts li[data-ctx='{slow['ctx']}']").get_attribute("class")


def test_drag_and_drop_a_trace_file(page, server, trace_dir):
  open_page(page, server)
  before = len(server.api("/api/traces"))
  data = list((trace_dir / "demo.vztrace").read_bytes())
  # what the browser does when a file is dragged in from the desktop: dragenter shows the drop zone, drop uploads
  page.evaluate("""(bytes) => {
    const dt = new DataTransfer();
    dt.items.add(new File([new Uint8Array(bytes)], "dropped.vztrace"));
    window.dispatchEvent(new DragEvent("dragenter", {dataTransfer: dt, bubbles: true, cancelable: true}));
    window.__dropZoneShown = !document.querySelector("#drop-zone").hidden;
    window.dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
  }""", data)
  assert page.evaluate("() => window.__dropZoneShown")
  page.wait_for_function("() => document.querySelector('#trace-select').selectedOptions[0]?.textContent"
                         ".includes('dropped')")
  entries = server.api("/api/traces")
  assert len(entries) == before + 1 and entries[-1]["name"] == "dropped.vztrace"
  assert state(page)["trace"] == entries[-1]["id"] and page.locator("#drop-zone").is_hidden()


def test_upload(page, server, trace_dir, tmp_path):
  open_page(page, server)
  page.set_input_files("#file-input", str(trace_dir / "demo.vztrace"))
  # the uploaded trace's graph is on screen (not still the one the page opened with)
  page.wait_for_function("() => document.querySelector('#trace-select').selectedOptions[0]?.textContent"
                         ".includes('demo') && window.__viz.state.rw !== null"
                         " && window.__viz.graph.shown?.trace === window.__viz.state.trace")
  entries = server.api("/api/traces")
  t = state(page)["trace"]
  assert entries[-1]["id"] == t and entries[-1]["name"] == "demo.vztrace"
  wait_graph(page, t, state(page)["rw"], 0)
  # a file that is not a trace: the server's reason is shown, nothing is added
  bad = tmp_path / "not-a-trace.vztrace"
  bad.write_text("hello")
  page.errors.allowed.append("status of 400")
  page.set_input_files("#file-input", str(bad))
  toast = page.locator(".toast.error")
  toast.wait_for()
  assert "Not opened" in toast.inner_text()
  assert len(server.api("/api/traces")) == len(entries)
