"""A small tinygrad-style tensor compiler whose every rewrite, opt, source and timing can be traced (VIZ=1)."""
from compiler.dtype import DType, PtrDType, dtypes
from compiler.jit import JitError, TinyJit
from compiler.rewrite import PatternMatcher, RewriteLoopError, UPat, graph_rewrite
from compiler.tensor import Tensor
from compiler.trace import recorder as _recorder
from compiler.uop import AxisType, GroupOp, KernelInfo, Ops, UOp

__all__ = ["AxisType", "DType", "GroupOp", "JitError", "KernelInfo", "Ops", "PatternMatcher", "PtrDType",
           "RewriteLoopError", "Tensor", "TinyJit", "UOp", "UPat", "dtypes", "graph_rewrite"]


_recorder.arm_from_env()
