"""Compile-ahead (issue 29): an untraced schedule's kernels are optimized and code-generated in run order ahead of
their runs, their LLVM compiles on one worker thread (compiler.realize._Ahead). The same kernels compiled in the same
order and run in the same order as compiling each at its turn (COMPILE_AHEAD=0), with the same outputs bit for bit; a
compile's error (on the worker or in the Python part) raised at its kernel's turn, after the same runs; the worker
gone after every schedule (and the switch interval it lowers put back); no kernel made more than COMPILE_AHEAD ahead
of the one running; a traced run compiled ahead too, with the same records in each context."""
from __future__ import annotations

import sys
import threading

import pytest
from support.tensor_values import conv_grads_and_softmax

from compiler import Tensor, engine, realize
from compiler.runtime import compiled
from compiler.runtime.compiled import CompiledKernel
from compiler.runtime.llvm import LLVMCompileError, LLVMJit, get_jit
from vztrace.reader import TraceReader

WORKER = "tinyviz-compile"


def _program() -> list[Tensor]:
  """A conv's forward and backward and a matmul's softmax: a dozen kernels in one schedule."""
  return conv_grads_and_softmax(seed=1, out_channels=5)


class _Spy:
  """What happened, in order: ("compile", kernel function, thread name) for each LLVM compile, ("run", kernel) for
  each kernel run. `fail_at`: the LLVM compile (by number, from 0, or by kernel function) that raises an
  LLVMCompileError."""

  def __init__(self, monkeypatch, fail_at: int | str | None = None) -> None:
    self.events: list[tuple[str, ...]] = []
    spy = self
    for name in ("compile", "compile_object", "compile_traced"):
      inner = getattr(LLVMJit, name)

      def compile_spy(jit, ir, fname, *args, _inner=inner, **kw):
        spy.events.append(("compile", fname, threading.current_thread().name))
        if fail_at in (len(spy.of("compile")) - 1, fname):
          raise LLVMCompileError(f"LLVM rejected kernel {fname!r}: made to fail")
        return _inner(jit, ir, fname, *args, **kw)
      monkeypatch.setattr(LLVMJit, name, compile_spy)
    call = CompiledKernel.__call__

    def call_spy(ck, bufs, *args, **kw):
      spy.events.append(("run", ck.name))
      return call(ck, bufs, *args, **kw)
    monkeypatch.setattr(CompiledKernel, "__call__", call_spy)

  def of(self, kind: str) -> list[tuple[str, ...]]:
    return [e[1:] for e in self.events if e[0] == kind]


def _setup(monkeypatch, cache: str, depth: int, off: bool = False) -> None:
  monkeypatch.undo()
  monkeypatch.setenv("BACKEND", "llvm")
  monkeypatch.setenv("TINYVIZ_COMPILE_CACHE", cache)
  if off:  # (compile_runner's other path: no object code kept)
    monkeypatch.setenv("CACHELEVEL", "0")
  monkeypatch.setenv("COMPILE_AHEAD", str(depth))
  monkeypatch.setattr(realize, "_runners", {})  # (every kernel compiled anew)


def _realize(spy: _Spy) -> list[bytes]:
  outs = _program()
  Tensor.realize(*outs)
  return [t.numpy().tobytes() for t in outs]


SWITCH = sys.getswitchinterval()


def _no_worker() -> bool:
  """No compile worker left, and the interpreter's switch interval (lowered while one lives) put back."""
  return not any(t.name.startswith(WORKER) for t in threading.enumerate()) and sys.getswitchinterval() == SWITCH


@pytest.mark.parametrize("off", [False, True], ids=["disk_cache", "no_disk_cache"])
def test_compiled_ahead_same_kernels_order_and_outputs(monkeypatch, tmp_path, off):
  _setup(monkeypatch, str(tmp_path / "seq"), 0, off)
  seq = _Spy(monkeypatch)
  want = _realize(seq)
  _setup(monkeypatch, str(tmp_path / "ahead"), 8, off)
  ahead = _Spy(monkeypatch)
  got = _realize(ahead)
  assert len(seq.of("run")) >= 6 and {t for _, t in seq.of("compile")} == {"MainThread"}
  assert got == want
  assert ahead.of("run") == seq.of("run")
  # (with the disk cache, this thread may take a queued compile from the worker: which one starts first may differ)
  order = (lambda fs: fs) if off else sorted
  assert order([f for f, _ in ahead.of("compile")]) == order([f for f, _ in seq.of("compile")])
  threads = {t for _, t in ahead.of("compile")}
  assert f"{WORKER}_0" in threads and threads <= {f"{WORKER}_0", "MainThread"}, "the LLVM compiles not on the worker"
  assert not off or threads == {f"{WORKER}_0"}, "a compile() job (not a shared one) run off the worker"
  assert _no_worker()


def _hold_worker(monkeypatch, spy: _Spy, made: int) -> threading.Event:
  """The worker's first compile waits until this thread has made `made` kernels' codegen (noted in spy.events as
  ("codegen",)): kernels are made ahead as far as the worker lags, so a held worker shows how far the bound lets
  them. The event is set at that codegen (30 s at most, so that a code that never gets so far fails, not hangs)."""
  reached = threading.Event()
  inner_codegen, inner_compile = compiled.get_program, LLVMJit.compile_object
  held = []

  def codegen_spy(ast, *a, **kw):
    spy.events.append(("codegen",))
    if len(spy.of("codegen")) >= made:
      reached.set()
    return inner_codegen(ast, *a, **kw)

  def compile_spy(jit, ir, fname, symbol):
    if threading.current_thread() is not threading.main_thread() and not held:
      held.append(fname)
      reached.wait(30)
    return inner_compile(jit, ir, fname, symbol)
  monkeypatch.setattr(compiled, "get_program", codegen_spy)
  monkeypatch.setattr(LLVMJit, "compile_object", compile_spy)
  return reached


def _deepest(events: list[tuple[str, ...]], depth: int, first_runs: bool = False) -> tuple[int, int]:
  """(kernels made, the most made ahead of the one about to run), checking that none was made more than `depth`
  ahead of it; first_runs: counting a kernel's first run only (its turn: a repeated kernel's later runs are not)."""
  made = ran = deepest = 0
  seen: set[tuple[str, ...]] = set()
  for e in events:
    if e[0] == "codegen":
      made += 1
      assert made <= ran + 1 + depth, f"kernel {made} made while {ran} kernels had run"
      deepest = max(deepest, made - ran - 1)
    elif e[0] == "run" and not (first_runs and e[1:] in seen):
      seen.add(e[1:])
      ran += 1
  return made, deepest


def test_compile_ahead_is_bounded(monkeypatch, tmp_path):
  """COMPILE_AHEAD=2: no kernel's codegen (made on this thread, in run order) more than 2 kernels ahead of the one
  about to run, and, the worker held in its first compile, some that far."""
  _setup(monkeypatch, str(tmp_path), 2)
  spy = _Spy(monkeypatch)
  reached = _hold_worker(monkeypatch, spy, 3)
  _realize(spy)
  made, deepest = _deepest(spy.events, 2)
  assert reached.is_set() and made >= 6 and deepest == 2, "no kernel was made as far ahead as COMPILE_AHEAD allows"


@pytest.mark.parametrize("where", ["worker", "python"])
def test_an_error_in_a_compile_ahead_raises_at_its_kernel(monkeypatch, tmp_path, where):
  """The third kernel's compile fails (its LLVM compile on the worker, or its optimizer on this thread): the same
  exception as compiling at its turn, after the same runs, and no worker left."""
  outcomes = []
  for depth in (0, 8):
    _setup(monkeypatch, str(tmp_path / f"d{depth}"), depth)
    # (the kernel whose compile was third at depth 0, by name: a compile taken from the worker's queue may start
    # before the one ahead of it)
    fail = (2 if depth == 0 else outcomes[0][3]) if where == "worker" else None
    spy = _Spy(monkeypatch, fail_at=fail)
    if where == "python":
      optimize, calls = engine.optimize, []

      def failing(ast, *a, _optimize=optimize, _calls=calls, **kw):
        _calls.append(ast)
        if len(_calls) == 3:
          raise ValueError("the optimizer failed on the third kernel")
        return _optimize(ast, *a, **kw)
      monkeypatch.setattr(engine, "optimize", failing)
    with pytest.raises((LLVMCompileError, ValueError)) as e:
      _realize(spy)
    outcomes.append((type(e.value), str(e.value), spy.of("run"), spy.of("compile")[2][0] if fail == 2 else fail))
    if depth:
      assert f"{WORKER}_0" in {t for _, t in spy.of("compile")} <= {f"{WORKER}_0", "MainThread"}
      # (ahead as far as the worker lags: the turns run as their compiles end, and the first that raises stops this
      # thread's next kernel, so none may be compiled past the failing one)
      assert len(spy.of("compile")) >= (3 if where == "worker" else 2)
    assert _no_worker()
  assert outcomes[0] == outcomes[1]
  assert len(outcomes[0][2]) >= 2


def test_a_traced_run_compiles_ahead_and_records_the_same(monkeypatch, tmp_path):
  """Traced, the LLVM compiles run on the worker too, and each context holds the same records in the same order (the
  stream interleaves them: a kernel's opts come before the sources and runs of the kernels before it;
  tests/trace/test_traced_ahead.py compares the whole traces)."""
  from compiler.trace import recorder
  shapes = []
  for depth in (0, 8):
    _setup(monkeypatch, str(tmp_path / f"c{depth}"), depth)
    monkeypatch.setattr(realize, "_cores", lambda: 2)  # (ahead on a one-core runner too)
    spy = _Spy(monkeypatch)
    path = tmp_path / f"d{depth}.vztrace"
    recorder.enable(path, announce=False)
    try:
      _realize(spy)
    finally:
      recorder.disable()
    threads = {t for _, t in spy.of("compile")}
    assert threads == {"MainThread"} if depth == 0 else f"{WORKER}_0" in threads <= {f"{WORKER}_0", "MainThread"}
    by_ctx: dict[int, list] = {}
    with TraceReader(str(path)) as r:
      for rec in r:
        if rec["t"] == "ctx_begin":
          by_ctx[rec["id"]] = [(rec["kind"], rec["name"] if rec["kind"] != "schedule" else "")]  # (numbered a process)
        elif rec["t"] in ("source", "run", "opt", "ctx_end"):
          by_ctx[rec.get("ctx", rec.get("id"))].append((rec["t"], rec.get("kind"), rec.get("kname"), rec.get("error")))
    shapes.append([by_ctx[c] for c in sorted(by_ctx)])
  assert shapes[0] == shapes[1] and sum(map(len, shapes[0])) > 20


class _Gated:
  """LLVMJit.compile_object spied on: (kernel function, thread name, object code or None) of each compile, in the
  order they start. With `gate`, the worker's first compile waits until this thread has begun one (a steal: the
  thread waiting for a kernel runs a queued compile itself); `fail_here`: this thread's first compile raises."""

  def __init__(self, monkeypatch, gate: bool, fail: str | None = None, fail_here: bool = False) -> None:
    self.compiles: list[tuple[str, str, bytes | None]] = []
    self.stole = threading.Event()
    monkeypatch.setattr(get_jit(), "cache", {})  # (every IR compiled anew: its object code made and compared)
    inner = LLVMJit.compile_object
    spy = self

    def compile_spy(jit, ir, fname, symbol):
      me = threading.current_thread()
      here = me is threading.main_thread()
      if here:
        spy.stole.set()
      elif gate and not any(t == me.name for _, t, _ in spy.compiles):
        spy.stole.wait(60)  # (the old code never steals: the worker goes on after the wait, and the test fails)
      first_here = here and not any(t == me.name for _, t, _ in spy.compiles)
      spy.compiles.append((fname, me.name, None))
      if fname == fail or (fail_here and first_here):
        raise LLVMCompileError(f"LLVM rejected kernel {fname!r}: made to fail")
      jf, obj = inner(jit, ir, fname, symbol)
      spy.compiles[spy.compiles.index((fname, me.name, None))] = (fname, me.name, obj)
      return jf, obj
    monkeypatch.setattr(LLVMJit, "compile_object", compile_spy)
    self.runs = _Spy(monkeypatch)  # (its own compile spies see the calls too; its runs are what is used here)


def test_a_waiting_thread_compiles_queued_kernels_itself(monkeypatch, tmp_path):
  """The worker busy with a compile while this thread waits for its kernel: this thread compiles the next queued
  kernel itself (two compiles at once), and every kernel's object code, the runs and the outputs are those of
  compiling each at its turn (COMPILE_AHEAD=0), bit for bit."""
  got = {}
  for depth in (0, 8):
    _setup(monkeypatch, str(tmp_path / f"d{depth}"), depth)
    spy = _Gated(monkeypatch, gate=depth > 0)
    got[depth] = (_realize(spy.runs), spy.runs.of("run"), spy.compiles)
    assert _no_worker()
  (want, runs0, seq), (out, runs8, ahead) = got[0], got[8]
  threads = {t for _, t, _ in ahead}
  assert "MainThread" in threads and f"{WORKER}_0" in threads, f"no compile stolen: {threads}"
  assert out == want and runs8 == runs0 and len(runs0) >= 6
  assert sorted((f, o) for f, _, o in ahead) == sorted((f, o) for f, _, o in seq)
  assert all(o is not None for _, _, o in seq)


def test_a_stolen_compile_that_fails_raises_at_its_kernel(monkeypatch, tmp_path):
  """The compile this thread takes from the worker's queue raises: the same exception as that kernel's compile
  failing at its turn (COMPILE_AHEAD=0), after the same runs, and no worker left."""
  _setup(monkeypatch, str(tmp_path / "d8"), 8)
  spy = _Gated(monkeypatch, gate=True, fail_here=True)
  with pytest.raises(LLVMCompileError) as ahead:
    _realize(spy.runs)
  assert _no_worker()
  stolen = [f for f, t, _ in spy.compiles if t == "MainThread"]
  assert stolen, "no compile stolen"
  _setup(monkeypatch, str(tmp_path / "d0"), 0)
  spy0 = _Gated(monkeypatch, gate=False, fail=stolen[0])
  with pytest.raises(LLVMCompileError) as seq:
    _realize(spy0.runs)
  assert str(ahead.value) == str(seq.value) and f"kernel {stolen[0]!r}" in str(seq.value)
  assert spy.runs.of("run") == spy0.runs.of("run")


def _repeating() -> list[Tensor]:
  """Six chains of four matmuls by the same matrix, each chain its own size: a schedule whose steps repeat kernels run
  before (equal ASTs, nothing to compile) between the kernels it compiles, as a GPT step's layers do."""
  import numpy as np
  r = np.random.default_rng(3)
  outs = []
  for n in range(3, 9):
    x = Tensor(r.standard_normal((n, n)).astype(np.float32))
    w = Tensor(r.standard_normal((n, n)).astype(np.float32))
    for _ in range(4):
      x = (x @ w).relu()
    outs.append(x)
  return outs


def test_compile_ahead_counts_kernels_started_not_steps(monkeypatch, tmp_path):
  """COMPILE_AHEAD=2 counts the kernels whose compiles are started ahead, not schedule steps: steps that repeat a
  kernel run before start nothing, so kernels are made 2 ahead of the one about to run across them (the worker held:
  counting steps, a GPT step's 176 repeated steps of 235 left one or two kernels compiling ahead), and never more;
  the same runs and outputs as COMPILE_AHEAD=0."""
  got = {}
  for depth in (0, 2):
    _setup(monkeypatch, str(tmp_path / f"d{depth}"), depth)
    spy = _Spy(monkeypatch)
    reached = _hold_worker(monkeypatch, spy, 3)
    outs = _repeating()
    Tensor.realize(*outs)
    got[depth] = ([t.numpy().tobytes() for t in outs], spy.of("run"), spy.events, reached.is_set())
    assert _no_worker()
  assert got[0][:2] == got[2][:2]
  runs = got[0][1]
  assert len(runs) >= 4 * len(set(runs)) >= 24, "not a schedule of repeated kernels"
  made, deepest = _deepest(got[2][2], 2, first_runs=True)
  assert got[2][3] and made == len(set(runs)) and deepest == 2, f"kernels made {deepest} ahead of the one about to run"


class _RunThreads:
  """CompiledKernel calls spied on: (kernel, thread name) of each run, in order; `fail_at` (a run's number, from 0):
  that run raises a RuntimeError of its own (kept in `raised`) instead of running. `ran` is set when that run (or the
  first, without fail_at) begins; the codegen of kernel `hold` (a number, from 0) waits for it first (30 s at most, so
  that code that would run it after that codegen fails, not hangs): the kernels before are then compiled and run on
  the worker, this thread held in a codegen, not taking a turn."""

  def __init__(self, monkeypatch, fail_at: int | None = None, hold: int | None = None) -> None:
    self.runs: list[tuple[str, str]] = []
    self.raised: list[BaseException] = []
    self.ran = threading.Event()
    call, codegen, made = CompiledKernel.__call__, compiled.get_program, []
    spy = self

    def call_spy(ck, bufs, *args, **kw):
      spy.runs.append((ck.name, threading.current_thread().name))
      if len(spy.runs) - 1 == (fail_at or 0):
        spy.ran.set()
      if len(spy.runs) - 1 == fail_at:
        spy.raised.append(e := RuntimeError(f"run of {ck.name} made to fail"))
        raise e
      return call(ck, bufs, *args, **kw)

    def codegen_spy(ast, *a, **kw):
      made.append(ast)
      if len(made) - 1 == hold:
        spy.ran.wait(30)
      return codegen(ast, *a, **kw)
    monkeypatch.setattr(CompiledKernel, "__call__", call_spy)
    monkeypatch.setattr(compiled, "get_program", codegen_spy)


def test_runs_go_to_the_worker_in_order(monkeypatch, tmp_path):
  """Untraced, a cold schedule's kernels run on the compile worker (their turns handed over, each after its compile,
  while this thread makes the next kernels' Python part: held in the third kernel's codegen until the first run), one
  at a time in the same order as COMPILE_AHEAD=0's, with the same outputs bit for bit; a realize returns after every
  run."""
  got = {}
  for depth in (0, 8):
    _setup(monkeypatch, str(tmp_path / f"d{depth}"), depth)
    spy = _RunThreads(monkeypatch, hold=2)
    got[depth] = (_realize(_Spy(monkeypatch)), [k for k, _ in spy.runs], [t for _, t in spy.runs])
    assert _no_worker()
  assert got[8][:2] == got[0][:2] and len(got[0][1]) >= 6
  assert set(got[0][2]) == {"MainThread"} and got[8][2][0] == f"{WORKER}_0", "the first run not on the worker"


@pytest.mark.parametrize("at", [0, 3])
def test_an_error_in_a_run_on_the_worker_reaches_the_caller(monkeypatch, tmp_path, at):
  """A kernel's run raises on the worker (the first or the fourth run; this thread held in a later kernel's codegen
  until it began): the caller gets that very exception, after the same runs as COMPILE_AHEAD=0, and no later kernel
  runs; no worker left."""
  outcomes = []
  for depth in (0, 8):
    _setup(monkeypatch, str(tmp_path / f"d{depth}"), depth)
    spy = _RunThreads(monkeypatch, fail_at=at, hold=at + 2)
    with pytest.raises(RuntimeError) as e:
      _realize(_Spy(monkeypatch))
    assert e.value is spy.raised[0]
    outcomes.append(([k for k, _ in spy.runs], str(e.value), spy.runs[-1][1]))
    assert _no_worker()
  assert outcomes[0][:2] == outcomes[1][:2] and len(outcomes[0][0]) == at + 1
  assert outcomes[1][2] == f"{WORKER}_0", "the failing run was not on the worker"
