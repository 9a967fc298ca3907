"""What GPT's training step needs from the scheduler, the optimizer and codegen (issue 29): an expensive operand of
a matmul computed once, reductions padded into one sum each in a kernel of its own, a reduce read by div and mod
split in two, and log2 inline on vectors."""
from dataclasses import replace

import numpy as np
from support.codegen_helpers import UP, G, R, buf, run, sink, split

from compiler import Tensor
from compiler.codegen import get_program
from compiler.dtype import dtypes
from compiler.opt import Kernel, OptOps, hand_coded_optimizations
from compiler.opt.kernel import access_strides
from compiler.opt.target import AVX2, AVX512, SSE
from compiler.runtime.interpreter import interpret
from compiler.uop import Ops, UOp

rng = np.random.default_rng(29)


def _t(*shape: int) -> Tensor:
  return Tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)


def _close(got: np.ndarray, ref: np.ndarray) -> None:
  """float32 sums of float64's: within 1e-5 of the reference's largest magnitude."""
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def _gelu64(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """gelu (tanh form) and its derivative, in float64."""
  c = np.sqrt(2 / np.pi)
  u = c * (h + 0.044715 * h ** 3)
  th = np.tanh(u)
  return 0.5 * h * (1 + th), 0.5 * (1 + th) + 0.5 * h * (1 - th ** 2) * c * (1 + 3 * 0.044715 * h ** 2)


def test_gelu_is_computed_once_and_read_as_a_plain_operand_by_the_matmuls():
  # GPT's MLP: gelu(h) = 0.5 h (1 + tanh(..)) is c_proj's operand (forward, and its weight gradient), gelu'(h) dY
  # c_fc's (its weight and input gradients), each read by a matmul through an expand: written once, every reduce
  # loads two plain operands and computes no exp2 / log2 (inlined, once per column tile it read)
  x, w1, b1, w2, b2 = _t(2, 32, 32), _t(256, 32), _t(256), _t(32, 256), _t(32)
  loss = ((x @ w1.T + b1).gelu() @ w2.T + b2).square().sum()
  loss.backward()
  sched = loss.schedule(w1.grad, w2.grad, x.grad)
  for si in sched:
    for r in (u for u in si.ast.toposort() if u.op is Ops.REDUCE):
      inner = r.src[0].toposort()
      assert not any(u.op in (Ops.EXP2, Ops.LOG2) for u in inner), si.name
      assert len([u for u in inner if u.op is Ops.LOAD]) <= 2, si.name
  Tensor.realize(loss, w1.grad, w2.grad, x.grad)
  xn, w1n, b1n, w2n, b2n = (t.numpy().astype(np.float64) for t in (x, w1, b1, w2, b2))
  g, dg = _gelu64(xn @ w1n.T + b1n)
  y = g @ w2n.T + b2n
  dh = 2 * y @ w2n * dg
  _close(loss.numpy(), np.square(y).sum())
  _close(w2.grad.numpy(), np.einsum("btj,bti->ji", 2 * y, g))
  _close(w1.grad.numpy(), np.einsum("btj,bti->ji", dh, xn))
  _close(x.grad.numpy(), dh @ w1n)


def test_padded_gradients_of_a_chunk_are_each_a_kernel_and_their_sum_one_more():
  # attention's qkv = x W, chunked in three: its gradient pads dq, dk, dv into one [.., 3 d] tensor and adds them.
  # Each of them and the sum gets its own kernel: no kernel holds two reductions, and the two matmuls that read the
  # sum (dW, dx) load two buffers, not the three padded parts
  x, w, m = _t(64, 32), _t(32, 48), [_t(16, 8) for _ in range(3)]
  a, b, c = (x @ w).chunk(3, dim=-1)
  ((a @ m[0]).sum() + (b @ m[1]).square().sum() + (c @ m[2]).relu().sum()).backward()
  sched = w.grad.schedule(x.grad)
  reduces = [len([u for u in si.ast.toposort() if u.op is Ops.REDUCE]) for si in sched]
  assert max(reduces) == 1, reduces
  assert all(len([u for u in si.ast.toposort() if u.op is Ops.LOAD]) <= 2 for si, n in zip(sched, reduces) if n)
  Tensor.realize(w.grad, x.grad)
  xn, wn = x.numpy().astype(np.float64), w.numpy().astype(np.float64)
  an, bn, cn = np.split(xn @ wn, 3, axis=-1)
  mn = [t.numpy().astype(np.float64) for t in m]
  dy = np.concatenate([np.ones((64, 8)) @ mn[0].T, 2 * (bn @ mn[1]) @ mn[1].T,
                       ((cn @ mn[2]) > 0) @ mn[2].T], axis=-1)
  _close(w.grad.numpy(), xn.T @ dy)
  _close(x.grad.numpy(), dy @ wn.T)


def _log2_kernel(n: int, lanes: int) -> UOp:
  i = UOp.range(n, 0, G)
  ast = sink(buf(0, n).index(i).store(UOp(Ops.LOG2, dtypes.float32, (buf(1, n).index(i).load(),))), name="log2")
  return split(ast, 0, lanes, UP) if lanes > 1 else ast


def test_log2_is_inline_on_vectors_and_within_2_ulp():
  # llvm.log2 of a vector is a libm call a lane; ours is a few vector instructions, within 2 ulp of float64's, with
  # log2's special values (denormals, 0, inf, below 0, NaN)
  x = np.concatenate([np.exp2(rng.uniform(-149, 128, 4000)), 1 + rng.uniform(-1e-3, 1e-3, 2000),
                      rng.uniform(0.5, 2, 2000), [0, -0.0, 1, 2, 0.5, np.inf, -np.inf, np.nan, -1, 1e-45, 1e-40,
                                                  2 ** -126, 3.4e38, np.sqrt(2), np.sqrt(0.5), -1e-40]])
  x = x.astype(np.float32)[:8000]
  with np.errstate(all="ignore"):
    ref = np.log2(x.astype(np.float64))
  for lanes in (16, 8, 4, 1):
    ast = _log2_kernel(len(x), lanes)
    assert "@llvm.log2" not in get_program(ast).src
    got = run(ast, np.zeros_like(x), x)[0]
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(got[~fin], ref[~fin].astype(np.float32))  # (NaNs compare equal)
    ulp = np.spacing(np.abs(ref[fin]).astype(np.float32)).astype(np.float64)
    assert (np.abs(got[fin] - ref[fin]) / ulp).max() <= 2.0, lanes


def _heads_proj_ast(t: int, heads: int, dh: int, n: int) -> UOp:
  """GPT's attention output projection: out[s, j] = sum_r o[r // dh, s, r % dh] * w[j, r], o laid out [h, t, dh]
  (the heads' outputs, read as one reduce of h * dh by a reshape)."""
  s, j, r = UOp.range(t, 0, G), UOp.range(n, 1, G), UOp.range(heads * dh, 2, R)
  o = buf(1, heads * t * dh).index((r // dh) * (t * dh) + s * dh + r % dh).load()
  w = buf(2, n * heads * dh).index(j * (heads * dh) + r).load()
  return sink(buf(0, t * n).index(s * n + j).store((o * w).reduce(r)), name="proj")


def test_a_reduce_read_by_div_and_mod_is_split_into_plain_strides():
  # the heads' axis and the head dim become two reduces (dh innermost, stride 1 in both loads): the dot tile
  # applies on every target model, where the merged reduce gathered its loads lane by lane (45 -> 89 GFLOP/s)
  ast = _heads_proj_ast(32, 4, 64, 48)
  k0 = Kernel(ast)
  assert k0.full_shape[k0.first_reduce:] == (4, 64)
  assert all(access_strides(k0, a)[-1] == 1 for a in k0.accesses if a not in {st.src[0] for st in k0.stores})
  bufs = [np.zeros(32 * 48, np.float32), rng.standard_normal(4 * 32 * 64).astype(np.float32),
          rng.standard_normal(48 * 256).astype(np.float32)]
  want = [b.copy() for b in bufs]
  interpret(ast, want)
  o, w = bufs[1].astype(np.float64).reshape(4, 32, 64), bufs[2].astype(np.float64).reshape(48, 256)
  _close(want[0].reshape(32, 48), o.transpose(1, 0, 2).reshape(32, 256) @ w.T)
  for target in (SSE, AVX2, AVX512):
    k = hand_coded_optimizations(Kernel(ast, replace(target, threads=1)))
    assert any(op.op is OptOps.UNROLL for op in k.applied_opts), (target, k.applied_opts)
    got = run(k.get_optimized_ast(), *bufs)[0]
    _close(got.reshape(32, 48), want[0].reshape(32, 48).astype(np.float64))
