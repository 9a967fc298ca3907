"""A traced compile's code is assembled from the assembly it records (compiler.runtime.llvm): one run of LLVM's code
generator, so the assembly a trace shows is the code that runs. These compare that code with what the code generator
makes directly, on this CPU, whichever it is."""
from __future__ import annotations

import warnings

import llvmlite.binding as llvm
import numpy as np
import pytest
from support.codegen_helpers import (
  FLOAT_EXACT,
  INT_OPS,
  UP,
  N,
  _inputs,
  alu_kernel,
  broadcast,
  elementwise,
  expected,
  matmul,
  pad1d,
  process_libcalls,
  run,
  split,
)

from compiler import Tensor
from compiler.codegen import get_program
from compiler.dtype import dtypes
from compiler.host import ISA_PRESETS
from compiler.runtime.compiled import CompiledKernel
from compiler.runtime.llvm import _assembly_module, get_jit
from compiler.uop import Ops, UOp, toposort

KERNELS = {"elementwise": lambda: elementwise(3, 40), "broadcast": lambda: broadcast(4, 16),
           "matmul": lambda: split(matmul(32, 32, 32), 1, 8, UP), "pad": lambda: pad1d(21, 3)}


def _text_sections(obj: bytes) -> dict[bytes, bytes]:
  return {s.name(): s.data() for s in llvm.ObjectFileRef.from_data(obj).sections() if s.is_text()}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_assembled_code_is_the_code_generators(name):
  # the .text bytes of the object assembled from the assembly text are those the code generator emits itself
  prg = get_program(KERNELS[name]())
  jit = get_jit()
  direct = jit.object_code(prg.src, prg.fname, "k_direct")
  with jit.lock:
    _, asm = jit._texts(jit._module(prg.src, prg.fname, "k_direct"))
    assembled = jit.tm.emit_object(llvm.parse_assembly(_assembly_module(asm, jit.tm)))
  got, want = _text_sections(assembled), _text_sections(direct)
  assert want and any(want.values())
  assert got == want


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_jits_assembler_gives_the_code_generators_object(name):
  # a traced compile assembles with a target machine of its own at opt level 0 (less pipeline to set up): the whole
  # object it makes is the one the JIT's own target machine (opt level 3) assembles, and its code the direct one's
  prg = get_program(KERNELS[name]())
  jit = get_jit()
  with jit.lock:
    _, asm = jit._texts(jit._module(prg.src, prg.fname, "k_asm"))
    mine = jit._assemble(asm)
    at3 = jit.tm.emit_object(llvm.parse_assembly(_assembly_module(asm, jit.tm)))
  assert mine == at3
  assert _text_sections(mine) == _text_sections(jit.object_code(prg.src, prg.fname, "k_asm"))


def _half_kernels() -> list[UOp]:
  """Half kernels (casts to ints, arithmetic, a sum of products): native AVX512-FP16 instructions where it has them."""
  a, b = Tensor(np.arange(64, dtype=np.float16)), Tensor(np.ones(64, np.float16))
  return [si.ast for t in (a.cast(dtypes.int16), a * b + a, (a * b).sum()) for si in t.schedule()]


@pytest.mark.parametrize("isa", sorted(ISA_PRESETS))
def test_assembled_code_is_the_code_generators_for_every_preset(isa):
  # compiled for each TARGET_ISA preset, whether this host can run it or not (nothing runs): the assembly's round trip
  # holds for every preset's instructions, AVX512-FP16's (vaddph, vcvtph2psx, ...) too
  jit = get_jit()
  cpu, features = ISA_PRESETS[isa]
  tm, tm0 = (jit.target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc="default",
                                              codemodel="jitdefault", jit=True) for opt in (3, 0))
  for ast in [KERNELS["matmul"](), KERNELS["pad"](), *_half_kernels()]:
    prg = get_program(ast)
    objs = []
    for assembler in (None, tm, tm0):  # (tm0: as LLVMJit._assemble, at opt level 0)
      mod = llvm.parse_assembly(prg.src)
      mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
      with jit.lock:
        jit._optimize(mod, tm)
        if assembler is None:
          objs.append(_text_sections(tm.emit_object(mod)))
        else:
          objs.append(_text_sections(assembler.emit_object(llvm.parse_assembly(_assembly_module(tm.emit_assembly(mod),
                                                                                               tm)))))
    assert objs[0] and any(objs[0].values())
    assert objs[1] == objs[0] and objs[2] == objs[0], (isa, prg.fname)


def test_assembly_module_escapes_quotes_and_backslashes():
  asm = '\t.section\t.rodata,"a",@progbits\n\t.globl\tstr_k\nstr_k:\n\t.ascii\t"a\\\\b\\"c\\t"\n'
  jit = get_jit()
  with jit.lock:
    obj = jit.tm.emit_object(llvm.parse_assembly(_assembly_module(asm, jit.tm)))
  data = {s.name(): s.data() for s in llvm.ObjectFileRef.from_data(obj).sections()}
  assert data[b".rodata"] == b'a\\b"c\t'


def _traced_run(ast: UOp, *arrays: np.ndarray) -> list[np.ndarray]:
  """run() with the code a traced compile makes (assembled from its assembly), compiled anew (a comment in the IR:
  not the cached compile of the same kernel untraced)."""
  prg = get_program(ast)
  jf, cached = get_jit().compile(prg.src + "; traced\n", prg.fname, want_text=True)
  assert not cached and prg.fname in jf.asm
  arrs = [np.array(a, copy=True) for a in arrays]
  CompiledKernel(prg, jf.address, 0.0, None)(arrs)
  return arrs


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_traced_kernel_computes_what_an_untraced_one_does(name):
  ast = KERNELS[name]()
  rng = np.random.default_rng(0)
  arrays = [rng.standard_normal(n).astype(np.float32) for n in _sizes(ast)]
  for g, w in zip(_traced_run(ast, *arrays), run(ast, *arrays)):
    np.testing.assert_array_equal(g, w)


def _sizes(ast: UOp) -> list[int]:
  return [u.dtype.size for u in sorted((u for u in toposort(ast) if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)]


ALU_CASES = [(op, dt) for op in INT_OPS for dt in (dtypes.int8, dtypes.uint32, dtypes.int64)] + \
  [(op, dt) for op in FLOAT_EXACT for dt in dtypes.floats]


@pytest.mark.parametrize("op,dt", ALU_CASES, ids=lambda x: str(getattr(x, "name", x)))
def test_traced_alu_kernels_give_the_ir_semantics(op, dt):
  """As test_llvm_runtime's ALU tests, on traced code: constant pools (inf, nan, -0.0, float16's conversions), wide
  integer ops and divisions by zero come through the assembler too."""
  ins = _inputs(op, dt)
  want = expected(op, dt, ins)
  got = _traced_run(alu_kernel(op, dt, len(ins)), np.zeros(N, want.dtype), *ins)[0]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # (nan == nan comparisons)
    np.testing.assert_array_equal(got, want)


_JITS: list = []  # (the JITs the test below makes: kept for the process, as the process JIT is)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_compile_apart_makes_the_texts_and_code_of_the_engines(name):
  """compile_traced (its own LLVMContext and target machines, outside llvmlite's lock: what compile-ahead's two threads
  run at once) gives the optimized IR, the assembly and the code that compile(want_text=True) gives: the same texts,
  and the assembly's object the .text bytes the engine's code generator emits for the same symbol."""
  from compiler.runtime.llvm import LLVMJit
  prg = get_program(KERNELS[name]())
  with process_libcalls():
    a, b = LLVMJit(), LLVMJit()
    _JITS.extend((a, b))
  want, _ = a.compile(prg.src, prg.fname, want_text=True)
  symbol = b.symbol_for(prg.src, prg.fname)
  assert symbol == want.symbol  # (each JIT's first: numbered alike)
  got, cached = b.compile_traced(prg.src, prg.fname, symbol)
  assert not cached and got.texts == want.texts and got.symbol == want.symbol
  assert b.symbol_for(prg.src, prg.fname) is None and b.compile_traced(prg.src, prg.fname, symbol) == (got, True)
  # the code linked is the engine's code generator's for that symbol
  assert _text_sections(b._assemble(got.texts[1])) == _text_sections(a.object_code(prg.src, prg.fname, symbol))
