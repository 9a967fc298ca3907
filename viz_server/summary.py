"""Where a traced program's time went (GET /api/traces/<t>/summary, the page's landing view: static/summary.js) and its
kernels' runs, one row per kernel (GET /api/traces/<t>/runs/kernels: static/runs.js, `show --kernels`).

The phases, from what the trace records (docs/architecture.md, the record table):
- total: the recording's span, from the first context's begin to the last context's end;
- schedule: the `schedule` contexts, outermost ones (one inside another, or inside a kernel's, is counted once);
- compile: in the outermost `kernel` contexts, LLVM's compile (`compile_s` of each `llvm_ir` source record) and the
  codegen passes (their outermost rewrites other than the optimizer's: it names each applied opt's "apply <opt>",
  compiler/opt/kernel.py);
- run: every kernel run's time (the `times` of each `run` record);
- optimize: in a kernel context that compiled (has an `llvm_ir` source), its Python part less codegen's passes: from
  its begin to the end of its last rewrite (the heuristics, BEAM's search, the opts' rewrites, codegen's passes; a
  kernel compiled ahead of its run begins there, up to COMPILE_AHEAD kernels before its turn, so its span holds other
  kernels' work and only its own part is counted); one without rewrites: its duration less its compile and run;
- other: the total less the four (the front end, gradients, memory planning, the Python around each run), at least 0;
- parallel: how far the four's sum passes the total: work done at the same time as other work (compile-ahead's LLVM
  compiles on a second thread; or clocks that disagree), so the phases' shares of the total add up past 100%.

A kernel's first run is cold (its code and memory were never touched: the demo's 4M elementwise kernel took 70.9 ms
once, then 3.0 ms), so a row keeps it apart: `first`, and median/min over the warm runs where there are any. The top
kernels are ranked by `steady` (median x runs: the time the kernel takes with every run warm), never by a cold run.
Cost: one pass over the contexts, rewrites and kernel records (O(records)); the answer is bounded (TOP_KERNELS)."""
from __future__ import annotations

import statistics
from typing import Any

from viz_server.store import Context, Trace
from vztrace.counts import kernel_key, run_times

TOP_KERNELS = 20  # kernels in the summary's answer
MAX_KERNEL_ROWS = 10_000  # rows of the runs-per-kernel answer (a hostile trace can name a kernel per record)
OPT_PREFIX = "apply "  # the optimizer's rewrites (Kernel.apply_opt names each "apply <opt>")
PHASE_KINDS = ("schedule", "kernel")


def _num(x: Any) -> float | None:
  return float(x) if type(x) in (int, float) else None


def kernel_runs(tr: Trace) -> list[dict]:
  """One row per kernel that ran (vztrace.counts.kernel_key), in the order each first ran (call under the store's
  lock): runs, total, first (the cold run), median and min (over the warm runs, else the one run), FLOPs and bytes of
  one run, GFLOP/s and GB/s at the min, the first context it ran in (`ctx`) and how many it ran in (`ctxs`)."""
  times: dict[str, list[float]] = {}
  rows: dict[str, dict] = {}
  ctxs: dict[str, set] = {}
  for r in tr.runs:
    key = kernel_key(r)
    ts = run_times(r)
    row = rows.get(key)
    if row is None:
      row = rows[key] = {"kname": key, "ctx": r.get("ctx"), "flops": None, "bytes": None}
      times[key], ctxs[key] = [], set()
    times[key] += ts
    ctxs[key].add(r.get("ctx"))
    for f in ("flops", "bytes"):  # (a kernel without variables does the same work every run)
      if type(r.get(f)) in (int, float):
        row[f] = r[f]
  out = []
  for key, row in rows.items():
    ts = times[key]
    warm = ts[1:] or ts
    low = min(warm) if warm else None
    med = statistics.median(warm) if warm else None
    out.append({**row, "ctxs": len(ctxs[key]), "runs": len(ts), "total": sum(ts), "first": ts[0] if ts else None,
                "median": med, "min": low, "warm": len(ts) - 1 if ts else 0,
                "steady": med * len(ts) if med is not None else 0.0,
                "gflops": row["flops"] / low / 1e9 if row["flops"] is not None and low else None,
                "gbs": row["bytes"] / low / 1e9 if row["bytes"] is not None and low else None})
  return out


def _phase_contexts(tr: Trace) -> dict[int, Context | None]:
  """Context id -> its outermost schedule or kernel context (itself, an ancestor, or None)."""
  out: dict[int, Context | None] = {}
  for c in tr.contexts.values():
    chain, x, hops = [], c, 0
    while x is not None and x.id not in out and hops <= len(tr.contexts):  # (a hostile trace's parents may loop)
      chain.append(x)
      x, hops = tr.contexts.get(x.parent) if x.parent is not None else None, hops + 1
    top = out.get(x.id) if x is not None else None
    for y in reversed(chain):  # outermost first
      if top is None and y.kind in PHASE_KINDS:
        top = y
      out[y.id] = top
  return out


def _span(c: Context) -> float:
  start, end = _num(c.ts), _num(c.end_ts)
  return max(end - start, 0.0) if c.ended and start is not None and end is not None else 0.0


def _optimize(c: Context, python_end: float | None, codegen: float, compile_s: float, run: float) -> float:
  """A compiled kernel context's optimize seconds (the module docstring): its Python part less codegen's passes."""
  start = _num(c.ts)
  if python_end is None or start is None:
    return max(_span(c) - compile_s - run, 0.0)
  return max(python_end - start - codegen, 0.0)


def phases(tr: Trace) -> dict:
  """The seconds of each phase (the module docstring) and the total."""
  top = _phase_contexts(tr)
  starts = [s for c in tr.contexts.values() if (s := _num(c.ts)) is not None]
  ends = [e for c in tr.contexts.values() if c.ended and (e := _num(c.end_ts)) is not None]
  total = max(max(ends) - min(starts), 0.0) if starts and ends else 0.0
  compile_in: dict[int, float] = {}  # outermost kernel context -> its compile seconds
  codegen_in: dict[int, float] = {}  # ... its codegen passes' seconds (in compile_in too)
  python_end: dict[int, float] = {}  # ... the end of its last rewrite (its Python part's end)
  run_in: dict[int, float] = {}
  compiled: set[int] = set()
  schedule = run = 0.0
  for c in tr.contexts.values():
    if c.kind == "schedule" and top.get(c.id) is c:
      schedule += _span(c)
    k = top.get(c.id)
    for s in c.sources:
      if s.get("kind") == "llvm_ir":
        secs = max(_num(s.get("compile_s")) or 0.0, 0.0)
        if k is not None and k.kind == "kernel":
          compiled.add(k.id)
          compile_in[k.id] = compile_in.get(k.id, 0.0) + secs
    for r in c.runs:
      secs = sum(run_times(r))
      run += secs
      if k is not None and k.kind == "kernel":
        run_in[k.id] = run_in.get(k.id, 0.0) + secs
  cover = -1  # rewrites begun before this order ran inside an earlier one (Rewrite.order, order_at_end)
  for rw in tr.rewrites.values():  # in begin order
    if rw.order < cover:
      continue
    cover = rw.order_at_end if rw.order_at_end is not None else cover
    k = top.get(rw.ctx)
    if k is None or k.kind != "kernel":
      continue
    dt = max(_num(rw.dt) or 0.0, 0.0) / 1e9
    if (start := _num(rw.ts)) is not None:
      python_end[k.id] = max(python_end.get(k.id, start + dt), start + dt)
    if not rw.name.startswith(OPT_PREFIX):
      compile_in[k.id] = compile_in.get(k.id, 0.0) + dt
      codegen_in[k.id] = codegen_in.get(k.id, 0.0) + dt
  optimize = sum(_optimize(tr.contexts[k], python_end.get(k), codegen_in.get(k, 0.0), compile_in.get(k, 0.0),
                           run_in.get(k, 0.0)) for k in compiled)
  comp = sum(compile_in.values())
  work = schedule + optimize + comp + run
  return {"total": total, "schedule": schedule, "optimize": optimize, "compile": comp, "run": run,
          "other": max(total - work, 0.0), "parallel": max(work - total, 0.0)}


def summary(tr: Trace, top: int = TOP_KERNELS) -> dict:
  """The program summary (call under the store's lock): phases, the runs' cold and warm totals, the counts every
  surface shows, and the `top` kernels by steady time (kernel_runs' rows, each with its `share` of the steady
  total)."""
  rows = kernel_runs(tr)
  steady = sum(r["steady"] for r in rows)
  best = sorted(rows, key=lambda r: (-r["steady"], -r["total"]))[:top]
  cold = sum(r["first"] or 0.0 for r in rows)
  total = sum(r["total"] for r in rows)
  return {"trace": tr.id, "name": tr.name, "status": tr.status, "phases": phases(tr),
          "runs": {"count": sum(r["runs"] for r in rows), "total": total, "cold": cold, "warm": total - cold,
                   "steady": steady, "kernels": len(rows)},
          "counts": {"rewrites": len(tr.rewrites), "matches": tr.match_count, **tr.counts.as_dict()},
          "top": [{**r, "share": r["steady"] / steady if steady else None} for r in best],
          "cut": len(rows) > top}


def kernel_runs_answer(tr: Trace) -> dict:
  """The runs-per-kernel answer: its rows (at most MAX_KERNEL_ROWS) and how many there are."""
  rows = kernel_runs(tr)
  return {"kernels": rows[:MAX_KERNEL_ROWS], "count": len(rows), "cut": len(rows) > MAX_KERNEL_ROWS}
