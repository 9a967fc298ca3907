"""Trace text made safe for a terminal, for every tool that prints it (`python -m compiler.trace info`, and the
viewer's show and compare through viz_server.term).

A trace comes from strangers: a string in it must not be able to send escape sequences (cursor moves, title changes,
hyperlinks, clipboard writes) to the terminal, so control characters are shown as visible escapes."""
from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, the bidirectional marks and overrides that can make text display unlike what it is
# (U+061C, the Arabic letter mark, too), the line and paragraph separators (a line break to some terminals and
# pagers), and lone surrogates (no terminal encoding can write one: printing it would end the output with an error)
_OTHERS = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE = re.compile(f"[\x00-\x1f{_OTHERS}]")
_UNSAFE_KEEP_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHERS}]")


def _escape(m: re.Match) -> str:
  c = ord(m.group())
  return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def safe(s: object) -> str:
  """One line of trace text for a terminal: every control character (newlines too) as a visible escape."""
  return _UNSAFE.sub(_escape, str(s))


def safe_block(s: object) -> str:
  """Multi-line trace text (sources): newlines and tabs kept, every other control character escaped."""
  return _UNSAFE_KEEP_LINES.sub(_escape, str(s))
