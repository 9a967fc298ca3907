"""BEAM's cost on a device whose compiler is slow (the OpenCL device: pocl takes ~1 s a build): a round builds and
times at most max_candidates, chosen by a static guess (compiler.opt.search.choose_candidates), and the evaluator
builds each distinct OpenCL source once (compiler.runtime.cl_candidates.ClEvaluator); counted, not clocked."""
from __future__ import annotations

import numpy as np

import compiler.engine as engine
from compiler.opt import Kernel, hand_coded_optimizations
from compiler.opt.search import STATIC_SLACK, choose_candidates, get_kernel_actions, static_cost
from compiler.opt.target import cl_target
from compiler.runtime.cl_candidates import ClEvaluator
from compiler.schedule.rangeify import create_schedule
from compiler.tensor import Tensor

CL = cl_target("test", 256, 1 << 15)  # float4, work-groups of up to 256, 32 KiB of local memory
RNG = np.random.default_rng(33)


def _kernel(fn, *shapes: tuple[int, ...]) -> Kernel:
  (si,) = create_schedule([fn(*[Tensor(RNG.standard_normal(s).astype(np.float32)) for s in shapes]).uop])[0]
  return Kernel(si.ast, CL)


def test_capped_round_takes_the_statically_cheap_of_every_kind():
  """Of a 256x256 matmul's first round (the heuristic kernel's children and the plain kernel's), a cap of 8 takes
  candidates of several kinds, all within STATIC_SLACK of the cheapest by static_cost, most of them the heuristic
  kernel's children; none of the plain kernel's many far costlier ones."""
  k = _kernel(lambda a, b: a @ b, (256, 256), (256, 256))
  heur = hand_coded_optimizations(k.copy())
  assert static_cost(heur) * 8 < static_cost(k)
  kids = list(get_kernel_actions(heur, include_0=False).values())
  plain_kids = list(get_kernel_actions(k, include_0=False).values())
  chosen = choose_candidates(plain_kids + kids, 8)
  assert len(chosen) == 8 and len(kids) > 8
  best = min(static_cost(c) for c in plain_kids + kids)
  assert sum(1 for c in plain_kids if static_cost(c) > STATIC_SLACK * best) > 8
  assert all(static_cost(c) <= STATIC_SLACK * best for c in chosen)
  assert sum(1 for c in chosen if c.applied_opts[:-1] == heur.applied_opts) >= 6
  assert len({c.applied_opts[-1].op for c in chosen}) >= 4
  assert choose_candidates(plain_kids, 0) == plain_kids  # (0: no cap)


def test_cl_beam_cap_bounds_builds_and_equal_sources_build_once(monkeypatch):
  """A BEAM round on the device capped at 3 candidates: 3 timed, and the builds are the reference kernel's (which the
  plain seed shares: one source), the heuristic seed's and the 3; the confirmation builds nothing again. Timing an
  AST twice or prefetching it builds nothing more."""
  made: list[ClEvaluator] = []

  def keep(k: Kernel, bufs):
    prepare, ev = real(k, bufs)
    made.append(ev)
    return prepare, ev
  real = engine._cl_evaluator
  monkeypatch.setattr(engine, "_cl_evaluator", keep)
  k = _kernel(lambda a: a.sum(axis=1), (16, 64))
  assert len(get_kernel_actions(hand_coded_optimizations(k.copy()), include_0=False)) > 3
  log: list[dict] = []
  engine.cl_beam_search(k, None, 2, use_cache=False, progress=False, max_rounds=1, log=log, max_candidates=3)
  assert sum(1 for r in log if r["round"] == 1) == 3
  assert made[0].builds == 1 + 1 + 3

  ev = ClEvaluator(k.get_optimized_ast(), None)
  try:
    heur_ast = hand_coded_optimizations(k.copy()).get_optimized_ast()
    ev.prefetch([heur_ast, heur_ast, k.get_optimized_ast()])
    assert ev(heur_ast) > 0 and ev(heur_ast) > 0
    assert ev.builds == 2
  finally:
    ev.close()
