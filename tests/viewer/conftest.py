"""The viewer tests' own fixture: a viewer served in this process (the browser tests start theirs as a subprocess)."""
from __future__ import annotations

import threading

import pytest

from viz_server.__main__ import bind
from viz_server.app import create_app


@pytest.fixture
def server(tmp_path):
  """A viewer in this process serving the folder tmp_path/traces (yields the folder and the viewer's URL)."""
  d = tmp_path / "traces"
  d.mkdir()
  app = create_app([d], follow=False)
  srv = bind(app, "127.0.0.1", 0)
  store = app.extensions["tinyviz"]["store"]
  store.start()
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  yield d, f"http://127.0.0.1:{srv.port}"
  srv.shutdown()
  store.stop()
  srv.server_close()
