"""A CL kernel in the trace (issue 33): a program recorded on BACKEND=cl (Debian's pocl) writes what an LLVM kernel
writes: its opts, its "uops" and "opencl" sources (the OpenCL C, each line mapped to its UOps' nodes, with the
launch's global and local sizes and the device compiler's build time), and its runs, timed by profiling events."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from support.cl_helpers import record_cl_matmul_relu
from support.codegen_helpers import G, buf, sink

from compiler.codegen.opencl import cl_program
from compiler.dtype import dtypes
from compiler.opt import Kernel, Opt, OptOps
from compiler.opt.target import cl_target
from compiler.runtime.buffer import Buffer
from compiler.runtime.opencl import Device, cl_kernel, get_device, launch_sizes
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.uop import Ops, UOp
from vztrace import format as fmt
from vztrace.format import TraceFormatError, validate_record
from vztrace.reader import TraceReader


@pytest.fixture(scope="module")
def cl_trace(tmp_path_factory) -> tuple[list[dict], dict[int, dict]]:
  """(the records of a matmul + relu recorded on BACKEND=cl, the kernel contexts by id)."""
  path = tmp_path_factory.mktemp("cl") / "cl.vztrace"
  record_cl_matmul_relu(path)
  recs = list(TraceReader(path))
  kernels = {r["id"]: r for r in recs if r["t"] == "ctx_begin" and r["kind"] == "kernel"}
  return recs, kernels


def _of(recs: list[dict], t: str, ctx: int) -> list[dict]:
  return [r for r in recs if r["t"] == t and r["ctx"] == ctx]


def test_each_cl_kernel_has_its_opencl_source_sizes_opts_and_run(cl_trace):
  recs, kernels = cl_trace
  assert len(kernels) == 2  # the matmul and the relu
  for cid, ctx in kernels.items():
    srcs = {s["kind"]: s for s in _of(recs, "source", cid)}
    assert set(srcs) == {"uops", "opencl"}, ctx["name"]
    cl = srcs["opencl"]
    assert re.search(r"__kernel void \w+\(__global float\* data0", cl["text"])
    assert cl["compile_s"] >= 0 and cl["ts"] > 1.7e9
    assert cl["global_size"] and all(type(n) is int and n >= 1 for n in cl["global_size"])
    # (the GPU heuristics' work-groups: LOCAL and GROUP axes, each dimension's work-group dividing its work-items)
    assert len(cl["local_size"]) == len(cl["global_size"])
    assert all(g % n == 0 for g, n in zip(cl["global_size"], cl["local_size"]))
    (run,) = _of(recs, "run", cid)
    assert run["times"][0] > 0 and run["min"] == run["median"] == run["times"][0] and run["ts"] >= cl["ts"]
    assert run["flops"] > 0 and run["bytes"] > 0
    assert run["gflops"] == pytest.approx(run["flops"] / run["min"] / 1e9)
    assert _of(recs, "opt", cid), "the CL target's opts are traced in the kernel's context"
  mm = next(c for c in kernels if kernels[c]["name"].startswith("r_"))
  cl = next(s for s in _of(recs, "source", mm) if s["kind"] == "opencl")
  # the 32-long dot products into 16x24 outputs: GROUPTOP splits each across a work-group of 16 work-items
  assert cl["local_size"] == [16, 1, 1] and math.prod(cl["global_size"]) == 16 * 24 * 16


def test_opencl_lines_map_to_their_nodes(cl_trace):
  recs, kernels = cl_trace
  ops = {r["id"]: r["op"] for r in recs if r["t"] == "node"}
  for cid in kernels:
    cl = next(s for s in _of(recs, "source", cid) if s["kind"] == "opencl")
    uops = next(s for s in _of(recs, "source", cid) if s["kind"] == "uops")
    text = cl["text"].split("\n")
    assert len(cl["lines"]) == len(text) and cl["uops"] == uops["uops"] and all(i in ops for i in cl["uops"])
    for t, ln in zip(text, cl["lines"]):
      if t.startswith(("#pragma", "__kernel", "}")) or not t:  # (the pragmas, signature and closing brace)
        assert ln == [], t
      got = [ops[cl["uops"][i]] for i in ln]
      if "get_global_id" in t:
        assert got == ["RANGE"], t
      elif re.match(r"\s+\w+ v\d+ = data\d+\[", t):
        assert got == ["LOAD"], t
      elif re.match(r"\s+data\d+\[.*\] = ", t):
        assert got == ["STORE"], t


def test_a_local_axis_records_its_work_group_and_a_variable_size_its_expression(tmp_path):
  x = np.random.default_rng(4).uniform(0, 1, (6, 8)).astype(np.float32)
  (si,) = create_schedule([(Tensor(x) * 3 + 2).sqrt().uop])[0]
  lim = get_device().limits
  ast = Kernel(si.ast, cl_target(lim.name, lim.max_work_group_size, lim.local_mem_bytes)).apply_opts(
    [Opt(OptOps.LOCAL, 1, 4)]).get_optimized_ast()
  bufs = [Buffer(b.dtype, b.size) for b in si.bufs]
  for o, b in zip(bufs, si.bufs):
    o.ensure_allocated(zero=True)
    if b.allocated:
      o.np[:] = b.np
  path = tmp_path / "local.vztrace"
  recorder.enable(path, announce=False)
  try:
    with recorder.trace_context("local", kind="kernel"):
      cl_kernel(ast)(bufs)
  finally:
    recorder.disable()
  np.testing.assert_allclose(bufs[0].np.reshape(6, 8), np.sqrt(x * 3 + 2), rtol=1e-6)
  recs = list(TraceReader(path))
  (src,) = [r for r in recs if r["t"] == "source" and r["kind"] == "opencl"]
  assert src["global_size"] == [4, 2, 6] and src["local_size"] == [4, 1, 1]
  assert len([r for r in recs if r["t"] == "run" and r["ctx"] == src["ctx"]]) == 1

  n = UOp.variable("n", 1, 64)
  i = UOp(Ops.RANGE, dtypes.int32, (n * 2,), (0, G))
  gsize, lsize = launch_sizes(cl_program(sink(buf(0, 128).index(i).store(buf(1, 128).index(i).load() * 3.0),
                                              name="E_var")))
  assert lsize is None and gsize == [(n * 2).render()] and "n" in gsize[0]


def test_build_time_is_the_device_compilers_once_per_source():
  dev = Device()
  src = "__kernel void twice(__global float* a) { a[get_global_id(0)] *= 2.0f; }"
  k1, s1 = dev.build_timed(src, "twice")
  k2, s2 = dev.build_timed(src, "twice")
  assert k1 is k2 and s1 > 0 and s2 == 0.0


def test_the_format_takes_launch_sizes_bounded():
  assert fmt.VERSION >= (2, 5)
  rec = {"t": "source", "ctx": 1, "kind": "opencl", "text": "x", "compile_s": 0.1, "global_size": [4, "n*2"],
         "local_size": [4]}
  validate_record(rec)
  validate_record({k: v for k, v in rec.items() if k not in ("global_size", "local_size")})  # a 2.4 record
  for bad in ({"global_size": [1.5]}, {"local_size": "4"}, {"global_size": [1] * (fmt.MAX_LAUNCH_DIMS + 1)}):
    with pytest.raises(TraceFormatError):
      validate_record({**rec, **bad})
