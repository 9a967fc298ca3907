"""The LLVM JIT (llvmlite): parse, verify, optimize with the new pass manager, and run machine code in-process.

One MCJIT engine for the process (created on first use, for the CPU compiler.host.host_cpu names: the host's, or
TARGET_ISA's preset); every kernel is a module added to it under a unique symbol. Compiles are cached by IR text.
Thread-safe (one lock). An untraced compile for the disk cache (compiler.runtime.diskcache) goes through object code
(`compile_object`, the same code generation), which a later process links as it is (`link_cached`). Two such compiles
run at once on two threads (compile-ahead's worker and the thread that waits for it: compiler.realize._Ahead): each
parses, optimizes and code-generates in an LLVMContext and a target machine of its own (LLVM allows threads that share
neither to compile at once), its long calls made without llvmlite's one global lock (`_unlocked`); only linking into
the engine is serialized.

The texts a trace shows (optimized IR, assembly) cost one run of LLVM's code generator, the one that makes the code:
a traced compile emits the assembly, assembles that text (a module of `module asm` lines: LLVM's own assembler, a
tenth of the code generator's time, through a target machine at opt level 0: `_assemble`) and links the object into
the engine. So the assembly shown is the code run,
and no second code generation (which took a thread of its own, and held llvmlite's lock against the program's next
compiles) is needed.

With COMPILE_ONLY=1 (compiler.host.compile_only: a TARGET_ISA preset this CPU may lack) `texts` still makes a kernel's
IR and assembly, and whatever would give code to run (compile, add_object, scratch) raises a RuntimeError instead."""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import llvmlite.binding as llvm
import llvmlite.binding.ffi as llvm_ffi

from compiler.host import compile_only, host_cpu
from compiler.runtime import libcalls

OPT_LEVEL = int(os.environ.get("LLVM_OPT", "3"))


class LLVMCompileError(RuntimeError):
  """LLVM rejected a kernel's IR (parse or verify error); the message has LLVM's reason."""


@dataclass(frozen=True)
class JitFunction:
  """A compiled kernel function in the engine; `texts` (when asked for): (optimized IR, assembly)."""
  symbol: str
  address: int
  compile_s: float
  texts: tuple[str, str] | None = None

  @property
  def opt_ir(self) -> str:
    return self.texts[0] if self.texts is not None else ""

  @property
  def asm(self) -> str:
    return self.texts[1] if self.texts is not None else ""


class LLVMJit:
  def __init__(self) -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()  # (a traced compile's code is assembled from its assembly)
    target = llvm.Target.from_triple(llvm.get_process_triple())
    self.cpu, self.features = host_cpu()
    self.compile_only = compile_only()
    self.target = target
    self.tm = self.target_machine()
    self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.tm)
    self.libcalls = libcalls.register(self.engine)  # (half conversions, which a CPU without F16C calls)
    self.lock = threading.Lock()
    self.cache: dict[str, JitFunction] = {}
    self.counter = itertools.count()
    # object code from the disk cache linked so far, by symbol (a symbol names one code: linked once, never twice)
    self.linked: dict[str, int] = {}
    self.compiles = 0  # LLVM compiles of kernels (optimize + code generation) in this process
    # compile_object's: the IR texts being compiled now (another thread's compile of one waits for it, then takes it
    # as compiled before), and the target machines not in use (one a compile: LLVM's are not for two threads at once)
    self.pending: dict[str, threading.Event] = {}
    self.free_tms: list[llvm.TargetMachine] = []
    self.free_asm: list[llvm.TargetMachine] = []  # (_assemble's target machines, at opt level 0, not in use)
    self.symbols: dict[str, str] = {}  # IR text -> the symbol `symbol_for` gave it, until it is compiled
    self.tm_lock = threading.Lock()
    self.triple, self.layout = self.tm.triple, str(self.tm.target_data)

  def target_machine(self) -> llvm.TargetMachine:
    """A target machine for host_cpu()'s CPU and features (an engine owns the one it is made with)."""
    return self.target.create_target_machine(cpu=self.cpu, features=self.features, opt=min(OPT_LEVEL, 3),
                                             reloc="default", codemodel="jitdefault", jit=True)

  def scratch(self) -> ScratchJit:
    """An engine of its own for code soon thrown away: BEAM's candidates."""
    self._check_runs("a BEAM search")
    return ScratchJit(self.target_machine())

  def _check_runs(self, what: str) -> None:
    """Refuse to make code to run under COMPILE_ONLY=1 (it may be for a CPU this is not)."""
    if self.compile_only:
      raise RuntimeError(f"{what}: COMPILE_ONLY=1 compiles kernels for {self.cpu} without running them "
                         "(LLVMJit.texts gives their IR and assembly)")

  def _module(self, ir: str, fname: str, symbol: str) -> llvm.ModuleRef:
    """Parse and verify `ir`, rename `fname` to `symbol`, and optimize it for this JIT's target machine."""
    try:
      mod = llvm.parse_assembly(ir)
      mod.verify()
    except RuntimeError as e:
      raise LLVMCompileError(f"LLVM rejected kernel {fname!r}: {e}") from None
    mod.get_function(fname).name = symbol
    mod.triple, mod.data_layout = self.tm.triple, str(self.tm.target_data)
    self._optimize(mod)
    return mod

  def object_code(self, ir: str, fname: str, symbol: str) -> bytes:
    """Object code of `fname` renamed to `symbol` (e.g. compiled in a BEAM worker process, linked by add_object)."""
    return self.tm.emit_object(self._module(ir, fname, symbol))

  def add_object(self, obj: bytes, symbol: str) -> int:
    """Link object code from `object_code` into the engine for good; the address of `symbol`."""
    self._check_runs(f"linking {symbol}")
    with self.lock:
      return _link(self.engine, obj, symbol)

  def _optimize(self, mod: llvm.ModuleRef, tm: llvm.TargetMachine | None = None, apart: bool = False) -> None:
    """LLVM's O3 pipeline on `mod`; `apart`: a module in a context of its own and a target machine no other thread
    uses, run outside llvmlite's lock (`_apart`)."""
    pto = _tuning_options()
    pb = llvm.create_pass_builder(tm or self.tm, pto)
    pm = pb.getModulePassManager()
    if apart:
      _unlocked("LLVMPY_RunNewModulePassManager")(pm, mod, pb)
    else:
      pm.run(mod, pb)

  def compile(self, ir: str, fname: str, want_text: bool = True) -> tuple[JitFunction, bool]:
    """The function `fname` of `ir`, compiled (or from the cache): (function, was_cached). With want_text its
    `texts` are made too."""
    self._check_runs(f"kernel {fname!r}")
    with self.lock:
      hit = self.cache.get(ir)
      if hit is not None:
        if want_text and hit.texts is None:  # first compiled while tracing was off: make the texts now
          texts = self._texts(self._module(ir, fname, hit.symbol))  # (the same module, so the same code)
          hit = self.cache[ir] = JitFunction(hit.symbol, hit.address, hit.compile_s, texts)
        return hit, True
      t0 = time.perf_counter()
      self.compiles += 1
      symbol = f"{fname}_{next(self.counter)}"
      mod = self._module(ir, fname, symbol)
      texts = None
      if want_text:  # (the engine links the object assembled from the assembly: no module of it to code-generate)
        texts = self._texts(mod)
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(self._assemble(texts[1])))
      else:
        self.engine.add_module(mod)
      self.engine.finalize_object()
      addr = self.engine.get_function_address(symbol)
      if not addr:
        raise LLVMCompileError(f"kernel {fname!r}: symbol {symbol} not found after JIT")
      jf = JitFunction(symbol, addr, time.perf_counter() - t0, texts)
      self.cache[ir] = jf
      return jf, False

  def compile_object(self, ir: str, fname: str, symbol: str) -> tuple[JitFunction, bytes | None]:
    """compile() without texts, through object code kept for the disk cache: (function, the object code of `fname`
    renamed to `symbol`, a name no other code has); no object code where `ir` was compiled before in this process.
    Several threads may call it at once: LLVM's part runs apart (`_apart`), the link under the lock; a thread given an
    IR another is compiling waits for that compile and returns its function as compiled before."""
    self._check_runs(f"kernel {fname!r}")
    if (hit := self._claim(ir)) is not None:
      return hit, None
    try:
      t0 = time.perf_counter()
      with self._apart(ir, fname, symbol) as (mod, tm):
        obj = _emit(tm, mod, True)
      with self.lock:
        jf = JitFunction(symbol, self._link_once(obj, symbol), time.perf_counter() - t0)
        self.cache[ir] = jf
      return jf, obj
    finally:
      self._release(ir)

  def symbol_for(self, ir: str, fname: str) -> str | None:
    """The symbol compile_traced is to give `ir`'s function, drawn from the JIT's counter now (on the thread that
    orders the compiles, so the names are those of compiling each in turn); None where `ir` was compiled before (or
    the IR is being compiled without texts: compile() makes them)."""
    with self.lock:
      hit = self.cache.get(ir)
      if hit is not None or (ir in self.pending and ir not in self.symbols):
        return None
      if (symbol := self.symbols.get(ir)) is None:
        symbol = self.symbols[ir] = f"{fname}_{next(self.counter)}"
      return symbol

  def compile_traced(self, ir: str, fname: str, symbol: str) -> tuple[JitFunction, bool]:
    """compile(ir, fname, want_text=True) for the symbol `symbol_for` gave: its LLVM part apart (`_apart`: another
    thread may compile at the same time), the texts made from that module and the object assembled from the assembly
    text as compile() makes them, the link under the lock; (function, was_cached)."""
    self._check_runs(f"kernel {fname!r}")
    if (hit := self._claim(ir)) is not None:
      return (hit, True) if hit.texts is not None else self.compile(ir, fname, want_text=True)
    try:
      t0 = time.perf_counter()
      with self._apart(ir, fname, symbol) as (mod, tm):
        texts = (str(mod), _emit(tm, mod, False).decode())
      obj = self._assemble(texts[1])
      with self.lock:
        jf = JitFunction(symbol, self._link_once(obj, symbol), time.perf_counter() - t0, texts)
        self.cache[ir] = jf
        self.symbols.pop(ir, None)
      return jf, False
    finally:
      self._release(ir)

  def _claim(self, ir: str) -> JitFunction | None:
    """The function `ir` was compiled to, or None with `ir` claimed for this thread to compile (counted); a thread
    given an IR another is compiling waits for that compile (then a hit, or it failed and this one is made: its error
    is this kernel's too)."""
    while True:
      with self.lock:
        if (hit := self.cache.get(ir)) is not None:
          return hit
        busy = self.pending.get(ir)
        if busy is None:
          self.pending[ir] = threading.Event()
          self.compiles += 1
          return None
      busy.wait()

  def _release(self, ir: str) -> None:
    with self.lock:
      done = self.pending.pop(ir)
    done.set()

  @contextlib.contextmanager
  def _apart(self, ir: str, fname: str, symbol: str) -> Iterator[tuple[llvm.ModuleRef, llvm.TargetMachine]]:
    """`ir` parsed, verified, `fname` renamed to `symbol` and optimized, in an LLVMContext and with a target machine
    of its own (the same options as the engine's: the same code), its parse and optimizer outside llvmlite's lock, so
    another thread may compile at the same time: (module, target machine) for its code generation, within."""
    with self.tm_lock:
      tm = self.free_tms.pop() if self.free_tms else self.target_machine()
    ctx = llvm.create_context()
    mod = None
    try:
      try:
        mod = _parse_apart(ir, ctx)
        mod.verify()
      except RuntimeError as e:  # (worded as _module words it)
        raise LLVMCompileError(f"LLVM rejected kernel {fname!r}: {e}") from None
      mod.get_function(fname).name = symbol
      mod.triple, mod.data_layout = self.triple, self.layout
      self._optimize(mod, tm, apart=True)
      yield mod, tm
    finally:
      if mod is not None:
        mod.close()  # (before its context)
      ctx.close()
      with self.tm_lock:
        self.free_tms.append(tm)

  def link_cached(self, obj: bytes, symbol: str) -> int:
    """Link object code from the disk cache (compile_object's) for good, once a symbol; the address of `symbol`."""
    self._check_runs(f"linking {symbol}")
    with self.lock:
      return self._link_once(obj, symbol)

  def _link_once(self, obj: bytes, symbol: str) -> int:
    if (addr := self.linked.get(symbol)) is None:  # (a second copy of one symbol would shadow or break the first)
      addr = self.linked[symbol] = _link(self.engine, obj, symbol)
    return addr

  def texts(self, ir: str, fname: str) -> tuple[str, str]:
    """(optimized IR, assembly) of the function `fname` of `ir`, compiled for this JIT's CPU and not added to the
    engine: what a traced compile shows (the function keeps its name), also under COMPILE_ONLY=1."""
    with self.lock:
      return self._texts(self._module(ir, fname, fname))

  def _assemble(self, asm: str) -> bytes:
    """The object code of assembly `asm` (a module of it, `_assembly_module`, for this JIT's target): made by a target
    machine at opt level 0, whose code generator pipeline (run on a module with no functions: it only assembles) costs
    ~0.4 ms a kernel less than the JIT's at 3 (~0.03 s of a traced GPT training step), and gives the same bytes. In an
    LLVMContext and with an assembler of its own, outside llvmlite's lock: two threads may assemble at once."""
    with self.tm_lock:
      tm = self.free_asm.pop() if self.free_asm else self._assembler_machine()
    ctx = llvm.create_context()
    mod = None
    try:
      mod = _parse_apart(_assembly_module(asm, self.tm), ctx)
      return _emit(tm, mod, True)
    finally:
      if mod is not None:
        mod.close()
      ctx.close()
      with self.tm_lock:
        self.free_asm.append(tm)

  def _assembler_machine(self) -> llvm.TargetMachine:
    return self.target.create_target_machine(cpu=self.cpu, features=self.features, opt=0, reloc="default",
                                             codemodel="jitdefault", jit=True)

  def _texts(self, mod: llvm.ModuleRef) -> tuple[str, str]:
    """(optimized IR, assembly) of an optimized module, which code generation uses up: the IR's text first."""
    try:
      return str(mod), self.tm.emit_assembly(mod)
    finally:
      mod.close()


def _tuning_options() -> Any:
  pto = llvm.create_pipeline_tuning_options(speed_level=min(OPT_LEVEL, 3))
  pto.loop_vectorization = OPT_LEVEL >= 2
  pto.slp_vectorization = OPT_LEVEL >= 2
  pto.loop_unrolling = OPT_LEVEL >= 2
  return pto


def _unlocked(name: str) -> Any:
  """llvmlite's C function `name` called without llvmlite's global lock (its ffi wraps every call in one lock, since
  its API defaults to LLVM's one global context), for calls on a module in a context of its own and a target
  machine no other thread uses; the locked function where llvmlite has no unlocked one."""
  fn = getattr(llvm_ffi.lib, name)
  return getattr(fn, "_cfn", fn)


def _parse_apart(ir: str, ctx: Any) -> llvm.ModuleRef:
  """llvm.parse_assembly(ir, ctx) with the parse outside llvmlite's lock (ctx: a context of this thread's own)."""
  with llvm_ffi.OutputString() as err:
    mod = llvm.ModuleRef(_unlocked("LLVMPY_ParseAssembly")(ctx, ctypes.c_char_p(ir.encode()), err), ctx)
    if err:
      mod.close()
      raise RuntimeError(f"LLVM IR parsing error\n{err}")
  return mod


def _emit(tm: llvm.TargetMachine, mod: llvm.ModuleRef, use_object: bool) -> bytes:
  """tm.emit_object(mod), or tm.emit_assembly(mod)'s bytes (llvmlite's TargetMachine._emit_to_memory), with code
  generation outside llvmlite's lock."""
  with llvm_ffi.OutputString() as err:
    buf = _unlocked("LLVMPY_TargetMachineEmitToMemory")(tm, mod, int(use_object), err)
    if not buf:
      raise RuntimeError(str(err))
  try:
    return ctypes.string_at(llvm_ffi.lib.LLVMPY_GetBufferStart(buf), llvm_ffi.lib.LLVMPY_GetBufferSize(buf))
  finally:
    llvm_ffi.lib.LLVMPY_DisposeMemoryBuffer(buf)


def _assembly_module(asm: str, tm: llvm.TargetMachine) -> str:
  """The IR of a module that is the assembly `asm` (module-level inline assembly, for the target machine `tm`): code
  generation of it is LLVM's assembler, and gives the machine code `asm` was printed from (the same bytes)."""
  esc = asm.replace("\\", "\\5C").replace('"', "\\22").splitlines()
  # (one join, not a string formatted a line: ~7.4 -> 4.6 ms CPU over a GPT training step's 81 kernels)
  body = 'module asm "' + '"\nmodule asm "'.join(esc) + '"\n' if esc else ""
  return f'target triple = "{tm.triple}"\ntarget datalayout = "{tm.target_data}"\n' + body


def _link(engine: llvm.ExecutionEngine, obj: bytes, symbol: str) -> int:
  engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
  engine.finalize_object()
  addr = engine.get_function_address(symbol)
  if not addr:
    raise LLVMCompileError(f"symbol {symbol} not found after linking its object code")
  return addr


class ScratchJit:
  """An MCJIT engine for code that lives only a while (BEAM's candidates): close() frees all of it. MCJIT cannot
  unload one object file, so what is linked into the process's engine stays until the process ends (0.27 MB of
  resident memory a search of a 128x128 matmul, measured before this engine). A kernel made from this engine's code
  must not run after close(): CompiledKernel checks `closed`."""

  def __init__(self, tm: llvm.TargetMachine) -> None:
    self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    self.lock = threading.Lock()
    self.closed = False

  def add_object(self, obj: bytes, symbol: str) -> int:
    """Link object code (LLVMJit.object_code) into this engine; the address of `symbol`."""
    with self.lock:
      if self.closed:
        raise RuntimeError("link into a closed ScratchJit")
      return _link(self.engine, obj, symbol)

  def close(self) -> None:
    """Free the engine and all code linked into it (idempotent)."""
    with self.lock:
      if not self.closed:
        self.closed = True
        self.engine.close()


_JIT: LLVMJit | None = None
_JIT_LOCK = threading.Lock()


def get_jit() -> LLVMJit:
  """The process's JIT (created on first use)."""
  global _JIT
  if _JIT is None:
    with _JIT_LOCK:
      if _JIT is None:
        _JIT = LLVMJit()
  return _JIT

