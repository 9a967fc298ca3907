"""The tests' waits on other processes end when the process does, and not before (they are what the viewer and
Firefox tests trust to know a process is gone)."""
import os
import subprocess
import sys

import pytest
from support.proc_helpers import group_members, read_until, wait_exit, wait_group_exit


def test_wait_exit_returns_when_the_process_ends_and_times_out_while_it_runs():
  proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
  try:
    with pytest.raises(AssertionError, match="the reader to end"):
      wait_exit(proc.pid, "the reader to end", timeout=0.2)  # it waits for its stdin: still running
    proc.stdin.close()  # its read ends, then the process
    wait_exit(proc.pid, "the reader to end", timeout=60)
    assert proc.wait(5) == 0
  finally:
    proc.kill()
  wait_exit(proc.pid, "a reaped process")  # gone: nothing to wait for


def test_wait_group_exit_waits_for_every_member():
  # a group leader that starts a child in its group and exits first: the group is gone only when the child is
  child = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'])"
  proc = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, start_new_session=True)
  try:
    proc.wait(60)
    members = group_members(proc.pid)
    assert len(members) == 1 and members[0] != proc.pid
    with pytest.raises(AssertionError):
      wait_group_exit(proc.pid, "the group", timeout=0.2)
    proc.stdin.close()  # the child's stdin is the same pipe: its read ends
    wait_group_exit(proc.pid, "the group", timeout=60)
    assert group_members(proc.pid) == []
  finally:
    for pid in group_members(proc.pid):
      os.kill(pid, 9)


def test_read_until_returns_at_the_line_and_fails_as_soon_as_the_pipe_ends_without_it():
  # (a line written in pieces, as an unbuffered child does: read_until returns once it is whole)
  child = ("import sys; print('a'); print('rea', end='', flush=True); print('dy', flush=True); sys.stdin.read(); "
           "print('late')")
  proc = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
  try:
    assert read_until(proc.stdout, "ready", "the child") == "a\nready\n"  # it waits on its stdin meanwhile
    assert proc.poll() is None
    proc.stdin.close()  # it prints 'late' and exits: the pipe ends
    with pytest.raises(AssertionError, match="the end: the pipe ended without a line holding 'never' in 'late"):
      read_until(proc.stdout, "never", "the end")
  finally:
    proc.kill()
    proc.wait(60)
