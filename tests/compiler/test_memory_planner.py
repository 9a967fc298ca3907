"""The memory planner (compiler/runtime/memory.py, issue 29): within a schedule an intermediate whose last reader has
run leaves its bytes of the schedule's arena to a later one (the arena's own counts: test_memory_arena.py). Counted,
never timed: the bytes buffers hold at their peak and the buffers a trace records; values are bit-identical with
`NO_MEMORY_PLANNER=1`, and every buffer someone can still see (a live Tensor's, an in-place write's target, a TinyJit
capture's, one whose `.numpy()` view is held) keeps its values."""
from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest
from support.server_helpers import recording

from compiler import Tensor, TinyJit, nn
from compiler.dtype import dtypes
from compiler.realize import buffer_of_view, output_slots, run_schedule
from compiler.runtime import buffer as bufmod
from compiler.runtime.buffer import Buffer
from compiler.runtime.memory import memory_planner
from compiler.schedule.rangeify import ScheduleItem
from compiler.uop import KernelInfo, Ops, UOp
from vztrace.memory import MemoryProfile, event
from vztrace.reader import TraceReader

pytestmark = pytest.mark.usefixtures("fresh_caches")
N = 64  # the chain's tensors are N x N float32


def step(y: Tensor) -> Tensor:
  """One kernel of the chain: an elementwise op of a row reduce (a materialized N x N intermediate)."""
  return (y * 0.5 + y.max(axis=1, keepdim=True)).contiguous()


def step_np(y: np.ndarray) -> np.ndarray:
  return (y * np.float32(0.5) + y.max(axis=1, keepdims=True)).astype(np.float32)


def chain(x: Tensor, n: int) -> Tensor:
  for _ in range(n):
    x = step(x)
  return x


def data(seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal((N, N)).astype(np.float32)


def peak_of(fn):
  """fn's result and the most bytes buffers held at once while it ran, above what they held before."""
  gc.collect()
  base = bufmod.memory_in_use()
  bufmod.reset_peak()
  out = fn()
  return out, bufmod.memory_peak() - base


def planner(monkeypatch, on: bool) -> None:
  if on:
    monkeypatch.delenv("NO_MEMORY_PLANNER", raising=False)
  else:
    monkeypatch.setenv("NO_MEMORY_PLANNER", "1")


def test_a_chain_of_kernels_holds_a_constant_number_of_buffers(backend, monkeypatch):
  x = Tensor(data()).realize()
  nbytes = N * N * 4
  got = {}
  for on in (False, True):
    planner(monkeypatch, on)
    got[on] = peak_of(lambda: chain(x, 16).numpy().copy())
  assert got[False][1] >= 16 * nbytes  # every intermediate and the output at once
  assert got[True][1] <= 3 * nbytes  # two intermediates taking turns, and the output
  assert np.array_equal(got[True][0], got[False][0])  # bit-identical
  want = data()
  for _ in range(16):
    want = step_np(want)
  np.testing.assert_allclose(got[True][0], want, rtol=1e-6)


def test_the_trace_shows_the_plan_and_fewer_allocations(tmp_path: Path, monkeypatch):
  allocs, peaks = {}, {}
  for on in (False, True):
    planner(monkeypatch, on)
    path = tmp_path / f"{on}.vztrace"
    with recording(path):
      x = Tensor(data()).realize()
      chain(x, 12).numpy()
    recs = list(TraceReader(path))
    kinds = {r["name"]: r["kind"] for r in recs if r["t"] == "ctx_begin"}
    plans = [name for name, kind in kinds.items() if kind == "memory"]
    assert plans == ([f"memory plan: 11 intermediates in a {2 * N * N * 4 / 1e6:.2f} MB arena, "
                      f"{9 * N * N * 4 / 1e6:.2f} MB saved"] if on else [])
    mems = [r for r in recs if r["t"] == "mem"]
    # an arena is one allocation of its bytes (its views are not allocations)
    allocs[on] = sum(r["op"] == "alloc" and r["size"] in (N * N, 2 * N * N * 4) for r in mems)
    peaks[on] = MemoryProfile(event(r, i) for i, r in enumerate(mems)).summary()["peak"]["bytes"]
  assert allocs == {False: 13, True: 3}  # the input, 11 intermediates (in one arena) and the output
  assert peaks[True] <= 4 * N * N * 4 < 13 * N * N * 4 <= peaks[False]


def test_debug_2_prints_the_plan_and_the_memory_in_use(monkeypatch, capsys):
  monkeypatch.setenv("DEBUG", "2")
  x = Tensor(data()).realize()
  chain(x, 6).numpy()
  lines = capsys.readouterr().out.splitlines()
  assert "*** memory plan: 5 intermediates in a 0.03 MB arena, 0.05 MB saved" in lines
  runs = [line for line in lines if line.startswith("*** r_")]
  assert len(runs) == 6 and all(" mem " in line and "(peak " in line for line in runs)
  peaks = [float(line.split("(peak ")[1].split(" MB")[0]) for line in runs]
  assert peaks == sorted(peaks) and peaks[-1] > 0


def test_live_tensors_in_the_chain_keep_their_values(backend):
  x = Tensor(data()).realize()
  ys = [x]
  for _ in range(10):
    ys.append(step(ys[-1]))
  kept = ys[2:11:3]  # every third is held by the caller: outputs of the realize, read by later kernels too
  Tensor.realize(*kept)
  bufs = [buffer_of_view(t.uop) for t in kept]
  assert len({id(b) for b in bufs}) == len(bufs)
  want = [data()]
  for _ in range(10):
    want.append(step_np(want[-1]))
  for t, w in zip(kept, want[2:11:3]):
    np.testing.assert_allclose(t.numpy(), w, rtol=1e-6)


def test_an_in_place_write_target_is_never_lent(backend):
  w = Tensor(data(1)).realize()
  target = buffer_of_view(w.uop)
  w.assign(chain(w, 6) * 2 + w)  # intermediates of w's kind all around its write
  w.realize()
  assert buffer_of_view(w.uop) is target  # written in place
  want = data(1)
  for _ in range(6):
    want = step_np(want)
  np.testing.assert_allclose(w.numpy(), want * 2 + data(1), rtol=1e-6)


def test_a_multi_output_kernel_and_buffers_read_twice(backend):
  a, b = Tensor(data(2)).realize(), Tensor(data(3)).realize()
  t = chain(Tensor(data(4)), 3)
  u = step(t)
  t2 = (t.permute(1, 0) + u + t).contiguous()  # t read by two kernels, twice by the second
  v = chain(t2, 3)
  a.assign(a + v)
  b.assign(b * v)
  sched = a.schedule(b)
  assert any(sum(s.op is Ops.STORE for s in si.ast.src) > 1 for si in sched), "no multi-output kernel"
  Tensor.realize(a, b)
  tn = data(4)
  for _ in range(3):
    tn = step_np(tn)
  vn = tn.T + step_np(tn) + tn
  for _ in range(3):
    vn = step_np(vn)
  np.testing.assert_allclose(a.numpy(), data(2) + vn, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(b.numpy(), data(3) * vn, rtol=1e-5, atol=1e-5)


def test_a_numpy_view_keeps_its_values_across_later_realizes(backend):
  a = chain(Tensor(data(5)), 6)
  view = a.numpy()
  kept = view.copy()
  del a
  gc.collect()  # its buffer dies: the memory goes to the pool, which must not lend it while the view reads it
  for seed in (6, 7):
    chain(Tensor(data(seed)), 6).numpy()
  assert np.array_equal(view, kept)


def held_bytes(bufs) -> int:
  """The bytes of memory a set of buffers holds (an arena once, however many of its views)."""
  mem = {id(b.base or b): (b.base or b).nbytes for b in bufs if b is not None}
  return sum(mem.values())


def _jit_run(monkeypatch, on: bool) -> tuple[list[np.ndarray], int]:
  planner(monkeypatch, on)

  @TinyJit
  def f(x: Tensor) -> Tensor:
    return chain(x * 1.0, 8)

  outs = [f(Tensor(data(s))).numpy().copy() for s in range(5)]
  return outs, held_bytes(b for _, _, bufs, _ in f.captured.calls for b in bufs)


def test_jit_replays_run_the_planned_buffers_and_stay_right(backend, monkeypatch):
  plain, own_plain = _jit_run(monkeypatch, False)
  planned, own_planned = _jit_run(monkeypatch, True)
  assert own_planned <= own_plain - 5 * N * N * 4  # the capture holds less memory: 7 intermediates in 2
  for s in range(5):  # the capture (call 2) and three replays
    want = data(s)
    for _ in range(8):
      want = step_np(want)
    assert np.array_equal(planned[s], plain[s])
    np.testing.assert_allclose(planned[s], want, rtol=1e-6)


class _MLP:
  def __init__(self):
    self.layers = [nn.Linear(32, 48), nn.Linear(48, 48), nn.Linear(48, 48), nn.Linear(48, 10)]

  def __call__(self, x: Tensor) -> Tensor:
    for layer in self.layers[:-1]:
      x = layer(x).relu()
    return self.layers[-1](x)


def _train(monkeypatch, on: bool) -> tuple[list[float], int]:
  planner(monkeypatch, on)
  Tensor.manual_seed(0)
  rng = np.random.default_rng(8)
  model = _MLP()
  opt = nn.optim.Adam(nn.state.get_parameters(model), lr=0.01)
  x = Tensor(rng.standard_normal((64, 32)).astype(np.float32)).realize()
  y = Tensor(rng.integers(0, 10, 64).astype(np.int32)).realize()
  Tensor.realize(*opt.params)

  def steps() -> list[float]:
    losses = []
    with Tensor.train():
      for _ in range(3):
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y).backward()
        opt.step()
        losses.append(loss.item())
    return losses

  return peak_of(steps)


def test_a_training_step_gives_the_same_losses_in_less_memory(backend, monkeypatch):
  plain, peak_plain = _train(monkeypatch, False)
  planned, peak_planned = _train(monkeypatch, True)
  assert planned == plain  # bit-identical losses
  assert planned[-1] < planned[0]
  assert peak_planned < peak_plain


def test_a_kernel_never_writes_the_memory_it_reads(backend):
  # the transpose's input dies in the transposing kernel: lent to that kernel's own output, a compiled kernel would
  # overwrite elements it has yet to read
  t = chain(Tensor(data(9)), 2)
  out = step((t.permute(1, 0) * 2 + 1).contiguous())
  tn = step_np(step_np(data(9)))
  np.testing.assert_allclose(out.numpy(), step_np(tn.T * 2 + 1), rtol=1e-6)


def _fill_ast(size: int, gate_below: int | None = None) -> UOp:
  """out[r0 * 8 + r1] = 1.0 over 4 x 8 elements (size 32), or only where r1 < gate_below (the rest keeps zeros)."""
  r0, r1 = UOp.range(4, 0), UOp.range(8, 1)
  g = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), (), 0)
  idx = g.index(r0 * 8 + r1, None if gate_below is None else r1 < gate_below)
  st = UOp(Ops.STORE, dtypes.void, (idx, UOp.const(dtypes.float32, 1.0)))
  return UOp(Ops.SINK, dtypes.void, (st,), KernelInfo(name=f"fill{'' if gate_below is None else '_gated'}"))


def test_a_partial_write_keeps_its_own_zeroed_memory(backend):
  # a dead intermediate of the same kind is there to lend, but a kernel that writes some elements of its output
  # reads zeros at the others: it keeps its own memory
  whole, partial = Buffer(dtypes.float32, 32), Buffer(dtypes.float32, 32)  # named by no UOp: intermediates
  sched = [ScheduleItem(_fill_ast(32), (whole,)), ScheduleItem(_fill_ast(32, gate_below=4), (partial,))]
  plan = memory_planner([(si.bufs, output_slots(si.ast)) for si in sched])
  assert plan.planned == 1 and plan.placed == 0 and partial.base is None
  run_schedule(sched)
  np.testing.assert_array_equal(partial.np.reshape(4, 8), np.repeat([[1] * 4 + [0] * 4], 4, axis=0))
