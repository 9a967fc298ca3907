"""Kernels to the user's code (issue 32): every tensor op remembers the user's line that made it, while recording only,
and every kernel lists the lines of the ops it computes (`show --kernels --json`, the API, the trace's kernel
contexts)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from compiler.dtype import dtypes
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.uop import Ops, UOp
from viz_server.app import create_app
from vztrace.format import MAX_CALLSITES, TraceFormatError, validate_record
from vztrace.reader import TraceReader

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""\
  import numpy as np
  from compiler.tensor import Tensor
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((8, 16)).astype(np.float32))
  w = Tensor(rng.standard_normal((16, 32)).astype(np.float32))
  def layer(x, w):
    return (x @ w).relu()
  h = (layer(x, w) * 2).contiguous()
  p = h.softmax()
  out = p.numpy()
  ref = np.maximum(x.numpy() @ w.numpy(), 0) * 2
  ref = np.exp(ref - ref.max(-1, keepdims=True))
  assert np.allclose(out, ref / ref.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
  """)


def _site(path: Path, line: int, function: str) -> dict:
  return {"file": str(path), "line": line, "function": function}


def _line() -> int:
  """The caller's line (the op on it is what a kernel should name)."""
  return sys._getframe(1).f_lineno


def _kernel_sites(path: Path) -> list[tuple[str, list[dict], int]]:
  """(name, callsites, callsites_more) of each kernel context of a trace, in order."""
  return [(r["name"], r.get("callsites", []), r.get("callsites_more", 0)) for r in TraceReader(path)
          if r.get("t") == "ctx_begin" and r["kind"] == "kernel"]


@pytest.mark.parametrize("backend", ["llvm", "interp"])
def test_show_kernels_json_names_the_lines_of_each_kernel(tmp_path, backend):
  script, trace = tmp_path / "prog.py", tmp_path / "prog.vztrace"
  script.write_text(SCRIPT)
  env = {**os.environ, "VIZ": "-1", "VIZ_TRACE": str(trace), "BACKEND": backend, "PYTHONPATH": str(ROOT)}
  subprocess.run([sys.executable, str(script)], env=env, check=True, capture_output=True, timeout=300)
  out = subprocess.run([sys.executable, "-m", "compiler.trace", "show", str(trace), "--kernels", "--json"],
                       cwd=ROOT, check=True, capture_output=True, text=True, timeout=300).stdout
  kernels = [json.loads(line) for line in out.splitlines()]
  matmul, scaled, softmax = _site(script, 7, "layer"), _site(script, 8, "<module>"), _site(script, 9, "<module>")
  # the matmul with its relu and the scaling fused in (relu's reads of the matmul are one expression of it: the kernel
  # computes it once), the softmax's two
  assert [(k["callsites"], k["callsites_more"]) for k in kernels] == \
    [([matmul, scaled], 0), ([softmax], 0), ([softmax], 0)]


def test_fused_chain_lists_both_lines_in_order(trace, fresh_caches):
  x = Tensor(np.arange(6, dtype=np.float32))
  a = x * 2; la = _line()  # noqa: E702
  b = (a + 1).exp(); lb = _line()  # noqa: E702
  b.realize()
  recorder.disable()
  here = Path(__file__).resolve()
  (k,) = _kernel_sites(trace)
  assert k[1] == [_site(here, la, "test_fused_chain_lists_both_lines_in_order"),
                  _site(here, lb, "test_fused_chain_lists_both_lines_in_order")]
  np.testing.assert_allclose(b.numpy(), np.exp(np.arange(6) * 2.0 + 1), rtol=1e-6)


def test_sites_found_through_folds_and_realized_inputs(trace, fresh_caches):
  """The scheduler folds the matmul's reshapes of its inputs and reads a realized tensor from its buffer: the nodes
  it makes of the user's still name the user's lines."""
  rng = np.random.default_rng(1)
  xn, wn = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
  x, w = Tensor(xn), Tensor(wn)
  y = x @ w; ly = _line()  # noqa: E702
  y.realize()
  z = y * 3; lz = _line()  # noqa: E702
  z.realize()
  recorder.disable()
  name = "test_sites_found_through_folds_and_realized_inputs"
  here = Path(__file__).resolve()
  sites = [k[1] for k in _kernel_sites(trace)]
  assert sites == [[_site(here, ly, name)], [_site(here, lz, name)]]
  np.testing.assert_allclose(z.numpy(), xn.astype(np.float64) @ wn * 3, rtol=1e-5)


def test_a_schedule_cache_hit_names_its_own_lines(trace, fresh_caches):
  """Two graphs of one structure from different lines share a schedule: each run's kernel names its own line."""
  a, b = Tensor(np.arange(4, dtype=np.float32)), Tensor(np.ones(4, dtype=np.float32))
  y1 = (a + 1).exp(); l1 = _line()  # noqa: E702
  y1.realize()
  y2 = (b + 1).exp(); l2 = _line()  # noqa: E702
  y2.realize()
  recorder.disable()
  name = "test_a_schedule_cache_hit_names_its_own_lines"
  here = Path(__file__).resolve()
  assert [k[1] for k in _kernel_sites(trace)] == [[_site(here, l1, name)], [_site(here, l2, name)]]
  assert any(r.get("t") == "rw_begin" and r["name"] == "schedule cache hit" for r in TraceReader(trace))
  np.testing.assert_allclose(y2.numpy(), np.exp(np.full(4, 2.0)), rtol=1e-6)


def test_a_long_chain_keeps_its_first_sites_and_its_output(trace, fresh_caches, tmp_path):
  n = MAX_CALLSITES + 4
  src = tmp_path / "chain.py"
  src.write_text("def chain(x):\n" + "".join(f"  x = x + {i}\n" for i in range(n)) + "  return x\n")
  ns: dict = {}
  exec(compile(src.read_text(), str(src), "exec"), ns)
  y = ns["chain"](Tensor(np.zeros(3, dtype=np.float32)))
  y.realize()
  recorder.disable()
  ((_, sites, more),) = _kernel_sites(trace)
  lines = [s["line"] for s in sites]
  assert lines == [*range(2, MAX_CALLSITES + 1), n + 1] and more == n - MAX_CALLSITES
  np.testing.assert_array_equal(y.numpy(), np.full(3, sum(range(n)), np.float32))


def test_no_frame_walk_when_not_recording(monkeypatch):
  calls = []
  real = sys._getframe

  def counting(depth: int = 0):
    calls.append(depth)
    return real(depth + 1)

  a, b = Tensor(np.ones(4, np.float32)), Tensor(np.ones(4, np.float32))
  monkeypatch.setattr(recorder, "RECORDER", None)
  monkeypatch.setattr(sys, "_getframe", counting)
  c = a + b
  assert calls == [] and recorder.callsite_of(c.uop) is None
  # the same op while recording walks the frames (so the count above can fail)
  monkeypatch.setattr(recorder, "RECORDER", recorder._Pending())
  d = a * b; line = real().f_lineno  # noqa: E702
  monkeypatch.setattr(sys, "_getframe", real)
  assert calls and recorder.callsite_of(d.uop) == (__file__, line, "test_no_frame_walk_when_not_recording")


def test_api_kernel_answers_have_callsites(trace, fresh_caches):
  x = Tensor(np.arange(8, dtype=np.float32))
  y = (x * x).sum(); ly = _line()  # noqa: E702
  y.realize()
  recorder.disable()
  client = create_app([trace], follow=False).test_client()
  (t,) = client.get("/api/traces").get_json()
  (k,) = client.get(f"/api/traces/{t['id']}/kernels").get_json()
  site = _site(Path(__file__).resolve(), ly, "test_api_kernel_answers_have_callsites")
  assert k["callsites"] == [site] and k["callsites_more"] == 0
  body = client.get(f"/api/traces/{t['id']}/contexts/{k['ctx']}/kernel").get_json()
  assert body["callsites"] == [site]
  boot = client.get(f"/api/traces/{t['id']}/contexts").get_json()
  assert [c["callsites"] for c in boot if c["kind"] == "kernel"] == [[site]]


@pytest.mark.parametrize("bad, why", [
  ([{"file": "a.py", "line": "7", "function": "f"}], "must be int"),
  ([{"file": "a.py", "line": 7}], "lacks field 'function'"),
  (["a.py:7"], r"must be list\[dict\]"),
  ([{"file": "a.py", "line": 7, "function": "f"}] * (MAX_CALLSITES + 1), "more than"),
])
def test_bad_callsites_are_damage(bad, why):
  rec = {"t": "ctx_begin", "id": 1, "parent": 0, "name": "E_4", "kind": "kernel", "ts": 0.0, "callsites": bad}
  with pytest.raises(TraceFormatError, match=why):
    validate_record(rec)
  old = {k: v for k, v in rec.items() if k != "callsites"}  # a trace before minor version 3
  assert validate_record(old)


def test_a_kernel_reading_a_lowered_pow_keeps_the_lines_above_it(trace, fresh_caches):
  """POW is lowered by a rule ("earliest rewrites"): the kernel computed from its result still names its own line,
  found through the node the lowering rebuilt."""
  x = Tensor(np.linspace(0.5, 2, 8, dtype=np.float32))
  y = Tensor(np.linspace(1, 3, 8, dtype=np.float32))
  p = x ** y; lp = _line()  # noqa: E702
  q = p + 1; lq = _line()  # noqa: E702
  q.realize()
  recorder.disable()
  name = "test_a_kernel_reading_a_lowered_pow_keeps_the_lines_above_it"
  here = Path(__file__).resolve()
  sites = [k[1] for k in _kernel_sites(trace)]
  assert sites[-1] == [_site(here, lp, name), _site(here, lq, name)], [[c["line"] for c in s] for s in sites]
  np.testing.assert_allclose(q.numpy(), np.linspace(0.5, 2, 8) ** np.linspace(1, 3, 8) + 1, rtol=1e-5)


def test_nodes_carry_the_line_that_made_them_through_rewrites(trace):
  """Trace 2.7: a node record names the user's line that made the node; what a rule makes of such a node, and a node
  rebuilt over rewritten sources, name that line too; a node the compiler made of nothing names none."""
  x = Tensor(np.arange(4, dtype=np.float32))
  y = x * 3; ly = _line()  # noqa: E702
  z = (y + 1).exp2(); lz = _line()  # noqa: E702
  as_adds = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("a"), UPat.var("c"))), lambda a, c: (a + c) + c)])
  out = graph_rewrite(z.uop, as_adds, name="as adds")
  bare = graph_rewrite(UOp.const(dtypes.float32, 2.0) * 5.0, as_adds, name="no line")
  recorder.disable()
  recs = list(TraceReader(trace))
  site = {r["id"]: r.get("site") for r in recs if r["t"] == "node"}
  rws = {r["name"]: r["id"] for r in recs if r["t"] == "rw_begin"}
  begin = {r["id"]: r for r in recs if r["t"] == "rw_begin"}
  end = {r["id"]: r for r in recs if r["t"] == "rw_end"}
  (m,) = [r for r in recs if r["t"] == "match" and r["rw"] == rws["as adds"]]
  name, here = "test_nodes_carry_the_line_that_made_them_through_rewrites", Path(__file__).resolve()
  assert out is not z.uop and bare.op is Ops.ADD
  assert site[begin[rws["as adds"]]["root"]] == _site(here, lz, name)  # the user's exp2, as noted
  assert site[m["before"]] == site[m["after"]] == _site(here, ly, name)  # the rule's ADD: the MUL's line
  assert site[end[rws["as adds"]]["root"]] == _site(here, lz, name)  # exp2 rebuilt over it: its own line
  assert site[begin[rws["no line"]]["root"]] is None and site[end[rws["no line"]]["root"]] is None
  # the viewer: a graph's nodes carry the line's short label, GET /nodes/<n> the whole site
  client = create_app([trace], follow=False).test_client()
  (t,) = client.get("/api/traces").get_json()
  rw = next(r for c in client.get(f"/api/traces/{t['id']}/contexts").get_json() for r in c["rewrites"]
            if r["name"] == "as adds")
  g1 = client.get(f"/api/traces/{t['id']}/rewrites/{rw['id']}/graph?step=1").get_json()
  labels = {n["id"]: n.get("site") for n in g1["nodes"]}
  assert labels[m["after"]] == f"test_callsites.py:{ly} {name}" and labels[end[rws["as adds"]]["root"]] == \
    f"test_callsites.py:{lz} {name}"
  assert all(labels[i] is None for i, s in site.items() if s is None and i in labels)
  node = client.get(f"/api/traces/{t['id']}/nodes/{m['after']}").get_json()
  assert node["site"] == _site(here, ly, name)


def test_a_later_recording_names_its_own_line(tmp_path):
  """A node made again in a later recording is the same object (hash-consing): its line is the later one's, not the
  line an earlier recording noted on it (recorder.forget_callsites when a recording ends)."""
  first, second = tmp_path / "a.vztrace", tmp_path / "b.vztrace"
  recorder.enable(first, announce=False)
  try:
    a = Tensor.full((4,), 2.0) * 3; la = _line()  # noqa: E702
  finally:
    recorder.disable()
  recorder.enable(second, announce=False)
  try:
    b = Tensor.full((4,), 2.0) * 3; lb = _line()  # noqa: E702
    assert b.uop is a.uop
    b.realize()
  finally:
    recorder.disable()
  lines = {r["site"]["line"] for r in TraceReader(second) if r["t"] == "node" and "site" in r}
  assert lb in lines and la not in lines
