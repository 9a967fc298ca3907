"""Every PatternMatcher the compiler defines has its own name, in one style (lowercase words, a combination "a + b"),
and every graph_rewrite pass the compiler runs is named after the matcher it runs, so the name the viewer shows says
which rules ran. Passes are collected from graph_rewrite itself (its rewriter gets both names) while the demo workloads
and a training step run with recording on."""
from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import numpy as np
import pytest

import compiler
from bench.workloads import WORKLOADS
from compiler import rewrite
from compiler.nn import Linear
from compiler.nn.optim import Adam
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.uop import Ops, UOp
from vztrace.reader import TraceReader

# lowercase words separated by spaces; a combination of matchers joins their names with " + "
STYLE = re.compile(r"[a-z0-9]+( [a-z0-9]+)*( \+ [a-z0-9]+( [a-z0-9]+)*)*")
# the one exception: a kernel opt's pass names the opt it applies ("apply UPCAST(0, 4)"), the matcher how (the
# viewer's list of a kernel's passes then reads as its opts, and bisect names the opt)
OPT_PASS = re.compile(r"apply [A-Z]+\(.*\)")
OPT_MATCHERS = {"apply opt", "stage", "peel"}


def _compiler_matchers() -> dict[int, tuple[str, PatternMatcher]]:
  found: dict[int, tuple[str, PatternMatcher]] = {}
  for mod in pkgutil.walk_packages(compiler.__path__, "compiler."):
    if mod.name.startswith("compiler.trace"):
      continue
    m = importlib.import_module(mod.name)
    for attr, v in vars(m).items():
      if isinstance(v, PatternMatcher):
        found.setdefault(id(v), (f"{mod.name}.{attr}", v))
  return found


def test_every_compiler_matcher_has_a_distinct_name_in_the_style():
  names: dict[str, str] = {}
  for where, pm in _compiler_matchers().values():
    assert pm.name, f"{where} has no name"
    assert pm.name not in names, f"{where} and {names[pm.name]} are both named {pm.name!r}"
    assert STYLE.fullmatch(pm.name), f"{where} is named {pm.name!r}"
    names[pm.name] = where
  assert {"symbolic", "symbolic + kernel cleanup", "index fold", "open kernel + rangeify"} <= set(names)


def test_simplify_runs_the_pass_named_for_its_matcher(tmp_path):
  path = tmp_path / "s.vztrace"
  recorder.enable(path, announce=False)
  try:
    (UOp.variable("a", 0, 7) + 0).simplify()
  finally:
    recorder.disable()
  assert [r["name"] for r in TraceReader(path) if r["t"] == "rw_begin"] == ["symbolic"]


def test_index_fold_reuses_symbolic_rules():
  """codegen's light post-expansion pass shares symbolic's rule functions instead of re-implementing them."""
  from compiler.codegen.simplify import pm_index_fold
  from compiler.symbolic import symbolic
  shared = {r.fn for r in symbolic.rules}
  own = [r.fn.__name__ for r in pm_index_fold.rules if r.fn not in shared]
  assert own == ["_fold_divmod"], own


@pytest.fixture
def passes(monkeypatch, tmp_path) -> list[tuple[str, str | None]]:
  """(pass name, matcher name) of every graph_rewrite run in the test, with recording on."""
  seen: list[tuple[str, str | None]] = []
  init = rewrite._Rewriter.__init__

  def spy(self, pm, ctx, bottom_up, name, rec):
    seen.append((name, pm.name))
    init(self, pm, ctx, bottom_up, name, rec)
  monkeypatch.setattr(rewrite._Rewriter, "__init__", spy)
  recorder.enable(tmp_path / "t.vztrace", announce=False)
  try:
    yield seen
  finally:
    recorder.disable()


def _train_step() -> None:
  rng = np.random.default_rng(0)
  l1, l2 = Linear(8, 16), Linear(16, 4)
  opt = Adam([l1.weight, l1.bias, l2.weight, l2.bias], lr=1e-3)
  x, y = Tensor(rng.standard_normal((32, 8)).astype(np.float32)), Tensor(rng.integers(0, 4, 32).astype(np.int32))
  loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
  opt.zero_grad()
  loss.backward()
  opt.step()
  loss.realize()


def test_every_pass_is_named_after_its_matcher(passes):
  for name in WORKLOADS:
    wl = WORKLOADS[name](scale=0.05)
    np.testing.assert_allclose(wl.lazy().numpy(), wl.expected(), rtol=wl.rtol, atol=1e-4)
  _train_step()
  (UOp.variable("a", 0, 7) + 0).simplify()
  matchers = {m for _, m in passes}
  # what ran: the scheduler's, codegen's, the optimizer's, the gradient and UOp.simplify's passes
  assert {"open kernel + rangeify", "symbolic + kernel cleanup", "number globals", "split kernels", "symbolic",
          "index fold", "expand + index fold", "lower", "gradient", "apply opt"} <= matchers, matchers
  wrong = {(n, m) for n, m in passes if n != m and not (OPT_PASS.fullmatch(n) and m in OPT_MATCHERS)}
  assert wrong == set()
  assert {m for m in matchers if not STYLE.fullmatch(m or "")} == set()


def _named_calls(tree: ast.AST) -> list[tuple[ast.Call, ast.expr]]:
  """The graph_rewrite calls that give a name, with that name's expression."""
  out = []
  for call in ast.walk(tree):
    if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == "graph_rewrite":
      name = next((k.value for k in call.keywords if k.arg == "name"), call.args[3] if len(call.args) > 3 else None)
      if name is not None:
        out.append((call, name))
  return out


def test_no_compiler_pass_names_itself_apart_from_its_matcher():
  """The passes no workload above reaches too ("narrow index", "stage", ...): in the compiler's source a
  graph_rewrite gives no name (its matcher's), its matcher's name, or an opt's "apply ..."."""
  root = Path(compiler.__file__).parent
  wrong = []
  for path in sorted(root.rglob("*.py")):
    calls = _named_calls(ast.parse(path.read_text()))
    # (imported only where a call names its pass: importing a __main__ would run it)
    mod = importlib.import_module(".".join(path.relative_to(root.parent).with_suffix("").parts)) if calls else None
    for call, name in calls:
      if isinstance(name, ast.JoinedStr) and isinstance(name.values[0], ast.Constant) and \
         name.values[0].value.startswith("apply "):
        continue
      pm = getattr(mod, call.args[1].id, None) if len(call.args) > 1 and isinstance(call.args[1], ast.Name) else None
      if not (isinstance(name, ast.Constant) and isinstance(pm, PatternMatcher) and pm.name == name.value):
        wrong.append(f"{path.relative_to(root.parent)}:{call.lineno}")
  assert wrong == []


def test_the_style_and_the_check_reject_what_they_should(passes):
  """The check above can fail: a pass named apart from its matcher, or a name in another style, is caught."""
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.const(None, 0))), lambda x: x)], name="drop zero")
  graph_rewrite(UOp.variable("a", 0, 7) + 0, pm, name="drop_zero")
  graph_rewrite(UOp.variable("a", 0, 7) + 0, pm)
  assert passes == [("drop_zero", "drop zero"), ("drop zero", "drop zero")]
  assert not STYLE.fullmatch("drop_zero") and not STYLE.fullmatch("Drop zero") and STYLE.fullmatch("a b + c")


def test_combined_matchers_keep_a_name_their_rules_and_marks():
  a = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.const(None, 0))), lambda x: x, "x+0 -> x")],
                     name="a", optional=True)
  b = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(None, 1))), lambda x: x)], name="b")
  both = a + b
  assert both.name == "a + b" and (both + a).name == "a + b + a" and (PatternMatcher([]) + b).name == "b"
  assert [(r.name, r.optional, r.matcher) for r in both.rules] == [("x+0 -> x", True, "a + b"),
                                                                  ("b: MUL(x, 1)", False, "a + b")]
  named = both.named("ab")
  assert named.name == "ab" and [r.name for r in named.rules] == [r.name for r in both.rules]
  x = UOp.variable("x", 0, 7)
  assert graph_rewrite((x + 0) * 1, named) is x
