"""The viewer server: (1) indexing a trace with ~100k matches: time and memory, vs holding its records as dicts;
(2) serving every step of the largest rewrite of a trace: latency p50/p95/max and bytes per step for the full graph
per step (what a viewer without deltas sends) vs /delta vs /delta?compact=1, cold (a fresh server, steps asked back
to back, layouts computed on demand), cold without the background prefetch, paced like a held arrow key, and warm.
Traces: ~1000 steps on a ~500-node graph (sorting sums by a bench-local matcher), the `symbolic` simplifier on a SINK
of index expressions, and the project's workloads. With --repeat R every pass runs R times; the table shows the
median and, for p95, the range. (3) live latency: `python -m viz_server DIR` in its own process, a writer thread
flushing a trace in DIR at known (jittered) times, a socket.io client (websocket) noting when each record's event
arrives: flush -> event p50/p95/max, idle and while another client steps through a big rewrite (the goal: 250 ms).
Prints tables; run from the repo root."""
from __future__ import annotations

import argparse
import gc
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_symbolic import random_index_exprs  # noqa: E402
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite  # noqa: E402
from compiler.symbolic import symbolic  # noqa: E402
from compiler.trace import recorder  # noqa: E402
from compiler.uop import Ops, UOp  # noqa: E402
from viz_server.app import create_app  # noqa: E402
from viz_server.store import TraceStore  # noqa: E402
from vztrace.reader import TraceReader  # noqa: E402
from vztrace.writer import TraceWriter  # noqa: E402

try:
  import socketio  # python-socketio, the test suite's client; only the live part needs it
except ImportError:
  socketio = None


def _count_matches() -> list[int]:
  """Count the matches the recorder writes (wraps its match method)."""
  rec = recorder.RECORDER
  n = [0]
  orig = rec.match

  def counted(*args: Any) -> None:
    n[0] += 1
    orig(*args)
  rec.match = counted
  return n


def huge_trace(path: Path, matches: int) -> int:
  """Random index expressions simplified one graph_rewrite each, 50 per kernel context, until `matches` matches."""
  recorder.enable(path, announce=False)
  n = _count_matches()
  seed = 0
  while n[0] < matches:
    exprs = random_index_exprs(400, seed=seed)
    for i in range(0, len(exprs), 50):
      with recorder.trace_context(f"kernel {seed}.{i}", kind="kernel"):
        for e in exprs[i:i + 50]:
          graph_rewrite(e, symbolic)
    seed += 1
  recorder.disable()
  return n[0]


def symbolic_trace(path: Path, exprs: int) -> None:
  """One big rewrite: a SINK of many random index expressions simplified together."""
  with_recording(path, lambda: graph_rewrite(UOp.sink(*random_index_exprs(exprs, seed=1)), symbolic))


def _term_key(t: UOp) -> tuple[str, ...]:
  return (str(t.src[0].arg), str(t.src[1].arg)) if t.op is Ops.MUL else ("~",)


def _reassociate(a: UOp, b: UOp, c: UOp) -> UOp:
  return a + (b + c)


def _swap_in(a: UOp, b: UOp, c: UOp) -> UOp | None:
  return b + (a + c) if b.op is not Ops.ADD and _term_key(b) < _term_key(a) else None


def _swap(a: UOp, b: UOp) -> UOp | None:
  return b + a if _term_key(b) < _term_key(a) else None


def _add(*src: UPat) -> UPat:
  return UPat(Ops.ADD, src=src)


# sums to right-deep form, then terms bubble-sorted: each match rebuilds a few nodes, a sum of m terms takes ~m^2/4
sort_sums = PatternMatcher([
  (_add(_add(UPat.var("a"), UPat.var("b")), UPat.var("c")), _reassociate),
  (_add(UPat.var("a"), _add(UPat.var("b"), UPat.var("c"))), _swap_in),
  (_add(UPat(Ops.MUL, name="a"), UPat(Ops.MUL, name="b")), _swap),
], name="sort sums")


def sort_trace(path: Path, sums: int = 4, terms: int = 30, filler: int = 10) -> None:
  """One long rewrite on a mid-sized graph: `sums` left-deep sums of `terms` products (range or var times a
  constant) sorted by `sort_sums`, next to `filler` index expressions it leaves alone (~1000 steps, ~500 nodes)."""
  rng = random.Random(1)
  leaves = [UOp.range(16, i) for i in range(4)] + [UOp.variable(f"v{i}", 0, 9) for i in range(2)]
  pool = [x * c for x in leaves for c in range(2, 12)]
  out = []
  for _ in range(sums):
    e = rng.choice(pool)
    for _ in range(terms - 1):
      e = e + rng.choice(pool)
    out.append(e)
  sink = UOp.sink(*out, *random_index_exprs(filler, seed=1))
  with_recording(path, lambda: graph_rewrite(sink, sort_sums, name="sort sums"))


def workloads_trace(path: Path, scale: float) -> bool:
  """The project's workloads compiled (and run) with tracing on; False if the compiler cannot do that yet."""
  try:
    from bench.workloads import WORKLOADS
    def run() -> None:
      for make in WORKLOADS.values():
        out = make(scale=scale).lazy()
        out.realize()
    with_recording(path, run)
    return True
  except Exception as e:  # the compiler's later stages may be missing or broken: bench what exists
    print(f"(workloads trace skipped: {type(e).__name__}: {e})")
    recorder.disable()
    return False


def with_recording(path: Path, fn: Callable[[], Any]) -> None:
  recorder.enable(path, announce=False)
  try:
    fn()
  finally:
    recorder.disable()


def pct(xs: list[float], q: float) -> float:
  xs = sorted(xs)
  return xs[min(len(xs) - 1, int(q * len(xs)))]


def bench_index(path: Path, matches: int) -> None:
  size = path.stat().st_size
  gc.collect()
  t = time.perf_counter()
  n_recs = sum(1 for _ in TraceReader(path))
  read = time.perf_counter() - t
  t = time.perf_counter()
  TraceStore().add_path(path)
  dt = time.perf_counter() - t
  gc.collect()
  tracemalloc.start()  # again, for memory (tracemalloc slows allocation down)
  st = TraceStore()
  (tr,) = st.add_path(path)
  kept, peak = tracemalloc.get_traced_memory()
  tracemalloc.stop()
  gc.collect()
  tracemalloc.start()
  recs = list(TraceReader(path))
  naive, _ = tracemalloc.get_traced_memory()
  tracemalloc.stop()
  del recs, st, tr
  print(f"\n== indexing a trace of {matches} matches ({n_recs} records, {size / 1e6:.1f} MB file)")
  print(f"{'':34s}{'value':>12s}")
  print(f"{'index time (s)':34s}{dt:12.2f}")
  print(f"{'of which reading (s, reader alone)':34s}{read:12.2f}")
  print(f"{'records per second':34s}{n_recs / dt:12.0f}")
  print(f"{'memory kept by the index (MB)':34s}{kept / 1e6:12.1f}")
  print(f"{'peak memory while indexing (MB)':34s}{peak / 1e6:12.1f}")
  print(f"{'records held as dicts (MB)':34s}{naive / 1e6:12.1f}")
  print(f"{'index / dicts':34s}{kept / naive:12.3f}")
  print(f"{'bytes kept per match':34s}{kept / matches:12.0f}")
  print(f"{'graphs materialized':34s}{0:12d}")


def _largest(client: Any) -> dict:
  ctxs = client.get("/api/traces/0/contexts").get_json()
  return max((rw for c in ctxs for rw in c["rewrites"]), key=lambda rw: rw["matches"])


def _pass(path: Path, mode: str, steps: int, pace: float = 0.0, warm: bool = False, prefetch: bool = True) -> dict:
  """Serve steps 1..steps of the largest rewrite one after the other in a fresh app; times and bytes per step."""
  app = create_app([path], follow=False)
  if not prefetch:
    app.extensions["tinyviz"]["views"].prefetch_steps = 0
  c = app.test_client()
  rw = _largest(c)
  base = f"/api/traces/0/rewrites/{rw['id']}"
  n = min(steps, rw["matches"])
  t = time.perf_counter()
  first = c.get(f"{base}/graph?step=0")
  first_ms = (time.perf_counter() - t) * 1000
  url = {"full": lambda k: f"{base}/graph?step={k}", "delta": lambda k: f"{base}/delta?from={k - 1}&to={k}",
         "compact": lambda k: f"{base}/delta?from={k - 1}&to={k}&compact=1"}[mode]
  if warm:
    for k in range(1, n + 1):
      c.get(url(k))
  times, sizes = [], []
  for k in range(1, n + 1):
    if pace:
      time.sleep(pace)
    t = time.perf_counter()
    r = c.get(url(k))
    times.append((time.perf_counter() - t) * 1000)
    assert r.status_code == 200, r.data[:300]
    sizes.append(len(r.data))
  view = next(iter(app.extensions["tinyviz"]["views"]._views.values()))
  return {"rw": rw, "n": n, "nodes": len(first.get_json()["nodes"]), "first_ms": first_ms,
          "first_kb": len(first.data) / 1e3, "p50": pct(times, 0.5), "p95": pct(times, 0.95), "max": max(times),
          "kb": statistics.mean(sizes) / 1e3, "max_kb": max(sizes) / 1e3, "layouts": dict(view.stats)}


def _deep_link_ms(path: Path) -> tuple[float, float]:
  """A fresh app asked straight for the last step of the largest rewrite (its layout is made from every step before
  it), then for the step before the last: milliseconds of each."""
  app = create_app([path], follow=False)
  app.extensions["tinyviz"]["views"].prefetch_steps = 0
  c = app.test_client()
  rw = _largest(c)
  out = []
  for k in (rw["matches"], rw["matches"] - 1):
    t = time.perf_counter()
    assert c.get(f"/api/traces/0/rewrites/{rw['id']}/graph?step={k}").status_code == 200
    out.append((time.perf_counter() - t) * 1000)
  return out[0], out[1]


def bench_steps(name: str, path: Path, steps: int, pace: float, full_steps: int, repeat: int = 1) -> None:
  runs = [(f"full graph per step (first {full_steps})", "full", 0.0, False, True), ("delta", "delta", 0.0, False, True),
          ("delta compact", "compact", 0.0, False, True),
          ("delta compact, no background prefetch", "compact", 0.0, False, False),
          (f"delta compact, {pace * 1000:.0f} ms apart", "compact", pace, False, True),
          ("delta compact, warm", "compact", 0.0, True, True)]
  rows = []
  for label, mode, p, w, pre in runs:
    got = [_pass(path, mode, full_steps if mode == "full" else steps, p, w, pre) for _ in range(repeat)]
    med = {k: statistics.median(g[k] for g in got) for k in ("p50", "p95", "max", "kb", "max_kb", "first_ms")}
    rows.append((label, {**got[0], **med, "p95_lo": min(g["p95"] for g in got), "p95_hi": max(g["p95"] for g in got)}))
  r0 = rows[0][1]
  print(f"\n== serving the steps of {name}: rewrite {r0['rw']['name']!r}, {r0['rw']['matches']} steps "
        f"(served {rows[1][1]['n']}), {r0['nodes']} nodes at step 0; first graph {r0['first_kb']:.0f} KB in "
        f"{r0['first_ms']:.0f} ms" + (f"; median of {repeat} passes, p95 range in brackets" if repeat > 1 else ""))
  deep, then = _deep_link_ms(path)
  print(f"cold deep link to the last step (fresh server): {deep:.0f} ms; then the step before it: {then:.0f} ms")
  print(f"{'mode':40s}{'p50 ms':>9s}{'p95 ms':>9s}{'p95 range':>14s}{'max ms':>9s}{'KB/step':>9s}{'max KB':>9s}"
        f"{'bytes vs full':>15s}{'full/derived layouts':>22s}")
  for label, r in rows:
    lay = f"{r['layouts'].get('full', 0)}/{r['layouts'].get('derived', 0)}"
    rng = f"[{r['p95_lo']:.1f}-{r['p95_hi']:.1f}]" if repeat > 1 else ""
    print(f"{label:40s}{r['p50']:9.1f}{r['p95']:9.1f}{rng:>14s}{r['max']:9.1f}{r['kb']:9.1f}{r['max_kb']:9.1f}"
          f"{r['kb'] / r0['kb']:15.3f}{lay:>22s}")


LIVE_GOAL_MS = 250.0  # new records must reach the clients within this of being flushed


def _get_json(url: str, timeout: float = 10) -> Any:
  with urllib.request.urlopen(url, timeout=timeout) as r:
    return json.loads(r.read())


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start_viewer(d: Path) -> tuple[subprocess.Popen, str]:
  """The viewer as users run it: its own process, watching directory d."""
  port = _free_port()
  root = Path(__file__).resolve().parents[1]
  env = {k: v for k, v in os.environ.items() if not k.startswith("VIZ")}
  env.update(VIZ="0", PYTHONPATH=str(root))
  proc = subprocess.Popen([sys.executable, "-m", "viz_server", str(d), "--port", str(port), "--host", "127.0.0.1"],
                          cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  url = f"http://127.0.0.1:{port}"
  deadline = time.monotonic() + 30
  while True:
    try:
      _get_json(url + "/api/ping", timeout=1)
      return proc, url
    except OSError:
      if proc.poll() is not None or time.monotonic() > deadline:
        proc.kill()
        raise RuntimeError("the viewer did not start") from None
      time.sleep(0.05)


def _stepper(url: str, name: str, stop: threading.Event, served: list[int]) -> None:
  """Another client stepping through the largest rewrite of trace `name`, full graphs, cold layouts, back to back."""
  tid = next(t["id"] for t in _get_json(url + "/api/traces") if t["name"] == name)
  ctxs = _get_json(f"{url}/api/traces/{tid}/contexts")
  rw = max((r for c in ctxs for r in c["rewrites"]), key=lambda r: r["matches"])
  k = 0
  while not stop.is_set():
    _get_json(f"{url}/api/traces/{tid}/rewrites/{rw['id']}/graph?step={k}", timeout=60)
    served[0] += 1
    k = (k + 1) % (rw["matches"] + 1)


def _live_pass(flushes: int, interval: float, busy: Path | None) -> dict:
  """Latencies (ms) from the writer's flush returning to the client getting the `context` and `run` events."""
  with tempfile.TemporaryDirectory() as d:
    tmp = Path(d)
    if busy is not None:
      (tmp / busy.name).write_bytes(busy.read_bytes())
    proc, url = _start_viewer(tmp)
    arrived: dict[tuple[str, str], float] = {}
    sio = socketio.Client()
    sio.on("context", lambda x: x["context"]["ended"] or arrived.setdefault(("context", x["context"]["name"]),
                                                                             time.monotonic()))
    sio.on("run", lambda x: arrived.setdefault(("run", x["run"]["kname"]), time.monotonic()))
    stop = threading.Event()
    stepper, served = None, [0]
    try:
      sio.connect(url, transports=["websocket"])
      sio.call("subscribe", {"trace": None}, timeout=10)
      if busy is not None:
        stepper = threading.Thread(target=_stepper, args=(url, busy.name, stop, served), daemon=True)
        stepper.start()
      path = tmp / "live.vztrace"
      w = TraceWriter(path, validate=True)  # no background thread: a record reaches the file exactly at flush()
      w.write({"t": "meta", "version": 2, "argv": ["bench"], "host": socket.gethostname(), "pid": os.getpid(),
               "python": sys.version.split()[0], "started": time.time(), "cwd": d})
      w.write({"t": "ctx_begin", "id": 0, "parent": None, "name": "default", "kind": "default", "ts": time.time()})
      w.flush()
      deadline = time.monotonic() + 10  # the directory scan finds the file; measure only records after that
      while not any(t["name"] == path.name for t in _get_json(url + "/api/traces")) and time.monotonic() < deadline:
        time.sleep(0.05)
      rng = random.Random(0)
      flushed = {}
      for i in range(flushes):
        time.sleep(interval * rng.uniform(0.5, 1.5))  # jitter: flushes fall anywhere in the store's poll cycle
        name = f"k{i}"
        w.write({"t": "ctx_begin", "id": i + 1, "parent": 0, "name": name, "kind": "kernel", "ts": time.time()})
        w.write({"t": "run", "ctx": i + 1, "kname": name, "times": [1e-6], "min": 1e-6, "median": 1e-6, "flops": 1,
                 "bytes": 8, "gflops": 1e-3, "gbs": 8e-3})
        w.write({"t": "ctx_end", "id": i + 1, "ts": time.time()})
        w.flush()
        flushed[name] = time.monotonic()
      w.write({"t": "ctx_end", "id": 0, "ts": time.time()})
      w.write({"t": "end", "ts": time.time()})
      w.close()
      deadline = time.monotonic() + 5
      while len(arrived) < 2 * flushes and time.monotonic() < deadline:
        time.sleep(0.05)
    finally:
      stop.set()
      if stepper is not None:  # let its request in flight finish before the server goes
        stepper.join(60)
      sio.disconnect()
      proc.terminate()
      proc.wait(10)
  out: dict[str, Any] = {"served": served[0]}
  for ev in ("context", "run"):
    lat = [(arrived[(ev, k)] - t) * 1000 for k, t in flushed.items() if (ev, k) in arrived]
    out[ev] = {"n": len(lat), "missing": len(flushed) - len(lat), "p50": pct(lat, 0.5), "p95": pct(lat, 0.95),
               "max": max(lat), "over": sum(x > LIVE_GOAL_MS for x in lat)}
  return out


def bench_live(flushes: int, interval: float, busy: Path | None, busy_name: str) -> None:
  rows = [("idle viewer", _live_pass(flushes, interval, None))]
  if busy is not None:
    rows.append((f"while a client pulls {{}} graphs of {busy_name}", _live_pass(flushes, interval, busy)))
  print(f"\n== live latency: {flushes} flushes ~{interval * 1000:.0f} ms apart, flush returned -> socket.io event "
        f"received (websocket; goal {LIVE_GOAL_MS:.0f} ms)")
  print(f"{'viewer':52s}{'event':>9s}{'got':>6s}{'missing':>9s}{'p50 ms':>9s}{'p95 ms':>9s}{'max ms':>9s}"
        f"{f'> {LIVE_GOAL_MS:.0f} ms':>10s}")
  for label, got in rows:
    label = label.format(got["served"])
    for ev in ("context", "run"):
      r = got[ev]
      print(f"{label:52s}{ev:>9s}{r['n']:6d}{r['missing']:9d}{r['p50']:9.1f}{r['p95']:9.1f}{r['max']:9.1f}"
            f"{r['over']:10d}")


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--matches", type=int, default=100_000, help="matches in the indexing trace")
  ap.add_argument("--exprs", type=int, default=100, help="index expressions in the one-rewrite symbolic trace")
  ap.add_argument("--steps", type=int, default=1000, help="steps served per mode (from step 1)")
  ap.add_argument("--full-steps", type=int, default=200, help="steps served as full graphs (the slow baseline)")
  ap.add_argument("--pace", type=float, default=0.05, help="seconds between paced steps")
  ap.add_argument("--scale", type=float, default=0.25, help="workload size for the workloads trace")
  ap.add_argument("--repeat", type=int, default=1, help="passes per mode (the table shows medians)")
  ap.add_argument("--flushes", type=int, default=200, help="flushes timed by the live latency part")
  ap.add_argument("--flush-interval", type=float, default=0.1, help="mean seconds between two of those flushes")
  ap.add_argument("--only", default="index,sort,symbolic,workloads,live",
                  help="comma-separated parts to run: index, sort, symbolic, workloads, live")
  ap.add_argument("--quick", action="store_true", help="20k matches, 40 expressions, 150 steps, 50 live flushes")
  args = ap.parse_args()
  if args.quick:
    args.matches, args.exprs, args.steps, args.full_steps, args.flushes = 20_000, 40, 150, 50, 50
  only = set(args.only.split(","))
  with tempfile.TemporaryDirectory() as d:
    tmp = Path(d)
    if "index" in only:
      got = huge_trace(tmp / "huge.vztrace", args.matches)
      bench_index(tmp / "huge.vztrace", got)
    if "sort" in only:
      sort_trace(tmp / "sort.vztrace")
      bench_steps("4 sums of 30 terms sorted by `sort sums` next to 10 index expressions", tmp / "sort.vztrace",
                  args.steps, args.pace, args.full_steps, args.repeat)
    if "symbolic" in only:
      symbolic_trace(tmp / "symbolic.vztrace", args.exprs)
      bench_steps(f"a SINK of {args.exprs} index expressions simplified by `symbolic`", tmp / "symbolic.vztrace",
                  args.steps, args.pace, args.full_steps, args.repeat)
    if "workloads" in only and workloads_trace(tmp / "workloads.vztrace", args.scale):
      bench_steps(f"the workloads (scale {args.scale})", tmp / "workloads.vztrace", args.steps, args.pace,
                  args.full_steps, args.repeat)
    if "live" in only and socketio is None:
      print("(live latency skipped: python-socketio[client] is not installed; pip install -e .[dev])")
    elif "live" in only:
      busy = tmp / "busy.vztrace"
      sort_trace(busy)
      bench_live(args.flushes, args.flush_interval, busy, "`sort sums`")


if __name__ == "__main__":
  main()
