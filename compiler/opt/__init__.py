"""The kernel optimizer: `Kernel` + `OptOps` (apply_opt, shift_to, colors), heuristics, and BEAM search."""
from compiler.opt.heuristic import hand_coded_optimizations
from compiler.opt.kernel import Kernel, KernelOptError, Opt, OptOps
from compiler.opt.search import beam_search, optimize_kernel
from compiler.opt.target import Target, host_target

__all__ = ["Kernel", "KernelOptError", "Opt", "OptOps", "Target", "beam_search", "hand_coded_optimizations",
           "host_target", "optimize_kernel"]
