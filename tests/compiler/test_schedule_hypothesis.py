"""Property tests: random chains of elementwise, movement and reduce ops on random shapes agree with numpy when run
through the scheduler and the interpreter, and every kernel they produce keeps the kernel AST contract."""
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import Tensor
from compiler.uop import Ops

SETTINGS = settings(derandomize=True, deadline=None, max_examples=100, suppress_health_check=list(HealthCheck))

shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


def _factorizations(n: int) -> list[tuple[int, ...]]:
  out = [(n,), (1, n), (n, 1)]
  for a in range(2, n):
    if n % a == 0:
      out += [(a, n // a), (n // a, 1, a)]
  return out


@st.composite
def chains(draw, int_mode: bool = False):
  shape = draw(shapes)
  if int_mode:
    data = np.random.default_rng(draw(st.integers(0, 2**16))).integers(-5, 6, shape).astype(np.int32)
  else:
    data = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(shape).astype(np.float32)
  steps = draw(st.lists(st.tuples(st.sampled_from(OPS_INT if int_mode else OPS), st.integers(0, 2**16)),
                        min_size=1, max_size=7))
  return data, steps


def _ax(x, seed):
  return seed % x.ndim if x.ndim else None


# every op: (tensor fn, numpy fn), both taking (x, seed) and deriving the same parameters from x's shape and seed
def _reshape(x, seed, is_t):
  opts = _factorizations(math.prod(x.shape))
  s = opts[seed % len(opts)]
  return x.reshape(s)


def _permute(x, seed, is_t):
  order = tuple(np.random.default_rng(seed).permutation(x.ndim))
  return x.permute(order) if is_t else x.transpose(order)


def _pad(x, seed, is_t):
  if x.ndim == 0:
    return x
  r = np.random.default_rng(seed)
  pads = tuple((int(r.integers(0, 3)), int(r.integers(0, 3))) for _ in x.shape)
  val = float(r.integers(-1, 2))
  return x.pad(pads, value=val) if is_t else np.pad(x, pads, constant_values=val)


def _shrink(x, seed, is_t):
  r = np.random.default_rng(seed)
  sl = []
  for s in x.shape:
    a = int(r.integers(0, s))
    sl.append(slice(a, int(r.integers(a + 1, s + 1))))
  return x[tuple(sl)]


def _stride(x, seed, is_t):
  r = np.random.default_rng(seed)
  return x[tuple(slice(None, None, int(r.choice([1, 2, -1, -2, 3]))) for _ in x.shape)]


def _flip(x, seed, is_t):
  a = _ax(x, seed)
  return x.flip(a) if is_t else np.flip(x, a)


def _expand(x, seed, is_t):
  n = seed % 3 + 1
  return x.reshape((1,) + x.shape).expand((n,) + x.shape) if is_t else np.broadcast_to(x[None], (n,) + x.shape)


def _reduce(name):
  def f(x, seed, is_t):
    a = _ax(x, seed)
    keep = bool(seed & 8)
    if a is None or x.shape[a] == 0:
      return x
    if is_t:
      return getattr(x, name)(a, keepdim=keep)
    return getattr(np, name)(x, axis=a, keepdims=keep).astype(x.dtype)
  return f


def _self_binary(op):
  # combine x with a moved copy of itself (flip): shared inputs read through different index math
  def f(x, seed, is_t):
    a = _ax(x, seed)
    y = (x.flip(a) if is_t else np.flip(x, a)) if a is not None else x
    return op(x, y)
  return f


def _elementwise(tf, nf):
  return lambda x, seed, is_t: tf(x) if is_t else nf(x)


def _contig(x, seed, is_t):
  return x.contiguous() if is_t else x


def _cat(x, seed, is_t):
  a = _ax(x, seed)
  if a is None:
    return x
  return Tensor.cat(x, x * 2, dim=a) if is_t else np.concatenate([x, x * 2], a)


OPS = [
  ("reshape", _reshape), ("permute", _permute), ("pad", _pad), ("shrink", _shrink), ("stride", _stride),
  ("flip", _flip), ("expand", _expand), ("sum", _reduce("sum")), ("max", _reduce("max")), ("contig", _contig),
  ("add_self", _self_binary(lambda a, b: a + b)), ("mul_self", _self_binary(lambda a, b: a * b)),
  ("tanh", _elementwise(lambda t: t.tanh(), np.tanh)),
  ("relu", _elementwise(lambda t: t.relu(), lambda x: np.maximum(x, 0))),
  ("affine", _elementwise(lambda t: t * 0.5 - 1, lambda x: x * np.float32(0.5) - np.float32(1))),
  ("sin", _elementwise(lambda t: t.sin(), np.sin)), ("cat", _cat),
]

OPS_INT = [
  ("reshape", _reshape), ("permute", _permute), ("pad", _pad), ("shrink", _shrink), ("stride", _stride),
  ("expand", _expand), ("sum", _reduce("sum")), ("max", _reduce("max")), ("min", _reduce("min")),
  ("add_self", _self_binary(lambda a, b: a + b)), ("sub_self", _self_binary(lambda a, b: a - b)),
  ("neg", _elementwise(lambda t: -t, np.negative)), ("mod", _elementwise(lambda t: t % 3, lambda x: x % 3)),
  ("cat", _cat), ("contig", _contig),
]


def _run(data, steps):
  t, x = Tensor(data), data
  for (_, fn), seed in steps:
    if math.prod(x.shape) > 4096:  # keep sums of sums small and the test fast
      break
    t, x = fn(t, seed, True), fn(x, seed, False)
    assert t.shape == x.shape, f"shape {t.shape} != {x.shape}"
    assert t.dtype.np == x.dtype or x.dtype == np.float64, (t.dtype, x.dtype)
  return t, np.asarray(x)


def _check_kernels(t: Tensor):
  for si in t.schedule():
    reduces = [u for u in si.ast.toposort() if u.op is Ops.REDUCE]
    assert all(not any(v.op is Ops.REDUCE for v in r.src[0].toposort()) for r in reduces), "nested REDUCE"
    assert si.ast.op is Ops.SINK and si.name[0] in "Er"
    slots = sorted(u.arg for u in si.ast.toposort() if u.op is Ops.DEFINE_GLOBAL)
    assert slots == list(range(len(si.bufs))), (slots, si.bufs)


@SETTINGS
@given(chains())
def test_float_chains_match_numpy(case):
  data, steps = case
  t, x = _run(data, steps)
  _check_kernels(t)
  np.testing.assert_allclose(t.numpy(), x, rtol=1e-4, atol=1e-4)


@SETTINGS
@given(chains(int_mode=True))
def test_int_chains_match_numpy(case):
  data, steps = case
  t, x = _run(data, steps)
  _check_kernels(t)
  np.testing.assert_array_equal(t.numpy(), x.astype(np.int32))


@settings(derandomize=True, deadline=None, max_examples=40)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple), st.data())
def test_reduce_any_axes(shape, data):
  x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
  axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
  neg = tuple(a - len(shape) for a in axes)
  keep = data.draw(st.booleans())
  np.testing.assert_allclose(Tensor(x).sum(neg, keepdim=keep).numpy(), x.sum(axes, keepdims=keep), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(Tensor(x).max(axes, keepdim=keep).numpy(), x.max(axes, keepdims=keep))
