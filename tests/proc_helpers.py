"""Helpers of the tests that start viewers and scripts in other processes."""
import json
import os
import time
import urllib.request
from pathlib import Path


def wait_until(pred, what: str, timeout: float = 120.0):
  """pred()'s first truthy value, asked every 50 ms; AssertionError naming `what` after `timeout` seconds."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    got = pred()
    if got:
      return got
    time.sleep(0.05)
  raise AssertionError(f"timed out waiting for {what}")


def get_json(url: str, timeout: float = 30):
  with urllib.request.urlopen(url, timeout=timeout) as r:
    return json.loads(r.read().decode())


def ping(url: str):
  """A viewer's /api/ping answer, or None while nothing answers at url."""
  try:
    return get_json(url + "/api/ping", timeout=5)
  except OSError:
    return None


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
