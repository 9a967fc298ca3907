"""The export's work is bounded by what the trace's steps change (issue 30: a 2.69 MB trace's export ran out of 24 GB,
each of a gradient's steps resending the ~200 nodes it rebuilt with their long routes). A rebuilt node's in-edges
are its old node's, so the export asks for compact deltas and makes those edges from the step before: the edges it
packs per step do not grow with the graph, and its output grows linearly with the steps."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from viz_server import export
from viz_server.export_pack import pack
from viz_server.offline import OfflineApi

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_traces as ht  # noqa: E402
from trace_tools_helpers import record_small  # noqa: E402


def _rebuilding(path: Path, depth: int, steps: int) -> Path:
  """One rewrite over a SINK of a chain of `depth` NEGs above a CONST, whose every step replaces the CONST by a new
  one: replay rebuilds the whole chain at each step (a gradient's rewrite does so above the node it matched)."""
  nodes = [ht.node(0, arg="0")] + [ht.node(i, "NEG", [i - 1]) for i in range(1, depth + 1)]
  sink = depth + 1
  nodes.append({**ht.node(sink, "SINK", [depth]), "arg": "None"})
  consts = [ht.node(sink + k, arg=str(k)) for k in range(1, steps + 1)]
  matches = [{"t": "match", "rw": 0, "pat": 0, "before": 0 if k == 1 else sink + k - 1, "after": sink + k, "dt": 1}
             for k in range(1, steps + 1)]
  return ht.write(path, [[ht.meta(), ht.ctx(0), *nodes, *consts, ht.PATTERN, ht.rw_begin(0, sink), *matches,
                          ht.rw_end(0, None, steps), ht.END]])


def _work(path: Path) -> tuple[export.Work, int]:
  work = export.Work()
  with OfflineApi(path) as api:
    data = export.collect(api, work=work)
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
  monkeypatch.setattr(export, "PROGRESS_STEPS", 7)
  seen: list[int] = []
  with OfflineApi(_rebuilding(tmp_path / "a.vztrace", depth=10, steps=30)) as api:
    export.collect(api, progress=lambda w: seen.append(w.steps))
  assert seen == [7, 14, 21, 28]


@pytest.mark.parametrize("make", ["recorded", "rebuilding"])
def test_compact_steps_pack_as_the_full_answers_do(make, trace, tmp_path):
  """The packing of compact deltas (rebuilt nodes' edges made from the step before) equals the full answers'."""
  path = record_small(trace) if make == "recorded" else _rebuilding(tmp_path / "r.vztrace", depth=30, steps=12)
  with OfflineApi(path) as api:
    compact, full = export.GraphPacker(None), export.GraphPacker(None)
    checked = 0
    for r, rw in api.trace.rewrites.items():
      view = api.view(r)
      steps = range(1, rw.matches + 1)
      got = compact.rewrite(view.graph(0), (view.delta(k - 1, k, compact=True) for k in steps), {})
      want = full.rewrite(view.graph(0), (view.delta(k - 1, k) for k in steps), {})
      assert got == want, f"rewrite {r}"
      checked += rw.matches
    assert checked >= 10 and compact.statics == full.statics


def test_the_command_prints_progress_to_stderr_when_asked(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(export, "PROGRESS_STEPS", 10)
  path = _rebuilding(tmp_path / "a.vztrace", depth=10, steps=25)
  args = argparse.Namespace(file=str(path), output=str(tmp_path / "a.html"), context=None, redact="", progress=True)
  assert export.run(args) == 0
  err = capsys.readouterr().err.splitlines()
  assert [line.split(" (")[0] for line in err] == ["export: 10 steps packed", "export: 20 steps packed"]


def test_a_rewrite_that_matched_nothing_shares_the_laid_out_graph_of_its_root(trace):
  """Its step-0 graph is not laid out again (a third of a training step's rewrites), and is what its own would be."""
  with OfflineApi(record_small(trace)) as api:
    viewed: list[int] = []
    view = api.view
    api.view = lambda r: (viewed.append(r), view(r))[1]  # type: ignore[method-assign]
    data = export.collect(api, derive_edges=False)
    api.view = view  # type: ignore[method-assign]
    shared = 0
    for r, g in data["graphs"].items():
      rw = api.trace.rewrites[int(r)]
      if rw.matches or sum(x.root == rw.root and x.id < rw.id for x in api.trace.rewrites.values()) == 0:
        continue
      assert int(r) not in viewed
      own = export.GraphPacker(None)
      own.rewrite(api.view(int(r)).graph(0), [], {})
      assert own.graphs == [data["g0"][g["g0"]]], f"rewrite {r}"
      shared += 1
    assert shared >= 2
