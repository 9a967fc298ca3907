"""The page's ES modules as the server sends them (docs/architecture.md, "First view"): `static/app.js` and every
module it imports are one module script, so the page's first view waits for one script request, not 19 (issue 30:
each request cost the browser's main thread and processes several ms of CPU, the most of the first view's on a
loaded 2-core machine).

- `/static/app.js` is the bundle: each module of app.js's static import closure (and app.js last) in its own function
  scope, in the order ES evaluates them (depth first, in import order); `import {a, b as c} from "./x.js"` becomes
  `const {a, b: c} = <registry>.x` and the module's `export` declarations its returned object's fields. It exports the
  registry.
- `/static/x.js` for a module in the bundle is a re-export of the bundle's instance: `export const {a, b} =
  <registry>.x` after importing the registry from "./app.js", the page's own entry module (the same URL, so the same
  instance). So a module loaded later (a lazy panel's, by `import()`, static/panels.js) or by a test
  (`import("/static/api.js")`) shares the page's modules, their state and classes, as when every file was a module.
- Another module (a lazy panel's, static/panels.js) takes the bundled modules it imports from the registry in the same
  way (`import {<registry>} from "./app.js"`, then `const {a} = <registry>.x` where the import was), not through a
  re-export each: loading it asks for no more than its own file and those of the other modules it imports that are
  not bundled.
- Any other file (boot.js, styles, a module that imports no bundled module) is sent as it is on disk.

Where a bundled module uses an import or export form this does not rewrite (or an import is missing or cyclic), every
module is sent as it is on disk, and the server says why once: the page works as before this, one request a module
(a module outside the bundle with such a form: that file is, and its imports reach the re-exports). What is served
is made again when a file of static/ changes (its size or mtime); making it reads the modules once, O(their bytes)."""
from __future__ import annotations

import hashlib
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

ENTRY = "app"
# the module forms static/'s modules are written in, which the bundles rewrite (the page's, here, and the export's,
# viz_server/export/bundle.py); not `export let`: an import of it is a live binding, which a module that assigns it
# again would tell from the bundle's copy
IMPORT = re.compile(r'^import \{([^}]*)\} from "\./([a-z_]+)\.js";[ \t]*$', re.M)
EXPORT = re.compile(r"^export (async function|function|class|const) ([A-Za-z_$][\w$]*)", re.M)
DYNAMIC = re.compile(r'\bimport\("\./([a-z_]+)\.js"\)')  # a lazy panel's module (static/panels.js)
OTHER_FORM = re.compile(r"^\s*(import|export)\b", re.M)
# the bundle's registry of module objects: a name no module declares (a module's own `modules` would shadow it)
REGISTRY = "__tinyvizModules"


class NotBundled(Exception):
  """static/'s modules cannot be bundled (the reason); they are served as they are."""


@dataclass(frozen=True)
class Served:
  """What the server sends for the bundled modules: name -> (text, etag)."""
  files: dict[str, tuple[bytes, str]]


def closure(static: Path, entry: str, dynamic: bool = False) -> tuple[list[str], dict[str, str]]:
  """The modules entry reaches by static imports (and, dynamic: by `import("./x.js")` too), in ES evaluation order
  (a module after what it imports, entry last), and their texts; raises NotBundled."""
  texts: dict[str, str] = {}
  order: list[str] = []
  state: dict[str, int] = {}  # 1: being visited, 2: done

  def visit(name: str) -> None:
    if state.get(name) == 2:
      return
    if state.get(name) == 1:
      raise NotBundled(f"static/{name}.js is part of an import cycle")
    path = static / f"{name}.js"
    if not path.is_file():
      raise NotBundled(f"static/{name}.js is imported but missing")
    text = texts[name] = path.read_text(encoding="utf-8")
    if OTHER_FORM.search(IMPORT.sub("", EXPORT.sub("", text))):
      raise NotBundled(f"static/{name}.js has an import or export form the bundle does not rewrite")
    state[name] = 1
    for dep in [m.group(2) for m in IMPORT.finditer(text)] + (DYNAMIC.findall(text) if dynamic else []):
      visit(dep)
    state[name] = 2
    order.append(name)

  visit(entry)
  return order, texts


def scoped(name: str, text: str, registry: str = REGISTRY) -> tuple[str, list[str]]:
  """Module `name` as a statement of a bundle, its body in a function scope whose returned object is
  `registry.name` (`import {a, b as c} from "./x.js"` read as `const {a, b: c} = registry.x`, its `export`
  declarations returned), and the names it exports."""
  names = [m.group(2) for m in EXPORT.finditer(text)]
  body = IMPORT.sub(lambda m: f"const {{{m.group(1).replace(' as ', ': ')}}} = {registry}.{m.group(2)};", text)
  body = EXPORT.sub(lambda m: f"{m.group(1)} {m.group(2)}", body)
  return f"{registry}.{name} = (() => {{\n{body}\nreturn {{{', '.join(names)}}};\n}})();", names


def _etag(data: bytes) -> str:
  return hashlib.blake2b(data, digest_size=12).hexdigest()


def build(static: Path, entry: str = ENTRY) -> Served:
  """The bundle (served as entry's file) and a re-export for each other module in it; raises NotBundled."""
  order, texts = closure(static, entry)
  parts = [f"// static/{entry}.js and the modules it imports, one module (viz_server/pagejs.py)",
           f"const {REGISTRY} = {{}};"]
  exports: dict[str, list[str]] = {}
  for name in order:
    part, exports[name] = scoped(name, texts[name])
    parts.append(part)
  parts.append(f"export {{{REGISTRY}}};\n")
  files = {entry: "\n".join(parts)}
  for name in order[:-1]:
    shim = f'import {{{REGISTRY}}} from "./{entry}.js";\n'
    if exports[name]:
      shim += f"export const {{{', '.join(exports[name])}}} = {REGISTRY}.{name};\n"
    files[name] = f"// static/{name}.js as the bundle (static/{entry}.js) holds it (viz_server/pagejs.py)\n" + shim
  for path in sorted(static.glob("*.js")):
    name = path.name[:-3]
    if name not in exports:
      got = _outside(path.read_text(encoding="utf-8"), exports)
      if got is not None:
        files[name] = got
  return Served({k: (v.encode(), _etag(v.encode())) for k, v in files.items()})


def _outside(text: str, bundled: dict[str, list[str]]) -> str | None:
  """A module outside the bundle with its imports of bundled modules taken from the registry (None: it has none, or a
  form this does not rewrite: sent as it is, its imports then reach the re-exports)."""
  if OTHER_FORM.search(IMPORT.sub("", EXPORT.sub("", text))):
    return None
  hit = False

  def rewrite(m: re.Match) -> str:
    nonlocal hit
    if m.group(2) not in bundled:
      return m.group(0)
    hit = True
    return f"const {{{m.group(1).replace(' as ', ': ')}}} = {REGISTRY}.{m.group(2)};"
  body = IMPORT.sub(rewrite, text)
  # (ES hoists imports: the rewritten ones are at the top of static/'s modules, before any code that uses them)
  return f'import {{{REGISTRY}}} from "./{ENTRY}.js";\n' + body if hit else None


_FOLDERS: dict[Path, PageModules] = {}
_FOLDERS_LOCK = threading.Lock()


def page_modules(static: Path) -> PageModules:
  """The PageModules of a static folder, one per folder in the process (apps serving the same files share it)."""
  with _FOLDERS_LOCK:
    got = _FOLDERS.get(static)
    if got is None:
      got = _FOLDERS[static] = PageModules(static)
    return got


class PageModules:
  """The modules of one static folder as served, made when first asked and again when a file there changed."""

  def __init__(self, static: Path) -> None:
    self.static = static
    self.lock = threading.Lock()
    self.key: tuple | None = None
    self.served: Served | None = None
    self.why: str | None = None  # why the modules are served as they are (None: bundled)

  def _key(self) -> tuple:
    stats = []
    for p in sorted(self.static.glob("*.js")):
      try:
        st = p.stat()
      except OSError:  # removed meanwhile: the next look sees the folder without it
        continue
      stats.append((p.name, st.st_mtime_ns, st.st_size))
    return tuple(stats)

  def get(self, filename: str) -> tuple[bytes, str] | None:
    """(text, etag) the server sends for static/filename, or None: send the file as it is."""
    if not filename.endswith(".js") or "/" in filename:
      return None
    key = self._key()
    with self.lock:
      if key != self.key:
        self.key = key
        try:
          self.served, self.why = build(self.static), None
        except (NotBundled, OSError, UnicodeDecodeError) as e:
          self.served, self.why = None, str(e)
          print(f"tinyviz: WARNING: the page's modules are served one by one: {e}", file=sys.stderr, flush=True)
      served = self.served
    return None if served is None else served.files.get(filename[:-3])

  def warm(self) -> None:
    """Make what is served now, in the background, unless it was made (the first page load need not wait ~20 ms)."""
    if self.key is None:
      threading.Thread(target=self.get, args=(f"{ENTRY}.js",), name="tinyviz-pagejs", daemon=True).start()
