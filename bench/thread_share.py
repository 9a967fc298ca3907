"""How much of a real program's step runs split across threads (issue 29: 2 threads >= 1.7x one thread).

For each program of bench/real_models.py (TinyJit, THREADS as set, default 2) it counts, over --steps steps after
warm-up, every kernel run: its time, and into how many chunks it was split. The table's `par %` is the share of the
step's kernel time spent in split runs: a count, not a clock ratio, so it holds on a loaded machine. The rows are the
top kernels by time with why a one-chunk kernel ran on one thread:
- `no loop`: the kernel has no parallel loop (a reduce to one element, or no loop every store depends on);
- `extent 1`: its parallel loop has one iteration;
- `small`: under MIN_WORK_PER_THREAD of work per chunk;
- `measured`: its runs measured too short, or its split runs slower by the clock (CompiledKernel._serial).
--wall also times the step at 1 and 2 threads in two child processes, interleaved step by step (A B A B).

  PYTHONPATH=. .venv/bin/python bench/thread_share.py [--only resnet,mnist] [--steps 5] [--top 12] [--wall 9]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import real_models as rm  # noqa: E402
from bench.table import format_table  # noqa: E402

WARMUP = 3


def _why(ck, nchunks: int, work: int) -> str:
  """Why a kernel's runs were (mostly) in `nchunks` chunks: `split`, or the reason it ran on one thread."""
  from compiler.runtime.compiled import MIN_WORK_PER_THREAD
  if nchunks > 1:
    return "split"
  n = ck.program.par_extent(None) if not ck.program.vars else None
  if ck.program.par_size is None:
    return "no loop"
  if n is not None and n <= 1:
    return "extent 1"
  return "small" if work < 2 * MIN_WORK_PER_THREAD else "measured"


def share(prog: str, size: rm.Size, steps: int) -> tuple[list, float, int]:
  """Per kernel (name, ms a step, chunks, why) sorted by time, the split share of kernel time, and kernels a step."""
  from compiler.runtime import compiled
  runs: list[tuple] = []
  work: dict = {}
  orig, orig_chunks = compiled.CompiledKernel._run_plan, compiled.CompiledKernel._chunks

  def chunks(self, var_vals, arrs, threads):
    work[self] = self.program.flops(var_vals) + self._nbytes(arrs)
    return orig_chunks(self, var_vals, arrs, threads)

  def counted(self, plan):
    t0 = time.perf_counter()
    orig(self, plan)
    runs.append((self, time.perf_counter() - t0, len(plan[2])))
  compiled.CompiledKernel._chunks = chunks
  try:
    run = rm.build(prog, rm.tinyviz(), size, jit=True)
    for _ in range(WARMUP):
      run()
    compiled.CompiledKernel._run_plan = counted
    for _ in range(steps):
      run()
  finally:
    compiled.CompiledKernel._run_plan, compiled.CompiledKernel._chunks = orig, orig_chunks
  per: dict = collections.defaultdict(lambda: [0.0, collections.Counter()])
  for ck, dt, n in runs:
    per[ck][0] += dt
    per[ck][1][n] += 1
  total = sum(v[0] for v in per.values())
  split = sum(dt for _, dt, n in runs if n > 1)
  rows = []
  for ck, (t, cnt) in sorted(per.items(), key=lambda kv: -kv[1][0]):
    n = cnt.most_common(1)[0][0]
    ext = ck.program.par_extent(None) if not ck.program.vars else "-"
    rows.append((ck.name, 1e3 * t / steps, n, _why(ck, n, work.get(ck, 1 << 40)), ext, f"{cnt[1]}/{sum(cnt.values())}"))
  return rows, split / total if total else 0.0, len(runs) // steps


def chunk_model(prog: str, size: rm.Size, steps: int, threads: int = 2) -> dict:
  """The step's 2-thread speedup bound from CPU time, which a loaded machine hardly changes: every kernel runs on the
  calling thread chunk by chunk (the chunks a split run would have: `threads` of them where the work allows), each
  chunk timed by time.thread_time. A split kernel takes its longest chunk, a one-chunk kernel all of it, and the glue
  between kernels (Python: launches, the step's graph) what it took: bound = step CPU / (glue + sum of those)."""
  from compiler.runtime import compiled
  orig_chunks = compiled.CompiledKernel._chunks
  work: dict = {}
  per: dict = collections.defaultdict(lambda: [0.0, 0.0, 0])  # kernel -> [cpu, critical path, chunks]

  def chunks(self, var_vals, arrs, threads_):
    work[self] = self.program.flops(var_vals) + self._nbytes(arrs)
    return orig_chunks(self, var_vals, arrs, threads_)

  def chunked(self, plan) -> None:
    fxn, args = plan[0], plan[1]
    n = self.program.par_extent(None) if not self.program.vars else None
    if n is None or self.program.vars:
      parts = list(plan[2])
    else:
      t = min(threads, n, max(1, work.get(self, 0) // compiled.MIN_WORK_PER_THREAD))
      parts = [(n * i // t, n * (i + 1) // t) for i in range(t)]
    times = []
    for c in parts:
      t0 = time.thread_time()
      fxn(*args, *c)
      times.append(time.thread_time() - t0)
    rec = per[self]
    rec[0] += sum(times)
    rec[1] += max(times, default=0.0)
    rec[2] = len(parts)
  compiled.CompiledKernel._chunks = chunks
  orig_run = compiled.CompiledKernel._run_plan
  try:
    run = rm.build(prog, rm.tinyviz(), size, jit=True)
    for _ in range(WARMUP):
      run()
    compiled.CompiledKernel._run_plan = chunked
    t0 = time.thread_time()
    for _ in range(steps):
      run()
    step = (time.thread_time() - t0) / steps
  finally:
    compiled.CompiledKernel._run_plan, compiled.CompiledKernel._chunks = orig_run, orig_chunks
  kcpu = sum(v[0] for v in per.values()) / steps
  crit = sum(v[1] for v in per.values()) / steps
  glue = step - kcpu
  rows = sorted(((ck.name, v[0] / steps, v[1] / steps, v[2]) for ck, v in per.items()), key=lambda r: -r[1])
  return {"step": step, "kernels": kcpu, "glue": glue, "critical": crit, "bound": step / (glue + crit), "rows": rows}


def _child(prog: str, size_name: str) -> None:
  """A child of --wall: one step per line read from stdin, its wall seconds written back."""
  run = rm.build(prog, rm.tinyviz(), rm.SIZES[size_name], jit=True)
  for _ in range(WARMUP):
    run()
  print("ready", flush=True)
  for _ in sys.stdin:
    t0 = time.perf_counter()
    run()
    print(time.perf_counter() - t0, flush=True)


def wall(prog: str, size_name: str, reps: int) -> tuple[float, float]:
  """Median step wall time at 1 and 2 threads, two child processes stepped alternately."""
  kids = []
  for t in (1, 2):
    env = {**os.environ, "THREADS": str(t), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    kids.append(subprocess.Popen([sys.executable, __file__, "--child", prog, "--size", size_name], env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
  for k in kids:
    assert k.stdout.readline().strip() == "ready"
  times: list[list[float]] = [[], []]
  for _ in range(reps):
    for i, k in enumerate(kids):
      k.stdin.write("\n")
      k.stdin.flush()
      times[i].append(float(k.stdout.readline()))
  for k in kids:
    k.stdin.close()
    k.wait()
  return statistics.median(times[0]), statistics.median(times[1])


def _print_model(p: str, m: dict, top: int) -> None:
  print(f"\n{p}: step CPU {1e3 * m['step']:.1f} ms = kernels {1e3 * m['kernels']:.1f} + glue {1e3 * m['glue']:.1f};"
        f" 2-thread critical path {1e3 * (m['glue'] + m['critical']):.1f} ms: bound {m['bound']:.2f}x")
  cols = [("kernel", "<40"), ("cpu ms", ">8.2f"), ("longest chunk", ">13.2f"), ("chunks", ">6"),
          ("chunk share", ">11.2f")]
  rows = [[r[0], 1e3 * r[1], 1e3 * r[2], r[3], r[2] / r[1] if r[1] else 1.0] for r in m["rows"][:top]]
  print(format_table(cols, rows))


def _print_share(p: str, rows: list, par: float, nk: int, top: int) -> float:
  """Print the split share's table; returns the splittable share (kernels split, or on one thread by the clock)."""
  tot = sum(r[1] for r in rows)
  able = sum(r[1] for r in rows if r[3] in ("split", "measured")) / tot
  print(f"\n{p}: {nk} kernels a step, kernel time {tot:.1f} ms/step at THREADS={os.environ['THREADS']}, "
        f"split share {100 * par:.1f}%, splittable (split or measured) {100 * able:.1f}%")
  cols = [("kernel", "<40"), ("ms", ">8.2f"), ("%", ">5.1f"), ("chunks", ">6"), ("par extent", ">10"), ("why", "<8"),
          ("1-chunk runs", ">12")]
  print(format_table(cols, [[r[0], r[1], 100 * r[1] / tot, r[2], str(r[4]), r[3], r[5]] for r in rows[:top]]))
  return able


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--only", default="resnet,mnist")
  ap.add_argument("--size", default="full", choices=list(rm.SIZES))
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--top", type=int, default=12)
  ap.add_argument("--wall", type=int, default=0, help="interleaved 1 vs 2 thread reps (0: none)")
  ap.add_argument("--model", action="store_true", help="the speedup bound from per-chunk CPU time (chunk_model)")
  ap.add_argument("--child", default=None)
  ap.add_argument("--json", default=None)
  a = ap.parse_args()
  if a.child:
    _child(a.child, a.size)
    return
  os.environ.setdefault("THREADS", "2")
  out: dict = {}
  for p in a.only.split(","):
    if a.model:
      out[p] = chunk_model(p, rm.SIZES[a.size], a.steps)
      _print_model(p, out[p], a.top)
      continue
    rows, par, nk = share(p, rm.SIZES[a.size], a.steps)
    out[p] = {"par_share": par, "splittable": _print_share(p, rows, par, nk, a.top), "rows": rows}
    if a.wall:
      w1, w2 = wall(p, a.size, a.wall)
      print(f"{p}: wall 1 thread {1e3 * w1:.1f} ms, 2 threads {1e3 * w2:.1f} ms, speedup {w1 / w2:.2f}x")
      out[p].update(wall1=w1, wall2=w2)
  if a.json:
    Path(a.json).write_text(json.dumps(out, default=str))


if __name__ == "__main__":
  main()
