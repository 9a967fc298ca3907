"""The benchmarks' tables: a header line over fixed-width columns, one line a row."""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence


def format_table(cols: Sequence[tuple[str, str]], rows: Iterable[Sequence[Any]], sep: str = " ") -> str:
  """cols: (header, format spec of the column's values, e.g. '>9.2f' or '<12'); a header takes its spec's alignment
  and width (left-aligned without one)."""
  heads = []
  for head, spec in cols:
    align, width = re.match(r"([<>^]?)(\d*)", spec).groups()  # type: ignore[union-attr]
    heads.append(format(head, (align or "<") + width))
  lines = [sep.join(heads).rstrip()]
  for row in rows:
    if len(row) != len(cols):
      raise ValueError(f"a row of {len(row)} values for {len(cols)} columns")
    lines.append(sep.join(format(v, spec) for v, (_, spec) in zip(row, cols)).rstrip())
  return "\n".join(lines)
