"""Kernels on the OpenCL device (BACKEND=cl): NOOPT, the CPU heuristics CL ran before (`before`), the GPU heuristics
(compiler.opt.heuristic_gpu) and BEAM (compiler.engine.cl_beam_search, no disk cache), by OpenCL event time.

For each workload: its schedule's kernels optimized each way; every variant's output checked against numpy (float64)
once; then all the workload's kernels run back to back per variant, the variants interleaved (rotating which goes
first), `--reps` times; the median of each variant's summed event times. Usage:

  python bench/bench_cl.py [--quick] [--amt 2] [--rounds 2] [--reps 7] [--only matmul_512,softmax]

--rounds 0: no BEAM (its columns nan). A round builds and times at most BEAM_MAX_CANDIDATES candidates (default
compiler.engine.CL_BEAM_MAX_CANDIDATES, 32; 0: all, which for matmul 1024 or the conv is 70-90 a round, some of
them seconds a run).

--quick: matmul 512 and softmax only, BEAM of one round, 3 reps. On pocl (a CPU) the device's compiler takes
0.1-2 s a kernel: BEAM's search time is mostly builds, bounded by --rounds and the cap.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from table import format_table  # noqa: E402

# name -> (the computation on Tensors, numpy's in float64, input shapes)
WORKLOADS = {
  "matmul_512": (lambda a, b: a @ b, lambda a, b: a @ b, [(512, 512), (512, 512)]),
  "matmul_1024": (lambda a, b: a @ b, lambda a, b: a @ b, [(1024, 1024), (1024, 1024)]),
  "softmax": (lambda x: x.softmax(axis=1),
              lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True),
              [(256, 4096)]),
  "conv2d": (lambda x, w: x.conv2d(w, padding=1), None, [(8, 32, 32, 32), (64, 32, 3, 3)]),
}
VARIANTS = ("noopt", "before", "heuristic", "beam")


def _conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  """conv2d with padding 1 in float64 (batch, out channels, rows, cols)."""
  n, c, h, wd = x.shape
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  out = np.zeros((n, w.shape[0], h, wd))
  for i in range(w.shape[2]):
    for j in range(w.shape[3]):
      out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
  return out


def _kernels(name: str, amt: int, rounds: int, target, notes: list[str]):
  """(the schedule's items, {variant: [ClKernel per item]}, the output buffer and numpy's result, BEAM's seconds);
  rounds 0: no BEAM (its variant is the heuristics')."""
  from compiler.engine import cl_beam_search
  from compiler.opt import Kernel, hand_coded_optimizations
  from compiler.runtime.opencl import cl_kernel
  from compiler.schedule.rangeify import create_schedule
  from compiler.tensor import Tensor
  fn, ref, shapes = WORKLOADS[name]
  rng = np.random.default_rng(0)
  xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  out = fn(*[Tensor(x) for x in xs])
  sched, _ = create_schedule([out.uop])
  for si in sched:
    for b in si.bufs:
      b.ensure_allocated()
  # what CL ran before the GPU heuristics: the CPU's, with the target it was given (float4, no locals used)
  before_t = dataclasses.replace(target, has_local=False, has_shared=False, vector_floats=4)
  kernels: dict[str, list] = {v: [] for v in VARIANTS}
  beam_s = 0.0
  for si in sched:
    ks = {"noopt": Kernel(si.ast, target), "before": hand_coded_optimizations(Kernel(si.ast, before_t)),
          "heuristic": hand_coded_optimizations(Kernel(si.ast, target))}
    t0 = time.perf_counter()
    ks["beam"] = ks["heuristic"] if rounds == 0 else \
        cl_beam_search(Kernel(si.ast, target), None, amt, use_cache=False, progress=True, max_rounds=rounds)
    beam_s += time.perf_counter() - t0
    for v in VARIANTS:
      kernels[v].append(cl_kernel(ks[v].get_optimized_ast()))
      if v != "noopt" and (v != "beam" or rounds):
        notes.append(f"{name} {v:9s} {ks[v].name}: {' '.join(o.short() for o in ks[v].applied_opts) or '-'}")
  want = (ref or _conv_ref)(*[x.astype(np.float64) for x in xs])
  return sched, kernels, sched[-1].bufs[0], want, beam_s


def _check(name: str, variant: str, sched, cks, out, want) -> None:
  for ck, si in zip(cks, sched):
    ck(si.bufs)
  got = out.np.reshape(want.shape)
  err = float(np.max(np.abs(got - want) / (np.abs(want) + 1)))
  if not err < 1e-4:
    raise SystemExit(f"{name} {variant}: wrong values (max relative error {err:.2e})")


def bench(name: str, amt: int, rounds: int, reps: int, target, notes: list[str]) -> list:
  """The workload's table row; rounds 0: no BEAM (its columns nan)."""
  sched, kernels, out, want, beam_s = _kernels(name, amt, rounds, target, notes)
  if rounds == 0:
    del kernels["beam"]
  for v in kernels:
    _check(name, v, sched, kernels[v], out, want)
  order = list(kernels)
  times: dict[str, list[float]] = {v: [] for v in order}
  for r in range(reps):
    for v in order[r % len(order):] + order[:r % len(order)]:
      times[v].append(sum(ck(si.bufs) for ck, si in zip(kernels[v], sched)))
  med = {v: statistics.median(ts) * 1e3 for v, ts in times.items()}
  beam = med.get("beam", math.nan)
  return [name, len(sched), med["noopt"], med["before"], med["heuristic"], beam,
          med["noopt"] / med["heuristic"], med["heuristic"] / beam, beam_s if rounds else math.nan]


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--quick", action="store_true", help="matmul 512 and softmax, one BEAM round, 3 reps")
  ap.add_argument("--amt", type=int, default=2, help="BEAM width")
  ap.add_argument("--rounds", type=int, default=2, help="BEAM rounds at most (each builds every candidate); 0: no BEAM")
  ap.add_argument("--reps", type=int, default=7)
  ap.add_argument("--only", default="", help="comma-separated workloads: " + ",".join(WORKLOADS))
  args = ap.parse_args()
  names = [n for n in (args.only.split(",") if args.only else WORKLOADS) if n]
  if args.quick:
    names, args.rounds, args.reps = [n for n in names if n in ("matmul_512", "softmax")], 1, 3
  if unknown := [n for n in names if n not in WORKLOADS]:
    raise SystemExit(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
  from compiler.engine import cl_device_target
  from compiler.runtime.opencl import get_device
  target = cl_device_target()
  print(f"device: {get_device()!r}, float vectors of {target.vector_floats}, work-groups up to {target.local_max}")
  notes: list[str] = []
  cols = [("workload", "<12"), ("kernels", ">7"), ("noopt ms", ">10.2f"), ("before ms", ">10.2f"),
          ("heur ms", ">9.2f"), ("beam ms", ">9.2f"), ("heur/noopt", ">10.1f"), ("beam/heur", ">9.2f"),
          ("search s", ">8.0f")]
  rows = []
  for n in names:  # (the table so far after each workload: a long run stopped early still says something)
    rows.append(bench(n, args.amt, args.rounds, args.reps, target, notes))
    print(format_table(cols, rows), flush=True)
  print("speedups: heur/noopt = noopt time / heuristic time, beam/heur = heuristic time / BEAM time")
  print("\n".join(notes))


if __name__ == "__main__":
  main()
