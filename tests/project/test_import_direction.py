"""Imports run one way (docs/architecture.md, "Direction of imports"): viz_server -> vztrace, compiler -> vztrace.
Starting the viewer loads no compiler module (so VIZ in its environment cannot make it record), vztrace needs only
the standard library, the compiler never imports the viewer or Flask, its pipeline's layers import downwards, and no
module of the three packages is in an import cycle: checked over every module, function-level imports included, as
Python runs them (`import_graph`)."""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("compiler", "viz_server", "vztrace")
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


def test_vztrace_loads_no_third_party_module():
  code = ("import pkgutil, importlib, sys, json, vztrace\nbase = set(sys.modules)\n"
          "for m in pkgutil.iter_modules(vztrace.__path__):\n  importlib.import_module('vztrace.' + m.name)\n"
          "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - base} - set(sys.stdlib_module_names)"
          " - {'vztrace'})))")
  p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr
  assert json.loads(p.stdout) == []


# ---- the import graph, read from the source with ast

def _module_name(root: Path, f: Path) -> str:
  parts = list(f.relative_to(root).with_suffix("").parts)
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
  return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
         (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
  """Every import statement of a module that Python can run: module level and inside functions and classes, but not
  in the body of `if TYPE_CHECKING:` (only a type checker reads it)."""
  todo: list[ast.AST] = [tree]
  while todo:
    node = todo.pop()
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      yield node
    elif isinstance(node, ast.If) and _is_type_checking(node.test):
      todo.extend(node.orelse)
    else:
      todo.extend(ast.iter_child_nodes(node))


def _within(mod: str, pkg: str) -> bool:
  return mod == pkg or mod.startswith(pkg + ".")


def _parents_run(name: str, importer: str) -> list[str]:
  """The packages above `name` whose __init__ Python runs to import it, less the importer's own packages: Python ran
  those before the importer, so they are no dependency of it."""
  parts = name.split(".")
  return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if not _within(importer, p)]


def _from_targets(node: ast.ImportFrom, mod: str, pkg: str, files: dict[str, Path]) -> set[str]:
  """What `from base import a, b` runs: base's packages, base itself (unless it is a package the importer is in and
  every name is a submodule, which Python then just imports), and the names that are modules."""
  base = node.module or ""
  if node.level:  # relative: from the package the file is in (or one above it per extra dot)
    up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
    base = ".".join(up + ([base] if base else []))
  subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files}
  out = set(_parents_run(base, mod)) | subs
  if base not in files and not node.level:
    return out | {base.split(".")[0]}  # a module outside the packages: its top-level name
  if not _within(mod, base) or len(subs) < len(node.names):
    out.add(base)
  return out


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
  """{module: what importing it imports}, for every module of the packages under root: a module of the packages by
  its dotted name (a package by its __init__'s, e.g. 'compiler.trace'), anything else by its top-level name ('numpy').
  Function-level imports count, relative ones are resolved, and `import a.b` counts a.b and the packages above it
  whose __init__ Python runs for it."""
  files = {_module_name(root, f): f for p in packages for f in sorted((root / p).rglob("*.py"))}
  graph: dict[str, set[str]] = {}
  for mod, f in files.items():
    pkg = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in _run_imports(ast.parse(f.read_text(), str(f))):
      if isinstance(node, ast.ImportFrom):
        out |= _from_targets(node, mod, pkg, files)
        continue
      for a in node.names:
        out |= {a.name, *_parents_run(a.name, mod)} if a.name.split(".")[0] in packages else {a.name.split(".")[0]}
    graph[mod] = out - {mod}
  return graph


def import_cycles(graph: dict[str, set[str]], keep: Callable[[str], bool] = lambda m: True) -> list[list[str]]:
  """The cycles (strongly connected components of more than one module) among the modules of graph `keep` selects."""
  nodes = [m for m in graph if keep(m)]
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on: set[str] = set()
  out: list[list[str]] = []

  def deps(v: str) -> Iterator[str]:
    return iter(sorted(d for d in graph[v] if d in graph and keep(d)))

  for start in nodes:  # Tarjan's algorithm, iterative
    if start in index:
      continue
    work = [(start, deps(start))]
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
        work.append((w, deps(w)))
      elif w in on:
        low[v] = min(low[v], index[w])
  return sorted(out)


# Cycles that are known and accepted, each with the reason it must stay: {frozenset of its modules: why}. Empty: no
# module of compiler/, viz_server/ or vztrace/ is in an import cycle. A stale entry (no longer a cycle) fails too.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}


def unallowed_cycles(graph: dict[str, set[str]], allowed: dict[frozenset[str], str]) -> list[str]:
  cycles = import_cycles(graph)
  bad = [f"cycle: {' <-> '.join(c)}" for c in cycles if frozenset(c) not in allowed]
  return bad + [f"allowed but no longer a cycle: {sorted(a)}" for a in allowed if sorted(a) not in cycles]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
  return import_graph(ROOT)


def test_graph_reads_every_module_as_python_runs_it(graph):
  assert {m.split(".")[0] for m in graph} == set(PACKAGES) and len(graph) > 100
  assert "compiler.trace.recorder" in graph["compiler.rewrite"]  # `from compiler.trace import recorder`
  assert "compiler.trace" in graph["compiler.rewrite"]  # ... runs compiler/trace/__init__.py first
  assert "compiler" not in graph["compiler.rewrite"]  # ... and compiler/__init__.py, which runs before rewrite anyway
  assert {"vztrace", "vztrace.format"} <= graph["compiler.trace.recorder"]  # function-level imports count
  assert "numpy" in graph["compiler.symbolic"] and "numpy.typing" not in graph["compiler.symbolic"]


def test_no_import_cycles(graph):
  assert unallowed_cycles(graph, ALLOWED_CYCLES) == []


# ---- the packages' directions: viz_server -> vztrace and compiler -> vztrace, vztrace on the standard library only

PACKAGE_MAY_IMPORT = {"compiler": {"vztrace"}, "viz_server": {"vztrace"}, "vztrace": set()}
VIEWER_ONLY = {"viz_server", "flask", "flask_socketio", "werkzeug", "socketio", "engineio"}  # never in the compiler


def package_violations(graph: dict[str, set[str]]) -> list[str]:
  """Imports between the three packages that PACKAGE_MAY_IMPORT does not allow, vztrace's imports from outside the
  standard library, and the compiler's of the viewer's libraries."""
  bad = []
  for mod, deps in sorted(graph.items()):
    top = mod.split(".")[0]
    for dep in sorted(deps):
      other = dep.split(".")[0]
      if other in PACKAGE_MAY_IMPORT and other != top and other not in PACKAGE_MAY_IMPORT[top]:
        bad.append(f"{mod} imports {dep}")
      elif top == "vztrace" and other not in PACKAGE_MAY_IMPORT and other not in sys.stdlib_module_names:
        bad.append(f"{mod} imports {dep} (not the standard library)")
      elif top == "compiler" and other in VIEWER_ONLY:
        bad.append(f"{mod} imports {dep} (the viewer's)")
  return bad


def test_packages_import_one_way(graph):
  assert {"vztrace.format", "vztrace.writer"} <= graph["compiler.trace.recorder"]
  assert "vztrace.reader" in graph["viz_server.store"]
  assert package_violations(graph) == []


# The compiler's pipeline (docs/architecture.md, "Direction of imports"): which layer may import which, function-level
# imports included. Data flows tensor -> schedule -> opt -> codegen -> runtime; compiler.engine, the driver, is the one
# module that puts opt, codegen and runtime together (it reads NOOPT/BEAM, optimizes, gives BEAM the runtime's
# evaluator, compiles), and compiler.realize runs a schedule's kernels on it. The optimizer compiles and runs nothing
# itself, the runtime knows no optimizer; the runtime compiles codegen's Program (as tinygrad's device its renderer).
# Modules outside these layers (uop, dtype, rewrite, symbolic, trace, debug, host: the IR and its tools, the host CPU)
# are free to import; the front end (the Tensor side) is above every layer, none imports it.
PIPELINE_MAY_IMPORT = {
  "realize": {"engine", "schedule", "runtime"},
  "engine": {"opt", "codegen", "runtime"},
  "schedule": {"runtime"},  # runtime.buffer: the Buffers a schedule's kernels read and write
  "opt": set(),
  "codegen": set(),
  "runtime": {"codegen"},
}
FRONT_END = ("tensor", "tensor_mixins", "nn", "gradient", "jit")


def pipeline_layer(mod: str) -> str | None:
  """The pipeline layer of a compiler module ('front end' for the Tensor side), None for the IR and its tools."""
  parts = mod.split(".")
  if len(parts) < 2 or parts[0] != "compiler":
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


# The IR and what every rewrite calls (the recorder, which starts the viewer): the bottom of the compiler, importing
# no other compiler module, so that every layer can import it (UOp.simplify runs the simplifier compiler.symbolic
# registers, `uop.register_simplifier`; the recorder hands the viewer's launcher its `disable`).
IR = {"compiler.dtype", "compiler.uop", "compiler.rewrite", "compiler.symbolic", "compiler.host", "compiler.trace",
      "compiler.trace.recorder", "compiler.trace.launch"}


def ir_upward_imports(graph: dict[str, set[str]]) -> list[str]:
  return [f"{mod} imports {dep}" for mod in sorted(IR & graph.keys()) for dep in sorted(graph[mod])
          if dep.startswith("compiler") and dep not in IR]


def test_pipeline_imports_run_one_way(graph):
  assert "compiler.engine" in graph and graph["compiler.realize"] >= {"compiler.engine"}
  assert layering_violations(graph) == []
  assert graph["compiler.symbolic"] >= {"compiler.uop", "compiler.rewrite"}
  assert ir_upward_imports(graph) == []


def test_the_import_checks_can_fail():
  # a made-up graph with the two imports this layering forbids most: BEAM's timing reaching into the runtime, and the
  # runtime asking the optimizer (function-level, as the old code did), which also make a cycle; and vztrace reaching
  # into the compiler and numpy, the compiler into the viewer
  graph = {"compiler.opt.search": {"compiler.runtime.compiled"}, "compiler.runtime.compiled": {"compiler.opt.search"},
           "compiler.uop": {"flask"}, "vztrace.reader": {"compiler.uop", "numpy", "json"}}
  assert layering_violations(graph) == [
    "compiler.opt.search (opt) imports compiler.runtime.compiled (runtime)",
    "compiler.runtime.compiled (runtime) imports compiler.opt.search (opt)"]
  assert import_cycles(graph) == [["compiler.opt.search", "compiler.runtime.compiled"]]
  assert unallowed_cycles(graph, {frozenset({"compiler.opt.search", "compiler.runtime.compiled"}): "why"}) == []
  assert unallowed_cycles({"a": set()}, {frozenset({"a", "b"}): "why"}) == ["allowed but no longer a cycle: ['a', 'b']"]
  assert package_violations(graph) == [
    "compiler.uop imports flask (the viewer's)", "vztrace.reader imports compiler.uop",
    "vztrace.reader imports numpy (not the standard library)"]
  assert ir_upward_imports({"compiler.uop": {"compiler.symbolic", "compiler.schedule.fuse", "math"}}) == [
    "compiler.uop imports compiler.schedule.fuse"]


def _plant(root: Path, files: dict[str, str]) -> None:
  for name, text in files.items():
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text)


def test_a_planted_cycle_fails_the_check(tmp_path):
  # pkg.a -> pkg.sub.b at module level, pkg.sub.b -> pkg.a inside a function (relative, two dots), pkg.c -> pkg.sub
  # only through the package's __init__, which imports pkg.c back; TYPE_CHECKING imports are never run
  _plant(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg.sub import b\n",
                    "pkg/sub/__init__.py": "from pkg import c\n",
                    "pkg/sub/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n  import pkg.d\n"
                                    "def f():\n  from .. import a\n  return a\n",
                    "pkg/c.py": "import pkg.sub.b\n", "pkg/d.py": "import pkg.sub.b\n"})
  graph = import_graph(tmp_path, ("pkg",))
  assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"} and graph["pkg.sub.b"] == {"typing", "pkg.a"}
  assert graph["pkg.c"] == {"pkg.sub", "pkg.sub.b"} and graph["pkg.sub"] == {"pkg.c"}
  assert unallowed_cycles(graph, {}) == ["cycle: pkg.a <-> pkg.c <-> pkg.sub <-> pkg.sub.b"]
  (tmp_path / "pkg/sub/b.py").write_text("def f():\n  return 1\n")  # the function-level import gone: one cycle left
  assert import_cycles(import_graph(tmp_path, ("pkg",))) == [["pkg.c", "pkg.sub"]]
  (tmp_path / "pkg/sub/__init__.py").write_text("")
  assert import_cycles(import_graph(tmp_path, ("pkg",))) == []


# The viewer's layers that one request for a rewrite's graph goes through (docs/architecture.md, "Following one
# rewrite"), each importing only those below it: the routes (rewrite_routes, and api for /api/boot) read the request
# (request_args), which hands them the app's views, which keep a StepGraphs per rewrite, which asks the replay, the
# layouts, the labels and the caches; nothing reaches back up.
_ABOVE_STEPGRAPHS = {"viz_server.stepgraphs", "viz_server.views", "viz_server.request_args",
                     "viz_server.rewrite_routes", "viz_server.api", "viz_server.app"}
VIEWER_BELOW = {
  **{f"viz_server.{m}": _ABOVE_STEPGRAPHS for m in ("replay", "place", "layout", "labels", "caches", "gate", "cut")},
  "viz_server.stepgraphs": _ABOVE_STEPGRAPHS - {"viz_server.stepgraphs"},
  "viz_server.views": {"viz_server.request_args", "viz_server.rewrite_routes", "viz_server.api", "viz_server.app"},
  "viz_server.request_args": {"viz_server.rewrite_routes", "viz_server.api", "viz_server.app"},
  "viz_server.rewrite_routes": {"viz_server.api", "viz_server.app"},
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


def test_viewer_imports_run_one_way(graph):
  assert graph["viz_server.api"] >= {"viz_server.rewrite_routes", "viz_server.request_args"}
  assert graph["viz_server.rewrite_routes"] >= {"viz_server.request_args"}
  assert graph["viz_server.request_args"] >= {"viz_server.views"}
  assert graph["viz_server.views"] >= {"viz_server.stepgraphs"}
  assert viewer_upward_imports(graph) == []
  assert import_cycles(graph) == []


def test_the_viewer_import_check_can_fail():
  # the step graphs reaching back up into the views for their background gate, as graphview's routes and views did
  graph = {"viz_server.stepgraphs": {"viz_server.views"}, "viz_server.views": {"viz_server.stepgraphs"}}
  assert viewer_upward_imports(graph) == ["viz_server.stepgraphs imports viz_server.views"]
  assert import_cycles(graph) == [["viz_server.stepgraphs", "viz_server.views"]]
