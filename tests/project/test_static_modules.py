"""The page's ES modules: index.html loads app.js (sent as the bundle of what it imports) and boot.js."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORT = re.compile(r'^import\s.*?from\s+"\./([\w-]+\.js)";', re.M | re.S)


def reachable(entry: str) -> set[str]:
  seen, todo = set(), [entry]
  while todo:
    m = todo.pop()
    if m in seen:
      continue
    seen.add(m)
    todo += IMPORT.findall((ROOT / "static" / m).read_text())
  return seen


def test_index_loads_app_js_and_boot_js_only():
  """The page's scripts: boot.js (the early /api/boot; a classic script that blocks the parser, which the server sends
  inline) and app.js, which the server sends as one module holding every module it imports (viz_server/pagejs.py,
  issue 30): nothing is preloaded, each preload was a request of its own before the first view."""
  html = (ROOT / "templates" / "index.html").read_text()
  assert '<script type="module" src="/static/app.js"></script>' in html
  assert "modulepreload" not in html
  assert len(reachable("app.js")) > 10
  assert '<script src="/static/boot.js"></script>' in html
  assert reachable("boot.js") == {"boot.js"}


PANEL_ENTRY = re.compile(r'^\s*id: "([\w-]+)", label: "[^"]*", key: "[^"]*"', re.M)


# a lazy entry (static/panels.js): its module loaded by import() when needed, its class taken from that module
LAZY_ENTRY = re.compile(r'lazy: \(\) => import\("\./([\w-]+\.js)"\),\s*(?://[^\n]*\s*)?'
                        r'create: \(el, app, \{(\w+Panel)\}\)', re.S)


def test_every_panel_class_has_a_registry_entry():
  """static/panels.js imports each module's *Panel class, or loads its module lazily and takes the class from it (a
  panel module nobody registers is never shown), and the page template writes no panel of its own: tabs and
  containers come from the registry."""
  registry = (ROOT / "static" / "panels.js").read_text()
  classes = {m.group(1): f.name for f in (ROOT / "static").glob("*.js")
             for m in re.finditer(r"^export class (\w+Panel)\b", f.read_text(), re.M)}
  imported = set(re.findall(r'^import \{(\w+Panel)\} from "\./[\w-]+\.js";', registry, re.M))
  lazy = {cls: module for module, cls in LAZY_ENTRY.findall(registry)}
  assert all(classes[cls] == module for cls, module in lazy.items())
  assert len(classes) >= 6 and imported | set(lazy) == set(classes) and not imported & set(lazy)
  ids = PANEL_ENTRY.findall(registry)
  assert len(ids) == len(classes) == len(set(ids))
  html = (ROOT / "templates" / "index.html").read_text()
  assert not re.search(r"<[^>]*\bdata-panel\b", html) and 'id="panel-tabs"' in html


def test_the_lazy_panels_load_after_the_first_view():
  """The panels the first view does not show come by import() (issue 30): not reached by the static imports (so not
  in the bundle the server sends as app.js); the landing view's panels (summary, step) stay static."""
  registry = (ROOT / "static" / "panels.js").read_text()
  lazy = {module for module, _ in LAZY_ENTRY.findall(registry)}
  assert {"diff.js", "kernel.js", "source.js", "runs.js", "timeline.js"} <= lazy
  assert not (lazy & reachable("app.js"))
  assert {"summary.js", "step.js", "sidebar.js"} <= reachable("app.js")
