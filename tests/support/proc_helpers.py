"""Helpers of the tests that start viewers and scripts in other processes."""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

GATE_TIMEOUT = 300.0  # how long a writer waits at a gate before it gives up on the test (a hung test, not a slow one)


def read_until(stream: IO, text: str, what: str, timeout: float = 120.0) -> str:
  """What a child wrote to the pipe `stream` up to the end of the first line holding `text` (and whatever came in the
  same read): blocks in select until the child writes, so it returns as soon as that line is whole; AssertionError
  naming `what` (and what was read) when the pipe ends without it or after `timeout` seconds. Reads the pipe's file
  descriptor, not `stream`'s buffer: a later communicate() on the same pipe gets exactly what follows."""
  fd, got, deadline = stream.fileno(), b"", time.monotonic() + timeout
  want = text.encode()
  while want not in got or b"\n" not in got[got.index(want):]:  # (a child may write a line in several pieces)
    ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    chunk = os.read(fd, 65536) if ready else b""
    if not chunk:
      why = "the pipe ended" if ready else f"{timeout:.0f} s passed"
      raise AssertionError(f"{what}: {why} without a line holding {text!r} in {got.decode(errors='replace')[-4000:]!r}")
    got += chunk
  return got.decode(errors="replace")


class Feed:
  """A viewer's socket.io feed of every trace, so that a wait on what the viewer answers asks again when the viewer
  says something changed (each store event), not on a clock."""

  def __init__(self, url: str, timeout: float = 60.0) -> None:
    import socketio  # (only the tests that watch a viewer need the client)
    self.url = url
    self.cond = threading.Condition()
    self.count = 0  # events so far: a wait needs only to know that one came
    self.connects = 0  # connections so far: the client reconnects by itself where its transport drops
    self.sio = socketio.Client()
    self.sio.on("*", self._event)
    self.sio.on("connect", self._connected)
    self.sio.connect(url, transports=["websocket"], wait_timeout=timeout)
    answer = self.sio.call("subscribe", {"trace": None}, timeout=timeout)
    if answer != {"ok": True}:
      raise AssertionError(f"the viewer at {url} refused the subscription: {answer}")

  def _event(self, _name: str, _data: Any = None) -> None:
    with self.cond:
      self.count += 1
      self.cond.notify_all()

  def _connected(self) -> None:
    """A reconnect (a dropped websocket, e.g. a ping answered late on a loaded machine) comes without the subscription,
    which the server keeps per connection: the feed went deaf, and every later wait on a new trace timed out. It
    subscribes again, and the waits ask again once it is in place (what changed meanwhile came as no event)."""
    with self.cond:
      self.connects += 1
      if self.connects == 1:
        return  # (the first: __init__ subscribes and checks the answer)
    self.sio.emit("subscribe", {"trace": None}, callback=lambda *_: self._event("subscribed"))

  def wait(self, path: str, pred: Callable[[Any], Any], what: str, timeout: float = 120.0) -> Any:
    """pred(the viewer's JSON answer at path)'s first truthy value: asked now and again after each event of the feed
    (an answer is only asked once the feed is subscribed, so no change slips between); AssertionError naming `what`
    with the last answer after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
      with self.cond:
        seen = self.count
      answer = get_json(self.url + path)
      got = pred(answer)
      if got:
        return got
      with self.cond:
        if not self.cond.wait_for(lambda seen=seen: self.count > seen, max(0.0, deadline - time.monotonic())):
          raise AssertionError(f"timed out waiting for {what} (feed: {self.count} events, {self.connects} "
                               f"connections); the last answer of {path}: {str(answer)[:2000]}")

  def close(self) -> None:
    self.sio.disconnect()

  def __enter__(self) -> Feed:
    return self

  def __exit__(self, *_: object) -> None:
    self.close()


class Events:
  """What callbacks on other threads (a socket.io client's) record, and a wait on it that wakes on each record."""

  def __init__(self) -> None:
    self.cond = threading.Condition()
    self.items: list = []

  def add(self, item: Any) -> None:
    with self.cond:
      self.items.append(item)
      self.cond.notify_all()

  def snapshot(self) -> list:
    with self.cond:
      return list(self.items)

  def wait_for(self, pred: Callable[[list], Any], what: str, timeout: float = 120.0) -> Any:
    """pred(items)'s first truthy value, asked again each time an item is added; AssertionError after `timeout`."""
    with self.cond:
      got = self.cond.wait_for(lambda: pred(self.items), timeout)
    if not got:
      raise AssertionError(f"timed out waiting for {what}")
    return got


def add_exit(proc: subprocess.Popen, events: Events) -> None:
  """Add ("exit", returncode) to events once proc exits, so that a wait on events for what proc should make happen
  ends as soon as proc is gone, not at its timeout."""
  threading.Thread(target=lambda: events.add(("exit", proc.wait())), daemon=True).start()


# ---- gates: a writer subprocess (started with stdin=subprocess.PIPE) stops at wait_at_gate until the test lets it on
# with open_gate. A blocking wait on a pipe: it returns when the test writes, however the two are scheduled.

def wait_at_gate(timeout: float = GATE_TIMEOUT) -> None:
  """In the writer: block until the test opens the gate (one byte on stdin) or closes its end (stop_writer, or the
  test is gone); SystemExit after `timeout` seconds, so a writer never outlives a hung test for long."""
  ready, _, _ = select.select([sys.stdin.fileno()], [], [], timeout)
  if not ready:
    sys.exit(f"the test never opened the gate in {timeout:.0f} s")
  os.read(sys.stdin.fileno(), 1)  # one byte a gate: the next wait does not pass on what this one was sent


def open_gate(proc: subprocess.Popen) -> None:
  """Let the writer pass one gate (now, or when it gets there); nothing happens to one that has exited."""
  with suppress(BrokenPipeError, ValueError):  # exited already / all gates opened already
    proc.stdin.write(b"\n")
    proc.stdin.flush()


def stop_writer(proc: subprocess.Popen) -> None:
  """What a test's `finally` does with its gated writer: its stdin closed (every gate open) and, if it still runs,
  killed, so a failed test leaves no writer behind."""
  with suppress(BrokenPipeError):
    proc.stdin.close()
  if proc.poll() is None:
    proc.kill()


def get_json(url: str, timeout: float = 30) -> Any:
  with urllib.request.urlopen(url, timeout=timeout) as r:
    return json.loads(r.read().decode())


def wait_exit(pid: int, what: str, timeout: float = 120.0) -> None:
  """Block until process pid has ended: its pidfd turns readable when it exits (no polling); AssertionError naming
  `what` after `timeout` seconds."""
  try:
    fd = os.pidfd_open(pid)
  except ProcessLookupError:
    return  # gone (and reaped) already
  try:
    ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
  finally:
    os.close(fd)
  if not ready:
    raise AssertionError(f"timed out waiting for {what}")


def group_members(pgid: int) -> list[int]:
  """The pids of process group pgid that still run (not zombies), from /proc."""
  out = []
  for d in os.listdir("/proc"):
    if d.isdigit():
      try:  # after the command name (in parentheses, may hold spaces): state, ppid, pgrp
        state, _, pgrp = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[:3]
      except (OSError, ValueError):
        continue  # exited meanwhile
      if int(pgrp) == pgid and state != "Z":
        out.append(int(d))
  return out


def wait_group_exit(pgid: int, what: str, timeout: float = 120.0) -> None:
  """Block until every process of group pgid has ended, each waited for by its pidfd (a member that forks while
  we wait is found when the group is listed again)."""
  deadline = time.monotonic() + timeout
  while members := group_members(pgid):
    for pid in members:
      wait_exit(pid, what, deadline - time.monotonic())


def alive(pid: int) -> bool:
  """Whether process pid runs: an exited one its parent has not reaped yet (a zombie) counts as gone."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  try:  # the state follows the command name, which is in parentheses and may hold spaces
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
  except FileNotFoundError:  # exited meanwhile
    return False
  except OSError:  # no /proc to tell: os.kill found it
    return True
