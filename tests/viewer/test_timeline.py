"""GET /api/traces/<t>/timeline over a real compiler trace: contexts, passes, LLVM compiles and kernel runs placed on
one time axis, nested where the program nested them; traces without the 2.1 timestamps still give what they have."""
import math

import numpy as np
import pytest
from support.server_helpers import recording, write_kernel_trace

from compiler.tensor import Tensor
from compiler.trace import recorder
from viz_server.app import create_app

EPS = 1e-6  # timestamps are floats of epoch seconds: a span's end can land a rounding step past its parent's


@pytest.fixture(scope="module")
def client(tmp_path_factory):
  d = tmp_path_factory.mktemp("timeline")
  with recording(d / "real.vztrace"):
    x = Tensor(np.arange(256, dtype=np.float32).reshape(16, 16))
    y = ((x * 2 + 1).sum(axis=1).softmax()).numpy()  # schedules, kernels (codegen passes, LLVM compiles) and runs
  assert np.isfinite(y).all()
  write_kernel_trace(d / "old.vztrace")  # source and run records without ts, as a 2.0 recorder wrote them
  return create_app([d / "real.vztrace", d / "old.vztrace"], follow=False).test_client()


def _get(client, url):
  r = client.get(url)
  assert r.status_code == 200, r.data[:300]
  return r.get_json()


def test_contexts_nest_and_passes_lie_inside_their_context(client):
  tl = _get(client, "/api/traces/0/timeline")
  ctxs = _get(client, "/api/traces/0/contexts")
  assert [c["id"] for c in tl["contexts"]] == [c["id"] for c in ctxs]
  assert {c["kind"] for c in tl["contexts"]} >= {"default", "schedule", "kernel"}
  by_id = {c["id"]: c for c in tl["contexts"]}
  for c in tl["contexts"]:
    assert c["end"] is not None and c["start"] <= c["end"] <= tl["end"] + EPS
    if c["parent"] is None:
      assert c["depth"] == 0 and c["start"] == 0.0  # the default context opens the trace: t0
    else:
      p = by_id[c["parent"]]
      assert c["depth"] == p["depth"] + 1 and p["start"] <= c["start"] + EPS and c["end"] <= p["end"] + EPS
  rws = tl["rewrites"]
  want = {rw["id"]: (c["id"], rw) for c in ctxs for rw in c["rewrites"]}
  assert sorted(rws["id"]) == sorted(want) and len(want) > 20
  for i, rid in enumerate(rws["id"]):
    cid, rw = want[rid]
    c = by_id[cid]
    assert rws["ctx"][i] == cid and rws["names"][rws["name"][i]] == rw["name"] and rws["matches"][i] == rw["matches"]
    assert math.isclose(rws["dur"][i], rw["dt"] / 1e9, rel_tol=1e-9)
    assert c["start"] <= rws["start"][i] + EPS and rws["start"][i] + rws["dur"][i] <= c["end"] + EPS


def test_each_compile_and_run_is_placed_in_its_kernel(client):
  tl = _get(client, "/api/traces/0/timeline")
  by_id = {c["id"]: c for c in tl["contexts"]}
  runs = _get(client, "/api/traces/0/runs")
  kernels = _get(client, "/api/traces/0/kernels")
  compiled = [k["ctx"] for k in kernels if "llvm_ir" in k["sources"]]
  assert sorted(c["ctx"] for c in tl["compiles"]) == sorted(compiled) and len(compiled) >= 2
  for c in tl["compiles"]:
    k = by_id[c["ctx"]]
    assert k["kind"] == "kernel" and k["start"] <= c["start"] + EPS and c["start"] + c["dur"] <= k["end"] + EPS
  assert [(r["ctx"], r["kname"]) for r in tl["runs"]] == [(r["ctx"], r["kname"]) for r in runs] and runs
  compile_start = {c["ctx"]: c["start"] for c in tl["compiles"]}
  for r, want in zip(tl["runs"], runs):
    assert math.isclose(r["dur"], sum(want["times"]), rel_tol=1e-9)
    assert r["start"] >= compile_start[r["ctx"]]  # a kernel runs after it is compiled
    assert r["start"] + r["dur"] <= tl["end"] + EPS


def test_a_trace_without_timestamps_on_runs_and_sources_has_no_such_spans(client):
  tl = _get(client, "/api/traces/1/timeline")
  assert tl["runs"] == [] and tl["compiles"] == []
  assert [c["name"] for c in tl["contexts"]] == ["default", "schedule 1", "r_4_4"]
  assert sorted(tl["rewrites"]["names"]) == ["early", "simplify"]


def test_null_and_missing_times_are_left_out(tmp_path):
  with recording(tmp_path / "t.vztrace"):
    with recorder.trace_context("k", kind="kernel"):
      recorder.record("run", kname="a", times=[1e-3, float("nan")], min=1e-3, median=1e-3, flops=1.0, bytes=1.0,
                      gflops=1.0, gbs=1.0, ts=float("nan"))  # written as null
      recorder.record("run", kname="b", times=[2e-3, None], min=2e-3, median=2e-3, flops=1.0, bytes=1.0, gflops=1.0,
                      gbs=1.0, ts=recorder.time.time())
  tl = _get(create_app([tmp_path / "t.vztrace"], follow=False).test_client(), "/api/traces/0/timeline")
  (run,) = tl["runs"]
  assert run["kname"] == "b" and run["dur"] == 2e-3


def test_an_unknown_trace_is_a_404(client):
  r = client.get("/api/traces/9/timeline")
  assert r.status_code == 404 and "error" in r.get_json()
