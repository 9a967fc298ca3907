"""The schedule cache: a repeat call of a program on new data reuses its schedule and kernels, and computes the new
data's answer (never the old one's), into fresh buffers; it keeps no buffer alive; a hit is in the trace."""
import gc
import weakref

import numpy as np
import pytest

from compiler import Tensor
from compiler.runtime.buffer import buffer_of
from compiler.schedule.cache import KERNELS, SCHEDULES
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import _SCALAR_NODES
from vztrace.reader import TraceReader

rng = np.random.default_rng(0)


def _data(*shape):
  return rng.standard_normal(shape).astype(np.float32)


def mlp(x, w1, w2):
  return (Tensor(x).linear(Tensor(w1)).relu().linear(Tensor(w2))).softmax()


def mlp_np(x, w1, w2):
  h = np.maximum(x @ w1, 0) @ w2
  e = np.exp(h - h.max(axis=1, keepdims=True))
  return e / e.sum(axis=1, keepdims=True)


pytestmark = pytest.mark.usefixtures("fresh_caches")


def test_a_repeat_call_hits_and_computes_the_new_data():
  ins = [(_data(4, 8), _data(8, 16), _data(16, 3)) for _ in range(3)]
  outs = []
  for i, args in enumerate(ins):
    hits = SCHEDULES.hits
    outs.append(mlp(*args).numpy())
    assert (SCHEDULES.hits > hits) == (i > 0)
  for got, args in zip(outs, ins):
    np.testing.assert_allclose(got, mlp_np(*args), rtol=1e-5, atol=1e-6)
  assert not np.allclose(outs[0], outs[1])  # different data, different answers


def test_outputs_are_fresh_buffers_each_call():
  a = Tensor(_data(16)) * 2
  b = Tensor(_data(16)) * 2
  a.realize()
  first = a.numpy()
  b.realize()
  assert SCHEDULES.hits == 1
  ua, ub = a.uop, b.uop
  while ua.op is not ua.op.BUFFER:
    ua, ub = ua.src[0], ub.src[0]
  assert buffer_of(ua) is not buffer_of(ub)
  np.testing.assert_array_equal(a.numpy(), first)  # the second call did not write into the first one's output


def test_the_same_buffer_twice_is_another_graph_than_two_buffers():
  x, y = _data(8), _data(8)
  tx, ty = Tensor(x), Tensor(y)
  np.testing.assert_allclose((tx + ty).numpy(), x + y)
  tz = Tensor(x)
  np.testing.assert_allclose((tz + tz).numpy(), x + x)  # must not reuse the two-input schedule with one bound twice
  tu, tv = Tensor(y), Tensor(x)
  np.testing.assert_allclose((tu + tv).numpy(), y + x)
  assert SCHEDULES.hits == 1


def test_other_shapes_and_dtypes_miss():
  for x in (_data(8), _data(9), _data(8).astype(np.float16), np.arange(8, dtype=np.int32)):
    np.testing.assert_allclose((Tensor(x) * 3).numpy(), x * 3, rtol=1e-3)
  assert SCHEDULES.hits == 0 and SCHEDULES.misses == 4


def test_realized_inputs_are_bound_too():
  outs = []
  for seed in range(2):
    x = Tensor(np.full((4, 4), seed + 1, np.float32)).exp().realize()  # read from its buffer by the next graph
    outs.append(((x + 1).sum(axis=0)).numpy())
  np.testing.assert_allclose(outs[0], 4 * (np.e + 1), rtol=1e-6)
  np.testing.assert_allclose(outs[1], 4 * (np.e ** 2 + 1), rtol=1e-6)
  assert SCHEDULES.hits >= 2


def test_off_with_schedule_cache_0(monkeypatch):
  monkeypatch.setenv("SCHEDULE_CACHE", "0")
  for _ in range(2):
    create_schedule([(Tensor(_data(8)) + 1).uop])
  assert SCHEDULES.hits == 0 and not SCHEDULES.entries


def test_the_cache_keeps_no_buffer_alive():
  t = Tensor(_data(1000)) * 2
  t.realize()
  u = t.uop
  while u.op is not u.op.BUFFER:
    u = u.src[0]
  buf = weakref.ref(buffer_of(u))
  src = weakref.ref(buffer_of(next(x for x in Tensor(_data(3)).uop.toposort() if x.op is x.op.BUFFER)))
  del t, u
  gc.collect()
  assert SCHEDULES.entries and buf() is None and src() is None


def test_a_hit_is_in_the_trace(trace):
  for _ in range(2):
    (Tensor(_data(8)) * 2).numpy()
  from compiler.trace import recorder
  recorder.disable()
  names = [r["name"] for r in TraceReader(trace) if r["t"] == "rw_begin"]
  assert names.count("schedule cache hit") == 1 and names.count("open kernel + rangeify") == 1



def test_a_kernel_built_again_while_recording_is_a_kernel_cache_hit(tmp_path):
  """While recording, a kernel of a structure the recording built before (another output's, over other buffers) is a
  "kernel cache hit" snapshot of that AST: the passes show once per structure and recording, and the values are the
  new buffers'. A later recording builds it again (its trace shows the passes), where the earlier one's are not."""
  from compiler.trace import recorder
  KERNELS.clear()
  names = []
  for i in range(2):
    a, b, c = _data(6, 5), _data(6, 5), _data(7)
    SCHEDULES.clear()  # (the second recording's schedule would be a schedule cache hit: no kernel built)
    recorder.enable(tmp_path / f"{i}.vztrace", announce=False)
    try:  # (one schedule: the c kernel has its own structure, the a and b kernels one)
      ta, tb, tc = (Tensor(a) * 3 + 1).exp(), (Tensor(b) * 3 + 1).exp(), Tensor(c) * 3 + 1
      Tensor.realize(ta, tb, tc)
      np.testing.assert_allclose(tb.numpy(), np.exp(b.astype(np.float64) * 3 + 1), rtol=1e-5)
      np.testing.assert_allclose(ta.numpy(), np.exp(a.astype(np.float64) * 3 + 1), rtol=1e-5)
    finally:
      recorder.disable()
    names.append([r["name"] for r in TraceReader(tmp_path / f"{i}.vztrace") if r["t"] == "rw_begin"])
  for got in names:
    assert got.count("open kernel + rangeify") == 2 and got.count("kernel cache hit") == 1, got

def test_the_cache_keeps_no_graph_node_alive():
  # were the graph's own nodes the key, a realized constant would stay in the front end's record of realized nodes,
  # and every later program using that constant would read it from a buffer. (A constant tensor, not a Python
  # scalar, whose broadcast node Tensor._scalar_to keeps on purpose for repeat calls to find: an earlier 5.0 of this
  # shape would be one, so those are dropped first.)
  _SCALAR_NODES.clear()
  t = Tensor(_data(8)) * Tensor(5.0)
  const = next(u for u in t.uop.toposort() if u.op is u.op.CONST)
  users = [weakref.ref(u) for u in t.uop.toposort() if const in u.src]
  t.realize()
  del t, const
  gc.collect()
  assert SCHEDULES.entries and users and all(r() is None for r in users)


def test_a_repeat_call_with_another_scalar_computes_with_that_scalar():
  # a Python scalar's broadcast node is remembered for repeat calls (Tensor._scalar_to): 0.0 and -0.0 are equal and
  # hash alike, but are different constants
  x = np.abs(_data(8)) + 1
  for s in (0.0, -0.0, 0.0, 2.0, -0.0):
    got = (Tensor(x) * s).numpy()
    np.testing.assert_array_equal(got, x * np.float32(s))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(x * np.float32(s)))
