"""Hostile-trace crawl (issue 14): every crafted trace of tests/hostile_traces.py served by one viewer app, and every
endpoint of every trace asked (the trace list, contexts, kernels, runs, timeline, each rewrite with its first and last
step's graph and a delta, each kernel context, a node and its origin, a diff, and the file uploaded again). Prints a
table per trace: file size, requests, the slowest request (wall and CPU), the largest answer, the statuses, and the
process's RSS after it; then the peak RSS and how many requests took longer than --bound seconds. Then `compare` on
trace pairs that once made it quadratic (issue 31): its time and counted steps at two sizes. In-process (Flask's test
client): no socket, so the figures are the server's own work. Run from the repo root."""
from __future__ import annotations

import argparse
import io
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import hostile_traces as H  # noqa: E402

from bench.table import format_table  # noqa: E402
from viz_server import compare  # noqa: E402
from viz_server.app import create_app  # noqa: E402
from viz_server.store import TraceStore  # noqa: E402


def highlight_texts(path: Path, size: int = 256 << 10) -> Path:
  """A kernel whose LLVM IR and assembly, and a rule whose source, are texts Pygments took quadratic time on (issue
  31: 29 s at 32 KiB), each `size` characters (what the API highlights at most)."""
  text = {k: (u * size)[:size] for k, u in (("llvm_ir", "-x"), ("asm", "$/*"), ("python", " \n"))}
  return H.write(path, [[H.meta(), {"t": "ctx_begin", "id": 0, "parent": None, "name": "r_4", "kind": "kernel",
                                    "ts": 1.7e9},
                         *({"t": "source", "ctx": 0, "kind": k, "text": text[k], "compile_s": 0.1}
                           for k in ("llvm_ir", "asm")), {**H.PATTERN, "src": text["python"]}, H.END]])


def same_key_contexts(path: Path, n: int, arg: str) -> Path:
  """n contexts of one kind and name, each with a rewrite of CONST arg (difflib's worst case: every key equal)."""
  recs: list[Any] = [H.meta(), H.ctx(0)]
  for i in range(n):
    recs += [H.ctx(i + 1, "schedule", 0, "schedule"), H.node(2 * i, arg=arg), H.node(2 * i + 1, "NEG", [2 * i]),
             H.rw_begin(i, 2 * i + 1, i + 1), H.rw_end(i, 2 * i + 1, 0), {"t": "ctx_end", "id": i + 1, "ts": 1.7e9}]
  return H.write(path, [[*recs, H.END]])


def compare_rows(d: Path, sizes: list[int]) -> list[tuple]:
  """`compare` of two same-key traces of n contexts (every rewrite differs): file sizes, wall ms, counted steps."""
  rows = []
  for n in sizes:
    a, b = same_key_contexts(d / f"cmp_a{n}.vztrace", n, "1"), same_key_contexts(d / f"cmp_b{n}.vztrace", n, "2")
    store = TraceStore()
    try:
      (ta,), (tb,) = store.add_path(a), store.add_path(b)
      work = compare.Work()
      _, wall, cpu = timed(lambda ta=ta, tb=tb, work=work: compare.compare(ta, tb, work=work))
    finally:
      store.stop()
    rows.append(("same_key", n, (a.stat().st_size + b.stat().st_size) / 1024, wall * 1e3, cpu * 1e3, work.steps))
  return rows

# (name, generator) at the sizes of the issue; --quick uses smaller ones
FULL: list[tuple[str, Callable[[Path], Path]]] = [
  ("small", H.small), ("big_int_node", lambda p: H.big_int(p, "node")), ("big_int_dt", lambda p: H.big_int(p, "dt")),
  ("big_int_ts", lambda p: H.big_int(p, "ts")), ("deep", H.deep), ("header_only", H.header_only),
  ("killed", H.killed), ("junk", H.junk_after_header), ("many_matches", lambda p: H.many_matches(p, 300_000)),
  ("chain", lambda p: H.chain(p, 100_000)), ("tiny_records", lambda p: H.tiny_records(p, 1 << 20, 3)),
  ("big_kernel", lambda p: H.big_kernel(p, 40, 4 << 20)), ("long_strings", lambda p: H.long_strings(p, 2 << 20)),
  ("highlight", highlight_texts),
]
QUICK_SIZES = {"many_matches": lambda p: H.many_matches(p, 30_000), "chain": lambda p: H.chain(p, 30_000),
               "tiny_records": lambda p: H.tiny_records(p, 1 << 17, 2),
               "big_kernel": lambda p: H.big_kernel(p, 8, 1 << 20),
               "long_strings": lambda p: H.long_strings(p, 1 << 20),
               "highlight": lambda p: highlight_texts(p, 32 << 10)}


def rss_mb() -> float:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * resource.getpagesize() / 2 ** 20


def urls(c: Any, t: int) -> list[str]:
  """Every endpoint of trace t, built from what its own answers list."""
  base = f"/api/traces/{t}"
  out = [f"{base}/contexts", f"{base}/kernels", f"{base}/runs", f"{base}/timeline", f"{base}/nodes/0",
         f"{base}/nodes/0/origin?before=1000000", f"{base}/patterns/0"]
  ctxs = c.get(f"{base}/contexts").get_json() or []
  for ctx in ctxs if isinstance(ctxs, list) else []:
    out.append(f"{base}/contexts/{ctx['id']}/kernel")
    out.append(f"/api/diff?a={t}:{ctx['id']}&b={t}:{ctx['id']}")
    for rw in ctx["rewrites"]:
      r = f"{base}/rewrites/{rw['id']}"
      out += [r, f"{r}/graph?step=0", f"{r}/graph?step=end", f"{r}/delta?from=0&to=end&compact=1",
              f"{r}/delta?from=0&to=1", f"/api/diff?a={t}:{rw['id']}:0&b={t}:{rw['id']}:end&draw=1"]
  return out


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
  w, c = time.perf_counter(), time.thread_time()
  got = fn()
  return got, time.perf_counter() - w, time.thread_time() - c


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--quick", action="store_true", help="smaller traces (seconds instead of minutes)")
  ap.add_argument("--bound", type=float, default=5.0, help="seconds a request may take (default 5)")
  args = ap.parse_args()
  gens = [(n, QUICK_SIZES.get(n, g) if args.quick else g) for n, g in FULL]
  d = Path(tempfile.mkdtemp(prefix="tinyviz-crawl-"))
  paths = {n: g(d / f"{n}.vztrace") for n, g in gens}
  app, t0 = timed(lambda: create_app(list(paths.values()), follow=False))[:2]
  c = app.test_client()
  entries = {e["name"]: e for e in c.get("/api/traces").get_json()}
  rows, slow = [], []
  for name, path in paths.items():
    e = entries.get(path.name)
    reqs = [] if e is None else urls(c, e["id"])
    stats: Counter[int] = Counter()
    worst = (0.0, 0.0, "")
    biggest = 0
    for u in reqs + ["/api/traces"]:
      res, wall, cpu = timed(lambda u=u: c.get(u))
      stats[res.status_code] += 1
      biggest = max(biggest, len(res.data))
      worst = max(worst, (wall, cpu, u.split("?")[0].rsplit("/", 1)[-1]))
      if wall > args.bound:
        slow.append((name, u, wall))
    up, wall, cpu = timed(lambda p=path: c.post("/api/traces", data={"file": (io.BytesIO(p.read_bytes()), p.name)},
                                                content_type="multipart/form-data"))
    stats[up.status_code] += 1
    worst = max(worst, (wall, cpu, "upload"))
    if wall > args.bound:
      slow.append((name, "upload", wall))
    rows.append((name, path.stat().st_size, len(reqs) + 2, worst[0] * 1e3, worst[1] * 1e3, worst[2], biggest / 1024,
                 " ".join(f"{k}x{v}" for k, v in sorted(stats.items())), rss_mb()))
  print(f"crawl of {len(paths)} hostile traces ({'quick' if args.quick else 'full'} sizes); app start "
        f"{t0:.2f} s (indexing all)")
  print(format_table([("trace", "<13"), ("file B", ">9"), ("reqs", ">5"), ("max ms", ">8.0f"), ("cpu ms", ">8.0f"),
                      ("slowest", "<9"), ("max KB", ">8.0f"), ("statuses", "<22"), ("RSS MB", ">7.0f")], rows))
  print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; requests over "
        f"{args.bound:g} s: {len(slow)}" + "".join(f"\n  {n} {u} {w:.1f} s" for n, u, w in slow))
  print("compare of trace pairs (steps: compare.Work, linear in contexts)")
  print(format_table([("pair", "<9"), ("contexts", ">9"), ("files KB", ">9.0f"), ("ms", ">8.0f"), ("cpu ms", ">8.0f"),
                      ("steps", ">9")], compare_rows(d, [2000, 4000] if args.quick else [20_000, 40_000])))


if __name__ == "__main__":
  main()
