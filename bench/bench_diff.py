"""The drawn graph diff (`GET /api/diff?a=..&b=..&draw=1`, viz_server.diff): time to answer for two pairs of steps
of one long rewrite (bench_server's `sort sums` traces: sums bubble-sorted next to index expressions), at three graph
sizes. Pairs: the first vs the last step (so many A-only nodes that the union gets a full layout) and the earliest
step whose A-only nodes are few enough to be placed into the main view's layout of the last step (place.MASSIVE's
rule) vs the last. Per pair: the nodes drawn (B's graph plus A's extra nodes) and how many are A-only; the diff
without drawing; the drawn diff cold (a fresh server: no layout of step B exists yet), warm (the main view already
showed step B, as when the diff panel's "this step" is used) and again (the same pair once more: the drawn-diff
cache). Medians of --repeat runs, each in a fresh app. Prints a table; run from the repo root.

    python bench/bench_diff.py                  # ~500, ~1,750 and ~3,000 nodes
    python bench/bench_diff.py --sizes 4x30x10 --repeat 5
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_server import sort_trace  # noqa: E402
from bench.table import format_table  # noqa: E402
from viz_server import diff as vdiff  # noqa: E402
from viz_server.app import create_app  # noqa: E402
from viz_server.place import MASSIVE  # noqa: E402


def _clear_cache() -> None:
  cache = getattr(vdiff, "DRAWN", None)  # absent before the drawn-diff cache existed (the "before" figures)
  if cache is not None:
    cache.clear()


def _timed(client: Any, url: str) -> tuple[float, dict]:
  t = time.perf_counter()
  r = client.get(url)
  dt = time.perf_counter() - t
  assert r.status_code == 200, (url, r.status_code, r.data[:300])
  return dt, r.get_json()


def _largest(client: Any) -> dict:
  ctxs = client.get("/api/traces/0/contexts").get_json()
  return max((rw for c in ctxs for rw in c["rewrites"]), key=lambda rw: rw["matches"])


def _app(path: Path) -> Any:
  _clear_cache()
  app = create_app([path], follow=False)
  app.extensions["tinyviz"]["views"].prefetch_steps = 0  # no background layouts competing with the timing
  return app.test_client()


def near_step(path: Path) -> int:
  """The earliest step whose diff against the last step takes the placing path (bisection on the A-only count)."""
  client = _app(path)
  rw = _largest(client)
  m = rw["matches"]
  b_nodes = len(client.get(f"/api/traces/0/rewrites/{rw['id']}/graph?step={m}").get_json()["nodes"])
  lo, hi = 0, m
  while lo < hi:
    k = (lo + hi) // 2
    g = client.get(f"/api/diff?a=0:{rw['id']}:{k}&b=0:{rw['id']}:{m}").get_json()["graph"]
    if len(g["only_a"]) <= max(MASSIVE, b_nodes // 4):
      hi = k
    else:
      lo = k + 1
  return lo


def bench_one(path: Path, a_step: int, repeat: int) -> dict:
  cold, warm, again, plain = [], [], [], []
  info: dict = {}
  for _ in range(repeat):
    for mode in ("cold", "warm"):
      client = _app(path)
      rw = _largest(client)
      a, b = f"0:{rw['id']}:{a_step}", f"0:{rw['id']}:{rw['matches']}"
      url = f"/api/diff?a={a}&b={b}"
      if mode == "warm":
        client.get(f"/api/traces/0/rewrites/{rw['id']}/graph?step={rw['matches']}")
        plain.append(_timed(client, url)[0])
      dt, got = _timed(client, url + "&draw=1")
      (cold if mode == "cold" else warm).append(dt)
      if mode == "warm":
        again.append(_timed(client, url + "&draw=1")[0])
      g = got["graph"]
      drawn = g["drawn"] or {"nodes": []}
      info = {"a": a_step, "b": rw["matches"], "nodes": len(drawn["nodes"]), "only_a": len(g["only_a"]),
              "only_b": len(g["only_b"]), "both": g["both"]}
  med = statistics.median
  return {**info, "plain": med(plain), "cold": med(cold), "warm": med(warm), "again": med(again)}


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", default="4x30x10,8x60x20,12x80x30",
                  help="sort traces as SUMSxTERMSxFILLER (bench_server.sort_trace), comma-separated")
  ap.add_argument("--repeat", type=int, default=3, help="runs per figure (the table shows medians)")
  ap.add_argument("--quick", action="store_true", help="the two smaller sizes, one run each")
  args = ap.parse_args()
  if args.quick:
    args.sizes, args.repeat = ",".join(args.sizes.split(",")[:2]), 1
  rows = []
  with tempfile.TemporaryDirectory() as d:
    for spec in args.sizes.split(","):
      sums, terms, filler = (int(x) for x in spec.split("x"))
      path = Path(d) / f"sort{spec}.vztrace"
      sort_trace(path, sums, terms, filler)
      rows.append(bench_one(path, 0, args.repeat))
      rows.append(bench_one(path, near_step(path), args.repeat))
  print("drawn diff of step A vs step B of `sort sums` (ms, median); cold: fresh server, warm: the main view showed "
        "step B first, again: the same pair once more")
  cols = [("A", ">6d"), ("B", ">6d"), ("nodes", ">6d"), ("only A", ">6d"), ("only B", ">6d"), ("no draw", ">8.1f"),
          ("cold", ">8.1f"), ("warm", ">8.1f"), ("again", ">8.1f")]
  print(format_table(cols, [(r["a"], r["b"], r["nodes"], r["only_a"], r["only_b"], *(r[k] * 1e3 for k in
                                                                                    ("plain", "cold", "warm", "again")))
                            for r in rows]))


if __name__ == "__main__":
  main()
