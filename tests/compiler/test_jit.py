"""TinyJit: capture on the second call, replay after; the same numbers as the function run plainly."""
import gc

import numpy as np
import pytest

from bench.workloads import WORKLOADS
from compiler import Tensor, nn
from compiler.jit import JitError, TinyJit
from compiler.trace import recorder
from vztrace.reader import TraceReader


def _counting(fn):
  """fn, and a list that gets one entry per time its Python body runs (a replay runs none)."""
  calls = []

  def body(*args, **kwargs):
    calls.append(1)
    return fn(*args, **kwargs)
  return body, calls


@pytest.mark.parametrize("name", ["elementwise", "matmul", "softmax", "conv2d", "mlp"])
def test_replay_matches_the_plain_function_on_new_data(name):
  w = WORKLOADS[name](scale=0.1)
  body, calls = _counting(w.build)
  jitted = TinyJit(body)
  rng = np.random.default_rng(3)
  for i in range(5):
    arrays = [rng.standard_normal(a.shape).astype(a.dtype) for a in w.inputs]
    got = jitted(*[Tensor(a) for a in arrays]).numpy()
    want = w.build(*[Tensor(a) for a in arrays]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"call {i}")
    np.testing.assert_allclose(got, w.reference(*arrays), rtol=1e-3, atol=1e-4)
  assert len(calls) == 2  # the plain call and the capture; calls 3-5 replayed


def test_keyword_and_container_inputs_are_swapped_in():
  jitted = TinyJit(lambda a, pair, *, b: a * 2 + b + pair[0] * pair[1])
  for i in range(4):
    a, b = np.full(8, i, np.float32), np.arange(8, dtype=np.float32) * (i + 1)
    c = np.full(8, 3 - i, np.float32)
    np.testing.assert_array_equal(jitted(Tensor(a), [Tensor(c), Tensor(a)], b=Tensor(b)).numpy(), a * 2 + b + c * a)
  assert jitted.captured.names == [0, "b", "1[0]", "1[1]"]


def _train(opt_name: str, jit: bool, steps: int = 5) -> list[np.ndarray]:
  w = WORKLOADS["mlp"](scale=0.1)
  x_np, w1_np, w2_np = w.inputs
  rng = np.random.default_rng(7)
  w1, w2 = Tensor(w1_np.copy(), requires_grad=True), Tensor(w2_np.copy(), requires_grad=True)
  opt = nn.optim.SGD([w1, w2], lr=0.1, momentum=0.9) if opt_name == "SGD" else nn.optim.Adam([w1, w2], lr=0.01)

  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y)
    loss.backward()
    opt.step()
    return loss
  run = TinyJit(step) if jit else step
  losses = []
  for _ in range(steps):
    x = rng.standard_normal(x_np.shape).astype(np.float32)
    y = rng.integers(0, 10, len(x_np)).astype(np.int32)
    losses.append(run(Tensor(x), Tensor(y)).numpy().copy())
  return [w1.numpy(), w2.numpy(), np.array(losses)]


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_jitted_training_step_gives_the_plain_weights(opt_name):
  plain, jitted = _train(opt_name, jit=False), _train(opt_name, jit=True)
  for p, j in zip(plain, jitted):
    np.testing.assert_allclose(j, p, rtol=1e-5, atol=1e-6)
  assert not np.allclose(plain[2][0], plain[2][-1])  # the steps did train


def test_shape_mismatch_raises_naming_the_argument_and_shapes():
  jitted = TinyJit(lambda a, b: a + b)
  for _ in range(3):
    jitted(Tensor(np.ones((2, 3), np.float32)), Tensor(np.ones((2, 3), np.float32)))
  with pytest.raises(JitError, match=r"argument 1 has shape \(3, 3\) float32, the capture had shape \(2, 3\)"):
    jitted(Tensor(np.ones((2, 3), np.float32)), Tensor(np.ones((3, 3), np.float32)))
  with pytest.raises(JitError, match="int32"):
    jitted(Tensor(np.ones((2, 3), np.int32)), Tensor(np.ones((2, 3), np.float32)))


def test_function_running_no_kernel_raises_and_reset_drops_the_capture():
  with pytest.raises(JitError, match="ran no kernel"):
    jitted = TinyJit(lambda a: None)
    for _ in range(2):
      jitted(Tensor(np.ones(4, np.float32)))
  jitted = TinyJit(lambda a: a + 1)
  for _ in range(3):
    jitted(Tensor(np.ones(4, np.float32)))
  jitted.reset()
  assert jitted.captured is None
  np.testing.assert_array_equal(jitted(Tensor(np.ones(5, np.float32))).numpy(), np.full(5, 2))  # a new shape: fine


def test_intermediates_and_outputs_stay_the_jits_while_other_buffers_come_and_go():
  jitted = TinyJit(lambda a, b: ((a * b).contiguous() + a).exp2().sum(axis=0))
  rng = np.random.default_rng(5)
  before: list = []
  for i in range(6):
    a, b = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    out = jitted(Tensor(a), Tensor(b))
    for t, want in before:  # the last call's other tensors: the replay wrote none of their buffers
      np.testing.assert_array_equal(t.numpy(), want)
    before = []
    gc.collect()  # buffers that died now give their arrays to the pool, and the tensors below take them
    vals = [rng.standard_normal((64, 32)).astype(np.float32) for _ in range(3)] + [np.full(32, k, np.float32)
                                                                                   for k in range(3)]
    before.extend(((Tensor(v) * 1).realize(), v) for v in vals)
    np.testing.assert_allclose(out.numpy(), np.exp2(a * b + a).sum(0), rtol=1e-4, err_msg=f"call {i}")


def test_returned_tensors_are_the_captured_outputs_overwritten_by_the_next_call():
  jitted = TinyJit(lambda a: a * 3)
  outs = [jitted(Tensor(np.full(4, i, np.float32))) for i in range(4)]
  assert outs[2] is outs[3]
  np.testing.assert_array_equal(outs[3].numpy(), np.full(4, 9))


def test_replay_is_one_trace_context_with_each_kernel_run(trace):
  x = Tensor(np.ones((16, 16), np.float32))
  jitted = TinyJit(lambda a: (a @ x).relu() + 1)
  for i in range(4):
    np.testing.assert_allclose(jitted(Tensor(np.full((16, 16), i, np.float32))).numpy(), np.full((16, 16), 16 * i + 1))
  kernels = [call[1].name for call in jitted.captured.calls]  # (a run record names the compiled kernel, as
  recorder.disable()  # run_schedule's do)
  recs = list(TraceReader(trace))
  replays = [r for r in recs if r["t"] == "ctx_begin" and r["name"].startswith("jit replay")]
  assert [(r["name"], r["kind"]) for r in replays] == [(f"jit replay {len(kernels)} kernels", "kernel")] * 2
  for ctx in replays:
    runs = [r for r in recs if r["t"] == "run" and r["ctx"] == ctx["id"]]
    assert [r["kname"] for r in runs] == kernels and all(r["min"] >= 0 for r in runs)


def test_recording_started_after_the_capture_captures_again(tmp_path):
  jitted = TinyJit(lambda a: a + 1)
  for i in range(3):
    jitted(Tensor(np.full(4, i, np.float32)))
  first = jitted.captured
  path = tmp_path / "late.vztrace"
  recorder.enable(path, announce=False)
  try:
    np.testing.assert_array_equal(jitted(Tensor(np.full(4, 7, np.float32))).numpy(), np.full(4, 8))
    assert jitted.captured is not first
    np.testing.assert_array_equal(jitted(Tensor(np.full(4, 1, np.float32))).numpy(), np.full(4, 2))
  finally:
    recorder.disable()
  recs = list(TraceReader(path))
  assert any(r["t"] == "ctx_begin" and r["name"] == "jit replay 1 kernels" for r in recs)
  assert any(r["t"] == "source" for r in recs)  # the re-capture compiled its kernel for this trace


def _flip_step(w: Tensor, contiguous: bool):
  def step(x: Tensor) -> Tensor:
    v = w.flip(0)
    w.assign((v.contiguous() if contiguous else v) + x).realize()  # a flip reads the target at other elements
    return w.sum()
  return step


@pytest.mark.parametrize("contiguous", [True, False])
def test_an_assign_in_place_replays_exactly(contiguous):
  plain_w, jit_w = (Tensor(np.arange(4, dtype=np.float32)) for _ in range(2))
  plain, jitted = _flip_step(plain_w, contiguous), TinyJit(_flip_step(jit_w, contiguous))
  want = np.arange(4, dtype=np.float32)
  for i in range(5):
    x = np.full(4, i, np.float32)
    want = want[::-1] + x
    assert jitted(Tensor(x)).item() == plain(Tensor(x)).item() == want.sum()
    np.testing.assert_array_equal(jit_w.numpy(), want)
    np.testing.assert_array_equal(plain_w.numpy(), want)


def test_an_assign_reading_its_target_elsewhere_keeps_the_target_buffer():
  from compiler.realize import buffer_of_view
  from compiler.runtime.buffer import buffer_of
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  x = Tensor(a.copy()).realize()
  held = buffer_of(buffer_of_view(x.uop))
  x.assign(x.flip(0)).realize()
  np.testing.assert_array_equal(x.numpy(), a[::-1])
  x.assign(x[::-1] + x).realize()
  np.testing.assert_array_equal(x.numpy(), a + a[::-1])
  assert buffer_of(buffer_of_view(x.uop)) is held  # (the old scheduler gave it a fresh buffer: a rebound tensor)


class _CNN:
  def __init__(self):
    self.c1, self.bn, self.l1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm(8), nn.Linear(8 * 4 * 4, 10)
    self.bn.num_batches_tracked.requires_grad_(False)  # (state the optimizer realizes with each step)

  def __call__(self, x: Tensor) -> Tensor:
    return self.l1(self.bn(self.c1(x.reshape(-1, 1, 8, 8))).relu().max_pool2d(2).flatten(1))


def _train_cnn(jit: bool) -> list[np.ndarray]:
  Tensor.manual_seed(3)
  model = _CNN()
  opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=0.01)

  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      Tensor.realize(loss, *opt.schedule_step())
    return loss
  run = TinyJit(step) if jit else step
  rng = np.random.default_rng(0)
  losses = [run(Tensor(rng.standard_normal((16, 64)).astype(np.float32)),
                Tensor(rng.integers(0, 10, 16).astype(np.int32))).item() for _ in range(5)]
  return [np.array(losses), *(p.numpy() for p in nn.state.get_parameters(model))]


def test_jitted_cnn_step_with_batchnorm_gives_the_plain_weights_and_running_stats():
  plain, jitted = _train_cnn(False), _train_cnn(True)
  assert len(plain) == len(jitted) > 5
  for p, j in zip(plain, jitted):
    np.testing.assert_allclose(j, p, rtol=1e-5, atol=1e-6)
  assert [p.tolist() for p in plain if p.dtype == np.int32] == [[5]]  # num_batches_tracked: every step counted


def test_jit_off_nesting_returns_and_methods(monkeypatch):
  body, calls = _counting(lambda a: a + 1)
  monkeypatch.setenv("JIT", "0")
  plain = TinyJit(body)
  for _ in range(4):
    plain(Tensor(np.ones(3, np.float32)))
  assert len(calls) == 4
  monkeypatch.delenv("JIT")
  inner = TinyJit(lambda a: a * 2)
  outer = TinyJit(lambda a: inner(a) + 1)
  outer(Tensor(np.ones(3, np.float32)))
  with pytest.raises(RuntimeError, match="inside another TinyJit"):  # the second call: both would capture
    outer(Tensor(np.ones(3, np.float32)))
  with pytest.raises(JitError, match="returned a float"):
    bad = TinyJit(lambda a: (a + 1).sum().item())
    for _ in range(2):
      bad(Tensor(np.ones(3, np.float32)))

  class Model:
    def __init__(self):
      self.w = Tensor(np.full(3, 2, np.float32))

    @TinyJit
    def __call__(self, x: Tensor) -> Tensor:
      return x * self.w
  m = Model()
  for i in range(4):
    np.testing.assert_array_equal(m(Tensor(np.full(3, i, np.float32))).numpy(), np.full(3, 2 * i))


def test_a_jitted_method_replays_each_instance_with_its_own_weights():
  class Scale:
    def __init__(self, k: float):
      self.w = Tensor(np.full(3, k, np.float32))

    @TinyJit
    def __call__(self, x: Tensor) -> Tensor:
      return x * self.w
  a, b = Scale(2), Scale(5)
  for i in range(3):
    np.testing.assert_array_equal(a(Tensor(np.full(3, i, np.float32))).numpy(), np.full(3, 2 * i))
  for i in range(3):  # a's capture replayed with b would read a's weights: [2, 2, 2]
    np.testing.assert_array_equal(b(Tensor(np.full(3, i + 1, np.float32))).numpy(), np.full(3, 5 * (i + 1)))
  assert a(Tensor(np.ones(3, np.float32))).numpy().tolist() == [2, 2, 2]
  with pytest.raises(JitError, match="needs instances with a __dict__"):
    class Slotted:
      __slots__ = ()

      @TinyJit
      def f(self, x: Tensor) -> Tensor:
        return x + 1
    Slotted().f(Tensor(np.ones(3, np.float32)))


def test_debug_lines_of_a_capture_and_a_replay(monkeypatch, capsys):
  jitted = TinyJit(lambda a: (a * 2).sum())
  jitted(Tensor(np.ones(16, np.float32)))
  monkeypatch.setenv("DEBUG", "2")
  capsys.readouterr()
  jitted(Tensor(np.ones(16, np.float32)))
  assert "JIT captured 1 kernels with 1 inputs" in capsys.readouterr().out
  jitted(Tensor(np.ones(16, np.float32)))
  out = capsys.readouterr().out
  assert "scheduled" not in out and len([ln for ln in out.splitlines() if ln.startswith("*** r_16")]) == 1


def test_switches_set_after_the_capture_and_array_arguments_each_call(monkeypatch, capsys):
  body, calls = _counting(lambda a: a * 2)
  jitted = TinyJit(body)
  a, b = np.arange(4, dtype=np.float32), np.full(4, 5, np.float32)
  for x in (a, b, a):  # plain, capture, replay
    jitted(x)
  assert len(calls) == 2
  a[0] = 7  # the same array again, changed in place, then another one, then a dead one's successor
  np.testing.assert_array_equal(jitted(a).numpy(), [14, 2, 4, 6])
  np.testing.assert_array_equal(jitted(b).numpy(), np.full(4, 10))
  del a
  np.testing.assert_array_equal(jitted(np.full(4, 3, np.float32)).numpy(), np.full(4, 6))
  with pytest.raises(JitError, match="shape"):
    jitted(np.ones(5, np.float32))
  monkeypatch.setenv("DEBUG", "2")  # read every replay, not once a capture
  capsys.readouterr()
  jitted(b)
  assert len([ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("***")]) == 1
  monkeypatch.setenv("JIT", "0")
  jitted(b)
  assert len(calls) == 3


def test_a_replay_while_recording_leaves_the_recorder_on_for_everyone(trace, monkeypatch):
  from compiler import realize
  from compiler.runtime.interpreter import InterpretedKernel
  seen = []

  def spy(ast):
    k = InterpretedKernel(ast)

    def run(bufs):  # (another thread recording meanwhile writes to the recorder this sees)
      seen.append(recorder.RECORDER)
      k(bufs)
    return run
  realize.register_backend("jit_spy", spy)
  monkeypatch.setenv("BACKEND", "jit_spy")
  jitted = TinyJit(lambda a: a + 1)
  for i in range(3):
    np.testing.assert_array_equal(jitted(Tensor(np.full(4, i, np.float32))).numpy(), np.full(4, i + 1))
  assert len(seen) == 3 and all(r is not None and r is seen[0] for r in seen)
