"""Hostile-trace crawl (issue 14): every crafted trace of tests/support/hostile_traces.py served by one viewer app, and
every endpoint of every trace asked (the trace list, contexts, kernels, runs, timeline, each rewrite with its first
and last step's graph and a delta, each kernel context, a node and its origin, a diff, and the file uploaded again).
Prints a table per trace: file size, requests, the slowest request (wall and CPU), the largest answer, the statuses,
and the process's RSS after it; then the peak RSS and how many requests took longer than --bound seconds. Then
`compare` on trace pairs that once made it quadratic (issue 31): its time and counted steps at two sizes. In-process
(Flask's test client): no socket, so the figures are the server's own work. Run from the repo root.

First, one row per finding of issue 31 ("surfaces"): each runs in a forked process of its own (so its peak memory is
its own: wait4's maxrss less its RSS at the start) under --limit seconds, and the terminal tools' rows count the
control characters their output let through raw. `PYTHONPATH=OTHER_TREE python bench/bench_hostile_crawl.py` runs
this file against another checkout's code (its generators stay this tree's tests/support/hostile_traces.py)."""
from __future__ import annotations

import argparse
import io
import json
import os
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
# after the script's folder and PYTHONPATH's: another tree can be measured
sys.path.insert(1 + len([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]), str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support import hostile_traces as H  # noqa: E402

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
      work = compare.Work() if hasattr(compare, "Work") else None  # (not counted before issue 31)
      kw = {"work": work} if work is not None else {}
      _, wall, cpu = timed(lambda ta=ta, tb=tb, kw=kw: compare.compare(ta, tb, **kw))
    finally:
      store.stop()
    rows.append(("same_key", n, (a.stat().st_size + b.stat().st_size) / 1024, wall * 1e3, cpu * 1e3,
                 work.steps if work is not None else -1))
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


# ---- one row per finding of issue 31, each in a process of its own

# what a terminal must not get raw (vztrace.term's escaping): ESC, BEL, C1, CR, NUL, bidi marks, line separators
_RAW = set("\x1b\x07\x9b\x9d\r\x00\u061c\u2028\u2029") | {chr(c) for c in range(0x202a, 0x202f)} | \
  {chr(c) for c in range(0x2066, 0x206a)}


def cli(argv: list[str]) -> str:
  """`python -m compiler.trace ARGV` in this process, its output to a file: bytes written and raw control chars."""
  from compiler.trace.cli import main as trace_main
  out = tempfile.TemporaryFile("w+", encoding="utf-8", errors="surrogateescape")
  sys.stdout.flush()
  real = os.dup(1)
  os.dup2(out.fileno(), 1)  # (the fd: the tools' own children write to it too)
  try:
    rc = trace_main(argv)
  finally:
    sys.stdout.flush()
    os.dup2(real, 1)
  out.seek(0)
  n = raw = 0
  for chunk in iter(lambda: out.read(1 << 20), ""):
    n += len(chunk)
    raw += sum(chunk.count(c) for c in _RAW)
  return f"rc {rc}, {n / 1024:.0f} KB out, raw ctl {raw}"


def app_gets(paths: list[Path], urls: Callable[[int], list[str]], headers: dict | None = None,
             threads: int = 1) -> str:
  """A viewer app on paths asked urls(first trace's id) (in `threads` threads at once): statuses, answer bytes."""
  import threading
  app = create_app(paths, follow=False)
  t = app.test_client().get("/api/traces").get_json()[0]["id"]
  got: Counter[int] = Counter()
  size = [0]

  def ask(us: list[str]) -> None:
    for u in us:
      r = app.test_client().get(u, headers=headers or {})
      got[r.status_code] += 1
      size[0] += len(r.data)
  us = urls(t)
  ts = [threading.Thread(target=ask, args=(us,)) for _ in range(threads)]
  for th in ts:
    th.start()
  for th in ts:
    th.join()
  return " ".join(f"{k}x{v}" for k, v in sorted(got.items())) + f", {size[0] / 1024:.0f} KB"


def export_file(path: Path) -> str:
  from viz_server.export.command import export
  got = export(path, path.with_suffix(".html"))
  return f"{got['bytes'] / 1024:.0f} KB page"


def load_safetensors(path: Path) -> str:
  from compiler.nn.state import safe_load
  try:
    safe_load(path)
  except ValueError as e:
    return "refused: " + str(e).replace(str(path), "FILE")[:50]
  return "loaded"


def surfaces(d: Path, quick: bool) -> list[tuple[str, Callable[[], str]]]:
  """(name, work) per finding of issue 31, on traces made here (at the issue's sizes, or smaller with quick)."""
  def q(small: int, full: int) -> int:
    return small if quick else full
  hl = highlight_texts(d / "s_highlight.vztrace", q(32 << 10, 256 << 10))
  lure, lure2 = H.lures(d / "s_lure.vztrace"), H.lures(d / "s_lure2.vztrace", H.LURE + "2")
  n, chain = q(2000, 20_000), q(20_000, 40_000)
  cmp_a, cmp_b = same_key_contexts(d / "s_cmp_a.vztrace", n, "1"), same_key_contexts(d / "s_cmp_b.vztrace", n, "2")
  frame = H.big_frame(d / "s_frame.vztrace", q(1_000_000, 3_000_000))
  lists = H.long_lists(d / "s_lists.vztrace", "shape", q(1 << 18, 1 << 20))
  times = H.long_lists(d / "s_times.vztrace", "times", q(1 << 18, 1 << 20))
  views = H.many_rewrites(d / "s_views.vztrace", 24, q(20_000, 60_000))
  origin = H.chain_rewrites(d / "s_origin.vztrace", chain, 70)
  steps = H.chain_rewrites(d / "s_steps.vztrace", q(3000, 5000), 1, q(60, 200))
  st = H.safetensors_header(d / "s_header.safetensors", q(20 << 20, 100 << 20))
  small = H.small(d / "s_small.vztrace")

  def kernel(t: int) -> list[str]:
    return [f"/api/traces/{t}/contexts/1/kernel", f"/api/traces/{t + 1}/contexts/1/kernel"]
  return [
    ("highlight /kernel+/patterns", lambda: app_gets([hl], lambda t: [f"/api/traces/{t}/contexts/0/kernel",
                                                                     f"/api/traces/{t}/patterns/0"])),
    ("info escaping", lambda: cli(["info", str(lure)])),
    ("show escaping", lambda: cli(["show", str(lure)])),
    ("compare escaping", lambda: cli(["compare", str(lure), str(lure2)])),
    (f"compare {n} same-key ctxs", lambda: cli(["compare", str(cmp_a), str(cmp_b)])),
    ("info big frame", lambda: cli(["info", str(frame)])),
    ("viewer big frame", lambda: app_gets([frame], lambda t: [f"/api/traces/{t}/contexts"])),
    ("viewer list fields", lambda: app_gets([lists, times], kernel)),
    ("export list fields", lambda: export_file(lists)),
    ("views cache, 24 rewrites", lambda: app_gets([views], lambda t: [f"/api/traces/{t}/rewrites/{r}/graph?step=end"
                                                                      for r in range(24)])),
    ("export children x6 x-site", lambda: app_gets([small], lambda t: [f"/api/traces/{t}/export?redact="], threads=6,
                                                   headers={"Origin": "http://evil.example",
                                                            "Sec-Fetch-Site": "cross-site"})),
    ("/origin", lambda: app_gets([origin], lambda t: [f"/api/traces/{t}/nodes/{chain // 2}/origin?before=70"])),
    ("show --rewrite", lambda: cli(["show", str(steps), "--rewrite", "0"])),
    ("safe_load header", lambda: load_safetensors(st)),
  ]


def in_child(work: Callable[[], str], limit: float) -> tuple[float, float, float, str]:
  """work() in a forked process under limit seconds: (wall s, CPU s, peak MB above the child's RSS as it began, its
  note)."""
  r, w = os.pipe()
  t0 = time.perf_counter()
  pid = os.fork()
  if pid == 0:  # the child: its own row, then out without the parent's cleanups
    os.close(r)
    signal.alarm(max(1, int(limit)))
    os.write(w, json.dumps({"start": rss_mb()}).encode() + b"\n")
    try:
      note = work()
    except BaseException as e:  # noqa: BLE001 (a row says how the surface failed)
      note = f"{type(e).__name__}: {str(e)[:60]}"
    os.write(w, json.dumps({"note": note}).encode())
    os._exit(0)
  os.close(w)
  with os.fdopen(r, "rb") as f:
    text = f.read()
  _, status, usage = os.wait4(pid, 0)
  wall = time.perf_counter() - t0
  lines = text.split(b"\n", 1)
  start = json.loads(lines[0])["start"] if lines[0] else 0.0
  note = json.loads(lines[1])["note"] if len(lines) > 1 and lines[1] else \
    f"killed ({limit:g} s limit)" if os.WIFSIGNALED(status) else "?"
  # (wait4's usage: the child's and its reaped children's, so a tool's own subprocesses count)
  return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024 - start, note


def surface_table(d: Path, quick: bool, limit: float) -> None:
  rows = []
  for name, work in surfaces(d, quick):
    wall, cpu, peak, note = in_child(work, limit)
    rows.append((name, wall, cpu, peak, note))
    print(f"  {name}: {wall:.2f} s", file=sys.stderr, flush=True)
  print(f"issue 31's findings, one process each ({'quick' if quick else 'full'} sizes, limit {limit:g} s; peak: "
        "max RSS above the child's at its start)")
  print(format_table([("surface", "<28"), ("wall s", ">8.2f"), ("cpu s", ">8.2f"), ("peak MB", ">8.0f"),
                      ("note", "<60")], rows))


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
  ap.add_argument("--limit", type=float, default=300, help="seconds a surface of issue 31 may take (default 300)")
  ap.add_argument("--surfaces-only", action="store_true", help="only issue 31's table (no crawl, no compare pairs)")
  args = ap.parse_args()
  gens = [(n, QUICK_SIZES.get(n, g) if args.quick else g) for n, g in FULL]
  d = Path(tempfile.mkdtemp(prefix="tinyviz-crawl-"))
  surface_table(d, args.quick, args.limit)  # (first: forked before the crawl's app starts any thread)
  if args.surfaces_only:
    return
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
