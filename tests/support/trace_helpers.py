"""Comparing recorded traces by what the format promises (docs/architecture.md, "batch"), not by flush timing."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[2]

RUN_TO_RUN = ("ts", "dt", "started", "pid", "argv")  # fields that differ between two recordings of one program


def promised_order(records: Iterable[dict], drop: tuple[str, ...] = RUN_TO_RUN) -> list[dict]:
  """The records with the order the format keeps, and only that: between two records that are neither node nor
  match, the nodes come first, then the matches (where a flush fell decides how they interleave). Fields in `drop`
  are removed. Checks on the way that every node comes before the first record that names it."""
  out: list[dict] = []
  run: list[dict] = []
  seen: set[int] = set()

  def close_run() -> None:
    out.extend(sorted(run, key=lambda r: r["t"] != "node"))  # stable: nodes, then matches, each in their order
    run.clear()

  for r in records:
    if r["t"] == "node":
      assert set(r["src"]) <= seen, f"node {r['id']} comes before its sources {r['src']}"
      seen.add(r["id"])
    elif r["t"] == "match":
      assert {r["before"], r["after"]} <= seen | {None}, f"match names a node not written yet: {r}"
    r = {k: v for k, v in r.items() if k not in drop}
    if r["t"] in ("node", "match"):
      run.append(r)
    else:
      close_run()
      out.append(r)
  close_run()
  return out


def record(path: Path, **env: str) -> Path:
  e = {**os.environ, "VIZ": "0", "PYTHONPATH": str(ROOT), **env}
  for k in ("NOOPT", "BEAM", "TEST_DROP_RULE", "TEST_OP"):
    if k not in env:
      e.pop(k, None)
  p = subprocess.run([sys.executable, "-c", PROGRAM, str(path)], cwd=ROOT, env=e, capture_output=True, text=True,
                     timeout=600)
  assert p.returncode == 0, p.stderr
  return path


# One process per trace: the compiler's kernel caches must not carry one recording's kernels into the next.
PROGRAM = """
import os, sys
import numpy as np
from compiler.trace import recorder
from compiler.tensor import Tensor
drop = os.environ.get("TEST_DROP_RULE")
if drop:  # the test-only switch: `symbolic`, and the scheduler's matcher made of its rules, without that rule
  from compiler.schedule.simplify import pm_symbolic_cleanup
  from compiler.symbolic import symbolic
  for pm in (symbolic, pm_symbolic_cleanup):
    pm.__init__([r for r in pm.rules if r.fn.__name__ != drop], name=pm.name)
recorder.enable(sys.argv[1], announce=False)
rng = np.random.default_rng(0)
a = Tensor(rng.standard_normal((8, 8)).astype(np.float32))
b = Tensor(rng.standard_normal((8, 8)).astype(np.float32))
y = a @ b
y = (y + 1) if os.environ.get("TEST_OP", "add") == "add" else (y * 1.5)
y.sum(axis=1).numpy()
recorder.disable()
"""


def rules_fired(path: Path, pass_name: str) -> list[str]:
  """The names of the rules that matched, in order, in the rewrites named pass_name of the trace at path."""
  recs = list(TraceReader(path))
  pats = {r["id"]: r["name"] for r in recs if r["t"] == "pattern"}
  rws = {r["id"] for r in recs if r["t"] == "rw_begin" and r["name"] == pass_name}
  return [pats[m["pat"]] for m in recs if m["t"] == "match" and m["rw"] in rws]
