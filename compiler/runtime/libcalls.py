"""The runtime functions LLVM's code may call that the process need not have: half <-> float conversions.

On a CPU without F16C (SSE-only x86: TARGET_ISA=sse, older or low-power cores, VMs that hide it) LLVM lowers every
half value to float and back through the libcalls `__extendhfsf2` and `__truncsfhf2`. They live in libgcc_s (GCC 12
and later), which a Python process need not have loaded, and MCJIT resolves a missing symbol to address 0: every
half kernel crashed. They are defined here in LLVM IR (integer bit operations and one exact float add, after Fabian
Giesen's round-to-nearest-even conversions), compiled into the process's JIT engine, and their addresses registered
with `llvm.add_symbol`, so kernels linked into any engine (BEAM's scratch engines included) find them.
NaNs come out quiet with their payload's top bits, as F16C's instructions give them."""
from __future__ import annotations

import llvmlite.binding as llvm

NAMES = ("__extendhfsf2", "__truncsfhf2")

IR = """
define float @__extendhfsf2(half %h) nounwind {
  %b = bitcast half %h to i16
  %x = zext i16 %b to i32
  %abs = and i32 %x, 32767
  %o0 = shl i32 %abs, 13
  %exp = and i32 %o0, 260046848          ; the half's exponent bits, in place
  %o1 = add i32 %o0, 939524096           ; rebias: (127 - 15) << 23
  %infnan = icmp eq i32 %exp, 260046848
  %o2 = add i32 %o1, 939524096           ; an Inf or NaN: the float's all-ones exponent
  %m = and i32 %x, 1023
  %isnan = icmp ne i32 %m, 0
  %q = or i32 %o2, 4194304               ; quiet bit
  %special = select i1 %isnan, i32 %q, i32 %o2
  %sub = icmp eq i32 %exp, 0
  %o3 = add i32 %o1, 8388608             ; a subnormal or zero: 2^-14 (1 + m/1024), less 2^-14 below (exact)
  %o3f = bitcast i32 %o3 to float
  %renorm = fsub float %o3f, 0x3F10000000000000
  %renormb = bitcast float %renorm to i32
  %v1 = select i1 %sub, i32 %renormb, i32 %o1
  %v = select i1 %infnan, i32 %special, i32 %v1
  %sign = and i32 %x, 32768
  %s = shl i32 %sign, 16
  %r = or i32 %v, %s
  %f = bitcast i32 %r to float
  ret float %f
}

define half @__truncsfhf2(float %x) nounwind {
  %f0 = bitcast float %x to i32
  %sign = and i32 %f0, -2147483648
  %f = xor i32 %f0, %sign
  %big = icmp uge i32 %f, 1199570944     ; 65536 or more (65520 and up round to Inf below), Inf, NaN
  %nan = icmp ugt i32 %f, 2139095040
  %mant = lshr i32 %f, 13
  %payload = and i32 %mant, 511
  %nanbits = or i32 %payload, 32256      ; quiet NaN
  %special = select i1 %nan, i32 %nanbits, i32 31744
  %small = icmp ult i32 %f, 947912704    ; below 2^-14: a half subnormal or zero
  %ff = bitcast i32 %f to float
  %sum = fadd float %ff, 5.000000e-01    ; the float add rounds to the subnormal's last bit (ties to even)
  %sb = bitcast float %sum to i32
  %subn = sub i32 %sb, 1056964608
  %odd = and i32 %mant, 1
  %n1 = add i32 %f, -939520001           ; rebias ((15 - 127) << 23) and add 0xfff: round half up...
  %n2 = add i32 %n1, %odd                ; ...to even
  %norm = lshr i32 %n2, 13
  %lo = select i1 %small, i32 %subn, i32 %norm
  %o = select i1 %big, i32 %special, i32 %lo
  %s16 = lshr i32 %sign, 16
  %r = or i32 %o, %s16
  %t = trunc i32 %r to i16
  %h = bitcast i16 %t to half
  ret half %h
}
"""


def register(engine: llvm.ExecutionEngine) -> dict[str, int]:
  """Compile the functions into `engine` (the process's JIT, which lives as long as the process) and register their
  addresses for every engine's symbol resolution; {name: address}."""
  mod = llvm.parse_assembly(IR)
  mod.verify()
  engine.add_module(mod)
  engine.finalize_object()
  addrs = {name: engine.get_function_address(name) for name in NAMES}
  for name, addr in addrs.items():
    if not addr:
      raise RuntimeError(f"the runtime function {name} did not compile")
    llvm.add_symbol(name, addr)
  return addrs
