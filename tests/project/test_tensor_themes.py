"""The Tensor front end by theme (docs/architecture.md, layout): compiler/tensor.py keeps the core, each theme is one
module of compiler/tensor_mixins that never imports compiler.tensor (function-level imports included: that is what
keeps the front end free of import cycles), and the argument helpers are written once, in tensor_mixins/_args.py."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THEMES = {"autograd", "creation", "elementwise", "indexing", "movement", "nn", "reduce"}
# the helpers that were written several times and drifted apart, under their old and new names
HELPERS = {"_is_int", "is_int", "_tuple", "make_tuple", "_pads", "pool_pads", "_shape_arg", "shape_arg", "to_dtype",
           "broadcast_shape", "_dims"}


def imported_modules(source: str) -> set[str]:
  """Every module an import statement of source names, at any depth (`from a import b` counts a and a.b)."""
  out = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      out |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
      out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
  return out


def helper_definitions(root: Path) -> dict[str, list[str]]:
  """{helper name: the front end's files (root/compiler: tensor*.py, tensor_mixins/, nn/, jit.py) that define it as a
  module-level function}. (symbolic's _is_int of a UOp and dtypes.is_int of a DType are other things.)"""
  defs: dict[str, list[str]] = {}
  c = root / "compiler"
  for f in sorted([*c.glob("tensor*.py"), *c.glob("tensor_mixins/**/*.py"), *c.glob("nn/**/*.py"), *c.glob("jit.py")]):
    for node in ast.parse(f.read_text()).body:
      if isinstance(node, ast.FunctionDef) and node.name in HELPERS:
        defs.setdefault(node.name, []).append(f.relative_to(root).as_posix())
  return defs


def test_one_module_per_theme_and_no_old_split_modules():
  mixins = {p.stem for p in (ROOT / "compiler" / "tensor_mixins").glob("*.py")}
  assert mixins - {"__init__", "_args"} == THEMES
  assert not [p.name for p in (ROOT / "compiler").glob("tensor_*.py")]  # tensor_nn, tensor_index, tensor_trig: gone


def test_mixins_never_import_the_tensor():
  bad = [p.name for p in (ROOT / "compiler" / "tensor_mixins").glob("*.py")
         if {"compiler.tensor", "compiler.Tensor"} & imported_modules(p.read_text())]
  assert bad == []


def test_argument_helpers_are_defined_once():
  defs = helper_definitions(ROOT)
  assert {n: fs for n, fs in defs.items() if len(fs) > 1} == {}
  assert set(defs) >= {"is_int", "make_tuple", "pool_pads", "shape_arg", "to_dtype"}
  assert {fs[0] for n, fs in defs.items() if n != "_dims"} == {"compiler/tensor_mixins/_args.py"}


def test_the_checks_can_fail(tmp_path):
  assert "compiler.tensor" in imported_modules("def f():\n  from compiler.tensor import Tensor\n")
  assert "compiler.tensor" in imported_modules("import compiler.tensor\n")
  (tmp_path / "compiler" / "nn").mkdir(parents=True)
  (tmp_path / "compiler" / "tensor.py").write_text("def _is_int(x):\n  return x\n")
  (tmp_path / "compiler" / "nn" / "b.py").write_text("def _is_int(x):\n  return x\n\n\nclass M:\n  def is_int(self):\n"
                                                    "    return 1\n")
  assert helper_definitions(tmp_path) == {"_is_int": ["compiler/nn/b.py", "compiler/tensor.py"]}
