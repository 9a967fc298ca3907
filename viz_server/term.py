"""Terminal output for the trace tools: colors only on a TTY without NO_COLOR, and every trace string made safe.

A trace comes from strangers: a string in it must not be able to send escape sequences (cursor moves, title changes,
hyperlinks, clipboard writes) to the terminal, so control characters are shown as visible escapes."""
from __future__ import annotations

import os
import re
from typing import IO

# C0 controls, DEL, C1 controls, and the bidirectional overrides that can make text display unlike what it is
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")

SGR = {"red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35", "cyan": "36", "white": "37",
       "RED": "91", "GREEN": "92", "YELLOW": "93", "BLUE": "94", "MAGENTA": "95", "CYAN": "96", "WHITE": "97",
       "bold": "1", "dim": "2"}


def _escape(m: re.Match) -> str:
  c = ord(m.group())
  return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def safe(s: object) -> str:
  """One line of trace text for a terminal: every control character (newlines too) as a visible escape."""
  return _UNSAFE.sub(_escape, str(s))


def safe_block(s: object) -> str:
  """Multi-line trace text (sources): newlines and tabs kept, every other control character escaped."""
  return _UNSAFE_KEEP_LINES.sub(_escape, str(s))


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
