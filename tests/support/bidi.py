"""Stock Firefox driven over WebDriver BiDi, its own protocol (Playwright's Firefox is a patched build that cannot be
downloaded here): `firefox --headless --remote-debugging-port=0 --profile FRESH`, a websocket to
ws://127.0.0.1:PORT/session, JSON commands with ids and the events they subscribe to.

  with Firefox() as ff:
    ff.navigate(url)
    ff.wait("() => document.body.dataset.graph")
    ff.call("(a, b) => a + b", 1, 2)          # any JSON-able return value, JSON-able arguments
    ff.requests                                 # every request the page's context sent (network.beforeRequestSent)
    ff.errors                                   # console errors and uncaught exceptions in the page

Firefox (its whole process group) is killed on every way out of the `with`, on a failed start, at the interpreter's
exit, and by the kernel when the process that started it dies without either (PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import websocket

FIREFOX = shutil.which("firefox-esr") or "/usr/bin/firefox-esr"
START_S = 120  # generous: a loaded 2-core machine starts a browser slowly, and every wait ends on its event
COMMAND_S = 120
# a profile that asks nothing of the network by itself (updates, telemetry, safe browsing, captive portal checks)
PREFS = {
  "app.update.enabled": False, "app.update.auto": False, "browser.shell.checkDefaultBrowser": False,
  "browser.startup.homepage_override.mstone": "ignore", "browser.startup.page": 0,
  "browser.safebrowsing.malware.enabled": False, "browser.safebrowsing.phishing.enabled": False,
  "browser.safebrowsing.downloads.enabled": False, "network.captive-portal-service.enabled": False,
  "network.connectivity-service.enabled": False, "datareporting.policy.dataSubmissionEnabled": False,
  "datareporting.healthreport.uploadEnabled": False, "toolkit.telemetry.enabled": False,
  "extensions.update.enabled": False, "browser.newtabpage.enabled": False, "network.prefetch-next": False,
  "network.dns.disablePrefetch": True, "browser.ping-centre.telemetry": False, "app.normandy.enabled": False,
  "messaging-system.rsexperimentloader.enabled": False, "services.settings.server": "data:,",
}


_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # (looked up before any fork: the child only calls it)


def _die_with_parent() -> None:
  _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class BidiError(RuntimeError):
  """Firefox did not start, a command failed, or a wait ran past its deadline."""


class Firefox:
  def __init__(self, width: int = 1400, height: int = 900) -> None:
    if not os.path.exists(FIREFOX):
      raise BidiError(f"{FIREFOX} is missing: install Debian's firefox-esr (make firefox)")
    self.size = (width, height)
    self.profile = Path(tempfile.mkdtemp(prefix="tinyviz-firefox-"))
    (self.profile / "user.js").write_text("".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n"
                                                  for k, v in PREFS.items()))
    self.proc: subprocess.Popen | None = None
    self.ws: websocket.WebSocket | None = None
    self.requests: list[str] = []
    self.errors: list[str] = []
    self.context: str | None = None
    self._next = 0
    self._replies: dict[int, dict] = {}
    self._cond = threading.Condition()
    self._closed = False
    self._lines: queue.Queue[str | None] = queue.Queue()

  # ---- lifetime

  def __enter__(self) -> Firefox:
    try:
      self._start()
    except BaseException:
      self.close()
      raise
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()

  def _start(self) -> None:
    self.proc = subprocess.Popen([FIREFOX, "--headless", "--no-remote", "--remote-debugging-port=0", "--profile",
                                  str(self.profile), "about:blank"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True, preexec_fn=_die_with_parent,
                                 env={**os.environ, "MOZ_CRASHREPORTER_DISABLE": "1"})
    atexit.register(self.close)
    threading.Thread(target=self._read_stderr, daemon=True).start()
    url = self._wait_listening()
    self.ws = websocket.create_connection(url + "/session", timeout=COMMAND_S, suppress_origin=True)
    threading.Thread(target=self._read_socket, daemon=True).start()
    self.command("session.new", capabilities={})
    self.command("session.subscribe", events=["network.beforeRequestSent", "log.entryAdded"])
    self.context = self.command("browsingContext.getTree")["contexts"][0]["context"]
    w, h = self.size
    self.command("browsingContext.setViewport", context=self.context, viewport={"width": w, "height": h})

  def _read_stderr(self) -> None:
    assert self.proc is not None and self.proc.stderr is not None
    for line in self.proc.stderr:
      self._lines.put(line)
    self._lines.put(None)

  def _wait_listening(self) -> str:
    """The websocket address Firefox prints once its BiDi server listens."""
    deadline = time.monotonic() + START_S
    seen: list[str] = []
    while True:
      try:
        line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
      except queue.Empty:
        raise BidiError(f"Firefox did not start its BiDi server in {START_S} s: {''.join(seen)[-2000:]}") from None
      if line is None:
        raise BidiError(f"Firefox exited before its BiDi server listened: {''.join(seen)[-2000:]}")
      seen.append(line)
      if line.startswith("WebDriver BiDi listening on "):
        return line.split(" on ", 1)[1].strip()

  def close(self) -> None:
    """End the session and kill Firefox's process group (safe to call twice and after a failed start)."""
    atexit.unregister(self.close)
    self._closed = True
    if self.ws is not None:
      try:
        self.ws.close()
      except OSError:
        pass
      self.ws = None
    if self.proc is not None:
      try:
        os.killpg(self.proc.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      self.proc.wait(30)
      if self.proc.stderr is not None:
        self.proc.stderr.close()
      self.proc = None
    with self._cond:
      self._cond.notify_all()
    shutil.rmtree(self.profile, ignore_errors=True)

  # ---- the protocol

  def _read_socket(self) -> None:
    ws = self.ws
    while not self._closed and ws is not None:
      try:
        msg = json.loads(ws.recv())
      except (websocket.WebSocketException, OSError, ValueError):
        break
      if msg.get("type") == "event":
        self._event(msg["method"], msg["params"])
      elif "id" in msg:
        with self._cond:
          self._replies[msg["id"]] = msg
          self._cond.notify_all()
    with self._cond:
      self._closed = True
      self._cond.notify_all()

  def _event(self, method: str, params: dict) -> None:
    if method == "network.beforeRequestSent" and params.get("context") == self.context:
      self.requests.append(params["request"]["url"])
    elif method == "log.entryAdded" and params.get("level") == "error":
      self.errors.append(f"{params.get('type')}: {params.get('text')}")

  def command(self, method: str, **params: Any) -> dict:
    """Send one command and wait for its answer; a BiDi error raises."""
    if self.ws is None:
      raise BidiError("no session")
    with self._cond:
      self._next += 1
      mid = self._next
    self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
    deadline = time.monotonic() + COMMAND_S
    with self._cond:
      while mid not in self._replies:
        left = deadline - time.monotonic()
        if self._closed or left <= 0:
          raise BidiError(f"{method}: no answer ({'connection closed' if self._closed else f'{COMMAND_S} s'})")
        self._cond.wait(left)
      msg = self._replies.pop(mid)
    if msg.get("type") == "error":
      raise BidiError(f"{method}: {msg.get('error')}: {msg.get('message')}")
    return msg["result"]

  def navigate(self, url: str) -> None:
    self.command("browsingContext.navigate", context=self.context, url=url, wait="complete")

  def call(self, fn: str, *args: Any) -> Any:
    """fn (a JS function's source) called in the page with JSON arguments; its (awaited) value through JSON."""
    body = f"async () => JSON.stringify(await ({fn})(...{json.dumps(list(args))}) ?? null)"
    res = self.command("script.callFunction", functionDeclaration=body, awaitPromise=True,
                       target={"context": self.context}, resultOwnership="none")
    if res["type"] == "exception":
      raise BidiError(f"in the page: {res['exceptionDetails'].get('text')}")
    return json.loads(res["result"]["value"])

  def wait(self, fn: str, *args: Any, timeout_s: float = 60) -> Any:
    """Wait (in the page, frame by frame) until fn(...args) is truthy; returns its value."""
    return self.call(f"""async (...args) => {{
      const deadline = performance.now() + {timeout_s * 1000};
      for (;;) {{
        const got = await ({fn})(...args);
        if (got) return got;
        if (performance.now() > deadline) throw new Error("timed out waiting for: " + {json.dumps(fn)});
        await new Promise((r) => requestAnimationFrame(() => r()));
      }}
    }}""", *args)
