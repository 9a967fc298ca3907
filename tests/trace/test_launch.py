"""VIZ=1 at the end of a script in a terminal: the script stays in the foreground while its viewer serves, and
Ctrl-C stops both (the issue's "keeps serving until Ctrl-C")."""
import os
import pty
import signal
import socket
import subprocess
import sys
from pathlib import Path

from support.proc_helpers import Feed, alive, get_json, read_until, wait_exit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ("import faulthandler, signal\n"
          "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"  # its stacks, should it hang (_stop_by_ctrl_c)
          # Ctrl-C as in a terminal's shell, whatever this test inherited (a shell's background job ignores SIGINT,
          # and its children inherit that)
          "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
          "from compiler import UOp, graph_rewrite, PatternMatcher\n"
          "graph_rewrite(UOp.variable('x', 0, 3) + 0, PatternMatcher([], name='noop'), name='one')\n")


def _viz_env(tmp_path):
  """A free port and the environment of a VIZ=1 script using it (nothing of ours leaks in)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  env.update(VIZ="1", VIZ_PORT=str(port), VIZ_TRACE=str(tmp_path / "t.vztrace"), PYTHONPATH=str(ROOT),
             XDG_CACHE_HOME=str(tmp_path / "cache"))
  return port, env


def _stop_by_ctrl_c(proc, viewer_log: Path) -> str:
  """SIGINT the script and return its stderr after; should it not exit, fail with its threads' stacks (SCRIPT dumps
  them on SIGUSR1) and the viewer's log."""
  proc.send_signal(signal.SIGINT)
  try:
    return proc.communicate(timeout=120)[1]
  except subprocess.TimeoutExpired:
    proc.send_signal(signal.SIGUSR1)
    try:
      err = proc.communicate(timeout=20)[1]
    except subprocess.TimeoutExpired as e:
      err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    log = viewer_log.read_text(errors="replace")[-4000:] if viewer_log.exists() else "(no viewer log)"
    raise AssertionError(f"the script did not exit after Ctrl-C\n--- its stderr and stacks:\n{err}\n"
                         f"--- the viewer's log:\n{log}") from None


def test_script_in_a_terminal_serves_until_ctrl_c(tmp_path):
  port, env = _viz_env(tmp_path)
  master, slave = pty.openpty()  # a terminal as stdin: the script should wait at its end
  proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdin=slave, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, text=True)
  os.close(slave)
  viewer = None
  try:
    # said once the trace has its end record and the viewer serves (its URL line came first: it listens)
    said = read_until(proc.stderr, "Press Ctrl-C to stop it", "the script to wait in the foreground")
    assert "viewer starting at" in said and proc.poll() is None, said
    viewer = get_json(f"http://127.0.0.1:{port}/api/ping")["pid"]
    with Feed(f"http://127.0.0.1:{port}") as feed:
      feed.wait("/api/traces", lambda ts: [t["status"] for t in ts] == ["ended"], "the finished trace")
    token = tmp_path / "cache" / "tinyviz" / "viewers" / f"{port}.token"
    assert token.exists()
    err = said + _stop_by_ctrl_c(proc, tmp_path / "cache" / "tinyviz" / f"viewer-{port}.log")
    assert "viewer stopped" in err, err
    wait_exit(viewer, "the viewer to stop")
    assert not token.exists()  # the viewer stopped by the script's SIGTERM cleaned up after itself
  finally:
    os.close(master)
    if proc.poll() is None:
      proc.kill()
    if viewer is not None and alive(viewer):
      os.kill(viewer, signal.SIGTERM)


def test_without_a_terminal_the_script_exits_and_the_viewer_stays(tmp_path):
  port, env = _viz_env(tmp_path)
  p = subprocess.run([sys.executable, "-c", SCRIPT], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                     env=env, timeout=60)
  assert p.returncode == 0, p.stderr
  assert "keeps serving" in p.stderr and p.stderr.count(f"http://127.0.0.1:{port}/") == 1, p.stderr
  viewer = get_json(f"http://127.0.0.1:{port}/api/ping")["pid"]  # ("keeps serving" is said once it serves)
  try:
    assert alive(viewer)
  finally:
    subprocess.run([sys.executable, "-m", "viz_server", "--stop", "--port", str(port)], env=env, cwd=ROOT,
                   capture_output=True, timeout=120)
    wait_exit(viewer, "the viewer to stop")


def test_in_a_terminal_ignoring_sigint_the_script_does_not_wait(tmp_path):
  """A script that ignores SIGINT (a shell's background job does, and its children inherit it) could never be stopped
  by Ctrl-C: it leaves the viewer serving and exits, as without a terminal."""
  port, env = _viz_env(tmp_path)
  master, slave = pty.openpty()
  script = SCRIPT.replace("signal.default_int_handler)", "signal.SIG_IGN)")
  assert script != SCRIPT
  try:
    p = subprocess.run([sys.executable, "-c", script], stdin=slave, capture_output=True, text=True, env=env,
                       timeout=120)
  finally:
    os.close(slave)
    os.close(master)
  assert p.returncode == 0, p.stderr
  assert "keeps serving" in p.stderr and "Press Ctrl-C" not in p.stderr, p.stderr
  viewer = get_json(f"http://127.0.0.1:{port}/api/ping")["pid"]  # ("keeps serving" is said once it serves)
  subprocess.run([sys.executable, "-m", "viz_server", "--stop", "--port", str(port)], env=env, cwd=ROOT,
                 capture_output=True, timeout=120)
  wait_exit(viewer, "the viewer to stop")


def test_the_url_is_printed_once_the_viewer_answers(tmp_path):
  """The URL line comes once the viewer listens: a connection made right after it (no wait, no retry) is answered,
  where one made as the viewer was spawned was refused (~1 s of the viewer's imports)."""
  port, env = _viz_env(tmp_path)
  script = SCRIPT + "import sys\nsys.stdin.read()\n"  # (alive until the test is done: its end would wait anyway)
  proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, env=env, text=True)
  viewer = None
  try:
    err = read_until(proc.stderr, "viewer starting at", "the viewer's URL")
    assert err.count(f"http://127.0.0.1:{port}/") == 1, err
    answer = get_json(f"http://127.0.0.1:{port}/api/ping", timeout=30)  # (refused, not timed out, were it not up)
    assert answer["app"] == "tinyviz"
    viewer = answer["pid"]
  finally:
    proc.stdin.close()
    proc.wait(timeout=120)
    subprocess.run([sys.executable, "-m", "viz_server", "--stop", "--port", str(port)], env=env, cwd=ROOT,
                   capture_output=True, timeout=120)
    if viewer is not None:
      wait_exit(viewer, "the viewer to stop")
