"""The viewer's UI (static/*.js, ES modules) as one module script the export's page inlines (page.py): no file is
loaded, so every `import` becomes a lookup in the modules the script defined before. The modules' forms, their order
and each one's rewrite are the page's bundle's (viz_server/pagejs.py); here the lazy panels' modules are in it too."""
from __future__ import annotations

import re
from pathlib import Path

from viz_server.export import ExportError
from viz_server.pagejs import DYNAMIC, NotBundled, closure, scoped


def bundle(static: Path, entry: str = "app") -> str:
  """The UI's ES modules as one module script: each module's body in its own function scope, in dependency order
  (`pagejs.scoped`, with `modules` its registry), and `import("./x.js")` becomes `Promise.resolve(modules.x)` (x is
  defined before the module that asks for it)."""
  try:
    order, texts = closure(static, entry, dynamic=True)
  except NotBundled as e:
    raise ExportError(str(e)) from None
  parts = ["const modules = {};"]
  for name in order:
    part, _ = scoped(name, texts[name], registry="modules")
    parts.append(DYNAMIC.sub(lambda m: f"Promise.resolve(modules.{m.group(1)})", part))
  # without comment lines and indentation (a fifth of the size; no module has a multi-line string literal)
  out = "\n".join(t for t in (line.strip() for line in "\n".join(parts).split("\n")) if t and not t.startswith("//"))
  if "`" in "".join(line for line in out.split("\n") if line.count("`") % 2):
    raise ExportError("a multi-line template literal in the UI: the bundler cannot strip indentation")
  if re.search(r"</script|<!--", out, re.I):
    raise ExportError("the UI's source contains '</script' or '<!--', which cannot be inlined")
  return out
