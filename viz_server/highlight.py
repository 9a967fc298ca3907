"""Server-side syntax highlighting with Pygments: source text from a trace becomes escaped HTML spans."""
from __future__ import annotations

import html
from functools import lru_cache

from pygments import highlight as _highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import GasLexer, LlvmLexer, NasmLexer, PythonLexer, TextLexer

MAX_HIGHLIGHT_CHARS = 2_000_000  # bigger texts are escaped, not highlighted (Pygments is slow on megabytes)
CSS_CLASS = "hl"

_FORMATTER = HtmlFormatter(nowrap=True, cssclass=CSS_CLASS)


def _lexer(kind: str, text: str) -> Lexer:
  if kind in ("llvm_ir", "opt_ir", "llvm"):
    return LlvmLexer()
  if kind == "asm":
    # Intel syntax (what `llc --x86-asm-syntax=intel` prints) reads better with NASM rules; AT&T with GAS
    return NasmLexer() if ".intel_syntax" in text[:4000] else GasLexer()
  if kind == "python":
    return PythonLexer()
  return TextLexer()


@lru_cache(maxsize=256)
def highlight(text: str, kind: str) -> str:
  """HTML for `text` (every character escaped by Pygments or html.escape); classes are Pygments' short names."""
  if len(text) > MAX_HIGHLIGHT_CHARS:
    return html.escape(text)
  return _highlight(text, _lexer(kind, text), _FORMATTER)


def stylesheet() -> str:
  """CSS for the highlighted HTML (scoped under `.hl`)."""
  return HtmlFormatter(style="default").get_style_defs(f".{CSS_CLASS}")
