"""Multi-output kernels: an in-place write that reads another kernel's output at the element it stores joins it.

The kernels (in run order) come as (ast, buffers in slot order). A kernel K that writes in place (Tensor.assign: its
outputs are buffers of the tensor graph) joins the earlier kernels G whose output it reads when all of them store at
the same index (the same LOOP ranges, so the same element per iteration) and K reads G's outputs only there: the
fused kernel keeps every STORE, and K's loads of G's outputs become the values G stores ("fuse kernels" pass). Other
kernels keep their boundaries (a `.contiguous()` stays a kernel of its own); in-place writes without a reduction that
store at the same index share a kernel too. An optimizer step is then one kernel per parameter: the gradient, m, v
and the weight stored side by side (the gradient's REDUCE closes inside the iteration that stores it).

What keeps the result equal to running the kernels one after another:
- every load of a buffer the fused kernel writes is at the stored index, and a load of the old contents is a source
  of the value stored there (so it runs before the store);
- the group moves to K's place in the run order only past kernels that neither read what it writes nor write what it
  reads or writes.
"""
from __future__ import annotations

from dataclasses import dataclass

from compiler import rewrite
from compiler.rewrite import PatternMatcher, UPat, graph_rewrite, track_graph
from compiler.schedule.naming import unique_kernel_name
from compiler.uop import AxisType, FastOps, KernelInfo, Ops, UOp, toposort

Kernel = tuple[UOp, tuple[UOp, ...]]  # (ast, BUFFER nodes in slot order: outputs first)

# a fused kernel reads and writes at most this many buffers (each is an argument of the compiled function)
MAX_FUSED_BUFFERS = 16


@dataclass(frozen=True)
class BufferRef:
  """A DEFINE_GLOBAL's arg while kernels are fused: the buffer's place in the group, and whether the load reads what
  an earlier kernel of the group stored (`fresh`)."""
  n: int
  fresh: bool = False

  def __repr__(self) -> str:
    return f"buf {self.n}{' (stored above)' if self.fresh else ''}"


@dataclass(frozen=True)
class AxisRef:
  """A REDUCE RANGE's axis id while kernels are fused: its id in the fused kernel (after those of the members before
  it), until "fuse slots". Renumbering integer ids in a rewrite could make a renumbered range equal another range's
  old node, which the rewrite would then renumber again."""
  n: int

  def __repr__(self) -> str:
    return f"axis {self.n}"


def n_outputs(ast: UOp) -> int:
  return len(ast.src)


def kernel_outputs(k: Kernel) -> tuple[UOp, ...]:
  return k[1][:n_outputs(k[0])]


def kernel_inputs(k: Kernel) -> tuple[UOp, ...]:
  return k[1][n_outputs(k[0]):]


def _store_index(ast: UOp) -> UOp | None:
  """The index every STORE of the kernel writes at (None if they differ or one is gated)."""
  if any(len(st.src[0].src) != 2 for st in ast.src):
    return None
  idxs = {st.src[0].src[1] for st in ast.src}
  return next(iter(idxs)) if len(idxs) == 1 else None


def _loads(ast: UOp) -> list[tuple[int, UOp]]:
  """(slot, INDEX) of every LOAD of a global."""
  return [(u.src[0].src[0].arg, u.src[0]) for u in toposort(ast) if u.op is FastOps.LOAD]


def _safe_group(members: list[Kernel]) -> bool:
  """The members (in run order) can run as one kernel: see the module docstring."""
  idx = _store_index(members[0][0])
  if idx is None or any(_store_index(k[0]) is not idx for k in members):
    return False
  writer: dict[UOp, tuple[int, UOp]] = {}  # buffer -> (member, the value it stores)
  for i, (ast, bufs) in enumerate(members):
    for st in ast.src:
      writer[bufs[st.src[0].src[0].arg]] = (i, st.src[1])
  if len(writer) != sum(n_outputs(k[0]) for k in members):
    return False
  if len(set(writer) | {b for k in members for b in kernel_inputs(k)}) > MAX_FUSED_BUFFERS:
    return False
  for i, (ast, bufs) in enumerate(members):
    if _nests_reduce(ast, bufs, writer, i):
      return False
    for slot, ix in _loads(ast):
      w = writer.get(bufs[slot])
      if w is None:
        continue
      if ix.src[1] is not idx or len(ix.src) != 2:
        return False  # another element of a buffer the kernel writes
      if w[0] > i:  # reads old contents a later member overwrites: must be read by that store
        later_ast, later_bufs = members[w[0]]
        old = {later_bufs[s]: u for s, u in _loads(later_ast)}
        if bufs[slot] not in old:
          return False
  return True


def _nests_reduce(ast: UOp, bufs: tuple[UOp, ...], writer: dict[UOp, tuple[int, UOp]], i: int) -> bool:
  """Member i reads, inside one of its REDUCEs, what an earlier member stores from a REDUCE: fused, the REDUCEs
  would nest (softmax's sum of exp(x - max) stays a kernel of its own)."""
  for red in (u for u in toposort(ast) if u.op is FastOps.REDUCE):
    for slot, _ in _loads(red.src[0]):
      w = writer.get(bufs[slot])
      if w is not None and w[0] < i and _has_reduce(w[1]):
        return True
  return False


def _can_move(k: Kernel, past: list[Kernel]) -> bool:
  """Running k after the kernels `past` instead of before them computes the same."""
  outs, ins = set(kernel_outputs(k)), set(kernel_inputs(k))
  for x in past:
    if outs & set(kernel_inputs(x)) or (outs | ins) & set(kernel_outputs(x)):
      return False
  return True


pm_fuse_refs = PatternMatcher([
  (UPat((Ops.DEFINE_GLOBAL, Ops.RANGE), name="u"), lambda ctx, u: ctx.get(u), "member's global/axis -> group's ref"),
], name="fuse refs")


# _refs' state after a run of members (in order): the buffers' numbers, the buffers written, the stores, the next
# axis id; what a longer run's first members give again
_RefState = tuple[dict[UOp, int], set[UOp], list[UOp], "int | None"]


def _refs(members: list[Kernel], memo: dict[tuple[Kernel, ...], _RefState] | None = None) -> tuple[list[UOp], UOp]:
  """The members' STOREs with globals as BufferRefs (the group's buffers numbered in order) and REDUCE ranges as
  AxisRefs (ids after those of the members before: unique in the kernel), and their SINK: a "fuse refs" pass each.
  memo: the state after runs of members done before, by run (a member's refs depend only on the members before it):
  a group that grows by one kernel at a time had every earlier member rewritten again at each step (GPT step: 479
  passes for 160 fusions)."""
  start, state = 0, ({}, set(), [], None)
  if memo is not None:
    for j in range(len(members) - 1, 0, -1):
      got = memo.get(tuple(members[:j]))
      if got is not None:
        start, state = j, got
        break
  order, written, stores, nxt = dict(state[0]), set(state[1]), list(state[2]), state[3]
  for ast, bufs in members[start:]:
    mapping = {}
    for g in (u for u in toposort(ast) if u.op is FastOps.DEFINE_GLOBAL):
      b = bufs[g.arg]
      is_out = g.arg < n_outputs(ast)
      mapping[g] = g.replace(arg=BufferRef(order.setdefault(b, len(order)), fresh=b in written and not is_out))
    rngs = sorted({u for u in toposort(ast) if u.op is FastOps.RANGE}, key=lambda r: r.arg[0])
    if nxt is None:
      nxt = sum(r.arg[1] is AxisType.LOOP for r in rngs)
    for r in (r for r in rngs if r.arg[1] is AxisType.REDUCE):
      mapping[r] = r.replace(arg=(AxisRef(nxt), r.arg[1]))
      nxt += 1
    stores.extend(graph_rewrite(ast, pm_fuse_refs, ctx=mapping).src)
    written.update(kernel_outputs((ast, bufs)))
  if memo is not None:
    memo[tuple(members)] = (order, written, stores, nxt)
  return list(order), UOp.sink(*stores)


def _fresh_value(ctx: dict[int, UOp], ld: UOp, g: UOp) -> UOp | None:
  return ctx.get(g.arg.n) if g.arg.fresh else None


pm_fuse_kernels = PatternMatcher([
  (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, src=(UPat(Ops.DEFINE_GLOBAL, custom=lambda g: isinstance(g.arg, BufferRef),
                                                 name="g"), UPat())),), name="ld"), _fresh_value),
], name="fuse kernels")

pm_fuse_slots = PatternMatcher([
  (UPat(Ops.DEFINE_GLOBAL, custom=lambda g: isinstance(g.arg, BufferRef), name="g"),
   lambda ctx, g: g.replace(arg=ctx[g.arg.n]), "group's buffer -> slot"),
  (UPat(Ops.RANGE, custom=lambda r: isinstance(r.arg[0], AxisRef), name="r"),
   lambda r: r.replace(arg=(r.arg[0].n, r.arg[1])), "group's axis -> axis id"),
], name="fuse slots")


def fuse_group(members: list[Kernel], memo: dict[tuple[Kernel, ...], _RefState] | None = None) -> Kernel:
  """One kernel computing every member's stores (members checked by _safe_group, in run order); memo: _refs'."""
  bufs, sink = _refs(members, memo)
  stored = {st.src[0].src[0].arg.n: st.src[1] for st in sink.src}
  sink = graph_rewrite(sink, pm_fuse_kernels, ctx=stored, name="fuse kernels")
  outs = [st.src[0].src[0].arg.n for st in sink.src]
  ins = [g.arg.n for g in toposort(sink) if g.op is FastOps.DEFINE_GLOBAL and g.arg.n not in outs]
  slot = {n: i for i, n in enumerate(dict.fromkeys(outs + ins))}
  sink = graph_rewrite(sink, pm_fuse_slots, ctx=slot)
  ast = sink.replace(arg=KernelInfo(name=unique_kernel_name(sink)))
  return ast, tuple(bufs[n] for n in sorted(slot, key=slot.__getitem__))


# a fused kernel by what it depends on: its members' ASTs and which of their buffers are one buffer (each member's slots
# numbered by the buffer's first appearance in the group); the fused AST, and its slots' buffers by those numbers
_FusionKey = tuple[tuple[UOp, ...], tuple[tuple[int, ...], ...]]
_Fused = tuple[UOp, tuple[int, ...]]


def _fusion_key(members: list[Kernel]) -> tuple[_FusionKey, list[UOp]]:
  """members' fusion key, and the group's buffers in the order the key numbers them."""
  number: dict[UOp, int] = {}
  pattern = tuple(tuple([number.setdefault(b, len(number)) for b in bufs]) for _, bufs in members)
  return (tuple([ast for ast, _ in members]), pattern), list(number)


def fuse_made(members: list[Kernel], memo: dict[tuple[Kernel, ...], _RefState] | None,
              made: dict[_FusionKey, _Fused] | None) -> Kernel:
  """fuse_group's kernel, or the one a group of the same key gave in this schedule (made: by key; None: none kept),
  bound to these members' buffers: every layer's parameters of a shape join the same way (GPT step: 160 fusions,
  31 distinct). Its passes show in the trace once a key; a later group of the key is a "fusion cache hit" snapshot.
  Not with switches on, which number every pass's matches (as the kernel cache)."""
  if made is None or rewrite.SWITCHES is not None:
    return fuse_group(members, memo)
  key, bufs = _fusion_key(members)
  hit = made.get(key)
  if hit is not None:
    track_graph(hit[0], "fusion cache hit")
    return hit[0], tuple(bufs[n] for n in hit[1])
  ast, fused_bufs = fuse_group(members, memo)
  at = {b: n for n, b in enumerate(bufs)}
  made[key] = (ast, tuple(at[b] for b in fused_bufs))
  return ast, fused_bufs


def fuse_kernels(kernels: list[Kernel], in_place: set[UOp]) -> list[Kernel]:
  """The kernels with each in-place writer (its outputs are all in `in_place`, the buffers of the tensor graph) fused
  into the writers of what it reads at its stored element (see the module docstring)."""
  groups: list[list[Kernel]] = []  # run order; each a list of original kernels
  fused: list[Kernel] = []
  # each kernel's store index, asked once: the candidate scan below asked it of every earlier kernel for each in-place
  # writer (GPT step: 35k times for its 235 kernels)
  store_index: dict[UOp, UOp | None] = {}
  # (recorded too: a member's "fuse refs" pass is in the trace once, from the fusion that first took it; the later
  # groups' "fuse kernels" passes start from its stores. Untraced only, it was ~0.08 s of recording's cost, issue 30)
  memo: dict[tuple[Kernel, ...], _RefState] = {}
  made: dict[_FusionKey, _Fused] = {}

  def index_of(ast: UOp) -> UOp | None:
    got = store_index.get(ast, store_index)
    if got is store_index:
      got = store_index[ast] = _store_index(ast)
    return got
  for k in kernels:
    idx, ins = index_of(k[0]), set(kernel_inputs(k))
    cands = []
    if idx is not None and set(kernel_outputs(k)) <= in_place:
      for i, g in enumerate(fused):
        if index_of(g[0]) is idx and (not ins.isdisjoint(kernel_outputs(g)) or _in_place_sibling(g, k, in_place)):
          cands.append(i)
    joined = _join(groups, fused, cands, k, memo, made)
    if joined is None:
      groups.append([k])
      fused.append(k)
  return fused


def _has_reduce(ast: UOp) -> bool:
  return any(u.op is Ops.REDUCE for u in toposort(ast))


def _in_place_sibling(g: Kernel, k: Kernel, in_place: set[UOp]) -> bool:
  """g and k both write in place, elementwise: one loop for both (Adam's b1**t and b2**t)."""
  return set(kernel_outputs(g)) <= in_place and not _has_reduce(g[0]) and not _has_reduce(k[0])


def _join(groups: list[list[Kernel]], fused: list[Kernel], cands: list[int], k: Kernel,
          memo: dict[tuple[Kernel, ...], _RefState] | None = None,
          made: dict[_FusionKey, _Fused] | None = None) -> bool | None:
  """Fuse k with the candidate groups (all of them, else the latest that works); True when it did."""
  for pick in ([cands] if len(cands) > 1 else []) + [[c] for c in reversed(cands)]:
    members = [m for i in pick for m in groups[i]] + [k]
    rest = [i for i in range(min(pick), len(fused)) if i not in pick]
    if not all(_can_move(fused[i], [fused[j] for j in rest if j > i]) for i in pick):
      continue
    if not _safe_group(members):
      continue
    new = fuse_made(members, memo, made)
    for i in sorted(pick, reverse=True):
      del groups[i], fused[i]
    groups.append(members)
    fused.append(new)
    return True
  return None
