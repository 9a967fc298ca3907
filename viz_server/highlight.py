"""Server-side syntax highlighting in linear time: source text from a trace becomes escaped HTML spans.

Each language shown (LLVM IR, x86 assembly as LLVM prints it (GAS/AT&T), OpenCL C, Python for rule sources) is one regex
scanner: an alternation of token patterns tried in order at each position, the last one any single character, so a step
consumes >= 1 character and the text is covered exactly. Every pattern is linear, which
tests/viewer/test_highlight_bounds.py checks on the parsed patterns: an unbounded repeat is never nested in another
repeat or a lookaround, and only items that always match (optional ones) follow it, so the engine never backtracks into
a repeat and an alternative that fails does so within a bounded number of characters. Cost: at most len(text) steps,
each O(its token + the patterns' bounded prefixes), so O(len(text)) in all for any text (Pygments' lexers were
quadratic: 29 s on "-x" * 16384 as LLVM IR). Other kinds (the uops listing included) are escaped plain text. The
scan stops once the request's client has gone (gone.check). Token classes are Pygments' short names, which
static/style.css colours; the HTML is a flat list of `<span class="...">` elements and escaped text."""
from __future__ import annotations

import builtins
import html
import keyword
import re
from typing import Callable

from viz_server import gone
from viz_server.lru import LRU

MAX_HIGHLIGHT_CHARS = 2_000_000  # bigger texts are escaped, not highlighted (the html is ~10x the text)
CACHE_CHARS = 64 << 20  # texts and html kept for repeat requests, in all
CSS_CLASS = "hl"
CHECK_EVERY = 4096  # scanner steps between two looks at the request's client

Classifier = Callable[[str, str], "str | None"]  # (pattern name, token) -> css class or None for plain text


def scanner(rules: list[tuple[str, str]]) -> re.Pattern:
  """One regex of named alternatives, tried in order; a final catch-all makes every position match."""
  return re.compile("|".join(f"(?P<{name}>{pat})" for name, pat in [*rules, ("other", r"[\s\S]")]))


# ---- LLVM IR

LLVM_RULES = [
  ("ws", r"\s+"),
  ("comment", r";[^\n]*"),
  ("string", r'c?"[^"\n]*"?'),
  ("qvar", r'[%@!]"[^"\n]*"?'),  # %"a name", @"...", !"metadata string"
  ("var", r"[%@!][-\w$.]+"),
  ("attr", r"#\d+"),
  ("hex", r"-?0x[KLMHR]?[0-9A-Fa-f]+"),
  ("num", r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"),
  ("word", r"[A-Za-z$._][\w$.]*:?"),
  ("punct", r"[-=,()\[\]{}<>*|:!#@%]"),
]
LLVM_TYPES = frozenset("void half bfloat float double fp128 x86_fp80 ppc_fp128 x86_mmx x86_amx ptr label metadata "
                       "token opaque".split())
_LLVM_INT = re.compile(r"i\d{1,7}")
_LLVM_FIXED = {"ws": None, "comment": "c", "string": "s", "attr": "vg", "hex": "m", "num": "m", "punct": "p",
               "other": None}


def llvm_classifier() -> Classifier:
  def cls(kind: str, tok: str) -> str | None:
    if kind in ("var", "qvar"):
      return "vg" if tok[0] == "@" else "nv"
    if kind == "word":
      if tok[-1] == ":":
        return "nl"
      return "kt" if tok in LLVM_TYPES or _LLVM_INT.fullmatch(tok) else "k"
    return _LLVM_FIXED[kind]
  return cls


# ---- x86 assembly, GAS/AT&T syntax (what LLVM prints)

ASM_RULES = [
  ("ws", r"\s+"),
  ("comment", r"#[^\n]*"),
  ("string", r'"(?:[^"\\\n]|\\.)*"?'),
  ("reg", r"%[\w.]+"),
  ("imm", r"\$-?[\w.$]*"),
  ("at", r"@[\w.]+"),  # @progbits, @function, @PLT
  ("num", r"-?(?:0[xX][0-9a-fA-F]+|\d+)"),
  ("word", r"[A-Za-z_.$][\w.$]*:?"),
  ("punct", r"[-(),{}\[\]+*/<>=:;!~&|^%@]"),
]
_ASM_FIXED = {"comment": "c1", "string": "s", "reg": "nv", "imm": "no", "at": "na", "num": "mi", "other": None}


def asm_classifier() -> Classifier:
  """A statement's first word is its mnemonic (nf) or directive (na); later words are symbols (no)."""
  first = True

  def cls(kind: str, tok: str) -> str | None:
    nonlocal first
    if kind == "ws":
      first = first or "\n" in tok
      return None
    if kind == "punct":
      first = first or tok == ";"
      return "p"
    if kind == "word":
      if tok[-1] == ":":
        first = True  # a label starts the line's statement
        return "nl"
      was, first = first, False
      return ("na" if tok[0] == "." else "nf") if was else "no"
    first = False
    return _ASM_FIXED[kind]
  return cls


# ---- OpenCL C (compiler/codegen/opencl.py's kernels)

CL_RULES = [
  ("ws", r"\s+"),
  ("comment", r"//[^\n]*"),
  ("block", r"/\*(?:[^*]|\*(?!/))*(?:\*/)?"),  # (an unclosed one runs to the end of the text)
  ("preproc", r"#[^\n]*"),
  ("string", r'"(?:[^"\\\n]|\\.)*"?'),
  ("char", r"'(?:[^'\\\n]|\\.)*'?"),
  ("hex", r"0[xX][0-9a-fA-F]*(?:\.[0-9a-fA-F]*)?(?:[pP][-+]?\d+)?[fFhHuUlL]*"),  # hex floats: 0x1.8p+1f
  ("num", r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFhHuUlL]*"),
  ("word", r"[A-Za-z_]\w*"),
  ("op", r"[-+*%&|^~<>=!?:.]+|/"),
  ("punct", r"[()\[\]{},;]"),
]
CL_KEYWORDS = frozenset("if else for while do return break continue switch case default goto sizeof typedef struct "
                        "union enum const volatile restrict static inline __kernel kernel __global global __local "
                        "local __constant constant __private private __read_only read_only __write_only write_only "
                        "__attribute__ uniform".split())
_CL_SCALARS = "bool char uchar short ushort int uint long ulong float double half".split()
CL_TYPES = frozenset(_CL_SCALARS + [f"{t}{n}" for t in _CL_SCALARS if t != "bool" for n in (2, 3, 4, 8, 16)] +
                     "void size_t ptrdiff_t intptr_t uintptr_t".split())
CL_CONSTANTS = frozenset("true false NAN INFINITY MAXFLOAT HUGE_VALF CLK_LOCAL_MEM_FENCE CLK_GLOBAL_MEM_FENCE".split())
# (fullmatched against one word: linear) the work-item, memory, conversion and math builtins
_CL_BUILTIN = re.compile(r"get_\w+|vload\w*|vstore\w*|convert_\w+|as_\w+|barrier|mem_fence|select|signbit|isnan|"
                         r"isinf|fmax|fmin|fabs|fma|mad|sqrt|rsqrt|exp2?|log2?|sin|cos|tan|pow|floor|ceil|trunc|rint|"
                         r"min|max|abs|clamp")
_CL_FIXED = {"comment": "c1", "block": "cm", "preproc": "cp", "string": "s", "char": "s", "hex": "mh", "op": "o",
             "other": None}


def cl_classifier() -> Classifier:
  """Words by OpenCL C's keywords, types and builtins; outside any brace or parenthesis, another word names a
  function (a kernel's or a helper's)."""
  depth = 0

  def cls(kind: str, tok: str) -> str | None:
    nonlocal depth
    if kind == "ws":
      return None
    if kind == "punct":
      depth = max(0, depth + (tok in "({[") - (tok in ")}]"))
      return "p"
    if kind == "num":
      return "mf" if any(c in tok for c in ".eE") or tok[-1] in "fF" else "mi"
    if kind != "word":
      return _CL_FIXED[kind]
    if tok in CL_KEYWORDS:
      return "k"
    if tok in CL_TYPES:
      return "kt"
    if tok in CL_CONSTANTS:
      return "kc"
    if _CL_BUILTIN.fullmatch(tok):
      return "nb"
    return "nf" if depth == 0 else "n"
  return cls


# ---- Python (rule sources)

_PREFIX = "[rRbBuUfF]{0,2}"
PYTHON_RULES = [
  ("ws", r"\s+"),
  ("comment", r"#[^\n]*"),
  ("tdq", _PREFIX + r'"""(?:[^"\\]|\\[\s\S]?|"(?!""))*(?:""")?'),
  ("tsq", _PREFIX + r"'''(?:[^'\\]|\\[\s\S]?|'(?!''))*(?:''')?"),
  ("dq", _PREFIX + r'"(?:[^"\\\n]|\\[\s\S]?)*"?'),
  ("sq", _PREFIX + r"'(?:[^'\\\n]|\\[\s\S]?)*'?"),
  ("hex", r"0[xXoObB][0-9a-fA-F_]+"),
  ("num", r"(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d[\d_]*)?[jJ]?"),
  ("word", r"[^\W\d]\w*"),
  ("op", r"[-+*/%@&|^~<>=!.]+"),
  ("punct", r"[()\[\]{},:;]+"),
]
PY_CONSTANTS = frozenset(("True", "False", "None"))
PY_WORD_OPS = frozenset(("and", "or", "not", "in", "is"))
PY_IMPORTS = frozenset(("import", "from"))
PY_KEYWORDS = frozenset(keyword.kwlist) - PY_CONSTANTS - PY_WORD_OPS - PY_IMPORTS
PY_BUILTINS = frozenset(n for n in dir(builtins) if not n.startswith("_")) - PY_CONSTANTS
_PY_FIXED = {"comment": "c1", "dq": "s2", "sq": "s1", "hex": "mh", "punct": "p", "other": None}


def python_classifier() -> Classifier:
  """Words by Python's keyword list and builtins; the name after def/class, and a decorator, by what came before."""
  line_start, after = True, ""

  def cls(kind: str, tok: str) -> str | None:
    nonlocal line_start, after
    if kind == "ws":
      line_start = line_start or "\n" in tok
      return None
    was, line_start = line_start, False
    if kind == "word":
      named, after = after, tok if tok in ("def", "class") else ""
      if named:
        return {"def": "nf", "class": "nc", "@": "nd"}[named]
      if tok in PY_KEYWORDS:
        return "k"
      if tok in PY_CONSTANTS:
        return "kc"
      if tok in PY_WORD_OPS:
        return "ow"
      if tok in PY_IMPORTS:
        return "kn"
      if tok in ("self", "cls"):
        return "bp"
      return "nb" if tok in PY_BUILTINS else "n"
    after = "@" if was and tok == "@" else ""
    if kind == "op":
      return "nd" if after else "o"
    if kind in ("tdq", "tsq"):
      return "sd" if was else "s2"
    if kind == "num":
      return "mf" if any(c in tok for c in ".eEjJ") else "mi"
    return _PY_FIXED[kind]
  return cls


# kind of source -> (scanner, a new classifier per text); kinds not here are plain text
LANGS: dict[str, tuple[re.Pattern, Callable[[], Classifier]]] = {}
for _kinds, _rules, _make in ((("llvm_ir", "opt_ir", "llvm"), LLVM_RULES, llvm_classifier),
                              (("asm",), ASM_RULES, asm_classifier), (("opencl",), CL_RULES, cl_classifier),
                              (("python",), PYTHON_RULES, python_classifier)):
  _rx = scanner(_rules)
  LANGS.update((k, (_rx, _make)) for k in _kinds)


def render(text: str, kind: str) -> tuple[str, int]:
  """The HTML for `text` highlighted as `kind`, and the scanner steps it took (at most len(text)). Raises
  gone.ClientGone once the request's client has gone."""
  lang = LANGS.get(kind)
  if lang is None or len(text) > MAX_HIGHLIGHT_CHARS:
    return html.escape(text), 0
  rx, make = lang
  cls, esc, out, steps = make(), html.escape, [], 0
  for m in rx.finditer(text):
    steps += 1
    if steps % CHECK_EVERY == 0:
      gone.check()
    tok = m.group()
    c = cls(m.lastgroup, tok)  # type: ignore[arg-type]
    out.append(esc(tok) if c is None else f'<span class="{c}">{esc(tok)}</span>')
  return "".join(out), steps


_cache = LRU(CACHE_CHARS, CACHE_CHARS // 8)  # (text, kind) -> html, weighed by both's characters


def highlight(text: str, kind: str) -> str:
  """HTML for `text` (every character escaped; the only markup is `<span class="...">`), kept in a cache of
  CACHE_CHARS characters."""
  got = _cache.get((text, kind))
  if got is None:
    got, _ = render(text, kind)
    _cache.put((text, kind), got, len(text) + len(got))
  return got


# the colours of Pygments' "default" style for the classes above
_COLORS = {"c c1 cm": "color: #3D7B7B; font-style: italic", "cp": "color: #9C6500",
           "k kc kn": "color: #008000; font-weight: bold",
           "kt": "color: #B00040", "o m mf mh mi": "color: #666", "s s1 s2": "color: #BA2121",
           "sd": "color: #BA2121; font-style: italic", "na": "color: #687822", "nb bp": "color: #008000",
           "nc": "color: #00F; font-weight: bold", "no": "color: #800", "nd": "color: #A2F", "nf": "color: #00F",
           "nl": "color: #767600", "nv vg": "color: #19177C", "ow": "color: #A2F; font-weight: bold"}


def stylesheet() -> str:
  """CSS for the highlighted HTML (scoped under `.hl`)."""
  return "\n".join(", ".join(f".{CSS_CLASS} .{c}" for c in cs.split()) + f" {{ {style} }}"
                   for cs, style in _COLORS.items()) + "\n"
