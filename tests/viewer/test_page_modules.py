"""The first view's requests (issue 30): the page's modules as one script (viz_server/pagejs.py), boot.js inline in the
page with its CSP hash, and the boot answer kept for an ended trace."""
import base64
import hashlib
import json
import os
import re
import shutil

import pytest
from support.server_helpers import write_kernel_trace

from viz_server import api, caches, pagejs
from viz_server.app import create_app, package_dir
from viz_server.pagejs import IMPORT, REGISTRY, PageModules, build

STATIC = package_dir("static")


def _closure(entry="app"):
  seen, todo = set(), [entry]
  while todo:
    m = todo.pop()
    if m not in seen:
      seen.add(m)
      todo += [x.group(2) for x in IMPORT.finditer((STATIC / f"{m}.js").read_text())]
  return seen


def _exports(name):
  return re.findall(r"^export (?:async function|function|class|const) ([A-Za-z_$][\w$]*)",
                    (STATIC / f"{name}.js").read_text(), re.M)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
  d = tmp_path_factory.mktemp("pages")
  write_kernel_trace(d / "k.vztrace")
  return create_app([d / "k.vztrace"], follow=False).test_client()


def test_app_js_is_every_module_it_imports_in_one_script(client):
  bundled = _closure()
  assert len(bundled) > 10 and {"app", "api", "graph", "summary", "sidebar"} <= bundled
  r = client.get("/static/app.js")
  text = r.get_data(as_text=True)
  assert r.status_code == 200 and r.mimetype == "text/javascript" and r.headers["Cache-Control"] == "no-cache"
  # no static import left: the page asks for no other module before its first view
  assert not re.search(r"^\s*import\s", text, re.M)
  # each module once, after what it imports (as ES evaluates them), app.js last
  order = re.findall(rf"^{REGISTRY}\.(\w+) = \(\(\) => \{{$", text, re.M)
  assert set(order) == bundled and len(order) == len(bundled) and order[-1] == "app"
  for name in order:
    for m in IMPORT.finditer((STATIC / f"{name}.js").read_text()):
      assert order.index(m.group(2)) < order.index(name)
  assert text.rstrip().endswith(f"export {{{REGISTRY}}};")
  # unchanged files: the same answer, and a 304 to a browser that has it
  again = client.get("/static/app.js", headers={"If-None-Match": r.headers["ETag"]})
  assert again.status_code == 304


def test_a_bundled_modules_own_url_re_exports_the_bundles_instance(client):
  for name in sorted(_closure() - {"app"}):
    text = client.get(f"/static/{name}.js").get_data(as_text=True)
    assert f'import {{{REGISTRY}}} from "./app.js";' in text, name
    names = _exports(name)
    if names:  # exactly the names the module exports
      got = re.search(rf"^export const \{{([^}}]*)\}} = {REGISTRY}\.{name};$", text, re.M).group(1)
      assert got.split(", ") == names, name


def test_a_lazy_module_takes_the_bundled_modules_from_the_bundle(client):
  bundled = _closure()
  lazy = re.findall(r'import\("\./(\w+)\.js"\)', (STATIC / "panels.js").read_text())
  assert {"diff", "timeline", "kernel"} <= set(lazy)
  for name in lazy:
    src = (STATIC / f"{name}.js").read_text()
    text = client.get(f"/static/{name}.js").get_data(as_text=True)
    assert text.startswith(f'import {{{REGISTRY}}} from "./app.js";\n'), name
    for m in IMPORT.finditer(src):
      if m.group(2) in bundled:  # taken from the registry, where the import was
        assert m.group(0) not in text and f"= {REGISTRY}.{m.group(2)};" in text
      else:  # another lazy module: imported as it is
        assert m.group(0) in text
  # what is not a module importing bundled ones is the file on disk
  for f in ("boot.js", "style.css", "favicon.svg"):
    assert client.get(f"/static/{f}").get_data() == (STATIC / f).read_bytes()
  assert client.get("/static/../pyproject.toml").status_code == 404
  assert client.get("/static/nothing.js").status_code == 404


def test_modules_the_bundle_cannot_rewrite_are_sent_as_they_are(tmp_path, capsys):
  static = tmp_path / "static"
  shutil.copytree(STATIC, static)
  mods = PageModules(static)
  assert mods.get("app.js") is not None and mods.why is None
  # a form the bundle does not rewrite: every module as it is (None: the file), said once
  text = (static / "dom.js").read_text()
  (static / "dom.js").write_text("export let later = 1;\n" + text)  # (a live binding: not copied)
  assert mods.get("app.js") is None and mods.get("api.js") is None and "dom.js" in mods.why
  assert "served one by one" in capsys.readouterr().err
  # put back (another size): bundled again
  (static / "dom.js").write_text(text + "\n")
  got = mods.get("app.js")
  assert got is not None and mods.why is None
  # an edit is served at once: the bundle is made again when a file changes
  (static / "legend.js").write_text((static / "legend.js").read_text() + "\n// edited\n")
  assert b"// edited" in mods.get("app.js")[0] and mods.get("app.js")[1] != got[1]
  (static / "legend.js").unlink()
  with pytest.raises(pagejs.NotBundled, match="missing"):
    build(static)


def test_the_page_has_boot_js_inline_with_its_hash_in_the_csp(client):
  r = client.get("/")
  page = r.get_data(as_text=True)
  boot = (STATIC / "boot.js").read_text()
  assert f'<script id="tinyviz-boot">{boot}</script>' in page and 'src="/static/boot.js"' not in page
  digest = f"'sha256-{base64.b64encode(hashlib.sha256(boot.encode()).digest()).decode()}'"
  header = dict(d.strip().split(" ", 1) for d in r.headers["Content-Security-Policy"].split(";"))
  meta = re.search(r'<meta http-equiv="Content-Security-Policy"\s+content="([^"]*)">', page).group(1)
  meta = dict(d.strip().split(" ", 1) for d in meta.split(";") if d.strip())
  assert header["script-src"] == meta["script-src"] == f"'self' {digest}"
  assert "unsafe" not in r.headers["Content-Security-Policy"] and header["default-src"] == "'self'"
  # the only script the page runs besides it is the module
  want = ['<script id="tinyviz-boot">', '<script type="module" src="/static/app.js">']
  assert re.findall(r"<script\b[^>]*>", page) == want


def test_an_ended_traces_boot_answer_is_kept(tmp_path, monkeypatch):
  monkeypatch.setattr(caches, "ANSWERS", caches.answer_cache())  # (what other tests cached)
  write_kernel_trace(tmp_path / "a.vztrace")
  app = create_app([tmp_path / "a.vztrace"], follow=False)
  c = app.test_client()
  made = []
  real = api._boot_head
  monkeypatch.setattr(api, "_boot_head", lambda *a: made.append(a[1:]) or real(*a))
  first = c.get("/api/boot?compact=1&pack=1").get_data()
  assert c.get("/api/boot?compact=1&pack=1").get_data() == first and len(made) == 1
  # another link, another answer; the one kept before stays
  link = json.loads(first)
  deep = f"/api/boot?t={link['trace']}&ctx={link['ctx']}&rw={link['rw']}&compact=1&pack=1"
  d = c.get(deep).get_json()
  assert d["summary"] is None and d["rw"] == link["rw"] and len(made) == 2
  assert c.get("/api/boot?compact=1&pack=1").get_data() == first and len(made) == 2
  # the graph is not kept with it: compact or not, as asked
  full = c.get("/api/boot?pack=1").get_json()
  assert len(made) == 2 and full == {**json.loads(first), "graph": full["graph"]}
  assert [n["id"] for n in full["graph"]["nodes"]] == [n["id"] for n in json.loads(first)["graph"]["nodes"]]
  # another app makes its own (its trace ids are its store's), the same as made afresh
  fresh = create_app([tmp_path / "a.vztrace"], follow=False).test_client()
  assert fresh.get("/api/boot?compact=1&pack=1").get_data() == first and len(made) == 3
  # a new trace served: the trace list changed, so the answer is made again
  made.clear()
  write_kernel_trace(tmp_path / "b.vztrace")
  app.extensions["tinyviz"]["store"].add_path(tmp_path / "b.vztrace")
  b = c.get("/api/boot?compact=1&pack=1").get_json()
  assert len(made) == 1 and len(b["traces"]) == 2 and b["trace"] == b["traces"][-1]["id"]
  # kept in the answers' cache, under the app's key, counted in its bytes (the viewer's one memory budget)
  mine = [k for k in caches.ANSWERS.items if k[0] is app.extensions["tinyviz"]["key"]]
  assert len(mine) == 3 and all(k[1] == "boot" for k in mine)
  assert caches.ANSWERS.used >= sum(len(caches.ANSWERS.get(k)[0]) for k in mine) > 0


def test_a_live_traces_boot_answer_is_made_each_time(tmp_path, monkeypatch):
  write_kernel_trace(tmp_path / "a.vztrace")
  app = create_app([tmp_path / "a.vztrace"], follow=False)
  tr = next(iter(app.extensions["tinyviz"]["store"].traces.values()))
  monkeypatch.setattr(type(tr), "live", property(lambda self: True))
  made = []
  real = api._boot_head
  monkeypatch.setattr(api, "_boot_head", lambda *a: made.append(1) or real(*a))
  c = app.test_client()
  c.get("/api/boot")
  c.get("/api/boot")
  assert len(made) == 2


def test_every_static_module_name_is_one_the_bundle_can_name():
  """The registry's keys are the files' names: each a JS identifier (IMPORT takes [a-z_]+ only)."""
  for f in os.listdir(STATIC):
    if f.endswith(".js"):
      assert re.fullmatch(r"[a-z_]+\.js", f), f
