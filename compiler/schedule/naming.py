"""Kernel names: `E_`/`r_` and the range sizes, unique per distinct AST (named by rangeify, and by fuse for joins)."""
from __future__ import annotations

from compiler.uop import Ops, UOp, toposort

# kernel name -> the (nameless) ASTs that got it, so a different AST with the same shape gets "n1", "n2", ...
# (strong keys: nameless ASTs are transient; the table is bounded instead)
_names: dict[str, dict[UOp, int]] = {}
_MAX_NAMED = 20000


def unique_kernel_name(ast: UOp) -> str:
  """`E_`/`r_` + the range sizes in axis-id order (the reference's style), unique per distinct AST."""
  nodes = toposort(ast)
  rngs = sorted((u for u in nodes if u.op is Ops.RANGE), key=lambda r: r.arg[0])
  prefix = "r" if any(u.op is Ops.REDUCE for u in nodes) else "E"
  base = f"{prefix}_" + ("_".join(str(r.src[0].arg) for r in rngs) or "1")
  if sum(len(v) for v in _names.values()) > _MAX_NAMED:
    _names.clear()
  seen = _names.setdefault(base, {})
  if ast not in seen:
    seen[ast] = max(seen.values(), default=-1) + 1
  n = seen[ast]
  return base if n == 0 else f"{base}n{n}"
