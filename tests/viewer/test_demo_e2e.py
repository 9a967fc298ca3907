"""End to end: the demo compiles the five workloads with VIZ set; the viewer's API then answers the questions a user
asks of the trace: which rule made this node, what did a pass change, which opts made a kernel, what source came
out and how fast it ran."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from viz_server.app import create_app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory):
  path = tmp_path_factory.mktemp("demo") / "demo.vztrace"
  env = {**os.environ, "VIZ": "-1", "VIZ_TRACE": str(path), "PYTHONPATH": str(ROOT)}
  p = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py"), "--scale", "0.25"], env=env,
                     capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stdout + p.stderr
  rows = [line.split() for line in p.stdout.splitlines() if line and line.split()[0] in
          ("elementwise", "matmul", "softmax", "mlp", "conv2d")]
  assert len(rows) == 5 and all(r[-1] == "yes" for r in rows), p.stdout
  return path, {r[0]: int(r[1]) for r in rows}


@pytest.fixture(scope="module")
def client(demo_trace):
  return create_app([demo_trace[0]], follow=False).test_client()


def _get(client, url):
  r = client.get(url)
  assert r.status_code == 200, (url, r.status_code, r.data[:300])
  return r.get_json()


def test_info_counts_match_the_api(demo_trace, client):
  info = subprocess.run([sys.executable, "-m", "compiler.trace", "info", "--json", str(demo_trace[0])],
                        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert info.returncode == 0, info.stderr
  counts = json.loads(info.stdout)
  entry = _get(client, "/api/traces")[0]
  assert entry["status"] == "ended"
  assert entry["counts"]["matches"] == counts["matches"]
  assert entry["counts"]["rewrites"] == counts["rewrites"]
  assert entry["counts"]["contexts"] == counts["contexts"]


def test_every_kernel_has_opts_sources_and_runs(demo_trace, client):
  kernels_per_workload = demo_trace[1]
  contexts = _get(client, "/api/traces/0/contexts")
  schedules = [c for c in contexts if c["kind"] == "schedule"]
  assert len(schedules) >= 5
  kernels = _get(client, "/api/traces/0/kernels")
  names = {k["name"] for k in kernels}
  # every distinct kernel the demo ran was compiled in a kernel context
  assert len(names) >= max(kernels_per_workload.values())
  compiled = set()
  for k in kernels:
    detail = _get(client, f"/api/traces/0/contexts/{k['ctx']}/kernel")
    kinds = {s["kind"] for s in detail["sources"]}
    if not kinds:  # a cached kernel run again: its compile is in an earlier context of the same name
      continue
    compiled.add(k["name"])
    assert {"llvm_ir", "opt_ir", "asm"} <= kinds, (k["name"], kinds)
    ir = next(s for s in detail["sources"] if s["kind"] == "llvm_ir")
    assert "define" in ir["text"] and "<span" in ir["html"]
    assert all(o["ok"] in (True, False) and o["shape"] for o in detail["opts"])
  assert compiled == names  # each kernel's compile (IR, optimized IR, assembly) is in the trace
  runs = _get(client, "/api/traces/0/runs")
  assert runs and all(r["min"] is not None and r["min"] > 0 for r in runs)
  matmul = [r for r in runs if r["kname"].startswith("r_") and r["flops"]]
  assert matmul and all(r["gflops"] > 0 for r in matmul)


def test_rule_and_pass_questions_are_answerable(client):
  contexts = _get(client, "/api/traces/0/contexts")
  changed = [(c, rw) for c in contexts for rw in c["rewrites"] if rw["matches"] > 0]
  assert changed
  ctx, rw = max(changed, key=lambda x: x[1]["matches"])
  detail = _get(client, f"/api/traces/0/rewrites/{rw['id']}")
  step = detail["steps"][0]
  pattern = _get(client, f"/api/traces/0/patterns/{step['pattern']}")
  assert pattern["src"] and pattern["file"] and pattern["line"] > 0
  g0 = _get(client, f"/api/traces/0/rewrites/{rw['id']}/graph?step=0")
  g1 = _get(client, f"/api/traces/0/rewrites/{rw['id']}/graph?step=1")
  ids0, ids1 = {n["id"] for n in g0["nodes"]}, {n["id"] for n in g1["nodes"]}
  assert step["before"] in ids0 and step["after"] in ids1
  assert set(g1["added"]) <= ids1 and ids0 != ids1
  diff = _get(client, f"/api/diff?a=0:{rw['id']}:0&b=0:{rw['id']}:end")
  assert any(line["kind"] in "+-" for line in diff["lines"])
