"""The threads a compiled kernel's split run goes to: native workers that spin a while after each job, and chunks
claimed from a shared counter, so that a run never waits for a thread that has not started.

Why not concurrent.futures: a submit woke a sleeping thread (a futex wake and an interrupt to an idle core, 40-70 us
in a VM) and `result()` put the caller to sleep until the worker woke it in turn: conv2d's 0.28 ms kernel, split in
two 0.14 ms halves, took 0.21 ms (Zen 5, 2 cores). Here a worker still spinning from the last job starts within a
microsecond, the caller spins for the end of the run, and no Python runs in a worker between jobs.

The protocol, over one area of int64 words the threads share (every step a native function, in LLVM IR below):
- the caller (holding the pool's lock) copies the job's words to the area: its entry (a trampoline per kernel
  signature, `entry_for`), the kernel's address, the loop's extent n, the chunk count t, how many workers may join,
  and the kernel's leading arguments; then publishes generation g: the claim word (g << 32 | next chunk), the join
  word (g << 32 | workers joined) and last the gen word the workers spin on;
- a worker that sees a new gen joins it (while fewer than the job allows did) and runs its entry, as the caller does:
  claim chunk c by compare-and-swap of the claim word (which fails once the generation changed or the job closed),
  run the kernel on [n*c//t, n*(c+1)//t), count it done; until no chunk is left;
- the caller, out of chunks, waits until all t are done and closes the job (claim index all ones), so a worker that
  comes late claims nothing, even while the next job's words are being written.
So the caller runs every chunk no worker took: a run is slower than on one thread by no more than the copy and the
publishing (unless a worker that took a chunk loses its core to another process). A worker spins (pause;
sched_yield every YIELD_EVERY_S, so another process's thread that wants the core gets it) for SPIN_S after its last
job, then parks on a condition, which the caller notifies after publishing. The spin counts are calibrated on this
machine when the pool starts (a pause takes 10-150 cycles by CPU)."""
from __future__ import annotations

import ctypes
import os
import statistics
import threading
import time
from typing import Any, Sequence

import llvmlite.binding as llvm

from compiler.runtime import diskcache
from compiler.runtime.llvm import OPT_LEVEL, get_jit

# a worker spins this long after its last job before it parks: the gaps between a program's kernels (its Python:
# scheduling, cache lookups) are 0.01-1 ms, and a parked worker took 40-70 us to wake (measured on Zen 5 in a VM)
SPIN_S = 2e-3
YIELD_EVERY_S = 1e-5  # a spinning thread lets another runnable thread have its core this often
# a kernel is worth trying split only with at least this many hand-offs' worth of CPU time (the hand-off: publishing
# a job and the end of the run, measured when the pool starts); below, one thread (compiled.py decides from runs)
SPLIT_MIN_HANDOFFS = 8

GEN, CLAIM, JOIN, DONE, JOB = 0, 8, 16, 24, 32  # word offsets (the counters on cache lines of their own)
ENTRY, FN, EXTENT, CHUNKS, JOINERS, ARGS = range(6)  # a job's words, from JOB
AREA_WORDS = 2048
MAX_JOB_WORDS = AREA_WORDS - JOB - ARGS
_HI, _LO = -(1 << 32), (1 << 32) - 1
_X86 = llvm.get_process_triple().startswith(("x86_64", "i386", "i686"))


def _area_word(i: int) -> str:
  """IR for the address of the shared area's word i."""
  return f"getelementptr inbounds i64, ptr %area, i64 {i}"


# spin: pause (x86), and every `mask + 1` spins a call of the yield function at YIELD (when there is one)
_PAUSE = ("declare void @llvm.x86.sse2.pause()\n", "call void @llvm.x86.sse2.pause()") if _X86 else ("", "")
YIELD = GEN + 1  # the area's word holding sched_yield's address (0: none), on the line the spinners read


def _spin(label: str, back: str, out: str) -> str:
  """The spin step at `label`: count %i, leave for `out` after %spins, else pause (and now and then yield), `back`."""
  return f"""{label}:
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %spins
  br i1 %more, label %{label}.p, label %{out}
{label}.p:
  {_PAUSE[1]}
  %m = and i64 %i1, %mask
  %y0 = icmp eq i64 %m, 0
  %yf = load ptr, ptr %ypp, align 8
  %hy = icmp ne ptr %yf, null
  %y = and i1 %y0, %hy
  br i1 %y, label %{label}.y, label %{back}
{label}.y:
  %yr = call i32 %yf()
  br label %{back}"""


def _take(name: str, word: str, limit: str, taken: str, none: str) -> str:
  """IR blocks `name`, `name.cas`: take one of the count of generation %hi at `word` (its low 32 bits; the high ones
  are the generation) while it is below the value at `limit`, by compare-and-swap: on to `taken` (%name.c: the count
  taken), or to `none` when the generation changed or none is left."""
  return f"""{name}:
  %{name}.w = load atomic i64, ptr {word} acquire, align 8
  %{name}.t = load atomic i64, ptr {limit} monotonic, align 8
  %{name}.g = and i64 %{name}.w, {_HI}
  %{name}.c = and i64 %{name}.w, {_LO}
  %{name}.same = icmp eq i64 %{name}.g, %hi
  %{name}.left = icmp ult i64 %{name}.c, %{name}.t
  %{name}.go = and i1 %{name}.same, %{name}.left
  br i1 %{name}.go, label %{name}.cas, label %{none}
{name}.cas:
  %{name}.n = add i64 %{name}.w, 1
  %{name}.r = cmpxchg ptr {word}, i64 %{name}.w, i64 %{name}.n acq_rel acquire
  %{name}.won = extractvalue {{ i64, i1 }} %{name}.r, 1
  br i1 %{name}.won, label %{taken}, label %{name}"""


# tv_worker(area, seen, spins, mask) -> the last generation seen: runs the jobs published after `seen`, returns
# once `spins` spins passed without one
_WORKER = f"""{_PAUSE[0]}
define i64 @tv_worker(ptr %area, i64 %seen0, i64 %spins, i64 %mask) {{
entry:
  %ypp = {_area_word(YIELD)}
  %jp = {_area_word(JOIN)}
  %capp = {_area_word(JOB + JOINERS)}
  %ep = {_area_word(JOB + ENTRY)}
  br label %loop
loop:
  %seen = phi i64 [%seen0, %entry], [%seen, %spin.p], [%seen, %spin.y], [%g, %join], [%g, %run]
  %i = phi i64 [0, %entry], [%i1, %spin.p], [%i1, %spin.y], [0, %join], [0, %run]
  %g = load atomic i64, ptr %area acquire, align 8
  %new = icmp ne i64 %g, %seen
  br i1 %new, label %enter, label %spin
enter:
  %hi = shl i64 %g, 32
  br label %join
{_take("join", "%jp", "%capp", "run", "loop")}
run:
  %e = load atomic ptr, ptr %ep monotonic, align 8
  call void %e(ptr %area, i64 %g)
  br label %loop
{_spin("spin", "loop", "out")}
out:
  ret i64 %seen
}}
"""

# tv_post(area, job, words, g): copy the job's words in, reset the counters, publish generation g
_POST = f"""
define void @tv_post(ptr %area, ptr %job, i64 %words, i64 %g) {{
entry:
  %dst = {_area_word(JOB)}
  br label %copy
copy:
  %k = phi i64 [0, %entry], [%k1, %body]
  %more = icmp ult i64 %k, %words
  br i1 %more, label %body, label %publish
body:
  %sp = getelementptr inbounds i64, ptr %job, i64 %k
  %v = load i64, ptr %sp, align 8
  %dp = getelementptr inbounds i64, ptr %dst, i64 %k
  store atomic i64 %v, ptr %dp monotonic, align 8
  %k1 = add i64 %k, 1
  br label %copy
publish:
  %hi = shl i64 %g, 32
  %donep = {_area_word(DONE)}
  store atomic i64 0, ptr %donep monotonic, align 8
  %jp = {_area_word(JOIN)}
  store atomic i64 %hi, ptr %jp monotonic, align 8
  %cp = {_area_word(CLAIM)}
  store atomic i64 %hi, ptr %cp release, align 8
  store atomic i64 %g, ptr %area seq_cst, align 8
  ret void
}}
"""

# tv_finish(area, g, spins, mask, work) -> 1 once the job is done (and closed), 0 after `spins` spins without;
# work: run the job's chunks first (the caller's share)
_FINISH = f"""{_PAUSE[0]}
define i64 @tv_finish(ptr %area, i64 %g, i64 %spins, i64 %mask, i64 %work) {{
entry:
  %ypp = {_area_word(YIELD)}
  %donep = {_area_word(DONE)}
  %tp = {_area_word(JOB + CHUNKS)}
  %w = icmp ne i64 %work, 0
  br i1 %w, label %run, label %start
run:
  %ep = {_area_word(JOB + ENTRY)}
  %e = load atomic ptr, ptr %ep monotonic, align 8
  call void %e(ptr %area, i64 %g)
  br label %start
start:
  %t = load atomic i64, ptr %tp monotonic, align 8
  br label %loop
loop:
  %i = phi i64 [0, %start], [%i1, %spin.p], [%i1, %spin.y]
  %d = load atomic i64, ptr %donep acquire, align 8
  %ok = icmp eq i64 %d, %t
  br i1 %ok, label %close, label %spin
close:
  %hi = shl i64 %g, 32
  %closed = or i64 %hi, {_LO}
  %cp = {_area_word(CLAIM)}
  store atomic i64 %closed, ptr %cp release, align 8
  ret i64 1
{_spin("spin", "loop", "out")}
out:
  ret i64 0
}}
"""

# a no-op kernel (no buffers, no variables, int64 loop): what the pool's hand-off is measured with
_NOOP = "define void @tv_noop(i64 %s, i64 %e) {\n  ret void\n}\n"


def _entry_ir(ptrs: int, nvars: int, wide: bool) -> str:
  """The trampoline of kernels taking `ptrs` pointers, `nvars` int32 variables and a (start, end) of int64 (wide)
  or int32: claims chunks of the job in the area and runs the kernel on each (see the module doc)."""
  core = "i64" if wide else "i32"
  loads, params = [], []
  for j in range(ptrs):
    loads.append(f"  %a{j}.p = {_area_word(JOB + ARGS + j)}\n  %a{j} = load ptr, ptr %a{j}.p, align 8")
    params.append(f"ptr %a{j}")
  for j in range(nvars):
    loads.append(f"  %v{j}.p = {_area_word(JOB + ARGS + ptrs + j)}\n  %v{j}.w = load i64, ptr %v{j}.p, align 8\n"
                 f"  %v{j} = trunc i64 %v{j}.w to i32")
    params.append(f"i32 %v{j}")
  bounds = "" if wide else "  %s.c = trunc i64 %s to i32\n  %e.c = trunc i64 %e to i32\n"
  s, e = ("%s", "%e") if wide else ("%s.c", "%e.c")
  body = "\n".join(loads)
  return f"""
define void @tv_entry(ptr %area, i64 %g) {{
entry:
  %cp = {_area_word(CLAIM)}
  %donep = {_area_word(DONE)}
  %tp = {_area_word(JOB + CHUNKS)}
  %hi = shl i64 %g, 32
  br label %claim
{_take("claim", "%cp", "%tp", "work", "out")}
work:
  %c = phi i64 [%claim.c, %claim.cas]
  %t = phi i64 [%claim.t, %claim.cas]
  %fp = {_area_word(JOB + FN)}
  %fn = load ptr, ptr %fp, align 8
  %np = {_area_word(JOB + EXTENT)}
  %n = load i64, ptr %np, align 8
{body}
  %m0 = mul i64 %n, %c
  %s = udiv i64 %m0, %t
  %c1 = add i64 %c, 1
  %m1 = mul i64 %n, %c1
  %e = udiv i64 %m1, %t
{bounds}  call void %fn({", ".join([*params, f"{core} {s}", f"{core} {e}"])})
  %old = atomicrmw add ptr %donep, i64 1 release
  br label %claim
out:
  ret void
}}
"""


def _compiled(ir: str, fname: str) -> int:
  """The address of `fname` of `ir` in the process's JIT: its object code from the compile cache on disk where a
  process made it before, else compiled (and stored there). A process whose kernels split makes the pool's four
  functions and a trampoline per kernel signature, ~12 ms of LLVM each (MNIST step: 13, 0.17 CPU s of its warm first
  call at THREADS=2); a link of cached object code takes ~0.3 ms."""
  jit = get_jit()
  if not diskcache.enabled():
    return jit.compile(ir, fname, want_text=False)[0].address
  # (the code depends on the IR and the target machine: its CPU, features and opt level; the key adds the versions)
  key = diskcache.full_key(f"threadpool\n{jit.triple}\n{jit.cpu} {jit.features}\nopt={OPT_LEVEL}\n{ir}".encode())
  symbol = f"{fname}_p{key[:32]}"  # (a name no other code has: the entry's)
  got = diskcache.get(key)
  if type(got) is tuple and len(got) == 2 and got[0] == symbol and type(got[1]) is bytes:
    return jit.link_cached(got[1], symbol)
  if got is not None:  # (a sound file holding something else: as a corrupt one)
    diskcache.ignore(key, "not a thread pool function")
  jf, obj = jit.compile_object(ir, fname, symbol)
  if obj is not None:
    diskcache.put(key, (symbol, obj))
  return jf.address


_I64, _PTR = ctypes.c_int64, ctypes.c_void_p
_ENTRIES: dict[tuple[int, int, bool], int] = {}
_ENTRIES_LOCK = threading.Lock()


def entry_for(ptrs: int, nvars: int, wide: bool) -> int:
  """The address of the trampoline for a kernel signature (compiled once per signature)."""
  key = (ptrs, nvars, wide)
  addr = _ENTRIES.get(key)
  if addr is None:
    with _ENTRIES_LOCK:
      addr = _ENTRIES.get(key) or _compiled(_entry_ir(ptrs, nvars, wide), "tv_entry")
      _ENTRIES[key] = addr
  return addr


def job_words(entry: int, fn: int, extent: int, chunks: int, joiners: int, args: Sequence[int]) -> ctypes.Array:
  """A job's words (what KernelPool.run copies to the area): the kernel at `fn` over [0, extent) in `chunks` chunks,
  `joiners` workers at most, with leading arguments `args` (addresses and variable values)."""
  words = [entry, fn, extent, chunks, joiners, *args]
  if len(words) > MAX_JOB_WORDS + ARGS:
    raise ValueError(f"a job of {len(args)} arguments does not fit the pool's area")
  return (_I64 * len(words))(*words)


class KernelPool:
  """`workers` native threads (the caller is one more) that run jobs' chunks; see the module doc."""

  def __init__(self, workers: int):
    self.workers = workers
    raw = (_I64 * (AREA_WORDS + 8))()
    self._raw = raw  # (kept alive: the area is a 64-byte aligned window of it)
    base = (ctypes.addressof(raw) + 63) // 64 * 64
    self.area = (_I64 * AREA_WORDS).from_address(base)
    self.addr = base
    self._worker = ctypes.CFUNCTYPE(_I64, _PTR, _I64, _I64, _I64)(_compiled(_WORKER, "tv_worker"))
    self._post = ctypes.CFUNCTYPE(None, _PTR, _PTR, _I64, _I64)(_compiled(_POST, "tv_post"))
    self._finish = ctypes.CFUNCTYPE(_I64, _PTR, _I64, _I64, _I64, _I64)(_compiled(_FINISH, "tv_finish"))
    per_s = self._calibrate()
    self.spins = max(1, int(SPIN_S * per_s))
    self.mask = (1 << max(0, int(YIELD_EVERY_S * per_s).bit_length() - 1)) - 1
    self.area[YIELD] = _sched_yield()
    self._gen = 0
    self._lock = threading.Lock()
    self._cond = threading.Condition()
    self._parked = 0  # workers parked on _cond
    self._wakes = 0  # wake() calls: a parked worker spins again on a new one, as on a new job
    self.parks = 0  # times a worker parked
    self.woke = False  # whether the last job had to wake a parked worker (its run measured the wake-up too)
    self._threads = [threading.Thread(target=self._work, name=f"kernel-worker-{i}", daemon=True)
                     for i in range(workers)]
    for t in self._threads:
      t.start()
    self.handoff_s = self._measure_handoff()

  def _calibrate(self) -> float:
    """Spins per second of the native spin loop on this machine (no yields: the area's yield word is still 0)."""
    n, best = 1 << 14, float("inf")
    for _ in range(5):
      t0 = time.perf_counter()
      self._worker(self.addr, 0, n, 0)  # gen stays 0: spins n times and returns
      best = min(best, time.perf_counter() - t0)
    return n / max(best, 1e-9)

  def _measure_handoff(self) -> float:
    """Seconds a run of a job that does nothing takes (publishing, the workers' claims, the end): the median of a
    few, the workers spinning (as they are between a program's kernels)."""
    noop = job_words(entry_for(0, 0, True), _compiled(_NOOP, "tv_noop"), self.workers + 1, self.workers + 1,
                     self.workers, [])
    times = []
    for _ in range(32):
      t0 = time.perf_counter()
      self.run(noop)
      times.append(time.perf_counter() - t0)
    return statistics.median(times[8:])

  @property
  def split_min_s(self) -> float:
    """The least CPU time a run should take before splitting it is worth trying."""
    return SPLIT_MIN_HANDOFFS * self.handoff_s

  def _work(self) -> None:
    area, seen = self.area, self.area[GEN]
    while True:
      seen = self._worker(self.addr, seen, self.spins, self.mask)
      with self._cond:  # (the GIL orders this check against run()'s publish-then-read of _parked)
        self._parked += 1
        self.parks += 1
        self._cond.notify_all()  # (for whoever waits to see it parked: a test)
        wakes = self._wakes
        while area[GEN] == seen and self._wakes == wakes:
          self._cond.wait()
        self._parked -= 1

  def wake(self) -> None:
    """Wake parked workers now (each spins SPIN_S for a job): a split run expected soon finds them started."""
    if self._parked:
      with self._cond:
        self._wakes += 1
        self._cond.notify_all()

  def run(self, job: ctypes.Array) -> bool:
    """Run a job (job_words) with the workers; False, doing nothing, while another thread's job runs."""
    if not self._lock.acquire(blocking=False):
      return False
    try:
      self._gen = g = self._gen % _LO + 1
      self._post(self.addr, ctypes.addressof(job), len(job), g)
      self.woke = bool(self._parked)
      self.wake()
      # back in Python now and then, so that a signal can interrupt a wait for a worker that lost its core; the
      # job is still finished first (a worker's chunk must not count towards the next job)
      try:
        work = 1
        while not self._finish(self.addr, g, self.spins, self.mask, work):
          work = 0
      except BaseException:
        while not self._finish(self.addr, g, self.spins, self.mask, 0):
          pass
        raise
    finally:
      self._lock.release()
    return True


def _sched_yield() -> int:
  """The address of the C library's sched_yield, 0 where there is none."""
  try:
    return ctypes.cast(ctypes.CDLL(None).sched_yield, _PTR).value or 0
  except (AttributeError, OSError):
    return 0


_POOLS: dict[int, KernelPool] = {}  # by worker count (one in a program; tests change THREADS)
_POOLS_LOCK = threading.Lock()


def get_pool(workers: int) -> KernelPool:
  """The process's pool of `workers` threads (made on first use; a fork's child makes its own)."""
  pool = _POOLS.get(workers)
  if pool is None:
    with _POOLS_LOCK:
      pool = _POOLS.get(workers)
      if pool is None:
        pool = _POOLS[workers] = KernelPool(workers)
  return pool


def _forget_pools() -> None:
  global _POOLS_LOCK
  _POOLS.clear()  # the child has none of the parent's threads
  _POOLS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
  os.register_at_fork(after_in_child=_forget_pools)


def run_serial(fxn: Any, args: Sequence[Any], chunks: Sequence[tuple[int, int]]) -> None:
  """The chunks one after the other on the calling thread."""
  for s, e in chunks:
    fxn(*args, s, e)
