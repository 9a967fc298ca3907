"""Every edit the scheduler makes to a graph is a named rewrite whose matches are steps of the trace: fusing kernels
("fuse refs", "fuse kernels", "fuse slots"), the outputs' views ("buffer views") and the schedule cache's
placeholders ("cache placeholders" when a schedule is stored, "cache bind" on a hit); none goes around the trace."""
import numpy as np
import pytest

from compiler import Tensor
from compiler.schedule.rangeify import create_schedule
from compiler.trace import recorder
from compiler.uop import AxisType, Ops
from vztrace.reader import TraceReader

pytestmark = pytest.mark.usefixtures("fresh_caches")

rng = np.random.default_rng(11)


def _program() -> tuple[list[np.ndarray], list[np.ndarray]]:
  """An in-place write reading, at the element it stores, a reduction another kernel stores (so they fuse, each with
  a REDUCE of its own), run twice on new inputs: the second is a schedule cache hit. Returns (got, numpy's)."""
  w = Tensor(rng.standard_normal((6, 7)).astype(np.float32)).contiguous().realize()
  got, want = [], []
  for _ in range(2):
    xv = rng.standard_normal((6, 7, 5)).astype(np.float32)
    x = Tensor(xv)
    s = x.sum(2).contiguous()
    w.assign(s * 2 + x.max(2))
    Tensor.realize(s, w)
    got += [s.numpy(), w.numpy()]
    want += [xv.sum(2), xv.sum(2) * 2 + xv.max(2)]
  return got, want


def _rewrites(recs: list[dict]) -> dict[str, list[list[tuple[str, str, str]]]]:
  """Per pass name, its rewrites (in order), each as its matches: (rule, arg before, arg after)."""
  pats = {r["id"]: r["name"] for r in recs if r["t"] == "pattern"}
  nodes = {r["id"]: r for r in recs if r["t"] == "node"}
  out: dict[str, list[list[tuple[str, str, str]]]] = {}
  by_id: dict[int, list[tuple[str, str, str]]] = {}
  for r in recs:
    if r["t"] == "rw_begin":
      by_id[r["id"]] = []
      out.setdefault(r["name"], []).append(by_id[r["id"]])
    elif r["t"] == "match" and r["rw"] in by_id:
      by_id[r["rw"]].append((pats[r["pat"]], nodes[r["before"]].get("arg"), nodes[r["after"]].get("arg")))
  return out


def test_the_schedulers_edits_are_steps_of_the_trace(trace):
  got, want = _program()
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
  recorder.disable()
  recs = list(TraceReader(trace))
  assert all(r.get("error") is None for r in recs if r["t"] == "rw_end")
  rw = _rewrites(recs)
  ref, slot, axis = "member's global/axis -> group's ref", "group's buffer -> slot", "group's axis -> axis id"
  # fusing: each member's globals and REDUCE range become the group's refs (two members, one rewrite each; the second
  # member's REDUCE numbered after the first's, its load of the sum marked as stored above) ...
  assert [sorted(m) for m in rw["fuse refs"]] == [
    sorted([(ref, "0", "buf 0"), (ref, "1", "buf 1"), (ref, "(2, AxisType.REDUCE)", "(axis 2, AxisType.REDUCE)")]),
    sorted([(ref, "0", "buf 2"), (ref, "1", "buf 0 (stored above)"), (ref, "2", "buf 1"),
            (ref, "(2, AxisType.REDUCE)", "(axis 3, AxisType.REDUCE)")])]
  # ... the in-place writer's load of the sum becomes the value stored (the sum's REDUCE), and the refs slots and ids
  assert rw["fuse kernels"] == [[("_fresh_value", "None", "Ops.ADD")]]
  assert [sorted(m) for m in rw["fuse slots"]] == [sorted([
    (slot, "buf 0", "0"), (slot, "buf 1", "2"), (slot, "buf 2", "1"),
    (axis, "(axis 2, AxisType.REDUCE)", "(2, AxisType.REDUCE)"),
    (axis, "(axis 3, AxisType.REDUCE)", "(3, AxisType.REDUCE)")])]
  # the outputs' views: each AFTER(buffer, kernel) the plain buffer (none in w's first realize: it is a buffer) ...
  views = rw["buffer views"]
  assert [len(m) for m in views] == [0, 2] and {r for r, _, _ in views[1]} == {"AFTER(buffer, kernel) -> buffer"}
  # ... over placeholders in the schedule stored in the cache, bound to the second call's buffers on its hit
  stored, bound = rw["cache placeholders"][-1], rw["cache bind"]
  assert sorted(after for _, _, after in stored) == ["('in', 1, 42)", "('new', 0, 42)"]
  assert len(bound) == 1 and sorted(before for _, before, _ in bound[0]) == ["('in', 1, 42)", "('new', 0, 42)"]
  assert {r for r, _, _ in stored} == {"buffer -> placeholder"}
  assert {r for r, _, _ in bound[0]} == {"placeholder -> buffer"}


def test_a_fused_kernel_keeps_no_ref():
  # the refs a fused kernel is built with are slots and axis ids in the kernel that runs
  x = Tensor(rng.standard_normal((4, 3, 5)).astype(np.float32))
  w = Tensor(rng.standard_normal((4, 3)).astype(np.float32)).contiguous().realize()
  s = x.sum(2).contiguous()
  w.assign(s + x.max(2))
  sched, _ = create_schedule([s.uop, w.uop])
  (fused,) = [si for si in sched if len(si.ast.src) == 2]
  args = [u.arg for u in fused.ast.toposort() if u.op in (Ops.DEFINE_GLOBAL, Ops.RANGE)]
  assert all(isinstance(a, int) or isinstance(a[0], int) for a in args)
  assert sorted(u.arg for u in fused.ast.toposort() if u.op is Ops.RANGE) == [
    (0, AxisType.LOOP), (1, AxisType.LOOP), (2, AxisType.REDUCE), (3, AxisType.REDUCE)]


def test_a_growing_group_shows_each_members_refs_once(trace):
  """A group that grows by one kernel at a time (three in-place writers, each reading the last at its element) takes
  its earlier members' refs from its last fusion while recording too (fuse._refs' memo): one "fuse refs" pass a
  member, not one a member per fusion (2 + 3 + 4 before), and the same values."""
  w, v, u = (Tensor(rng.standard_normal((6, 7)).astype(np.float32)).contiguous().realize() for _ in range(3))
  xv = rng.standard_normal((6, 7, 5)).astype(np.float32)
  x = Tensor(xv)
  s = x.sum(2).contiguous()
  w.assign(s * 2 + x.max(2))
  v.assign(w * 3 + s)
  u.assign(v + w + 1)
  Tensor.realize(s, w, v, u)
  want_w = xv.sum(2) * 2 + xv.max(2)
  want_v = want_w * 3 + xv.sum(2)
  np.testing.assert_allclose(u.numpy(), want_v + want_w + 1, rtol=1e-5, atol=1e-5)
  recorder.disable()
  rw = _rewrites(list(TraceReader(trace)))
  assert len(rw["fuse kernels"]) == 3 and len(rw["fuse refs"]) == 4
