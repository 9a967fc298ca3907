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

ROOT = Path(__file__).resolve().parents[1]

# each seeded rule appends its match numbers (compiler.rewrite.SWITCHES.count: the number its match is about to get)
# to FIRED, so the test knows the culprit's number independently of the bisection
HEAD = """
import os, sys
import numpy as np
from compiler import rewrite
from compiler.rewrite import UPat
from compiler.uop import UOp
FIRED = os.environ.get("FIRED")
def fired():
  if FIRED and rewrite.SWITCHES is not None and not os.environ.get("ORACLE"):
    with open(FIRED, "a") as f:
      f.write(f"{rewrite.SWITCHES.count}\\n")
def seed(pm, pat, fn, name):
  pm.__init__([(pat, fn, name), *(r.entry for r in pm.rules)], name=pm.name, optional=True)
"""

WRONG_IDENTITY = HEAD + """
from compiler.symbolic import symbolic
def wrong_mul3(x, c):  # x * 3 -> x * 4: an identity wrong for the one constant 3
  if c.arg != 3:
    return None
  fired()
  return x * UOp.const(c.dtype, 4)
seed(symbolic, UPat.var("x") * UPat.cvar("c"), wrong_mul3, "seeded: MUL(x, 3)")
from compiler.tensor import Tensor
a = Tensor(np.arange(12, dtype=np.int32).reshape(3, 4))
print((a + 2).sum().item())
print(((a + 1) * 3).sum().item())
"""

WRONG_INDEX_FOLD = HEAD + """
from compiler.codegen.simplify import pm_fold
from compiler.dtype import dtypes
def wrong_mod(x, d):  # x % 6 -> (x + 1) % 6: a wrong index fold (in bounds, wrong element)
  if d.arg != 6:
    return None
  fired()
  return (x + UOp.const(x.dtype, 1)) % d
seed(pm_fold, UPat.var("x", dtypes.ints) % UPat.cvar("d"), wrong_mod, "seeded: MOD(x, 6)")
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


def _bisect(tmp_path: Path, script: str, backend: str) -> tuple[int, dict, list[int]]:
  prog = tmp_path / "prog.py"
  prog.write_text(textwrap.dedent(script))
  fired = tmp_path / "fired.txt"
  env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "FIRED": str(fired), "BACKEND": backend,
         "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
  p = subprocess.run([sys.executable, "-m", "compiler.trace", "bisect", "--json", "--trace",
                      str(tmp_path / "wrong.vztrace"), "--", sys.executable, str(prog)],
                     cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
  out = json.loads(p.stdout)
  # the normal run is the bisection's second: its first firing is the first in the file after the oracle's (none)
  numbers = [int(x) for x in fired.read_text().split()] if fired.exists() else []
  return p.returncode, out, numbers


# (codegen's index folds run only where code is generated: not under the interpreter)
@pytest.mark.parametrize("script,name,backend", [(WRONG_IDENTITY, "seeded: MUL(x, 3)", "llvm"),
                                                 (WRONG_IDENTITY, "seeded: MUL(x, 3)", "interp"),
                                                 (WRONG_INDEX_FOLD, "seeded: MOD(x, 6)", "llvm")])
def test_seeded_rule_found(tmp_path: Path, script: str, name: str, backend: str) -> None:
  rc, out, fired = _bisect(tmp_path, script, backend)
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
