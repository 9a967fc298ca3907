"""The viewer's JSON API answered in-process, without a server: what the terminal viewer, compare and the export read.

One trace file is opened by a TraceStore (read whole, not followed) inside the viewer's own Flask app, and requests
go through Flask's test client, so every tool sees exactly what the browser would be served (without the socket.io
feed, which no test client request reaches)."""
from __future__ import annotations

import json
import os
from typing import Any

from viz_server.app import create_app
from viz_server.store import Trace, TraceStore


class OfflineError(Exception):
  """An API request that answered an error (the API's status and message)."""

  def __init__(self, status: int, message: str) -> None:
    super().__init__(f"{status}: {message}")
    self.status, self.message = status, message


class OfflineApi:
  """The API of a viewer serving one trace file; `get("/api/...")` returns the decoded JSON answer."""

  def __init__(self, path: str | os.PathLike) -> None:
    self.store = TraceStore()
    self.app = create_app([path], follow=False, allowed_hosts=None, store=self.store, socketio_client=None,
                          live=False)
    self.client = self.app.test_client()
    self.trace: Trace = next(iter(self.store.traces.values()))
    self.t = self.trace.id
    self.views.prefetch_steps = 0  # (no one steps through an offline answer: laying out steps ahead is waste)

  def get(self, url: str) -> Any:
    resp = self.client.get(url)
    body = json.loads(resp.get_data())
    if resp.status_code != 200:
      raise OfflineError(resp.status_code, body.get("error", "") if isinstance(body, dict) else str(body))
    return body

  def trace_get(self, rest: str) -> Any:
    """An answer under /api/traces/<this trace>/."""
    return self.get(f"/api/traces/{self.t}/{rest}")

  @property
  def views(self) -> Any:
    return self.app.extensions["tinyviz"]["views"]

  def view(self, r: int) -> Any:
    """Rewrite r's StepGraphs (what its /graph and /delta answers are made from), for work that asks for every step
    (the export: without a request and a JSON round trip per step)."""
    rw = self.trace.rewrites.get(r)
    if rw is None:
      raise OfflineError(404, f"no rewrite {r} in trace {self.t}")
    return self.views.get(self.trace, rw)

  def forget(self, r: int) -> None:
    """Let rewrite r's view and its cached layouts and answers go (the next view(r) rebuilds them)."""
    self.views.drop(self.t, r)

  def close(self) -> None:
    self.store.stop()

  def __enter__(self) -> OfflineApi:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()
