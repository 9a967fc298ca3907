"""The UI's Export and Compare routes: GET /api/traces/<t>/export answers the file `export` writes (same options),
GET /api/compare answers `compare`'s report; bad options and too-big traces are refused."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.trace_helpers import record
from support.trace_tools_helpers import record_small

from viz_server import compare, share
from viz_server.app import create_app
from viz_server.export.command import export
from viz_server.gate import REQUEST_GATE
from viz_server.store import TraceStore

ROOT = Path(__file__).resolve().parents[2]

STAMP = re.compile(rb"\(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)")  # the export's note says when it was written


@pytest.fixture
def client_for():
  stores = []

  def make(*paths: Path):
    store = TraceStore()
    stores.append(store)
    app = create_app(list(paths), follow=False, allowed_hosts=None, store=store, socketio_client=None)
    return app.test_client(), [e["id"] for e in store.entries()]
  yield make
  for s in stores:
    s.stop()


@pytest.fixture
def small_trace(trace):
  return record_small(trace)


@pytest.mark.parametrize("redact", [[], ["paths", "source", "argv", "host"]])
def test_export_route_is_the_cli_file(small_trace, client_for, tmp_path, redact):
  client, (t,) = client_for(small_trace)
  resp = client.get(f"/api/traces/{t}/export?redact={','.join(redact)}")
  assert resp.status_code == 200, resp.get_data(as_text=True)
  assert resp.mimetype == "text/html"
  disp = resp.headers["Content-Disposition"]
  assert disp.startswith("attachment; filename=") and disp.endswith('.html"')
  out = tmp_path / "cli.html"
  export(small_trace, out, redact=redact)
  assert STAMP.sub(b"", resp.get_data()) == STAMP.sub(b"", out.read_bytes())
  assert resp.headers.get("Content-Security-Policy")  # the app's guards apply to this route too
  note = re.search(rb'<div id="export-note" class="banner">([^<]*)</div>', resp.get_data()).group(1)
  assert (b"redacted: nothing" in note) == (not redact)


def test_export_route_refuses_bad_options_and_big_traces(small_trace, client_for, monkeypatch):
  client, (t,) = client_for(small_trace)
  resp = client.get(f"/api/traces/{t}/export?redact=secrets")
  assert resp.status_code == 400 and "cannot redact secrets" in resp.get_json()["error"]
  assert client.get(f"/api/traces/{t + 99}/export").status_code == 404
  monkeypatch.setattr(share, "MAX_EXPORT_MATCHES", 1)
  resp = client.get(f"/api/traces/{t}/export")
  assert resp.status_code == 413 and "matches" in resp.get_json()["error"]


def test_a_running_exports_progress_is_its_childs_count(small_trace, client_for, monkeypatch):
  """GET /api/exports/<job> answers what the export's child keeps in the file the route named to it (`--progress-file`)
  while it runs, and that none runs before and after. The requests made inside the export's each end their turn at
  the request gate, and the export's its own (the prefetch worker waits while one is counted as served)."""
  client, (t,) = client_for(small_trace)
  before = REQUEST_GATE.serving
  job, seen = "0123abcd0123abcd", {}
  kill = share.Children._kill

  def at_the_childs_end(proc):  # (the child has exited; its job is still named until the request is done)
    note = Path(proc.args[proc.args.index("--progress-file") + 1])
    seen["before"] = client.get(f"/api/exports/{job}").get_json()
    note.write_text("5 9\n")
    seen["during"] = client.get(f"/api/exports/{job}").get_json()
    kill(proc)
  monkeypatch.setattr(share.Children, "_kill", staticmethod(at_the_childs_end))
  idle = {"running": False, "steps": 0, "total": 0}
  assert client.get(f"/api/exports/{job}").get_json() == idle
  assert client.get(f"/api/traces/{t}/export?job={job}").status_code == 200
  # (a trace this small is packed before its child's first count at 500 steps: the count it keeps is the one it told
  # once every step was packed, before writing the page)
  total = seen["before"]["total"]
  assert seen == {"before": {"running": True, "steps": total, "total": total},
                  "during": {"running": True, "steps": 5, "total": 9}} and total > 0
  assert client.get(f"/api/exports/{job}").get_json() == idle
  assert client.get(f"/api/traces/{t}/export?job=../x").status_code == 400
  assert client.get("/api/exports/not-a-job").get_json() == idle
  assert REQUEST_GATE.serving == before


def test_routes_keep_the_host_check(small_trace):
  store = TraceStore()
  try:
    app = create_app([small_trace], follow=False, allowed_hosts=["127.0.0.1"], store=store, socketio_client=None)
    client = app.test_client()
    t = store.entries()[0]["id"]
    for url in (f"/api/traces/{t}/export", f"/api/compare?a={t}&b={t}"):
      assert client.get(url, headers={"Host": "evil.example"}).status_code == 403
    assert client.get(f"/api/compare?a={t}&b={t}", headers={"Host": "127.0.0.1"}).get_json()["same"] is True
  finally:
    store.stop()


def test_download_name_is_plain_ascii():
  class Tr:
    id, name = 3, '../evil"\r\nX-Bad: 1\u202e.vztrace'
  name = share.download_name(Tr(), False)  # type: ignore[arg-type]
  assert re.fullmatch(r"[A-Za-z0-9_.-]+\.html", name) and '"' not in name
  assert share.download_name(Tr(), True) == "trace-3.html"  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def two_traces(tmp_path_factory):
  d = tmp_path_factory.mktemp("cmp_route")
  return record(d / "add.vztrace"), record(d / "mul.vztrace", TEST_OP="mul")


def test_compare_route_is_compare_report(two_traces, client_for):
  a, b = two_traces
  client, (ta, tb) = client_for(a, b)
  resp = client.get(f"/api/compare?a={ta}&b={tb}")
  assert resp.status_code == 200, resp.get_data(as_text=True)
  got = resp.get_json()
  want = json.loads(json.dumps(compare.compare_files(str(a), str(b))))
  assert {k: v for k, v in got.items() if k not in ("trace_a", "trace_b")} == want
  assert (got["trace_a"], got["trace_b"]) == (ta, tb)
  first = got["first_divergence"]
  assert first is not None and first["kind"] == "differs" and first["input_differs"]  # the one op changed
  # the diverging rewrite ids are the served traces' own (the viewer's points are built from them)
  detail = client.get(f"/api/traces/{ta}/rewrites/{first['a']['id']}").get_json()
  assert detail["name"] == first["a"]["name"]


def test_compare_route_refuses(two_traces, client_for, monkeypatch):
  a, b = two_traces
  client, (ta, tb) = client_for(a, b)
  assert client.get(f"/api/compare?a={ta}").status_code == 400
  assert client.get(f"/api/compare?a={ta}&b=x1").status_code == 400
  assert client.get(f"/api/compare?a={ta}&b=99").status_code == 404
  monkeypatch.setattr(share, "MAX_COMPARE_MATCHES", 1)
  assert client.get(f"/api/compare?a={ta}&b={tb}").status_code == 413
