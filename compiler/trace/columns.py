"""The node columns of a batch record: for each node its op, dtype code, arg code, number of sources and its sources'
trace ids, as little-endian u32 bytes (format.py, "batch"), made from the nodes' keys (compiler.trace.nodes:
`cons_key(op, dtype, source ids, arg)`), so that a flush reads no UOp.

A flush makes them for every node the trace names: each column is one `map` over the keys, in C; a dtype's code is
looked up by its number, an arg's by object identity, so a text is made once per object."""
from __future__ import annotations

import itertools
import operator
from typing import Any, Callable

from vztrace.format import column_bytes

_OP, _DTYPE, _SRC, _ARG = (operator.itemgetter(i) for i in range(4))  # a key's order (compiler.trace.nodes)

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


def node_columns(keys: list[tuple], dtype_codes: list[int], arg_ids: dict[int, int],
                 arg_code: Callable[[Any], int]) -> Columns:
  """(op, dtype, arg, nsrc, src) of the nodes with these keys; a dtype's code is dtype_codes[its number in the key],
  an arg's is looked up in the by-id table (whose objects the caller keeps alive, so that no id is reused), and
  arg_code makes the code of one not seen before."""
  srcs = list(map(_SRC, keys))
  cols = (list(map(_OP, keys)), list(map(dtype_codes.__getitem__, map(_DTYPE, keys))),
          codes(list(map(_ARG, keys)), arg_ids, arg_code), list(map(len, srcs)),
          list(itertools.chain.from_iterable(srcs)))
  return tuple(map(column_bytes, cols))  # type: ignore[return-value]
