"""The viewer's edges (issue 11) and its identity (issue 14 item 7): a busy VIZ_PORT, clean-up on every way a viewer
stops, stale tokens, a fake viewer on the port, bad files and bad port numbers on the command line, `tinyviz --help`,
`make demo VIZ_PORT=...`."""
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path

import pytest
from support.proc_helpers import Feed, alive, read_until, wait_exit

from compiler.trace import launch
from vztrace import control

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ("from compiler import UOp, graph_rewrite, PatternMatcher\n"
          "graph_rewrite(UOp.variable('x', 0, 3) + 0, PatternMatcher([], name='noop'), name='one')\n")


def _env(cache: Path, **kw: str) -> dict:
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  env.update(PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(cache), **kw)
  return env


def _viewers(marker: str) -> list[int]:
  """Pids of the viewer processes whose command line names marker (a path under the test's tmp folder)."""
  out = []
  for d in Path("/proc").iterdir():
    if not d.name.isdigit():
      continue
    try:
      argv = (d / "cmdline").read_bytes().split(b"\0")
    except OSError:
      continue
    if b"viz_server" in argv and any(marker.encode() in a for a in argv) and alive(int(d.name)):
      out.append(int(d.name))
  return out


@pytest.fixture
def no_viewer_left(tmp_path):
  """Stops, at the end of the test (passed or failed), every viewer whose command line names the tmp folder."""
  yield str(tmp_path)
  for pid in _viewers(str(tmp_path)):
    os.kill(pid, signal.SIGTERM)
  for pid in _viewers(str(tmp_path)):
    try:
      wait_exit(pid, "a viewer to stop", timeout=60)
    except AssertionError:
      os.kill(pid, signal.SIGKILL)


def _run_viz(tmp_path: Path, port: int, name: str) -> subprocess.CompletedProcess:
  env = _env(tmp_path / "cache", VIZ="1", VIZ_PORT=str(port), VIZ_TRACE=str(tmp_path / f"{name}.vztrace"))
  p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                     text=True, timeout=90)
  assert p.returncode == 0, p.stderr
  return p


def _trace(tmp_path: Path, name: str = "good") -> Path:
  env = _env(tmp_path / "cache", VIZ="-1", VIZ_TRACE=str(tmp_path / f"{name}.vztrace"))
  subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True, timeout=60, capture_output=True)
  return tmp_path / f"{name}.vztrace"


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


# ---- a busy VIZ_PORT

def test_a_busy_port_is_said_once_per_run_and_later_runs_reuse_the_viewer(tmp_path, no_viewer_left):
  with socket.socket() as busy:  # another program: listens, never answers
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    runs = [_run_viz(tmp_path, port, name) for name in ("a", "b", "c")]
    for p in runs:
      assert p.stderr.count(f"port {port} is busy (another program listens there)") == 1, p.stderr
    assert "viewer starting at" in runs[0].stderr
    url = runs[0].stderr.split("viewer starting at ")[1].split("/ ")[0]
    assert f":{port}" not in url
    for p in runs[1:]:
      assert f"the viewer at {url}/#t=" in p.stderr and "follows this trace" in p.stderr, p.stderr
    assert len(_viewers(str(tmp_path))) == 1
    with Feed(url) as feed:
      feed.wait("/api/traces", lambda ts: {t["name"] for t in ts} == {"a.vztrace", "b.vztrace", "c.vztrace"},
                "three traces")


# ---- clean-up on every way out, stale tokens

def _cli_viewer(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, int]:
  port = _free_port()
  (tmp_path / "tmp").mkdir(exist_ok=True)
  env = _env(tmp_path / "cache", TMPDIR=str(tmp_path / "tmp"))
  proc = subprocess.Popen([sys.executable, "-m", "viz_server", str(_trace(tmp_path)), "--port", str(port), *extra],
                          env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
  read_until(proc.stdout, "tinyviz: serving", "the viewer to serve")  # (said after it wrote its token)
  return proc, port


def _upload(port: int, data: bytes) -> dict:
  boundary = uuid.uuid4().hex
  body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"up.vztrace\"\r\n"
          f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
  req = urllib.request.Request(f"http://127.0.0.1:{port}/api/traces", data=body, method="POST",
                               headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
  with urllib.request.urlopen(req, timeout=60) as r:
    return json.loads(r.read().decode())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_removes_the_token_and_the_upload_folder(tmp_path, monkeypatch, no_viewer_left, sig):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  proc, port = _cli_viewer(tmp_path)
  try:
    assert control.read_token(port) is not None  # proved: its pid holds the port
    _upload(port, _trace(tmp_path, "up").read_bytes())
    uploads = list((tmp_path / "tmp").glob("tinyviz-uploads-*"))
    assert len(uploads) == 1 and any(uploads[0].iterdir())
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 0 and "viewer stopped" in out, err
  assert not control.token_path(port).exists()
  assert not list((tmp_path / "tmp").glob("tinyviz-uploads-*"))


def test_a_token_whose_viewer_is_gone_is_stale(tmp_path, monkeypatch, no_viewer_left):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  proc, port = _cli_viewer(tmp_path)
  proc.kill()  # no clean-up possible
  proc.communicate(timeout=120)
  assert control.token_path(port).exists()
  assert control.read_token(port) is None and control.my_viewers() == []
  assert not control.token_path(port).exists()  # removed as stale


# ---- a fake viewer on the port gets nothing

class FakeViewer(http.server.ThreadingHTTPServer):
  """Impersonates a tinyviz viewer's /api/ping (claiming pid `pid`) and accepts every follow; records requests."""

  def __init__(self, pid: int) -> None:
    self.pid, self.seen = pid, []
    server = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def _answer(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

      def do_GET(self) -> None:
        server.seen.append(("GET", self.path, dict(self.headers), b""))
        self._answer({"app": "tinyviz", "version": 1, "pid": server.pid})

      def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server.seen.append(("POST", self.path, dict(self.headers), body))
        self._answer({"id": 0, "ok": True})

      def log_message(self, *args: object) -> None:
        pass

    super().__init__(("127.0.0.1", 0), Handler)
    self.port = self.server_address[1]
    threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.mark.parametrize("owner", ["dead", "alive elsewhere"])
def test_a_fake_viewer_on_the_port_gets_neither_the_token_nor_the_trace(tmp_path, monkeypatch, no_viewer_left, owner):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
  if owner == "dead":  # the viewer that wrote the token was killed; its pid is gone
    other.communicate(timeout=120)
  fake = FakeViewer(other.pid)
  try:
    # what a killed viewer left: its token, naming its pid and this port
    control.token_dir().mkdir(parents=True, mode=0o700)
    control.token_path(fake.port).write_text(json.dumps({"token": "SECRET" * 8, "pid": other.pid, "port": fake.port,
                                                         "asked": fake.port}))
    p = _run_viz(tmp_path, fake.port, "t")
    assert f"127.0.0.1:{fake.port}/#t=" not in p.stderr, p.stderr
    assert f"port {fake.port} is busy (the tinyviz viewer there is not one you started)" in p.stderr, p.stderr
    stop = subprocess.run([sys.executable, "-m", "viz_server", "--stop", "--port", str(fake.port)],
                          env=_env(tmp_path / "cache"), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert stop.returncode == 1 and "not one you started" in stop.stderr, stop.stderr
    reuse = subprocess.run([sys.executable, "-m", "viz_server", str(tmp_path / "t.vztrace"), "--reuse", "--port",
                            str(fake.port)], env=_env(tmp_path / "cache"), cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
    assert reuse.returncode == 1, reuse.stderr
    for method, path, headers, body in fake.seen:
      assert method == "GET" and path == "/api/ping", (method, path)
      assert "SECRET" not in json.dumps(headers) and b"t.vztrace" not in body
  finally:
    fake.shutdown()
    fake.server_close()
    if other.poll() is None:
      other.communicate(b"", timeout=120)


FAKE_AS_NOBODY = """
import encodings.idna, http.server, json, os, sys  # all imported before dropping to a user who cannot read them
os.setgid(65534); os.setuid(65534)  # another user of the machine: the listening socket is theirs
class H(http.server.BaseHTTPRequestHandler):
  def _answer(self, body):
    data = json.dumps(body).encode()
    self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
    self.wfile.write(data)
  def do_GET(self):
    print(json.dumps(["GET", self.path, dict(self.headers), ""]), flush=True)
    self._answer({"app": "tinyviz", "version": 1, "pid": int(sys.argv[1])})
  def do_POST(self):
    body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode(errors="replace")
    print(json.dumps(["POST", self.path, dict(self.headers), body]), flush=True)
    self._answer({"id": 0})
  def log_message(self, *a):
    pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


@pytest.mark.skipif(os.name != "posix" or os.getuid() != 0 or not os.path.exists("/proc/net/tcp"),
                    reason="needs root (to act as another user) and Linux /proc")
def test_another_users_fake_viewer_claiming_a_live_pid_of_ours_gets_nothing(tmp_path, monkeypatch, no_viewer_left):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  ours = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
  fake = subprocess.Popen([sys.executable, "-c", FAKE_AS_NOBODY, str(ours.pid)], stdout=subprocess.PIPE, text=True)
  try:
    port = int(fake.stdout.readline())
    control.token_dir().mkdir(parents=True, mode=0o700)
    control.token_path(port).write_text(json.dumps({"token": "SECRET" * 8, "pid": ours.pid, "port": port,
                                                    "asked": port}))
    assert control.owns_port(ours.pid, port) is False and control.read_token(port) is None
    p = _run_viz(tmp_path, port, "t")
    assert f"127.0.0.1:{port}/#t=" not in p.stderr and "is not one you started" in p.stderr, p.stderr
  finally:
    fake.kill()
    seen, _ = fake.communicate(timeout=120)
    ours.communicate(b"", timeout=120)
  requests = [json.loads(line) for line in seen.splitlines()]
  assert requests and all(r[0] == "GET" and r[1] == "/api/ping" for r in requests), requests
  assert "SECRET" not in seen and "t.vztrace" not in seen


# ---- the command line

def test_a_file_that_is_no_trace_is_named_and_the_others_are_served(tmp_path, no_viewer_left):
  junk = tmp_path / "notatrace.txt"
  junk.write_text("hello, I am not a trace\n")
  proc = subprocess.Popen([sys.executable, "-m", "viz_server", str(_trace(tmp_path)), str(junk), "--port", "0"],
                          env=_env(tmp_path / "cache"), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
  try:
    line = proc.stdout.readline()
    assert "serving 1 trace(s) at http://127.0.0.1:" in line, line
  finally:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
  assert f"not serving {junk}: not a trace file" in err, err
  only = subprocess.run([sys.executable, "-m", "viz_server", str(junk), "--port", "0"], env=_env(tmp_path / "cache"),
                        cwd=ROOT, capture_output=True, text=True, timeout=60)
  assert only.returncode == 2 and str(junk) in only.stderr and "nothing to serve" in only.stderr, only.stderr


@pytest.mark.parametrize("raw", ["abc", "70000", "0", "-1"])
def test_viz_port_that_is_no_port_number_is_said_once(monkeypatch, capsys, raw):
  monkeypatch.setenv("VIZ_PORT", raw)
  monkeypatch.setattr(launch, "_warned", set(), raising=False)
  assert launch.viewer_port() == launch.DEFAULT_PORT and launch.viewer_port() == launch.DEFAULT_PORT
  err = capsys.readouterr().err
  assert err.count(f"VIZ_PORT={raw!r} is not a port number") == 1, err
  monkeypatch.setenv("VIZ_PORT", " 8123 ")
  assert launch.viewer_port() == 8123 and capsys.readouterr().err == ""


def test_the_installed_command_names_itself_in_its_help():
  exe = Path(sys.executable).with_name("tinyviz")
  assert exe.is_file(), "the console script is installed with the project (pyproject.toml [project.scripts])"
  h = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT)
  assert h.returncode == 0 and h.stdout.startswith("usage: tinyviz "), h.stdout
  m = subprocess.run([sys.executable, "-m", "viz_server", "--help"], capture_output=True, text=True, timeout=60,
                     cwd=ROOT)
  assert m.stdout.startswith("usage: python -m viz_server "), m.stdout


@pytest.mark.parametrize("how", ["command line", "environment", "PORT"])
def test_make_demo_takes_viz_port_and_port(how):
  env = {k: v for k, v in os.environ.items() if k not in ("VIZ_PORT", "PORT")}
  args = ["make", "-n", "demo"]
  if how == "command line":
    args.append("VIZ_PORT=9123")
  elif how == "environment":
    env["VIZ_PORT"] = "9123"
  else:
    args.append("PORT=9123")
  p = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
  assert p.returncode == 0, p.stderr
  assert "VIZ=1 VIZ_PORT=9123 " in p.stdout, p.stdout


# ---- compiler.trace validate/info: one answer for an empty file, damage named by frame

def _cli_trace(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "compiler.trace", *args], cwd=ROOT, env=_env(ROOT / "unused-cache"),
                        capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("content", [b"", b"VZTR", b"VZTRACE\0\2"])
def test_an_empty_trace_file_is_an_unfinished_trace_as_a_header_only_one_is(tmp_path, content):
  old, fresh = tmp_path / "old.vztrace", tmp_path / "fresh.vztrace"
  old.write_bytes(content)
  fresh.write_bytes(content)
  os.utime(old, (1e9, 1e9))  # long before STALE_S: the writer stopped before writing a header
  v = _cli_trace("validate", str(old))
  assert v.returncode == 1 and "UNFINISHED" in v.stdout and "empty file" in v.stdout, v.stdout + v.stderr
  v = _cli_trace("validate", str(fresh))
  assert v.returncode == 1 and "NOT FINISHED YET" in v.stdout, v.stdout + v.stderr
  i = _cli_trace("info", str(old))
  assert i.returncode == 0 and "no trace header yet" in i.stdout, i.stdout + i.stderr
  assert json.loads(_cli_trace("info", str(old), "--json").stdout)["records"] == 0
  junk = tmp_path / "junk.vztrace"
  junk.write_bytes(b"VZX")  # not the start of a trace: that stays "not a readable trace"
  assert _cli_trace("validate", str(junk)).returncode == 2


def test_damage_is_named_by_its_frame(tmp_path):
  from vztrace.writer import TraceWriter
  p = tmp_path / "t.vztrace"
  starts = []
  with TraceWriter(p, validate=True) as w:
    for i in range(5):
      starts.append(p.stat().st_size)
      w.write({"t": "error", "ctx": 0, "text": f"frame {i}, " + "x" * 40})
      w.write({"t": "error", "ctx": 0, "text": "second record"})
      w.flush()
  data = bytearray(p.read_bytes())
  data[starts[3] + 20] ^= 0xFF  # inside the payload of frame 3 (counting from 0)
  p.write_bytes(bytes(data))
  v = _cli_trace("validate", str(p))
  assert v.returncode == 1, v.stdout + v.stderr
  assert f"DAMAGED at byte {starts[3]}, in frame 3 (counting from 0; frames 0-2 are intact)" in v.stdout, v.stdout
  assert "recovered 6 records in 3 frames" in v.stdout and "record 6" not in v.stdout
  i = _cli_trace("info", str(p), "--json")
  assert json.loads(i.stdout)["stopped_frame"] == 3 and i.returncode == 1
  assert "in frame 3" in _cli_trace("info", str(p)).stdout
