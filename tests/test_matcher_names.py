"""Every PatternMatcher the compiler defines has its own name, so a pass that falls back to it is unambiguous."""
import importlib
import pkgutil

import compiler
from compiler.rewrite import PatternMatcher


def _compiler_matchers() -> dict[int, tuple[str, PatternMatcher]]:
  found: dict[int, tuple[str, PatternMatcher]] = {}
  for mod in pkgutil.walk_packages(compiler.__path__, "compiler."):
    if mod.name.startswith("compiler.trace"):
      continue
    m = importlib.import_module(mod.name)
    for attr, v in vars(m).items():
      if isinstance(v, PatternMatcher):
        found.setdefault(id(v), (f"{mod.name}.{attr}", v))
  from compiler.schedule.simplify import kernel_simplifier
  found[id(kernel_simplifier())] = ("compiler.schedule.simplify.kernel_simplifier()", kernel_simplifier())
  return found


def test_every_compiler_matcher_has_a_distinct_name():
  names: dict[str, str] = {}
  for where, pm in _compiler_matchers().values():
    assert pm.name, f"{where} has no name"
    assert pm.name not in names, f"{where} and {names[pm.name]} are both named {pm.name!r}"
    names[pm.name] = where
  assert {"symbolic", "kernel simplify", "index_fold"} <= set(names)


def test_simplify_runs_the_pass_named_for_its_matcher(tmp_path):
  from compiler.trace import recorder
  from compiler.uop import UOp
  from vztrace.reader import TraceReader
  path = tmp_path / "s.vztrace"
  recorder.enable(path, announce=False)
  try:
    (UOp.variable("a", 0, 7) + 0).simplify()
  finally:
    recorder.disable()
  assert [r["name"] for r in TraceReader(path) if r["t"] == "rw_begin"] == ["symbolic"]


def test_index_fold_reuses_symbolic_rules():
  """codegen's light post-expansion pass shares symbolic's rule functions instead of re-implementing them."""
  from compiler.codegen.simplify import pm_fold
  from compiler.symbolic import symbolic
  shared = {r.fn for r in symbolic.rules}
  own = [r.fn.__name__ for r in pm_fold.rules if r.fn not in shared]
  assert own == ["_fold_divmod"], own
