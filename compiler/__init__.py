"""A small tinygrad-style tensor compiler whose every rewrite, opt, source and timing can be traced (VIZ=1)."""
from compiler.dtype import DType, PtrDType, dtypes
from compiler.rewrite import PatternMatcher, RewriteLoopError, UPat, graph_rewrite
from compiler.trace import recorder as _recorder
from compiler.uop import AxisType, GroupOp, KernelInfo, Ops, UOp

__all__ = ["AxisType", "DType", "GroupOp", "KernelInfo", "Ops", "PatternMatcher", "PtrDType", "RewriteLoopError",
           "UOp", "UPat", "dtypes", "graph_rewrite"]


def __getattr__(name: str):
  if name == "Tensor":  # imported lazily: the IR does not need the front end
    from compiler.tensor import Tensor
    return Tensor
  raise AttributeError(f"module 'compiler' has no attribute {name!r}")


_recorder.arm_from_env()
