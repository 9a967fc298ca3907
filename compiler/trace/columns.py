"""The node columns of a batch record: for each node its op, dtype code, arg code, number of sources and its sources'
trace ids, as little-endian u32 bytes (format.py, "batch").

A flush makes them for every node the trace names, which was much of what recording costs: in Python it is a dozen
passes over nodes that left the cache long ago. So the C extension (compiler.trace.native) makes them in one pass
where it is built; `node_columns_py` is the reference, and the fallback, and tests check that both give the same
bytes."""
from __future__ import annotations

import itertools
import operator
from typing import Any, Callable

from compiler.trace.native import SPEEDUPS
from compiler.uop import UOp
from vztrace.format import column_bytes

_OP, _DTYPE, _ARG, _SRC, _TID = (operator.attrgetter(f) for f in ("op", "dtype", "arg", "src", "_tid"))

Columns = tuple[bytes, bytes, bytes, bytes, bytes]


def codes(objs: list, by_id: dict[int, int], code: Callable[[Any], int]) -> list[int]:
  """The codes of objs, looked up by object id in `by_id`; code(o) for an object not seen before (then kept there)."""
  out = list(map(by_id.get, map(id, objs), itertools.repeat(-1)))
  new = out.count(-1)
  if new * 8 > len(out):  # many (a first batch): each distinct object once (deduplicated in C), then all again
    for k, o in dict(zip(map(id, objs), objs)).items():
      if k not in by_id:
        by_id[k] = code(o)
    return list(map(by_id.__getitem__, map(id, objs)))
  i = -1
  for _ in range(new):  # a few: found by searches in C
    i = out.index(-1, i + 1)
    o = objs[i]
    c = by_id.get(id(o))  # seen earlier in objs
    out[i] = by_id[id(o)] = code(o) if c is None else c
  return out


def src_ids(ids: dict[UOp, int], srcs: list[UOp]) -> list[int]:
  """The trace ids of nodes that have one: a kept node's in `ids`, a transient one's on it (compiler.trace.nodes)."""
  out = list(map(ids.get, srcs))
  if None in out:
    i = -1
    for _ in range(out.count(None)):
      i = out.index(None, i + 1)
      t = _TID(srcs[i])
      if t is None:
        raise ValueError("a source node has no trace id")
      out[i] = t[1]
  return out


def node_columns_py(nodes: list[UOp], ids: dict[UOp, int], dtype_ids: dict[int, int], arg_ids: dict[int, int],
                    dtype_code: Callable[[Any], int], arg_code: Callable[[Any], int]) -> Columns:
  """(op, dtype, arg, nsrc, src) of nodes, whose sources all have trace ids; dtypes and args get their codes through
  the by-id tables, and dtype_code/arg_code for one not seen before."""
  srcs = list(map(_SRC, nodes))
  cols = (list(map(_OP, nodes)), codes(list(map(_DTYPE, nodes)), dtype_ids, dtype_code),
          codes(list(map(_ARG, nodes)), arg_ids, arg_code), list(map(len, srcs)),
          src_ids(ids, list(itertools.chain.from_iterable(srcs))))
  return tuple(map(column_bytes, cols))  # type: ignore[return-value]


node_columns_c: Callable[..., Columns] | None = SPEEDUPS.node_columns if SPEEDUPS is not None else None
node_columns: Callable[..., Columns] = node_columns_c or node_columns_py
