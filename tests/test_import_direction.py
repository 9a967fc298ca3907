"""Imports run one way (docs/architecture.md, "Direction of imports"): viz_server -> vztrace, compiler -> vztrace.
Starting the viewer loads no compiler module (so VIZ in its environment cannot make it record), vztrace needs only
the standard library, and the compiler never imports the viewer or Flask."""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what a fresh interpreter reports: the top-level packages of sys.modules that must not be there
REPORT = ("import json, sys\n"
          "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'compiler', 'numpy'})))")


def _loaded(code: str) -> list[str]:
  """The forbidden top-level packages a fresh interpreter has loaded after running code (then REPORT)."""
  env = {**os.environ, "VIZ": "1", "PYTHONPATH": str(ROOT)}  # a compiler import here would arm the recorder
  p = subprocess.run([sys.executable, "-c", code + "\n" + REPORT], cwd=ROOT, env=env, capture_output=True, text=True,
                     timeout=120)
  assert p.returncode == 0, p.stderr
  return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("modules", ["viz_server.store", "viz_server.__main__", "viz_server.tools"])
def test_viewer_entry_loads_neither_compiler_nor_numpy(modules):
  assert _loaded(f"import {modules}") == []


def test_viewer_app_loads_no_compiler_module():
  # numpy is the layout's own dependency (viz_server/layout.py), not the compiler's
  assert "compiler" not in _loaded("import viz_server.app, viz_server.store, viz_server.__main__")


def test_viewer_launch_loads_neither_compiler_nor_numpy():
  # the command compiler/trace/launch.py starts, run in-process up to where --help exits
  code = ("import runpy, sys\nsys.argv = ['viz_server', '--help']\n"
          "try:\n  runpy.run_module('viz_server', run_name='__main__', alter_sys=True)\nexcept SystemExit:\n  pass")
  assert _loaded(code) == []


def _imported(path: Path) -> set[str]:
  """Top-level names of every module a file imports, function-level imports included; relative imports as '.'."""
  names = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      names |= {a.name.split(".")[0] for a in node.names}
    elif isinstance(node, ast.ImportFrom):
      names.add("." if node.level else node.module.split(".")[0])
  return names


def test_vztrace_imports_only_the_standard_library():
  files = sorted((ROOT / "vztrace").glob("*.py"))
  assert files
  bad = {f.name: sorted(n for n in _imported(f) - {"vztrace", "__future__"} if n not in sys.stdlib_module_names)
         for f in files}
  assert {f: names for f, names in bad.items() if names} == {}


def test_vztrace_loads_no_third_party_module():
  code = ("import pkgutil, importlib, sys, json, vztrace\nbase = set(sys.modules)\n"
          "for m in pkgutil.iter_modules(vztrace.__path__):\n  importlib.import_module('vztrace.' + m.name)\n"
          "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - base} - set(sys.stdlib_module_names)"
          " - {'vztrace'})))")
  p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr
  assert json.loads(p.stdout) == []


def test_compiler_never_imports_the_viewer():
  viewer = {"viz_server", "flask", "flask_socketio", "werkzeug", "socketio", "engineio"}
  bad = {str(f.relative_to(ROOT)): sorted(_imported(f) & viewer) for f in (ROOT / "compiler").rglob("*.py")}
  assert {f: names for f, names in bad.items() if names} == {}


# The compiler's pipeline (docs/architecture.md, "Direction of imports"): which layer may import which, function-level
# imports included. Data flows tensor -> schedule -> opt -> codegen -> runtime; compiler.engine, the driver, is the one
# module that puts opt, codegen and runtime together (it reads NOOPT/BEAM, optimizes, gives BEAM the runtime's
# evaluator, compiles), and compiler.realize runs a schedule's kernels on it. The optimizer compiles and runs nothing
# itself, the runtime knows no optimizer; the runtime compiles codegen's Program (as tinygrad's device its renderer).
# Modules outside these layers (uop, dtype, rewrite, symbolic, trace, debug, host: the IR and its tools, the host CPU)
# are free to import.
PIPELINE_MAY_IMPORT = {
  "realize": {"engine", "schedule", "runtime"},
  "engine": {"opt", "codegen", "runtime"},
  "schedule": {"runtime"},  # runtime.buffer: the Buffers a schedule's kernels read and write
  "opt": set(),
  "codegen": set(),
  "runtime": {"codegen"},
}
FRONT_END = ("tensor", "tensor_index", "tensor_nn", "tensor_trig", "tensor_mixins", "nn", "gradient", "jit")


def _module_name(root: Path, f: Path) -> str:
  parts = list(f.relative_to(root).with_suffix("").parts)
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def compiler_imports(root: Path, package: str = "compiler") -> dict[str, set[str]]:
  """{module of package: the modules of package it imports}, function-level imports included; `from pkg import name`
  names the module pkg.name when there is one (the package's __init__ itself is not counted as imported then)."""
  files = {_module_name(root, f): f for f in (root / package).rglob("*.py")}
  graph: dict[str, set[str]] = {}
  for mod, f in files.items():
    pkg = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(f.read_text(), str(f))):
      if isinstance(node, ast.Import):
        out |= {a.name for a in node.names if a.name in files}
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the package this file is in (or one above it per extra dot)
          up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
          base = ".".join(up + ([base] if base else []))
        subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files]
        if subs:
          out |= set(subs)
        if len(subs) < len(node.names) and base in files:
          out.add(base)
    graph[mod] = out - {mod}
  return graph


def pipeline_layer(mod: str) -> str | None:
  """The pipeline layer of a compiler module ('front end' for the Tensor side), None for the IR and its tools."""
  parts = mod.split(".")
  if len(parts) < 2:
    return None
  if parts[1] in PIPELINE_MAY_IMPORT:
    return parts[1]
  return "front end" if parts[1] in FRONT_END else None


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
  """Imports between pipeline layers that PIPELINE_MAY_IMPORT does not allow (and any of the front end)."""
  bad = []
  for mod, deps in sorted(graph.items()):
    layer = pipeline_layer(mod)
    if layer is None or layer == "front end":
      continue
    for dep in sorted(deps):
      other = pipeline_layer(dep)
      if other is not None and other != layer and other not in PIPELINE_MAY_IMPORT[layer]:
        bad.append(f"{mod} ({layer}) imports {dep} ({other})")
  return bad


def import_cycles(graph: dict[str, set[str]], keep: Callable[[str], bool]) -> list[list[str]]:
  """The cycles (strongly connected components of more than one module) among the modules `keep` selects."""
  nodes = [m for m in graph if keep(m)]
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on: set[str] = set()
  out: list[list[str]] = []
  for start in nodes:  # Tarjan's algorithm, iterative
    if start in index:
      continue
    work = [(start, iter(sorted(d for d in graph[start] if keep(d))))]
    index[start] = low[start] = len(index)
    stack.append(start)
    on.add(start)
    while work:
      v, it = work[-1]
      w = next(it, None)
      if w is None:
        work.pop()
        if work:
          low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
          comp = []
          while True:
            x = stack.pop()
            on.discard(x)
            comp.append(x)
            if x == v:
              break
          if len(comp) > 1:
            out.append(sorted(comp))
      elif w not in index:
        index[w] = low[w] = len(index)
        stack.append(w)
        on.add(w)
        work.append((w, iter(sorted(d for d in graph[w] if keep(d)))))
      elif w in on:
        low[v] = min(low[v], index[w])
  return out


def _in_pipeline(mod: str) -> bool:
  return pipeline_layer(mod) not in (None, "front end")


def test_pipeline_imports_run_one_way():
  graph = compiler_imports(ROOT)
  assert "compiler.engine" in graph and graph["compiler.realize"] >= {"compiler.engine"}
  assert layering_violations(graph) == []
  assert import_cycles(graph, _in_pipeline) == []


def test_the_import_checks_can_fail():
  # a made-up tree with the two imports this layering forbids most: BEAM's timing reaching into the runtime, and the
  # runtime asking the optimizer (function-level, as the old code did), which also make a cycle
  graph = {"compiler.opt.search": {"compiler.runtime.compiled"}, "compiler.runtime.compiled": {"compiler.opt.search"},
           "compiler.uop": set()}
  assert layering_violations(graph) == [
    "compiler.opt.search (opt) imports compiler.runtime.compiled (runtime)",
    "compiler.runtime.compiled (runtime) imports compiler.opt.search (opt)"]
  assert import_cycles(graph, _in_pipeline) == [["compiler.opt.search", "compiler.runtime.compiled"]]


# The viewer's layers that following one rewrite goes through (docs/architecture.md, "Following one rewrite"), each
# importing only those below it: a rewrite's graph answers are served by graphview, which the API (its /api/boot) and
# the views above it use; the request plumbing both blueprints share is below both.
VIEWER_BELOW = {
  "viz_server.request_args": {"viz_server.graphview", "viz_server.views", "viz_server.api", "viz_server.app"},
  "viz_server.graphview": {"viz_server.views", "viz_server.api", "viz_server.app"},
  "viz_server.views": {"viz_server.api", "viz_server.app"},
  "viz_server.api": {"viz_server.app"},
}


def viewer_upward_imports(graph: dict[str, set[str]]) -> list[str]:
  """Imports in graph from a module of VIEWER_BELOW to one of the modules it must stay below, directly or not."""
  bad = []
  for mod, above in VIEWER_BELOW.items():
    seen, todo = set(), [mod]
    while todo:
      for dep in graph.get(todo.pop(), set()) - seen:
        seen.add(dep)
        todo.append(dep)
    bad += [f"{mod} imports {dep}" for dep in sorted(seen & above)]
  return bad


def test_viewer_imports_run_one_way():
  graph = compiler_imports(ROOT, "viz_server")
  assert graph["viz_server.api"] >= {"viz_server.graphview", "viz_server.request_args"}
  assert graph["viz_server.graphview"] >= {"viz_server.request_args"}
  assert viewer_upward_imports(graph) == []
  assert import_cycles(graph, lambda m: True) == []


def test_the_viewer_import_check_can_fail():
  # graphview reaching back into the API for its request plumbing, as the routes did before they moved
  graph = {"viz_server.graphview": {"viz_server.api"}, "viz_server.api": {"viz_server.graphview"}}
  assert viewer_upward_imports(graph) == ["viz_server.graphview imports viz_server.api"]
  assert import_cycles(graph, lambda m: True) == [["viz_server.api", "viz_server.graphview"]]
