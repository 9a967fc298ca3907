"""The trace recorder's C extension, `compiler.trace._speedups` (C versions of its two loops over every node: the walk
in nodes.py and the flush's columns in columns.py), configured for UOp; None where it was not built (`pip install`
builds it where it finds a C compiler), and then the Python versions run; `VIZ_NATIVE=0` asks for them."""
from __future__ import annotations

import os
from types import ModuleType

from compiler.uop import Ops, UOp


def _load() -> ModuleType | None:
  if os.environ.get("VIZ_NATIVE", "1") == "0":  # asked for the Python versions (to compare, or to rule out the C)
    return None
  try:
    from compiler.trace import _speedups
  except ImportError:
    return None
  _speedups.configure(UOp, Ops.BUFFER)  # (the op of nodes that own memory: nodes._OWNS_MEMORY, which imports this)
  return _speedups


SPEEDUPS = _load()
IMPLEMENTATION = "C" if SPEEDUPS is not None else "Python"
