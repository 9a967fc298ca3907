"""Repeat backward passes of a loss of one structure reuse its gradient graph, kept as rows over the loss's nodes.

The "gradient" rewrite's result depends only on the structure of the loss graph (ops, dtypes, args, and which leaves
are the same buffer), on the root's gradient and on which of its nodes are targets, never on a buffer's contents. So
the graph of `SINK(root, root_grad)` as rows (buffers without their ids: a hash-consed graph has one node per buffer,
so the source positions say which leaves are the same buffer) and the targets' positions name the gradients of every
loss of that shape. An entry holds no UOp: the gradient nodes are rows `(op, dtype, source positions, arg)`, where a
position below the loss graph's size is that graph's node in toposort order, so a hit makes the gradient nodes over
this call's loss graph (equal nodes: the very objects, by hash-consing) instead of running the rules. Only used while
not recording: with a trace, every backward shows its rewrite. `GRADIENT_CACHE=0` turns it off.
"""
from __future__ import annotations

import os

from compiler.schedule.cache import ScheduleCache
from compiler.uop import Ops, UOp, cons_key, toposort

GRADIENT_CACHE_SIZE = 64  # gradient graphs kept (least recently used first out), as rows: no nodes, no buffers

Rows = tuple[tuple, ...]


def loss_structure(root: UOp, root_grad: UOp, targets: set[UOp]) -> tuple[tuple, list[UOp]]:
  """The cache key of a backward pass, and the nodes of SINK(root, root_grad) in the order of the key's rows."""
  order = toposort(UOp.sink(root, root_grad))
  index: dict[UOp, int] = {}
  rows = []
  for u in order:
    src = tuple([index[s] for s in u.src])
    index[u] = len(rows)
    if u.op is Ops.BUFFER:  # its id is no structure; which leaves are the same buffer is in the source positions
      rows.append((Ops.BUFFER, u.dtype, src, u.arg[1:]))
    else:  # cons_key: equal args of different kinds (0.0 and -0.0, 1 and True) stay different
      rows.append(cons_key(u.op, u.dtype, src, u.arg))
  return (tuple(rows), tuple(sorted(index[t] for t in targets if t in index))), order


def record(order: list[UOp], grads: dict[UOp, UOp]) -> tuple[Rows, tuple[tuple[int, int], ...]] | None:
  """The gradients of the loss graph's nodes in grads as rows over `order`: the new nodes, and (target position,
  gradient position) pairs; None where a gradient holds a BUFFER of its own (not made from structure alone)."""
  pos = {u: i for i, u in enumerate(order)}
  rows: list[tuple] = []
  outs = []
  for t, g in grads.items():
    if t not in pos:
      continue
    for u in toposort(g, gate=lambda y: y not in pos):
      if u in pos:
        continue
      if u.op is Ops.BUFFER:
        return None
      pos[u] = len(order) + len(rows)
      rows.append((u.op, u.dtype, tuple([pos[s] for s in u.src]), u.arg))
    outs.append((pos[t], pos[g]))
  return tuple(rows), tuple(outs)


def replay(order: list[UOp], rows: Rows, outs: tuple[tuple[int, int], ...]) -> dict[UOp, UOp]:
  """The gradients that `record` described, made over this call's loss graph (nodes in the key's order)."""
  nodes = list(order)
  for op, dtype, src, arg in rows:
    nodes.append(UOp(op, dtype, tuple([nodes[i] for i in src]), arg))
  return {nodes[t]: nodes[g] for t, g in outs}


class GradientCache(ScheduleCache):
  """The schedule cache's LRU (hits, misses, clear), of recorded gradients by loss_structure's key."""

  def __init__(self, size: int = GRADIENT_CACHE_SIZE) -> None:
    super().__init__(size)

  @staticmethod
  def enabled() -> bool:
    return os.environ.get("GRADIENT_CACHE", "1") != "0"


GRADIENTS = GradientCache()
