"""Issue 14, items 1 and 2: ints too big for the index, and lists nested too deep, in schema-valid records. The
reader bounds them (damage, keeping what came before), and one bad trace never affects another."""
from __future__ import annotations

import io
import shutil

import pytest
from support import hostile_traces as H

from viz_server.app import create_app
from viz_server.store import TraceStore
from vztrace.format import MAX_DEPTH
from vztrace.reader import TraceReader


def _read(path) -> TraceReader:
  r = TraceReader(path)
  for _ in r:
    pass
  r.close()
  return r


@pytest.mark.parametrize("where", ["node", "match", "dt", "ts"])
def test_reader_refuses_ints_outside_int64(tmp_path, where):
  r = _read(H.big_int(tmp_path / "b.vztrace", where))
  assert r.damaged and "outside int64" in r.reason, r.reason
  assert r.records == r.stopped_record == 6  # the records before the bad one are kept


def test_reader_bounds_nesting_whatever_the_stack(tmp_path):
  path = H.deep(tmp_path / "d.vztrace")
  top = _read(path)

  def nested(k: int) -> TraceReader:
    return nested(k - 1) if k else _read(path)
  low = nested(900)  # the caller's stack no longer decides whether the file reads
  assert top.damaged and low.damaged and top.records == low.records == 2
  assert f"nested deeper than {MAX_DEPTH}" in top.reason and top.reason == low.reason
  ok = _read(H.deep(tmp_path / "ok.vztrace", depth=MAX_DEPTH - 2))
  assert not ok.damaged and ok.complete


def test_a_bad_trace_never_hides_the_others(tmp_path, capsys):
  d = tmp_path / "traces"
  d.mkdir()
  H.big_int(d / "a-big.vztrace", "node")
  H.big_int(d / "b-dt.vztrace", "dt")
  H.deep(d / "c-deep.vztrace")
  H.small(d / "z-good.vztrace")
  st = TraceStore()
  trs = {t.name: t for t in st.add_path(d)}
  assert set(trs) == {"a-big.vztrace", "b-dt.vztrace", "c-deep.vztrace", "z-good.vztrace"}
  assert trs["z-good.vztrace"].status == "ended" and trs["z-good.vztrace"].match_count == 2
  assert all(trs[n].status == "damaged" for n in ("a-big.vztrace", "b-dt.vztrace", "c-deep.vztrace"))
  st.poll_once()
  shutil.copy(d / "z-good.vztrace", d / "zz-later.vztrace")
  st._last_scan = 0
  st.poll_once()
  assert "zz-later.vztrace" in {t.name for t in st.traces.values()}
  assert "store poll failed" not in capsys.readouterr().out


def test_store_survives_what_the_index_cannot_take(tmp_path):
  """Even a record that got past the reader (here: a store fed directly) is an anomaly, not an exception."""
  st = TraceStore()
  (tr,) = st.add_path(H.small(tmp_path / "s.vztrace"))
  tr.apply([H.node(2 ** 70), {"t": "match", "rw": 0, "pat": 0, "before": 2 ** 64, "after": 0, "dt": 10 ** 400}],
           None)
  assert len(tr.anomalies) >= 1 and tr.match_count == 2


def test_server_starts_lists_and_serves_with_hostile_traces(tmp_path):
  paths = [H.big_int(tmp_path / f"{w}.vztrace", w) for w in ("node", "match", "dt", "ts")]
  paths += [H.deep(tmp_path / "deep.vztrace"), H.small(tmp_path / "good.vztrace")]
  app = create_app(paths, follow=False)
  c = app.test_client()
  listed = c.get("/api/traces")
  assert listed.status_code == 200 and len(listed.get_json()) == 6
  for t in range(6):
    for url in (f"/api/traces/{t}/contexts", f"/api/traces/{t}/kernels", f"/api/traces/{t}/timeline",
                f"/api/traces/{t}/runs"):
      assert c.get(url).status_code == 200, url
  assert c.get("/api/traces/5/rewrites/0/graph?step=end").status_code == 200
  for p in paths[:5]:
    up = c.post("/api/traces", data={"file": (io.BytesIO(p.read_bytes()), p.name)})
    assert up.status_code in (201, 400) and "error" in up.get_json() or up.get_json()["status"] == "damaged"


def test_timeline_takes_huge_and_tiny_times(tmp_path):
  """The biggest times the reader lets through still make a timeline (floats, no OverflowError)."""
  recs = [H.meta(), {"t": "ctx_begin", "id": 0, "parent": None, "name": "k", "kind": "kernel", "ts": 2 ** 63 - 1},
          {"t": "run", "ctx": 0, "kname": "k", "times": [2 ** 63 - 1, -(2 ** 63)], "min": 1, "median": 1,
           "flops": 2 ** 63 - 1, "bytes": 1, "gflops": 1, "gbs": 1, "ts": -(2 ** 63)},
          {"t": "ctx_end", "id": 0, "ts": 1.7976931348623157e308}, H.END]
  app = create_app([H.write(tmp_path / "t.vztrace", [recs])], follow=False)
  res = app.test_client().get("/api/traces/0/timeline")
  assert res.status_code == 200 and len(res.get_json()["contexts"]) == 1


def test_one_trace_that_cannot_be_encoded_never_breaks_the_list(tmp_path):
  app = create_app([H.small(tmp_path / "a.vztrace"), H.small(tmp_path / "b.vztrace")], follow=False)
  tr = app.extensions["tinyviz"]["store"].get(0)
  nested: list = []
  for _ in range(5000):  # deeper than any encoder's stack (the reader refuses this; an index bug might not)
    nested = [nested]
  tr.meta = {"x": nested}
  listed = app.test_client().get("/api/traces")
  assert listed.status_code == 200
  a, b = listed.get_json()
  assert a["status"] == "damaged" and "cannot be listed" in a["damage"]["reason"] and b["status"] == "ended"
