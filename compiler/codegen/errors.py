"""The error codegen raises, and helpers that name a kernel and a node in messages."""
from __future__ import annotations

from compiler.uop import KernelInfo, Ops, UOp, arg_str


class CodegenError(ValueError):
  """A kernel AST codegen can't handle; the message names the kernel and the node."""

  def __init__(self, kname: str, reason: str, node: UOp | None = None) -> None:
    where = f" at {describe(node)}" if node is not None else ""
    super().__init__(f"kernel {kname!r}: {reason}{where}")
    self.kname, self.reason, self.node = kname, reason, node


def kernel_name(ast: UOp) -> str:
  """The kernel's name from its SINK's KernelInfo (or a generic one)."""
  if ast.op is Ops.SINK and isinstance(ast.arg, KernelInfo):
    return ast.arg.name
  return "kernel"


def describe(u: UOp) -> str:
  """A short description of a node for error messages: op, dtype, arg and (for small graphs) its expression."""
  arg = "" if u.arg is None else f" arg={arg_str(u.arg)[:80]}"
  text = f"{u.op.name} {u.dtype}{arg}"
  if u.op not in (Ops.SINK, Ops.STORE):
    try:
      text += f" ({u.render()[:120]})"
    except Exception:  # a description must never hide the real error
      pass
  return text
