"""`serve()` run in-process gives the program its signal handlers back once it has cleaned up (it ignores SIGTERM,
SIGINT and SIGHUP during the clean-up, which must not be cut short)."""
from __future__ import annotations

import argparse
import os
import signal
import threading

from support import hostile_traces as H
from support.proc_helpers import get_json

from viz_server.__main__ import STOP_SIGNALS, bind, serve
from viz_server.app import create_app


def test_serve_restores_the_signal_handlers(tmp_path, capsys):
  def mine(_signum, _frame):
    raise AssertionError("not called")
  before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
  for s in STOP_SIGNALS:
    signal.signal(s, mine)
  try:
    app = create_app([H.small(tmp_path / "s.vztrace")], follow=False)
    srv = bind(app, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.port}"
    pinged = []

    def stop_when_up():
      try:  # the socket listens already: the ping waits in its backlog until serve() answers it
        pinged.append(get_json(url + "/api/ping", timeout=120))
      finally:
        app.extensions["tinyviz"]["shutdown"]()
    t = threading.Thread(target=stop_when_up, daemon=True)
    t.start()
    args = argparse.Namespace(host="127.0.0.1", port=srv.port, open=False, instead_of=None)
    assert serve(app, srv, args, local=False) == 0
    t.join(60)
    assert pinged and pinged[0]["pid"] == os.getpid()  # it was serving when told to stop
    assert "viewer stopped" in capsys.readouterr().out
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == {s: mine for s in STOP_SIGNALS}
  finally:
    for s, h in before.items():
      signal.signal(s, h)
