"""What compile-ahead (compiler.realize._Ahead) gives a first call on a machine with a core free for its compile worker,
from CPU times, which a loaded machine hardly changes (its wall times there measure the load): one cold first call of
a bench_real program in this process with COMPILE_AHEAD=0 (THREADS=1, an empty compile cache), its pieces' CPU times
in run order (each kernel's Python part, its LLVM part, its run; the Python between), then its main schedule (the one
compiling the most kernels) replayed on two free cores under each policy, GIL hand-offs left out:

- before: kernels made up to COMPILE_AHEAD steps ahead, their LLVM on the worker, the runs on the calling thread;
- kernels: the same, the bound counting kernels started, not steps (a repeated kernel's step starts nothing);
- worker: the runs handed to the worker, after their compiles, the calling thread taking queued compiles while it
  waits;
- handed: what realize does: each run on whichever thread is free, in order (the worker after each compile, the
  calling thread where it would wait, before it takes a queued compile);
- half: all the work over two threads, the bound no policy beats.

Prints each policy's seconds, LLVM's time as measured and scaled by --llvm-scale (a loaded machine's LLVM ran ~1.6x a
quiet one's).

  PYTHONPATH=. .venv/bin/python bench/first_call_overlap.py gpt_step [--quick] [--depth 8] [--llvm-scale 0.6]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import real_models as rm  # noqa: E402
from bench.table import format_table  # noqa: E402

# an event of a schedule, in run order: ("glue", s) Python between runs, ("kernel", python s, llvm s, run s) a kernel
# compiled at its turn, ("run", s) a kernel made before (repeated in the schedule, or cached)
Event = tuple


def record(program: str, quick: bool) -> tuple[list[list[Event]], float]:
  """The first call's schedules as events (CPU s, COMPILE_AHEAD=0: all on this thread, in order) and its CPU s."""
  os.environ.update(THREADS="1", COMPILE_AHEAD="0")
  from compiler import engine, realize
  from compiler import tensor as tensor_mod
  from compiler.runtime.compiled import CompiledKernel
  last, schedules, cur = [0.0], [[]], {"llvm": 0.0}

  def tick() -> float:
    t = time.thread_time()
    dt, last[0] = t - last[0], t
    return dt

  start, call, run_schedule = engine.start_runner, CompiledKernel.__call__, realize.run_schedule

  def start_spy(ast: Any, submit: Any) -> Any:
    schedules[-1].append(("glue", tick()))
    cur["llvm"] = 0.0
    got = start(ast, submit)()
    cur["kernel"] = [tick() - cur["llvm"], cur["llvm"]]
    return lambda: got

  def run_now_spy(job: Any) -> Any:
    t = time.thread_time()
    got = job()
    cur["llvm"] += time.thread_time() - t
    return lambda: got

  def call_spy(ck: Any, *a: Any, **kw: Any) -> Any:
    schedules[-1].append(("glue", tick()))
    out = call(ck, *a, **kw)
    dt = tick()
    schedules[-1].append(("kernel", *cur.pop("kernel"), dt) if "kernel" in cur else ("run", dt))
    return out

  def schedule_spy(*a: Any, **kw: Any) -> Any:
    schedules[-1].append(("glue", tick()))
    schedules.append([])
    try:
      return run_schedule(*a, **kw)
    finally:
      schedules[-1].append(("glue", tick()))
      schedules.append([])
  engine.start_runner, engine.run_now, CompiledKernel.__call__ = start_spy, run_now_spy, call_spy
  realize.run_schedule = tensor_mod.run_schedule = schedule_spy
  with tempfile.TemporaryDirectory() as fresh:
    os.environ["TINYVIZ_COMPILE_CACHE"] = fresh
    run = rm.build(program, rm.tinyviz(), rm.QUICK if quick else rm.FULL, jit=True)
    schedules[:] = [[]]
    last[0] = c0 = time.thread_time()
    run().numpy()
    schedules[-1].append(("glue", tick()))
    return [s for s in schedules if s], time.thread_time() - c0


def _steps(events: list[Event]) -> tuple[list[tuple[float, Event]], float]:
  """A schedule's steps, each with the Python before it, and the Python after the last."""
  steps, glue = [], 0.0
  for e in events:
    if e[0] == "glue":
      glue += e[1]
    else:
      steps.append((glue, e))
      glue = 0.0
  return steps, glue


class _Worker:
  """The compile worker of the policies that run every turn on the calling thread (before, kernels): FIFO."""

  def __init__(self) -> None:
    self.jobs: list[dict] = []
    self.free, self.pos = 0.0, 0

  def submit(self, kind: str, t: float, dur: float, dep: dict | None = None) -> dict:
    job = {"kind": kind, "sub": t, "dur": dur, "dep": dep, "start": None, "end": None, "stolen": False}
    self.jobs.append(job)
    return job

  def advance(self, t: float) -> None:
    """Start every job the worker starts by time t."""
    while self.pos < len(self.jobs):
      j = self.jobs[self.pos]
      if j["stolen"]:
        self.pos += 1
        continue
      s = max(self.free, j["sub"])
      if s > t:
        return
      j["start"], j["end"] = s, s + j["dur"]
      self.free, self.pos = j["end"], self.pos + 1

  def steal(self, t: float) -> dict | None:
    """The earliest queued compile not started by t, taken by the calling thread."""
    self.advance(t)
    for j in self.jobs[self.pos:]:
      if j["kind"] == "L" and not j["stolen"] and j["start"] is None and j["sub"] <= t:
        j["stolen"] = True
        return j
    return None

  def run_stolen(self, t: float) -> float | None:
    """steal(t)'s compile run on the calling thread from t: when it ends (None: none to take)."""
    s = self.steal(t)
    if s is None:
      return None
    s["start"], s["end"] = t, t + s["dur"]
    return s["end"]


def _until(w: Any, j: dict, t: float) -> float:
  """The calling thread waits for compile j, taking queued compiles meanwhile: when it is done."""
  while True:
    w.advance(t)
    if j["end"] is not None and j["end"] <= t:
      return t
    if j["start"] is None and j["kind"] == "L" and not j["stolen"] and j["sub"] <= t:
      j["stolen"], j["start"], j["end"] = True, t, t + j["dur"]
      t = j["end"]
      continue
    end = w.run_stolen(t)
    if end is not None:
      t = end
      continue
    if j["end"] is not None:
      return max(t, j["end"])
    t = w.free if w.free > t else t + 1e-4


def play_here(events: list[Event], depth: int, by_kernels: bool) -> float:
  """Runs on the calling thread (before: the bound in steps; by_kernels: in kernels started)."""
  steps, tail = _steps(events)
  w, comp, t, nxt = _Worker(), {}, 0.0, 0
  for i, (glue, e) in enumerate(steps):
    while nxt < len(steps) and (nxt <= i or (sum(j > i for j in comp) < depth if by_kernels else nxt <= i + depth)):
      if steps[nxt][1][0] == "kernel":
        t += steps[nxt][1][1]
        comp[nxt] = w.submit("L", t, steps[nxt][1][2])
      nxt += 1
    t += glue
    if i in comp:
      t = _until(w, comp[i], t)
    t += e[-1]
  return t + tail


class _TurnWorker(_Worker):
  """The compile worker that runs turns too: compiles FIFO, and after each job the turns whose compiles are done."""

  def __init__(self) -> None:
    super().__init__()
    self.turns: list[dict] = []
    self.tp = 0

  def submit(self, kind: str, t: float, dur: float, dep: dict | None = None) -> dict:
    job = {"kind": kind, "sub": t, "dur": dur, "dep": dep, "start": None, "end": None, "stolen": False}
    (self.jobs if kind == "L" else self.turns).append(job)
    return job

  def turn_ready_at(self) -> float | None:
    if self.tp >= len(self.turns):
      return None
    j = self.turns[self.tp]
    if j["dep"] is not None and j["dep"]["end"] is None:
      return None
    return max(j["sub"], j["dep"]["end"] if j["dep"] is not None else 0.0)

  def advance(self, t: float) -> None:
    while True:
      while self.pos < len(self.jobs) and self.jobs[self.pos]["stolen"]:
        self.pos += 1
      tr = self.turn_ready_at()
      lj = self.jobs[self.pos] if self.pos < len(self.jobs) else None
      if tr is not None and tr <= self.free:
        j, self.tp = self.turns[self.tp], self.tp + 1
      elif lj is not None and lj["sub"] <= self.free:
        j, self.pos = lj, self.pos + 1
      else:
        nxt = [x for x in (tr, lj["sub"] if lj else None) if x is not None]
        if not nxt or min(nxt) > t:
          return
        self.free = max(self.free, min(nxt))
        continue
      if self.free > t:  # (it would start after t: not yet)
        if j["kind"] == "R":
          self.tp -= 1
        else:
          self.pos -= 1
        return
      j["start"], j["end"] = self.free, self.free + j["dur"]
      self.free = j["end"]


def _until_turn(w: _TurnWorker, j: dict, t: float, runs_here: bool) -> float:
  """The calling thread waits for turn j: running the next ready turn (runs_here, while the worker runs none), else
  taking a queued compile, else waiting for the worker's next event."""
  while True:
    w.advance(t)
    if j["end"] is not None and j["end"] <= t:
      return t
    if j["end"] is not None:
      end = w.run_stolen(t) if runs_here else None
      if end is None:
        return j["end"] if not runs_here or j["kind"] == "L" else _until_turn(w, j, j["end"], runs_here)
      t = end
      continue
    if runs_here and w.tp < len(w.turns):
      r, prev = w.turn_ready_at(), w.turns[w.tp - 1]["end"] if w.tp else 0.0
      if r is not None and r <= t and prev <= t:
        h = w.turns[w.tp]
        h["start"], h["end"], w.tp = t, t + h["dur"], w.tp + 1
        t = h["end"]
        continue
    end = w.run_stolen(t)
    if end is not None:
      t = end
      continue
    t = max(t + 1e-4, min([x for x in (w.free, w.turn_ready_at()) if x is not None and x > t] or [t + 1e-4]))


def play_handed(events: list[Event], depth: int, runs_here: bool) -> float:
  """Turns handed over as each kernel's Python part is made, at most `depth` kernels' compiles open: run on the worker
  only, or (runs_here) on whichever thread is free."""
  steps, tail = _steps(events)
  w, turns, t = _TurnWorker(), [], 0.0
  for glue, e in steps:
    while True:
      open_ = [tj for tj in turns if tj["dep"] is not None and (tj["end"] is None or tj["end"] > t)]
      if len(open_) <= depth:
        break
      t = _until_turn(w, open_[0], t, runs_here)
    dep = None
    if e[0] == "kernel":
      t += e[1]
      dep = w.submit("L", t, e[2])
    t += glue
    turns.append(w.submit("R", t, e[-1], dep))
  for tj in turns:
    t = _until_turn(w, tj, t, runs_here)
  return t + tail


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("program", choices=list(rm.PROGRAMS))
  ap.add_argument("--quick", action="store_true", help="smaller shapes")
  ap.add_argument("--depth", type=int, default=8, help="COMPILE_AHEAD of the replays")
  ap.add_argument("--llvm-scale", type=float, default=0.6, help="LLVM's time scaled by this too (a quieter machine)")
  args = ap.parse_args(argv)
  schedules, cpu = record(args.program, args.quick)
  main_events = max(schedules, key=lambda s: sum(1 for e in s if e[0] == "kernel"))
  rows = []
  for scale in (1.0, args.llvm_scale):
    ev = [(e[0], e[1], e[2] * scale, e[3]) if e[0] == "kernel" else e for e in main_events]
    work = sum(sum(e[1:]) for e in ev if e[0] != "glue")
    rows.append([f"x{scale:g}", play_here(ev, args.depth, False), play_here(ev, args.depth, True),
                 play_handed(ev, args.depth, False), play_handed(ev, args.depth, True), work / 2])
  kernels = [e for e in main_events if e[0] == "kernel"]
  print(f"{rm.PROGRAMS[args.program]}: first call {cpu:.2f} CPU s (COMPILE_AHEAD=0, load {os.getloadavg()[0]:.1f}); "
        f"its main schedule: {len(kernels)} kernels compiled, {sum(1 for e in main_events if e[0] == 'run')} steps "
        f"repeating one; Python {sum(e[1] for e in kernels):.2f}, LLVM {sum(e[2] for e in kernels):.2f}, runs "
        f"{sum(e[-1] for e in main_events if e[0] != 'glue'):.2f} s")
  cols = [("LLVM", "<6"), *[(h, ">9.3f") for h in ("before", "kernels", "worker", "handed", "half")]]
  print(format_table(cols, rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
