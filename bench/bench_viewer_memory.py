"""The viewer's memory on a real program's trace (issue 30: "the viewer process grows from 84 MB to 1.0-1.56 GB";
target under 300 MB), in process, through the Flask app's routes as the page asks them:
- open each of the trace's `--big` rewrites with the most steps (`/graph?step=0&compact=1`), step through its first
  `--steps` steps (`/delta?compact=2`, each followed by the views' prefetch as a request's is), jump to its last step
  and to three random ones (`/delta` from where it was), the prefetch worker idle after each rewrite;
- then open every rewrite of the trace at step 0 (bench_ui.py's "after opening all rewrites").
Prints the process's RSS (and its peak) after each phase, the median and max server ms of steps and jumps, the bytes
the caches count (caches.LAYOUTS, caches.ANSWERS, views.Views.held_bytes) and, with --tracemalloc, the Python
allocations alive at the end by module (slower: times then mean nothing).

--server asks a `python -m viz_server` process instead (bench_ui.py's memory rows, without a browser).

  PYTHONPATH=. python bench/bench_viewer_memory.py TRACE [--big 4] [--steps 60] [--tracemalloc | --server]
"""
from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_ui import rss_mb as server_rss_mb  # noqa: E402
from bench.bench_ui import start_server, stop_server  # noqa: E402
from viz_server import caches  # noqa: E402
from viz_server.app import create_app  # noqa: E402


def rss_mb() -> tuple[float, float]:
  """(resident, peak resident) MB of this process."""
  got = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
  return int(got["VmRSS"].split()[0]) / 1024, int(got["VmHWM"].split()[0]) / 1024


def report(label: str, views, pid: int | None = None) -> None:
  """RSS now and at peak; in process (pid None) also what the views and caches count."""
  if pid is not None:
    now, peak = server_rss_mb(pid)
    print(f"{label:<44} RSS {now:7.1f} MB (peak {peak:7.1f}) (the server's)", flush=True)
    return
  gc.collect()
  now, peak = rss_mb()
  lay = sum(caches.LAYOUTS.used) * getattr(caches, "LAYOUT_BYTES", 270) / 2**20  # (270: before there was one)
  print(f"{label:<44} RSS {now:7.1f} MB (peak {peak:7.1f}); layouts ~{lay:5.1f} MB, answers "
        f"{caches.ANSWERS.used / 2**20:5.1f} MB, views {views.held_bytes() / 2**20:6.1f} MB ({len(views)})", flush=True)


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("trace", type=Path)
  ap.add_argument("--big", type=int, default=4, help="rewrites with the most steps to step through")
  ap.add_argument("--steps", type=int, default=60)
  ap.add_argument("--all", type=int, default=None, help="open only this many rewrites (most steps first) at the end")
  ap.add_argument("--tracemalloc", action="store_true")
  ap.add_argument("--server", action="store_true", help="ask a `python -m viz_server` process instead (its threads, "
                  "as bench_ui.py's memory rows; no cache counts, no waiting for its prefetch)")
  args = ap.parse_args()
  if args.tracemalloc:
    tracemalloc.start(1)
  if args.server:
    proc, url = start_server(args.trace, Path(tempfile.mkdtemp()) / "server.log")
    views, pid = None, proc.pid

    def get(path: str) -> tuple[int, object]:
      with urllib.request.urlopen(url + path, timeout=600) as r:
        return r.status, json.loads(r.read())
  else:
    app = create_app([args.trace], follow=False, allowed_hosts=None)
    client, views, pid = app.test_client(), app.extensions["tinyviz"]["views"], None

    def get(path: str) -> tuple[int, object]:
      got = client.get(path)
      return got.status_code, got.get_json()
  try:
    walk(args, get, views, pid)
  finally:
    if args.server:
      stop_server(proc)


def walk(args: argparse.Namespace, get: Callable[[str], tuple[int, object]], views, pid: int | None) -> None:
  """The phases: the biggest rewrites stepped through and jumped in, then every rewrite opened."""
  tid = get("/api/traces")[1][0]["id"]  # type: ignore[index]
  ctxs = get(f"/api/traces/{tid}/contexts")[1]
  rws = sorted(((r["matches"], r["id"]) for c in ctxs for r in c["rewrites"]), reverse=True)  # type: ignore[union-attr]
  report(f"trace open ({len(rws)} rewrites)", views, pid)
  base = f"/api/traces/{tid}/rewrites"
  idle = views.wait_idle if views is not None else (lambda: None)

  def ask(url: str) -> float:
    t = time.perf_counter()
    status = get(url)[0]
    assert status == 200, (url, status)
    return (time.perf_counter() - t) * 1e3

  rng = random.Random(0)
  for n, r in rws[:args.big]:
    opened = ask(f"{base}/{r}/graph?step=0&compact=1")
    steps = [ask(f"{base}/{r}/delta?from={k - 1}&to={k}&compact=2") for k in range(1, min(n, args.steps) + 1)]
    cur, jumps = min(n, args.steps), []
    for k in [n, *(rng.randrange(n) for _ in range(3))]:
      jumps.append(ask(f"{base}/{r}/delta?from={cur}&to={k}&compact=2"))
      cur = k
    idle()
    print(f"rewrite {r} ({n} steps): open {opened:.0f} ms; steps median {statistics.median(steps or [0]):.0f} max "
          f"{max(steps or [0]):.0f} ms; jumps {' '.join(f'{j:.0f}' for j in jumps)} ms")
    report(f"  after rewrite {r}", views, pid)
  t = time.perf_counter()
  for _, r in rws[:args.all]:
    ask(f"{base}/{r}/graph?step=0&compact=1")
  idle()
  print(f"{len(rws[:args.all])} rewrites opened in {time.perf_counter() - t:.1f} s")
  report("after opening every rewrite", views, pid)
  if args.tracemalloc and pid is None:
    per: dict[str, int] = {}
    for st in tracemalloc.take_snapshot().statistics("filename"):
      per[st.traceback[0].filename.split("/")[-1]] = per.get(st.traceback[0].filename.split("/")[-1], 0) + st.size
    for name, size in sorted(per.items(), key=lambda x: -x[1])[:12]:
      print(f"  {name:<28} {size / 2**20:7.1f} MB")

if __name__ == "__main__":
  main()
