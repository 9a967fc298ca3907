"""The top bar's Export buttons: a click downloads the file `export` writes for the trace shown (same options), and
the download opens from file:// as a working export."""
from __future__ import annotations

import re

import pytest
from support.browser import open_page, wait_graph

from viz_server.export.command import export

STAMP = re.compile(r"\(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)")  # the export's note says when it was written


@pytest.mark.parametrize("button, redact", [("#export-trace", []),
                                            ("#export-redacted", ["paths", "source", "argv", "host"])])
def test_export_button_downloads_the_export(page, server, trace_dir, tmp_path, button, redact):
  t = server.trace_id("demo.vztrace")
  open_page(page, server, f"#t={t}")
  with page.expect_download(timeout=120_000) as dl:
    page.click(button)
  got = tmp_path / "downloaded.html"
  dl.value.save_as(got)
  assert dl.value.suggested_filename == ("trace-%d.html" % t if redact else "demo.html")
  want = tmp_path / "cli.html"
  export(trace_dir / "demo.vztrace", want, redact=redact)
  assert STAMP.sub("", got.read_text(encoding="utf-8")) == STAMP.sub("", want.read_text(encoding="utf-8"))
  # the downloaded file is a working export: it opens from disk, shows a graph, and hides the buttons it cannot use
  page.goto(got.resolve().as_uri())
  page.wait_for_function("() => window.__viz !== undefined")
  page.evaluate("() => window.__viz.ready")
  st = page.evaluate("() => ({...window.__viz.state})")
  wait_graph(page, st["trace"], st["rw"], st["step"])
  assert page.is_hidden("#export-trace") and page.is_hidden("#export-redacted")
  note = page.text_content("#export-note")
  assert ("redacted: nothing" in note) == (not redact)


def test_export_refusal_is_a_toast(page, server):
  t = server.trace_id("demo.vztrace")
  open_page(page, server, f"#t={t}")
  page.errors.allowed.append("413")  # the console's "Failed to load resource" for the refused request
  page.route("**/export?*", lambda r: r.fulfill(status=413, content_type="application/json",
                                                 body='{"error": "trace 1 has 9 matches; <b>too many</b>"}'))
  page.click("#export-trace")
  page.wait_for_function("() => [...document.querySelectorAll('#toasts .toast.error')].some("
                         "e => e.textContent.includes('<b>too many</b>'))")  # the message, as text
  assert page.query_selector("#toasts b") is None


def test_a_running_export_shows_its_progress(page, server):
  """The Export button's toast says how far the export is (GET /api/exports/<job>, the job the export request
  named) until the export answers."""
  t = server.trace_id("demo.vztrace")
  open_page(page, server, f"#t={t}")
  page.errors.allowed.append("413")
  held, jobs = [], []
  page.route("**/export?*", lambda r: held.append(r))  # (answered below, once the progress was shown)
  page.route("**/api/exports/*", lambda r: (jobs.append(r.request.url.rsplit("/", 1)[1]), r.fulfill(
    status=200, content_type="application/json", body='{"running": true, "steps": 600, "total": 1283}')))
  page.click("#export-trace")
  toast = "#toasts .export-progress"
  page.wait_for_function(f"() => document.querySelector({toast!r})?.textContent.endsWith('600 of 1,283 steps (46%)')")
  assert held and f"job={jobs[0]}" in held[0].request.url and re.fullmatch(r"[0-9a-f]{16}", jobs[0])
  held[0].fulfill(status=413, content_type="application/json", body='{"error": "stopped"}')
  page.wait_for_function(f"() => !document.querySelector({toast!r}) && [...document.querySelectorAll("
                         "'#toasts .toast.error')].some(e => e.textContent.includes('stopped'))")
