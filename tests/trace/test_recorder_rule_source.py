"""A pattern record's source text (compiler.trace.recorder._rule_source) is inspect.getsource's, stripped (the rule's
`source`), made without the tokenizer for a plain `def`: checked on every rule of every matcher the compiler has, and
on the shapes where the two could differ."""
from __future__ import annotations

import importlib
import pkgutil
import sys
import textwrap

import pytest

import compiler
from compiler import PatternMatcher, UPat
from compiler.rewrite import Rule
from compiler.trace.recorder import _rule_source


def _compiler_rules() -> list[Rule]:
  rules: dict[int, Rule] = {}
  for m in pkgutil.walk_packages(compiler.__path__, "compiler."):
    if m.name.startswith("compiler.trace.__main__"):
      continue
    mod = importlib.import_module(m.name)
    for v in vars(mod).values():
      if isinstance(v, PatternMatcher):
        rules.update((id(r), r) for r in v.rules)
  return list(rules.values())


def test_every_compiler_rule_gets_inspects_source():
  rules = _compiler_rules()
  assert len(rules) > 100
  bad = [(r.location, r.name) for r in rules if _rule_source(r) != r.source]
  assert bad == []


SHAPES = {
  "plain": "def f(x):\n  return x\n\nY = 1\n",
  "decorated": "import functools\n@functools.lru_cache\ndef f(x):\n  return x\n",
  "multi-line tail": "def f(x):\n  return max(\n    x,\n    1)\nY = 1\n",
  "docstring, nested": 'def f(x):\n  """doc"""\n  def g(y):\n    return [y for _ in range(2)]\n  return g(x)\n',
  "comment after": "def f(x):\n  return x\n  # the end\n\nY = 1\n",
  "comments out": "def f(x):\n  return x\n\n# out\n#\nY = 1\n",
  "comments out, in": "def f(x):\n  return x\n# out\n  # in\nY = 1\n",
  "comment in": "def f(x):\n  # first\n  y = x\n  # second\n  return y\n",
  "dead code": "def f(x):\n  return x\n  print(x)\nY = 1\n",
  "one line": "def f(x): return x\n# after\nY = 1\n",
  "in a class": "class C:\n  @staticmethod\n  def f(x):\n    return x\n\n  Y = 1\n",
  "in a function": "def make():\n  def f(x):\n    return x\n  return f\nf = make()\n",
  "at the end": "def f(x):\n  return x",
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shapes_where_a_line_scan_could_differ_from_inspect(name, tmp_path, monkeypatch):
  path = tmp_path / f"rule_shape_{abs(hash(name))}.py"
  path.write_text(textwrap.dedent(SHAPES[name]))
  monkeypatch.syspath_prepend(str(tmp_path))
  mod = importlib.import_module(path.stem)
  try:
    fn = mod.C.f if hasattr(mod, "C") else mod.f
    rule = Rule(UPat.var("x"), fn, 0)
    assert _rule_source(rule) == rule.source
  finally:
    sys.modules.pop(path.stem, None)
