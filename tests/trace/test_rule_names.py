"""Every rule is shown by a name that says what it does (issue 32): the name written with it, else its function's,
else its matcher's name and pattern; never `<lambda>`. Checked on every matcher of the compiler, and on a recorded
gradient in the trace, `show` and the viewer's API."""
from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from collections import Counter

import numpy as np
import pytest
from support import hostile_traces as ht
from support.trace_tools_helpers import run_show

import compiler
from compiler.dtype import dtypes
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.uop import Ops, UOp
from viz_server import compare
from viz_server.offline import OfflineApi
from vztrace.reader import TraceReader


def _matchers_in(v, found: dict[int, tuple[str, PatternMatcher]], where: str) -> None:
  if isinstance(v, PatternMatcher):
    found.setdefault(id(v), (where, v))
  elif isinstance(v, (list, tuple)):
    for i, x in enumerate(v):
      if isinstance(x, PatternMatcher):
        found.setdefault(id(x), (f"{where}[{i}]", x))
  elif isinstance(v, dict):
    for k, x in v.items():
      if isinstance(x, PatternMatcher):
        found.setdefault(id(x), (f"{where}[{k!r}]", x))


def compiler_matchers() -> dict[int, tuple[str, PatternMatcher]]:
  """Every PatternMatcher reachable from the compiler's modules: module attributes, inside module-level containers,
  and made by a module's argument-free factory."""
  found: dict[int, tuple[str, PatternMatcher]] = {}
  for m in pkgutil.walk_packages(compiler.__path__, "compiler."):
    if m.name.endswith("__main__"):
      continue
    mod = importlib.import_module(m.name)
    for attr, v in list(vars(mod).items()):
      where = f"{m.name}.{attr}"
      fn = getattr(v, "__wrapped__", v)  # (a functools.cache'd factory too)
      if inspect.isfunction(fn) and fn.__module__ == m.name:
        sig = inspect.signature(fn)
        if not sig.parameters and sig.return_annotation in ("PatternMatcher", PatternMatcher):
          v, where = v(), f"{where}()"
      _matchers_in(v, found, where)
  return found


def test_no_compiler_rule_is_named_lambda():
  found = compiler_matchers()
  assert {"gradient", "symbolic", "symbolic + kernel cleanup", "earliest rewrites", "replace realized"} <= \
         {pm.name for _, pm in found.values()}
  rules = [(where, r) for where, pm in found.values() for r in pm.rules]
  assert len(rules) > 200
  assert [(where, r.location) for where, r in rules if not r.name or "<lambda>" in r.name] == []
  # a lambda names itself where it is written: the pattern-derived fallback is for rules outside the compiler
  unnamed = [(where, r.location, r.name) for where, r in rules if r.fn_name == "<lambda>" and not r.given_name]
  assert unnamed == []


def test_every_gradient_rule_names_its_op():
  from compiler.gradient import pm_gradient
  names = [r.name for r in pm_gradient.rules]
  assert all(n.startswith("d/dx ") for n in names), names
  assert len(set(names)) == len(names)
  for r in pm_gradient.rules:  # one op: "d/dx OP" exactly
    ops = r.pat.src[0].op
    if ops is not None and len(ops) == 1:
      assert r.name == f"d/dx {next(iter(ops)).name}"
  assert {"d/dx MUL", "d/dx EXP2", "d/dx REDUCE_AXIS", "d/dx CONTIGUOUS", "d/dx COPY"} <= set(names)


def _to_one(x: UOp) -> UOp:
  return x.const_like(1)


def test_name_comes_from_the_rule_then_its_function_then_its_pattern():
  x = UPat.var("x")
  pm = PatternMatcher([(x + UPat.const(None, 0), lambda x: x, "x+0 -> x"),
                       (x * UPat.const(None, 1), _to_one),
                       (x * UPat.const(None, 0), lambda x: x.const_like(0)),
                       (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(x,)),)), lambda x: x)], name="m")
  assert [r.name for r in pm.rules] == ["x+0 -> x", "_to_one", "m: MUL(x, 0)", "m: NEG(NEG(x))"]
  assert [r.name for r in PatternMatcher([(x * UPat.const(None, 0), lambda x: x)]).rules] == ["MUL(x, 0)"]
  # a matcher made of other matchers' rules keeps their names (not the new matcher's pattern names)
  both = pm + PatternMatcher([(x - x, lambda x: x.const_like(0), "x-x -> 0")], name="other")
  assert [r.name for r in both.rules] == ["x+0 -> x", "_to_one", "m: MUL(x, 0)", "m: NEG(NEG(x))", "x-x -> 0"]
  assert [r.name for r in PatternMatcher([r.entry for r in pm.rules], name="copy").rules] == \
         [r.name for r in pm.rules]


def test_errors_name_the_rule():
  pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: 3, "ADD -> an int")], name="bad")
  a = UOp.variable("a", 0, 7)
  with pytest.raises(TypeError, match=r"rule 'ADD -> an int' at .*test_rule_names.py:\d+ in pass 'bad' returned int"):
    graph_rewrite(a + 1, pm)


def test_pattern_record_and_rule_names(trace):
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.const(None, 0))), lambda x: x)], name="drop zero")
  a = UOp.variable("a", 0, 7)
  assert graph_rewrite(a + UOp.const(dtypes.int32, 0), pm) is a
  recorder.disable()
  pats = [r for r in TraceReader(trace) if r["t"] == "pattern"]
  assert [p["name"] for p in pats] == ["drop zero: ADD(x, 0)"] and pats[0]["line"] == pm.rules[0].location[1]


# ---- a recorded gradient: the trace, `show` and the viewer's API name its steps "d/dx OP"



@pytest.fixture(params=["interp", "llvm"])
def gradient_trace(request, trace, monkeypatch):
  monkeypatch.setenv("BACKEND", request.param)
  a = Tensor(np.array([0.5, 1.0, 2.0], dtype=np.float32), requires_grad=True)
  b = Tensor(np.array([1.5, -1.0, 0.25], dtype=np.float32), requires_grad=True)
  loss = ((a * b).exp2() + a).sum()  # MUL, EXP2, ADD, REDUCE_AXIS (and the RESHAPE of the sum)
  loss.backward()
  # the gradients are still right (float64 references of the derivatives)
  an, bn = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
  np.testing.assert_allclose(a.grad.numpy(), np.exp2(an * bn) * np.log(2) * bn + 1, rtol=1e-5)
  np.testing.assert_allclose(b.grad.numpy(), np.exp2(an * bn) * np.log(2) * an, rtol=1e-5)
  recorder.disable()
  return trace


def test_gradient_steps_are_named_by_op_in_the_trace(gradient_trace):
  recs = list(TraceReader(gradient_trace))
  rw = next(r for r in recs if r["t"] == "rw_begin" and r["name"] == "gradient")
  pats = {r["id"]: r for r in recs if r["t"] == "pattern"}
  names = [pats[m["pat"]]["name"] for m in recs if m["t"] == "match" and m["rw"] == rw["id"]]
  assert names == ["d/dx RESHAPE", "d/dx REDUCE_AXIS", "d/dx ADD", "d/dx EXP2", "d/dx MUL"]


def test_gradient_steps_are_named_in_show_and_the_api(gradient_trace):
  with OfflineApi(gradient_trace) as api:
    rw = next(rw for c in api.trace_get("contexts") for rw in c["rewrites"] if rw["name"] == "gradient")
    steps = api.trace_get(f"rewrites/{rw['id']}")["steps"]
    api_names = [api.trace_get(f"patterns/{st['pattern']}")["name"] for st in steps]
  assert api_names == ["d/dx RESHAPE", "d/dx REDUCE_AXIS", "d/dx ADD", "d/dx EXP2", "d/dx MUL"]
  got = [json.loads(line) for line in run_show(gradient_trace, json=True, rewrite="gradient").splitlines()]
  head, matches = got[0], got[1:]
  assert [m["rule"]["name"] for m in matches] == api_names
  # the counts per rule: by name (with file:line), adding up to the rewrite's matches
  assert {c["name"]: c["matches"] for c in head["rules"]} == Counter(api_names)
  assert sum(c["matches"] for c in head["rules"]) == head["matches"] == len(steps)
  assert all(c["file"].endswith("compiler/gradient.py") and c["line"] for c in head["rules"])
  text = run_show(gradient_trace, rewrite="gradient")
  for name in api_names:
    assert f"1x {name}  " in text and f"  {name}  " in text
  assert "<lambda>" not in text


def test_old_trace_names_still_read_and_count(tmp_path):
  """A trace written before rules had names (its pattern named by the function: `<lambda>`) still reads."""
  old = {**ht.PATTERN, "name": "<lambda>"}
  path = ht.write(tmp_path / "old.vztrace", [[
    ht.meta(), ht.ctx(0), ht.node(0), ht.node(1, "ADD", [0, 0]), ht.node(2, arg="2"), old, ht.rw_begin(0, 1),
    {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 2, "dt": 5},
    {"t": "match", "rw": 0, "pat": 0, "before": 2, "after": 0, "dt": 5}, ht.rw_end(0, 0, 2), ht.END]])
  got = [json.loads(line) for line in run_show(path, json=True, rewrite="0").splitlines()]
  assert got[0]["rules"] == [{"name": "<lambda>", "file": "h.py", "line": 1, "matches": 2}]
  assert [m["rule"]["name"] for m in got[1:]] == ["<lambda>", "<lambda>"]


@pytest.mark.parametrize("entry, why", [((UPat(Ops.ADD), _to_one, 3), "non-empty str, got 3"),
                                        ((UPat(Ops.ADD), _to_one, ""), "non-empty str, got ''"),
                                        ((UPat(Ops.ADD),), "got tuple of 1"),
                                        (UPat(Ops.ADD), "got UPat")])
def test_a_malformed_rule_says_which(entry, why):
  with pytest.raises(TypeError, match=rf"PatternMatcher 'm' rule 1: .*{why}"):
    PatternMatcher([(UPat(Ops.MUL), _to_one), entry], name="m")


def test_compare_names_the_diverging_gradient_step(tmp_path):
  paths = []
  for name, op in (("a", Tensor.__mul__), ("b", Tensor.__add__)):
    a = Tensor(np.array([0.5, 1.0], dtype=np.float32), requires_grad=True)
    b = Tensor(np.array([1.5, -1.0], dtype=np.float32), requires_grad=True)
    path = tmp_path / f"{name}.vztrace"
    recorder.enable(path, announce=False)
    try:
      op(a, b).exp2().sum().backward()
    finally:
      recorder.disable()
    paths.append(path)
  rep = compare.compare_files(str(paths[0]), str(paths[1]))
  first = rep["first_divergence"]
  assert first["a"]["name"] == first["b"]["name"] == "gradient"
  step = first["step"]
  # the markers above the sum differ first (they hold the forward graph): the first step, the sum's RESHAPE
  assert step["k"] == 1 and step["a"]["rule"]["name"] == step["b"]["rule"]["name"] == "d/dx RESHAPE"
  text = "\n".join(compare.report_lines(rep, compare.Painter(False)))
  assert f"rule {step['a']['rule']['name']} (" in text and "<lambda>" not in text
