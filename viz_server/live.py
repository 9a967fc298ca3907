"""The socket.io feed: clients subscribe to one trace (or all) and get the store's events as they happen."""
from __future__ import annotations

from typing import Any

from flask_socketio import SocketIO, join_room, leave_room, rooms

from viz_server.store import TraceStore

ALL = "all"


def room_of(trace: int) -> str:
  return f"trace:{trace}"


def attach(socketio: SocketIO, store: TraceStore) -> None:
  """Register the `subscribe` handler and forward every store event to the rooms that want it."""

  @socketio.on("subscribe")
  def on_subscribe(data: Any = None) -> dict:
    if not isinstance(data, dict):  # no payload, or not an object: answer rather than let the call fail unanswered
      return {"ok": False, "error": "expected {trace: id or null}"}
    trace = data.get("trace")
    if trace is not None and (type(trace) is not int or trace < 0):
      return {"ok": False, "error": "trace must be an id or null"}
    for r in rooms():
      if r == ALL or r.startswith("trace:"):
        leave_room(r)
    join_room(ALL if trace is None else room_of(trace))
    return {"ok": True}

  def forward(event: str, data: dict) -> None:
    trace = data["id"] if event == "trace" else data["trace"]
    socketio.emit(event, data, to=[ALL, room_of(trace)])

  store.listeners.append(forward)
