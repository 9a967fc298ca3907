"""Compile and run the five bench workloads (elementwise, matmul, softmax, MLP, conv2d) and check them against numpy.

Run it with VIZ=1 (what `make demo` does) and every graph_rewrite, kernel opt, generated source and timing is
recorded and served by the viewer: open the printed URL.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workloads import WORKLOADS  # noqa: E402
from compiler.trace import recorder  # noqa: E402


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--scale", type=float, default=1.0, help="shrink the workloads (1.0 is the benchmark size)")
  ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="run only these workloads")
  args = ap.parse_args()
  print(f"{'workload':<12}{'kernels':>8}{'first run s':>13}{'steady s':>11}{'max abs err':>13}  ok")
  failed = 0
  for name in args.only or WORKLOADS:
    wl = WORKLOADS[name](scale=args.scale)
    out = wl.lazy()
    kernels = len(out.schedule())
    t0 = time.perf_counter()
    got = out.numpy()  # schedule + optimize + compile + run
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    wl.lazy().numpy()  # the same graph again: kernels come from the caches
    steady = time.perf_counter() - t0
    want = wl.expected()
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    ok = bool(np.allclose(got, want, rtol=wl.rtol, atol=1e-4))
    failed += not ok
    print(f"{name:<12}{kernels:>8}{first:>13.3f}{steady:>11.4f}{err:>13.2e}  {'yes' if ok else 'NO'}")
  rec = recorder.RECORDER
  if isinstance(rec, recorder.Recorder):
    print(f"\ntrace: {rec.path}")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
