"""The driver from a kernel AST to what runs it: optimize, compile, return the runner.

This is the one module that decides how a kernel is optimized. It reads NOOPT and BEAM (once a kernel, in
`OptPolicy.from_env`), runs the hand-coded heuristics or BEAM search (compiler.opt), giving BEAM the runtime's
evaluator that compiles and times each candidate (compiler.runtime.candidates), then compiles the optimized AST
(compiler.runtime.compile_kernel: codegen + LLVM JIT). Imports run one way from here: the optimizer never imports the
runtime, the runtime never imports the optimizer (tests/test_import_direction.py). compiler.realize calls
`get_runner` as its "llvm" backend.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

from compiler.opt import Kernel, KernelOptError, hand_coded_optimizations
from compiler.opt import beam_search as _beam_search
from compiler.runtime.candidates import runtime_evaluator
from compiler.runtime.compiled import CompiledKernel, compile_kernel
from compiler.uop import UOp


@dataclass(frozen=True)
class OptPolicy:
  """Which optimizer a kernel gets: none (NOOPT=1), BEAM search of width `beam` (BEAM=n), else the heuristics."""
  noopt: bool = False
  beam: int = 0

  @staticmethod
  def from_env() -> OptPolicy:
    """NOOPT and BEAM from the environment (a BEAM that is not an integer is a ValueError)."""
    raw = os.environ.get("BEAM", "0") or "0"
    try:
      beam = int(raw)
    except ValueError:
      raise ValueError(f"BEAM must be an integer, got {raw!r}") from None
    return OptPolicy(noopt=os.environ.get("NOOPT", "0") not in ("", "0"), beam=beam)


def _evaluator(k: Kernel, bufs: Sequence[Any] | None) -> tuple[Any, Any]:
  """BEAM's evaluator: candidates compiled and timed by the runtime, checked against k's unoptimized output."""
  return runtime_evaluator(k.get_optimized_ast(), bufs)


def beam_search(k: Kernel, bufs: Sequence[Any] | None = None, amt: int = 2, **kw: Any) -> Kernel:
  """compiler.opt.search.beam_search with candidates compiled and timed for real (on copies of `bufs`, or random
  buffers); `kw` as there (workers, use_cache, progress, max_rounds)."""
  return _beam_search(k, bufs, amt, evaluator=_evaluator, **kw)


def optimize_kernel(k: Kernel, bufs: Sequence[Any] | None = None, policy: OptPolicy | None = None) -> Kernel:
  """k with the opts the policy (default: the environment's) gives it: none, BEAM's, or the heuristics'."""
  policy = OptPolicy.from_env() if policy is None else policy
  if policy.noopt:
    return k
  if policy.beam >= 1:
    return beam_search(k, bufs, policy.beam)
  return hand_coded_optimizations(k)


def optimize(ast: UOp, bufs: Sequence[Any] | None = None, policy: OptPolicy | None = None) -> UOp:
  """The kernel AST with opts applied (traced), by optimize_kernel."""
  policy = OptPolicy.from_env() if policy is None else policy
  if policy.noopt:
    return ast
  try:
    k = Kernel(ast)
  except KernelOptError:  # e.g. a kernel with no ranges: nothing to optimize
    return ast
  return optimize_kernel(k, bufs, policy).get_optimized_ast()


def get_runner(ast: UOp) -> CompiledKernel:
  """The realize backend's runner: optimize, compile, and return the kernel (`runner(bufs)`)."""
  opt = optimize(ast)
  ck = compile_kernel(opt)
  ck.opts = getattr(opt.arg, "opts", ())  # the applied Opts, which DEBUG=3 prints (compiler/debug.py)
  return ck
