"""The memory planner (tinygrad's `memory_planner`): within one schedule, an intermediate whose last reader has run
lends its Buffer to a later intermediate of the same dtype and size, so a chain of N kernels holds O(1) buffers of
intermediates instead of N.

run_schedule plans before anything runs, by substitution: the later intermediate's Buffer is replaced by the earlier
one in the kernels that use it, and is never given memory. The plan is the same every run of the schedule, and a
TinyJit capture records the kernels with the buffers they ran on, so its replays share memory exactly as the captured
run did. A buffer takes part (is "planned") only when nothing outside the schedule can see it, and its memory holds
nothing it needs when it is lent:
- no live BUFFER UOp names it (`buffer.named`): a Tensor's output, a buffer a live tensor or lazy graph reads, an
  in-place write's target (a Tensor holds it) are named; the scheduler's intermediates are not once it has made them,
  so no later graph can read one, and nobody holds a `.numpy()` view of one (it would need the Tensor);
- it has no memory when the schedule starts (no caller's array, no random numbers drawn into it, no earlier contents);
- the kernel that uses it first writes it whole and reads no element of it (`output_slots`' whole), so the leftover
  contents of the Buffer it is given are never read (a partial write would need zeros there; it keeps its own).
A lender's last use (a read or a write) comes strictly before the borrower's first write: a kernel never reads and
writes one piece of memory through two slots. `NO_MEMORY_PLANNER=1` turns the planner off.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence

from compiler.dtype import DType
from compiler.runtime.buffer import Buffer, named

Kind = tuple[DType, int]  # (dtype, size): buffers of one kind may share memory


def planner_enabled() -> bool:
  """False when `NO_MEMORY_PLANNER` is set (to anything but 0)."""
  return os.environ.get("NO_MEMORY_PLANNER", "0") in ("", "0")


@dataclass
class MemoryPlan:
  """The kernels' buffers after planning, and what the plan did."""
  bufs: list[tuple[Buffer, ...]]  # per kernel, in slot order (shared buffers substituted)
  planned: int = 0  # intermediates that could share memory
  shared: int = 0  # ... of them, how many run in an earlier one's Buffer
  saved: int = 0  # bytes those would have taken
  fresh: dict[Kind, int] = field(default_factory=dict)  # buffers without memory when the schedule starts, per kind

  @property
  def fresh_bytes(self) -> int:
    return sum(n * size * dt.itemsize for (dt, size), n in self.fresh.items())

  def summary(self) -> str:
    return (f"memory plan: {self.planned} intermediates in {self.planned - self.shared} buffers, "
            f"{self.saved / 1e6:.2f} MB saved")


def memory_planner(kernels: Sequence[tuple[Sequence[Buffer], tuple[tuple[int, bool], ...]]],
                   plan: bool = True) -> MemoryPlan:
  """Plan the buffers of a schedule's kernels, given in run order as (buffers in slot order, `output_slots`):
  a planned intermediate borrows the Buffer of one whose last use has passed (the most recently freed of its kind).
  `plan=False` substitutes nothing (and still counts the fresh buffers)."""
  first: dict[int, int] = {}  # id(buffer) -> index of the kernel that uses it first, and last
  last: dict[int, int] = {}
  planned: dict[int, Buffer] = {}
  for i, (bufs, outs) in enumerate(kernels):
    for s, b in enumerate(bufs):
      k = id(b)
      if k not in first:
        first[k] = i
        if plan and b.size and not b.allocated and (s, True) in outs and bufs.count(b) == 1 and not named(b):
          planned[k] = b
      last[k] = i
  into: dict[int, Buffer] = {}  # planned buffer -> the Buffer it runs in (itself, or a lender's)
  if planned:
    ends: dict[int, list[int]] = {}  # kernel index -> the planned buffers it uses last
    for k in planned:
      ends.setdefault(last[k], []).append(k)
    free: dict[Kind, list[Buffer]] = {}  # Buffers whose last use has passed, per kind
    for i, (bufs, _) in enumerate(kernels):
      for b in bufs:
        k = id(b)
        if k in planned and first[k] == i:
          lenders = free.get((b.dtype, b.size))
          into[k] = lenders.pop() if lenders else b
      for k in ends.get(i, ()):  # (after every borrower of this kernel: its own buffers are not lent to it)
        d = into[k]
        free.setdefault((d.dtype, d.size), []).append(d)
  out = MemoryPlan([tuple(into.get(id(b), b) for b in bufs) for bufs, _ in kernels] if into else
                   [tuple(bufs) for bufs, _ in kernels], planned=len(planned))
  for k, d in into.items():
    if d is not planned[k]:
      out.shared += 1
      out.saved += d.nbytes
  seen: set[int] = set()
  for bufs in out.bufs:
    for b in bufs:
      if not b.allocated and id(b) not in seen:
        seen.add(id(b))
        out.fresh[(b.dtype, b.size)] = out.fresh.get((b.dtype, b.size), 0) + 1
  return out
