"""The memory planner (tinygrad's `memory_planner`): within one schedule, the intermediates are views at offsets of one
arena (a uint8 Buffer, the buffers' `base`), the offsets chosen so that two intermediates whose lives overlap never
share a byte, and an intermediate whose last kernel has run leaves its bytes to later ones of any dtype and size.

The plan is made before anything runs and is the same every run of the schedule (it is remembered by the lives'
shape, `_place`). Placement is offline greedy with best fit (each buffer into the smallest gap between the already
placed buffers whose lives overlap its own, else above them), tried in several orders (biggest first, longest first,
then seeded random mixes of both, a bounded number) until one reaches the most bytes live at once, which no arena
beats; the smallest arena wins. A TinyJit capture records the kernels with their Buffers, which hold the arena, so
its replays run in the same bytes.

A buffer takes part (is "planned") only when nothing outside the schedule can see it, and its memory holds nothing
it needs when its life starts:
- no live BUFFER UOp names it (`buffer.named`): a Tensor's output, a buffer a live tensor or lazy graph reads, an
  in-place write's target (a Tensor holds it) are named; the scheduler's intermediates are not once it has made them,
  so no later graph or schedule can read one, and nobody holds a `.numpy()` view of one (it would need the Tensor);
- it has no memory when the schedule starts (no caller's array, no random numbers drawn into it, no earlier contents);
- the kernel that uses it first writes it whole and reads no element of it (`output_slots`' whole), so the leftover
  bytes of the arena are never read (a partial write would need zeros there: it keeps memory of its own).
Its life is [the kernel that uses it first, the kernel that uses it last], both included: a kernel never reads and
writes one byte through two slots. The arena belongs to this run of this schedule alone, so a kernel of another
schedule (another thread's) never touches it. `NO_MEMORY_PLANNER=1` turns the planner off.
"""
from __future__ import annotations

import functools
import os
import random
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from compiler.dtype import DType, dtypes
from compiler.runtime.buffer import Buffer, arena_size, named

Kind = tuple[DType, int]  # (dtype, size): what the pool keeps arrays by
Life = tuple[int, int, int]  # (first kernel, last kernel, bytes) of a planned buffer
ALIGN = 64  # every offset in the arena is a multiple of this: a cache line, and every dtype's alignment
BUCKET = 16  # kernels per stretch of the placement's index of lives


def planner_enabled() -> bool:
  """False when `NO_MEMORY_PLANNER` is set (to anything but 0)."""
  return os.environ.get("NO_MEMORY_PLANNER", "0") in ("", "0")


@dataclass
class MemoryPlan:
  """What the plan did: the arena, and the buffers it holds."""
  planned: int = 0  # intermediates that could share memory
  placed: int = 0  # ... of them, how many are views of the arena (all or none)
  arena: int = 0  # the arena's bytes (0: none)
  saved: int = 0  # the placed buffers' bytes, less the arena's
  fresh: dict[Kind, int] = field(default_factory=dict)  # arrays the schedule takes when it runs, per kind

  @property
  def fresh_bytes(self) -> int:
    return sum(n * size * dt.itemsize for (dt, size), n in self.fresh.items())

  def summary(self) -> str:
    return (f"memory plan: {self.placed} intermediates in a {self.arena / 1e6:.2f} MB arena, "
            f"{self.saved / 1e6:.2f} MB saved")


def _round_up(n: int) -> int:
  return -(-n // ALIGN) * ALIGN


PLACE_TRIES = 64  # orders of the lives placed at most (each an offline greedy placement), and at most
PLACE_WORK = 4_000_000  # ... lives x lives checks in all: a schedule of 2000 intermediates places once


def floor_bytes(lives: Sequence[Life]) -> int:
  """The most bytes live at once (over the kernels): no placement's arena is smaller."""
  delta: dict[int, int] = {}
  for first, last, nbytes in lives:
    delta[first] = delta.get(first, 0) + nbytes
    delta[last + 1] = delta.get(last + 1, 0) - nbytes
  live = peak = 0
  for k in sorted(delta):
    live += delta[k]
    peak = max(peak, live)
  return peak


def _orders(lives: tuple[Life, ...], tries: int) -> Iterator[list[int]]:
  """The orders `_place_in` tries: biggest first, longest life first, then biggest-and-longest first with seeded
  random weights (the same orders every run: a plan is the same every process)."""
  idx = range(len(lives))
  yield sorted(idx, key=lambda i: (-lives[i][2], lives[i][0], i))
  yield sorted(idx, key=lambda i: (lives[i][0] - lives[i][1], -lives[i][2], i))
  rnd = random.Random(0)
  for _ in range(tries - 2):
    w, p = [1 + rnd.random() for _ in idx], rnd.choice((0.0, 0.5, 1.0))
    yield sorted(idx, key=lambda i: (-lives[i][2] * w[i] * (lives[i][1] - lives[i][0] + 1) ** p, i))


@functools.lru_cache(maxsize=64)
def _place(lives: tuple[Life, ...]) -> tuple[tuple[int, ...], int]:
  """Offsets (per life, in order) and the arena's bytes: the smallest arena of `_place_in` over `_orders`, stopping at
  the floor (the most bytes live at once). Two lives that share a kernel get disjoint bytes; the rest may share them.
  One greedy order is 10-15% above the floor on a training step's schedule (MNIST: 249 MiB for 220 live at once)."""
  floor = floor_bytes(lives)
  best: tuple[tuple[int, ...], int] | None = None
  for order in _orders(lives, max(2, min(PLACE_TRIES, PLACE_WORK // max(1, len(lives)) ** 2))):
    got = _place_in(lives, order)
    if best is None or got[1] < best[1]:
      best = got
    if best[1] <= floor:
      break
  assert best is not None
  return best


def _place_in(lives: tuple[Life, ...], order: list[int]) -> tuple[tuple[int, ...], int]:
  """Offsets and arena of one greedy placement, lives in `order`: each into the smallest gap between the already
  placed lives that overlap its own, else above them (best fit)."""
  offsets = [0] * len(lives)
  # the placed lives by the stretches of BUCKET kernels they span, so a life meets only those near its own
  buckets: dict[int, list[int]] = {}
  arena = 0
  for i in order:
    first, last, nbytes = lives[i]
    near = {j for b in range(first // BUCKET, last // BUCKET + 1) for j in buckets.get(b, ())}
    best, best_gap, top = -1, -1, 0  # the smallest gap that fits, and the end of the overlapping ones below
    for off, j in sorted((offsets[j], j) for j in near if lives[j][0] <= last and lives[j][1] >= first):
      if off - top >= nbytes and (best < 0 or off - top < best_gap):
        best, best_gap = top, off - top
      top = max(top, off + lives[j][2])
    offsets[i] = at = top if best < 0 else best
    for b in range(first // BUCKET, last // BUCKET + 1):
      buckets.setdefault(b, []).append(i)
    arena = max(arena, at + nbytes)
  return tuple(offsets), arena


def memory_planner(kernels: Sequence[tuple[Sequence[Buffer], tuple[tuple[int, bool], ...]]],
                   plan: bool = True) -> MemoryPlan:
  """Plan the buffers of a schedule's kernels, given in run order as (buffers in slot order, `output_slots`): the
  planned intermediates become views of one new arena Buffer (`Buffer.place`) when that takes fewer bytes than they
  would alone. `plan=False` places nothing (and still counts the fresh buffers)."""
  first: dict[int, int] = {}  # id(buffer) -> index of the kernel that uses it first, and last
  last: dict[int, int] = {}
  planned: dict[int, Buffer] = {}
  fresh: list[Buffer] = []
  for i, (bufs, outs) in enumerate(kernels):
    for s, b in enumerate(bufs):
      k = id(b)
      if k not in first:
        first[k] = i
        if not b.allocated and b.device == "CPU":  # (the host pool's memory only)
          fresh.append(b)
          if plan and b.size and b.base is None and (s, True) in outs and bufs.count(b) == 1 and not named(b):
            planned[k] = b
      last[k] = i
  out = MemoryPlan(planned=len(planned))
  if len(planned) > 1:
    offsets, arena = _place(tuple((first[k], last[k], _round_up(b.nbytes)) for k, b in planned.items()))
    alone = sum(b.nbytes for b in planned.values())
    if arena < alone:
      base = Buffer(dtypes.uint8, arena_size(arena))  # (a released arena a little bigger will do)
      for b, off in zip(planned.values(), offsets):
        b.place(base, off)
      out.placed, out.arena, out.saved = len(planned), arena, alone - arena
      fresh = [b for b in fresh if id(b) not in planned]
      out.fresh[(dtypes.uint8, base.size)] = 1
  for b in fresh:
    out.fresh[(b.dtype, b.size)] = out.fresh.get((b.dtype, b.size), 0) + 1
  return out
