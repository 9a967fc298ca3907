"""The host CPU as LLVM names it. The one place that asks llvmlite, so the JIT's target machine, the optimizer's
`Target` (compiler/opt/target.py) and the intrinsics codegen picks (compiler/codegen/llvmir.py) see the same CPU.
Outside the pipeline's layers (tests/test_import_direction.py), so opt, codegen and runtime may all import it."""
from __future__ import annotations

import functools
import platform


@functools.lru_cache(None)
def host_cpu() -> tuple[str, str]:
  """(name, features) of the host CPU as LLVM names them: ("skylake-avx512", "+avx512f,+avx2,...")."""
  try:
    import llvmlite.binding as llvm
  except ImportError:  # nothing compiles then, but the machine's name still keys the optimizer's caches
    return platform.machine(), platform.processor()
  try:
    features = llvm.get_host_cpu_features().flatten()
  except RuntimeError:  # LLVM cannot list this CPU's features: code for its baseline
    features = ""
  return llvm.get_host_cpu_name(), features
