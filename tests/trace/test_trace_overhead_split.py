"""bench_trace_overhead --split: each part counts its own time, less the parts timed inside it (a fake clock: no
timing), and the child program it composes from this file's text runs and reports every part."""
from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.bench_trace_overhead import MAIN_SUFFIX, SPLIT_PARTS, main_rest, run_split, timed_part  # noqa: E402


def _clock(step: float = 1.0):
  now = [0.0]

  def clock() -> float:  # each reading one step later: a call's span is the readings made inside it, plus one
    now[0] += step
    return now[0]
  return clock


def _all_threads(parts: dict[str, float]) -> dict[str, float]:
  """The parts' times over all threads (without their main-thread shares)."""
  return {k: v for k, v in parts.items() if not k.endswith(MAIN_SUFFIX)}


def test_a_part_counts_its_own_time_less_the_parts_inside_it():
  parts: dict[str, float] = {}
  local, clock = threading.local(), _clock()
  inner = timed_part(lambda: None, "naming", parts, local, clock)  # readings 2, 3 (or 4, 5): 1 each call
  outer = timed_part(lambda: (inner(), inner()), "codegen", parts, local, clock)  # readings 1 and 6
  outer()
  assert _all_threads(parts) == {"naming": 2.0, "codegen": 3.0}  # 6 - 1 = 5 in all, 2 of them naming's
  outer()
  assert parts == {"naming": 4.0, "codegen": 6.0, "naming" + MAIN_SUFFIX: 4.0, "codegen" + MAIN_SUFFIX: 6.0}


def test_a_part_that_raises_still_counts_and_leaves_the_stack_empty():
  parts: dict[str, float] = {}
  local, clock = threading.local(), _clock()

  def fail() -> None:
    raise ValueError("no")
  inner = timed_part(fail, "LLVM", parts, local, clock)
  outer = timed_part(lambda: inner(), "codegen", parts, local, clock)
  try:
    outer()
  except ValueError:
    pass
  assert _all_threads(parts) == {"LLVM": 1.0, "codegen": 2.0} and local.stack == []


def test_each_thread_keeps_its_own_stack():
  parts: dict[str, float] = {}
  local, clock = threading.local(), _clock()
  seen: list[list] = []

  def other_thread() -> None:  # a flush in the writer's thread, while the main thread is inside a part
    timed_part(lambda: seen.append(list(local.stack)), "flush", parts, local, clock)()
  outer = timed_part(lambda: [t.start() or t.join() for t in [threading.Thread(target=other_thread)]], "codegen",
                     parts, local, clock)
  outer()
  assert seen == [[0.0]]  # the other thread's stack holds its own call only: the main thread's is not under it
  assert parts["flush"] == 1.0 and parts["codegen"] == 3.0  # codegen's span (1 -> 4) is not cut by another thread's


def test_the_main_threads_rest_leaves_out_only_its_own_share_of_a_part():
  """LLVM runs on compile-ahead's worker and on the main thread: the main thread's rest is its time less the parts it
  ran itself, not less the worker's compiles too (which made `rest` negative: the worker's LLVM taken off the main
  thread's time)."""
  parts: dict[str, float] = {}
  local, clock = threading.local(), _clock()
  llvm = timed_part(lambda: None, "LLVM", parts, local, clock)
  worker = threading.Thread(target=lambda: [llvm() for _ in range(3)])  # 3 compiles on the worker: 1 each
  worker.start()
  worker.join()
  timed_part(lambda: llvm(), "codegen", parts, local, clock)()  # the main thread: codegen 2 (its span 3), LLVM 1
  assert parts["LLVM"] == 4.0 and parts["LLVM" + MAIN_SUFFIX] == 1.0 and parts["codegen" + MAIN_SUFFIX] == 2.0
  parts["main"] = 10.0  # (the main thread's CPU, as the child reports it)
  assert main_rest(parts) == 7.0  # 10 - codegen 2 - LLVM 1 on main; the worker's 3 are not the main thread's


def test_the_split_child_runs_and_reports_every_part():
  with tempfile.TemporaryDirectory() as d:
    got = run_split("gpt_step", "tiny", True, Path(d))
  assert set(SPLIT_PARTS) - {"rest", "LLVM on main"} <= set(got)
  assert 0 <= main_rest(got) <= got["main"]
  assert all(got[k] >= 0 for k in got)
  assert got["naming"] > 0 and got["hooks"] > 0 and got["flush"] > 0  # recorded: each part was called


def test_the_hook_free_baseline_rewrites_as_graph_rewrite_does():
  """The disabled-cost row's baseline (a rewriter without the tracing hooks) stays a drop-in _Rewriter: the same
  results as graph_rewrite on the symbolic workload (it crashed once _apply took the rules its caller looked up)."""
  from bench.bench_symbolic import random_index_exprs
  from bench.bench_trace_overhead import graph_rewrite_nohooks
  from compiler.rewrite import graph_rewrite
  from compiler.symbolic import symbolic
  exprs = random_index_exprs(40, seed=0)
  assert [graph_rewrite_nohooks(e, symbolic) for e in exprs] == [graph_rewrite(e, symbolic) for e in exprs]
