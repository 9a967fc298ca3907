"""A new buffer's memory is made without numpy's transparent huge page advice (issue 29: MNIST step's first call
spent 0.9-1.5 s of system time faulting in 2 MB pages that the VM's host had to back anew), while the advice stays
numpy's for every other array of the program. Read from the kernel's own account of the mapping (/proc/self/smaps:
`hg` in VmFlags is madvise(MADV_HUGEPAGE)); the memory is mapped, never touched."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from compiler.dtype import dtypes
from compiler.runtime import buffer as bufmod
from compiler.runtime.buffer import Buffer

pytestmark = pytest.mark.usefixtures("fresh_caches")

SMAPS = Path("/proc/self/smaps")
BIG = 16 << 20  # float32 elements: 64 MB, above glibc's largest mmap threshold (32 MB), so a mapping of its own


def advised(addr: int) -> bool:
  """Whether the mapping holding the middle of the array at `addr` has the huge page advice (numpy advises from the
  array's second page on: its first is shared with malloc's header)."""
  addr += BIG * 2
  start = end = None
  for line in SMAPS.read_text().splitlines():
    head = line.split(" ", 1)[0]
    if "-" in head and not head.endswith(":"):
      lo, hi = (int(x, 16) for x in head.split("-"))
      start, end = lo, hi
    elif line.startswith("VmFlags:") and start is not None and start <= addr < end:
      return " hg" in f" {line.split(':', 1)[1]}"
  raise AssertionError(f"no mapping holds {addr:#x}")


def numpy_advises() -> bool:
  """Whether numpy gives a big array of its own the advice here (Linux, THP there, numpy's switch on)."""
  if not SMAPS.exists() or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
    return False
  a = np.zeros(BIG, dtype=np.float32)
  return advised(a.ctypes.data)


needs_advice = pytest.mark.skipif(not numpy_advises(), reason="numpy gives no huge page advice here")


@needs_advice
@pytest.mark.parametrize("zero", [True, False])
def test_a_big_buffer_is_made_without_the_huge_page_advice(zero):
  b = Buffer(dtypes.float32, BIG).ensure_allocated(zero=zero)
  assert not advised(b.addr)
  assert not b.np[:: 1 << 16].any() or not zero  # (zeros where asked: the first touch reads them)


@needs_advice
def test_a_copied_in_buffer_too():
  src = np.ones(BIG, dtype=np.float32)  # (numpy's own array: advised)
  assert advised(src.ctypes.data)
  b = Buffer(dtypes.float32, BIG).copyin(src)
  assert not advised(b.addr)
  assert b.np[-1] == 1


@needs_advice
def test_numpy_keeps_its_advice_for_other_arrays():
  Buffer(dtypes.float32, BIG).ensure_allocated()
  assert advised(np.zeros(BIG, dtype=np.float32).ctypes.data)  # the switch is put back after each buffer


def test_numpys_own_switch_in_the_environment_is_left_to_decide(monkeypatch):
  monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
  assert bufmod._madvise_switch() is None
  monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE")
  assert bufmod._madvise_switch() is not None or not hasattr(np, "_core")
