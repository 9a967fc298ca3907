"""The schedule's run order for memory (a list scheduler): of the kernels whose inputs are made, the one that takes
the fewest new bytes net of those it lets die runs next, where that lowers the most bytes live at once.

The graph's walk orders kernels by where it reached them, which a training step's peak pays for: MNIST's input
gradient, which no output of the step reads but a lazy tensor alive before it does (so it is computed before the
optimizer overwrites the weights it reads), was made where the walk reached it, next to the backward of conv2's 36 MB
buffers, at the step's peak (212 MB live at once).

Any order that keeps each buffer's accesses in their order is the same program: a kernel runs after every earlier
kernel that writes what it reads or writes, and after every earlier reader of what it writes (the order
`kernel_order` gave in-place writes included). Bytes are counted for the buffers the schedule makes (written by a
kernel, not a buffer of the tensor graph): one lives from its first writer to its last accessor.
"""
from __future__ import annotations

from compiler.schedule.fuse import kernel_inputs, kernel_outputs
from compiler.uop import UOp

Kernel = tuple[UOp, tuple[UOp, ...]]
MAX_KERNELS = 1024  # a longer schedule keeps the walk's order (the list scheduler is quadratic in the kernels)


def _nbytes(b: UOp) -> int:
  return b.arg[1] * b.dtype.itemsize if isinstance(b.arg, tuple) and len(b.arg) > 1 and isinstance(b.arg[1], int) \
    else 0


def _deps(kernels: list[Kernel]) -> list[set[int]]:
  """Per kernel, the earlier kernels it must follow: writers of what it reads or writes, readers of what it writes."""
  reads: dict[UOp, list[int]] = {}
  writes: dict[UOp, list[int]] = {}
  deps: list[set[int]] = []
  for i, k in enumerate(kernels):
    ins, outs = set(kernel_inputs(k)), set(kernel_outputs(k))
    d: set[int] = set()
    for b in ins | outs:
      d.update(writes.get(b, ()))
    for b in outs:
      d.update(reads.get(b, ()))
    deps.append(d)
    for b in ins:
      reads.setdefault(b, []).append(i)
    for b in outs:
      writes.setdefault(b, []).append(i)
  return deps


def peak_bytes(kernels: list[Kernel], order: list[int], made: set[UOp]) -> int:
  """The most bytes of `made` buffers live at once when the kernels run in `order`."""
  last = {b: pos for pos, i in enumerate(order) for b in kernels[i][1] if b in made}
  live = peak = 0
  seen: set[UOp] = set()
  for pos, i in enumerate(order):
    for b in dict.fromkeys(kernels[i][1]):
      if b in made and b not in seen:
        seen.add(b)
        live += _nbytes(b)
    peak = max(peak, live)
    live -= sum(_nbytes(b) for b in dict.fromkeys(kernels[i][1]) if b in made and last[b] == pos)
  return peak


def memory_order(kernels: list[Kernel], in_place: set[UOp]) -> list[Kernel]:
  """The kernels in the list scheduler's order where its peak (`peak_bytes`) is lower, else as given."""
  if len(kernels) < 3 or len(kernels) > MAX_KERNELS:
    return kernels
  made = {b for k in kernels for b in kernel_outputs(k) if b not in in_place}
  deps = _deps(kernels)
  users: dict[int, list[int]] = {}
  for i, d in enumerate(deps):
    for j in d:
      users.setdefault(j, []).append(i)
  left = {b: 0 for k in kernels for b in k[1] if b in made}  # accesses not yet run
  for k in kernels:
    for b in set(k[1]):
      if b in made:
        left[b] += 1
  waiting = [len(d) for d in deps]
  ready = {i for i, w in enumerate(waiting) if w == 0}
  started: set[UOp] = set()
  order: list[int] = []

  def net(i: int) -> tuple[int, int]:
    """The bytes kernel i brings to life less those it lets die, then its place in the walk's order."""
    bufs = set(kernels[i][1]) & made
    return (sum(_nbytes(b) for b in bufs if b not in started) - sum(_nbytes(b) for b in bufs if left[b] == 1), i)
  while ready:
    i = min(ready, key=net)
    ready.remove(i)
    order.append(i)
    for b in set(kernels[i][1]):
      if b in made:
        started.add(b)
        left[b] -= 1
    for u in users.get(i, ()):
      waiting[u] -= 1
      if waiting[u] == 0:
        ready.add(u)
  given = list(range(len(kernels)))
  if peak_bytes(kernels, order, made) >= peak_bytes(kernels, given, made):
    return kernels
  return [kernels[i] for i in order]
