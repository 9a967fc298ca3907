"""`python -m compiler.trace bisect [--json] -- python script.py ARGS`: which rewrite broke the values a script reads.

The script runs against the oracle (ORACLE=1, compiler.oracle: its tensor graphs evaluated as written) and compiled
as usual, each value it reads back (.numpy(), .item(), .tolist()) written to a file (TINYVIZ_READBACK). Where they
differ, the compiled run's optional transformations (every match of an optional rule, every applied kernel opt:
compiler.rewrite.Switches) are numbered 0..n-1, and a binary search over SKIP_MATCHES="L-" (apply the first L, skip
the rest: the first L keep their numbers whatever is skipped after them) finds the L whose run is right while L + 1's
is wrong: transformation L is the culprit, found in about log2(n) runs. A last run records the trace of the wrong run
and names the culprit's rule, file:line, pass, kernel and viewer step. Exit status: 0 the values agree, 1 a culprit
was found, 2 none can be isolated (the reason is printed). Only the user's own command is ever run: nothing read
from a trace or a report becomes code.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from compiler.oracle import read_values, same_values


@dataclass
class Run:
  """One run of the user's command: its exit status, the values it read back, its switches' report."""
  rc: int
  values: list[Any]
  report: dict[str, Any] | None
  stderr: str = ""


@dataclass
class Bisector:
  cmd: list[str]
  work: str
  runs: int = 0
  log: list[str] = field(default_factory=list)

  def run(self, **env: str) -> Run:
    """Run the user's command once with env added (the compile cache on disk off: a rule changed without changing
    the compiler's sources would load old code; no viewer)."""
    self.runs += 1
    values_path = os.path.join(self.work, f"values{self.runs}.npy")
    report_path = os.path.join(self.work, f"report{self.runs}.json")
    full = {k: v for k, v in os.environ.items()
            if k not in ("VIZ", "VIZ_TRACE", "ORACLE") and not k.startswith("SKIP_")}
    full.update(DISABLE_COMPILER_CACHE="1", TINYVIZ_READBACK=values_path, SKIP_REPORT=report_path, **env)
    p = subprocess.run(self.cmd, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    values = read_values(values_path) if os.path.exists(values_path) else []
    report = None
    if os.path.exists(report_path):
      with open(report_path) as f:
        report = json.load(f)
    return Run(p.returncode, values, report, p.stderr[-2000:])


def agree(a: Run, b: Run) -> bool:
  """Both runs ended cleanly and read back the same number of values, each within its dtype's tolerance."""
  return a.rc == 0 and b.rc == 0 and len(a.values) == len(b.values) and \
    all(same_values(x, y) for x, y in zip(a.values, b.values))


def bisect(cmd: list[str], trace: str | None = None) -> tuple[int, dict[str, Any], str]:
  """Run cmd against the oracle and compiled, and find the culprit; (exit status, the JSON answer, why)."""
  with tempfile.TemporaryDirectory(prefix="tinyviz-bisect-") as work:
    b = Bisector(cmd, work)
    oracle = b.run(ORACLE="1")
    if oracle.rc != 0:
      return 2, {"status": "error", "runs": b.runs}, f"the oracle run failed (exit {oracle.rc}):\n{oracle.stderr}"
    normal = b.run()
    n = (normal.report or {}).get("count", 0)
    if agree(oracle, normal):
      return 0, {"status": "same", "runs": b.runs, "values": len(normal.values), "transformations": n}, ""
    out: dict[str, Any] = {"status": "differs", "runs": b.runs, "transformations": n}
    none_skipped = b.run(SKIP_MATCHES="0-")
    if not agree(oracle, none_skipped):
      out["runs"] = b.runs
      why = ("the values differ even with every optional transformation skipped: the wrong step is in a required "
             "rule (lowering, codegen) or in the program itself" if none_skipped.rc == 0 else
             f"the run with every optional transformation skipped failed (exit {none_skipped.rc}):\n"
             f"{none_skipped.stderr}")
      return 2, out, why
    lo, hi = 0, n  # run(lo) agrees with the oracle, run(hi) (the normal run) does not
    while hi - lo > 1:
      mid = (lo + hi) // 2
      if agree(oracle, b.run(SKIP_MATCHES=f"{mid}-")):
        lo = mid
      else:
        hi = mid
    culprit = lo
    alone = agree(oracle, b.run(SKIP_MATCHES=str(culprit)))
    trace = trace or os.path.join(os.getcwd(), "bisect.vztrace")
    wrong = b.run(VIZ="-1", VIZ_TRACE=trace, SKIP_DESCRIBE=str(culprit))
    described = (wrong.report or {}).get("described")
    out["runs"] = b.runs
    if described is None:
      return 2, out, f"transformation {culprit} of {n} was not met again in the traced run (the run is not repeatable)"
    out["culprit"] = {k: described.get(k) for k in ("kind", "name", "file", "line", "pass", "kernel", "match")}
    out["alone_fixes"] = alone
    out["trace"] = trace
    out["link"] = viewer_link(described)
    return 1, out, ""


def viewer_link(d: dict[str, Any], port: int = 8000) -> str:
  """The viewer's URL of the culprit's step (static/router.js: #t=trace&c=context&r=rewrite&s=step), the trace being
  the first one `python -m viz_server TRACE` serves."""
  parts = ["t=1"] + [f"{k}={d[key]}" for k, key in (("c", "ctx"), ("r", "rw"), ("s", "step")) if d.get(key) is not None]
  if d.get("kind") == "opt":
    parts.append("p=kernel")
  return f"http://127.0.0.1:{port}/#{'&'.join(parts)}"


def main(argv: list[str]) -> int:
  if "--" not in argv:
    print("usage: python -m compiler.trace bisect [--json] [--trace FILE] -- python script.py ARGS", file=sys.stderr)
    return 2
  i = argv.index("--")
  p = argparse.ArgumentParser(prog="python -m compiler.trace bisect")
  p.add_argument("--json", action="store_true", help="print the answer as a JSON object")
  p.add_argument("--trace", default=None, help="where to write the wrong run's trace (default ./bisect.vztrace)")
  args = p.parse_args(argv[:i])
  cmd = argv[i + 1:]
  if not cmd:
    print("bisect: no command after --", file=sys.stderr)
    return 2
  rc, out, why = bisect(cmd, args.trace)
  if why:
    out["why"] = why
  if args.json:
    print(json.dumps(out, indent=1))
    return rc
  if rc == 0:
    print(f"same: the {out['values']} values read back agree with the oracle ({out['runs']} runs)")
  elif rc == 2:
    print(f"bisect: no culprit isolated ({out['runs']} runs): {why}")
  else:
    c = out["culprit"]
    print(f"differs: the culprit is {c['kind']} {c['name']!r} at {c['file']}:{c['line']}, pass {c['pass']!r}, "
          f"kernel {c['kernel'] or '-'}, transformation {c['match']} of {out['transformations']} "
          f"({out['runs']} runs{'' if out['alone_fixes'] else '; skipping it alone does not fix the values'})")
    print(f"trace of the wrong run: {out['trace']}")
    print(f"open it: python -m viz_server {out['trace']}  then {out['link']}")
  return rc


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
