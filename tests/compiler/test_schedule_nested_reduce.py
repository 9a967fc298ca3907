"""Nested reductions (compiler/schedule/bufferize.py `nested_reduces`): a reduction whose every element one other
reduction reads once joins that reduction's kernel instead of writing a buffer. Checked: a conv's input gradient
(strides, paddings, dilations, groups) and a sum of a sum through permute/pad/shrink against numpy on every backend,
the cases that must keep their buffer (read twice, broadcast), the MNIST conv's schedule without its per-window
gradient buffer, the rule's name in the trace, random opt sequences on the joined kernel, and the inner loop gated
by the pad's condition (its value where most of the reads are padding, and how often its body runs)."""
from __future__ import annotations

import random

import numpy as np
import pytest
from support.opt_helpers import buffers_for, outputs_of
from support.trace_helpers import rules_fired

from compiler.codegen import program
from compiler.codegen.program import linear_kernel
from compiler.opt.kernel import Kernel, KernelOptError, Opt, OptOps
from compiler.opt.target import Target
from compiler.runtime import compile_kernel
from compiler.runtime.interpreter import interpret
from compiler.tensor import Tensor
from compiler.trace import recorder
from compiler.uop import Ops, UOp, exec_alu, toposort


@pytest.fixture(autouse=True)
def _nested_on(monkeypatch):
  monkeypatch.setenv("NESTED_REDUCE", "1")  # every candidate (by default only big buffers: bufferize's docstring)
  # a schedule made without it (or before a test) of the same graph would be a cache hit
  monkeypatch.setenv("SCHEDULE_CACHE", "0")


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _nested(ast: UOp) -> int:
  """The REDUCEs of a kernel that have another REDUCE inside their value."""
  return sum(1 for u in toposort(ast) if u.op is Ops.REDUCE and any(v.op is Ops.REDUCE for v in toposort(u.src[0])))


def _conv_input_grad_np(g: np.ndarray, w: np.ndarray, x_shape, stride, padding, dilation, groups) -> np.ndarray:
  """d(sum(conv2d(x, w) * g))/dx by scattering each window's gradient back (numpy, loops over the kernel taps)."""
  b, cin, h, wd = x_shape
  cout, cin_g, kh, kw = w.shape
  _, _, oh, ow = g.shape
  out = np.zeros((b, cin, h + 2 * padding, wd + 2 * padding), np.float32)
  cout_g = cout // groups
  for grp in range(groups):
    gg, ww = g[:, grp * cout_g:(grp + 1) * cout_g], w[grp * cout_g:(grp + 1) * cout_g]
    for ky in range(kh):
      for kx in range(kw):
        y0, x0 = ky * dilation, kx * dilation
        tap = np.einsum("boyx,oi->biyx", gg, ww[:, :, ky, kx])
        out[:, grp * cin_g:(grp + 1) * cin_g, y0:y0 + oh * stride:stride, x0:x0 + ow * stride:stride] += tap
  return out[:, :, padding:padding + h, padding:padding + wd]


# (x shape, weight shape, stride, padding, dilation, groups, joined): joined says whether the evaluation bound
# (MAX_NESTED_EVALS) lets the per-window gradient join the window sum's kernel (a stride s pads the windows' layout
# s times wider per dim: never joined)
CONVS = {
  "mnist conv2 small": ((2, 4, 24, 24), (4, 4, 5, 5), 1, 0, 1, 1, True),
  "3x3 pad 1": ((2, 3, 12, 12), (5, 3, 3, 3), 1, 1, 1, 1, True),
  "stride 2": ((1, 2, 17, 17), (3, 2, 3, 3), 2, 0, 1, 1, False),
  "stride 2 pad 2 5x5": ((1, 2, 32, 32), (3, 2, 5, 5), 2, 2, 1, 1, False),
  "dilation 2": ((2, 2, 24, 24), (3, 2, 3, 3), 1, 0, 2, 1, True),
  "groups 2": ((2, 4, 14, 14), (6, 2, 3, 3), 1, 1, 1, 2, True),
  "tiny input (over the bound)": ((1, 2, 6, 6), (2, 2, 5, 5), 1, 0, 1, 1, False),
}


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("name", sorted(CONVS))
def test_conv_input_gradient_matches_numpy(name):
  xs, ws, stride, padding, dilation, groups, joined = CONVS[name]
  xn, wn = _rand(*xs, seed=1), _rand(*ws, seed=2)
  x = Tensor(xn, requires_grad=True)
  y = x.conv2d(Tensor(wn), stride=stride, padding=padding, dilation=dilation, groups=groups)
  gn = _rand(*y.shape, seed=3)
  (y * Tensor(gn)).sum().backward()
  assert (sum(_nested(si.ast) for si in x.grad.schedule()) == 1) == joined
  want = _conv_input_grad_np(gn, wn, xs, stride, padding, dilation, groups)
  np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-4, atol=1e-4)


SUM_OF_SUMS = {
  "permute pad shrink": (lambda t: t.sum(2).permute(1, 0).pad(((1, 1), (0, 0))).shrink(((0, 9), (1, 5))).sum(1),
                         lambda a: np.pad(a.sum(2).T, ((1, 1), (0, 0)))[0:9, 1:5].sum(1)),
  "max of a sum, times 2": (lambda t: (t.sum(1) * 2).max(0), lambda a: (a.sum(1) * 2).max(0)),
  "flip reshape": (lambda t: t.sum(0).flip(1).reshape(4, 20).sum(1), lambda a: a.sum(0)[:, ::-1].reshape(4, 20).sum(1)),
}


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("name", sorted(SUM_OF_SUMS))
def test_sum_of_a_sum_is_one_kernel(name):
  build, ref = SUM_OF_SUMS[name]
  a = _rand(6, 8, 10, seed=4)
  sched = build(Tensor(a)).schedule()
  assert len(sched) == 1 and _nested(sched[0].ast) == 1
  np.testing.assert_allclose(build(Tensor(a)).numpy(), ref(a), rtol=1e-5, atol=1e-5)


STAYS = {
  "read twice": (lambda t: (t.sum(2) + t.sum(2).flip(0)).sum(1), lambda a: (a.sum(2) + a.sum(2)[::-1]).sum(1)),
  "squared": (lambda t: (t.sum(2) * t.sum(2)).sum(1), lambda a: (a.sum(2) ** 2).sum(1)),
  "broadcast": (lambda t: t.sum(2).reshape(6, 8, 1).expand(6, 8, 3).sum(2),
                lambda a: np.repeat(a.sum(2)[:, :, None], 3, 2).sum(2)),
  "an output too": (lambda t: t.sum(2).sum(1), lambda a: a.sum(2).sum(1)),
}


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("name", sorted(STAYS))
def test_inner_result_read_twice_keeps_its_buffer(name):
  build, ref = STAYS[name]
  a = _rand(6, 8, 10, seed=5)
  if name == "an output too":  # the inner sum is scheduled as well: its buffer is an output
    inner = Tensor(a).sum(2)
    sched = inner.sum(1).schedule(inner)
    got = inner.sum(1).numpy()
  else:
    sched = build(Tensor(a)).schedule()
    got = build(Tensor(a)).numpy()
  assert len(sched) == 2 and all(_nested(si.ast) == 0 for si in sched)
  np.testing.assert_allclose(got, ref(a), rtol=1e-5, atol=1e-5)


def _mnist_conv2_buffers(batch: int) -> list[int]:
  """The element counts of every buffer the MNIST conv2's backward (input and weight gradients) schedule touches."""
  x = Tensor(_rand(batch, 32, 24, 24, seed=6), requires_grad=True)
  w = Tensor(_rand(32, 32, 5, 5, seed=7), requires_grad=True)
  (x.conv2d(w).relu() * Tensor(_rand(batch, 32, 20, 20, seed=8))).sum().backward()
  return [b.size for si in x.grad.schedule(w.grad) for b in si.bufs]


def test_mnist_conv_backward_has_no_per_window_gradient_buffer(monkeypatch):
  per_window = 2 * 32 * 20 * 20 * 5 * 5
  assert per_window not in _mnist_conv2_buffers(2)
  monkeypatch.setenv("NESTED_REDUCE", "0")  # switched off: the buffer is back (so the count above can fail)
  assert per_window in _mnist_conv2_buffers(2)


def test_by_default_only_a_big_buffer_is_joined_where_masked_moves_are(monkeypatch):
  """NESTED_REDUCE unset: a nested reduction is joined only where its buffer would take NESTED_MIN_BYTES (MNIST's
  conv2 at batch 512: 625 MB), for a CPU with masked vector moves (SSE has none: the joined kernel took 1.9x there);
  here the bound is put between two batch sizes' per-window buffers, and the CPU's answer is the test's."""
  from compiler.schedule import bufferize
  monkeypatch.delenv("NESTED_REDUCE")
  small, big = (b * 32 * 20 * 20 * 5 * 5 for b in (1, 2))
  monkeypatch.setattr(bufferize, "NESTED_MIN_BYTES", 4 * (small + big) // 2)
  monkeypatch.setattr(bufferize, "masked_vector_moves", lambda: True)
  assert small in _mnist_conv2_buffers(1) and big not in _mnist_conv2_buffers(2)
  monkeypatch.setattr(bufferize, "masked_vector_moves", lambda: False)
  assert big in _mnist_conv2_buffers(2)


def test_the_rule_is_named_in_the_trace(tmp_path):
  path = tmp_path / "n.vztrace"
  recorder.enable(path, announce=False)
  try:
    Tensor(_rand(6, 8, 10)).sum(2).permute(1, 0).sum(1).schedule()
  finally:
    recorder.disable()
  fired = rules_fired(path, "remove bufferize")
  assert fired.count("_inline_nested_reduce") == 1


def _joined_asts() -> list[UOp]:
  x = Tensor(_rand(2, 3, 10, 10, seed=9), requires_grad=True)
  (x.conv2d(Tensor(_rand(4, 3, 3, 3, seed=10))) * Tensor(_rand(2, 4, 8, 8, seed=11))).sum().backward()
  sum_sum = Tensor(_rand(6, 8, 10, seed=12)).sum(2).permute(1, 0).pad(((1, 1), (0, 0))).sum(1)
  return [x.grad.schedule()[-1].ast, sum_sum.schedule()[-1].ast]


OPS = [OptOps.UPCAST, OptOps.UNROLL, OptOps.THREAD, OptOps.PADTO, OptOps.PEEL, OptOps.STAGE, OptOps.BLOCK,
       OptOps.SWAP]


@pytest.mark.parametrize("seed", range(3))
def test_random_opts_on_the_joined_kernel_keep_its_values(seed):
  """The optimizer treats the inner reduce's axes as any reduce axes (no opt is refused for them): random sequences
  of accepted opts, compiled by LLVM, compute what the interpreter gives the unoptimized kernel."""
  rnd = random.Random(seed)
  cpu = Target(threads=2, vector_floats=8, cpu="test-cpu")
  for ast in _joined_asts():
    assert _nested(ast) == 1
    want = buffers_for(ast)
    interpret(ast, want)
    for _ in range(12):
      k, applied = Kernel(ast, cpu), []
      for _ in range(rnd.randint(1, 3)):
        op, axis = rnd.choice(OPS), rnd.randint(0, 5)
        try:
          k.apply_opt(Opt(op, axis, axis + 1 if op is OptOps.SWAP else rnd.choice([0, 2, 3, 4])))
          applied.append(op)
        except KernelOptError:
          continue
      bufs = buffers_for(ast)
      compile_kernel(k.get_optimized_ast())(bufs)
      for i in outputs_of(ast):
        np.testing.assert_allclose(bufs[i], want[i], rtol=1e-4, atol=1e-4, err_msg=str(k.applied_opts))


# ---- the gated inner loop (lowerer's `gate_reduces`): a nested reduction read through a pad runs only where valid

def _mostly_padded(t: Tensor) -> Tensor:
  """The inner sums (6, 8) padded to (18, 8), then summed over the padded dim: 12 of 18 rows are padding."""
  return t.sum(2).pad(((4, 8), (0, 0))).sum(0)


@pytest.mark.usefixtures("backend")
def test_inner_sum_read_mostly_through_padding_matches_numpy():
  a = _rand(6, 8, 10, seed=13)
  sched = _mostly_padded(Tensor(a)).schedule()
  assert len(sched) == 1 and _nested(sched[0].ast) == 1
  np.testing.assert_allclose(_mostly_padded(Tensor(a)).numpy(), a.sum(2).sum(0), rtol=1e-5, atol=1e-5)


def _body_runs(uops: list[UOp], body: UOp) -> int:
  """How many times the loop over RANGE `body` runs an iteration when the linearized kernel's control flow (its
  RANGE/END and IF/ENDIF, the conditions evaluated from the loop counters) is followed; values are not computed."""
  match, stack = {}, []
  for i, u in enumerate(uops):
    if u.op in (Ops.RANGE, Ops.IF):
      stack.append(i)
    elif u.op in (Ops.END, Ops.ENDIF):
      match[stack.pop()] = i

  def value(u: UOp, env: dict[UOp, int]):
    if u.op is Ops.CONST:
      return u.arg
    return env[u] if u.op is Ops.RANGE else exec_alu(u.op, u.dtype, tuple(value(s, env) for s in u.src))

  def run(i: int, stop: int, env: dict[UOp, int]) -> int:
    n = 0
    while i < stop:
      u = uops[i]
      if u.op is Ops.RANGE:
        for v in range(u.src[0].arg):
          n += (u is body) + run(i + 1, match[i], {**env, u: v})
        i = match[i]
      elif u.op is Ops.IF:
        n += run(i + 1, match[i], env) if value(u.src[0], env) else 0
        i = match[i]
      i += 1
    return n
  return run(0, len(uops), {})


@pytest.mark.parametrize("gated", [True, False])
def test_inner_loop_runs_only_at_valid_positions(gated, monkeypatch):
  """Counted by following the unoptimized kernel's loops: the inner sum's 10 iterations run for the 6 valid of the 18
  rows (x 8 columns), not for all 18; with the rewrite switched off (so the count can fail) for all of them."""
  if not gated:
    monkeypatch.setattr(program, "gate_reduces", lambda sink: {})
  ast = _mostly_padded(Tensor(_rand(6, 8, 10))).schedule()[-1].ast
  uops = linear_kernel(ast).lin.uops
  inner = next(u for u in uops if u.op is Ops.RANGE and u.src[0].arg == 10)
  assert any(u.op is Ops.IF for u in uops) == gated
  assert _body_runs(uops, inner) == (6 if gated else 18) * 8 * 10


def test_gate_rewrite_is_named_in_the_trace(tmp_path):
  path = tmp_path / "g.vztrace"
  recorder.enable(path, announce=False)
  try:
    linear_kernel(_mostly_padded(Tensor(_rand(6, 8, 10))).schedule()[-1].ast)
  finally:
    recorder.disable()
  assert rules_fired(path, "gate reduce") == ["PHI(acc, update) under WHERE(gate, ..) -> PHI(acc, update, gate)"]
