"""A/B of bench_kernels.py on a loaded machine: runs it in turns with and without an environment setting (default
NOSTAGE=1, the heuristics without STAGE, as "before"), and prints each workload's medians over the rounds of the
first run, end to end and kernel-only times next to numpy's, with the load average before and after.

  .venv/bin/python bench/bench_ab.py [--env NOSTAGE=1] [--rounds 9] [bench_kernels.py arguments, e.g. --scale 2]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("e2e ms", "kernel ms", "numpy ms")  # read by header name, so a column added to the table moves nothing


def _rows(out: str) -> dict[str, tuple[float, float, float]]:
  """workload -> (e2e, kernel, numpy) ms from bench_kernels.py's table (the header's names are split on 2+ spaces)."""
  rows: dict[str, tuple[float, float, float]] = {}
  header: list[str] | None = None
  for line in out.splitlines():
    cells = re.split(r"\s{2,}", line.strip())
    if cells[:2] == ["workload", "ok"]:
      header = cells
    elif header is not None and len(cells) == len(header):
      if cells[1] != "yes":
        raise SystemExit(f"wrong result: {line}")
      rows[cells[0]] = tuple(float(cells[header.index(c)]) for c in COLUMNS)
    else:
      header = None
  return rows


def _run(env: dict[str, str], args: list[str]) -> dict[str, tuple[float, float, float]]:
  cmd = [sys.executable, str(ROOT / "bench" / "bench_kernels.py"), "--threads", "1", "--reps", "10", *args]
  return _rows(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--env", default="NOSTAGE=1", help="NAME=value set for the 'before' runs")
  ap.add_argument("--rounds", type=int, default=9)
  args, rest = ap.parse_known_args()
  name, _, value = args.env.partition("=")
  base = {**os.environ, "PYTHONPATH": str(ROOT)}
  runs: dict[str, list[dict]] = {"before": [], "after": []}
  load0 = os.getloadavg()
  for _ in range(args.rounds):  # in turns, so both see the same machine
    runs["before"].append(_run({**base, name: value}, rest))
    runs["after"].append(_run({k: v for k, v in base.items() if k != name}, rest))
  print(f"{args.rounds} rounds, before: {args.env}; load average before {load0[0]:.1f}, after {os.getloadavg()[0]:.1f}")
  print(f"{'workload':12s} {'e2e before':>11s} {'e2e after':>10s} {'kernel before':>14s} {'kernel after':>13s} "
        f"{'speed-up':>9s} {'numpy':>8s} {'numpy/kernel before':>20s} {'after':>6s}   (ms, medians)")
  for w in runs["before"][0]:
    med = {k: [statistics.median(r[w][i] for r in v) for i in range(3)] for k, v in runs.items()}
    (eb, kb, nb), (ea, ka, na) = med["before"], med["after"]
    npm = statistics.median([nb, na])
    print(f"{w:12s} {eb:11.3f} {ea:10.3f} {kb:14.3f} {ka:13.3f} {kb / ka:8.2f}x {npm:8.3f} {npm / kb:20.2f} "
          f"{npm / ka:6.2f}")


if __name__ == "__main__":
  main()
