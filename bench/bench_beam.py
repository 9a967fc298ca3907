"""BEAM search vs the hand-coded heuristics on the five workloads, measured side by side in one process.

For each workload: the kernels of its schedule, each searched with BEAM (no disk cache) and confirmed in the
schedule's sequence (compiler.engine.confirm_schedule: where BEAM's winner differs from the hand-coded kernel, each is
timed in its place in the workload's run and BEAM's kept only where it wins there), then the steady time of all the
workload's kernels run back to back with the heuristics' opts and with BEAM's, interleaved, and numpy's time for the
same computation. Usage:

  python bench/bench_beam.py [--amt 2] [--rounds 3] [--scale 1.0] [--only matmul,mlp] [--reps 24]

On a 2-core machine a full search of every workload takes minutes: --rounds and --only bound it.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from table import format_table  # noqa: E402


def _kernels(w, amt: int, rounds: int) -> tuple[list, list, list, float, list[str]]:
  """(heuristic runners, BEAM runners, buffers, search seconds, the confirmations' outcomes) for the kernels of one
  workload's schedule: BEAM's opts confirmed in the schedule's sequence, as realize does, timed the way this bench
  runs them (1 thread, CPU time)."""
  from compiler import engine
  from compiler.opt import Kernel, hand_coded_optimizations
  from compiler.runtime.compiled import compile_kernel
  from compiler.schedule.rangeify import create_schedule
  sched, _ = create_schedule([w.lazy().uop])
  for si in sched:
    for b in si.bufs:
      b.ensure_allocated()
  policy = engine.OptPolicy(beam=amt)
  t0 = time.perf_counter()
  outcome = engine.confirm_schedule([(si.ast, si.bufs) for si in sched], policy, use_cache=False, threads=1,
                                    clock=time.process_time, progress=False, max_rounds=rounds)
  search_s = time.perf_counter() - t0
  heur = [compile_kernel(hand_coded_optimizations(Kernel(si.ast)).get_optimized_ast()) for si in sched]
  beam = [compile_kernel(engine.optimize(si.ast, policy=policy)) for si in sched]
  notes = [f"{ast.arg.name}: in sequence heuristic {rows[0]['time'] * 1e6:.1f} us, beam {rows[1]['time'] * 1e6:.1f} us"
           f" -> {'beam' if rows[1]['chosen'] else 'heuristic'}" for ast, rows in outcome.items()]
  return heur, beam, [si.bufs for si in sched], search_s, notes


def _run_all(cks: list, bufs: list):
  return lambda: [ck(b, threads=1) for ck, b in zip(cks, bufs)]


def _numpy(w):
  return lambda: w.reference(*w.inputs)


def _interleaved(fns: list, reps: int) -> list[float]:
  """The best CPU time of each fn, run in turns, each rep in the next of all the orders (no fn always first)."""
  best = [float("inf")] * len(fns)
  for fn in fns:
    fn()
  orders = list(itertools.permutations(range(len(fns))))
  for rep in range(reps):
    for i in orders[rep % len(orders)]:
      t0 = time.process_time()
      fns[i]()
      best[i] = min(best[i], time.process_time() - t0)
  return best


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--amt", type=int, default=2, help="beam width (default 2)")
  ap.add_argument("--rounds", type=int, default=3, help="BEAM rounds at most (default 3)")
  ap.add_argument("--scale", type=float, default=1.0)
  ap.add_argument("--reps", type=int, default=24)
  ap.add_argument("--only", default="")
  args = ap.parse_args()
  from threadpoolctl import threadpool_limits
  from workloads import WORKLOADS

  from compiler.opt.search import shutdown_pool
  threadpool_limits(1)
  only = set(filter(None, args.only.split(",")))
  rows, opts, confirms = [], [], []
  for name, make in WORKLOADS.items():
    if only and name not in only:
      continue
    w = make(scale=args.scale)
    heur, beam, bufs, search_s, notes = _kernels(w, args.amt, args.rounds)
    confirms += [f"{name}: {n}" for n in notes]
    # numpy timed on its own: run between the two, it left whichever kernel came after it slower (the very same
    # kernel measured up to 10% faster as BEAM's than as the heuristics')
    t_h, t_b = _interleaved([_run_all(heur, bufs), _run_all(beam, bufs)], args.reps)
    t_np = _interleaved([_numpy(w)], args.reps)[0]
    rows.append([name, len(heur), search_s, t_h * 1e3, t_b * 1e3, t_np * 1e3, t_h / t_b, t_np / t_b])
    opts += [(name, h, b) for h, b in zip(heur, beam) if h.name != b.name or h.program.src != b.program.src]
  shutdown_pool()
  print(f"BEAM={args.amt}, at most {args.rounds} rounds, scale {args.scale}; 1 thread, CPU time, best of {args.reps}")
  cols = [("workload", "<12"), ("kernels", ">7"), ("search s", ">9.1f"), ("heuristic ms", ">13.3f"),
          ("beam ms", ">9.3f"), ("numpy ms", ">9.3f"), ("heur/beam", ">10.2f"), ("numpy/beam", ">11.2f")]
  print(format_table(cols, rows))
  for name, h, b in opts:
    print(f"{name}: heuristic {h.name}  ->  beam {b.name}")
  for line in confirms:
    print(line)


if __name__ == "__main__":
  main()
