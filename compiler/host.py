"""The CPU kernels are compiled for, as LLVM names it. The one place that asks llvmlite, so the JIT's target machine,
the optimizer's `Target` (compiler/opt/target.py) and the intrinsics codegen picks (compiler/codegen/llvmir.py) see
the same CPU. TARGET_ISA=sse|avx2|avx512 compiles for an older x86 ISA than the host's (`ISA_PRESETS`), so one machine
can run what an SSE or AVX2 machine would; `host` (the default) is the host CPU itself. TARGET_ISA=avx512fp16 (alias
sapphirerapids) is a CPU with native half instructions, which few hosts have: with COMPILE_ONLY=1 any host compiles
for any preset (the kernels' IR and assembly can be made, running one is refused: compiler/runtime/llvm.py).
Outside the pipeline's layers (tests/project/test_import_direction.py), so opt, codegen and runtime may all import
it."""
from __future__ import annotations

import functools
import os
import platform

# the features an ISA's code must not use: a CPU name implies features (skylake-avx512 has AVX-512; x86-64 on its
# own is only SSE2 but LLVM may still be told more), so each preset turns off explicitly what is wider than it
_NO_AVX512 = "-avx512f,-avx512vl,-avx512bw,-avx512dq,-avx512cd,-avx512vnni,-avx512bf16,-avx512fp16,-avx10.1,-avx10.2"
_NO_AVX = "-avx,-avx2,-fma,-f16c,-avxvnni,-vaes,-vpclmulqdq," + _NO_AVX512

# name -> (LLVM CPU name, LLVM feature string): the x86 machines the bench's targets must hold on. SSE is a real core
# (Nehalem: SSE4.2), not the generic x86-64, whose tuning made the code generator and the assembler of a traced compile
# pad loops with different NOPs (tests/compiler/test_llvm_texts.py: the code run is the assembly shown, byte for byte)
ISA_PRESETS: dict[str, tuple[str, str]] = {
  "sse": ("nehalem", "+sse,+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16," + _NO_AVX),
  "avx2": ("haswell", "+sse4.2,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe," + _NO_AVX512),
  "avx512": ("skylake-avx512", "+sse4.2,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe,"
                               "+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512cd,-avx512fp16,-avx10.1,-avx10.2"),
  # native half arithmetic and conversions (AVX512-FP16), whose half results must be every other CPU's
  # (compiler/codegen/llvmir.py); the features its code may use are all listed, so a host that lacks one cannot run it
  "avx512fp16": ("sapphirerapids", "+sse4.2,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe,+avx512f,+avx512vl,"
                                   "+avx512bw,+avx512dq,+avx512cd,+avx512vbmi,+avx512vbmi2,+avx512bitalg,"
                                   "+avx512vpopcntdq,+avx512ifma,+avx512vnni,+avx512bf16,+avx512fp16,+avxvnni,+gfni,"
                                   "+vaes,+vpclmulqdq,-avx10.1,-avx10.2"),
}
ISA_ALIASES = {"sapphirerapids": "avx512fp16"}  # other names TARGET_ISA accepts for a preset
HOST = "host"


@functools.lru_cache(None)
def _native_cpu() -> tuple[str, str]:
  """(name, features) of the machine's own CPU as LLVM names them: ("znver5", "+avx512f,+avx2,...")."""
  try:
    import llvmlite.binding as llvm
  except ImportError:  # nothing compiles then, but the machine's name still keys the optimizer's caches
    return platform.machine(), platform.processor()
  try:
    features = llvm.get_host_cpu_features().flatten()
  except RuntimeError:  # LLVM cannot list this CPU's features: code for its baseline
    features = ""
  return llvm.get_host_cpu_name(), features


def enabled(features: str) -> frozenset[str]:
  """The features a feature string turns on, without their "+" ("avx2", ...)."""
  return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


def preset(isa: str) -> tuple[str, str]:
  """(LLVM CPU name, features) of TARGET_ISA's preset `isa` or its alias; a ValueError names the presets."""
  isa = isa.strip().lower()
  if ISA_ALIASES.get(isa, isa) not in ISA_PRESETS:
    raise ValueError(f"TARGET_ISA={isa!r} is not one of {', '.join([HOST, *ISA_PRESETS, *ISA_ALIASES])}")
  return ISA_PRESETS[ISA_ALIASES.get(isa, isa)]


def cannot_run(isa: str) -> str | None:
  """Why this machine cannot run code compiled for TARGET_ISA's preset `isa` (the features it lacks), or None."""
  missing = enabled(preset(isa)[1]) - enabled(_native_cpu()[1])
  if not missing:
    return None
  return f"TARGET_ISA={isa.strip().lower()}: this CPU ({_native_cpu()[0]}) lacks {', '.join(sorted(missing))}"


def compile_only() -> bool:
  """COMPILE_ONLY=1: kernels are compiled (their IR and assembly made) for TARGET_ISA's preset, whichever CPU this
  is, and never run."""
  return os.environ.get("COMPILE_ONLY", "").strip() not in ("", "0")


@functools.lru_cache(None)
def host_cpu() -> tuple[str, str]:
  """(name, features) of the CPU kernels are compiled for: the host's, or TARGET_ISA's preset, which the host must
  be able to run unless COMPILE_ONLY=1 (a ValueError names what it lacks, or the presets when TARGET_ISA names none)."""
  isa = os.environ.get("TARGET_ISA", HOST).strip().lower() or HOST
  if isa == HOST:
    return _native_cpu()
  cpu, features = preset(isa)
  why = cannot_run(isa)
  if why is not None and not compile_only():
    raise ValueError(f"{why} (COMPILE_ONLY=1 compiles for it without running)")
  return cpu, features


def vector_shape(features: str) -> tuple[int, int]:
  """(float32 lanes, vector registers) of a CPU from LLVM's feature string: AVX-512 has 32 registers of 16
  lanes, AVX/AVX2 16 of 8, SSE 16 of 4 (8 on 32-bit x86, which we do not target); NEON 32 of 4."""
  feats = set(features.split(","))
  if "+avx512f" in feats:
    return 16, 32
  if "+avx" in feats:
    return 8, 16
  return 4, 32 if "+neon" in feats else 16


def masked_vector_moves() -> bool:
  """Whether the CPU kernels are compiled for loads a vector under a mask in one instruction (AVX's vmaskmov,
  AVX-512's masked moves); SSE has none: LLVM splits a masked load into a branch a lane."""
  return bool({"avx", "avx512f"} & enabled(host_cpu()[1]))


def vector_bytes() -> int:
  """The widest vector register of the CPU kernels are compiled for, in bytes (64 with AVX-512, 32 AVX, 16 SSE)."""
  return 4 * vector_shape(host_cpu()[1])[0]
