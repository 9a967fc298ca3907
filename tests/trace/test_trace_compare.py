"""`compare A B` on real traces of one small program: NOOPT=1, BEAM=2, a rule of `symbolic` disabled and one op
changed, each against the default, with the expected first divergence asserted; plus hostile strings."""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import hostile_traces as ht
from support.trace_helpers import (
  record,
)

from viz_server import compare
from viz_server.diff import structural_hashes, toposort
from viz_server.store import TraceStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
  return record(tmp_path_factory.mktemp("cmp") / "default.vztrace")


def load(path: Path):
  store = TraceStore()
  (tr,) = store.add_path(path)
  return tr


def test_hasher_is_the_diff_panels_hash(base):
  tr = load(base)
  hasher = compare.Hasher(tr)
  for rw in list(tr.rewrites.values())[:12]:
    order = toposort(rw.root, tr.nodes.get)
    assert hasher(rw.root) == structural_hashes(order, tr.nodes.get)[rw.root]


def test_same_trace_is_same(base):
  rep = compare.compare_files(str(base), str(base))
  assert rep["same"] and rep["first_divergence"] is None and rep["rewrites"]["differ"] == 0
  assert all(k["ratio"] == 1.0 for k in rep["kernels"])


def test_noopt_vs_default(base, tmp_path):
  noopt = record(tmp_path / "noopt.vztrace", NOOPT="1")
  rep = compare.compare_files(str(noopt), str(base))
  first = rep["first_divergence"]
  # the first kernel's first opt is where default and NOOPT=1 part: a rewrite only the default trace has
  ta, tb = load(noopt), load(base)
  kb = next(c for c in tb.contexts.values() if c.kind == "kernel" and c.opts)
  want = next(tb.rewrites[r] for r in kb.rewrites if tb.rewrites[r].name.startswith("apply "))
  assert first["kind"] == "only_b" and first["a"] is None
  assert (first["b"]["id"], first["b"]["ctx_name"], first["b"]["name"]) == (want.id, kb.name, want.name)
  assert not any(c.opts for c in ta.contexts.values())
  diffs = {k["a"]["name"]: k for k in rep["kernels"]}
  assert diffs[kb.name]["opts_differ"] and diffs[kb.name]["opts_a"] == []
  assert "uops" in diffs[kb.name]["sources_differ"]
  assert all(k["ratio"] is not None and k["ratio"] > 0 for k in rep["kernels"])
  assert not rep["same"]


def test_beam_vs_default(base, tmp_path):
  beam = record(tmp_path / "beam.vztrace", BEAM="2", IGNORE_BEAM_CACHE="1", BEAM_CACHE_DIR=str(tmp_path / "bc"))
  rep = compare.compare_files(str(base), str(beam))
  assert rep["kernels"] and all(k["beam_a"] == 0 and k["beam_b"] > 0 and k["differs"] for k in rep["kernels"])
  assert not rep["same"]
  # the search may or may not pick the heuristic's opts: the first divergence follows what it picked
  picked = [k for k in rep["kernels"] if k["opts_differ"]]
  first = rep["first_divergence"]
  if not picked:
    assert first is None and rep["rewrites"]["differ"] == 0
  else:
    where = first["a"] or first["b"]
    assert where["ctx_name"] == picked[0]["a"]["name"] and where["name"].startswith("apply ")


def test_symbolic_rule_disabled(base, tmp_path):
  ta = load(base)
  fired = [ta.patterns[p]["name"] for rw in ta.rewrites.values() for p in rw.pat]
  assert "fold_sum" in fired
  dropped = record(tmp_path / "nofold.vztrace", TEST_DROP_RULE="fold_sum")
  rep = compare.compare_files(str(base), str(dropped))
  first = rep["first_divergence"]
  # the first rewrite where fold_sum fired (the innermost: a scheduler rule runs its own simplify) is where they part
  want = next(rw for rw in ta.rewrites.values() if any(ta.patterns[p]["name"] == "fold_sum" for p in rw.pat))
  assert first["kind"] == "differs" and first["a"]["id"] == want.id and first["a"]["name"] == want.name
  assert not first["input_differs"] and first["output_differs"]
  k = [ta.patterns[p]["name"] for p in want.pat].index("fold_sum") + 1
  st = first["step"]
  assert st["k"] == k and st["a"]["rule"]["name"] == "fold_sum"
  assert st["a"]["rule"]["file"].endswith("compiler/symbolic.py")
  assert st["b"] is None or st["b"]["rule"]["name"] != "fold_sum"
  assert st["a"]["node"]["id"] == want.before[k - 1]
  assert any(line["kind"] == "-" for line in first["diff"])


def test_nesting_follows_record_order_not_clocks(base):
  """A rewrite run inside another (a rule's own graph_rewrite) is found inside it by record order, whatever the
  timestamps say: on a loaded machine a parent's begin time plus its duration (two clocks, read at different moments)
  ended before its child began, and the parent was reported instead of the rewrite that actually diverged."""
  ta = load(base)
  rws = list(ta.rewrites.values())
  child = next(rw for rw in rws if any(ta.patterns[p]["name"] == "fold_sum" for p in rw.pat))
  parent = next(rw for rw in reversed(rws[:rws.index(child)]) if rw.order_at_end > child.order)
  assert parent.ctx == child.ctx and parent.ended
  parent.dt, child.ts = 0, parent.ts + 1.0  # clocks that disagree
  assert compare.innermost([(parent, parent), (child, child)]) == (child, child)
  after = next(rw for rw in rws if rw.order > parent.order_at_end)
  assert compare.innermost([(parent, parent), (after, after)]) == (parent, parent), "one begun after it ended is not"


def test_one_op_changed(base, tmp_path):
  mul = record(tmp_path / "mul.vztrace", TEST_OP="mul")
  rep = compare.compare_files(str(base), str(mul))
  first = rep["first_divergence"]
  ta = load(base)
  r0 = next(iter(ta.rewrites.values()))  # the tensor graph snapshot of the first schedule already differs
  assert first["kind"] == "differs" and first["a"]["id"] == r0.id and first["input_differs"]
  removed = [line["text"].split()[1] for line in first["diff"] if line["kind"] == "-"]
  added = [line["text"].split()[1] for line in first["diff"] if line["kind"] == "+"]
  assert "ADD" in removed and "MUL" in added
  assert any(k["sources_differ"] for k in rep["kernels"])
  text = io.StringIO()
  args = argparse.Namespace(a=str(base), b=str(mul), json=False, tolerance=1.25)
  assert compare.run(args, text) == 1
  assert "first divergence: rewrite 0 'View Tensor Graph'" in text.getvalue()
  out = io.StringIO()
  assert compare.run(argparse.Namespace(a=str(base), b=str(mul), json=True, tolerance=1.25), out) == 1
  assert json.loads(out.getvalue())["first_divergence"]["a"]["id"] == r0.id


def test_hostile_strings(tmp_path):
  evil = "\x1b]0;owned\x07\x1b[2J"
  recs = [ht.meta(), ht.ctx(0, name=f"c{evil}"), ht.node(0, arg=evil), ht.node(1, "ADD", [0, 0]), ht.node(2),
          {**ht.PATTERN, "name": f"f{evil}", "file": f"{evil}.py"}, {**ht.rw_begin(0, 1), "name": f"r{evil}"}]
  a = ht.write(tmp_path / "a.vztrace", [[*recs, {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 2, "dt": 5},
                                         ht.rw_end(0, 2, 1), ht.END]])
  b = ht.write(tmp_path / "b.vztrace", [[*recs, {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 0, "dt": 5},
                                         ht.rw_end(0, 0, 1), ht.END]])
  out = io.StringIO()
  assert compare.run(argparse.Namespace(a=str(a), b=str(b), json=False, tolerance=1.25), out) == 1
  text = out.getvalue()
  assert "first differing step 1" in text and "\\x1b]0;owned" in text
  assert "\x1b" not in text and "\x07" not in text


def test_cli(base):
  p = subprocess.run([sys.executable, "-m", "compiler.trace", "compare", str(base), str(base)], cwd=ROOT,
                     capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr
  assert "no rewrite differs" in p.stdout


def test_a_final_ast_that_differs_with_no_source_change(tmp_path):
  """A kernel whose final AST differs is a kernel difference even where no source text does (none is recorded here)."""
  def trace(path, arg):
    return ht.write(path, [[ht.meta(), ht.ctx(0), ht.ctx(1, "kernel", 0, "E_4"), ht.node(0), ht.node(1, "ADD", [0, 0]),
                            ht.node(2, arg=arg), ht.PATTERN, ht.rw_begin(0, 1, 1),
                            {"t": "match", "rw": 0, "pat": 0, "before": 1, "after": 2, "dt": 5}, ht.rw_end(0, 2, 1),
                            {"t": "ctx_end", "id": 1, "ts": 1.7e9}, ht.END]])
  a, b = trace(tmp_path / "a.vztrace", "2"), trace(tmp_path / "b.vztrace", "3")
  rep = compare.compare_files(str(a), str(b))
  (k,) = rep["kernels"]
  assert k["ast_differs"] and k["differs"] and not k["sources_differ"] and not k["opts_differ"] and not rep["same"]
  text = io.StringIO()
  assert compare.run(argparse.Namespace(a=str(a), b=str(b), json=False, tolerance=1.25), text) == 1
  assert "E_4: final AST differs" in text.getvalue()
  rep = compare.compare_files(str(a), str(a))
  assert not rep["kernels"][0]["ast_differs"] and rep["same"]


REPEATED = """
import sys
import numpy as np
from compiler.trace import recorder
from compiler.tensor import Tensor
recorder.enable(sys.argv[1], announce=False)
rng = np.random.default_rng(0)
for _ in range(3):  # the same graph again: a schedule cache hit runs the same kernels in contexts of their own
  a = Tensor(rng.standard_normal((8, 8)).astype(np.float32))
  ((a @ a) + 1).sum(axis=1).numpy()
recorder.disable()
"""


def test_a_kernel_run_again_is_compared_once_and_counted_as_every_surface_counts(tmp_path):
  path = tmp_path / "again.vztrace"
  p = subprocess.run([sys.executable, "-c", REPEATED, str(path)], cwd=ROOT, capture_output=True, text=True,
                     timeout=600, env={**os.environ, "VIZ": "0", "PYTHONPATH": str(ROOT)})
  assert p.returncode == 0, p.stderr
  tr = load(path)
  kernel_contexts = [c for c in tr.contexts.values() if c.is_kernel]
  assert len(kernel_contexts) > tr.counts.kernels  # (the runs again have contexts of their own)
  rep = compare.compare_files(str(path), str(path))
  names = [k["a"]["name"] for k in rep["kernels"]]
  assert len(names) == len(set(names)) == tr.counts.kernels
  assert (rep["a"]["kernels"], rep["a"]["contexts"]) == (tr.counts.kernels, tr.counts.contexts)
