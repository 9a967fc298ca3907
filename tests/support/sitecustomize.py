"""A start-up hook for the viewer's tool children in tests/viewer/test_hostile_children.py, imported by a Python
process only where tests/support is on its PYTHONPATH (that test puts it there). With TINYVIZ_HOLD_CHILD naming a
Unix socket that listens, a `viz_server.tools` process connects to it, sends its pid and holds (blocked reading the
socket) until the test closes its end or kills it: where TINYVIZ_HOLD_AT is "start", at once (before it bound
itself); else at its first open of a trace file, which comes after `tools.bound_child` set its limits and
parent-death signal. So the test learns of each child from the child itself, at a known point, instead of looking
for it in /proc."""
from __future__ import annotations

import os
import socket
import sys


def _hold(where: str) -> None:
  with socket.socket(socket.AF_UNIX) as s:
    try:
      s.connect(where)
    except OSError:  # the test holds no more children (it closed its end): go on as usual
      return
    s.sendall(f"{os.getpid()}\n".encode())
    s.recv(1)  # the test's end closed (or this process killed): go on


def _install() -> None:
  where = os.environ.get("TINYVIZ_HOLD_CHILD")
  if not where:
    return
  try:
    with open("/proc/self/cmdline", "rb") as f:
      argv = f.read().split(b"\0")
  except OSError:
    return
  if b"viz_server.tools" not in argv:  # the viewer itself and everything else start as usual
    return
  if os.environ.get("TINYVIZ_HOLD_AT") == "start":
    _hold(where)
    return
  held = []

  def hook(event: str, args: tuple) -> None:
    if event == "open" and not held and isinstance(args[0], (str, bytes)) and os.fsdecode(args[0]).endswith(
        ".vztrace"):
      held.append(True)
      _hold(where)
  sys.addaudithook(hook)


_install()
