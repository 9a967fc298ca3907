"""The kernel optimizer: `Kernel` + `OptOps` (apply_opt, shift_to, colors), heuristics, and BEAM search.

Nothing here compiles or runs a kernel: BEAM is given its evaluator (compiler.engine, the driver, passes the
runtime's), and which optimizer runs on a kernel (NOOPT, BEAM) is the driver's decision."""
from compiler.opt.heuristic import hand_coded_optimizations
from compiler.opt.kernel import Kernel, KernelOptError, Opt, OptOps
from compiler.opt.search import beam_search
from compiler.opt.target import Target, host_target

__all__ = ["Kernel", "KernelOptError", "Opt", "OptOps", "Target", "beam_search", "hand_coded_optimizations",
           "host_target"]
