"""einsum as a broadcast product and a sum: every operand permuted to one letter order, size-1 dims elsewhere."""
from __future__ import annotations

import string
from typing import Any

# shape and formula errors are RuntimeErrors, as tinygrad's and torch's (and ValueErrors, as numpy's); loaded after
# compiler.tensor (Tensor.einsum imports this module when first called)
from compiler.tensor import ArgumentError


def _parse(formula: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
  """Each operand's letters and the output's, with "..." spelled out as letters the formula doesn't use."""
  f = formula.replace(" ", "")
  lhs, arrow, rhs = f.partition("->")
  ins = lhs.split(",")
  if len(ins) != len(shapes):
    raise ArgumentError(f"Tensor.einsum: formula {formula!r} names {len(ins)} operands, got {len(shapes)}")
  spare = [c for c in string.ascii_letters if c not in f]
  n_ell = max((len(s) - len(t.replace("...", "")) for t, s in zip(ins, shapes) if "..." in t), default=0)
  ell = "".join(spare[:n_ell])
  letters = []
  for t, s in zip(ins, shapes):
    if t.count("...") > 1 or (arrow and rhs.count("...") > 1):
      raise ArgumentError(f"Tensor.einsum: more than one ... in {formula!r}")
    k = len(s) - len(t.replace("...", ""))
    t = t.replace("...", ell[n_ell - k:] if k else "") if "..." in t else t
    if len(t) != len(s) or not all(c in string.ascii_letters for c in t):
      raise ArgumentError(f"Tensor.einsum: {t!r} of {formula!r} doesn't fit an operand of shape {s}")
    letters.append(t)
  if arrow:
    out = rhs.replace("...", ell)
  else:
    counts = {c: sum(t.count(c) for t in letters) for c in set("".join(letters))}
    out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
  if len(set(out)) != len(out) or any(c not in "".join(letters) for c in out):
    raise ArgumentError(f"Tensor.einsum: invalid output {out!r} in {formula!r}")
  return letters, out


def _diagonal(x: Any, t: str, c: str, formula: str) -> tuple[Any, str]:
  """x restricted to equal indices on the first two axes lettered c (the second goes)."""
  p = t.index(c)
  q = t.index(c, p + 1)
  n = x.shape[p]
  if x.shape[q] != n:
    raise ArgumentError(f"Tensor.einsum: letter {c!r} has sizes {n} and {x.shape[q]} in {formula!r}")
  T = type(x)
  eye = T.eye(n, dtype="bool").reshape(tuple(n if k in (p, q) else 1 for k in range(x.ndim)))
  return eye.where(x, T.full((), 0, x.dtype)).sum(q).cast(x.dtype), t[:q] + t[q + 1:]


def einsum(formula: str, *operands: Any, dtype: Any = None) -> Any:
  """numpy.einsum's value (a letter twice in one operand takes the diagonal)."""
  if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
    operands = tuple(operands[0])
  if not operands:
    raise ArgumentError("Tensor.einsum: needs at least one operand")
  letters, out = _parse(formula, [t.shape for t in operands])
  ops = list(operands)
  for k, t in enumerate(letters):
    while len(set(t)) != len(t):  # a letter twice in one operand: its diagonal
      c = next(c for c in t if t.count(c) > 1)
      ops[k], t = _diagonal(ops[k], t, c, formula)
    letters[k] = t
  operands = tuple(ops)
  sizes: dict[str, int] = {}
  for t, x in zip(letters, operands):
    for c, n in zip(t, x.shape):
      if sizes.get(c, 1) != 1 and n != 1 and sizes[c] != n:
        raise ArgumentError(f"Tensor.einsum: letter {c!r} has sizes {sizes[c]} and {n} in {formula!r} (shapes "
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
