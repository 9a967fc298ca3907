"""Row reductions (compiler/schedule/bufferize.py `row_reduces`): a reduction that one elementwise consumer reads
broadcast along its trailing dims joins that consumer's kernel, where it runs once per row. Checked: the values
(LLVM and the interpreter, with the heuristics of SSE, AVX2 and AVX-512 targets), the kernels made, the work done
per row (flops), the cases that must stay kernels of their own, and the rule's name in the trace."""
from __future__ import annotations

import numpy as np
import pytest
from support.trace_helpers import rules_fired

from compiler.codegen import get_program
from compiler.engine import compile_kernel
from compiler.opt.heuristic import hand_coded_optimizations
from compiler.opt.kernel import Kernel
from compiler.opt.target import AVX2, AVX512, SSE
from compiler.realize import run_schedule
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.uop import Ops, toposort


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _np_softmax(a: np.ndarray, axis: int = -1) -> np.ndarray:
  e = np.exp(a - a.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


def _reduces(si) -> int:
  return sum(1 for u in toposort(si.ast) if u.op is Ops.REDUCE)


CASES = {
  "softmax small": (lambda t: t.softmax(-1), lambda a: _np_softmax(a), (8, 64)),
  "softmax big": (lambda t: t.softmax(-1), lambda a: _np_softmax(a), (64, 512)),
  "softmax 3d": (lambda t: t.softmax(-1), lambda a: _np_softmax(a), (3, 5, 40)),
  "log_softmax": (lambda t: t.log_softmax(-1),
                  lambda a: (a - a.max(-1, keepdims=True)) - np.log(np.exp(a - a.max(-1, keepdims=True)).sum(
                    -1, keepdims=True)), (16, 10)),
  "minus max": (lambda t: t - t.max(1, keepdim=True), lambda a: a - a.max(1, keepdims=True), (9, 33)),
  "over sum, two trailing": (lambda t: t / t.sum((1, 2), keepdim=True), lambda a: a / a.sum((1, 2), keepdims=True),
                             (4, 6, 7)),
  "no keepdim": (lambda t: t * t.sum(1).reshape(5, 1).exp(), lambda a: a * np.exp(a.sum(1)).reshape(5, 1), (5, 12)),
  "layernorm": (lambda t: t.layernorm(-1),
                lambda a: (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5), (12, 48)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_match_numpy(name):
  build, ref, shape = CASES[name]
  a = _rand(*shape)
  want = ref(a)
  np.testing.assert_allclose(build(Tensor(a)).numpy(), want, rtol=2e-5, atol=1e-6)
  out = build(Tensor(a))
  sched = out.schedule()
  run_schedule(sched, backend="interp")
  np.testing.assert_allclose(sched[-1].bufs[0].numpy().reshape(want.shape), want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("target", [SSE, AVX2, AVX512], ids=["sse", "avx2", "avx512"])
@pytest.mark.parametrize("shape", [(64, 512), (8, 64), (6, 20)])
def test_each_target_heuristic_runs_the_reduce_once_per_row(target, shape):
  """The heuristics of every target leave the joined reduce outside the loop over the row's elements: the kernel
  does a few dozen flops per element (the reduce inside that loop would do one row's worth per element), and its
  results are numpy's."""
  a = _rand(*shape, seed=1)
  sched = Tensor(a).softmax(-1).schedule()
  assert len(sched) == 2 and all(_reduces(si) == 1 for si in sched)
  for si in sched:
    for b in si.bufs:
      b.ensure_allocated()
  for si in sched:
    ast = hand_coded_optimizations(Kernel(si.ast, target)).get_optimized_ast()
    assert get_program(ast).flops() <= 64 * a.size
    compile_kernel(ast)(si.bufs)
  np.testing.assert_allclose(sched[-1].bufs[0].numpy().reshape(shape), _np_softmax(a), rtol=2e-5, atol=1e-7)


def test_softmax_is_two_kernels_and_exp_computed_once():
  a = _rand(64, 512)
  sched = Tensor(a).softmax(-1).schedule()
  # exp(x - max) into a buffer with the max joined; the division with the sum joined
  assert [si.name[0] for si in sched] == ["r", "r"]
  assert sum(1 for si in sched for u in toposort(si.ast) if u.op is Ops.EXP2) == 1


STAYS = {
  # broadcast along the first dim: the reader's inner loop would be the reduce's
  "leading": (lambda t: t - t.max(0, keepdim=True), lambda a: a - a.max(0, keepdims=True)),
  # a reduction to one value: every row (and every thread's chunk) would compute all of it
  "total": (lambda t: t - t.max(), lambda a: a - a.max()),
  # the reader's kernel loops over the transposed view: the max's row is its inner loop
  "permuted": (lambda t: (t - t.max(1, keepdim=True)).T.contiguous(), lambda a: (a - a.max(1, keepdims=True)).T),
  # two readers of the max
  "two readers": (lambda t: (t - t.max(1, keepdim=True)) * (t + t.max(1, keepdim=True)),
                  lambda a: (a - a.max(1, keepdims=True)) * (a + a.max(1, keepdims=True))),
}


@pytest.mark.parametrize("name", sorted(STAYS))
def test_stays_a_kernel_of_its_own(name):
  build, ref = STAYS[name]
  a = _rand(12, 20, seed=2)
  sched = build(Tensor(a)).schedule()
  assert len(sched) == 2 and _reduces(sched[0]) == 1 and _reduces(sched[1]) == 0
  np.testing.assert_allclose(build(Tensor(a)).numpy(), ref(a), rtol=1e-6, atol=1e-6)


def test_the_rule_is_named_in_the_trace(tmp_path, monkeypatch):
  monkeypatch.setenv("SCHEDULE_CACHE", "0")  # an earlier test's softmax of this shape would be a cache hit: no passes
  path = tmp_path / "r.vztrace"
  recorder.enable(path, announce=False)
  try:
    Tensor(_rand(8, 32)).softmax(-1).schedule()
  finally:
    recorder.disable()
  fired = rules_fired(path, "remove bufferize")
  assert fired.count("_inline_row_reduce") == 1  # the sum (the max feeds the sum's reduce: a kernel of its own)


@pytest.mark.parametrize("target", [SSE, AVX2, AVX512], ids=["sse", "avx2", "avx512"])
def test_heuristic_does_not_tile_a_row_reduction_kernel(target):
  """A joined row reduction does not depend on the row's own axis: no register tile over the rows (a bias read
  along them made the reference's rule tile them), and the store is vectors of the target's width next to the
  reduce's unrolled loads."""
  x, w = Tensor(_rand(256, 1024)), Tensor(_rand(1024, seed=3))
  sched = (x.layernorm(-1) * w + w).schedule()
  k = hand_coded_optimizations(Kernel(sched[-1].ast, target))
  ups = [(o.axis, o.arg) for o in k.applied_opts if o.op.name == "UPCAST"]
  assert len(ups) == 1 and ups[0][0] == 1 and ups[0][1] % target.vector_floats == 0
  assert any(o.op.name == "UNROLL" for o in k.applied_opts)
