"""The scheduler: fusion decisions, the kernel AST contract, kernel names, buffer reuse, and what the trace shows."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import Tensor, dtypes
from compiler.realize import run_schedule
from compiler.schedule.cache import SCHEDULES
from compiler.schedule.rangeify import create_schedule
from compiler.trace import recorder
from compiler.uop import AxisType, Ops, UOp
from vztrace.reader import TraceReader

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.workloads import WORKLOADS  # noqa: E402

rng = np.random.default_rng(3)
NAME = re.compile(r"^[Er]_\d+(_\d+)*(n\d+)?$")


def randt(*shape):
  return Tensor(rng.standard_normal(shape).astype(np.float32))


def ops_in(ast: UOp, op: Ops) -> list[UOp]:
  return [u for u in ast.toposort() if u.op is op]


def check_contract(si) -> None:
  """Everything docs/architecture.md promises about a scheduled kernel AST."""
  ast = si.ast
  assert ast.op is Ops.SINK and NAME.match(ast.arg.name), ast.arg
  nodes = ast.toposort()
  assert not any(u.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.REDUCE_AXIS,
                          Ops.BUFFER, Ops.BUFFERIZE, Ops.CONTIGUOUS, Ops.AFTER, Ops.KERNEL) for u in nodes)
  stores = [u for u in ast.src]
  assert stores and all(s.op is Ops.STORE and s.src[0].op is Ops.INDEX for s in stores)
  globals_ = {u.arg: u for u in nodes if u.op is Ops.DEFINE_GLOBAL}
  assert sorted(globals_) == list(range(len(globals_))) == list(range(len(si.bufs)))
  assert [s.src[0].src[0].arg for s in stores] == list(range(len(stores)))  # outputs are the first slots
  for slot, g in globals_.items():
    assert g.dtype.base == si.bufs[slot].dtype and g.dtype.size == si.bufs[slot].size
  rngs = sorted((u for u in nodes if u.op is Ops.RANGE), key=lambda r: r.arg[0])
  assert len({r.arg[0] for r in rngs}) == len(rngs)
  for r in rngs:
    assert r.dtype == dtypes.index and r.src[0].op is Ops.CONST and r.src[0].arg > 1
  loops = [r for r in rngs if r.arg[1] is AxisType.LOOP]
  reduces = [r for r in rngs if r.arg[1] is AxisType.REDUCE]
  assert [r.arg[0] for r in loops] == list(range(len(loops)))  # output axes first, then reduce axes
  assert all(r.arg[0] >= len(loops) for r in reduces)
  for s in stores:
    assert set(loops) <= set(s.src[0].src[1].toposort())  # every output axis is in the store index
    assert s.src[1].dtype == s.src[0].src[0].dtype.base
  for red in ops_in(ast, Ops.REDUCE):
    assert red.arg in (Ops.ADD, Ops.MAX, Ops.MUL)
    assert all(r.op is Ops.RANGE and r.arg[1] is AxisType.REDUCE for r in red.src[1:])
    for inner in ops_in(red.src[0], Ops.REDUCE):  # a nested reduction (bufferize's `nested_reduces`): one level
      assert not ops_in(inner.src[0], Ops.REDUCE), "REDUCE nested two levels deep"
  for ld in ops_in(ast, Ops.LOAD):
    assert ld.src[0].op is Ops.INDEX and ld.src[0].src[0].op is Ops.DEFINE_GLOBAL
    assert ld.dtype == ld.src[0].src[0].dtype.base
    if len(ld.src[0].src) == 3:
      assert ld.src[0].src[2].dtype == dtypes.bool


def named(si, base: str) -> bool:
  """The kernel's name is `base`, maybe with the "nK" suffix another AST of the same shape made it take."""
  return re.fullmatch(re.escape(base) + r"(n\d+)?", si.name) is not None


def kernels(*ts: Tensor) -> list:
  sched = ts[0].schedule(*ts[1:])
  for si in sched:
    check_contract(si)
  return sched


# ---- fusion

def test_elementwise_chain_is_one_kernel():
  a, b = randt(16, 8), randt(16, 8)
  sched = kernels((a * b + 1).relu())
  assert len(sched) == 1 and named(sched[0], "E_16_8")
  assert len(ops_in(sched[0].ast, Ops.LOAD)) == 2


def test_sum_after_elementwise_is_one_kernel():
  x = randt(32, 4)
  sched = kernels((x * 2 + 1).exp().sum())
  assert len(sched) == 1 and named(sched[0], "r_32_4")
  assert len(ops_in(sched[0].ast, Ops.REDUCE)) == 1
  sched = kernels((x.sum(1) * 3).sqrt())  # elementwise after a reduce fuses too
  assert len(sched) == 1 and named(sched[0], "r_32_4")


def test_small_softmax_is_two_kernels():
  # the max, then the output with the sum joined to it (a row reduction read broadcast along the last axis)
  sched = kernels(randt(8, 64).softmax())
  assert [si.name[0] for si in sched] == ["r", "r"]


def test_big_softmax_computes_exp_once():
  # exp(x - max) is read by the sum and by the division: past MIN_SHARED_EXPENSIVE elements it gets a buffer; the
  # max joins its kernel and the sum the division's (row reductions)
  x = randt(64, 512)
  sched = kernels(x.softmax())
  assert [si.name[0] for si in sched] == ["r", "r"]
  assert sum(len(ops_in(si.ast, Ops.EXP2)) for si in sched) == 1
  e = np.exp(x.numpy() - x.numpy().max(-1, keepdims=True))
  np.testing.assert_allclose(x.softmax().numpy(), e / e.sum(-1, keepdims=True), rtol=1e-6, atol=1e-7)
  # an exp that only reductions read stays inlined into them (they share one kernel)
  e2 = x.exp()
  assert len(kernels(e2.sum() + e2.max())) == 1


def test_matmul_is_one_kernel():
  sched = kernels(randt(16, 32) @ randt(32, 8))
  assert len(sched) == 1 and named(sched[0], "r_16_8_32")
  assert len(ops_in(sched[0].ast, Ops.REDUCE)) == 1 and len(ops_in(sched[0].ast, Ops.LOAD)) == 2


def test_reduce_used_twice_is_not_recomputed():
  x = randt(8, 16)
  s = x.sum(1)
  a, b = s + 1, s * 2
  sched = kernels(a, b)
  assert sum(len(ops_in(si.ast, Ops.REDUCE)) for si in sched) == 1
  a.realize(b)
  np.testing.assert_allclose(a.numpy(), x.numpy().sum(1) + 1, rtol=1e-5)
  np.testing.assert_allclose(b.numpy(), x.numpy().sum(1) * 2, rtol=1e-5)
  # read through an expand along the last axis: joined to its reader, computed once per row there
  sched = kernels(x - x.max(1, keepdim=True))
  assert len(sched) == 1 and sum(len(ops_in(si.ast, Ops.REDUCE)) for si in sched) == 1
  # ... along the first axis (its reader's inner loop): materialized once
  sched = kernels(x - x.max(0, keepdim=True))
  assert len(sched) == 2 and sum(len(ops_in(si.ast, Ops.REDUCE)) for si in sched) == 1
  # two uses inside one consumer, and one use each in two kernels
  sched = kernels(s.exp() + s)
  assert sum(len(ops_in(si.ast, Ops.REDUCE)) for si in sched) == 1


def test_reduce_of_reduce_is_nested_only_when_switched_on(monkeypatch):
  monkeypatch.setenv("SCHEDULE_CACHE", "0")
  x = randt(4, 8, 16)
  assert len(kernels(x.sum(2).exp().max(1))) == 2  # by default the sum is a kernel of its own
  monkeypatch.setenv("NESTED_REDUCE", "1")  # read once by the max: computed inside its kernel
  sched = kernels(x.sum(2).exp().max(1))
  assert len(sched) == 1 and len(ops_in(sched[0].ast, Ops.REDUCE)) == 2
  y = x.sum(2).exp().max(1)
  np.testing.assert_allclose(y.numpy(), np.exp(x.numpy().sum(2)).max(1), rtol=1e-5)


def test_elementwise_used_twice_is_recomputed():
  x = randt(8, 8)
  e = x.exp()
  sched = kernels(e.sum() + e.max())
  # exp is inlined into both reductions, which sit side by side (not nested) in one kernel
  assert len(sched) == 1 and len(ops_in(sched[0].ast, Ops.REDUCE)) == 2
  assert len(ops_in(sched[0].ast, Ops.EXP2)) == 2 and len(ops_in(sched[0].ast, Ops.LOAD)) == 2  # one per reduction
  np.testing.assert_allclose((e.sum() + e.max()).item(), np.exp(x.numpy()).sum() + np.exp(x.numpy()).max(), rtol=1e-5)


def test_contiguous_and_realize_make_buffers():
  x = randt(4, 4)
  assert len(kernels((x + 1).contiguous() * 2)) == 2
  y = x + 1
  y.realize()
  sched = kernels(y * 2)
  assert len(sched) == 1 and len(sched[0].bufs) == 2  # reads y's buffer, does not recompute x + 1
  assert len(ops_in(sched[0].ast, Ops.ADD)) == 1  # only the index math
  # a graph built before the realize also reads the buffer
  x2 = randt(4, 4)
  z = x2 * 3
  w = z + 1
  z.realize()
  assert len(kernels(w)) == 1 and len(kernels(w)[0].bufs) == 2


def test_equal_kernels_are_reused():
  x = randt(8, 8)
  a, b = x + 1, x + 1
  sched = kernels(a, b)
  assert len(sched) == 1
  Tensor.realize(a, b)
  np.testing.assert_array_equal(a.numpy(), b.numpy())
  # equal computations on different buffers give the same (hash-consed) AST
  s1, s2 = kernels(randt(8, 8) * 2), kernels(randt(8, 8) * 2)
  assert s1[0].ast is s2[0].ast and s1[0].bufs[1] is not s2[0].bufs[1]


def test_realized_view_needs_no_kernel():
  x = randt(3, 4)
  assert kernels(x.reshape(12)) == [] and kernels(x.contiguous()) == []
  assert len(kernels(x.T)) == 1  # a permuted view is copied


def test_pad_becomes_valid_condition():
  x = randt(4, 6)
  ast = kernels(x.pad(((1, 1), (2, 0))))[0].ast
  gated = [i for i in ops_in(ast, Ops.INDEX) if len(i.src) == 3]
  assert len(gated) == 1 and not ops_in(ast, Ops.WHERE)
  ast = kernels(x.pad(((1, 1), (2, 0)), value=5.0))[0].ast
  assert ops_in(ast, Ops.WHERE) and [i for i in ops_in(ast, Ops.INDEX) if len(i.src) == 3]
  ast = kernels(x.exp().pad(((1, 1), None)))[0].ast  # exp(0) != 0: the pad is a WHERE around the value
  assert ops_in(ast, Ops.WHERE)


def test_expand_is_a_stride_zero_read():
  x = randt(1, 8)
  ast = kernels(x.expand(5, 8) * 2)[0].ast
  (ld,) = ops_in(ast, Ops.LOAD)
  r0 = [r for r in ast.toposort() if r.op is Ops.RANGE and r.arg[0] == 0][0]
  assert r0 not in ld.src[0].src[1].toposort()


def test_movement_ops_become_index_math():
  x = randt(6, 4)
  ast = kernels(x.T.reshape(3, 8).flip(1)[1:, ::2])[0].ast
  (ld,) = ops_in(ast, Ops.LOAD)
  assert ld.src[0].src[1].op in (Ops.ADD, Ops.RANGE, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.CONST)
  np.testing.assert_array_equal(x.T.reshape(3, 8).flip(1)[1:, ::2].numpy(), x.numpy().T.reshape(3, 8)[:, ::-1][1:, ::2])


def test_empty_and_scalar_outputs():
  assert kernels(Tensor.zeros(0, 3) + 1) == []
  sched = kernels(Tensor(2.0) * 3)
  assert len(sched) == 1 and named(sched[0], "E_1")
  assert (Tensor(2.0) * 3).item() == 6.0


def test_kernel_names():
  x = randt(4, 8)
  s1 = kernels(x.max(1))[0].name
  s2 = kernels(x.sum(1))[0].name
  assert s1.startswith("r_4_8") and s2.startswith("r_4_8") and s1 != s2
  assert kernels(x.max(1))[0].name == s1  # the same AST keeps its name


# ---- the workloads

EXPECTED_KERNELS = {"elementwise": 1, "matmul": 1, "softmax": 2, "mlp": 4, "conv2d": 1}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_kernel_counts(name):
  w = WORKLOADS[name](scale=0.125)
  sched = kernels(w.lazy())
  assert len(sched) == EXPECTED_KERNELS[name]


def test_run_schedule_with_outputs():
  x = randt(5, 6)
  sched, becomes = create_schedule([(x * 2).sum(0).uop])
  run_schedule(sched, backend="interp")
  (view,) = becomes.values()
  assert view.op is Ops.BUFFER and sched[-1].bufs[0].numpy().shape == (6,)
  np.testing.assert_allclose(sched[-1].bufs[0].numpy(), (x.numpy() * 2).sum(0), rtol=1e-5)


# ---- the trace

PASSES = ["View Tensor Graph", "earliest rewrites", "add bufferize", "remove bufferize", "split kernels",
          "open kernel + rangeify", "symbolic + kernel cleanup", "View Kernel Graph"]


def test_trace_shows_passes_and_kernels(tmp_path):
  SCHEDULES.clear()  # an earlier test may have scheduled a graph of this shape
  path = tmp_path / "sched.vztrace"
  recorder.enable(path, announce=False)
  try:
    x = randt(8, 32)
    y = x.softmax()
    n_kernels = len(y.schedule())
    y.realize()
  finally:
    recorder.disable()
  recs = list(TraceReader(path))
  ctxs = {r["id"]: r for r in recs if r["t"] == "ctx_begin"}
  sched_ctxs = [c for c in ctxs.values() if c["kind"] == "schedule"]
  assert len(sched_ctxs) == 2 and all(c["name"].startswith("schedule ") for c in sched_ctxs)
  # the first schedule ran the passes; realize() scheduled the same graph again: a cache hit, shown as one snapshot
  again = [r["name"] for r in recs if r["t"] == "rw_begin" and r["ctx"] == sched_ctxs[-1]["id"]]
  assert again[0] == "View Tensor Graph" and again[-2:] == ["schedule cache hit", "cache bind"]
  assert "open kernel + rangeify" not in again
  first = sched_ctxs[0]["id"]
  rws = [r for r in recs if r["t"] == "rw_begin" and r["ctx"] == first]
  names = [r["name"] for r in rws]
  assert names[0] == "View Tensor Graph" and names[-3:] == ["View Kernel Graph", "buffer views", "cache placeholders"]
  assert all(p in names for p in PASSES)
  assert names.count("open kernel + rangeify") == n_kernels == 2
  # the kernel graph snapshot holds one KERNEL node per kernel
  nodes = {r["id"]: r for r in recs if r["t"] == "node"}
  root = next(r for r in rws if r["name"] == "View Kernel Graph")["root"]
  seen, stack = set(), [root]
  while stack:
    n = stack.pop()
    if n not in seen:
      seen.add(n)
      stack.extend(nodes[n]["src"])
  assert sum(1 for n in seen if nodes[n]["op"] == "KERNEL") == n_kernels
  kctx = [c for c in ctxs.values() if c["kind"] == "kernel"]
  assert [c["name"] for c in kctx] == [si.name for si in x.softmax().schedule()]
  assert all(r.get("error") is None for r in recs if r["t"] == "rw_end")


def test_trace_off_costs_nothing_visible():
  assert recorder.RECORDER is None
  assert len(kernels(randt(4, 4).sum())) == 1


def test_cost_rule_bounds_recomputation():
  # a stencil chain reads each step at three indices: inlining every step would grow the kernel exponentially
  x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
  y, ref = x, x.numpy()
  for _ in range(10):
    y = (y + y.pad(((1, 0), None))[:-1] + y.pad((None, (1, 0)))[:, :-1]) * 0.3
    ref = (ref + np.pad(ref, ((1, 0), (0, 0)))[:-1] + np.pad(ref, ((0, 0), (1, 0)))[:, :-1]) * np.float32(0.3)
  sched = kernels(y)
  assert 1 < len(sched) < 10 and max(len(si.ast.toposort()) for si in sched) < 1000
  np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5)
  # a value read next to many earlier buffers is kept, so kernels don't re-read the whole history
  z = randt(4)
  for _ in range(30):
    z = (z - z.mean()) * 2
  sched = kernels(z)
  assert max(len(si.bufs) for si in sched) <= 6


def test_a_realized_constant_is_not_read_from_its_buffer_by_other_graphs():
  # hash-consing makes Tensor(2.0)'s node the constant 2.0 of every graph: remembering it as realized made them all
  # load it from that buffer (an extra input per kernel), and two equal constant tensors share one buffer
  Tensor(2.0).numpy()
  (si,) = kernels(randt(2, 2) * 2.0)
  assert len(si.bufs) == 2 and not any(ld.src[0].src[0].arg == 2 for ld in ops_in(si.ast, Ops.LOAD))
  a, b = (Tensor.zeros(3).contiguous().realize() for _ in range(2))
  a.assign(a + 1).realize()
  np.testing.assert_array_equal(a.numpy(), [1, 1, 1])
  np.testing.assert_array_equal(b.numpy(), [0, 0, 0])


def test_a_relu_layer_is_stored_once_relud_and_its_backward_reads_that():
  # h = relu(x @ w1): relu's backward mask reads its output (h <= 0 exactly where x @ w1 <= 0), and relu's three
  # reads of x @ w1 are one expression, so the matmul's kernel stores h and nothing else of that shape is kept for
  # the backward (before: x @ w1 stored, relu recomputed in each reader, the mask reading the pre-relu buffer)
  rng = np.random.default_rng(4)
  x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 32), (32, 4)))
  tw1, tw2 = Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)
  (Tensor(x) @ tw1).relu().matmul(tw2).sum().backward()
  sched, _ = create_schedule([tw1.grad.uop, tw2.grad.uop])
  fwd = next(si for si in sched if si.name == "r_8_32_16")  # h (the matmul over 16) and dh (over 4) are 8 x 32
  assert ops_in(fwd.ast, Ops.WHERE), "the matmul's kernel stores relu'd values"
  h_buf = fwd.bufs[0]
  assert all(h_buf in si.bufs[1:] for si in sched if si.name in ("r_32_4_8", "r_8_32_4")), [si.name for si in sched]
  run_schedule(sched)
  h = np.maximum(x.astype(np.float64) @ w1, 0)
  dh = np.where(h > 0, np.ones((8, 4)) @ w2.T.astype(np.float64), 0)
  np.testing.assert_allclose(tw2.grad.numpy(), h.T @ np.ones((8, 4)), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(tw1.grad.numpy(), x.T.astype(np.float64) @ dh, rtol=1e-5, atol=1e-5)
