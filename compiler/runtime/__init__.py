"""Runtime: numpy reference interpreter, buffers, and the LLVM JIT with timed execution (imported lazily)."""
from typing import Any


def __getattr__(name: str) -> Any:
  if name in ("compile_kernel", "CompiledKernel", "KernelTiming"):
    from compiler.runtime import compiled
    return getattr(compiled, name)
  raise AttributeError(f"module 'compiler.runtime' has no attribute {name!r}")
