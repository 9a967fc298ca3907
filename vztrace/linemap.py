"""Generated lines to UOps: every line of a kernel's generated sources (uops listing, LLVM IR, optimized IR, assembly)
names the positions (in the linearized program) of the UOps it came from. The texts carry it themselves: the listing
has one UOp a line, LLVM IR has debug locations (compiler.codegen.llvmir._Renderer._debug_md: line N is position
N - 1), kept by the optimizer (`!dbg`) and written by the code generator as `.loc` directives.

So a trace need not store the map of those kinds (format 2.8: a recording leaves `lines` out, and spends nothing on
it): a reader makes it from the text when it shows one (`record_lines`). A record that has `lines` (a trace before
2.8, an OpenCL kernel's, whose map the renderer gives) keeps its own."""
from __future__ import annotations

import re
from typing import Any

_DI_LOCATION = re.compile(r"^!(\d+) = (?:distinct )?!DILocation\(line: (\d+)", re.M)
_DBG = re.compile(r"!dbg !(\d+)")
_LOC = re.compile(r"^\s*\.loc\s+\d+\s+(\d+)")

TEXT_KINDS = ("uops", "llvm_ir", "opt_ir", "asm")  # the kinds whose map their text tells (source_lines)


def source_lines(kind: str, text: str, at: dict[int, list[int]] | None = None) -> list[list[int]]:
  """Per line of a generated source of kind uops/llvm_ir/opt_ir/asm, the positions of the UOps it came from (none
  for a label, a declaration or a directive). In assembly an instruction of line 0 (code LLVM made for more than one
  location, e.g. a loop's vectorized remainder check) is given the location before it, the first one's after it.
  Equal entries are one list (read only; `at`: position -> [position], to share them across a kernel's sources): a
  list a line was 120,000 objects the cycle collector tracked on the GPT training step, for a few thousand positions."""
  lines = text.split("\n")
  none: list[int] = []
  at = {} if at is None else at
  if kind == "uops":  # format_uops: line i is the UOp at position i
    return [at.get(i) or at.setdefault(i, [i]) for i in range(len(lines))]
  if kind in ("llvm_ir", "opt_ir"):
    loc = {int(m[1]): int(m[2]) - 1 for m in _DI_LOCATION.finditer(text)}
    out = [none] * len(lines)
    for i, x in enumerate(lines):
      if "!dbg !" in x and (m := _DBG.search(x)) and (p := loc.get(int(m[1]), -1)) >= 0:
        out[i] = at.get(p) or at.setdefault(p, [p])
    return out
  out = [none] * len(lines)
  if kind != "asm":
    return out
  cur, pending = -1, []  # pending: instructions before the first location
  for i, x in enumerate(lines):
    if ".loc" in x and (m := _LOC.match(x)) is not None:
      line = int(m[1]) - 1
      if line >= 0:
        cur = line
        for k in pending:
          out[k] = at.get(cur) or at.setdefault(cur, [cur])
        pending = []
    elif _is_instruction(x):
      if cur >= 0:
        out[i] = at.get(cur) or at.setdefault(cur, [cur])
      else:
        pending.append(i)
  return out


def _is_instruction(line: str) -> bool:
  """Whether a line of AT&T assembly is an instruction (not a label, directive, comment or blank)."""
  t = line.strip()
  return bool(t) and line[:1] in (" ", "\t") and t[0] not in ".#" and not t.endswith(":")


def record_lines(src: dict[str, Any]) -> list | None:
  """A source record's line map: its own `lines`, else (format 2.8) the map its text tells, for a record of a kind
  in TEXT_KINDS with a text and a `uops` list (a record without `uops`, before 2.4, has none: None)."""
  lines = src.get("lines")
  if lines is not None:
    return lines
  kind, text = src.get("kind"), src.get("text")
  if kind not in TEXT_KINDS or type(text) is not str or type(src.get("uops")) is not list:
    return None
  return source_lines(kind, text)
