"""The half <-> float conversions the JIT provides for CPUs without F16C (compiler/runtime/libcalls.py), called the
way LLVM's code calls them, on every half and on floats around every rounding boundary, against numpy's conversions
(correctly rounded, ties to even). A kernel compiled for such a CPU runs on them: tests/compiler/test_host_isa.py."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from compiler.runtime.libcalls import NAMES
from compiler.runtime.llvm import get_jit

# loops over arrays that call the conversions as extern functions, as a kernel compiled without F16C does
LOOPS = """
declare float @__extendhfsf2(half)
declare half @__truncsfhf2(float)

define void @{name}(ptr %in, ptr %out, i32 %n) {{
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i1, %body ]
  %c = icmp slt i32 %i, %n
  br i1 %c, label %body, label %done
body:
  %pi = getelementptr {src}, ptr %in, i32 %i
  %x = load {src}, ptr %pi
  {convert}
  %po = getelementptr {dst}, ptr %out, i32 %i
  store {dst} %y, ptr %po
  %i1 = add i32 %i, 1
  br label %loop
done:
  ret void
}}
"""
EXTEND = LOOPS.format(name="extend_all", src="i16", dst="float",
                      convert="%h = bitcast i16 %x to half\n  %y = call float @__extendhfsf2(half %h)")
TRUNC = LOOPS.format(name="trunc_all", src="float", dst="i16",
                     convert="%h = call half @__truncsfhf2(float %x)\n  %y = bitcast half %h to i16")


def _loop(ir: str, name: str, src: np.ndarray, out_dtype) -> np.ndarray:
  jf, _ = get_jit().compile(ir, name, want_text=True)
  assert "__" in jf.asm and all(n in ir for n in NAMES)  # the calls are there, not folded away
  out = np.zeros(len(src), out_dtype)
  fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(jf.address)
  fn(src.ctypes.data, out.ctypes.data, len(src))
  return out


def _same(got: np.ndarray, want: np.ndarray, mant_bits: int) -> None:
  """Bit for bit, but NaNs: a NaN for a NaN, quiet, with the payload's top bits kept."""
  nan = np.isnan(want)
  np.testing.assert_array_equal(np.isnan(got), nan)
  assert (got[~nan].view(np.uint32 if got.itemsize == 4 else np.uint16) ==
          want[~nan].view(np.uint32 if want.itemsize == 4 else np.uint16)).all()
  bits = got[nan].view(np.uint32 if got.itemsize == 4 else np.uint16).astype(np.int64)
  assert ((bits >> (mant_bits - 1)) & 1).all()  # quiet


def test_every_half_extends_exactly():
  halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
  got = _loop(EXTEND, "extend_all", halves, np.float32)
  _same(got, halves.view(np.float16).astype(np.float32), 23)
  nan = np.isnan(halves.view(np.float16))
  # a NaN's payload goes to the float's top mantissa bits (quieted): 0x7c01 -> 0x7fc02000
  assert (got[nan].view(np.uint32) & 0x3FE000 == (halves[nan].astype(np.uint32) & 0x1FF) << 13).all()


def test_floats_round_to_the_nearest_half_ties_to_even():
  rng = np.random.default_rng(3)
  h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
  h = h[np.isfinite(h)].astype(np.float32)
  h.sort()
  mids = ((h[:-1].astype(np.float64) + h[1:]) / 2).astype(np.float32)  # ties (exact in float32)
  around = np.concatenate([np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.996, 65520, 65536, 1e30, 6e-8,
                      5.96e-8, 2.98e-8, 2.9802322e-8, 1e-45, -1e-45, 6.1035156e-05, 6.1035153e-05], np.float32)
  payload_nans = np.array([0x7F800001, 0x7FC00000, 0xFFA00000, 0x7F802000, 0x7FBFFFFF], np.uint32).view(np.float32)
  randoms = rng.integers(0, 1 << 32, 400_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
  floats = np.concatenate([h, mids, around, special, payload_nans, randoms])
  got = _loop(TRUNC, "trunc_all", floats, np.uint16).view(np.float16)
  with np.errstate(over="ignore"):
    want = floats.astype(np.float16)
  _same(got, want, 10)


@pytest.mark.parametrize("name", NAMES)
def test_the_conversions_are_registered_for_every_engine(name):
  import llvmlite.binding as llvm
  assert llvm.address_of_symbol(name) == get_jit().libcalls[name] != 0
