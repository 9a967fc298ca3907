"""The tests are laid out by area (docs/architecture.md, "Layout"): test modules in an area folder, helpers in
tests/support imported as `support.<module>`, and no test module importing another (a test module imported by
another runs its module-level set-up twice and hides where a helper lives)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
AREAS = {"compiler", "trace", "viewer", "browser", "project"}


def _python_files() -> list[Path]:
  return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _imported_modules(path: Path) -> list[str]:
  """Every module a file imports, at any depth (function-level imports included)."""
  out = []
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      out += [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      out.append(node.module)
  return out


def test_every_file_is_in_its_place():
  misplaced = []
  for p in _python_files():
    rel = p.relative_to(TESTS)
    if rel.parts == ("conftest.py",):
      continue
    folder = rel.parts[0] if len(rel.parts) == 2 else None
    if folder == "support":
      ok = not p.name.startswith("test_") and p.name != "conftest.py"
    else:
      ok = folder in AREAS and (p.name.startswith("test_") or p.name == "conftest.py")
    if not ok:
      misplaced.append(str(rel))
  assert not misplaced, f"not a test module of an area nor a helper in tests/support: {misplaced}"


def test_no_test_module_imports_another_or_a_conftest():
  bad = {str(p.relative_to(TESTS)): m for p in _python_files() for m in _imported_modules(p)
         if m.split(".")[0].startswith("test_") or m.split(".")[0] == "conftest"}
  assert not bad, f"import helpers from tests/support instead: {bad}"


def test_the_checks_see_a_bad_import(tmp_path):
  bad = tmp_path / "test_x.py"
  bad.write_text("def f():\n  from test_y import helper\n  from conftest import fixture_helper\n")
  assert _imported_modules(bad) == ["test_y", "conftest"]
