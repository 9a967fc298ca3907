"""The driver from a kernel AST to what runs it: optimize, compile, return the runner.

This is the one module that decides how a kernel is optimized. It reads NOOPT and BEAM (once a kernel, in
`OptPolicy.from_env`), runs the hand-coded heuristics or BEAM search (compiler.opt), giving BEAM the runtime's
evaluator that compiles and times each candidate (compiler.runtime.candidates), then compiles the optimized AST
(compiler.runtime.compile_kernel: codegen + LLVM JIT), and keeps what it compiled in the compile cache on disk
(compiler.runtime.diskcache; `compile_runner`), which a later process loads instead. Imports run one way from here: the
optimizer never imports the runtime, the runtime never imports the optimizer (tests/project/test_import_direction.py).
compiler.realize calls `compile_runner` as its "llvm" backend, and `confirm_schedule` before it runs a schedule.

With BEAM on, a schedule's kernels are confirmed in sequence before they run (`confirm_schedule`): BEAM's winner of
each kernel, where it differs from the hand-coded kernel, is timed against it in its place in the schedule's run (on
scratch copies of the buffers), and kept only where it wins there; the outcome goes into the BEAM disk cache
("sequence") and, as the search's `beam` records, into the kernel's trace context when it is compiled.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from compiler import rewrite
from compiler.codegen.program import Program
from compiler.host import compile_only
from compiler.opt import Kernel, KernelOptError, Opt, Target, beam_search, hand_coded_optimizations
from compiler.opt.beam_cache import cache_get, cache_key, cache_put
from compiler.opt.search import (
  CONFIRM_MAX_ROUNDS,
  CONFIRM_MIN_S,
  CONFIRM_ROUNDS,
  beats,
  cache_enabled,
  confirm_records,
  max_candidates_env,
  median_time,
  opts_apply,
  record_beam,
)
from compiler.opt.target import cl_target, host_target
from compiler.runtime import diskcache
from compiler.runtime.candidates import (
  load_candidate,
  prepare_candidate,
  runtime_evaluator,
  scratch_arrays,
  time_in_sequence,
)
from compiler.runtime.compiled import (
  CompiledKernel,
  Submit,
  compile_kernel,
  load_kernel,
  run_now,
  start_for_disk,
  start_traced,
  start_untraced,
)
from compiler.runtime.llvm import get_jit
from compiler.trace import recorder
from compiler.trace.recorder import untraced
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


def _evaluator(k: Kernel, bufs: Sequence[Any] | None, threads: int | None = None) -> tuple[Any, Any]:
  """BEAM's evaluator: candidates compiled and timed by the runtime (on `threads` cores, default all), checked
  against k's unoptimized output."""
  return runtime_evaluator(k.get_optimized_ast(), bufs, threads=threads)


def timed_beam_search(k: Kernel, bufs: Sequence[Any] | None = None, amt: int = 2, **kw: Any) -> Kernel:
  """compiler.opt.search.beam_search with candidates compiled and timed for real (on copies of `bufs`, or random
  buffers); `kw` as there (workers, use_cache, progress, max_rounds)."""
  return beam_search(k, bufs, amt, evaluator=_evaluator, **kw)


def optimize_kernel(k: Kernel, bufs: Sequence[Any] | None = None, policy: OptPolicy | None = None) -> Kernel:
  """k with the opts the policy (default: the environment's) gives it: none, BEAM's (as confirm_schedule decided
  them, its records traced here, in the kernel's context), or the heuristics'."""
  policy = OptPolicy.from_env() if policy is None else policy
  if policy.noopt:
    return k
  if policy.beam >= 1:
    if not k.applied_opts and (got := _decided.get((k.ast, k.target.key, policy.beam))) is not None:
      record_beam(got[1])
      return k.apply_opts(got[0])
    return timed_beam_search(k, bufs, policy.beam)
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
  k = optimize_kernel(k, bufs, policy)
  if rewrite.SWITCHES is not None and k.applied_opts:
    k = _switch_opts(k, ast, rewrite.SWITCHES)
  return k.get_optimized_ast()


def _switch_opts(k: Kernel, ast: UOp, switches: rewrite.Switches) -> Kernel:
  """k with the opts the switches turn off left out (SKIP_OPTS, SKIP_MATCHES: every applied opt is numbered): the
  others applied again in order to the unoptimized kernel; an opt that needs one left out is left out too."""
  where = _APPLY_OPT_AT
  off = [switches.opt_off(o.short(), k.name, where) for o in k.applied_opts]
  if not any(off):
    return k
  out = Kernel(ast)
  for o, o_off in zip(k.applied_opts, off):
    if not o_off:
      try:
        out.apply_opt(o)
      except KernelOptError:  # (it acted on an axis a left out opt made)
        pass
  return out


# where an opt is applied (what bisect names as a culprit opt's file:line)
_APPLY_OPT_AT = (Kernel.apply_opt.__code__.co_filename, Kernel.apply_opt.__code__.co_firstlineno)


# ---- confirming BEAM's opts in a schedule's sequence

# (kernel AST, target key, beam width) -> (the opts confirm_schedule kept, the beam records of how): what
# optimize_kernel applies and traces when the kernel is compiled to run
_decided: dict[tuple[UOp, str, int], tuple[list[Opt], list[dict[str, Any]]]] = {}
DECIDED_MAX = 4096
# how confirm_schedule times the sequence (compiler.runtime.candidates.time_in_sequence; tests replace it)
sequence_timer: Callable[..., list[list[list[float]]]] = time_in_sequence


@dataclass
class _Contest:
  """A kernel whose BEAM winner differs from its hand-coded version: both, to time in the schedule's sequence."""
  heur: Kernel
  beam: Kernel
  key: str
  name: str
  log: list[dict[str, Any]]


def _decide(ast: UOp, target_key: str, amt: int, opts: list[Opt], log: list[dict[str, Any]]) -> None:
  if len(_decided) >= DECIDED_MAX:
    del _decided[next(iter(_decided))]
  _decided[(ast, target_key, amt)] = (opts, log)


def _search_unconfirmed(ast: UOp, amt: int, use_cache: bool, threads: int | None,
                        search_kw: dict[str, Any]) -> _Contest | None:
  """BEAM's unconfirmed winner for a kernel and its hand-coded version (a _Contest), or None where nothing is left
  to confirm (decided here: a "sequence" cache entry, the same kernel either way, or nothing to optimize)."""
  try:
    k = Kernel(ast)
  except KernelOptError:
    return None
  key = cache_key(ast, k.target, amt)
  hit = cache_get(key) if use_cache else None
  if hit is not None and hit.confirmed == "sequence" and opts_apply(k, hit.opts):
    _decide(ast, k.target.key, amt, hit.opts, [])
    return None
  log: list[dict[str, Any]] = []
  with untraced():  # the records go onto log, traced when the kernel is compiled (in its context)
    # candidates timed as the schedule's kernels will run (threads)
    evaluator = _evaluator if threads is None else functools.partial(_evaluator, threads=threads)
    best = beam_search(k.copy(), None, amt, evaluator=evaluator, use_cache=use_cache, confirm=False, log=log,
                        **search_kw)
    heur = hand_coded_optimizations(k.copy())
  if best.get_optimized_ast() is heur.get_optimized_ast():
    if use_cache:
      cache_put(key, best.applied_opts, None, k.name, "sequence")
    _decide(ast, k.target.key, amt, best.applied_opts, log)
    return None
  return _Contest(heur, best, key, k.name, log)


def confirm_schedule(items: Sequence[tuple[UOp, Sequence[Any]]], policy: OptPolicy | None = None, *,
                     use_cache: bool | None = None, threads: int | None = None,
                     clock: Callable[[], float] = time.perf_counter, **search_kw: Any) -> dict[UOp, list[dict]]:
  """With BEAM on: decide every kernel's opts of a schedule ((ast, buffers) in run order) before it runs. Each
  kernel not decided yet is searched (BEAM's unconfirmed winner); where that differs from the hand-coded kernel,
  both are timed in their place in the schedule's run (CONFIRM_ROUNDS each at least, alternating by round, on
  scratch copies of the buffers, never the real ones) and BEAM's kept only where it `beats` the heuristics there.
  `threads` and `clock`: how the kernels run and are timed (threads also in the search); `search_kw`: beam_search's
  (workers, progress, max_rounds). Returns the confirmations' `beam` records (heuristic, beam) of each kernel
  confirmed now."""
  policy = OptPolicy.from_env() if policy is None else policy
  if policy.noopt or policy.beam < 1:
    return {}
  amt, use_cache, target_key = policy.beam, cache_enabled() if use_cache is None else use_cache, host_target().key
  contests: dict[UOp, _Contest] = {}
  for ast, _ in items:
    if ast in contests or (ast, target_key, amt) in _decided:
      continue
    if (c := _search_unconfirmed(ast, amt, use_cache, threads, search_kw)) is not None:
      contests[ast] = c
  return _confirm_in_sequence(items, contests, amt, use_cache, threads, clock) if contests else {}


def _confirm_in_sequence(items: Sequence[tuple[UOp, Sequence[Any]]], contests: dict[UOp, _Contest], amt: int,
                         use_cache: bool, threads: int | None,
                         clock: Callable[[], float]) -> dict[UOp, list[dict[str, Any]]]:
  """Time the contested kernels' two variants in the schedule's sequence, keep the winners, cache and log them."""
  arrays = scratch_arrays([b for _, bufs in items for b in bufs])
  with untraced():
    scratch = get_jit().scratch()
    try:
      compiled: dict[UOp, list[CompiledKernel]] = {}
      for ast, _ in items:
        if ast in compiled:
          continue
        if (c := contests.get(ast)) is not None:  # (the loser's code is freed with the scratch engine)
          compiled[ast] = [load_candidate(prepare_candidate(v.get_optimized_ast()), scratch) for v in (c.heur, c.beam)]
        else:
          compiled[ast] = [compile_kernel(optimize(ast, policy=OptPolicy(beam=amt)))]
      steps = [[_step(ck, [arrays[id(b)] for b in bufs], threads) for ck in compiled[ast]] for ast, bufs in items]
      times = sequence_timer(steps, CONFIRM_ROUNDS, clock, CONFIRM_MIN_S, CONFIRM_MAX_ROUNDS)
    except Exception:  # timing failed (the real run will say why): the heuristics are the safe answer, not cached
      for ast, c in contests.items():
        _decide(ast, c.heur.target.key, amt, c.heur.applied_opts, c.log)
      return {}
    finally:
      scratch.close()
  out: dict[UOp, list[dict[str, Any]]] = {}
  for (ast, _), t in zip(items, times):
    if (c := contests.pop(ast, None)) is None:
      continue  # (an uncontested kernel, or one run twice: timed at its first place)
    t_heur, t_beam = t
    won = beats(median_time(t_beam), median_time(t_heur))
    kept = c.beam if won else c.heur
    rnd = 1 + max((r["round"] for r in c.log), default=-1)
    out[ast] = confirm_records(rnd, c.heur.applied_opts, t_heur, c.beam.applied_opts, t_beam, "sequence")
    c.log.extend(out[ast])
    if use_cache:
      cache_put(c.key, kept.applied_opts, median_time(t_beam if won else t_heur), c.name, "sequence",
                c.beam.applied_opts)
    _decide(ast, kept.target.key, amt, kept.applied_opts, c.log)
  return out


def _step(ck: CompiledKernel, arrays: list[Any], threads: int | None) -> Callable[[], None]:
  return lambda: ck(arrays, threads=threads)


# ---- the realize backend, with the compile cache on disk

COUNTS: Counter[str] = Counter()  # "compile": kernels optimized and compiled, "disk": kernels loaded from disk
# the environment the heuristics and LLVM read besides the target (a different value is a different entry)
KEY_ENV = ("NOSTAGE", "NOTHREAD", "LLVM_OPT", "THREADS", "TARGET_ISA")


def _key_context(noopt: bool) -> bytes:
  env = tuple(os.environ.get(v) for v in KEY_ENV)
  return f"{host_target()!r}\n{get_jit().cpu} {get_jit().features}\nnoopt={noopt}\n{env}\n".encode()


def disk_key(ast: UOp, policy: OptPolicy) -> str | None:
  """The disk cache's name of what `ast` compiles to under `policy` on this target: a hash of the AST (its
  diskcache.stable_bytes: ops, dtypes, args and constants exactly, the kernel's name too), the target, the policy
  and the knobs (KEY_ENV), with diskcache's versions; None where the cache does not apply: turned off, tracing (a
  trace shows the kernel's codegen rewrites and texts, made anew), BEAM (its own cache keeps its opts),
  COMPILE_ONLY, an arg with no stable key, or switches on (compiler.rewrite.Switches: what they leave out changes
  code, not the key)."""
  if policy.beam >= 1 or recorder.RECORDER is not None or not diskcache.enabled() or compile_only() \
     or rewrite.SWITCHES is not None:
    return None
  try:
    text = diskcache.stable_bytes(ast)
  except TypeError:
    return None
  return diskcache.full_key(_key_context(policy.noopt) + text)


def _load_runner(key: str) -> CompiledKernel | None:
  """The kernel stored under `key` by compile_runner, linked into the JIT; None where it is not there or not sound."""
  got = diskcache.get(key)
  try:
    prg, opts, symbol, obj = got  # type: ignore[misc]
    if not (isinstance(prg, Program) and isinstance(symbol, str) and isinstance(obj, bytes)):
      raise TypeError("not a compiled kernel")
    opts = tuple(Opt.from_json(o) for o in opts)
  except (TypeError, ValueError) as e:
    if got is not None:  # (a sound file holding something else: as a corrupt one)
      diskcache.ignore(key, f"not a compiled kernel ({e})")
    return None
  ck = load_kernel(prg, symbol, obj)
  ck.opts = opts
  COUNTS["disk"] += 1
  return ck


def compile_runner(ast: UOp) -> CompiledKernel:
  """The realize backend's runner: optimize, compile, and return the kernel (`runner(bufs)`). Untraced, without
  BEAM, what a kernel compiles to (its Program, opts and object code) is kept on disk (compiler.runtime.diskcache),
  and a later process loads it instead of optimizing and compiling again."""
  return start_runner(ast, run_now)()


def compiles_ahead() -> bool:
  """Whether realize may start kernels' compiles ahead of their runs (compile-ahead): not with BEAM (a search that
  times candidates would share the machine with the compile worker) nor with switches on (bisect numbers matches
  kernel by kernel as each is compiled at its turn)."""
  return OptPolicy.from_env().beam < 1 and rewrite.SWITCHES is None


def start_runner(ast: UOp, submit: Submit) -> Callable[[], CompiledKernel]:
  """compile_runner in two stages, for compiler.realize's compile-ahead: the disk cache's lookup, the optimizer and
  codegen now (Python, on this thread), LLVM's optimizer and code generation through `submit` (a worker thread: they
  release the GIL); the getter it returns finishes (the disk cache's write) and gives compile_runner's kernel, or
  raises what the compile raised. Traced, the Python part's records go into the current context (the kernel's,
  maybe opened ahead of its turn) and the getter records the sources there (`compiled.start_traced`)."""
  policy = OptPolicy.from_env()
  key = disk_key(ast, policy)
  if key is not None and (ck := _load_runner(key)) is not None:
    return lambda: ck
  COUNTS["compile"] += 1
  if rewrite.SWITCHES is not None:  # (what a numbered match names as its kernel)
    rewrite.SWITCHES.kernel = getattr(ast.arg, "name", None)
  opt = optimize(ast, policy=policy)
  opts = getattr(opt.arg, "opts", ())  # the applied Opts, which DEBUG=3 prints (compiler/debug.py)
  if key is None:
    get = (start_untraced if recorder.RECORDER is None else start_traced)(opt, submit)

    def finish() -> CompiledKernel:
      ck = get()
      ck.opts = opts
      return ck
    return finish
  got = start_for_disk(opt, key[:32], submit)

  def finish_for_disk() -> CompiledKernel:
    ck, symbol, obj = got()
    if obj is not None:
      prg = ck.program
      if not prg.vars:  # what every run's checks need, worked out now (memoized in the Program) and stored with it
        prg.index_bounds(None)
        prg.flops(None)
      # (without its linearized uops, which only a traced compile shows: a third of the entry, half its load)
      diskcache.put(key, (dataclasses.replace(prg, uops=()), [o.to_json() for o in opts], symbol, obj))
    ck.opts = opts
    return ck
  return finish_for_disk


# ---- the OpenCL backend (BACKEND=cl)

def cl_runner(ast: UOp) -> Any:
  """BACKEND=cl's runner: the kernel with the opts for the OpenCL device's Target (NOOPT=1: none; BEAM=n: BEAM's,
  timed on the device; else the hand-coded GPU heuristics), rendered to OpenCL C and built for the device
  (compiler.runtime.opencl)."""
  from compiler.runtime.opencl import cl_kernel  # lazy: loads pyopencl only for BACKEND=cl
  policy = OptPolicy.from_env()
  if policy.noopt:
    return cl_kernel(ast)
  try:
    k = Kernel(ast, cl_device_target())
  except KernelOptError:  # (a kernel with no ranges: nothing to optimize)
    return cl_kernel(ast)
  k = cl_beam_search(k, None, policy.beam) if policy.beam >= 1 else hand_coded_optimizations(k)
  ck = cl_kernel(k.get_optimized_ast())
  ck.opts = tuple(k.applied_opts)
  return ck


def cl_device_target() -> Target:
  """The OpenCL device's Target: its work-group size and local memory, and float vectors as wide as it prefers, at
  least float4 (a GPU that reports 1 still loads float4; pocl on an AVX-512 CPU prefers 16)."""
  from compiler.runtime.opencl import get_device
  dev = get_device()
  lim = dev.limits
  vec = min(16, max(4, int(getattr(dev.device, "preferred_vector_width_float", 4) or 4)))
  return cl_target(lim.name, lim.max_work_group_size, lim.local_mem_bytes, vector_floats=vec)


def _cl_evaluator(k: Kernel, bufs: Sequence[Any] | None) -> tuple[None, Any]:
  """BEAM's evaluator on the OpenCL device: each candidate rendered, built and timed there (profiling events), checked
  against k's unoptimized output."""
  from compiler.runtime.cl_candidates import ClEvaluator
  return None, ClEvaluator(k.get_optimized_ast(), bufs)


# candidates a BEAM round on the OpenCL device builds and times at most (BEAM_MAX_CANDIDATES overrides; 0: all): a
# device compiler such as pocl's takes ~1 s a kernel, and an unbounded round of a matmul or conv is 70-200 of them
CL_BEAM_MAX_CANDIDATES = 32


def cl_beam_search(k: Kernel, bufs: Sequence[Any] | None = None, amt: int = 2, **kw: Any) -> Kernel:
  """compiler.opt.search.beam_search on the OpenCL device (k's Target: cl_device_target): candidates timed by the
  device, at most CL_BEAM_MAX_CANDIDATES a round, the hand-coded GPU kernel among them, the result in the BEAM
  cache under the device's target; `kw` as there (use_cache, progress, max_rounds, max_candidates)."""
  kw.setdefault("max_candidates", max_candidates_env(CL_BEAM_MAX_CANDIDATES))
  return beam_search(k, bufs, amt, evaluator=_cl_evaluator, **kw)
