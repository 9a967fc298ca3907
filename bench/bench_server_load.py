"""A bounded loopback load on the viewer (issue 14): `python -m viz_server DIR` in its own process serving the
`sort sums` trace of bench_server.py (~1000 steps on ~500 nodes), and N clients (threads, each its own connection per
request, 127.0.0.1 only) asking graph / compact delta / diff of random steps of its largest rewrite for S seconds,
R rounds in a row. Per round: requests, req/s, latency p50/p95/p99/max, errors, the viewer's RSS before and after
and their ratio, and the machine's load average over the last minute at the round's end (other processes share the
CPUs: figures taken under load are not comparable with quiet ones). The issue's figures: 27.5 req/s, p95 368 ms,
p99 2.7 s, RSS 65 -> 191 MB; the goal: p99 under 250 ms and flat RSS. Each client stops at the deadline or after
--max-requests. --quick: 2 s rounds. Run from the repo root."""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_server import _start_viewer, pct, sort_trace  # noqa: E402
from bench.table import format_table  # noqa: E402


def rss_mb(pid: int) -> float:
  with open(f"/proc/{pid}/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024
  return float("nan")


def client(url: str, t: int, r: int, steps: int, seed: int, deadline: float, max_requests: int,
           out: list[tuple[float, bool, str]]) -> None:
  rng = random.Random(seed)
  kinds = ("graph", "delta", "diff")
  for i in range(max_requests):
    if time.monotonic() >= deadline:
      return
    k = rng.randrange(steps)
    kind = kinds[i % 3]
    if kind == "graph":
      path = f"/api/traces/{t}/rewrites/{r}/graph?step={k}"
    elif kind == "delta":
      path = f"/api/traces/{t}/rewrites/{r}/delta?from={k}&to={k + 1}&compact=1"
    else:
      path = f"/api/diff?a={t}:{r}:{k}&b={t}:{r}:{k + 1}"
    start = time.perf_counter()
    try:
      with urllib.request.urlopen(url + path, timeout=60) as resp:
        resp.read()
        ok = resp.status == 200
    except (urllib.error.URLError, OSError):
      ok = False
    out.append((time.perf_counter() - start, ok, kind))


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--clients", type=int, default=4)
  ap.add_argument("--seconds", type=float, default=60.0, help="per round (default 60)")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--max-requests", type=int, default=100_000, help="per client and round")
  ap.add_argument("--quick", action="store_true", help="2 s rounds")
  args = ap.parse_args()
  seconds = 2.0 if args.quick else args.seconds
  d = Path(tempfile.mkdtemp(prefix="tinyviz-load-"))
  sort_trace(d / "sort.vztrace")
  proc, url = _start_viewer(d)
  try:
    deadline = time.monotonic() + 60
    while True:
      traces = json.loads(urllib.request.urlopen(url + "/api/traces", timeout=10).read())
      if traces and traces[0]["status"] != "live" or time.monotonic() > deadline:
        break
      time.sleep(0.1)
    t = traces[0]["id"]
    ctxs = json.loads(urllib.request.urlopen(f"{url}/api/traces/{t}/contexts", timeout=10).read())
    rw = max((x for c in ctxs for x in c["rewrites"]), key=lambda x: x["matches"])
    rows: list[tuple] = []
    every: list[tuple[float, bool, str]] = []
    for rnd in range(1, args.rounds + 1):
      before = rss_mb(proc.pid)
      results: list[tuple[float, bool, str]] = []
      end = time.monotonic() + seconds
      threads = [threading.Thread(target=client, args=(url, t, rw["id"], rw["matches"], rnd * 100 + i, end,
                                                       args.max_requests, results)) for i in range(args.clients)]
      start = time.perf_counter()
      for th in threads:
        th.start()
      for th in threads:
        th.join()
      took = time.perf_counter() - start
      lat = [x for x, _, _ in results] or [float("nan")]
      after = rss_mb(proc.pid)
      rows.append((rnd, len(results), len(results) / took, pct(lat, 0.5) * 1e3, pct(lat, 0.95) * 1e3,
                   pct(lat, 0.99) * 1e3, max(lat) * 1e3, sum(not ok for _, ok, _ in results), before, after,
                   after / before, os.getloadavg()[0]))
      every += results
  finally:
    proc.terminate()
    proc.wait(timeout=30)
  print(f"{args.clients} clients x {seconds:g} s x {args.rounds} rounds on 127.0.0.1: graph / delta / diff of random "
        f"steps of '{rw['name']}' ({rw['matches']} steps); {os.cpu_count()} CPUs")
  print(format_table([("round", ">5"), ("reqs", ">6"), ("req/s", ">7.1f"), ("p50 ms", ">7.1f"), ("p95 ms", ">7.1f"),
                      ("p99 ms", ">7.1f"), ("max ms", ">7.0f"), ("errors", ">6"), ("RSS before MB", ">13.0f"),
                      ("RSS after MB", ">12.0f"), ("after/before", ">12.2f"), ("load 1 min", ">10.2f")], rows))
  kinds = []
  for kind in ("graph", "delta", "diff"):
    lat = [x for x, _, k in every if k == kind] or [float("nan")]
    kinds.append((kind, len(lat), pct(lat, 0.5) * 1e3, pct(lat, 0.95) * 1e3, pct(lat, 0.99) * 1e3))
  print(format_table([("all rounds", "<10"), ("reqs", ">6"), ("p50 ms", ">7.1f"), ("p95 ms", ">7.1f"),
                      ("p99 ms", ">7.1f")], kinds))


if __name__ == "__main__":
  main()
