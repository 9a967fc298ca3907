"""The memory planner's arena (compiler/runtime/memory.py, issue 29): a schedule's intermediates are views at offsets
of one arena, never two whose lives overlap in the same bytes. Counted, never timed: the arena's bytes on a chain, a
diamond and a training step equal the bound worked out by hand (the most bytes live at once), and random schedules
keep overlapping lives apart and give the values of `NO_MEMORY_PLANNER=1`."""
from __future__ import annotations

import gc
import random
import threading

import numpy as np
import pytest

from compiler import Tensor, nn
from compiler import realize as realize_mod
from compiler.dtype import dtypes
from compiler.runtime import buffer as bufmod
from compiler.runtime import memory
from compiler.runtime.buffer import Buffer
from compiler.runtime.interpreter import InterpretedKernel
from compiler.runtime.memory import ALIGN, memory_planner

pytestmark = pytest.mark.usefixtures("fresh_caches")
KB = 1024  # (a multiple of ALIGN: the hand-computed bounds need no rounding)
WHOLE = ((0, True),)  # output_slots of a kernel writing its slot 0 whole


def plan_of(spec: list[tuple[str, ...]], sizes: dict[str, int]):
  """memory_planner over kernels given as (output, *inputs) names; a name in no kernel's output slot is an input
  (allocated: not planned). Returns the plan and the Buffers by name."""
  outs = {k[0] for k in spec}
  bufs = {n: Buffer(dtypes.uint8, size) for n, size in sizes.items()}
  for n, b in bufs.items():
    if n not in outs:
      b.ensure_allocated()
  return memory_planner([([bufs[n] for n in k], WHOLE) for k in spec]), bufs


def lives_of(spec: list[tuple[str, ...]]) -> dict[str, tuple[int, int]]:
  lives: dict[str, tuple[int, int]] = {}
  for i, k in enumerate(spec):
    for n in k:
      lives[n] = (lives.get(n, (i, i))[0], i)
  return lives


def assert_apart(lives: dict, bufs: dict) -> None:
  """Buffers whose lives share a kernel share no byte of the arena."""
  placed = [n for n, b in bufs.items() if b.base is not None]
  for i, a in enumerate(placed):
    for b in placed[i + 1:]:
      (fa, la), (fb, lb) = lives[a], lives[b]
      if fa <= lb and fb <= la:
        ba, bb = bufs[a], bufs[b]
        assert ba.offset + ba.nbytes <= bb.offset or bb.offset + bb.nbytes <= ba.offset, (a, b)


def test_a_chain_runs_in_two_intermediates():
  # x -> t0 -> t1 -> ... -> t9: each dies in the kernel after the one that writes it
  spec = [("t0", "x")] + [(f"t{i}", f"t{i - 1}") for i in range(1, 10)]
  plan, bufs = plan_of(spec, {"x": 4 * KB, **{f"t{i}": 4 * KB for i in range(10)}})
  assert plan.placed == 10 and plan.arena == 2 * 4 * KB and plan.saved == 8 * 4 * KB
  assert {bufs[f"t{i}"].offset for i in range(10)} == {0, 4 * KB}
  assert bufs["x"].base is None
  assert_apart(lives_of(spec), bufs)


def test_a_diamond_takes_the_most_bytes_live_at_once():
  # a feeds b and c, both feed d, d feeds e. Live: k0 a=4; k1 a,b=6; k2 a,b,c=9; k3 b,c,d=10; k4 d,e=6 (KB)
  spec = [("a", "x"), ("b", "a"), ("c", "a"), ("d", "b", "c"), ("e", "d")]
  sizes = {"x": KB, "a": 4 * KB, "b": 2 * KB, "c": 3 * KB, "d": 5 * KB, "e": KB}
  plan, bufs = plan_of(spec, sizes)
  assert plan.arena == 10 * KB and plan.saved == 5 * KB
  assert_apart(lives_of(spec), bufs)


def test_a_training_step_takes_the_most_bytes_live_at_once():
  # forward a1..a3 (kept for the backward), the loss, then each gradient reads the one above and its activation:
  # live k0 a1; k1 a1 a2; k2 a1 a2 a3; k3 a1 a2 a3 (+ the loss, allocated); k4 a1 a2 a3 g3; k5 a1 a2 g3 g2;
  # k6 a1 g2 g1; k7 g1 -> at most 4 at once
  spec = [("a1", "x"), ("a2", "a1"), ("a3", "a2"), ("loss", "a3"), ("g3", "loss", "a3"), ("g2", "g3", "a2"),
          ("g1", "g2", "a1"), ("dw", "g1", "x")]
  sizes = {n: 8 * KB for n in ("x", "a1", "a2", "a3", "g3", "g2", "g1")} | {"loss": 64, "dw": 8 * KB}
  plan, bufs = plan_of(spec, sizes)
  assert plan.arena == 4 * 8 * KB + ALIGN  # (the loss and dw are planned too: dw where a1 was, the loss 64 bytes)
  assert plan.placed == 8 and plan.saved == 8 * KB * 3
  assert_apart(lives_of(spec), bufs)


def test_nothing_is_placed_when_no_bytes_are_saved():
  # two intermediates live at once: an arena would hold both (and keep both until both die)
  plan, bufs = plan_of([("a", "x"), ("b", "a"), ("y", "a", "b")], {"x": KB, "a": KB, "b": KB, "y": KB})
  assert plan.planned == 3 and plan.placed == 0 and plan.arena == 0
  assert all(b.base is None for b in bufs.values())


def test_a_second_order_reaches_the_most_bytes_live_where_biggest_first_does_not(monkeypatch):
  # (first kernel, last kernel, bytes): biggest first puts the 256 at 0, the 192 and both 128s above it: 576 bytes;
  # the most live at once is 448 (kernel 3: 64 + 128 + 128, kernel 4: 128 + 128 + 192), which another order reaches
  lives = ((0, 3, 64), (3, 4, 128), (2, 2, 256), (0, 4, 128), (4, 4, 192))
  assert memory.floor_bytes(lives) == 448
  assert memory._place_in(lives, next(memory._orders(lives, 2)))[1] == 576
  offsets, arena = memory._place.__wrapped__(lives)
  assert arena == 448
  for i, (fa, la, na) in enumerate(lives):
    for j, (fb, lb, nb) in enumerate(lives[:i]):
      if fa <= lb and fb <= la:
        assert offsets[i] + na <= offsets[j] or offsets[j] + nb <= offsets[i], (i, j)
  # the search is bounded by counting: PLACE_WORK lives x lives checks, never more orders than PLACE_TRIES
  tried = []
  place_in = memory._place_in
  monkeypatch.setattr(memory, "_place_in", lambda lv, order: tried.append(1) or place_in(lv, order))
  rng = random.Random(3)
  big = tuple((f, f + rng.randint(0, 40), 64 * rng.randint(1, 50)) for f in (rng.randint(0, 400) for _ in range(600)))
  memory._place.__wrapped__(big)
  assert 2 <= len(tried) <= max(2, memory.PLACE_WORK // 600 ** 2)
  tried.clear()
  memory._place.__wrapped__(big[:40])
  assert len(tried) <= memory.PLACE_TRIES


@pytest.mark.parametrize("seed", range(40))
def test_random_schedules_keep_overlapping_lives_apart(seed):
  rng = random.Random(seed)
  names = [f"b{i}" for i in range(rng.randint(3, 30))]
  sizes = {n: rng.choice([1, 7, 64, 100, 640, 4096]) * rng.randint(1, 9) for n in names} | {"x": 64}
  spec, made = [], ["x"]
  for n in names:  # each kernel writes a new buffer from 1-3 earlier ones
    spec.append((n, *rng.sample(made, min(len(made), rng.randint(1, 3)))))
    made.append(n)
  for _ in range(rng.randint(0, 5)):  # later kernels re-reading earlier buffers stretch their lives
    spec.append((f"r{len(spec)}", *rng.sample(made, 2)))
    sizes[spec[-1][0]] = 64
  plan, bufs = plan_of(spec, sizes)
  lives = lives_of(spec)
  assert_apart(lives, bufs)
  planned = [n for n in bufs if n != "x"]
  most_live = max(sum(sizes[n] for n in planned if lives[n][0] <= i <= lives[n][1]) for i in range(len(spec)))
  if plan.placed:
    assert most_live <= plan.arena < sum(sizes[n] for n in planned)
    assert all(b.offset % ALIGN == 0 and b.offset + b.nbytes <= plan.arena for b in bufs.values() if b.base)


# ---- on real schedules: values equal the NO_MEMORY_PLANNER run, overlapping lives in disjoint bytes
def spy_schedules(monkeypatch) -> list[list]:
  """Every schedule run_schedule plans from now on (its items, holding its Buffers)."""
  seen: list[list] = []
  plan = realize_mod.plan_memory

  def spy(schedule, outs_of):
    seen.append(list(schedule))
    return plan(schedule, outs_of)
  monkeypatch.setattr(realize_mod, "plan_memory", spy)
  return seen


def assert_schedule_apart(schedule: list) -> None:
  """After a run: buffers whose lives share a kernel share no byte of memory (their addresses, views or not)."""
  lives: dict[int, list] = {}
  for i, si in enumerate(schedule):
    for b in si.bufs:
      lives.setdefault(id(b), [b, i, i])[2] = i
  spans = list(lives.values())
  for j, (a, fa, la) in enumerate(spans):
    for b, fb, lb in spans[j + 1:]:
      if fa <= lb and fb <= la:
        assert a.addr + a.nbytes <= b.addr or b.addr + b.nbytes <= a.addr, (a, b)


def random_program(rng: random.Random, x: Tensor, y: Tensor) -> list[Tensor]:
  """A random graph over two 8 x 8 inputs: elementwise ops, row reductions, transposes, reshapes, kept in buffers
  at random (`contiguous`); its last three tensors are the outputs."""
  ts = [x, y]
  for _ in range(rng.randint(3, 14)):
    a, b = rng.choice(ts), rng.choice(ts)
    op = rng.randrange(6)
    t = (a * 0.5 + b if op == 0 else a.maximum(b) - 1 if op == 1 else a + a.sum(axis=1, keepdim=True) * 0.1
         if op == 2 else a.permute(1, 0) * b if op == 3 else (a.reshape(4, 16) + 1).reshape(8, 8) if op == 4
         else (a * b).max(axis=0, keepdim=True) + a)
    ts.append(t.contiguous() if rng.random() < 0.6 else t)
  return ts[-3:]


@pytest.mark.parametrize("seed", range(24))
def test_random_programs_give_the_unplanned_values(seed, monkeypatch):
  monkeypatch.setenv("BACKEND", "interp" if seed % 4 else "llvm")
  rng = np.random.default_rng(seed)
  xs = [rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2)]
  got = {}
  for on in (False, True):
    if on:
      monkeypatch.delenv("NO_MEMORY_PLANNER", raising=False)
    else:
      monkeypatch.setenv("NO_MEMORY_PLANNER", "1")
    seen = spy_schedules(monkeypatch)
    outs = random_program(random.Random(seed), *[Tensor(a).realize() for a in xs])
    Tensor.realize(*outs)
    got[on] = [t.numpy().copy() for t in outs]
    for schedule in seen:
      assert_schedule_apart(schedule)
  for a, b in zip(got[True], got[False]):
    assert np.array_equal(a, b)  # bit-identical


def test_a_training_step_arena_is_the_most_bytes_live(monkeypatch):
  # an MLP step with Adam: the arena equals the least any placement could take (the most planned bytes live at once)
  monkeypatch.setenv("BACKEND", "interp")
  Tensor.manual_seed(0)
  layers = [nn.Linear(32, 48), nn.Linear(48, 48), nn.Linear(48, 10)]
  opt = nn.optim.Adam(nn.state.get_parameters(layers), lr=0.01)
  rng = np.random.default_rng(0)
  x, y = Tensor(rng.standard_normal((64, 32)).astype(np.float32)), Tensor(rng.integers(0, 10, 64).astype(np.int32))
  plans = []
  planner = realize_mod.memory_planner

  def spy(kernels, plan=True):
    lives: dict[int, list] = {}
    for i, (bufs, _) in enumerate(kernels):
      for b in bufs:
        lives.setdefault(id(b), [b, i, i])[2] = i
    got = planner(kernels, plan)
    placed = [v for v in lives.values() if v[0].base is not None]
    plans.append((got, max(sum(-(-b.nbytes // ALIGN) * ALIGN for b, f, last in placed if f <= i <= last)
                           for i in range(len(kernels))) if placed else 0))
    return got
  monkeypatch.setattr(realize_mod, "memory_planner", spy)
  with Tensor.train():
    opt.zero_grad()
    loss = x.sequential([layers[0], Tensor.relu, layers[1], Tensor.relu, layers[2]]).sparse_categorical_crossentropy(y)
    loss.backward()
    loss.realize(*opt.schedule_step())
  step = max(plans, key=lambda p: p[0].placed)
  assert step[0].placed >= 5 and step[0].arena == step[1]


def test_a_schedule_paused_on_another_thread_keeps_its_memory(monkeypatch):
  # thread A stops inside its schedule's third kernel; thread B runs a whole schedule of the same shapes meanwhile:
  # B's plan never takes the bytes A's intermediates still hold (each run has its own arena)
  paused, resume, calls = threading.Event(), threading.Event(), [0]

  def gated(ast):
    kernel = InterpretedKernel(ast)

    def run(bufs):
      calls[0] += 1
      if calls[0] == 3:
        paused.set()
        assert resume.wait(60)
      kernel(bufs)
    return run
  monkeypatch.setitem(realize_mod._factories, "gated", gated)  # (a backend for this test only)
  monkeypatch.setenv("BACKEND", "gated")

  def chain(x: Tensor) -> Tensor:
    for _ in range(6):
      x = (x * 0.5 + x.max(axis=1, keepdim=True)).contiguous()
    return x

  data = [np.random.default_rng(s).standard_normal((16, 16)).astype(np.float32) for s in (0, 1)]
  want = []
  for d in data:  # the values, run alone
    calls[0] = -10 ** 9
    want.append(chain(Tensor(d)).numpy().copy())
  calls[0] = 0
  got: list = [None, None]

  def run_a():
    got[0] = chain(Tensor(data[0])).numpy().copy()
  a = threading.Thread(target=run_a)
  a.start()
  assert paused.wait(60)
  got[1] = chain(Tensor(data[1])).numpy().copy()  # (B: this thread, while A waits in its third kernel)
  resume.set()
  a.join(60)
  assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_the_next_schedule_runs_in_the_arena_the_last_one_left():
  # two chains whose arenas differ a little (2 x 64 x 64 and 2 x 60 x 64 floats): the second takes the first's array
  # from the pool, so a step of several schedules keeps one arena there, not one per schedule
  def chain(rows: int) -> np.ndarray:
    x = Tensor(np.ones((rows, 64), np.float32))
    for _ in range(6):
      x = (x * 0.5 + x.max(axis=1, keepdim=True)).contiguous()
    return x.numpy().copy()

  first = chain(64)
  gc.collect()
  arenas = {size: len(free) for (dt, size), free in bufmod._pool.items() if dt == np.uint8 and free}
  assert arenas == {2 * 64 * 64 * 4: 1}
  second = chain(60)
  gc.collect()
  arenas = {size: len(free) for (dt, size), free in bufmod._pool.items() if dt == np.uint8 and free}
  assert arenas == {2 * 64 * 64 * 4: 1}  # (the same array back; none of 2 x 60 x 64 floats was made)
  assert np.array_equal(first[:60], second)


def test_a_view_of_an_arena_counts_its_bytes_once_and_leaves_it_when_handed_out():
  gc.collect()
  base_bytes = bufmod.memory_in_use()
  arena = Buffer(dtypes.uint8, 4 * KB)
  a, b = Buffer(dtypes.float32, 256), Buffer(dtypes.int32, 256)
  a.place(arena, 0)
  b.place(arena, 1 * KB)
  a.ensure_allocated(zero=False).np[:] = 1.5
  b.np[:] = 7
  assert bufmod.memory_in_use() == base_bytes + 4 * KB  # the arena's bytes, not the views' again
  assert arena.np[:KB].view(np.float32)[0] == 1.5 and a.addr == arena.addr
  view = b.numpy()  # handed out: b moves to memory of its own first, so the arena's later users cannot change it
  assert b.base is None and (view == 7).all() and bufmod.memory_in_use() == base_bytes + 5 * KB
  c = Buffer(dtypes.float32, 256)
  c.place(arena, 2 * KB)
  assert not c.numpy().any() and c.base is None  # (unallocated: it leaves the arena, and reads zeros of its own)
  with pytest.raises(ValueError, match="Buffer.place: 1024 bytes of float32 at offset 3584 of 4096"):
    Buffer(dtypes.float32, 256).place(arena, 3584)
  with pytest.raises(ValueError, match=r"\(allocated\)"):
    a.place(arena, 0)
