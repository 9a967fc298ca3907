"""What tracing costs: the same rewrite-heavy workloads with VIZ off vs recording to a file, run alternately in one
process, and graph_rewrite with VIZ off vs a copy of it with the tracing hooks removed. Prints a table of ratios, and
the memory a recording holds while it runs. Then the whole of a real program (issue 30's budget: at most 1.10x), run
in fresh processes, VIZ off and VIZ=-1 alternately, each with an empty compile cache.

  python bench/bench_trace_overhead.py [--quick] [--pairs N] [--program gpt_step] [--size full]
  python bench/bench_trace_overhead.py --whole-only --against /path/to/other/checkout   (before/after, alternating)
  python bench/bench_trace_overhead.py --split [--against ...]   (where the CPU time goes, by part)
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_symbolic import random_index_exprs  # noqa: E402
from bench.table import format_table  # noqa: E402
from compiler import rewrite  # noqa: E402
from compiler.symbolic import symbolic  # noqa: E402
from compiler.trace import recorder  # noqa: E402
from compiler.uop import UOp  # noqa: E402
from vztrace.reader import TraceReader  # noqa: E402


class _NoHooksRewriter(rewrite._Rewriter):
  """graph_rewrite's rewriter as it would be without any tracing code: the baseline for the disabled cost."""
  __slots__ = ()

  def _apply(self, u: UOp, rules: tuple | None = None):
    ctx, pm = self.ctx, self.pm
    if rules is None:
      rules = pm._by_src0.get((u.op, u.dtype if pm._by_dtype else None, u.src[0].op if u.src else None))
    for rule in rules if rules is not None else pm.rules_for(u):
      cap = rule.node_cap
      if cap is not None and rule.node_test is not None and not rule.node_test(u):
        continue
      for caps in rule.pat.match(u, {}) if cap is None else ({cap: u} if cap else {},):
        ret = rule.fn(ctx=ctx, **caps) if rule.takes_ctx else rule.fn(**caps)
        if ret is not None and ret is not u:
          self.matches += 1
          self.last_rule = rule
          return ret, rule
    return None, None


def graph_rewrite_nohooks(sink: UOp, pm: Any, ctx: Any = None, name: str | None = None,
                          bottom_up: bool = False) -> UOp:
  return _NoHooksRewriter(pm, ctx, bottom_up, name or pm.name or "graph_rewrite", None).rewrite(sink)


def symbolic_workload(exprs: list[UOp], gr: Callable = rewrite.graph_rewrite) -> None:
  for e in exprs:
    gr(e, symbolic)


def compile_workloads() -> Callable[[], None]:
  """The compiler's Python side on the five bench workloads: schedule, optimize and generate LLVM IR for every
  kernel. LLVM's own compile is left out: tracing does not touch it, and it would only dilute the ratio."""
  from bench.workloads import WORKLOADS
  from compiler.codegen import get_program, program
  from compiler.engine import optimize
  workloads = [make() for make in WORKLOADS.values()]

  def run() -> None:
    program._PROGRAMS.clear()  # tracing bypasses this cache; the untraced runs must do the same work
    for wl in workloads:
      for item in wl.lazy().schedule():
        get_program(optimize(item.ast))
  return run


def timed(fn: Callable[[], None], cpu: list[float] | None = None) -> float:
  """fn's wall time; with `cpu`, also appends the CPU time the process (all its threads) spent meanwhile."""
  t, c = time.perf_counter(), time.process_time()
  fn()
  if cpu is not None:
    cpu.append(time.process_time() - c)
  return time.perf_counter() - t


def alternate(fn: Callable[[], None], rounds: int, tmp: Path) -> dict[str, Any]:
  """Run fn with VIZ off and recording alternately; the min of each is robust to noise from the other core.
  `on` counts fn and the last flush (what the background writer had not written yet when fn returned): the trace is
  then complete on disk. `free` (shown, not counted) is the rest of recorder.disable(): dropping what the recording
  held. The same pair is also run with Python's cycle collector disabled, to show how much of the cost is
  collections caused by what the recording holds."""
  t: dict[str, list[float]] = {"off": [], "on": [], "off_nogc": [], "on_nogc": [], "free": [], "off_cpu": [],
                               "on_cpu": []}
  sizes, matches = [], []
  for i in range(rounds):
    for suffix in ("", "_nogc"):
      if suffix:
        gc.disable()
      try:
        t["off" + suffix].append(timed(fn, None if suffix else t["off_cpu"]))
        path = tmp / f"overhead-{i}{suffix}.vztrace"
        writer = recorder.enable(path, announce=False).writer
        cpu: list[float] = []
        t["on" + suffix].append(timed(fn, cpu) + timed(writer.flush, cpu))
        if not suffix:
          t["on_cpu"].append(sum(cpu))
        del writer
        t["free"].append(timed(recorder.disable))
      finally:
        gc.enable()
    sizes.append(path.stat().st_size)
    matches.append(sum(1 for r in TraceReader(path) if r["t"] == "match"))
  best = {k: min(v) for k, v in t.items()}
  return {**best, "ratio": best["on"] / best["off"], "ratio_nogc": best["on_nogc"] / best["off_nogc"],
          "cpu_ratio": best["on_cpu"] / best["off_cpu"],
          "med_ratio": statistics.median(t["on"]) / statistics.median(t["off"]), "bytes": sizes[-1],
          "matches": matches[-1], "nodes": sum(1 for r in TraceReader(path) if r["t"] == "node"),
          "held": held_bytes(fn, tmp / "held.vztrace")}


def held_bytes(fn: Callable[[], None], path: Path) -> int:
  """The memory a recording of fn still holds when fn has returned and the trace is flushed (Python allocations, by
  tracemalloc; not timed): what recording adds over the same run with VIZ off."""
  tracemalloc.start()
  try:
    fn()
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    writer = recorder.enable(path, announce=False).writer
    fn()
    writer.flush()
    del writer
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
  finally:
    recorder.disable()
    tracemalloc.stop()
  return held


def measure(workload: str, exprs: int, rounds: int) -> dict[str, Any]:
  """One workload's row, measured in this process."""
  recorder.disable()
  with tempfile.TemporaryDirectory() as d:
    if workload == "symbolic":
      es = random_index_exprs(exprs, seed=0)
      fn: Callable[[], None] = lambda: symbolic_workload(es)  # noqa: E731
    else:
      fn = compile_workloads()
    fn()  # warm what is not tracing's business (imports, lazy tables)
    return alternate(fn, rounds, Path(d))


WORKLOADS = {"symbolic": "symbolic simplify", "compile": "compile 5 workloads"}
ROOT = Path(__file__).resolve().parents[1]
# one step of a real program (bench/real_models.py), built and run in a fresh process: what a user's run costs
# (last, the main thread's CPU s: with compile-ahead the critical path where a core is free for the worker, so a
# measure of what a free machine's wall time would be that a loaded machine hardly changes)
PROGRAM = ("import sys\nsys.path.insert(0, {root!r})\nfrom bench.real_models import SIZES, build, tinyviz\n"
           "build({name!r}, tinyviz(), SIZES[{size!r}])()\n"
           "import time\nprint('main', time.thread_time())\n")


# --split: the program's step with the CPU time of what recording touches summed by part (each part's own time, less
# the parts inside it), printed as JSON; the wrappers cost ~1 us a call (~0.03 s over the GPT step's ~40,000 calls).
# The child runs timed_part's and split_wrappers' text (this file's, whichever tree's compiler it imports).
SPLIT_HEAD = ("import json, threading, time, sys\nfrom typing import Any, Callable\nsys.path.insert(0, {root!r})\n"
              "from compiler.trace import recorder\nMAIN_SUFFIX = {suffix!r}\n")
MAIN_SUFFIX = " on main"  # a part's key suffix for its main-thread share (timed_part)
SPLIT_TAIL = ("parts, local = {{}}, threading.local()\nsplit_wrappers(parts, local)\n"
              "t0, c0 = time.thread_time(), time.process_time()\n{program}"
              "if isinstance(recorder.RECORDER, recorder.Recorder):\n  recorder.RECORDER.writer.flush()\n"
              "print(json.dumps({{**parts, 'main': time.thread_time() - t0, 'process': time.process_time() - c0}}))\n")


def timed_part(fn: Callable, part: str, parts: dict[str, float], local: Any,
               clock: Callable[[], float] = time.thread_time) -> Callable:
  """fn, adding each call's time by `clock` (its thread's CPU time) to parts[part], less the time of the timed_part
  calls made inside it (they count in their own parts); `local`: a threading.local, a stack of inner times a thread.
  A call on the main thread also adds to parts[part + MAIN_SUFFIX]: a part runs on several threads (LLVM's compiles on
  compile-ahead's worker and on the main thread), and the main thread's rest is its time less only its own parts'."""
  def call(*args: Any, **kw: Any) -> Any:
    own = local.__dict__
    stack = own.get("stack")
    if stack is None:  # (a thread's first call: whether it is the main thread, asked once)
      stack = own["stack"] = []
      own["main"] = threading.current_thread() is threading.main_thread()
    stack.append(0.0)
    t = clock()
    try:
      return fn(*args, **kw)
    finally:
      spent = clock() - t
      inner = stack.pop()
      parts[part] = parts.get(part, 0.0) + spent - inner
      if own["main"]:
        parts[part + MAIN_SUFFIX] = parts.get(part + MAIN_SUFFIX, 0.0) + spent - inner
      if stack:
        stack[-1] += spent
  return call


def main_rest(parts: dict[str, float]) -> float:
  """The main thread's CPU time outside every part (`main` less the main thread's share of each part, timed_part)."""
  return parts["main"] - sum(v for k, v in parts.items() if k.endswith(MAIN_SUFFIX))


def split_wrappers(parts: dict[str, float], local: Any) -> None:
  """Wrap what recording touches with timed_part: LLVM (the JIT's compiles), codegen (get_program: its recorded
  rewrites too), naming (TraceIds), hooks (the recorder's other entry points) and flush (the writer's, in whichever
  thread)."""
  from compiler.runtime import compiled, llvm
  from vztrace.writer import TraceWriter
  for holder, names, part in ((llvm.LLVMJit, ("compile", "compile_object", "compile_traced", "link_cached"), "LLVM"),
                              (compiled, ("get_program",), "codegen"), (TraceWriter, ("_flush",), "flush"),
                              (recorder.Recorder, ("match", "rewrite_begin", "rewrite_end", "record", "ctx_begin",
                                                   "ctx_end"), "hooks")):
    for n in names:
      setattr(holder, n, timed_part(getattr(holder, n), part, parts, local))
  ids = recorder.TraceIds
  if hasattr(ids, "_namer"):  # (a closure made per recording; a tree before it names in a method)
    namer = ids._namer
    ids._namer = lambda self: timed_part(namer(self), "naming", parts, local)  # type: ignore[method-assign]
  else:
    ids._name_below = timed_part(ids._name_below, "naming", parts, local)  # type: ignore[attr-defined]


def _program_env(viz: bool, tmp: Path) -> dict[str, str]:
  """The environment of a fresh program process: an empty compile cache of its own, and with viz VIZ=-1 to a file."""
  # (bytecode written and read as a user's run does: a tree whose every run compiled its modules again, with
  # PYTHONDONTWRITEBYTECODE set, cost ~0.3 s a run more than one with them compiled)
  env = {k: v for k, v in os.environ.items()
         if not k.startswith("VIZ") and k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
  cache = Path(tempfile.mkdtemp(dir=tmp))
  env["XDG_CACHE_HOME"] = str(cache)
  if viz:
    env.update(VIZ="-1", VIZ_TRACE=str(cache / "t.vztrace"))
  return env


def run_split(name: str, size: str, viz: bool, tmp: Path, root: Path = ROOT) -> dict[str, float]:
  """One fresh process of the program's step (as run_program) with its CPU time by part (split_wrappers): seconds of
  LLVM, codegen, naming, hooks, flush, and `main` (the main thread's), `process` (all threads')."""
  import inspect
  program = PROGRAM.format(root=str(root), name=name, size=size).split("\n", 2)[2]  # (the path is SPLIT_HEAD's)
  code = (SPLIT_HEAD.format(root=str(root), suffix=MAIN_SUFFIX) + inspect.getsource(timed_part) +
          inspect.getsource(split_wrappers) + SPLIT_TAIL.format(program=program))
  out = subprocess.run([sys.executable, "-c", code], env=_program_env(viz, tmp), cwd=root, stderr=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, text=True, check=True).stdout
  return json.loads(out.splitlines()[-1])


def run_program(name: str, size: str, viz: bool, tmp: Path, root: Path = ROOT) -> tuple[float, float, float]:
  """(wall s, CPU s of the process, all threads, CPU s of its main thread) of one fresh process running the program's
  step with the compiler of
  checkout `root`; with viz, recorded to a file (VIZ=-1: no viewer). An empty compile cache each: VIZ off would
  otherwise load every kernel from the disk cache that recording bypasses (engine.disk_key), a different program."""
  env = _program_env(viz, tmp)
  t = time.perf_counter()
  proc = subprocess.Popen([sys.executable, "-c", PROGRAM.format(root=str(root), name=name, size=size)], env=env,
                          cwd=root, stderr=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
  _, status, usage = os.wait4(proc.pid, 0)
  wall = time.perf_counter() - t
  out = proc.stdout.read().split() if proc.stdout is not None else []
  main = float(out[-1]) if len(out) >= 2 and out[-2] == "main" else float("nan")
  proc.returncode = os.waitstatus_to_exitcode(status)
  if proc.returncode != 0:
    raise RuntimeError(f"the {name} program ({size}, VIZ={'-1' if viz else 'off'}, {root}) exited with "
                       f"{proc.returncode}")
  return wall, usage.ru_utime + usage.ru_stime, main


def whole_program(name: str, size: str, pairs: int, roots: tuple[Path, ...] = (ROOT,)) -> list[dict[str, Any]]:
  """`pairs` rounds of the program with VIZ off and VIZ=-1 for each checkout in `roots`, one process each, in an order
  that rotates every round (so no run always follows the same one on a machine it just warmed): per checkout, the
  medians and minima of (wall, CPU, main thread's CPU) and the ratios of the medians and of the minima."""
  runs = [(root, viz) for root in roots for viz in (False, True)]
  t: dict[tuple[Path, bool], list[tuple[float, float, float]]] = {r: [] for r in runs}
  with tempfile.TemporaryDirectory() as d:
    for root in roots:  # (each tree's modules compiled to bytecode before the first timed run)
      run_program(name, "tiny", True, Path(d), root)
    for i in range(pairs):
      for root, viz in runs[i % len(runs):] + runs[:i % len(runs)]:
        t[root, viz].append(run_program(name, size, viz, Path(d), root))
  out = []
  for root in roots:
    med = {v: [statistics.median(x[k] for x in t[root, v]) for k in (0, 1, 2)] for v in (False, True)}
    low = {v: [min(x[k] for x in t[root, v]) for k in (0, 1)] for v in (False, True)}
    out.append({"root": root, "off": med[False], "on": med[True], "wall": med[True][0] / med[False][0],
                "cpu": med[True][1] / med[False][1], "cpu_min": low[True][1] / low[False][1],
                "main": med[True][2] / med[False][2],
                "cpu_runs": [[x[1] for x in t[root, v]] for v in (False, True)]})
  return out


def print_whole_program(name: str, size: str, pairs: int, against: Path | None = None) -> None:
  """The whole-program table: this checkout's row, and with `against` (another checkout: the tree before a change)
  that one's row first, measured in the same rounds."""
  from bench.real_models import PROGRAMS
  roots = (ROOT,) if against is None else (against.resolve(), ROOT)
  cols = [("program", "<28"), ("tree", "<24"), ("off wall s", ">10.2f"), ("VIZ=-1 wall s", ">13.2f"), ("wall", ">7"),
          ("off CPU s", ">9.2f"), ("VIZ=-1 CPU s", ">12.2f"), ("CPU", ">7"), ("CPU (min)", ">9"),
          ("off main s", ">10.2f"), ("VIZ=-1 main s", ">13.2f"), ("main", ">7")]
  rows = whole_program(name, size, pairs, roots)
  print(format_table(cols, [(f"{PROGRAMS[name]} ({size})", str(r["root"])[-24:], r["off"][0], r["on"][0],
                             f"{r['wall']:.3f}x", r["off"][1], r["on"][1], f"{r['cpu']:.3f}x",
                             f"{r['cpu_min']:.3f}x", r["off"][2], r["on"][2], f"{r['main']:.3f}x") for r in rows]))
  print(f"whole program, {pairs} rounds of fresh processes (VIZ off / VIZ=-1{' of each tree' if against else ''}, "
        "order rotating, an empty compile cache each): medians and their ratios;\nCPU: the process's user + system "
        "time, all threads (the budget: 1.10x); CPU (min): the ratio of the minima; main: the main thread's CPU s\n"
        "(with compile-ahead the critical path where a core is free for the worker: a free machine's wall, nearly)")
  for r in rows:
    print(f"CPU s per run, {r['root']}: off " + " ".join(f"{x:.2f}" for x in r["cpu_runs"][0]) + "; VIZ=-1 " +
          " ".join(f"{x:.2f}" for x in r["cpu_runs"][1]))


SPLIT_PARTS = ("LLVM", "LLVM on main", "codegen", "naming", "hooks", "flush", "rest", "main", "process")


def print_split(name: str, size: str, pairs: int, against: Path | None = None) -> None:
  """Where recording's CPU time goes: `pairs` rounds of fresh processes (VIZ off / VIZ=-1, of each tree, rotating),
  each part's median (run_split; `rest`: the main thread's time outside the parts), and VIZ=-1 less VIZ off."""
  roots = (ROOT,) if against is None else (against.resolve(), ROOT)
  runs = [(root, viz) for root in roots for viz in (False, True)]
  got: dict[tuple[Path, bool], list[dict[str, float]]] = {r: [] for r in runs}
  with tempfile.TemporaryDirectory() as d:
    for root in roots:
      run_program(name, "tiny", True, Path(d), root)
    for i in range(pairs):
      for root, viz in runs[i % len(runs):] + runs[:i % len(runs)]:
        parts = run_split(name, size, viz, Path(d), root)
        parts["rest"] = main_rest(parts)
        got[root, viz].append(parts)
  rows = []
  for root in roots:
    med = {viz: {k: statistics.median(p.get(k, 0.0) for p in got[root, viz]) for k in SPLIT_PARTS}
           for viz in (False, True)}
    for label, vals in (("off", med[False]), ("VIZ=-1", med[True]),
                        ("VIZ=-1 - off", {k: med[True][k] - med[False][k] for k in SPLIT_PARTS})):
      rows.append((str(root)[-24:], label, *(vals[k] for k in SPLIT_PARTS)))
  print(format_table([("tree", "<24"), ("run", "<12"), *((k, ">8.3f" if k != "LLVM on main" else ">12.3f")
                                                          for k in SPLIT_PARTS)], rows))
  print(f"CPU s by part, medians of {pairs} rounds of fresh processes (each part's own time: LLVM the JIT's compiles, "
        "codegen get_program\nless the parts inside it, naming TraceIds, hooks the recorder's entry points, flush the "
        "writer's (any thread);\nLLVM on main: the share of LLVM the main thread ran (compile-ahead's worker ran the "
        "rest); rest: the main thread's time\noutside every part; main: the main thread, process: all threads)")


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__)
  ap.add_argument("--exprs", type=int, default=400, help="random index expressions in the symbolic workload")
  ap.add_argument("--rounds", type=int, default=9)
  ap.add_argument("--quick", action="store_true", help="fewer rounds")
  ap.add_argument("--workload", choices=WORKLOADS, help=argparse.SUPPRESS)  # one row, as JSON (the child processes)
  ap.add_argument("--program", default="gpt_step", help="the real program of the whole-program row (real_models)")
  ap.add_argument("--size", default="full", help="its size: full, quick or tiny")
  ap.add_argument("--pairs", type=int, default=5, help="VIZ off / VIZ=-1 pairs of the whole-program row (0: none)")
  ap.add_argument("--against", type=Path, help="another checkout (the tree before a change): its whole-program row is "
                  "measured in the same rounds, alternating with this one's")
  ap.add_argument("--whole-only", action="store_true", help="only the whole-program row(s)")
  ap.add_argument("--split", action="store_true", help="only the program's CPU time by part (LLVM, codegen, naming, "
                  "hooks, flush, rest), VIZ off and VIZ=-1, in --pairs rounds")
  args = ap.parse_args()
  if args.quick:
    args.rounds, args.exprs, args.size, args.pairs = 3, 200, "quick", 3
  if args.workload:
    print(json.dumps(measure(args.workload, args.exprs, args.rounds)))
    return
  if args.split:
    print_split(args.program, args.size, args.pairs, args.against)
    return
  if args.whole_only:
    print_whole_program(args.program, args.size, args.pairs, args.against)
    return
  # each workload in a fresh process: how often the cycle collector runs depends on the heap that earlier work left
  rows = []
  for key, name in WORKLOADS.items():
    out = subprocess.run([sys.executable, __file__, "--workload", key, "--rounds", str(args.rounds), "--exprs",
                          str(args.exprs)], check=True, capture_output=True, text=True).stdout
    rows.append((name, json.loads(out.splitlines()[-1])))
  cols = [("workload", "<20"), ("VIZ off s", ">10.4f"), ("VIZ on s", ">10.4f"), ("ratio", ">7"), ("median", ">7"),
          ("CPU", ">7"), ("no GC", ">7"), ("free ms", ">8.1f"), ("matches", ">9"), ("bytes", ">10"),
          ("B/match", ">8.1f"), ("KB/1k matches", ">14.1f"), ("nodes", ">7"), ("held KB", ">8.0f"), ("B/node", ">7.0f")]
  table = []
  for name, r in rows:
    per = r["bytes"] / max(1, r["matches"])
    table.append((name, r["off"], r["on"], f"{r['ratio']:.3f}x", f"{r['med_ratio']:.3f}x", f"{r['cpu_ratio']:.3f}x",
                  f"{r['ratio_nogc']:.3f}x",
                  r["free"] * 1e3, r["matches"], r["bytes"], per, per * 1000 / 1024, r["nodes"], r["held"] / 1024,
                  r["held"] / max(1, r["nodes"])))
  print(format_table(cols, table))
  print("ratio: best VIZ on (incl. the last flush) / best VIZ off; median: the same of medians; CPU: the same of the "
        "CPU time\nof the process (all threads; less sensitive to a loaded machine); no GC: both with Python's cycle "
        "collector disabled;\nheld: the Python memory a finished, flushed recording still holds "
        "(tracemalloc; B/node: per node in the trace)\n(each row runs in a process of its own)")
  # disabled cost: hooks present (VIZ off) vs hooks removed, alternately
  recorder.disable()
  exprs = random_index_exprs(args.exprs, seed=0)
  hooked, bare = [], []
  for _ in range(args.rounds):
    hooked.append(timed(lambda: symbolic_workload(exprs)))
    bare.append(timed(lambda: symbolic_workload(exprs, graph_rewrite_nohooks)))
  print(f"\ndisabled tracing: graph_rewrite with VIZ off {min(hooked):.4f}s vs hooks removed {min(bare):.4f}s: "
        f"{min(hooked) / min(bare):.3f}x")
  if args.pairs > 0:
    print()
    print_whole_program(args.program, args.size, args.pairs, args.against)
  if os.environ.get("VIZ"):
    print("note: VIZ is set in the environment; the 'off' rows were still run with the recorder disabled")


if __name__ == "__main__":
  main()
