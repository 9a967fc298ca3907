"""When LLVM's text thread makes a kernel's optimized IR and assembly for the trace: not while the program compiles
kernel after kernel (llvmlite runs one LLVM call at a time, so each next compile waited for them), and at once when
someone waits for them (compiler.runtime.llvm.TextHold, compiler.runtime.sources)."""
from __future__ import annotations

import threading

import pytest
from test_codegen_helpers import elementwise

from compiler.runtime import llvm, sources
from compiler.runtime.compiled import compile_kernel
from compiler.trace import recorder
from vztrace.reader import TraceReader


class _Clock:
  """A CPU clock the test moves."""

  def __init__(self) -> None:
    self.now = 10.0

  def __call__(self) -> float:
    return self.now


def _held(clock: _Clock, in_compile: bool) -> llvm.TextHold:
  hold = llvm.TextHold()
  hold.note(in_compile)
  hold.mark = (clock, clock.now, hold.mark[2])
  return hold


def test_the_hold_lasts_through_a_compile_and_the_cpu_time_after_it():
  clock = _Clock()
  hold = _held(clock, True)
  clock.now += 10 * llvm.TEXT_HOLD_S  # a long compile: still held (the next one may be due right after it)
  assert hold.left() > 0
  hold = _held(clock, False)
  clock.now += llvm.TEXT_HOLD_S / 3
  assert hold.left() == pytest.approx(llvm.TEXT_HOLD_S * 2 / 3)
  clock.now += llvm.TEXT_HOLD_S
  assert hold.left() <= 0  # the compiling thread went on to other work: the texts may be made


def test_the_hold_ends_when_hurried_until_the_next_compile():
  clock = _Clock()
  hold = _held(clock, False)
  hold.hurry.set()
  assert hold.left() <= 0
  hold.note(True)
  assert hold.left() > 0


def test_a_compile_that_fails_ends_its_hold():
  hold = llvm.TextHold()
  with pytest.raises(llvm.LLVMCompileError), hold.compiling():  # (as LLVM rejecting a kernel's IR does)
    assert hold.in_compile
    raise llvm.LLVMCompileError("rejected")
  assert not hold.in_compile


def test_the_hold_ends_after_its_wall_time_or_with_the_compiling_thread():
  clock = _Clock()
  hold = _held(clock, False)
  assert hold.left() > 0
  hold.mark = (clock, clock.now, hold.mark[2] - llvm.TEXT_HOLD_MAX_S)  # a compiling thread that waits uses no CPU
  assert hold.left() <= 0

  def gone() -> float:
    raise OSError("no such thread")
  hold.mark = (gone, 0.0, hold.mark[2] + llvm.TEXT_HOLD_MAX_S)
  assert hold.left() <= 0


def test_a_thread_clock_counts_that_threads_cpu_time_only():
  got: list = []
  t = threading.Thread(target=lambda: got.append(llvm.thread_clock()))
  t.start()
  t.join()
  mine = llvm.thread_clock()
  before = mine()
  sum(range(200_000))
  assert mine() > before
  with pytest.raises(OSError):  # a thread that ended has no clock to read (the hold then ends)
    got[0]()


@pytest.fixture
def held_for_good(monkeypatch, tmp_path):
  """A recording (VIZ in the environment: its texts are recorded when ready) whose text thread holds off until
  hurried; afterwards the texts are made and the recording ends."""
  monkeypatch.setenv("VIZ", "-1")
  monkeypatch.setattr(llvm, "TEXT_HOLD_S", 1e9)
  monkeypatch.setattr(llvm, "TEXT_HOLD_MAX_S", 1e9)
  path = tmp_path / "t.vztrace"
  recorder.enable(path, announce=False)
  try:
    yield path
  finally:
    llvm.get_jit().hurry_texts()
    sources.record_ready(wait=True)
    recorder.disable()


def test_kernels_compiled_one_after_another_get_their_texts_after_the_compiles(held_for_good):
  first: list = []
  for n in (29, 31):
    with recorder.trace_context(f"k{n}", kind="kernel"):
      compile_kernel(elementwise(7, n))
    first.append(llvm.get_jit()._last_text)
  assert not first[0].done()  # held: the second compile did not wait for it
  done = threading.Event()
  waiter = threading.Thread(target=lambda: (sources.record_ready(wait=True), done.set()), daemon=True)
  waiter.start()
  assert done.wait(60)  # waiting for the texts hurries them
  assert all(f.done() for f in first)
  recorder.disable()
  kinds: dict[int, list[str]] = {}
  for r in TraceReader(held_for_good):
    if r["t"] == "source":
      kinds.setdefault(r["ctx"], []).append(r["kind"])
  assert list(kinds.values()) == [["uops", "llvm_ir", "opt_ir", "asm"]] * 2


class _SpyMachine:
  """The text thread's target machine, noting each emission."""

  def __init__(self, tm, events: list) -> None:
    self.tm, self.events = tm, events

  def emit_assembly(self, mod):
    self.events.append("emit")
    return self.tm.emit_assembly(mod)


def test_the_text_thread_asks_the_hold_before_each_emission(monkeypatch, tmp_path):
  monkeypatch.setenv("VIZ", "-1")
  jit = llvm.get_jit()
  events: list[str] = []
  real_left = llvm.TextHold.left
  monkeypatch.setattr(llvm.TextHold, "left", lambda self: events.append("asked") or real_left(self))
  recorder.enable(tmp_path / "t.vztrace", announce=False)
  try:
    with recorder.trace_context("k", kind="kernel"):
      compile_kernel(elementwise(11, 17))  # (the first one makes the text thread and its machine)
    sources.record_ready(wait=True)
    monkeypatch.setattr(jit, "_text_tm", _SpyMachine(jit._text_tm, events))
    del events[:]
    for n in (19, 23):  # (the inner extent is in the IR: two kernels, not one from the cache)
      with recorder.trace_context(f"k{n}", kind="kernel"):
        compile_kernel(elementwise(13, n))
    sources.record_ready(wait=True)
  finally:
    recorder.disable()
  emits = [i for i, e in enumerate(events) if e == "emit"]
  assert len(emits) == 2 and all(i > 0 and events[i - 1] == "asked" for i in emits), events
