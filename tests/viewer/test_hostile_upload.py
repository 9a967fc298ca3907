"""Issue 14, item 6: uploads come only from the viewer's user (or with its control token), a file without one intact
record is refused and not kept, and uploads are capped in count and disk bytes, the oldest let go."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import urllib.request

import pytest
from support import hostile_traces as H

from viz_server.__main__ import bind
from viz_server.app import create_app
from viz_server.store import TraceStore
from vztrace.control import HEADER

UPLOADER = """
import encodings.idna, os, sys, urllib.request, urllib.error  # imported before dropping to a user who cannot read them
head = b"--B\\r\\nContent-Disposition: form-data; name=file; filename=x.vztrace\\r\\n\\r\\n"
body = head + open(sys.argv[2], "rb").read() + b"\\r\\n--B--\\r\\n"
if len(sys.argv) > 3:
  os.setgid(65534); os.setuid(65534)  # another user of the machine
req = urllib.request.Request(sys.argv[1], data=body, method="POST",
                             headers={"Content-Type": "multipart/form-data; boundary=B"})
try:
  print(urllib.request.urlopen(req, timeout=30).status)
except urllib.error.HTTPError as e:
  print(e.code)
"""


def _post(c, data: bytes, name: str = "x.vztrace", **kw):
  return c.post("/api/traces", data={"file": (io.BytesIO(data), name)}, content_type="multipart/form-data", **kw)


@pytest.mark.skipif(os.name != "posix" or os.getuid() != 0 or not os.path.exists("/proc/net/tcp"),
                    reason="needs root (to act as another user) and Linux /proc")
def test_uploads_only_from_the_viewers_user_or_with_the_token(tmp_path):
  app = create_app([], follow=False)
  app.extensions["tinyviz"]["control_token"] = "sesame"
  srv = bind(app, "127.0.0.1", 0)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  try:
    trace = H.small(tmp_path / "s.vztrace")
    url = f"http://127.0.0.1:{srv.port}/api/traces"

    def upload(*other: str) -> str:
      r = subprocess.run([sys.executable, "-c", UPLOADER, url, str(trace), *other], capture_output=True, text=True,
                         timeout=60, cwd="/")
      return r.stdout.strip() or "no answer: " + r.stderr[-300:]
    assert upload("other") == "403"
    assert upload() == "201"
    body = (b"--B\r\nContent-Disposition: form-data; name=file; filename=t.vztrace\r\n\r\n" + trace.read_bytes()
            + b"\r\n--B--\r\n")
    req = urllib.request.Request(url, data=body, method="POST", headers={
      "Content-Type": "multipart/form-data; boundary=B", HEADER: "sesame"})
    assert urllib.request.urlopen(req, timeout=30).status == 201
  finally:
    srv.shutdown()
    app.extensions["tinyviz"]["store"].stop()
    srv.server_close()


def test_a_file_with_no_intact_record_is_refused_and_not_kept(tmp_path):
  up = tmp_path / "uploads"
  up.mkdir()
  c = create_app([], follow=False, store=TraceStore(upload_dir=str(up))).test_client()
  for gen in (H.junk_after_header, H.header_only):
    r = _post(c, gen(tmp_path / "j.vztrace").read_bytes())
    assert r.status_code == 400 and "no intact record" in r.get_json()["error"]
  assert list(up.iterdir()) == [] and c.get("/api/traces").get_json() == []
  assert _post(c, H.small(tmp_path / "s.vztrace").read_bytes()).status_code == 201


def test_uploads_are_capped_in_count_and_bytes_oldest_first(tmp_path):
  up = tmp_path / "uploads"
  up.mkdir()
  data = H.small(tmp_path / "s.vztrace").read_bytes()
  st = TraceStore(upload_dir=str(up), upload_max_count=3, upload_max_bytes=5 * len(data))
  app = create_app([], follow=False, store=st)
  c = app.test_client()
  removed = []
  st.listeners.append(lambda ev, d: removed.append(d["trace"]) if ev == "removed" else None)
  ids = [_post(c, data, f"{i}.vztrace").get_json()["id"] for i in range(10)]
  assert [t["id"] for t in c.get("/api/traces").get_json()] == ids[-3:]
  assert removed == ids[:-3] and len(list(up.iterdir())) == 3
  assert c.get(f"/api/traces/{ids[0]}/contexts").status_code == 404
  st.upload_max_bytes = 2 * len(data)
  _post(c, data, "last.vztrace")
  assert [t["name"] for t in c.get("/api/traces").get_json()] == ["9.vztrace", "last.vztrace"]
  assert len(list(up.iterdir())) == 2
