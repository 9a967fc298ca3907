"""`python -m compiler.trace bisect`: seeded wrong rules (installed by the child script itself) are found exactly,
a correct program says "same", and the runs needed grow as log2 of the transformations."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

# each seeded rule appends its match numbers (compiler.rewrite.SWITCHES.count: the number its match is about to get)
# to FIRED, so the test knows the culprit's number independently of the bisection
HEAD = """
import os, sys
import numpy as np
from compiler import rewrite
from compiler.rewrite import Rule, UPat
from compiler.uop import UOp
FIRED = os.environ.get("FIRED")
def fired():
  if FIRED and rewrite.SWITCHES is not None and not os.environ.get("ORACLE"):
    with open(FIRED, "a") as f:
      f.write(f"{rewrite.SWITCHES.count}\\n")
def seed(pm, pat, fn, name):
  pm.__init__([Rule(pat, fn, 0, name, pm.name, optional=True), *pm.rules], name=pm.name)
"""

WRONG_IDENTITY = HEAD + """
from compiler.schedule.simplify import pm_symbolic_cleanup
from compiler.symbolic import symbolic
def wrong_mul3(x, c):  # x * 3 -> x * 4: an identity wrong for the one constant 3
  if c.arg != 3:
    return None
  fired()
  return x * UOp.const(c.dtype, 4)
for pm in (symbolic, pm_symbolic_cleanup):  # (the scheduler's matcher was made of symbolic's rules at import)
  seed(pm, UPat.var("x") * UPat.cvar("c"), wrong_mul3, "seeded: MUL(x, 3)")
from compiler.tensor import Tensor
a = Tensor(np.arange(12, dtype=np.int32).reshape(3, 4))
print((a + 2).sum().item())
print(((a + 1) * 3).sum().item())
"""

WRONG_INDEX_FOLD = HEAD + """
from compiler.codegen.simplify import pm_index_fold
from compiler.dtype import dtypes
def wrong_mod(x, d):  # x % 6 -> (x + 1) % 6: a wrong index fold (in bounds, wrong element)
  if d.arg != 6:
    return None
  fired()
  return (x + UOp.const(x.dtype, 1)) % d
from compiler.codegen.program import pm_expand_fold
for pm in (pm_index_fold, pm_expand_fold):  # (codegen's expansion folds its lanes with the same rules)
  seed(pm, UPat.var("x", dtypes.ints) % UPat.cvar("d"), wrong_mod, "seeded: MOD(x, 6)")
from compiler.tensor import Tensor
a = Tensor(np.arange(24, dtype=np.float32).reshape(6, 4))
print((a * 2).sum().item())
print(a.permute(1, 0).reshape(24).contiguous().numpy())
"""

CORRECT = """
import numpy as np
from compiler.tensor import Tensor
a = Tensor(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))
print(a.exp().sum(axis=1).numpy(), (a @ a).relu().max().item(), a.permute(1, 0).flip(0).tolist()[0])
"""

# a kernel opt whose lowering is wrong: the expander (a required pass, never numbered) reads an unrolled reduce's first
# value in place of its last, so values are wrong only where an UNROLL opt was applied. The child logs every applied
# opt as the switches number it ("opt N KERNEL NAME") and each wrong lowering ("fired"), per process
WRONG_UNROLL = """
import os
import numpy as np
from compiler import rewrite
from compiler.codegen import expander
from compiler.uop import Ops
FIRED = os.environ.get("FIRED")
def log(line):
  if FIRED and not os.environ.get("ORACLE"):
    with open(FIRED, "a") as f:
      f.write(f"{os.getpid()} {line}\\n")
if rewrite.SWITCHES is not None:
  sw, opt_off = rewrite.SWITCHES, rewrite.SWITCHES.opt_off
  def logged_opt_off(opt_name, kernel, where):
    log(f"opt {sw.count} {kernel} {opt_name.replace(' ', '')}")
    return opt_off(opt_name, kernel, where)
  sw.opt_off = logged_opt_off
def wrong_contract_reduce(red):
  v = red.src[0]
  if v.op is Ops.UNROLL and any(r.op is Ops.UNROLL for r in red.src[1:]):
    log("fired")
    red = red.replace(src=(v.replace(src=(*v.src[:-1], v.src[0])), *red.src[1:]))
  return expander.contract_reduce(red)
from compiler.codegen import program
for pm in (expander.pm_expand, program.pm_expand_fold):  # (codegen runs the expansion fused with the index fold)
  pm.__init__([(r.pat, wrong_contract_reduce, "seeded: UNROLL's expansion") if r.fn is expander.contract_reduce
               else r.entry for r in pm.rules], name=pm.name)
from compiler.tensor import Tensor
a = Tensor((np.arange(64 * 64) % 97).astype(np.float32).reshape(64, 64))
print((a * 2 + 1).numpy()[0, :4])
print(a.sum(axis=0).numpy()[:3])
print((a @ a).sum().item())
"""


def _bisect(tmp_path: Path, script: str, backend: str) -> tuple[int, dict, list[str]]:
  prog = tmp_path / "prog.py"
  prog.write_text(textwrap.dedent(script))
  fired = tmp_path / "fired.txt"
  env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "FIRED": str(fired), "BACKEND": backend,
         "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
  p = subprocess.run([sys.executable, "-m", "compiler.trace", "bisect", "--json", "--trace",
                      str(tmp_path / "wrong.vztrace"), "--", sys.executable, str(prog)],
                     cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
  out = json.loads(p.stdout)
  return p.returncode, out, fired.read_text().splitlines() if fired.exists() else []


# (codegen's index folds run only where code is generated: not under the interpreter)
@pytest.mark.parametrize("script,name,backend", [(WRONG_IDENTITY, "seeded: MUL(x, 3)", "llvm"),
                                                 (WRONG_IDENTITY, "seeded: MUL(x, 3)", "interp"),
                                                 (WRONG_INDEX_FOLD, "seeded: MOD(x, 6)", "llvm")])
def test_seeded_rule_found(tmp_path: Path, script: str, name: str, backend: str) -> None:
  rc, out, lines = _bisect(tmp_path, script, backend)
  # the normal run is the bisection's second: its first firing is the first in the file after the oracle's (none)
  fired = [int(x) for x in lines]
  assert rc == 1, out
  assert out["status"] == "differs"
  c = out["culprit"]
  assert c["kind"] == "rule" and c["name"] == name
  assert fired and c["match"] == fired[0]  # the first match of the seeded rule in the normal run
  assert c["file"].endswith("prog.py") and c["line"] > 0
  n = out["transformations"]
  assert n > 0 and out["runs"] <= math.ceil(math.log2(n)) + 5  # oracle, normal, all skipped, alone, traced
  assert Path(out["trace"]).exists() and "#t=1&" in out["link"] and "&s=" in out["link"]


def test_correct_program_is_same(tmp_path: Path) -> None:
  rc, out, _ = _bisect(tmp_path, CORRECT, "llvm")
  assert rc == 0 and out["status"] == "same" and out["runs"] == 2


def test_oracle_is_untouched_by_rules(tmp_path: Path) -> None:
  """ORACLE=1 gives the right values under a wrong rule that the interpreter backend, run after the scheduler's
  rewrites, gives wrong."""
  prog = tmp_path / "prog.py"
  prog.write_text(textwrap.dedent(WRONG_IDENTITY))
  vals = {}
  for name, extra in (("oracle", {"ORACLE": "1"}), ("interp", {"BACKEND": "interp"})):
    p = subprocess.run([sys.executable, str(prog)], env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                       "DISABLE_COMPILER_CACHE": "1", **extra}, capture_output=True, text=True, timeout=300)
    vals[name] = p.stdout.split()
  want = str(int(((np.arange(12) + 1) * 3).sum()))
  assert vals["oracle"][1] == want and vals["interp"][1] != want


def test_skip_matches_parsing() -> None:
  from compiler.rewrite import parse_ranges
  assert parse_ranges("3, 5-7,9-") == ((3, 3), (5, 7), (9, float("inf")))
  with pytest.raises(ValueError, match="SKIP_MATCHES"):
    parse_ranges("7-3")


def _by_process(lines: list[str]) -> list[list[list[str]]]:
  """The FIRED lines of each process, in the order the processes first logged, without their pids."""
  runs: dict[str, list[list[str]]] = {}
  for line in lines:
    pid, *rest = line.split()
    runs.setdefault(pid, []).append(rest)
  return list(runs.values())


def test_seeded_opt_found(tmp_path: Path) -> None:
  """A wrong lowering of one opt: bisect names the first applied UNROLL (kind "opt"), its kernel and number."""
  rc, out, lines = _bisect(tmp_path, WRONG_UNROLL, "llvm")
  normal = _by_process(lines)[0]  # the bisection's second run: the oracle logs nothing
  unrolls = [r[1:] for r in normal if r[0] == "opt" and r[3].startswith("UNROLL")]
  assert unrolls and ["fired"] in normal, f"the program must apply an UNROLL opt for this test to test: {normal}"
  number, kernel, name = unrolls[0]
  assert rc == 1, out
  c = out["culprit"]
  assert c["kind"] == "opt" and c["name"].replace(" ", "") == name and c["kernel"] == kernel
  assert c["match"] == int(number) and c["pass"] == "optimize" and Path(c["file"]).parts[-2:] == ("opt", "kernel.py")
  assert out["alone_fixes"] and out["runs"] <= math.ceil(math.log2(out["transformations"])) + 5
  # the link opens the culprit's kernel context (where its opts were recorded) in the wrong run's trace
  from vztrace.reader import TraceReader
  ctx = int(out["link"].split("&c=")[1].split("&")[0])
  with TraceReader(out["trace"]) as r:
    ctxs = {rec["ctx"] for rec in r if rec["t"] == "opt" and rec["kname"] == kernel}
  assert ctxs == {ctx} and out["link"].endswith("&p=kernel")


SWITCHED = """
import json
import numpy as np
from compiler.tensor import Tensor
a = Tensor((np.arange(32 * 48) % 13 - 6).astype(np.float32).reshape(32, 48) / 4)
b = Tensor(np.linspace(-1, 1, 48 * 16, dtype=np.float32).reshape(48, 16))
print("VALUES", json.dumps([(a * 3 + 1).sum(axis=1).tolist(), (a @ b).relu().tolist(), (a.exp() * a).max().item()]))
"""


def _switched_run(tmp_path: Path, name: str, backend: str, **switches: str) -> tuple[list, list[str], dict, Path]:
  """Run SWITCHED with switches (and SKIP_REPORT, DEBUG=3, a trace): its values, the opts each compiled kernel ran
  with (DEBUG=3's "opts:" lines), its switches report and its trace."""
  prog = tmp_path / "prog.py"
  prog.write_text(SWITCHED)
  report, trace = tmp_path / f"{name}.json", tmp_path / f"{name}.vztrace"
  env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "BACKEND": backend, "DISABLE_COMPILER_CACHE": "1",
         "HOME": str(tmp_path), "DEBUG": "3", "VIZ": "-1", "VIZ_TRACE": str(trace), "SKIP_REPORT": str(report),
         **switches}
  p = subprocess.run([sys.executable, str(prog)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr[-3000:]
  out = p.stdout + p.stderr
  values = json.loads(next(line for line in out.splitlines() if line.startswith("VALUES "))[len("VALUES "):])
  opts = [line.split("opts:", 1)[1].strip() for line in out.splitlines() if "opts:" in line]
  return values, opts, json.loads(report.read_text()), trace


def _switched_reference() -> list:
  a = ((np.arange(32 * 48) % 13 - 6).astype(np.float64).reshape(32, 48)) / 4
  b = np.linspace(-1, 1, 48 * 16, dtype=np.float32).astype(np.float64).reshape(48, 16)
  return [(a * 3 + 1).sum(axis=1), np.maximum(a @ b, 0), (np.exp(a) * a).max()]


def _trace_counts(trace: Path, rule: str) -> tuple[dict | None, int]:
  """The trace's meta "off" and how many matches of the rule named `rule` it recorded."""
  from vztrace.reader import TraceReader
  off, pats, matches = None, set(), 0
  with TraceReader(str(trace)) as r:
    for rec in r:
      if rec["t"] == "meta":
        off = rec.get("off")
      elif rec["t"] == "pattern" and rec.get("name") == rule:
        pats.add(rec["id"])
      elif rec["t"] == "match" and rec["pat"] in pats:
        matches += 1
  return off, matches


def _assert_values(values: list) -> None:
  for got, want in zip(values, _switched_reference(), strict=True):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=1e-5, atol=1e-5)


def test_skip_opts_changes_what_runs(tmp_path: Path) -> None:
  """SKIP_OPTS=1: every kernel runs with no opt (the ones the heuristics applied are all reported skipped), values
  right; SKIP_OPTS=UPCAST leaves the other opts."""
  values, opts, report, trace = _switched_run(tmp_path, "plain", "llvm")
  applied = [o for line in opts if line != "none" for o in line.split(") ")]
  assert applied and report["skipped"] == 0 and report["count"] >= len(applied)
  _assert_values(values)
  values, opts, report, trace = _switched_run(tmp_path, "noopts", "llvm", SKIP_OPTS="1")
  assert opts and set(opts) == {"none"} and report["skipped"] == len(applied)
  assert _trace_counts(trace, "")[0] == {"rules": [], "matches": "", "opts": ["*"]}
  _assert_values(values)
  values, opts, report, _ = _switched_run(tmp_path, "noupcast", "llvm", SKIP_OPTS="UPCAST")
  kept = [o for line in opts if line != "none" for o in line.split(") ")]
  assert not any(o.startswith("UPCAST") for o in kept) and 0 < report["skipped"] < len(applied)
  _assert_values(values)


@pytest.mark.parametrize("backend", ["llvm", "interp"])
def test_skip_rules_changes_what_runs(tmp_path: Path, backend: str) -> None:
  """SKIP_RULES=commutative_order: the rule matches in the plain run's trace, never in the switched one (its matches
  are reported skipped), the trace's meta says so, and the values stay right."""
  rule = "commutative_order"
  values, _, report, trace = _switched_run(tmp_path, "plain", backend)
  off, matches = _trace_counts(trace, rule)
  assert off is None and matches > 0 and report["skipped"] == 0
  _assert_values(values)
  values, _, report, trace = _switched_run(tmp_path, "switched", backend, SKIP_RULES=rule)
  off, matches = _trace_counts(trace, rule)
  assert off == {"rules": [rule], "matches": "", "opts": []} and matches == 0 and report["skipped"] > 0
  _assert_values(values)
