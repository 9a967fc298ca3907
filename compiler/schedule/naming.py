"""Kernel names: `E_`/`r_` and the range sizes, unique per distinct AST (named by rangeify, and by fuse for joins)."""
from __future__ import annotations

from compiler.uop import FastOps, UOp, toposort

# kernel name -> the (nameless) ASTs that got it, so a different AST with the same shape gets "n1", "n2", ...
# (strong keys: nameless ASTs are transient; the table is bounded instead)
_names: dict[str, dict[UOp, int]] = {}
_MAX_NAMED = 20000


def _base_name(ast: UOp) -> str:
  nodes = toposort(ast)
  rngs = sorted((u for u in nodes if u.op is FastOps.RANGE), key=lambda r: r.arg[0])
  prefix = "r" if any(u.op is FastOps.REDUCE for u in nodes) else "E"
  return f"{prefix}_" + ("_".join(str(r.src[0].arg) for r in rngs) or "1")


def unique_kernel_name(ast: UOp) -> str:
  """`E_`/`r_` + the range sizes in axis-id order (the reference's style), unique per distinct AST."""
  base = _base_name(ast)
  if sum(len(v) for v in _names.values()) > _MAX_NAMED:
    _names.clear()
  seen = _names.setdefault(base, {})
  if ast not in seen:
    seen[ast] = max(seen.values(), default=-1) + 1
  n = seen[ast]
  return base if n == 0 else f"{base}n{n}"


def claim_kernel_names(asts: list[UOp]) -> bool:
  """Take the names of named kernel ASTs made in another process (a schedule from the disk cache) as this process's,
  all or none: False where one is another AST's here, or its AST has another name here (names stay unique)."""
  claims: dict[tuple[str, int], UOp] = {}  # (base, n) -> the nameless AST taking it
  numbers: dict[UOp, int] = {}
  for ast in asts:
    name = getattr(ast.arg, "name", None)
    if not isinstance(name, str):
      return False
    base, n = _split_name(name)
    nameless = ast.replace(arg=None)
    if _base_name(nameless) != base:
      return False
    seen = _names.get(base, {})
    if seen.get(nameless, n) != n or any(k is not nameless and v == n for k, v in seen.items()) or \
       claims.setdefault((base, n), nameless) is not nameless or numbers.setdefault(nameless, n) != n:
      return False
  for (base, n), nameless in claims.items():
    _names.setdefault(base, {})[nameless] = n
  return True


def _split_name(name: str) -> tuple[str, int]:
  """unique_kernel_name's name as (base, n): "r_4_8n2" -> ("r_4_8", 2), "E_16" -> ("E_16", 0)."""
  base, sep, n = name.rpartition("n")
  return (base, int(n)) if sep and n.isdigit() else (name, 0)
