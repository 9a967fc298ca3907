"""Issue 14, item 9: a killed recording is "unfinished" (validate exits 1 and says so), and a header-only file that
stopped growing is unfinished in the viewer too instead of live forever: one rule for both (reader.unfinished)."""
from __future__ import annotations

import os
import time

from support import hostile_traces as H

from compiler.trace.cli import main
from viz_server.store import TraceStore
from vztrace.reader import STALE_S


def _age(path, seconds: float) -> None:
  t = time.time() - seconds
  os.utime(path, (t, t))


def test_validate_says_unfinished_for_a_killed_recording(tmp_path, capsys):
  killed, header = H.killed(tmp_path / "k.vztrace"), H.header_only(tmp_path / "h.vztrace")
  for p in (killed, header):
    _age(p, STALE_S + 5)
    assert main(["validate", str(p)]) == 1
    out = capsys.readouterr().out
    assert "UNFINISHED" in out and "truncated" in out and "OK" not in out, out
  fresh = H.header_only(tmp_path / "fresh.vztrace")
  assert main(["validate", str(fresh)]) == 1 and "NOT FINISHED YET" in capsys.readouterr().out
  assert main(["validate", str(H.small(tmp_path / "s.vztrace"))]) == 0 and "OK" in capsys.readouterr().out


def test_a_header_only_file_that_stopped_growing_is_not_live_forever(tmp_path, capsys):
  _age(H.header_only(tmp_path / "old.vztrace"), STALE_S + 5)
  H.header_only(tmp_path / "fresh.vztrace")
  (tmp_path / "empty.vztrace").write_bytes(b"")  # not even the header: the same case (found by the CLI's helper)
  _age(tmp_path / "empty.vztrace", STALE_S + 5)
  st = TraceStore()
  trs = {t.name: t for t in st.add_path(tmp_path)}
  for tr in trs.values():
    tr.updated -= 10  # as if idle since long (the store looks at an idle live trace every WRITER_CHECK_S)
  st.poll_once()
  assert trs["old.vztrace"].status == "damaged" and "unfinished" in trs["old.vztrace"].damage["reason"]
  assert trs["fresh.vztrace"].status == "live"
  assert trs["empty.vztrace"].status == "damaged" and "unfinished" in trs["empty.vztrace"].damage["reason"]
  assert "store poll failed" not in capsys.readouterr().out
