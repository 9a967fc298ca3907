"""Issue 14, items 3 and 9: socket.io gets the HTTP routes' Host/Origin checks on every transport and their
security headers; route ids and query ints take ASCII digits only; `subscribe` always answers."""
from __future__ import annotations

import http.client
import socket
import threading

import pytest
import socketio
from support import hostile_traces as H

from viz_server.__main__ import bind
from viz_server.app import create_app

EVIL = "evil.example"


@pytest.fixture
def server(tmp_path):
  app = create_app([H.small(tmp_path / "s.vztrace")], follow=False)
  srv = bind(app, "127.0.0.1", 0)
  t = threading.Thread(target=srv.serve_forever, daemon=True)
  t.start()
  yield srv.port
  srv.shutdown()
  app.extensions["tinyviz"]["store"].stop()
  srv.server_close()


def _raw(port: int, path: str, headers: dict) -> http.client.HTTPResponse:
  c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
  c.putrequest("GET", path, skip_host=True)
  for k, v in headers.items():
    c.putheader(k, v)
  c.endheaders()
  resp = c.getresponse()
  resp.read()
  c.close()
  return resp


@pytest.mark.parametrize("transport", ["polling", "websocket"])
def test_socketio_refuses_a_rebound_host_like_http_does(server, transport):
  port = server
  bad = {"Host": f"{EVIL}:{port}", "Origin": f"http://{EVIL}:{port}"}
  assert _raw(port, "/api/traces", bad).status == 403
  sio = socketio.Client(reconnection=False)
  with pytest.raises(socketio.exceptions.ConnectionError):
    sio.connect(f"http://127.0.0.1:{port}", transports=[transport], headers=bad, wait_timeout=60)
  ws = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13"} if transport == "websocket" else {}
  path = f"/socket.io/?EIO=4&transport={transport}"
  assert _raw(port, path, {**bad, **ws}).status == 403
  assert _raw(port, path, {"Host": f"127.0.0.1:{port}", "Origin": f"http://{EVIL}:{port}", **ws}).status == 403
  good = socketio.Client(reconnection=False)
  good.connect(f"http://127.0.0.1:{port}", transports=[transport], wait_timeout=60)
  try:
    assert good.call("subscribe", {"trace": None}, timeout=60) == {"ok": True}
    assert good.call("subscribe", timeout=60)["ok"] is False  # no payload: an answer, not silence
    assert good.call("subscribe", "x", timeout=60)["ok"] is False
  finally:
    good.disconnect()


def test_socketio_answers_carry_the_security_headers_and_no_versions(server):
  port = server
  resp = _raw(port, "/socket.io/?EIO=4&transport=polling", {"Host": f"127.0.0.1:{port}"})
  assert resp.status == 200
  assert resp.getheader("X-Content-Type-Options") == "nosniff" and resp.getheader("X-Frame-Options") == "DENY"
  assert resp.getheader("Referrer-Policy") == "no-referrer"
  for path in ("/api/ping", "/socket.io/?EIO=4&transport=polling"):
    server_header = _raw(port, path, {"Host": f"127.0.0.1:{port}"}).getheader("Server") or ""
    assert "Werkzeug" not in server_header and "Python" not in server_header, server_header


def test_ids_and_query_ints_take_ascii_digits_only(tmp_path):
  c = create_app([H.small(tmp_path / "s.vztrace")], follow=False).test_client()
  assert c.get("/api/traces/0/rewrites/0").status_code == 200
  for url in ("/api/traces/\u0660/rewrites/0", "/api/traces/0/rewrites/\u0660", "/api/traces/\uff10/contexts"):
    assert c.get(url).status_code == 404, url
  assert c.get("/api/traces/0/rewrites/0/graph?step=1").status_code == 200
  for bad in ("1_0", " 1", "1 ", "+1", "\u0661", "-0", "0x1"):
    res = c.get("/api/traces/0/rewrites/0/graph", query_string={"step": bad})
    assert res.status_code == 400 and "ASCII digits" in res.get_json()["error"], bad
  assert c.get("/api/diff?a=0:0:0&b=0:0:end").status_code == 200
  for bad in ("0:0:1_0", "0: 0:0", "\u0660:0:0", "0:0:-1"):
    assert c.get("/api/diff", query_string={"a": bad, "b": "0:0:0"}).status_code == 400, bad


def test_the_websocket_handshake_carries_the_security_headers(server):
  """The 101 answer is written by the websocket library straight to the socket; it gets the headers too, and the
  connection still works after it (an engine.io open packet arrives as the first frame)."""
  port = server
  ws = {"Host": f"127.0.0.1:{port}", "Upgrade": "websocket", "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}
  with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
    s.sendall(("GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\n"
               + "".join(f"{k}: {v}\r\n" for k, v in ws.items()) + "\r\n").encode())
    got = b""
    while b"\r\n\r\n" not in got:
      chunk = s.recv(4096)
      assert chunk, got
      got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0].startswith("HTTP/1.1 101"), lines
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "no-referrer" and headers["upgrade"].lower() == "websocket"
    while len(rest) < 5:  # the first frame: a text frame (0x81) holding engine.io's open packet "0{...}"
      rest += s.recv(4096)
    start = {126: 4, 127: 10}.get(rest[1] & 0x7F, 2)  # after the 16- or 64-bit length, if any
    assert rest[0] == 0x81 and rest[start:start + 1] == b"0", rest
