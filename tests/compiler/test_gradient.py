"""The gradient rewrite: every rule against central finite differences in float64 (random shapes), broadcasting,
keepdim, non-differentiable inputs, repeated use, backward / .grad / gradient / detach, and the trace it records."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.gradcheck import check_gradient, input_array

from compiler import Tensor, dtypes
from compiler.gradient import pm_gradient
from compiler.trace import recorder
from compiler.uop import Ops
from vztrace.reader import TraceReader


@pytest.fixture(autouse=True)
def _interp(monkeypatch):
  monkeypatch.setenv("BACKEND", "interp")


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)
seeds = st.integers(0, 2**32 - 1)

# name -> (fn, input kinds): one op of the API each, so every derivative rule is reached
UNARY = {
  "neg": (lambda x: -x, "any"), "exp2": (lambda x: x.exp2(), "any"), "log2": (lambda x: x.log2(), "pos"),
  "SIN": (lambda x: x._alu(Ops.SIN), "any"), "sqrt": (lambda x: x.sqrt(), "pos"),
  "reciprocal": (lambda x: x.reciprocal(), "away0"), "exp": (lambda x: x.exp(), "any"),
  "log": (lambda x: x.log(), "pos"), "tanh": (lambda x: x.tanh(), "any"),
  "sigmoid": (lambda x: x.sigmoid(), "any"), "relu": (lambda x: x.relu(), "away0"),
  "abs": (lambda x: x.abs(), "away0"), "gelu": (lambda x: x.gelu(), "any"), "square": (lambda x: x.square(), "any"),
  "leaky_relu": (lambda x: x.leaky_relu(0.1), "away0"), "rsqrt": (lambda x: x.rsqrt(), "pos"),
  "pow_2.5": (lambda x: x ** 2.5, "pos"), "pow_3": (lambda x: x ** 3, "any"), "clip": (lambda x: x.clip(-0.5, 0.5),
                                                                                        "away0"),
  "contiguous": (lambda x: (x * 2).contiguous() * x, "any"),
}
BINARY = {
  "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
  "maximum": lambda a, b: a.maximum(b), "minimum": lambda a, b: a.minimum(b), "pow": lambda a, b: a.abs() ** b,
  "where": lambda a, b: (a > b).where(a, b * 2), "rsub_scalar": lambda a, b: 3.0 - a * b,
}


@pytest.mark.parametrize("name", sorted(UNARY))
@settings(max_examples=4)
@given(shape=shapes, seed=seeds)
def test_unary_rules(name, shape, seed):
  fn, kind = UNARY[name]
  rng = np.random.default_rng(seed)
  check_gradient(fn, input_array(rng, shape, kind), rng=rng)


@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=4)
@given(shape=shapes, seed=seeds, bcast=st.sampled_from(["same", "left", "right", "scalar"]))
def test_binary_rules_broadcasting(name, shape, seed, bcast):
  rng = np.random.default_rng(seed)
  # the other operand broadcasts along a dim of size 1, a missing leading dim, or is 0-d
  other = {"same": shape, "left": (1,) + shape[1:], "right": shape[1:], "scalar": ()}[bcast]
  kind = "away0"  # no ties for maximum, no pole for div, |a| > 0 for pow
  check_gradient(BINARY[name], input_array(rng, shape, kind), input_array(rng, other, kind), rng=rng)


REDUCE = {
  "sum": lambda x, ax, kd: x.sum(ax, keepdim=kd), "max": lambda x, ax, kd: x.max(ax, keepdim=kd),
  "min": lambda x, ax, kd: x.min(ax, keepdim=kd), "prod": lambda x, ax, kd: x.prod(ax, keepdim=kd),
  "mean": lambda x, ax, kd: x.mean(ax, keepdim=kd), "var": lambda x, ax, kd: x.var(ax, keepdim=kd),
  "std": lambda x, ax, kd: x.std(ax, keepdim=kd), "logsumexp": lambda x, ax, kd: x.logsumexp(ax, keepdim=kd),
}


@pytest.mark.parametrize("name", sorted(REDUCE))
@settings(max_examples=4)
@given(shape=st.lists(st.integers(2, 4), min_size=1, max_size=3).map(tuple), seed=seeds, keepdim=st.booleans(),
       data=st.data())
def test_reduce_rules(name, shape, seed, keepdim, data):
  axis = data.draw(st.sampled_from([None, *range(len(shape)), *range(-len(shape), 0)]))
  rng = np.random.default_rng(seed)
  check_gradient(lambda x: REDUCE[name](x, axis, keepdim), input_array(rng, shape, "away0"), rng=rng)


def test_prod_gradient_with_zeros():
  # one zero: its gradient is the product of the others, the others' is 0; two zeros: all 0
  x = np.array([[2.0, 0.0, 3.0, 4.0], [0.0, 5.0, 0.0, 1.0], [1.0, 2.0, 3.0, 0.5]])
  t = Tensor(x, requires_grad=True)
  (g,) = t.prod(1).sum().gradient(t)
  want = np.array([[0.0, 24.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [3.0, 1.5, 1.0, 6.0]])
  np.testing.assert_allclose(g.numpy(), want)


def test_max_gradient_ties_share_equally():
  t = Tensor(np.array([1.0, 3.0, 3.0, 2.0]), requires_grad=True)
  (g,) = t.max().gradient(t)
  np.testing.assert_allclose(g.numpy(), [0.0, 0.5, 0.5, 0.0])


MOVEMENT = {
  "reshape": lambda x: x.reshape(-1) * 2, "permute": lambda x: x.permute(*reversed(range(x.ndim))),
  "expand": lambda x: x.unsqueeze(0).expand(3, *x.shape), "pad": lambda x: x.pad([(1, 2)] * x.ndim),
  "pad_value": lambda x: x.pad([(1, 0)] * x.ndim, value=2.0), "shrink": lambda x: x.shrink([(1, s) for s in x.shape]),
  "flip": lambda x: x.flip(0), "getitem": lambda x: x[1:][..., ::-1], "getitem_step": lambda x: x[::2],
  "cat": lambda x: x.cat(x * 3, dim=0), "stack": lambda x: Tensor.stack(x, x.exp(), dim=-1),
  "repeat": lambda x: x.repeat(*([2] * x.ndim)),
  "transpose_matmul": lambda x: x.reshape(x.shape[0], -1) @ x.reshape(x.shape[0], -1).T,
  "cumsum": lambda x: x.cumsum(0), "roll": lambda x: x.roll(1, 0), "tril": lambda x: x.reshape(x.shape[0], -1).tril(),
}


@pytest.mark.parametrize("name", sorted(MOVEMENT))
@settings(max_examples=4)
@given(shape=st.lists(st.integers(2, 4), min_size=1, max_size=3).map(tuple), seed=seeds)
def test_movement_rules(name, shape, seed):
  rng = np.random.default_rng(seed)
  check_gradient(MOVEMENT[name], input_array(rng, shape), rng=rng)


def test_gather_and_indexing_by_tensor():
  rng = np.random.default_rng(3)
  idx = Tensor(np.array([[0, 2], [1, 1], [3, 0]], dtype=np.int32))
  check_gradient(lambda x: x.gather(1, idx), input_array(rng, (3, 4)), rng=rng)
  check_gradient(lambda x: x[Tensor(np.array([2, 0, 2], dtype=np.int32))], input_array(rng, (3, 4)), rng=rng)


def test_cast_gradient_flows_back_in_the_source_dtype():
  x = Tensor(np.array([1.5, -2.0]), requires_grad=True)
  (g,) = (x.cast(dtypes.float32) * 3).sum().gradient(x)
  assert g.dtype == dtypes.float64
  np.testing.assert_array_equal(g.numpy(), [3.0, 3.0])


# ---- compound ops against numpy's analytic gradients

def _np_softmax(x, axis):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


@settings(max_examples=5)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple), seed=seeds, data=st.data())
def test_softmax_and_log_softmax_match_numpy(shape, seed, data):
  axis = data.draw(st.integers(-len(shape), len(shape) - 1))
  rng = np.random.default_rng(seed)
  x, w = rng.standard_normal(shape), rng.standard_normal(shape)
  t = Tensor(x, requires_grad=True)
  s = _np_softmax(x, axis)
  (g,) = (t.softmax(axis) * Tensor(w)).sum().gradient(t)
  np.testing.assert_allclose(g.numpy(), s * (w - (w * s).sum(axis, keepdims=True)), rtol=1e-9, atol=1e-12)
  (g,) = (t.log_softmax(axis) * Tensor(w)).sum().gradient(t)
  np.testing.assert_allclose(g.numpy(), w - s * w.sum(axis, keepdims=True), rtol=1e-9, atol=1e-12)


@settings(max_examples=5)
@given(rows=st.integers(1, 4), n=st.integers(2, 6), seed=seeds)
def test_layernorm_matches_numpy(rows, n, seed):
  rng = np.random.default_rng(seed)
  x, w, eps = rng.standard_normal((rows, n)), rng.standard_normal((rows, n)), 1e-5
  t = Tensor(x, requires_grad=True)
  (g,) = (t.layernorm(-1, eps) * Tensor(w)).sum().gradient(t)
  mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  xhat, inv = (x - mu) / np.sqrt(var + eps), 1 / np.sqrt(var + eps)
  want = inv * (w - w.mean(-1, keepdims=True) - xhat * (w * xhat).mean(-1, keepdims=True))
  np.testing.assert_allclose(g.numpy(), want, rtol=1e-7, atol=1e-9)


@settings(max_examples=5)
@given(m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4), batch=st.sampled_from([(), (2,)]), seed=seeds)
def test_matmul_matches_numpy(m, k, n, batch, seed):
  rng = np.random.default_rng(seed)
  a, b, w = rng.standard_normal(batch + (m, k)), rng.standard_normal((k, n)), rng.standard_normal(batch + (m, n))
  ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
  ga, gb = ((ta @ tb) * Tensor(w)).sum().gradient(ta, tb)
  np.testing.assert_allclose(ga.numpy(), w @ b.T, rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(gb.numpy(), (np.swapaxes(a, -1, -2) @ w).reshape(-1, k, n).sum(0), rtol=1e-10,
                             atol=1e-12)


def _np_conv2d(x, w, stride, padding):
  x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  n, c, h, wd = x.shape
  o, _, kh, kw = w.shape
  oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
  cols = np.stack([x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] for i in range(kh) for j in range(kw)],
                  axis=2)  # n, c, kh*kw, oh, ow
  return np.einsum("nckhw,ock->nohw", cols, w.reshape(o, c, kh * kw)), cols


@settings(max_examples=4)
@given(seed=seeds, stride=st.integers(1, 2), padding=st.integers(0, 1), size=st.integers(4, 6))
def test_conv2d_matches_numpy(seed, stride, padding, size):
  rng = np.random.default_rng(seed)
  x, wt = rng.standard_normal((2, 3, size, size)), rng.standard_normal((4, 3, 3, 3))
  out, cols = _np_conv2d(x, wt, stride, padding)
  up = rng.standard_normal(out.shape)
  tx, tw = Tensor(x, requires_grad=True), Tensor(wt, requires_grad=True)
  out_t = tx.conv2d(tw, stride=stride, padding=padding)
  np.testing.assert_allclose(out_t.numpy(), out, rtol=1e-10, atol=1e-10)
  gx, gw = (tx.conv2d(tw, stride=stride, padding=padding) * Tensor(up)).sum().gradient(tx, tw)
  want_w = np.einsum("nckhw,nohw->ock", cols, up).reshape(wt.shape)
  np.testing.assert_allclose(gw.numpy(), want_w, rtol=1e-9, atol=1e-10)
  check_gradient(lambda a: a.conv2d(Tensor(wt), stride=stride, padding=padding), x, rng=rng, directions=2)
  assert gx.shape == x.shape


def test_attention_matches_finite_differences():
  rng = np.random.default_rng(7)
  q, k, v = (rng.standard_normal((2, 3, 4)) for _ in range(3))
  check_gradient(lambda a, b, c: a.scaled_dot_product_attention(b, c), q, k, v, rng=rng)


def test_pooling_and_losses():
  rng = np.random.default_rng(8)
  check_gradient(lambda x: x.max_pool2d(2), input_array(rng, (1, 2, 4, 4)), rng=rng)
  check_gradient(lambda x: x.avg_pool2d(2), input_array(rng, (1, 2, 4, 4)), rng=rng)
  # windows apart (kernel <= stride): the input cut into rows of the stride, each shrunk to the kernel
  check_gradient(lambda x: x.max_pool2d(2, 3), input_array(rng, (1, 2, 7, 8)), rng=rng)
  check_gradient(lambda x: x.avg_pool2d((2, 1), (3, 2)), input_array(rng, (1, 2, 7, 5)), rng=rng)
  y = Tensor(np.array([1, 0, 2], dtype=np.int32))
  check_gradient(lambda x: x.sparse_categorical_crossentropy(y), input_array(rng, (3, 4)), rng=rng)
  check_gradient(lambda x: x.binary_crossentropy_logits(Tensor(np.array([1.0, 0.0, 1.0]))), input_array(rng, (3,)),
                 rng=rng)


# ---- semantics: repeated use, non-differentiable inputs, backward and .grad

def test_repeated_use_sums_gradients():
  x = Tensor(np.array([1.0, 2.0, -3.0]), requires_grad=True)
  (g,) = (x * x + x + x.exp()).sum().gradient(x)
  np.testing.assert_allclose(g.numpy(), 2 * x.numpy() + 1 + np.exp(x.numpy()))


def test_ints_bools_and_comparisons_get_no_gradient():
  x = Tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
  n = Tensor(np.array([1, 2, 3], dtype=np.int32))
  (g,) = (x * n + (x > 0).cast(dtypes.float64) * 100 + (x.floor() * 7)).sum().gradient(x)
  np.testing.assert_allclose(g.numpy(), [1.0, 2.0, 3.0])
  # read only through ops without a gradient (floor, sign, comparisons): zeros, as torch's floor and sign
  for loss in ((x > 0).cast(dtypes.float64).sum(), x.floor().sum(), x.sign().sum()):
    (z,) = loss.gradient(x)
    np.testing.assert_array_equal(z.numpy(), [0.0, 0.0, 0.0])
  with pytest.raises(RuntimeError, match="not in the graph"):  # not read at all
    Tensor(np.array([1.0])).sum().gradient(x)
  (z,) = Tensor(np.array([1.0])).sum().gradient(x, materialize_grads=True)
  np.testing.assert_array_equal(z.numpy(), [0.0, 0.0, 0.0])


def test_backward_accumulates_into_grad_and_detach_stops_it():
  w = Tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
  b = Tensor(np.array([0.5, -0.5]), requires_grad=True)
  frozen = Tensor(np.array([1.0, 1.0]), requires_grad=True)
  x = Tensor(np.array([[1.0, -1.0]]))
  loss = (x @ w + b + frozen.detach()).sum()
  loss.backward()
  np.testing.assert_allclose(w.grad.numpy(), [[1.0, 1.0], [-1.0, -1.0]])
  np.testing.assert_allclose(b.grad.numpy(), [1.0, 1.0])
  assert frozen.grad is None
  (x @ w).sum().backward()  # a second backward adds to .grad
  np.testing.assert_allclose(w.grad.numpy(), [[2.0, 2.0], [-2.0, -2.0]])
  assert isinstance(w.grad, Tensor) and w.grad.shape == w.shape


def test_gradient_argument_and_errors():
  x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
  (g,) = (x * 3).gradient(x, gradient=Tensor(np.array([1.0, -2.0])))
  np.testing.assert_allclose(g.numpy(), [3.0, -6.0])
  with pytest.raises(RuntimeError, match="scalar"):
    (x * 3).backward()
  with pytest.raises(ValueError, match="shape"):
    (x * 3).gradient(x, gradient=Tensor(np.array([1.0])))
  with pytest.raises(RuntimeError, match="floating point"):
    Tensor([1, 2], requires_grad=True)
  with pytest.raises(RuntimeError, match="requires grad"):
    Tensor(np.array([1.0])).sum().backward()


def test_training_flag():
  assert Tensor.training is False
  with Tensor.train():
    assert Tensor.training is True
    with Tensor.train(False):
      assert Tensor.training is False
    assert Tensor.training is True
  assert Tensor.training is False


def test_gradient_of_gradient_is_a_tensor_graph():
  x = Tensor(np.array([0.3, -1.2]), requires_grad=True)
  (g,) = (x * x * x).sum().gradient(x)
  (gg,) = g.sum().gradient(x)
  np.testing.assert_allclose(gg.numpy(), 6 * x.numpy())


# ---- the trace

def test_trace_records_one_match_per_differentiated_op(trace):
  a = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
  b = Tensor(np.array([4.0, 5.0, 6.0]), requires_grad=True)
  c = Tensor(np.array([1, 2, 3], dtype=np.int32))
  loss = (a * b + c).sum()  # MUL, CAST of c (no match: nothing flows into ints), ADD, REDUCE_AXIS, RESHAPE
  loss.backward()
  recorder.disable()
  recs = list(TraceReader(trace))
  ctxs = {r["id"]: r for r in recs if r["t"] == "ctx_begin"}
  rws = [r for r in recs if r["t"] == "rw_begin" and r["name"] == "gradient"]
  assert len(rws) == 1 and ctxs[rws[0]["ctx"]]["name"] == "gradient"
  matches = [r for r in recs if r["t"] == "match" and r["rw"] == rws[0]["id"]]
  pats = {r["id"]: r for r in recs if r["t"] == "pattern"}
  lines = [pats[m["pat"]]["line"] for m in matches]
  assert len(matches) == 4
  assert all(pats[m["pat"]]["file"].endswith("compiler/gradient.py") for m in matches)
  rule_line = {op: r.location[1] for r in pm_gradient.rules for op in (r.pat.src[0].op or ())}
  want = [rule_line[op] for op in (Ops.RESHAPE, Ops.REDUCE_AXIS, Ops.ADD, Ops.MUL)]
  assert lines == want


# ---- a smaller set compiled (LLVM)

@pytest.mark.parametrize("name", ["mul", "div", "maximum", "where"])
def test_binary_rules_llvm(monkeypatch, name):
  monkeypatch.setenv("BACKEND", "llvm")
  rng = np.random.default_rng(11)
  check_gradient(BINARY[name], input_array(rng, (3, 4), "away0"), input_array(rng, (4,), "away0"), rng=rng)


def test_mlp_gradient_llvm(monkeypatch):
  monkeypatch.setenv("BACKEND", "llvm")
  rng = np.random.default_rng(12)
  y = Tensor(np.array([1, 0, 3, 2, 1], dtype=np.int32))
  fn = lambda x, w1, w2: (x @ w1).relu().dot(w2).sparse_categorical_crossentropy(y)
  check_gradient(fn, rng.standard_normal((5, 6)), rng.standard_normal((6, 8)), rng.standard_normal((8, 4)), rng=rng)
  assert math.isfinite(fn(*(Tensor(rng.standard_normal(s)) for s in [(5, 6), (6, 8), (8, 4)])).item())


# ---- more of the API, fixed shapes: each lowers to the ops above, so each differentiates
MORE = {
  "einsum": (lambda a, b: Tensor.einsum("ij,jk->ik", a, b), [(3, 4), (4, 2)]),
  "conv_transpose2d": (lambda x, w: x.conv_transpose2d(w, stride=2), [(1, 2, 3, 3), (2, 3, 2, 2)]),
  "interpolate": (lambda x: x.interpolate((4, 6), mode="linear"), [(1, 1, 2, 3)]),
  "sort": (lambda x: x.sort(-1)[0], [(2, 5)]), "topk": (lambda x: x.topk(2)[0], [(2, 5)]),
  "cummax": (lambda x: x.cummax(0)[0], [(5,)]), "logcumsumexp": (lambda x: x.logcumsumexp(0), [(4, 2)]),
  "masked_fill": (lambda x: x.masked_fill(x > 0, 2.0), [(4,)]),
  "scatter": (lambda x: x.scatter(0, Tensor(np.array([1, 0], dtype=np.int32)), 5.0), [(3,)]),
  "split": (lambda x: x.split(2)[1] * 2, [(4, 3)]), "lerp": (lambda a, b: a.lerp(b, 0.3), [(3,), (3,)]),
  "nll_loss": (lambda x: x.log_softmax().nll_loss(Tensor(np.array([1, 0], dtype=np.int32))), [(2, 3)]),
  "cross_entropy": (lambda x: x.cross_entropy(Tensor(np.array([1, 0], dtype=np.int32))), [(2, 3)]),
  "var_mean": (lambda x: x.var_mean(0)[0] + x.var_mean(0)[1], [(3, 2)]),
  "silu": (lambda x: x.silu(), [(4,)]), "elu": (lambda x: x.elu(), [(4,)]),
  "softplus": (lambda x: x.softplus(), [(4,)]),
}


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_api_ops(name):
  fn, shapes = MORE[name]
  rng = np.random.default_rng(len(name))
  check_gradient(fn, *(input_array(rng, s, "away0") * 0.5 for s in shapes), rng=rng, directions=2)


def test_a_constant_parameter_is_its_own_node():
  # Tensor(2.0) is a CONST, hash-consed with the 2.0 of `v * 2`: as a parameter it gets a buffer of its own
  a = Tensor(2.0, requires_grad=True)
  z = Tensor.zeros(2).requires_grad_()
  v = Tensor(np.array([1.0, 2.0], np.float32))
  ((v * 2).sum() + a + (z + Tensor.zeros(2)).sum() * 3).backward()
  assert a.grad.item() == 1.0 and a.item() == 2.0
  np.testing.assert_array_equal(z.grad.numpy(), [3.0, 3.0])


def test_copysign_and_the_ops_built_on_it_have_gradients():
  x = np.array([0.3, -0.7, 1.5], np.float64)
  t = Tensor(x, requires_grad=True)
  (g,) = Tensor.gradient((t.copysign(Tensor(np.array([-1.0, 1.0, -2.0]))) * 3).sum(), t)
  np.testing.assert_allclose(g.numpy(), [-3.0, -3.0, -3.0])  # d/dx of -|x| * 3 where the sign is negative, etc.
  (g,) = Tensor.gradient(t.erf().sum(), t)
  np.testing.assert_allclose(g.numpy(), 2 / math.sqrt(math.pi) * np.exp(-x * x), atol=1e-5)  # erf's fit, differentiated
  (g,) = Tensor.gradient(t.atan().sum(), t)
  np.testing.assert_allclose(g.numpy(), 1 / (1 + x * x), rtol=1e-6)
