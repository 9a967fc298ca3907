"""The page's ES modules: index.html preloads exactly the modules app.js reaches through its imports."""
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


def test_index_preloads_every_module_app_imports():
  html = (ROOT / "templates" / "index.html").read_text()
  preloaded = set(re.findall(r'<link rel="modulepreload" href="/static/([\w-]+\.js)">', html))
  assert '<script type="module" src="/static/app.js"></script>' in html
  want = reachable("app.js") - {"app.js"}
  assert len(want) > 10 and preloaded == want
  # boot.js (the early /api/boot) is a classic script that blocks the parser: it imports nothing
  assert '<script src="/static/boot.js"></script>' in html
  assert reachable("boot.js") == {"boot.js"}


PANEL_ENTRY = re.compile(r'^\s*id: "([\w-]+)", label: "[^"]*", key: "[^"]*"', re.M)


def test_every_panel_class_has_a_registry_entry():
  """static/panels.js imports each module's *Panel class (a panel module nobody registers is never shown), and the
  page template writes no panel of its own: tabs and containers come from the registry."""
  registry = (ROOT / "static" / "panels.js").read_text()
  classes = {m.group(1): f.name for f in (ROOT / "static").glob("*.js")
             for m in re.finditer(r"^export class (\w+Panel)\b", f.read_text(), re.M)}
  imported = set(re.findall(r'^import \{(\w+Panel)\} from "\./[\w-]+\.js";', registry, re.M))
  assert len(classes) >= 6 and imported == set(classes)
  ids = PANEL_ENTRY.findall(registry)
  assert len(ids) == len(classes) == len(set(ids))
  html = (ROOT / "templates" / "index.html").read_text()
  assert not re.search(r"<[^>]*\bdata-panel\b", html) and 'id="panel-tabs"' in html
