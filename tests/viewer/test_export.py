"""The single-file HTML export (viz_server/export/): what it embeds against the API, redaction, escaping, and the
bundled UI. The page itself is opened from file:// in tests/browser/test_ui_export.py."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import hostile_traces as ht
from support.export_helpers import (
  embedded,
  inflated,
)
from support.trace_tools_helpers import record_small

from viz_server.app import package_dir
from viz_server.export import ExportError
from viz_server.export.bundle import bundle
from viz_server.export.command import export
from viz_server.export.pack import FIELDS
from viz_server.export.page import BOOT, _sha256
from viz_server.export.redact import redact_path
from viz_server.offline import OfflineApi

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_trace(trace):
  return record_small(trace)






def test_answers_are_the_apis(small_trace, tmp_path):
  out = tmp_path / "x.html"
  export(small_trace, out)
  data = embedded(out.read_text())
  with OfflineApi(small_trace) as api:
    t = api.t
    assert data["answers"]["/api/traces"] == api.get("/api/traces")
    for rest in ("contexts", "runs", "timeline"):
      assert data["answers"][f"/api/traces/{t}/{rest}"] == api.trace_get(rest)
    contexts = api.trace_get("contexts")
    for c in contexts:
      for rw in c["rewrites"]:
        assert data["answers"][f"/api/traces/{t}/rewrites/{rw['id']}"] == api.trace_get(f"rewrites/{rw['id']}")
        assert len(data["graphs"][str(rw["id"])]["deltas"]) == rw["matches"]
    for k in api.trace_get("kernels"):
      body = api.trace_get(f"contexts/{k['ctx']}/kernel")
      got = data["answers"][f"/api/traces/{t}/contexts/{k['ctx']}/kernel"]
      assert got == {**body, "sources": [{**s, "html": None} for s in body["sources"]]}  # plain text sources
    rw = max((rw for c in contexts for rw in c["rewrites"]), key=lambda r: r["matches"])
    # graph nodes keep their fixed fields once per id: as the API's step-0 graph has them
    g = api.trace_get(f"rewrites/{rw['id']}/graph?step=0")
    for n in g["nodes"]:
      assert data["statics"][str(n["id"])] == [n.get(k) for k in FIELDS]


def test_page_is_self_contained_with_a_strict_csp(small_trace, tmp_path):
  out = tmp_path / "x.html"
  export(small_trace, out)
  page = out.read_text()
  csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page).group(1)
  assert "default-src 'none'" in csp and "connect-src 'none'" in csp and "'unsafe" not in csp
  scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
  assert [a for a, _ in scripts] == [' type="application/json" id="tinyviz-export"', ' type="module"']
  # the policy allows the boot script and the UI's module it inflates and inserts, by their hashes, and nothing else
  ui = inflated(page, "ui")
  assert f"script-src {_sha256(scripts[1][1])} {_sha256(ui)};" in csp
  assert scripts[1][1] == BOOT.read_text()
  assert not re.search(r'\b(src|href)="(?!data:)', page)  # nothing loaded from anywhere
  assert "modules.app = " in ui and "tinyvizOffline" in ui


def test_script_end_in_a_trace_string_cannot_break_out(tmp_path):
  evil = "</script><script>window.__pwned=1</script><!--"
  path = ht.write(tmp_path / "e.vztrace", [[ht.meta(), ht.ctx(0, name=evil), ht.node(0, arg=evil),
                                             ht.node(1, "ADD", [0, 0]), ht.node(2), {**ht.PATTERN, "src": evil},
                                             {**ht.rw_begin(0, 1), "name": evil},
                                             {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 2, "dt": 5},
                                             ht.rw_end(0, 2, 1), ht.END]])
  out = tmp_path / "e.html"
  export(path, out)
  page = out.read_text()
  assert page.count("<script") == 2 and page.count("</script>") == 2
  assert "__pwned" not in page.replace(embedded_text(page), "")  # only inside the (deflated) data
  data = embedded(page)
  assert data["answers"]["/api/traces/0/contexts"][0]["name"] == evil


def embedded_text(page: str) -> str:
  return re.search(r'id="tinyviz-export">(.*?)</script>', page, re.S).group(1)


def test_redaction(small_trace, tmp_path):
  out = tmp_path / "r.html"
  export(small_trace, out, redact=["paths", "source", "argv", "host"])
  page = out.read_text()
  data = embedded(page)
  text = json.dumps(data)
  assert str(ROOT) not in text and str(small_trace.parent) not in text
  meta = data["answers"]["/api/traces"][0]["meta"]
  assert meta["argv"] == [] and not {"host", "pid", "user", "cwd"} & meta.keys()
  files = re.findall(r'"file": "([^"]*)"', text)
  # relative to the trace's cwd: the compiler's rules and passes, and the kernels' call sites (the test's own lines)
  assert files and all(f.startswith(("compiler/", "tests/")) for f in files)
  assert "tests/support/trace_tools_helpers.py" in files
  pats = [v for k, v in data["answers"].items() if "/patterns/" in k]
  assert pats and all(p["src"] is None and p["html"] == "" for p in pats)
  kernels = [v for k, v in data["answers"].items() if k.endswith("/kernel")]
  assert kernels and all(k["sources"] == [] for k in kernels)
  assert "redacted: argv, host, paths, source" in page
  assert data["redacted"] == ["argv", "host", "paths", "source"]
  assert re.fullmatch(r"<[0-9a-f]{12}>/x\.py", redact_path("/elsewhere/lib/x.py", "/work"))  # a keyed token
  with pytest.raises(ExportError, match="cannot redact"):
    export(small_trace, out, redact=["secrets"])


def test_context_filter(small_trace, tmp_path):
  with OfflineApi(small_trace) as api:
    contexts = api.trace_get("contexts")
  kernel = next(c for c in contexts if c["kind"] == "kernel")
  out = tmp_path / "k.html"
  export(small_trace, out, names=[kernel["name"]])
  data = embedded(out.read_text())
  shown = data["answers"]["/api/traces/0/contexts"]
  assert {c["id"] for c in shown} == {kernel["id"], kernel["parent"]}  # the kernel and its parent for the tree
  assert next(c for c in shown if c["id"] == kernel["parent"])["rewrites"] == []
  assert set(data["graphs"]) == {str(rw["id"]) for rw in kernel["rewrites"]}
  with pytest.raises(ExportError, match="no context named"):
    export(small_trace, out, names=["nope"])


def test_bundle_refuses_what_it_cannot_bundle(tmp_path):
  static = package_dir("static")
  text = bundle(static)
  assert "modules.app = " in text and "import {" not in text
  (tmp_path / "app.js").write_text('import x from "./y.js";\n')
  with pytest.raises(ExportError, match="import or export form"):
    bundle(tmp_path)


def test_cli(small_trace, tmp_path):
  out = tmp_path / "c.html"
  p = subprocess.run([sys.executable, "-m", "compiler.trace", "export", str(small_trace), "-o", str(out), "--redact",
                      "argv"], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stderr
  assert "redacted: argv" in p.stdout and out.stat().st_size > 0
