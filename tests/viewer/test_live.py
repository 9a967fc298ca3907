"""Live viewing end to end: a real server following a trace another process is writing, a socket.io client over
websocket, `VIZ=1` starting (and reusing) a detached viewer, and the CLI."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import socketio
from support import tracegen
from support.proc_helpers import Events, Feed, add_exit, alive, get_json, open_gate, stop_writer, wait_exit

from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[2]
RUN_FIELDS = ("ctx", "kname", "min", "median", "times", "flops", "bytes", "gflops", "gbs")  # a `run` event's run

# argv: trace path, contexts, "kernels" (or "-") to also compile and run a real kernel of 8 * (i + 1) floats in context
# i, and "gated": after each context the writer waits at a gate (proc_helpers) the test opens once its client was told
# the viewer read that context, so the file grows in steps the viewer sees one by one however loaded the machine is
WRITER = textwrap.dedent("""
  import sys
  from compiler import Ops, PatternMatcher, UOp, UPat, graph_rewrite
  from compiler.trace import recorder
  kernels = sys.argv[3:4] == ["kernels"]
  gated = sys.argv[4:5] == ["gated"]
  if kernels:
    import numpy as np
    from compiler.tensor import Tensor
  if gated:
    from support.proc_helpers import wait_at_gate

  recorder.enable(sys.argv[1], announce=False)
  pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.const(None, 0)]), lambda x: x)], name="add0")
  x = UOp.variable("x", 0, 10)
  for i in range(int(sys.argv[2])):
    with recorder.trace_context(f"ctx{i}", kind="schedule"):
      graph_rewrite((x + 0) + i, pm, name=f"rw{i}")
      if kernels:
        (Tensor(np.arange(8 * (i + 1), dtype=np.float32)) + 1).numpy()
    recorder.RECORDER.writer.flush()
    if gated:
      wait_at_gate()
  recorder.disable()
""")


def _env(**extra):
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
  env.update(extra)
  return env


def test_socketio_client_gets_contexts_of_a_trace_being_written(server):
  d, url = server
  events = Events()
  sio = socketio.Client()
  for ev in ("trace", "context", "rewrite", "kernel", "run"):
    sio.on(ev, (lambda name: lambda data: events.add((name, data)))(ev))
  sio.connect(url, transports=["websocket"])
  try:
    assert sio.transport() == "websocket"
    assert sio.call("subscribe", {"trace": None}, timeout=30) == {"ok": True}
    n = 5
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(d / "run.vztrace"), str(n), "kernels", "gated"],
                              env=_env(PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")])),
                              stdin=subprocess.PIPE)
    add_exit(writer, events)
    try:
      for i in range(n):
        has = 1 + (i + 1) * 2  # default, then ctx0..ctxi and their kernels
        events.wait_for(lambda evs, has=has: any(e == "exit" or (e == "trace" and x["counts"]["contexts"] >= has)
                                                 for e, x in evs), f"the viewer to read ctx{i}")
        assert writer.poll() is None, f"the writer exited with {writer.returncode} before ctx{i} was read"
        open_gate(writer)
      assert writer.wait(timeout=300) == 0
    finally:
      stop_writer(writer)
    events.wait_for(lambda evs: any(e == "trace" and x["status"] == "ended" for e, x in evs), "the trace to end")
  finally:
    sio.disconnect()
  seen = [(e, x) for e, x in events.snapshot() if e != "exit"]
  begun = [x["context"] for e, x in seen if e == "context" and not x["context"]["ended"]]
  assert [c["name"] for c in begun if c["parent"] in (None, 0)] == ["default"] + [f"ctx{i}" for i in range(n)]
  rewrites = [x["rewrite"]["name"] for e, x in seen if e == "rewrite" and x["rewrite"]["ended"]]
  assert [r for r in rewrites if r.startswith("rw")] == [f"rw{i}" for i in range(n)]
  first_trace = next(i for i, (e, _) in enumerate(seen) if e == "trace")
  assert first_trace < next(i for i, (e, _) in enumerate(seen) if e == "context")  # the trace is announced first
  # the records came in several batches while the file grew, not all at once at the end
  assert sum(1 for e, x in seen if e == "trace" and x["status"] == "live") >= 2
  traces = get_json(url + "/api/traces")
  assert [(t["name"], t["status"], t["counts"]["kernels"], t["counts"]["runs"]) for t in traces] == \
    [("run.vztrace", "ended", n, n)]
  assert traces[0]["counts"]["contexts"] == len(begun) - 1  # (the empty root "default" is not counted)
  _check_kernel_events(seen, url, traces[0]["id"], d / "run.vztrace", n)


def _check_kernel_events(seen: list, url: str, tid: int, path: Path, n: int) -> None:
  """`kernel` and `run` events: one kernel context per ctx{i}, each announced after its context began, every run
  (as the file holds it) after its context began and followed by a `kernel` event for that context."""
  began = {x["context"]["id"]: i for i, (e, x) in enumerate(seen) if e == "context" and not x["context"]["ended"]}
  kernels = [x["context"] for e, x in seen if e == "context" and not x["context"]["ended"]
             and x["context"]["kind"] == "kernel"]
  assert [c["name"] for c in kernels] == [f"E_{8 * (i + 1)}" for i in range(n)]
  ids = [c["id"] for c in kernels]
  kev = [(i, x) for i, (e, x) in enumerate(seen) if e == "kernel"]
  assert all(set(x) == {"trace", "ctx"} and x["trace"] == tid for _, x in kev), kev
  assert list(dict.fromkeys(x["ctx"] for _, x in kev)) == ids  # every kernel context, in order, none other
  assert all(i > began[x["ctx"]] for i, x in kev)
  runs = [(i, x) for i, (e, x) in enumerate(seen) if e == "run"]
  assert all(set(x) == {"trace", "run"} and x["trace"] == tid for _, x in runs), runs
  recorded = [r for r in TraceReader(path) if r["t"] == "run"]
  assert [x["run"] for _, x in runs] == [{k: r[k] for k in RUN_FIELDS} for r in recorded]
  for (i, x), c in zip(runs, kernels, strict=True):
    r = x["run"]
    size = int(c["name"][2:])  # E_<elements>: one add per element, two float buffers
    assert (r["ctx"], r["flops"], r["bytes"]) == (c["id"], size, 8 * size)
    assert r["times"] and r["min"] == min(r["times"]) and r["median"] >= r["min"] > 0
    assert i > began[r["ctx"]] and any(j > i and y["ctx"] == r["ctx"] for j, y in kev)
    # what the `kernel` events announced is there to fetch: its one name (the scheduler's), its sources, its run
    k = get_json(f"{url}/api/traces/{tid}/contexts/{c['id']}/kernel")
    assert r["kname"] == k["name"] == c["name"]
    assert [s["kind"] for s in k["sources"]] == ["uops", "llvm_ir", "opt_ir", "asm"]
    assert f"define void @{r['kname']}" in k["sources"][1]["text"] and k["runs"] == [r]


def test_subscribe_to_one_trace_only(server):
  d, url = server
  got = []
  sio = socketio.Client()
  sio.on("context", lambda data: got.append(data["trace"]))
  sio.connect(url, transports=["websocket"])
  everything = socketio.Client()  # subscribed to all traces: it sees the last context event the server sends
  seen = Events()
  everything.on("context", lambda data: seen.add(("context", data["context"]["name"])))
  everything.on("trace", lambda data: seen.add(("trace", (data["name"], data["status"]))))
  everything.connect(url, transports=["websocket"])
  try:
    assert everything.call("subscribe", {"trace": None}, timeout=30) == {"ok": True}
    assert sio.call("subscribe", {"trace": 1}, timeout=30) == {"ok": True}
    assert sio.call("subscribe", {"trace": "x"}, timeout=30)["ok"] is False
    for name in ("a", "b"):
      p = subprocess.run([sys.executable, "-c", WRITER, str(d / f"{name}.vztrace"), "1"], env=_env(), timeout=60)
      assert p.returncode == 0
      seen.wait_for(lambda evs, name=name: ("trace", (f"{name}.vztrace", "ended")) in evs, f"trace {name}")
    # once the other client got b's contexts, a round trip on ours comes back after anything sent to it before
    seen.wait_for(lambda evs: evs.count(("context", "ctx0")) >= 2, "both traces' contexts")
    assert sio.call("subscribe", {"trace": 1}, timeout=30) == {"ok": True}
  finally:
    sio.disconnect()
    everything.disconnect()
  assert got and set(got) == {1}


def test_feed_subscribes_again_when_its_websocket_drops(server):
  """The tests' Feed (support/proc_helpers) once its websocket dropped: the client reconnects by itself, without the
  subscription (the server keeps it per connection), so every later wait for a new trace timed out (CI, loaded)."""
  d, url = server
  with Feed(url) as feed:
    feed.sio.eio.ws.close()  # the transport drops, as where a ping was answered late
    feed.wait("/api/traces", lambda _: feed.connects == 2, "the reconnect")
    tracegen.write_demo(d / "after.vztrace")
    feed.wait("/api/traces", lambda ts: [t["name"] for t in ts] == ["after.vztrace"], "the new trace", timeout=30)


def test_viz_1_starts_a_detached_viewer_and_a_second_run_reuses_it(tmp_path):
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  script = "from compiler import UOp, graph_rewrite, PatternMatcher\n" \
           "graph_rewrite(UOp.variable('x', 0, 3) + 0, PatternMatcher([], name='noop'), name='one')\n"
  env = _env(VIZ="1", VIZ_PORT=str(port), XDG_CACHE_HOME=str(tmp_path / "cache"))
  pid = None
  try:
    first = subprocess.run([sys.executable, "-c", script], env={**env, "VIZ_TRACE": str(tmp_path / "a.vztrace")},
                           capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count(f"http://127.0.0.1:{port}/") == 1 and "viewer starting" in first.stderr, first.stderr
    url = f"http://127.0.0.1:{port}"
    pid = get_json(url + "/api/ping")["pid"]  # (the URL is said once the viewer serves)
    with Feed(url) as feed:
      # the script is gone; the viewer keeps serving its (finished) trace
      feed.wait("/api/traces", lambda ts: [t["status"] for t in ts] == ["ended"], "the first trace")
      second = subprocess.run([sys.executable, "-c", script], env={**env, "VIZ_TRACE": str(tmp_path / "b.vztrace")},
                              capture_output=True, text=True, timeout=60)
      assert second.returncode == 0, second.stderr
      assert f"http://127.0.0.1:{port}/#t=1" in second.stderr and "follows this trace" in second.stderr, second.stderr
      feed.wait("/api/traces", lambda ts: [t["name"] for t in ts] == ["a.vztrace", "b.vztrace"], "reuse")
    assert get_json(url + "/api/ping")["pid"] == pid  # no second server
    stop = subprocess.run([sys.executable, "-m", "viz_server", "--stop", "--port", str(port)],
                          env=_env(XDG_CACHE_HOME=str(tmp_path / "cache")),  # the token of the user who started it
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert stop.returncode == 0, stop.stderr
    wait_exit(pid, "the viewer to exit")
    log = (tmp_path / "cache" / "tinyviz" / f"viewer-{port}.log").read_text()
    assert "serving 1 trace(s)" in log and "viewer stopped" in log, log
  finally:
    if pid is not None and alive(pid):
      os.kill(pid, signal.SIGTERM)


def test_cli_picks_a_free_port_when_busy_and_warns_about_other_hosts(tmp_path):
  trace = tmp_path / "t.vztrace"
  subprocess.run([sys.executable, "-c", WRITER, str(trace), "1"], env=_env(), check=True, timeout=60)
  with socket.socket() as busy:
    busy.bind(("127.0.0.2", 0))
    busy.listen()
    port = busy.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "viz_server", str(trace), "--port", str(port), "--host",
                             "127.0.0.2"], env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
      line = proc.stdout.readline()
      assert "serving 1 trace(s) at http://127.0.0.2:" in line and f":{port}/" not in line
      got = int(line.split("http://127.0.0.2:")[1].split("/")[0])
      assert get_json(f"http://127.0.0.2:{got}/api/traces")[0]["status"] == "ended"
    finally:
      proc.send_signal(signal.SIGINT)
      out, err = proc.communicate(timeout=120)
  assert "WARNING" in err and "busy" in err and proc.returncode == 0
