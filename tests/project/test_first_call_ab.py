"""first_call_ab's alternated first calls: a tree against itself gives the same outputs cold and warm, and the
table names both cache states."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import first_call_ab  # noqa: E402


def test_a_tree_against_itself_gives_the_same_outputs(capsys):
  assert first_call_ab.main(["--old", str(ROOT), "--only", "gpt_fwd", "--rounds", "1", "--quick"]) == 0
  out = capsys.readouterr().out
  rows = [line for line in out.splitlines() if line.startswith("GPT forward")]
  assert [r.split()[2] for r in rows] == ["cold", "warm"] and all(r.split()[-1] == "yes" for r in rows)
