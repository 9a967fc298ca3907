"""The API's answer for a CL kernel (issue 33): its OpenCL C highlighted, its lines' nodes, and its launch's global
and local sizes (`launch`), from a program recorded on BACKEND=cl and from hand-written records (a trace of an older
minor version, and a hostile one, answer no launch)."""
from __future__ import annotations

import re

from support import hostile_traces as ht
from support.cl_helpers import record_cl_matmul_relu

from viz_server.app import create_app


def _kernel(path, ctx: int = 0) -> dict:
  c = create_app([path], follow=False).test_client()
  return c.get(f"/api/traces/0/contexts/{ctx}/kernel").get_json()


def test_a_recorded_cl_kernel_answers_its_opencl_source_sizes_and_runs(tmp_path):
  path = tmp_path / "cl.vztrace"
  record_cl_matmul_relu(path)
  c = create_app([path], follow=False).test_client()
  ks = c.get("/api/traces/0/kernels").get_json()
  mm = next(k for k in ks if k["name"].startswith("r_"))
  assert mm["sources"] == ["uops", "opencl"] and mm["run"] is not None
  body = c.get(f"/api/traces/0/contexts/{mm['ctx']}/kernel").get_json()
  src = next(s for s in body["sources"] if s["kind"] == "opencl")
  assert '<span class="k">__kernel</span> <span class="kt">void</span> <span class="nf">r_' in src["html"]
  assert '<span class="nb">get_global_id</span>' in src["html"]
  assert len(src["nodes"]) == src["text"].count("\n") + 1 and any(src["nodes"])
  launch = body["launch"]
  # (the GPU heuristics split each dot product across a work-group of 16: GROUPTOP)
  assert launch["local"] == [16, 1, 1] and 16 in launch["global"] and all(type(n) is int for n in launch["global"])
  assert len(body["runs"]) == 1 and body["runs"][0]["median"] > 0
  assert body["opts"], "the CL target's opts"


def _trace(tmp_path, **fields) -> dict:
  recs = [ht.meta(), {"t": "ctx_begin", "id": 0, "parent": None, "name": "r_4", "kind": "kernel", "ts": 1.7e9},
          {"t": "source", "ctx": 0, "kind": "opencl", "text": "__kernel void r_4() {}\n", "compile_s": 0.1,
           **fields}, ht.END]
  return _kernel(ht.write(tmp_path / "h.vztrace", [recs]))


def test_launch_sizes_of_hand_written_records(tmp_path):
  assert _trace(tmp_path, global_size=[8, "n*2"], local_size=[8, 1])["launch"] == {"global": [8, "n*2"],
                                                                                  "local": [8, 1]}
  assert _trace(tmp_path, global_size=[3])["launch"] == {"global": [3], "local": None}
  body = _trace(tmp_path)  # (format 2.4: no sizes)
  assert body["launch"] is None and re.search(r'class="k">__kernel<', body["sources"][0]["html"])
