"""The viewer's UI (static/*.js, ES modules) as one module script the export's page inlines (page.py): no file is
loaded, so every `import` becomes a lookup in the modules the script defined before."""
from __future__ import annotations

import re
from pathlib import Path

from viz_server.export import ExportError

# static/*.js import forms the bundler understands (anything else in a module is an error, not a silent miss)
_IMPORT = re.compile(r'^import \{([^}]*)\} from "\./([a-z_]+)\.js";\s*$', re.M)
_EXPORT = re.compile(r"^export (async function|function|class|const|let) ([A-Za-z_$][\w$]*)", re.M)
# a module loaded when it is needed (static/panels.js's lazy panels): here already defined, so a resolved promise
_DYNAMIC = re.compile(r'\bimport\("\./([a-z_]+)\.js"\)')


def bundle(static: Path, entry: str = "app") -> str:
  """The UI's ES modules as one module script: each module's body in its own function scope, in dependency order;
  `import {a, b as c} from "./x.js"` becomes `const {a, b: c} = modules.x`, `export` declarations are returned, and
  `import("./x.js")` becomes `Promise.resolve(modules.x)` (x is defined before the module that asks for it)."""
  sources: dict[str, str] = {}
  deps: dict[str, list[str]] = {}

  def load(name: str) -> None:
    if name in sources:
      return
    path = static / f"{name}.js"
    if not path.is_file():
      raise ExportError(f"static/{name}.js is imported but missing")
    text = path.read_text(encoding="utf-8")
    sources[name] = text
    deps[name] = [m.group(2) for m in _IMPORT.finditer(text)] + _DYNAMIC.findall(text)
    if re.search(r"^\s*(import|export)\b", _IMPORT.sub("", _EXPORT.sub("", text)), re.M):
      raise ExportError(f"static/{name}.js: an import/export form the exporter does not bundle")
    for d in deps[name]:
      load(d)

  load(entry)
  order: list[str] = []
  state: dict[str, int] = {}

  def visit(name: str) -> None:
    if state.get(name) == 2:
      return
    if state.get(name) == 1:
      raise ExportError(f"static/{name}.js is part of an import cycle")
    state[name] = 1
    for d in deps[name]:
      visit(d)
    state[name] = 2
    order.append(name)

  visit(entry)
  parts = ["const modules = {};"]
  for name in order:
    text = sources[name]
    exported = [m.group(2) for m in _EXPORT.finditer(text)]
    body = _IMPORT.sub(lambda m: "const {" + m.group(1).replace(" as ", ": ") + "} = modules." + m.group(2) + ";",
                       text)
    body = _EXPORT.sub(lambda m: m.group(1) + " " + m.group(2), body)
    body = _DYNAMIC.sub(lambda m: f"Promise.resolve(modules.{m.group(1)})", body)
    parts.append(f"modules.{name} = (() => {{\n{body}\nreturn {{{', '.join(exported)}}};\n}})();")
  # without comment lines and indentation (a fifth of the size; no module has a multi-line string literal)
  out = "\n".join(t for t in (line.strip() for line in "\n".join(parts).split("\n")) if t and not t.startswith("//"))
  if "`" in "".join(line for line in out.split("\n") if line.count("`") % 2):
    raise ExportError("a multi-line template literal in the UI: the bundler cannot strip indentation")
  if re.search(r"</script|<!--", out, re.I):
    raise ExportError("the UI's source contains '</script' or '<!--', which cannot be inlined")
  return out
