"""In-place writes (`Tensor.assign`): the kernel of ASSIGN(target, value) stores into the target's existing buffer.

Two hazards, both handled here: a kernel that overwrites a buffer must run after every kernel that reads the buffer's
old contents (`kernel_order`), and inside the writing kernel each element may only be read where it is written
(`writes_in_place`: every load of the output buffer at the store's index), else the kernel gets a fresh buffer."""
from __future__ import annotations

from typing import Collection, Mapping, MutableMapping

from compiler.uop import FastOps, Ops, UOp


def assign_target(x: UOp) -> UOp | None:
  """The BUFFER an ASSIGN writes into (its target is a view of a realized buffer), else None."""
  if x.op is not Ops.ASSIGN:
    return None
  t = x.src[0]
  while t.op is Ops.RESHAPE:
    t = t.src[0]
  return t if t.op is Ops.BUFFER else None


def writes_in_place(ast: UOp) -> bool:
  """The kernel reads its output buffer (slot 0) only at the index it stores to: each element is read before it is
  overwritten, by the same iteration."""
  store = next(u for u in ast.src if u.op is Ops.STORE)
  out_index = store.src[0]
  for u in ast.toposort():
    if u.op is FastOps.LOAD and u.src[0].op is FastOps.INDEX and u.src[0].src[0] is out_index.src[0] and \
        u.src[0].src[1] is not out_index.src[1]:
      return False
  return True


def kernel_order(afters: list[UOp]) -> list[UOp]:
  """The kernels (AFTER(buffer, KERNEL) nodes, in dependency order) reordered so that a kernel reading a buffer's old
  contents (the plain BUFFER) runs before the kernel that overwrites it (AFTER of that BUFFER)."""
  writer = {a.src[0]: a for a in afters}
  if len(writer) != len(afters):
    raise RuntimeError("Tensor.assign: two in-place writes to one buffer in one schedule")
  deps: dict[UOp, list[UOp]] = {a: [s for s in a.src[1].src[1:] if s.op is Ops.AFTER] for a in afters}
  overwrites = False
  for a in afters:
    for s in a.src[1].src[1:]:
      w = writer.get(s)
      if w is not None and w is not a:
        deps[w].append(a)  # a reads what w overwrites: a first
        overwrites = True
  if not overwrites:
    return afters
  order: list[UOp] = []
  state: dict[UOp, int] = {}  # 1: on the stack, 2: placed
  for root in afters:
    stack = [(root, iter(deps[root]))]
    if state.get(root):
      continue
    state[root] = 1
    while stack:
      node, it = stack[-1]
      nxt = next(it, None)
      if nxt is None:
        stack.pop()
        state[node] = 2
        order.append(node)
      elif state.get(nxt) == 1:
        raise RuntimeError("Tensor.assign: a kernel reads both the old and the new contents of a buffer written in "
                           "place; realize the assigned tensor first")
      elif not state.get(nxt):
        state[nxt] = 1
        stack.append((nxt, iter(deps[nxt])))
  return order


def forget_overwritten(realized: MutableMapping[UOp, UOp], written: set[UOp]) -> None:
  """Drop the memo entries (tensor node -> view of the buffer that holds its value) of the BUFFERs kernels write:
  after an in-place write the buffer no longer holds those nodes' values (a fresh buffer is in no entry)."""
  stale = []
  for k, v in list(realized.items()):
    while v.op is Ops.RESHAPE:
      v = v.src[0]
    if v in written:
      stale.append(k)
  for k in stale:
    del realized[k]


def _base(v: UOp) -> UOp:
  while v.op is Ops.RESHAPE:
    v = v.src[0]
  return v


def assigns_run(roots: list[UOp], realized: Mapping[UOp, UOp], pending: Collection[UOp]) -> set[UOp]:
  """The `pending` ASSIGN nodes in the graphs of roots: the in-place writes a realize of them runs (one walk over
  the union of the graphs, stopping at buffers and at nodes realized earlier, which are read, not run)."""
  found: set[UOp] = set()
  seen: set[UOp] = set()
  stack = list(roots)
  while stack:
    u = stack.pop()
    if u in seen or u.op is Ops.BUFFER or u in realized:
      continue
    seen.add(u)
    if u in pending:
      found.add(u)
    stack.extend(u.src)
  return found


def stale_readers(roots: list[UOp], realized: Mapping[UOp, UOp], written: set[UOp], run: set[UOp]) -> list[bool]:
  """Whether each root reads the contents a buffer of `written` has before the in-place writes `run` (ASSIGN nodes)
  overwrite it: a plain read of the BUFFER, or of a node realized into it earlier (`realized`), but not a read
  through one of `run`, which means the new contents. One memoised walk over the union of the graphs, stopping at
  buffers and realized nodes."""
  reads: dict[UOp, bool] = {}
  for root in roots:
    stack = [root]
    while stack:
      u = stack[-1]
      if u in reads:
        stack.pop()
        continue
      if u.op is Ops.BUFFER:
        got: bool | None = u in written
      elif (v := realized.get(u)) is not None:
        got = _base(v) in written
      elif u in run:
        got = False
      else:
        got = None
      if got is None:
        srcs = u.src[1:] if u.op is Ops.ASSIGN else u.src  # (an assign's target is written, not read)
        todo = [s for s in srcs if s not in reads]
        if todo:
          stack.extend(todo)
          continue
        got = any(reads[s] for s in srcs)
      reads[u] = got
      stack.pop()
  return [reads[r] for r in roots]
