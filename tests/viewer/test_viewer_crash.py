"""A program that dies while a viewer follows its trace: the viewer tells its socket.io clients how the program ended
(the end record's `exit`, issue 27), in the trace list and the boot answer too."""
from __future__ import annotations

import subprocess
import sys

import socketio
from support.crash_script import LINES, MESSAGE, SCRIPT, _env
from support.proc_helpers import Events, add_exit, get_json


def test_the_viewer_tells_its_clients_how_the_program_ended(server, tmp_path):
  d, url = server
  events = Events()
  sio = socketio.Client()
  sio.on("trace", lambda data: events.add(("trace", data)))
  sio.connect(url, transports=["websocket"])
  try:
    assert sio.call("subscribe", {"trace": None}, timeout=30) == {"ok": True}
    (tmp_path / "script.py").write_text(SCRIPT)
    writer = subprocess.Popen([sys.executable, "script.py", "error", MESSAGE], cwd=tmp_path,
                              env=_env(d / "crash.vztrace"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    add_exit(writer, events)
    _, got = events.wait_for(lambda evs: next((e for e in evs if e[0] == "trace" and e[1]["status"] == "ended"),
                                              None), "the trace to end")
    assert writer.wait(timeout=300) == 1
  finally:
    sio.disconnect()
  assert got["exit"]["kind"] == "exception" and got["exit"]["message"] == MESSAGE
  boot = get_json(url + "/api/boot")
  [entry] = boot["traces"]
  assert entry["status"] == "ended" and entry["exit"] == got["exit"]
  assert entry["exit"]["text"] == (f"ended with an error: ValueError: {MESSAGE} at {tmp_path / 'script.py'}:"
                                   f"{LINES['RAISE']} in main")
  assert get_json(url + "/api/traces")[0]["exit"] == got["exit"]
