"""A small tinygrad-style tensor compiler whose every rewrite, opt, source and timing can be traced (VIZ=1).

The public names are imported on first use (PEP 562), so `python -m compiler.trace show|compare|export`, which reads
trace files and needs none of the compiler, does not import it all first (~0.25 s of every such command's start)."""
import importlib
import os
from typing import Any

# public name -> the module that defines it
_PUBLIC = {"DType": "compiler.dtype", "PtrDType": "compiler.dtype", "dtypes": "compiler.dtype",
           "JitError": "compiler.jit", "TinyJit": "compiler.jit", "PatternMatcher": "compiler.rewrite",
           "RewriteLoopError": "compiler.rewrite", "UPat": "compiler.rewrite", "graph_rewrite": "compiler.rewrite",
           "Tensor": "compiler.tensor", "AxisType": "compiler.uop", "GroupOp": "compiler.uop",
           "KernelInfo": "compiler.uop", "Ops": "compiler.uop", "UOp": "compiler.uop"}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
  module = _PUBLIC.get(name)
  if module is None:
    raise AttributeError(f"module 'compiler' has no attribute {name!r}")
  value = getattr(importlib.import_module(module), name)
  globals()[name] = value  # (found as a plain attribute from now on)
  return value


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(_PUBLIC))


if os.environ.get("VIZ"):  # (recording starts with the first traced event: `import compiler` arms it)
  from compiler.trace import recorder as _recorder
  _recorder.arm_from_env()
