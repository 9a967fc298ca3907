"""The page's ES modules: index.html preloads exactly the modules app.js reaches through its imports."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
