"""docs/architecture.md stays true to the code where a newcomer starts: the files that follow one rewrite from
`Tensor.relu()` to the drawn node (at most 12, each naming what it holds), and no function longer than 80 lines."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 80


def _path_items() -> list[str]:
  doc = (ROOT / "docs" / "architecture.md").read_text()
  section = doc.split("## Following one rewrite, file by file", 1)[1].split("\n## ", 1)[0]
  return re.findall(r"^\d+\. (.+?)(?=^\d+\. |\Z)", section, flags=re.S | re.M)


def test_a_rewrite_is_followed_through_at_most_12_files_that_hold_what_the_doc_says():
  items = _path_items()
  assert 8 <= len(items) <= 12, f"{len(items)} files on the path"
  for item in items:
    path, rest = re.match(r"`([^`]+)`: (.*)", item, flags=re.S).groups()
    text = (ROOT / path).read_text()
    names = [n for n in re.findall(r"`([A-Za-z_][\w.]*)", rest) if "/" not in n and not n.endswith((".py", ".js"))]
    for part in {p for n in names for p in n.split(".")}:  # each name the item gives is defined or used in that file
      assert re.search(rf"\b{re.escape(part)}\b", text), f"{path} has no {part}"


def test_the_page_module_that_asks_for_a_steps_graph_draws_it():
  graph_js = (ROOT / "static" / "graph.js").read_text()
  assert re.search(r'^import \{[^}]*\bapi\b[^}]*\} from "\./api\.js"', graph_js, flags=re.M)
  assert "class StepGraphView extends GraphView" in graph_js


def _python_functions():
  for root in ("compiler", "viz_server", "vztrace", "bench", "examples", "tests"):
    for path in sorted((ROOT / root).rglob("*.py")):
      for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
          yield f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1


_JS_START = re.compile(r"(function\s*\*?\s*[\w$]*\s*\([^)]*\)\s*\{|^\s*(?:async\s+|static\s+|get\s+|set\s+)*[\w$]+\s*"
                       r"\([^)]*\)\s*\{|=>\s*\{)")


def _js_functions():
  """(where, lines) of each function, method and braced arrow function: from its opening brace to the brace that
  closes it (braces inside strings are rare enough in static/ that counting them all is a fair bound)."""
  for path in sorted((ROOT / "static").glob("*.js")):
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines):
      m = _JS_START.search(line)
      if not m or line.strip().startswith(("if", "for", "while", "switch", "catch", "//", "}")):
        continue
      depth, j, text = 0, i, line[m.end() - 1:]
      while j < len(lines):
        for ch in text:
          depth += (ch == "{") - (ch == "}")
          if depth == 0:
            break
        if depth == 0:
          break
        j += 1
        text = lines[j] if j < len(lines) else ""
      yield f"{path.relative_to(ROOT)}:{i + 1}", j - i + 1


def test_no_function_is_longer_than_80_lines():
  long = [f"{where} ({n} lines)" for where, n in [*_python_functions(), *_js_functions()] if n > MAX_FUNCTION_LINES]
  assert not long, "functions over 80 lines: " + ", ".join(long)


def test_the_length_check_sees_long_functions():
  # the checks above would pass on anything if they found no functions, or measured them wrong
  py, js = dict(_python_functions()), dict(_js_functions())
  assert len(py) > 1000 and len(js) > 200
  assert max(py.values()) > 40 and max(js.values()) > 40
