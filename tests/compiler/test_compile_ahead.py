"""Compile-ahead (issue 29): an untraced schedule's kernels are optimized and code-generated in run order ahead of
their runs, their LLVM compiles on one worker thread (compiler.realize._Ahead). The same kernels compiled in the same
order and run in the same order as compiling each at its turn (COMPILE_AHEAD=0), with the same outputs bit for bit; a
compile's error (on the worker or in the Python part) raised at its kernel's turn, after the same runs; the worker
gone after every schedule (and the switch interval it lowers put back); no kernel made more than COMPILE_AHEAD ahead
of the one running; a traced run as before (nothing compiled ahead, the same records)."""
from __future__ import annotations

import sys
import threading

import pytest
from support.tensor_values import conv_grads_and_softmax

from compiler import Tensor, engine, realize
from compiler.runtime import compiled
from compiler.runtime.compiled import CompiledKernel
from compiler.runtime.llvm import LLVMCompileError, LLVMJit
from vztrace.reader import TraceReader

WORKER = "tinyviz-compile"


def _program() -> list[Tensor]:
  """A conv's forward and backward and a matmul's softmax: a dozen kernels in one schedule."""
  return conv_grads_and_softmax(seed=1, out_channels=5)


class _Spy:
  """What happened, in order: ("compile", kernel function, thread name) for each LLVM compile, ("run", kernel) for
  each kernel run. `fail_at`: the LLVM compile (by number, from 0) that raises an LLVMCompileError."""

  def __init__(self, monkeypatch, fail_at: int | None = None) -> None:
    self.events: list[tuple[str, ...]] = []
    spy = self
    for name in ("compile", "compile_object"):
      inner = getattr(LLVMJit, name)

      def compile_spy(jit, ir, fname, *args, _inner=inner, **kw):
        spy.events.append(("compile", fname, threading.current_thread().name))
        if len(spy.of("compile")) - 1 == fail_at:
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
  assert [f for f, _ in ahead.of("compile")] == [f for f, _ in seq.of("compile")]
  assert {t for _, t in ahead.of("compile")} == {f"{WORKER}_0"}, "the LLVM compiles did not run on the worker"
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
    spy = _Spy(monkeypatch, fail_at=2 if where == "worker" else None)
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
    outcomes.append((type(e.value), str(e.value), spy.of("run")))
    if depth:
      assert {t for _, t in spy.of("compile")} == {f"{WORKER}_0"}
      assert len(spy.of("compile")) > 3, "nothing was compiled ahead of the failing kernel"
    assert _no_worker()
  assert outcomes[0] == outcomes[1]
  assert len(outcomes[0][2]) >= 2


def test_a_traced_run_compiles_nothing_ahead_and_records_the_same(monkeypatch, tmp_path):
  from compiler.trace import recorder
  shapes = []
  for depth in (0, 8):
    _setup(monkeypatch, str(tmp_path / f"c{depth}"), depth)
    spy = _Spy(monkeypatch)
    path = tmp_path / f"d{depth}.vztrace"
    recorder.enable(path, announce=False)
    try:
      _realize(spy)
    finally:
      recorder.disable()
    assert {t for _, t in spy.of("compile")} == {"MainThread"}
    with TraceReader(str(path)) as r:
      shapes.append([(rec["t"], rec.get("kind"), rec.get("name"), rec.get("kname")) for rec in r
                     if rec["t"] in ("ctx", "source", "run", "opt", "end")])
  assert shapes[0] == shapes[1] and len(shapes[0]) > 20
