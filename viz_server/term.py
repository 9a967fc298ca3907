"""Terminal output for the trace tools: colors only on a TTY without NO_COLOR, and every trace string made safe
(`safe`, `safe_block`: vztrace.term, which `python -m compiler.trace info` uses too)."""
from __future__ import annotations

import os
from typing import IO

from vztrace.term import safe, safe_block

__all__ = ["SGR", "Painter", "safe", "safe_block", "use_color"]

SGR = {"red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35", "cyan": "36", "white": "37",
       "RED": "91", "GREEN": "92", "YELLOW": "93", "BLUE": "94", "MAGENTA": "95", "CYAN": "96", "WHITE": "97",
       "bold": "1", "dim": "2"}


def use_color(stream: IO[str]) -> bool:
  """Colors on a terminal, unless NO_COLOR is set to anything non-empty (no-color.org)."""
  if os.environ.get("NO_COLOR"):
    return False
  isatty = getattr(stream, "isatty", None)
  return bool(isatty and isatty())


class Painter:
  """Wraps already safe text in SGR colors, or leaves it plain."""

  def __init__(self, color: bool) -> None:
    self.color = color

  def __call__(self, text: str, color: str | None) -> str:
    code = SGR.get(color or "")
    return f"\x1b[{code}m{text}\x1b[0m" if self.color and code else text
