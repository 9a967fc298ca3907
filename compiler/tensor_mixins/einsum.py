"""einsum as a broadcast product and a sum: every operand permuted to one letter order, size-1 dims elsewhere."""
from __future__ import annotations

import string
from typing import Any


def _parse(formula: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
  """Each operand's letters and the output's, with "..." spelled out as letters the formula doesn't use."""
  f = formula.replace(" ", "")
  lhs, arrow, rhs = f.partition("->")
  ins = lhs.split(",")
  if len(ins) != len(shapes):
    raise ValueError(f"Tensor.einsum: formula {formula!r} names {len(ins)} operands, got {len(shapes)}")
  spare = [c for c in string.ascii_letters if c not in f]
  n_ell = max((len(s) - len(t.replace("...", "")) for t, s in zip(ins, shapes) if "..." in t), default=0)
  ell = "".join(spare[:n_ell])
  letters = []
  for t, s in zip(ins, shapes):
    if t.count("...") > 1 or (arrow and rhs.count("...") > 1):
      raise ValueError(f"Tensor.einsum: more than one ... in {formula!r}")
    k = len(s) - len(t.replace("...", ""))
    t = t.replace("...", ell[n_ell - k:] if k else "") if "..." in t else t
    if len(t) != len(s) or not all(c in string.ascii_letters for c in t):
      raise ValueError(f"Tensor.einsum: {t!r} of {formula!r} doesn't fit an operand of shape {s}")
    letters.append(t)
  if arrow:
    out = rhs.replace("...", ell)
  else:
    counts = {c: sum(t.count(c) for t in letters) for c in set("".join(letters))}
    out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
  if len(set(out)) != len(out) or any(c not in "".join(letters) for c in out):
    raise ValueError(f"Tensor.einsum: invalid output {out!r} in {formula!r}")
  return letters, out


def einsum(formula: str, *operands: Any, dtype: Any = None) -> Any:
  """numpy.einsum's value (without repeated letters inside one operand)."""
  if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
    operands = tuple(operands[0])
  if not operands:
    raise ValueError("Tensor.einsum: needs at least one operand")
  letters, out = _parse(formula, [t.shape for t in operands])
  if any(len(set(t)) != len(t) for t in letters):
    raise NotImplementedError(f"Tensor.einsum: a letter repeated inside one operand ({formula!r}: diagonals)")
  sizes: dict[str, int] = {}
  for t, x in zip(letters, operands):
    for c, n in zip(t, x.shape):
      if sizes.get(c, 1) != 1 and n != 1 and sizes[c] != n:
        raise ValueError(f"Tensor.einsum: letter {c!r} has sizes {sizes[c]} and {n} in {formula!r} (shapes "
                         f"{[o.shape for o in operands]})")
      sizes[c] = max(sizes.get(c, 1), n) if n != 0 and sizes.get(c, 1) != 0 else 0
  order = out + "".join(sorted(c for c in sizes if c not in out))
  prod = None
  for t, x in zip(letters, operands):
    x = x.permute(*sorted(range(len(t)), key=lambda i: order.index(t[i]))) if len(t) > 1 else x
    present = sorted(t, key=order.index)
    x = x.reshape(*(x.shape[present.index(c)] if c in present else 1 for c in order)) if order else x
    if dtype is not None:
      x = x.cast(dtype)
    prod = x if prod is None else prod * x
  prod = prod._broadcast_to(tuple(sizes[c] for c in order))
  red = tuple(range(len(out), len(order)))
  return prod.sum(red) if red else prod
