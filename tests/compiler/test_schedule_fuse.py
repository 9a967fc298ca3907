"""Multi-output kernels (compiler/schedule/fuse.py): a kernel reading another's output where it stores joins it, and
the fused kernel computes what the kernels one after another did, in-place writes included."""
import numpy as np
import pytest

from compiler import Tensor
from compiler.schedule.cache import SCHEDULES
from compiler.trace import recorder
from compiler.uop import Ops
from vztrace.reader import TraceReader

pytestmark = pytest.mark.usefixtures("backend")

rng = np.random.default_rng(5)


def randt(*shape):
  return Tensor(rng.standard_normal(shape).astype(np.float32))


def realized(*shape):
  return Tensor(rng.standard_normal(shape).astype(np.float32)).contiguous().realize()


def n_stores(si) -> int:
  return len(si.ast.src)


def test_an_in_place_write_joins_the_writer_of_what_it_reads_where_it_stores():
  x, w = randt(6, 7), realized(6, 7)
  a = (x + 1).contiguous()
  w.assign(a * 2)
  sched = a.schedule(w)
  assert len(sched) == 1 and n_stores(sched[0]) == 2 and len(sched[0].bufs) == 3  # a, w, x
  loads = [u for u in sched[0].ast.toposort() if u.op is Ops.LOAD]
  assert loads and all(u.src[0].src[0].arg == 2 for u in loads)  # x alone: a is not read back
  Tensor.realize(a, w)
  np.testing.assert_allclose(a.numpy(), x.numpy() + 1, rtol=1e-6)
  np.testing.assert_allclose(w.numpy(), (x.numpy() + 1) * 2, rtol=1e-6)


def test_kernels_that_write_no_assign_target_keep_their_boundaries():
  x = randt(6, 7)
  a = (x + 1).contiguous()
  b = a * 2
  assert len(a.schedule(b)) == 2


def test_in_place_writes_of_one_shape_share_a_kernel():
  a0, b0 = np.float32([2.0]), np.float32([3.0])
  a, b = Tensor(a0.copy()).contiguous().realize(), Tensor(b0.copy()).contiguous().realize()
  a.assign(a * 0.5)
  b.assign(b * 0.25)
  sched = a.schedule(b)
  assert len(sched) == 1 and n_stores(sched[0]) == 2
  Tensor.realize(a, b)
  np.testing.assert_allclose([a.item(), b.item()], [1.0, 0.75])


def test_reader_of_other_elements_stays_a_kernel_of_its_own():
  x, w = randt(6, 7), realized(6, 7)
  a = (x + 1).contiguous()
  w.assign(a.flip(0) * 2)
  assert len(a.schedule(w)) == 2
  Tensor.realize(a, w)
  np.testing.assert_allclose(w.numpy(), (x.numpy() + 1)[::-1] * 2, rtol=1e-6)


def test_reductions_do_not_nest():
  x, w = randt(4, 9), realized(4, 1)
  s = x.sum(1, keepdim=True).contiguous()
  w.assign((x * s).sum(1, keepdim=True))  # reads s inside its own reduction: fused, the REDUCEs would nest
  assert len(s.schedule(w)) == 2
  Tensor.realize(s, w)
  np.testing.assert_allclose(w.numpy(), (x.numpy() * x.numpy().sum(1, keepdims=True)).sum(1, keepdims=True),
                             rtol=1e-5)
  # a reduction read outside a reduction fuses: the matmul and the assign of its exp are one kernel
  a, b, w2 = randt(5, 8), randt(8, 3), realized(5, 3)
  m = (a @ b).contiguous()
  w2.assign(m.exp())
  assert len(m.schedule(w2)) == 1
  Tensor.realize(m, w2)
  np.testing.assert_allclose(w2.numpy(), np.exp(a.numpy() @ b.numpy()), rtol=1e-5)


def test_in_place_write_after_a_read_of_the_old_contents():
  w0 = rng.standard_normal((5, 4)).astype(np.float32)
  w = Tensor(w0.copy()).contiguous().realize()
  y = w * 2  # old w
  w.assign(y + w)  # reads y and old w where it stores: one kernel, the load of w before the store
  sched = y.schedule(w)
  assert len(sched) == 1 and n_stores(sched[0]) == 2
  Tensor.realize(y, w)
  np.testing.assert_allclose(y.numpy(), w0 * 2, rtol=1e-6)
  np.testing.assert_allclose(w.numpy(), w0 * 3, rtol=1e-6)


def test_in_place_write_that_does_not_read_the_old_contents_is_not_fused():
  w0 = rng.standard_normal((5, 4)).astype(np.float32)
  w = Tensor(w0.copy()).contiguous().realize()
  y = w * 2  # old w, read by y's kernel alone: fused, its load could run after w's store
  w.assign(y + 1)
  sched = y.schedule(w)
  assert len(sched) == 2
  Tensor.realize(y, w)
  np.testing.assert_allclose(y.numpy(), w0 * 2, rtol=1e-6)
  np.testing.assert_allclose(w.numpy(), w0 * 2 + 1, rtol=1e-6)


def test_a_fused_schedule_is_cached_and_bound_to_new_buffers():
  SCHEDULES.clear()
  outs = []
  for _ in range(2):
    x, w = randt(3, 5), realized(3, 5)
    a = (x * 3).contiguous()
    w.assign(a - 1)
    Tensor.realize(a, w)
    outs.append((x.numpy(), a.numpy(), w.numpy()))
  assert SCHEDULES.hits >= 1
  for xv, av, wv in outs:
    np.testing.assert_allclose(av, xv * 3, rtol=1e-6)
    np.testing.assert_allclose(wv, xv * 3 - 1, rtol=1e-6)


def test_trace_shows_the_fuse_kernels_pass(tmp_path, backend):
  SCHEDULES.clear()
  path = tmp_path / "fuse.vztrace"
  recorder.enable(path, announce=False)
  try:
    x, w = randt(4, 3), realized(4, 3)
    a = (x + 2).contiguous()
    w.assign(a * a)
    names = [si.name for si in a.schedule(w)]
    Tensor.realize(a, w)
  finally:
    recorder.disable()
  recs = list(TraceReader(path))
  # the schedules of realized(), of a.schedule(w), and realize's (a cache hit)
  sched_ctx = [r["id"] for r in recs if r["t"] == "ctx_begin" and r["kind"] == "schedule"][1]
  passes = [r["name"] for r in recs if r["t"] == "rw_begin" and r["ctx"] == sched_ctx]
  assert passes.count("fuse kernels") == 1 and passes.index("fuse kernels") > passes.index("View Kernel Graph")
  assert [r["name"] for r in recs if r["t"] == "ctx_begin" and r["kind"] == "kernel"][-1:] == names
  assert len(names) == 1
  assert all(r.get("error") is None for r in recs if r["t"] == "rw_end")


def test_a_group_grown_a_kernel_at_a_time_rewrites_each_member_once(monkeypatch):
  # _refs' memo (issue 29): a member's refs depend only on the members before it, so a group that grows by one kernel
  # takes the earlier members' from its last fusion; the fused kernel is the one refs made from scratch give
  from compiler.schedule import fuse
  vals = [np.float32([v]) for v in (2.0, 3.0, 5.0, 7.0)]
  scales = (0.5, 0.25, 2.0, 4.0)
  rewrite = fuse.graph_rewrite
  members: list[int] = []

  def counting(sink, pm, *args, **kw):
    if pm is fuse.pm_fuse_refs:
      members.append(1)
    return rewrite(sink, pm, *args, **kw)
  monkeypatch.setattr(fuse, "graph_rewrite", counting)
  monkeypatch.setenv("SCHEDULE_CACHE", "0")  # (every schedule built: none taken from the first's)
  asts = {}
  for memo in (True, False):
    if not memo:  # (refs from scratch: each fusion rewrites every member again)
      monkeypatch.setattr(fuse, "fuse_group", lambda ms, memo=None, group=fuse.fuse_group: group(ms))
    SCHEDULES.clear()
    members.clear()
    ts = [Tensor(v.copy()).contiguous().realize() for v in vals]
    for t, s in zip(ts, scales):
      t.assign(t * s)
    sched = ts[0].schedule(*ts[1:])
    assert len(sched) == 1 and n_stores(sched[0]) == 4
    asts[memo] = (sched[0].ast, len(members))
  assert asts[True][0] is asts[False][0]
  assert asts[False][1] == 2 + 3 + 4 and asts[True][1] == 4


def test_a_fusion_made_before_is_taken_for_the_same_asts_and_buffer_sharing_only(monkeypatch):
  # fuse.fuse_made (issue 29: GPT step's 160 fusions are 31 distinct): the key is the members' ASTs and which of their
  # buffers are one buffer; another group of that key gets the fused AST bound to its own buffers, and a group whose
  # buffers are shared another way (here: the writer of what the in-place write reads is not in the group) is fused
  # anew, as fuse_group fuses it
  from compiler.runtime.buffer import new_buffer_uop
  from compiler.schedule import fuse
  groups: list[list] = []
  made_by = fuse.fuse_made

  def spy(members, memo, made):
    groups.append(list(members))
    return made_by(members, memo, made)
  monkeypatch.setattr(fuse, "fuse_made", spy)
  monkeypatch.setenv("SCHEDULE_CACHE", "0")
  x, w = randt(4, 3), realized(4, 3)
  a = (x + 2).contiguous()
  w.assign(a * 5)
  a.schedule(w)
  (first,) = groups
  assert [len(bufs) for _, bufs in first] == [2, 2] and first[0][1][0] is first[1][1][1]  # a = f(x); w = g(a)

  def fresh(b):
    return new_buffer_uop(b.dtype, b.arg[1])
  xb, ab, wb = first[0][1][1], first[0][1][0], first[1][1][0]
  renamed = {b: fresh(b) for b in (xb, ab, wb)}
  same_sharing = [(ast, tuple(renamed[b] for b in bufs)) for ast, bufs in first]
  other = fresh(ab)  # w reads a buffer the group's first kernel does not write
  other_sharing = [first[0], (first[1][0], (first[1][1][0], other))]
  made: dict = {}
  monkeypatch.setattr(fuse, "fuse_made", made_by)
  got = [fuse.fuse_made(ms, None, made) for ms in (first, same_sharing, other_sharing)]
  assert len(made) == 2, "a group of the same ASTs and sharing was fused again, or one of other sharing was not"
  for ms, (ast, bufs) in zip((first, same_sharing, other_sharing), got):
    want_ast, want_bufs = fuse.fuse_group(ms)
    assert ast is want_ast and bufs == want_bufs
  assert got[1][1] == tuple(renamed[b] for b in got[0][1])
  assert got[2][0] is not got[0][0]
