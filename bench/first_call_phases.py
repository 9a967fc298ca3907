"""Where a first call's CPU time goes (issue 29), without cProfile's overhead: the first call of one of bench_real's
programs in this (fresh) process, its CPU time split by phase (schedule, optimize, codegen, LLVM's optimizer, code
generation and linking, the kernels' runs) and by graph_rewrite pass (each pass's own time, the passes it calls
excluded), with counts: kernels compiled, their distinct ASTs and IR texts, rewrites per pass.

  PYTHONPATH=. .venv/bin/python bench/first_call_phases.py gpt_step [--quick] [--top 25] [--cache DIR] [--ir N]

--cache DIR: the compile cache's folder (default: a fresh empty one, so the call is cold; a second run on the same
folder is warm). THREADS=1 is set as bench_first_call sets it. --ir N: also the IR's size kernel by kernel, instructions
before and after LLVM's optimizer (it unrolls and vectorizes), with the N kernels LLVM's optimizer took longest on
(the counting's own time goes to "(other)").
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import real_models as rm  # noqa: E402
from bench.table import format_table  # noqa: E402


class Clock:
  """Exclusive CPU time by label: a timed function's time minus that of the timed functions it calls, each thread's
  own (compile-ahead's worker runs LLVM and kernels beside the calling thread: a process-wide clock and one shared
  stack put the worker's time into whatever the calling thread was timing)."""

  def __init__(self) -> None:
    self.own: Counter[str] = Counter()
    self.calls: Counter[str] = Counter()
    self.local = threading.local()  # .stack: [label, start, time of timed callees], this thread's
    self.lock = threading.Lock()

  def wrap(self, label: str | Callable[..., str], fn: Callable) -> Callable:
    @functools.wraps(fn)
    def timed(*args: Any, **kw: Any) -> Any:
      name = label(*args, **kw) if callable(label) else label
      stack = self.local.__dict__.setdefault("stack", [])
      stack.append([name, time.thread_time(), 0.0])
      try:
        return fn(*args, **kw)
      finally:
        name, t0, inner = stack.pop()
        dt = time.thread_time() - t0
        with self.lock:
          self.own[name] += dt - inner
          self.calls[name] += 1
        if stack:
          stack[-1][2] += dt
    return timed


def instrument(clock: Clock) -> dict[str, Any]:
  """Wrap the phases' entry points and every graph_rewrite (by pass name); the counters they fill."""
  import llvmlite.binding as llvm

  from compiler import engine, rewrite, tensor
  from compiler.codegen import program
  from compiler.runtime import compiled
  from compiler.runtime import llvm as jit
  seen: dict[str, Any] = {"asts": Counter(), "srcs": Counter()}
  tensor.create_schedule = clock.wrap("schedule (outside passes)", tensor.create_schedule)
  engine.optimize = clock.wrap("optimize (outside passes)", engine.optimize)

  def get_program(ast: Any, _inner: Callable = program.get_program) -> Any:
    seen["asts"][ast] += 1
    prg = _inner(ast)
    seen["srcs"][prg.src] += 1
    return prg
  compiled.get_program = clock.wrap("codegen (outside passes)", get_program)
  rewrite._Rewriter.rewrite = clock.wrap(lambda self, root: f"pass {self.name}", rewrite._Rewriter.rewrite)
  jit.LLVMJit._optimize = clock.wrap("LLVM optimize", jit.LLVMJit._optimize)
  llvm.TargetMachine.emit_object = clock.wrap("LLVM codegen (emit_object)", llvm.TargetMachine.emit_object)
  jit._link = clock.wrap("LLVM link", jit._link)
  llvm.parse_assembly = clock.wrap("LLVM parse", llvm.parse_assembly)
  # (the disk cache's compiles: each in a context and target machine of its own, outside llvmlite's lock)
  jit._emit = clock.wrap("LLVM codegen (emit_object)", jit._emit)
  jit._parse_apart = clock.wrap("LLVM parse", jit._parse_apart)
  compiled.CompiledKernel._run_plan = clock.wrap("kernel runs", compiled.CompiledKernel._run_plan)
  return seen


def count_ir(sizes: list[tuple[str, int, int, float]]) -> None:
  """Record each kernel's (name, instructions in, instructions out, optimizer CPU s) as LLVM optimizes it."""
  from compiler.runtime import llvm as jit
  optimize = jit.LLVMJit._optimize

  def counted(self: Any, mod: Any, tm: Any = None, **kw: Any) -> None:
    before = str(mod)
    t0 = time.process_time()
    optimize(self, mod, tm, **kw)
    dt = time.process_time() - t0
    name = before.split("define void @", 1)[1].split("(", 1)[0] if "define void @" in before else "?"
    name = name.rsplit("_", 1)[0] if len(name.rsplit("_", 1)[-1]) >= 32 else name  # (the disk cache's key)
    sizes.append((name, _instructions(before), _instructions(str(mod)), dt))
  jit.LLVMJit._optimize = counted


def _instructions(ir: str) -> int:
  return sum(1 for line in ir.split("\n") if line.startswith("  ") and not line.startswith("  ;"))


def print_ir(sizes: list[tuple[str, int, int, float]], top: int) -> None:
  n_in, n_out, dt = (sum(s[k] for s in sizes) for k in (1, 2, 3))
  print(f"IR of {len(sizes)} kernels: {n_in} instructions in, {n_out} out of LLVM's optimizer ({dt:.3f} CPU s there)")
  rows = [(name, n, m, f"{t * 1e3:.1f}") for name, n, m, t in sorted(sizes, key=lambda s: -s[3])[:top]]
  print(format_table([("kernel (longest optimized)", "<34"), ("in", ">6"), ("out", ">6"), ("ms", ">7")], rows))


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("program", choices=list(rm.PROGRAMS))
  ap.add_argument("--quick", action="store_true", help="smaller shapes")
  ap.add_argument("--top", type=int, default=25, help="rows of the table")
  ap.add_argument("--cache", help="the compile cache's folder (default: a fresh empty one)")
  ap.add_argument("--ir", type=int, default=0, help="also the IR's size per kernel, the N slowest to optimize")
  args = ap.parse_args(argv)
  os.environ["THREADS"] = "1"
  with tempfile.TemporaryDirectory() as fresh:
    os.environ["TINYVIZ_COMPILE_CACHE"] = args.cache or fresh
    from compiler import engine
    run = rm.build(args.program, rm.tinyviz(), rm.QUICK if args.quick else rm.FULL, jit=True)
    clock = Clock()
    sizes: list[tuple[str, int, int, float]] = []
    seen = instrument(clock)
    if args.ir:
      count_ir(sizes)  # (around the clock's wrap: the counting is no phase's time)
    before = Counter(engine.COUNTS)
    c0 = time.process_time()
    run().numpy()
    total = time.process_time() - c0
  counts = Counter(engine.COUNTS)
  counts.subtract(before)
  rows = [(label, f"{t:.3f}", f"{100 * t / total:.1f}", clock.calls[label]) for label, t in clock.own.most_common()]
  rows.append(("(other)", f"{total - sum(clock.own.values()):.3f}", "", ""))
  print(f"{rm.PROGRAMS[args.program]}: first call {total:.2f} CPU s; compiled {counts['compile']}, from disk "
        f"{counts['disk']}; codegen of {sum(seen['asts'].values())} ASTs ({len(seen['asts'])} distinct, "
        f"{len(seen['srcs'])} distinct IR texts)")
  print(format_table([("phase / pass (own time)", "<44"), ("CPU s", ">7"), ("%", ">5"), ("calls", ">6")],
                     rows[:args.top] + rows[-1:]))
  if args.ir:
    print_ir(sizes, args.ir)
  return 0


if __name__ == "__main__":
  sys.exit(main())
