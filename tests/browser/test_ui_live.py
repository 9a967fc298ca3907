"""Live traces: a process writes a trace while the page is open; new kernels appear without a reload."""
from __future__ import annotations

import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from support.browser import ROOT, open_page, shot
from support.proc_helpers import open_gate, stop_writer
from werkzeug.serving import make_server

from viz_server.app import create_app

WRITER = Path(__file__).resolve().parents[1] / "support" / "tracegen.py"


@pytest.mark.parametrize("mode", ["socket.io", "polling"])
def test_live_kernel_appears(page, server, mode):
  path = server.dir / f"live-{mode.replace('.', '')}.vztrace"
  # three kernels flushed as they are written; the writer waits at its gate (a read of its stdin) after the first
  # until the page is open
  proc = subprocess.Popen([sys.executable, str(WRITER), "live", str(path), "3", "-"], cwd=ROOT, stdin=subprocess.PIPE)
  try:
    t = server.trace_id(path.name)
    open_page(page, server, ("?live=poll" if mode == "polling" else "") + f"#t={t}")
    page.wait_for_function("(m) => document.querySelector('#live-mode').textContent.startsWith(m)", arg=mode)
    page.evaluate("() => { window.__sameDocument = true; }")  # gone if the page reloads
    badge = page.locator("#trace-status")
    assert "live" in badge.inner_text()
    page.wait_for_selector("#contexts li[title*='live_kernel_0']", timeout=60_000)
    open_gate(proc)
    # the last kernel's context shows up in the sidebar, and its run in the runs panel
    wait_live_row(page, server, t, proc, "live_kernel_2")
    proc.wait(120)
    page.wait_for_function("() => document.querySelector('#trace-status').textContent === 'ended'", timeout=60_000)
    assert page.evaluate("() => window.__sameDocument") is True
    kernels = page.eval_on_selector_all("#contexts li.kind-kernel", "els => els.map(e => e.title)")
    assert [k.rsplit(": ", 1)[1] for k in kernels] == [f"live_kernel_{i}" for i in range(3)]
    page.click("#panel-tabs [data-panel=runs]")
    page.wait_for_function("() => document.querySelectorAll('#panel-runs tbody tr').length === 3")
    shot(page, f"live-{mode.replace('.', '')}")
  finally:
    stop_writer(proc)


def test_live_view_catches_up_when_socketio_events_are_lost(page, server):
  """A websocket that stays open but delivers no event (its pings still pass, so socket.io never reconnects): the page
  asks the trace list now and then while the trace is live, and shows what no event told it of."""
  dropped = []

  def drop_events(ws):
    to_server = ws.connect_to_server()  # the page's messages go through as they are

    def to_page(msg):
      if isinstance(msg, str) and msg.startswith("42"):  # a socket.io event (engine.io message 4, socket.io event 2)
        dropped.append(msg)
      else:
        ws.send(msg)
    to_server.on_message(to_page)

  page.route_web_socket("**/socket.io/**", drop_events)
  path = server.dir / "live-lost-events.vztrace"
  proc = subprocess.Popen([sys.executable, str(WRITER), "live", str(path), "3", "-"], cwd=ROOT, stdin=subprocess.PIPE)
  try:
    t = server.trace_id(path.name)
    open_page(page, server, f"#t={t}")
    page.wait_for_function("() => document.querySelector('#live-mode').textContent === 'socket.io'")
    page.wait_for_selector("#contexts li[title*='live_kernel_0']", timeout=60_000)
    open_gate(proc)
    wait_live_row(page, server, t, proc, "live_kernel_2")
    proc.wait(120)
    page.wait_for_function("() => document.querySelector('#trace-status').textContent === 'ended'", timeout=60_000)
    assert dropped  # the events were sent, and none of them reached the page
    assert page.evaluate("() => document.querySelector('#live-mode').textContent") == "socket.io"
  finally:
    stop_writer(proc)


def wait_live_row(page, server, t: int, proc: subprocess.Popen, name: str) -> None:
  """Wait for the sidebar row of context `name`; if it never comes, fail with what each side had (the server's entry
  and contexts, the writer's exit code, the page's contexts and live mode), to tell a record never read from an
  update never asked for."""
  try:
    page.wait_for_selector(f"#contexts li[title*='{name}']", timeout=60_000)
  except PlaywrightTimeout:
    entry = next((e for e in server.api("/api/traces") if e["id"] == t), None)
    served = [c["name"] for c in server.api(f"/api/traces/{t}/contexts")]
    shown = page.evaluate("() => [window.__viz.data.contexts.map((c) => c.name), "
                          "document.querySelector('#live-mode').textContent, window.__viz.state.trace]")
    log = server.log_tail()
    raise AssertionError(f"{name} not shown: writer exit {proc.poll()}; server entry {entry}; server contexts "
                         f"{served}; page contexts, live mode, trace {shown}; server log: {log}") from None


def test_damaged_trace_banner(page, server):
  data = bytearray((server.dir / "demo.vztrace").read_bytes())
  frames, off = [], 12
  while off < len(data):
    frames.append(off)
    off += 16 + struct.unpack_from("<I", data, off + 4)[0]
  assert len(frames) >= 3
  data[frames[-1] + 20] ^= 0xFF  # breaks the last frame's checksum: everything before it is still served
  tmp = server.dir / "damaged.part"  # renamed into place, so the server never sees a half-written file
  tmp.write_bytes(bytes(data))
  tmp.rename(server.dir / "damaged.vztrace")
  t = server.trace_id("damaged.vztrace")
  entry = next(e for e in server.api("/api/traces") if e["id"] == t)
  assert entry["status"] == "damaged"
  open_page(page, server, f"#t={t}")
  banner = page.locator("#banner")
  banner.wait_for()
  assert "damaged" in page.locator("#trace-status").inner_text()
  assert entry["damage"]["reason"] in banner.inner_text()
  assert entry["damage"]["offset"] == frames[-1] and entry["counts"]["contexts"] > 0
  shown = [c for c in server.api(f"/api/traces/{t}/contexts") if c["rewrites"] or c["parent"] is not None]
  page.wait_for_function("(n) => document.querySelectorAll('#contexts li[data-ctx]').length === n", arg=len(shown))
  shot(page, "damaged")


def test_without_the_socketio_client_the_page_polls_quietly(new_page, trace_dir, tmp_path):
  """No node_modules: the page is told so and polls, without asking for the client (a 404 is a console error)."""
  app = create_app([trace_dir / "demo.vztrace"], socketio_client=tmp_path / "not-installed.js")
  srv = make_server("127.0.0.1", 0, app, threaded=True)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  page = new_page()
  try:
    asked = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(f"http://127.0.0.1:{srv.server_port}/")
    page.wait_for_function("() => window.__viz !== undefined")
    page.evaluate("() => window.__viz.ready")
    page.wait_for_function("() => document.querySelector('#live-mode').textContent === 'polling'")
    page.wait_for_function("() => document.body.dataset.graph !== undefined")
    assert not [u for u in asked if "/vendor/" in u]
  finally:
    page.close()  # before the server goes: a poll that cannot connect is a console error too
    srv.shutdown()
    app.extensions["tinyviz"]["store"].stop()
