"""The trace viewer: trace store and index, step replay, diffs, layout, JSON API and socket.io feed (Flask)."""
from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
  # Flask is imported only when the app is wanted, so the store, replay and layout can be used without it
  if name == "create_app":
    from viz_server.app import create_app
    return create_app
  raise AttributeError(f"module 'viz_server' has no attribute {name!r}")
