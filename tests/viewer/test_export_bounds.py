"""The export's work is bounded by what the trace's steps change (issue 30: a 2.69 MB trace's export ran out of 24 GB,
each of a gradient's steps resending the ~200 nodes it rebuilt with their long routes). A rebuilt node's in-edges
are its old node's, so the export asks for compact deltas and makes those edges from the step before: the edges it
packs per step do not grow with the graph, and its output grows linearly with the steps."""
from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
import weakref
from pathlib import Path

import pytest
from support.export_helpers import _rebuilding, embedded, rebuilding_rewrites
from support.trace_tools_helpers import record_small

from viz_server.export import page
from viz_server.export.collect import Work, collect, collect_packed
from viz_server.export.command import run
from viz_server.export.graphs import GraphPacker
from viz_server.export.pack import pack
from viz_server.export.page import render, write
from viz_server.export.workers import step0
from viz_server.offline import OfflineApi


def _work(path: Path) -> tuple[Work, int]:
  work = Work()
  with OfflineApi(path) as api:
    data = collect(api, work=work)
  return work, len(json.dumps(pack(data), separators=(",", ":")))


def test_edges_packed_per_step_do_not_grow_with_the_graph(tmp_path):
  small, _ = _work(_rebuilding(tmp_path / "a.vztrace", depth=40, steps=20))
  deep, _ = _work(_rebuilding(tmp_path / "b.vztrace", depth=160, steps=20))
  assert small.steps == deep.steps == 20
  assert deep.nodes >= 20 * 160  # (every step rebuilds the chain: the API's deltas hold those nodes)
  # the edges a step lists are the new CONST's and what moved, not the rebuilt chain's 160 (full deltas: 3,200+)
  assert deep.edges <= 3 * 20 and deep.edges == small.edges


def test_work_and_size_grow_linearly_with_the_steps(tmp_path):
  one, size1 = _work(_rebuilding(tmp_path / "a.vztrace", depth=120, steps=20))
  two, size2 = _work(_rebuilding(tmp_path / "b.vztrace", depth=120, steps=40))
  assert two.steps == 2 * one.steps and two.edges <= 2 * one.edges + 2
  assert size2 - size1 <= 1.25 * (size1 - _work(_rebuilding(tmp_path / "c.vztrace", depth=120, steps=1))[1])


def test_progress_is_reported_by_steps_packed(tmp_path, monkeypatch):
  monkeypatch.setattr("viz_server.export.collect.PROGRESS_STEPS", 7)
  seen: list[int] = []
  with OfflineApi(_rebuilding(tmp_path / "a.vztrace", depth=10, steps=30)) as api:
    collect(api, progress=lambda w: seen.append(w.steps))
  assert seen == [7, 14, 21, 28]


@pytest.mark.parametrize("make", ["recorded", "rebuilding"])
def test_compact_steps_pack_as_the_full_answers_do(make, trace, tmp_path):
  """The packing of compact answers (straight edges without points, rebuilt nodes' edges made from the step before)
  equals the full answers'."""
  path = record_small(trace) if make == "recorded" else _rebuilding(tmp_path / "r.vztrace", depth=30, steps=12)
  with OfflineApi(path) as api:
    compact, full = GraphPacker(None), GraphPacker(None)
    checked = 0
    for r, rw in api.trace.rewrites.items():
      view = api.view(r)
      steps = range(1, rw.matches + 1)
      got = compact.rewrite(step0(view), (view.delta(k - 1, k, compact=True) for k in steps), {})
      want = full.rewrite(view.graph(0), (view.delta(k - 1, k) for k in steps), {})
      assert got == want, f"rewrite {r}"
      checked += rw.matches
    assert checked >= 10 and compact.statics == full.statics


def test_the_command_prints_progress_to_stderr_and_its_file_when_asked(tmp_path, monkeypatch, capsys):
  """A line every PROGRESS_STEPS steps or PROGRESS_REWRITES rewrites since the last, whichever comes first."""
  monkeypatch.setattr("viz_server.export.collect.PROGRESS_STEPS", 10)
  monkeypatch.setattr("viz_server.export.collect.PROGRESS_REWRITES", 2)
  path = rebuilding_rewrites(tmp_path / "a.vztrace", depth=5, steps=6, rewrites=5)
  note = tmp_path / "progress"
  args = argparse.Namespace(file=str(path), output=str(tmp_path / "a.html"), context=None, redact="", progress=True,
                            progress_file=str(note))
  assert run(args) == 0
  err = capsys.readouterr().err.splitlines()
  assert [line.split(" (")[0] for line in err] == ["export: 1 of 5 rewrites, 10 of 30 steps packed",
                                                   "export: 3 of 5 rewrites, 18 of 30 steps packed",
                                                   "export: 4 of 5 rewrites, 28 of 30 steps packed",
                                                   "export: 5 of 5 rewrites, 30 of 30 steps packed"]
  assert err[-1].endswith("; writing the page") and not err[-2].endswith("; writing the page")
  assert note.read_text() == "30 30\n"  # (the viewer's Export button reads it: viz_server/share.py)


def test_a_rewrite_that_matched_nothing_shares_the_laid_out_graph_of_its_root(trace):
  """Its step-0 graph is not laid out again (a third of a training step's rewrites), and is what its own would be."""
  with OfflineApi(record_small(trace)) as api:
    viewed: list[int] = []
    view = api.view
    api.view = lambda r: (viewed.append(r), view(r))[1]  # type: ignore[method-assign]
    data = collect(api, derive_edges=False)
    api.view = view  # type: ignore[method-assign]
    shared = 0
    for r, g in data["graphs"].items():
      rw = api.trace.rewrites[int(r)]
      if rw.matches or sum(x.root == rw.root and x.id < rw.id for x in api.trace.rewrites.values()) == 0:
        continue
      assert int(r) not in viewed
      own = GraphPacker(None)
      own.rewrite(api.view(int(r)).graph(0), [], {})
      assert own.graphs == [data["g0"][g["g0"]]], f"rewrite {r}"
      shared += 1
    assert shared >= 2


def test_work_grows_linearly_with_the_rewrites(tmp_path):
  """Every count of what the export did is the trace's: one step-0 graph laid out per rewrite, each step packed once."""
  got = {}
  for n in (3, 12):
    got[n] = Work()
    with OfflineApi(rebuilding_rewrites(tmp_path / f"{n}.vztrace", depth=30, steps=10, rewrites=n)) as api:
      write(tmp_path / f"{n}.html", collect_packed(api, work=got[n]), "x")
  one = vars(got[3])
  # each step adds its CONST and rebuilds the chain and the SINK above it: 32 nodes; a compact delta lists an edge
  # only where the rebuilt node's old one cannot give it
  assert {k: one[k] for k in ("rewrites", "graphs", "steps", "nodes")} == {"rewrites": 3, "graphs": 3, "steps": 30,
                                                                          "nodes": 3 * 10 * 32}
  assert one["edges"] <= 3 * 10 and one["total"] == one["steps"]
  # (the chains have two shapes, their CONST's label a character longer from rewrite 10 on: export/layouts.py lays
  # out each shape once)
  assert (got[3].shared, got[12].shared) == (2, 10)
  twelve = vars(got[12])
  assert {k: 4 * v for k, v in one.items() if k != "shared"} == {k: v for k, v in twelve.items() if k != "shared"}


def _peak(path: Path, streamed: bool) -> int:
  """tracemalloc's peak over an export of path, above what the opened trace holds."""
  with OfflineApi(path) as api:
    gc.collect()
    tracemalloc.start()
    try:
      if streamed:
        write(path.with_suffix(".html"), collect_packed(api), "x")
      else:  # (the export as it was: every step's graph collected, then the whole page made as one text)
        path.with_suffix(".html").write_text(render(collect(api), "x"))
      return tracemalloc.get_traced_memory()[1]
    finally:
      tracemalloc.stop()


def test_the_exports_peak_memory_is_one_rewrites_not_the_traces(tmp_path):
  """4x the rewrites (the same largest graph): the export's peak grows by what the columns and the answers hold, well
  under the rewrites' graphs (1.1-1.2x; collecting them whole first: 1.6-1.9x, which breaks the same bound; the
  growth itself depends on what the process's caches held before, so it is not compared)."""
  small, big = (rebuilding_rewrites(tmp_path / f"{n}.vztrace", depth=40, steps=12, rewrites=n) for n in (4, 16))
  streamed, whole = ((_peak(small, s), _peak(big, s)) for s in (True, False))
  assert streamed[1] < 1.4 * streamed[0]
  assert whole[1] > 1.4 * whole[0]  # (the bound is one the old way breaks)
  assert len(embedded(big.with_suffix(".html").read_text())["graphs"]) == 16


def _sorted_marks(data: dict) -> dict:
  """data as JSON has it, a step's `added` and `changed` sorted (the packing keeps them as flags in node order)."""
  out = json.loads(json.dumps(data))
  for g in out["graphs"].values():
    for d in g["deltas"]:
      for k in ("added", "changed"):
        d[k] = sorted(d[k])
  return out


@pytest.mark.parametrize("redact", [(), ("paths", "host", "source")])
def test_the_streamed_page_holds_what_collect_makes(redact, trace, tmp_path, monkeypatch):
  """collect_packed + write (rewrite by rewrite, the page written in pieces) embed exactly collect()'s data."""
  monkeypatch.setattr("viz_server.export.redact.secrets.token_bytes", lambda n: b"k" * n)  # (equal tokens in both)
  for path in (record_small(trace), rebuilding_rewrites(tmp_path / "r.vztrace", depth=20, steps=6, rewrites=3)):
    with OfflineApi(path) as api:
      write(tmp_path / "a.html", collect_packed(api, redact=redact), "x")
      want = _sorted_marks(collect(api, redact=redact))
    assert _sorted_marks(embedded((tmp_path / "a.html").read_text())) == want
    assert want["redacted"] == sorted(redact) and len(want["graphs"]) >= 3


def test_the_export_runs_without_the_collector_and_collects_its_cycles_every_few_rewrites(tmp_path, monkeypatch):
  """quiet_gc (export/workers.py): the collector off while the export allocates, its cycles collected every GC_EVERY
  rewrites (a cycle made after rewrite k is gone by the first multiple of GC_EVERY after k), the collector restored."""
  monkeypatch.setattr("viz_server.export.workers.GC_EVERY", 2)
  monkeypatch.setattr("viz_server.export.collect.PROGRESS_REWRITES", 1)
  monkeypatch.setattr("viz_server.export.collect.PROGRESS_STEPS", 10**9)

  class Cycle:
    def __init__(self) -> None:
      self.me = self

  made: list[weakref.ref] = []
  seen: list[tuple[bool, list[int]]] = []

  def note(work: Work) -> None:
    seen.append((gc.isenabled(), [j for j, ref in enumerate(made, 1) if ref() is not None]))
    made.append(weakref.ref(Cycle()))  # (unreachable at once: only the collector frees it)

  assert gc.isenabled()
  with OfflineApi(rebuilding_rewrites(tmp_path / "a.vztrace", depth=5, steps=2, rewrites=6)) as api:
    collect_packed(api, progress=note)
  assert seen == [(False, []), (False, []), (False, [2]), (False, []), (False, [4]), (False, [])]
  assert gc.isenabled() and gc.get_freeze_count() == 0


def test_the_page_is_written_in_pieces_no_larger_than_a_few_thousand_items(tmp_path, monkeypatch):
  """page.write deflates the data's JSON in pieces, a long column's a few thousand items at a time (a training step's
  columns were up to ~200 MB of text at once, its export's peak memory): the text is json.dumps' all the same."""
  pieces: list[str] = []
  real = page._write_digits

  def kept(fh, got):
    pieces.extend(got)
    return real(fh, iter(pieces))
  monkeypatch.setattr(page, "_write_digits", kept)
  with OfflineApi(rebuilding_rewrites(tmp_path / "r.vztrace", depth=30, steps=40, rewrites=8)) as api:
    packed = collect_packed(api)
  column = [10 ** 6 + i for i in range(50_000)]  # (a column of 400 KB of text)
  packed["deltas"] = {**packed["deltas"], "long": column, "empty": []}
  write(tmp_path / "a.html", packed, "x")
  assert "".join(pieces) == json.dumps(packed, separators=(",", ":"))
  assert max(map(len, pieces)) < 100_000


class _FullDisk:
  def __init__(self) -> None:
    self.writes = 0

  def write(self, data: bytes) -> int:
    self.writes += 1
    raise OSError(28, "No space left on device")


def test_a_failing_write_of_the_page_fails_the_export():
  """What fails where the page's data is written (a full disk) is raised, at the first write that fails."""
  fh = _FullDisk()
  with pytest.raises(OSError, match="No space"):
    page._write_digits(fh, (json.dumps(list(range(i, i + 300))) for i in range(0, 300_000, 300)))
  assert fh.writes == 1


class _Counting:
  """zlib's compressor, counting the calls that hand it text."""

  def __init__(self, real) -> None:
    self.real, self.calls = real(page.DEFLATE_LEVEL), 0

  def compress(self, data: bytes) -> bytes:
    self.calls += 1
    return self.real.compress(data)

  def flush(self) -> bytes:
    return self.real.flush()


def test_the_page_data_goes_to_zlib_in_batches_of_pieces(tmp_path, monkeypatch):
  """page._write_digits hands zlib the pieces' text about DEFLATE_TEXT characters at a time, not a call per piece (a
  training step's data is ~100k pieces of ~100 characters): the digits are _digits' of the whole text all the same."""
  made: list[_Counting] = []
  real = page.zlib.compressobj
  monkeypatch.setattr(page.zlib, "compressobj", lambda level: made.append(_Counting(real)) or made[-1])
  pieces = [json.dumps(list(range(i, i + 30))) for i in range(0, 300_000, 30)]  # (10k pieces, ~2 MB)
  with open(tmp_path / "d", "wb") as fh:
    n = page._write_digits(fh, iter(pieces))
  monkeypatch.setattr(page.zlib, "compressobj", real)
  got = page._digits("".join(pieces))
  assert (tmp_path / "d").read_text() == got["data"] and n == got["n"]
  assert made[0].calls <= sum(map(len, pieces)) // page.DEFLATE_TEXT + 1
