"""A small tinygrad-style tensor compiler whose every rewrite, opt, source and timing can be traced (VIZ=1)."""
# ruff: noqa: E402 (the compiler's imports come after the tools' exec below)
import os as _os
import sys as _sys

# compiler.trace.cli.TOOLS' names: the commands `python -m compiler.trace` hands to `python -m viz_server.tools`
_TOOLS = ("show", "compare", "export")


def _tool_argv(orig: list[str], argv: list[str]) -> list[str] | None:
  """The tool's arguments where this interpreter was started as `python [OPTIONS] -m compiler.trace TOOL ...` (orig:
  sys.orig_argv; argv: sys.argv while the packages of a `-m` module are imported, '-m' first), else None."""
  n = len(argv)
  if argv[:1] != ["-m"] or len(orig) < n + 1 or orig[len(orig) - n + 1:] != argv[1:] or argv[1:2] == []:
    return None
  mod, before = orig[len(orig) - n], orig[len(orig) - n - 1]
  if mod != "-mcompiler.trace" and (mod, before) != ("compiler.trace", "-m"):
    return None
  return argv[1:] if argv[1] in _TOOLS else None


_args = _tool_argv(getattr(_sys, "orig_argv", []), _sys.argv) if _os.name == "posix" and _sys.executable else None
if _args is not None:
  # the tool runs as its own interpreter (the compiler never imports viz_server): exec'd here, before the compiler's
  # modules are imported for nothing (~0.2 s of CPU, numpy most of it), not by compiler/trace/__main__.py after them
  _os.execv(_sys.executable, [_sys.executable, "-m", "viz_server.tools", *_args])

from compiler.dtype import DType, PtrDType, dtypes
from compiler.jit import JitError, TinyJit
from compiler.rewrite import PatternMatcher, RewriteLoopError, UPat, graph_rewrite
from compiler.tensor import Tensor
from compiler.trace import recorder as _recorder
from compiler.uop import AxisType, GroupOp, KernelInfo, Ops, UOp

__all__ = ["AxisType", "DType", "GroupOp", "JitError", "KernelInfo", "Ops", "PatternMatcher", "PtrDType",
           "RewriteLoopError", "Tensor", "TinyJit", "UOp", "UPat", "dtypes", "graph_rewrite"]


_recorder.arm_from_env()
