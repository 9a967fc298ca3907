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


def test_compile_ahead_is_bounded(monkeypatch, tmp_path):
  """COMPILE_AHEAD=2: no kernel's codegen (made on this thread, in run order) more than 2 kernels ahead of the one
  about to run, and some that far."""
  _setup(monkeypatch, str(tmp_path), 2)
  spy = _Spy(monkeypatch)
  inner = compiled.get_program

  def codegen_spy(ast, *a, **kw):
    spy.events.append(("codegen",))
    return inner(ast, *a, **kw)
  monkeypatch.setattr(compiled, "get_program", codegen_spy)
  _realize(spy)
  runs = made = deepest = 0
  for e in spy.events:
    if e[0] == "codegen":
      made += 1
      assert made <= runs + 1 + 2, f"kernel {made} made while {runs} kernels had run"
      deepest = max(deepest, made - runs - 1)
    elif e[0] == "run":
      runs += 1
  assert made >= 6 and deepest == 2, "no kernel was made as far ahead as COMPILE_AHEAD allows"


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
      assert len(spy.of("compile")) > 3, "nothing was compiled ahead of the failing kernel"
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
