"""BEAM search: from the kernel (and its hand-coded version), try every opt action on the best `amt` kernels, time
each candidate for real, keep the best `amt`, and repeat until a round brings no improvement.

Candidates are prepared (compiled) in worker processes and timed one at a time in this process, so the timings
do not compete with compiles for the cores. Every candidate goes into the trace as a `beam` record; the result is
cached on disk (JSON) keyed by the kernel AST and the machine, and reused by later runs.

BEAM's winner is confirmed before it is kept: re-timed in turns with the hand-coded kernel (`_confirm`, a lone pair),
or, when a schedule runs, by compiler.engine.confirm_schedule, each variant timed in its place in the schedule's
sequence (beam_search(confirm=False) hands it the unconfirmed winner); `beats` is the rule both apply.

A round may be capped (`max_candidates`, BEAM_MAX_CANDIDATES: where builds are slow, the OpenCL device's): then a
static guess (static_cost) chooses which candidates it times (choose_candidates).

The search knows nothing of how a candidate is compiled or run: its caller passes `evaluate` (and `prepare`), or an
`evaluator` factory that makes them (compiler.engine passes the runtime's, which compiles and times on real buffers).
"""
from __future__ import annotations

import concurrent.futures as cf
import itertools
import math
import multiprocessing
import os
import pickle
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from compiler.opt.beam_cache import cache_get, cache_key, cache_put
from compiler.opt.heuristic import hand_coded_optimizations
from compiler.opt.heuristic_gpu import reduces_span_outputs
from compiler.opt.kernel import MAX_UNROLL, Kernel, KernelOptError, Opt, OptOps, access_strides
from compiler.trace import recorder
from compiler.trace.recorder import untraced
from compiler.uop import AxisType, UOp

# the upcasted block (upcast x unroll) a candidate may have: more is slow to compile and spills registers
BEAM_UPCAST_MAX = int(os.environ.get("BEAM_UPCAST_MAX", "256"))
MAX_ROUNDS = 16
# BEAM's best is timed again in turns with the hand-coded kernel and kept only when this much faster
CONFIRM_ROUNDS, CONFIRM_MARGIN = 3, 0.02
# in a schedule's sequence (compiler.engine.confirm_schedule) one round runs each kernel once: more rounds, up to
# CONFIRM_MAX_ROUNDS, until each variant's runs add up to CONFIRM_MIN_S
CONFIRM_MIN_S, CONFIRM_MAX_ROUNDS = 5e-3, 50
# static_cost: fewer work-items than this leave a device's cores (or a GPU's lanes) idle; a symbolic axis counts as
# SYMBOLIC_SIZE
MIN_WORK_ITEMS, SYMBOLIC_SIZE = 1024, 256
# choose_candidates: candidates whose static_cost is within this factor of the cheapest are all alike to the guess
# (on pocl the heuristic kernel's one-opt children span 5x, the plain kernel's are 16x and more, and 10-80x slower)
STATIC_SLACK = 8.0
_PARALLEL = frozenset({AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD, AxisType.LOCAL, AxisType.GROUP_REDUCE})
_REDUCING = frozenset({AxisType.REDUCE, AxisType.UNROLL, AxisType.GROUP_REDUCE, AxisType.BLOCK})


def median_time(times: Sequence[float]) -> float:
  """The (upper) median of a confirmation's times."""
  return sorted(times)[len(times) // 2]


def beats(t_beam: float, t_heur: float) -> bool:
  """Whether BEAM's kernel is kept: its median time beats the hand-coded kernel's by CONFIRM_MARGIN."""
  return t_beam < t_heur * (1 - CONFIRM_MARGIN)


def confirm_records(rnd: int, heur_opts: Sequence[Opt], t_heur: Sequence[float], beam_opts: Sequence[Opt],
                    t_beam: Sequence[float], how: str) -> list[dict[str, Any]]:
  """The trace's `beam` records of a confirmation (round `rnd`, after the search's): each variant's median and its
  times, `confirm` saying how it was timed ("pair", "sequence"), the variant kept `chosen`."""
  won = beats(median_time(t_beam), median_time(t_heur))
  variants = (("heuristic", heur_opts, t_heur, not won), ("beam", beam_opts, t_beam, won))
  return [{"round": rnd, "opts": [o.to_json() for o in opts], "chosen": chosen, "time": median_time(ts),
           "times": list(ts), "confirm": how, "variant": variant} for variant, opts, ts, chosen in variants]


def record_beam(records: Sequence[dict[str, Any]], log: list[dict[str, Any]] | None = None) -> None:
  """`beam` records into the trace's current context, or onto `log` for a caller that records them later (where
  they belong: compiler.engine searches a schedule's kernels before their contexts open)."""
  if log is not None:
    log.extend(records)
  elif recorder.RECORDER is not None:
    for fields in records:
      recorder.record("beam", **fields)


def kernel_actions(k: Kernel) -> list[Opt]:
  """The opts BEAM tries on each kernel of the beam (the reference's list, with THREAD instead of locals, and PEEL)."""
  acts = [Opt(OptOps.UPCAST, axis, amt) for amt in (0, 2, 3, 4, 5, 6, 7, 8, 16) for axis in range(6)]
  # and by one or two vectors: a dot tile's reduce (heuristic._dot_tile), whose lanes accumulate in vector registers
  vec = k.target.vector_floats
  unrolls = sorted({0, 4, 7, *(a for a in (vec, 2 * vec) if a <= MAX_UNROLL)})
  acts += [Opt(OptOps.UNROLL, axis, amt) for amt in unrolls for axis in range(5)]
  acts += [Opt(OptOps.PADTO, axis, 32) for axis in range(7)]
  acts += [Opt(OptOps.SWAP, axis, other) for axis in range(5) for other in range(axis + 1, 5)]
  threads = k.target.threads
  if threads > 1:
    acts += [Opt(OptOps.THREAD, axis, amt) for axis in range(3) for amt in sorted({threads, 2 * threads})]
  # the CPU's local memory: a reused tile staged in a scratch, the whole reduce or blocks of it (compiler.opt.stage)
  acts += [Opt(OptOps.STAGE, axis, amt) for amt in (0, 64, 128, 256, 512) for axis in range(2)]
  # a long reduce in blocks looped outside the outputs (a weight gradient's batch: its inputs stay cached)
  acts += [Opt(OptOps.BLOCK, 0, amt) for amt in (2, 4, 8, 16, 32)]
  if k.target.tensor_cores:  # (the seed's: every matmul choice, any tensor core, padded where needed)
    acts += [Opt(OptOps.TC, axis, (-1, 2)) for axis in range(9)]
  if k.target.has_local:  # work-groups: LOCAL axes, a reduce split across the work-group (GROUP, GROUPTOP), none
    acts += [Opt(OptOps.LOCAL, axis, amt) for amt in (2, 4, 8, 16, 32) for axis in range(6)]
    if reduces_span_outputs(k):  # (else each output would compute the reduce again: see there)
      acts += [Opt(OptOps.GROUP, axis, amt) for amt in (0, 4, 8, 16) for axis in range(3)]
      acts += [Opt(OptOps.GROUPTOP, axis, amt) for amt in (13, 16, 28, 29, 32, 49, 64, 256) for axis in range(3)]
    acts += [Opt(OptOps.NOLOCALS)]
  # tiles of sizes they do not divide, the remainder peeled (last: the indices of the others stay as they were)
  acts += [Opt(OptOps.PEEL, axis, amt) for amt in (4, 6, 8, 16, 32) for axis in range(7)]
  return acts


def get_kernel_actions(k: Kernel, include_0: bool = True) -> dict[int, Kernel]:
  """{action index: k with that action applied} for every action that applies and keeps the block small
  (index 0 is k itself when include_0)."""
  out: dict[int, Kernel] = {0: k} if include_0 else {}
  with untraced():
    for i, opt in enumerate(kernel_actions(k)):
      k2 = k.copy()
      try:
        k2.apply_opt(opt)
      except KernelOptError:
        continue
      if k2.upcast_size() > BEAM_UPCAST_MAX:
        continue
      out[i + 1] = k2
  return out


def max_candidates_env(default: int = 0) -> int:
  """BEAM_MAX_CANDIDATES: the candidates a round builds and times at most (0: all), else `default`."""
  env = os.environ.get("BEAM_MAX_CANDIDATES", "")
  return int(env) if env else default


def static_cost(k: Kernel) -> float:
  """A guess of a kernel's cost from its shape alone, to rank candidates a capped round can't all time: the memory
  accesses it executes (an access shares one load among the lanes of an upcast or unrolled axis it does not depend
  on, and loads up to a float vector along one it walks with stride 1; a store happens once per output), scaled up
  when the work-items are fewer than MIN_WORK_ITEMS."""
  sizes = [s if isinstance(s, int) else SYMBOLIC_SIZE for s in k.full_shape]
  kinds, vec = k.axis_types, max(1, k.target.vector_floats)
  stores = {st.src[0] for st in k.stores}
  cost = 0.0
  for a in k.accesses:
    strides = access_strides(k, a)
    n, lanes = 1, 1
    for i, r in enumerate(k.rngs):
      if a in stores and kinds[i] in _REDUCING:
        continue
      n *= sizes[i]
      if kinds[i] in (AxisType.UPCAST, AxisType.UNROLL):
        if r not in a.ranges:
          n //= sizes[i]
        elif strides[i] == 1:
          lanes = max(lanes, min(sizes[i], vec))
    cost += n / lanes
  items = math.prod(s for s, t in zip(sizes, kinds) if t in _PARALLEL)
  return cost * max(1.0, MIN_WORK_ITEMS / items)


def choose_candidates(cands: list[Kernel], cap: int) -> list[Kernel]:
  """At most `cap` (0: all) of a round's candidates. Those within STATIC_SLACK of the cheapest static_cost first,
  grouped by the kind of the opt that made each: every kind's cheapest, then every kind's second, and so on (kinds
  in the order of their cheapest), so each kind of action (LOCAL, GROUP, UPCAST, ...) is tried and the guess, blind
  to work-groups, only ranks candidates of one kind; then the others, cheapest first."""
  if cap <= 0 or len(cands) <= cap:
    return cands
  costs = {id(k): static_cost(k) for k in cands}
  ranked = sorted(cands, key=lambda k: costs[id(k)])
  near = [k for k in ranked if costs[id(k)] <= STATIC_SLACK * costs[id(ranked[0])]]
  by_kind: dict[Any, list[Kernel]] = {}
  for k in near:
    by_kind.setdefault(k.applied_opts[-1].op if k.applied_opts else None, []).append(k)
  first = [k for tier in itertools.zip_longest(*by_kind.values()) for k in tier if k is not None]
  return (first + ranked[len(near):])[:cap]


# ---- measuring candidates

Prepare = Callable[[UOp], Any]
Evaluate = Callable[[Any], float]
# (kernel, buffers) -> (prepare, evaluate), made only when the search runs (not on a cache hit); an evaluate with a
# close() method is closed when the search ends (e.g. to free the candidates' machine code)
EvaluatorFactory = Callable[[Kernel, Sequence[Any] | None], tuple[Prepare | None, Evaluate]]


@dataclass
class Candidate:
  kernel: Kernel
  time: float = math.inf
  error: str | None = None


def _worker_init() -> None:
  # a worker never traces: the parent owns the trace file
  recorder.RECORDER = None
  os.environ["VIZ"] = "0"


def _prepare_in_worker(prepare: Prepare, ast: UOp) -> tuple[bool, Any]:
  """(True, prepared) or (False, the error text): an exception may not survive the trip back (unpicklable)."""
  try:
    return True, prepare(ast)
  except Exception as e:
    return False, f"{type(e).__name__}: {e}"


_POOL: cf.ProcessPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_FORKED = False


def _pool(n: int) -> cf.ProcessPoolExecutor | None:
  """The process pool of a search (None if one can't be made). Spawned workers are slow to start, so their pool is
  kept for the whole run; forked ones live for one search (release_forked_pool)."""
  global _POOL, _POOL_SIZE, _POOL_FORKED
  if _POOL is not None and _POOL_SIZE >= n:
    return _POOL
  shutdown_pool()
  try:
    # fork by default: a spawned (or forkserver) worker re-imports the user's __main__, running an unguarded
    # script's top level again; a forked one only compiles what it is sent
    default = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    method = os.environ.get("BEAM_MP", default)
    ctx = multiprocessing.get_context(method)
    _POOL, _POOL_SIZE = cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_worker_init), n
    _POOL_FORKED = method == "fork"
  except (OSError, ValueError, NotImplementedError) as e:
    print(f"BEAM: no worker processes ({e}); compiling in this process", file=sys.stderr)
    _POOL = None
  return _POOL


def shutdown_pool(wait: bool = False) -> None:
  global _POOL
  if _POOL is not None:
    _POOL.shutdown(wait=wait, cancel_futures=True)
    _POOL = None


def release_forked_pool() -> None:
  """Ends a forked pool once its search is done. A forked worker holds a copy of every file descriptor the program
  had open when it was forked: an idle one kept for later searches would keep the write end of the program's pipes
  open, so a child process reading one (a driver told to stop by closing its stdin) would wait for an EOF that
  never comes. Waits for the workers to exit, so none outlives the search."""
  if _POOL is not None and _POOL_FORKED:
    shutdown_pool(wait=True)


def _sendable(prepare: Prepare) -> bool:
  """Whether prepare can go to a worker (a module-level function can, a lambda or closure can't)."""
  try:
    pickle.dumps(prepare)
  except Exception as e:
    print(f"BEAM: can't send {prepare!r} to worker processes ({e}); compiling in this process", file=sys.stderr)
    return False
  return True


def _default_workers() -> int:
  env = os.environ.get("BEAM_WORKERS")
  if env is not None and env != "":
    return int(env)
  try:
    return len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    return os.cpu_count() or 1


def _prepare_all(cands: list[Candidate], prepare: Prepare | None, workers: int, progress: _Progress) -> list[Any]:
  """The prepared artifact of each candidate (None where preparing failed, the error kept on the candidate)."""
  asts = [c.kernel.get_optimized_ast() for c in cands]
  if prepare is None:
    return asts
  out: list[Any] = [None] * len(cands)
  pending = list(range(len(cands)))
  pool = _pool(workers) if workers > 1 and len(cands) > 1 and _sendable(prepare) else None
  if pool is not None:
    try:
      futs = {pool.submit(_prepare_in_worker, prepare, asts[i]): i for i in pending}
      for fut in cf.as_completed(futs):
        i = futs[fut]
        ok, res = fut.result()
        if ok:
          out[i] = res
        else:  # a compile error of this candidate
          cands[i].error = res
        pending.remove(i)
        progress.step_compile()
    except (BrokenProcessPool, OSError, TypeError, AttributeError) as e:
      # a crashed worker or an unpicklable prepare: do the rest here
      print(f"\nBEAM: worker processes failed ({type(e).__name__}: {e}); compiling in this process", file=sys.stderr)
      shutdown_pool()
  with untraced():
    for i in list(pending):
      try:
        out[i] = prepare(asts[i])
      except Exception as e:
        cands[i].error = f"{type(e).__name__}: {e}"
      progress.step_compile()
  return out


def _time_all(cands: list[Candidate], prepared: list[Any], evaluate: Evaluate, progress: _Progress) -> None:
  with untraced():
    for c, p in zip(cands, prepared):
      if c.error is None:
        try:
          t = float(evaluate(p))
          if not t >= 0:
            raise ValueError(f"evaluate returned {t}")
          c.time = t
        except Exception as e:
          c.error = f"{type(e).__name__}: {e}"
      progress.step_time()


def _record_round(rnd: int, cands: list[Candidate], chosen: set[int], log: list[dict[str, Any]] | None) -> None:
  if recorder.RECORDER is None and log is None:
    return
  records = []
  for i, c in enumerate(cands):
    fields: dict[str, Any] = {"round": rnd, "opts": [o.to_json() for o in c.kernel.applied_opts], "chosen": i in chosen}
    if c.error is not None:
      fields["error"] = c.error[:2000]
    else:
      fields["time"] = c.time
    records.append(fields)
  record_beam(records, log)


class _Progress:
  """A one-line progress bar on stderr (redrawn on a terminal, one line per round otherwise): candidates compiled
  and timed this round, the best time so far, the time since the search began."""

  def __init__(self, enabled: bool, title: str):
    self.enabled, self.title, self.tty = enabled, title, enabled and sys.stderr.isatty()
    self.compiled = self.timed = self.total = 0
    self.rnd, self.best, self.t0 = 0, math.inf, time.perf_counter()

  def start(self, rnd: int, total: int, best: float, compiling: bool) -> None:
    self.rnd, self.total, self.best = rnd, total, best
    self.compiled, self.timed = (0 if compiling else total), 0
    self._draw()

  def step_compile(self) -> None:
    self.compiled += 1
    self._draw()

  def step_time(self) -> None:
    self.timed += 1
    self._draw()

  def end_round(self, best: float) -> None:
    self.best = best
    self._draw(final=True)

  def _draw(self, final: bool = False) -> None:
    if not self.enabled or not (self.tty or final):
      return
    width = 24
    fill = int(width * (self.compiled + self.timed) / max(1, 2 * self.total))
    best = f"{self.best * 1e6:9.1f} us" if math.isfinite(self.best) else "        - us"
    bar = "#" * fill + "." * (width - fill)
    line = (f"BEAM {self.title}: round {self.rnd:2d} [{bar}] compiled {self.compiled:3d}/{self.total:<3d} timed "
            f"{self.timed:3d}/{self.total:<3d} best {best}  {time.perf_counter() - self.t0:6.2f} s")
    print(("\r" if self.tty else "") + line, end="\n" if final else "", file=sys.stderr, flush=True)


# ---- the search

def beam_search(k: Kernel, bufs: Sequence[Any] | None = None, amt: int = 2, *, evaluate: Evaluate | None = None,
                prepare: Prepare | None = None, evaluator: EvaluatorFactory | None = None, workers: int | None = None,
                use_cache: bool | None = None, progress: bool | None = None, max_rounds: int = MAX_ROUNDS,
                confirm: bool = True, log: list[dict[str, Any]] | None = None, max_candidates: int | None = None
                ) -> Kernel:
  """Return k with the opts of the fastest kernel BEAM found (applied to k itself, so they are traced).

  `evaluate(x) -> seconds` times a candidate where x is `prepare(ast)` (run in worker processes when workers > 1;
  a module-level function so it can be sent there) or the optimized AST when prepare is None. Without evaluate,
  `evaluator(k, bufs)` makes (prepare, evaluate) once the disk cache missed (compiler.engine.timed_beam_search passes
  the runtime's: candidates compiled and run on copies of `bufs`, or on random buffers).

  confirm=False: BEAM's winner unconfirmed and uncached, for a caller that confirms it in its schedule's sequence
  and caches the outcome (compiler.engine.confirm_schedule); a cache hit then gives BEAM's own winner. `log`: the
  `beam` records go there instead of into the trace (record_beam). `max_candidates`: a round times at most this many
  candidates, chosen by choose_candidates (None: max_candidates_env(); 0: all).
  """
  if evaluate is None and evaluator is None:
    raise ValueError("beam_search needs evaluate= or evaluator= (compiler.engine.timed_beam_search times candidates "
                     "for real)")
  if amt < 1:
    raise ValueError(f"BEAM width must be at least 1, got {amt}")
  if k.applied_opts:
    raise ValueError(f"beam_search starts from an unoptimized kernel, this one has {k.applied_opts}")
  use_cache = cache_enabled() if use_cache is None else use_cache
  cap = max_candidates_env() if max_candidates is None else max_candidates
  key = cache_key(k.ast, k.target, amt, cap)
  if use_cache and (hit := cache_get(key)) is not None:
    opts = hit.opts if confirm else hit.beam_opts
    if opts_apply(k, opts):
      return k.apply_opts(opts)
  save_as = key if use_cache and confirm else None

  if evaluate is None:
    assert evaluator is not None
    with untraced():  # compiling the reference kernel is not part of this kernel's story
      prepare, evaluate = evaluator(k, bufs)
    try:
      return _search(k, amt, evaluate, prepare, workers, progress, (max_rounds, cap), save_as, confirm, log)
    finally:
      close = getattr(evaluate, "close", None)
      if close is not None:
        close()
  return _search(k, amt, evaluate, prepare, workers, progress, (max_rounds, cap), save_as, confirm, log)


def cache_enabled() -> bool:
  """Whether BEAM reads and writes its disk cache: unless IGNORE_BEAM_CACHE is set."""
  return os.environ.get("IGNORE_BEAM_CACHE", "0") in ("", "0")


def opts_apply(k: Kernel, opts: list[Opt]) -> bool:
  """Whether cached opts still apply to k (an entry written by an older optimizer may not: search again)."""
  try:
    with untraced():
      k.copy().apply_opts(opts)
  except KernelOptError:
    return False
  return True


def _search(k: Kernel, amt: int, evaluate: Evaluate, prepare: Prepare | None, workers: int | None,
            progress: bool | None, bounds: tuple[int, int], save_as: str | None, confirm: bool,
            log: list[dict[str, Any]] | None) -> Kernel:
  """beam_search's rounds; the confirmed result goes into the disk cache under the key save_as (unless None)."""
  workers = _default_workers() if workers is None else workers
  try:
    return _rounds(k, amt, evaluate, prepare, workers, progress, bounds, save_as, confirm, log)
  finally:
    release_forked_pool()


def _rounds(k: Kernel, amt: int, evaluate: Evaluate, prepare: Prepare | None, workers: int, progress: bool | None,
            bounds: tuple[int, int], save_as: str | None, confirm: bool, log: list[dict[str, Any]] | None) -> Kernel:
  """The search's rounds from the kernel and its hand-coded version, then the winner confirmed against the latter;
  `bounds`: (rounds at most, candidates a round at most: 0 all)."""
  max_rounds, max_candidates = bounds
  bar = _Progress(progress if progress is not None else True, f"{amt} {k.name}")

  def measure(rnd: int, cands: list[Candidate], best: float) -> None:
    bar.start(rnd, len(cands), best, compiling=prepare is not None)
    prepared = _prepare_all(cands, prepare, workers, bar)
    if (prefetch := getattr(evaluate, "prefetch", None)) is not None:  # (builds them all before any is timed)
      prefetch([p for c, p in zip(cands, prepared) if c.error is None])
    _time_all(cands, prepared, evaluate, bar)

  # round 0: the kernel as it is and its hand-coded version, so BEAM never ends slower than the heuristics
  # (the hand-coded one first: the plain kernel, often much slower, then gets cut off after one run)
  with untraced():
    seeds = [Candidate(hand_coded_optimizations(k.copy())), Candidate(k.copy())]
  if seeds[1].kernel.ast is seeds[0].kernel.ast:
    seeds = seeds[:1]
  measure(0, seeds, math.inf)
  beam = sorted((c for c in seeds if c.error is None), key=lambda c: c.time)[:amt]
  _record_round(0, seeds, {i for i, c in enumerate(seeds) if c in beam}, log)
  if not beam:
    errs = "; ".join(c.error or "" for c in seeds)
    raise RuntimeError(f"BEAM: the kernel {k.name} itself failed to compile or run: {errs}")
  bar.end_round(beam[0].time)
  seen: set[tuple] = {_ident(c.kernel) for c in seeds}

  last = 0
  for rnd in range(1, max_rounds + 1):
    cands: list[Candidate] = []
    for b in beam:
      for k2 in get_kernel_actions(b.kernel, include_0=False).values():
        if (ident := _ident(k2)) not in seen:
          seen.add(ident)
          cands.append(Candidate(k2))
    if not cands:
      break
    # (one the cap leaves out is not offered again: each round's cost stays the cap)
    cands = [Candidate(k2) for k2 in choose_candidates([c.kernel for c in cands], max_candidates)]
    last = rnd
    measure(rnd, cands, beam[0].time)
    ranked = sorted((c for c in cands if c.error is None), key=lambda c: c.time)
    improved = bool(ranked) and ranked[0].time < beam[0].time
    if improved:
      beam = ranked[:amt]
    _record_round(rnd, cands, {i for i, c in enumerate(cands) if improved and c in beam}, log)
    bar.end_round(beam[0].time)
    if not improved:
      break

  if not confirm:
    return k.apply_opts(beam[0].kernel.applied_opts)
  best = _confirm(seeds[0], beam[0], evaluate, lambda cs: _prepare_all(cs, prepare, workers, _Progress(False, "")),
                  last + 1, log)
  if save_as is not None:
    cache_put(save_as, best.kernel.applied_opts, best.time, k.name, "pair", beam[0].kernel.applied_opts)
  return k.apply_opts(best.kernel.applied_opts)


def _confirm(heuristic: Candidate, best: Candidate, evaluate: Evaluate,
             prepare_all: Callable[[list[Candidate]], list[Any]], rnd: int,
             log: list[dict[str, Any]] | None) -> Candidate:
  """BEAM's winner only if it beats the hand-coded kernel again, timed in turns with it (CONFIRM_ROUNDS each,
  medians compared, by CONFIRM_MARGIN): a search on a noisy machine must not end slower than the heuristics. The
  outcome is traced as round `rnd` (confirm_records)."""
  if best is heuristic or heuristic.error is not None:
    return best
  pair = [Candidate(heuristic.kernel), Candidate(best.kernel)]
  prepared = prepare_all(pair)
  if any(c.error is not None for c in pair):
    return heuristic
  times: list[list[float]] = [[], []]
  with untraced():
    try:
      for _ in range(CONFIRM_ROUNDS):
        for i in (0, 1):
          times[i].append(float(evaluate(prepared[i])))
    except Exception:  # re-timing failed: the heuristics are the safe answer
      return heuristic
  record_beam(confirm_records(rnd, heuristic.kernel.applied_opts, times[0], best.kernel.applied_opts, times[1],
                              "pair"), log)
  t_heur, t_best = median_time(times[0]), median_time(times[1])
  if beats(t_best, t_heur):
    return Candidate(best.kernel, t_best)
  return Candidate(heuristic.kernel, t_heur)


def _ident(k: Kernel) -> tuple:
  """Kernels that only differ in axis ids (two SWAPs, opts in another order) are one candidate: time it once."""
  canon = {r: r.replace(arg=(i, r.arg[1])) for i, r in enumerate(k.rngs + k.remainders)}  # (PEEL's remainders)
  return (k.ast.replace(arg=None).substitute(canon), k.dont_use_locals)
