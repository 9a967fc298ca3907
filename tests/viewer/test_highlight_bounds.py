"""Highlighting costs a linear amount on any text (issue 31): the scanners' patterns are linear by construction (checked
on the parsed patterns), hostile texts that made Pygments quadratic take at most one step a character, and the
output is the same escaped, classed HTML for normal sources. Work is counted (scanner steps), never timed."""
from __future__ import annotations

import html
import re

import pytest
from support import hostile_traces as ht

from viz_server import gone, highlight
from viz_server.app import create_app
from viz_server.lru import LRU

try:  # the regex parser the engine compiles from (sre_parse before Python 3.11)
  import re._constants as sre_c
  import re._parser as sre_p
except ImportError:  # pragma: no cover
  import sre_constants as sre_c  # type: ignore[no-redef]
  import sre_parse as sre_p  # type: ignore[no-redef]


REPEATS = {sre_c.MAX_REPEAT, sre_c.MIN_REPEAT} | ({sre_c.POSSESSIVE_REPEAT} if hasattr(sre_c, "POSSESSIVE_REPEAT")
                                                  else set())
KINDS = ("llvm_ir", "asm", "opencl", "python")


def _always(item) -> bool:
  """The item matches (empty) wherever it is tried."""
  op, av = item
  if op in REPEATS:
    return av[0] == 0
  if op is sre_c.SUBPATTERN:
    return all(map(_always, av[-1].data))
  if op is sre_c.BRANCH:
    return any(all(map(_always, br.data)) for br in av[1])
  return False


def check_linear(items: list, tail_always: bool = True, inside: bool = False) -> None:
  """Raise AssertionError unless every unbounded repeat is outside any other repeat (of more than one) and any
  lookaround, and only items that always match follow it (here and in every enclosing sequence): then the engine
  never backtracks into it, and an alternative fails within a bounded number of characters."""
  for i, (op, av) in enumerate(items):
    after = tail_always and all(map(_always, items[i + 1:]))
    if op in REPEATS:
      lo, hi, body = av
      if hi == sre_c.MAXREPEAT:
        assert not inside, "an unbounded repeat inside a repeat or lookaround"
        assert after, "an item that can fail follows an unbounded repeat"
      check_linear(body.data, after, inside or hi > 1)
    elif op is sre_c.SUBPATTERN:
      check_linear(av[-1].data, after, inside)
    elif op is sre_c.BRANCH:
      for br in av[1]:
        check_linear(br.data, after, inside)
    elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
      check_linear(av[1].data, True, True)


@pytest.mark.parametrize("bad", [r"a+b", r"(?:ab*)+", r"(?=a*b)c", r"x*(?:y|z)", r"(?:a+)?b", r'"[^"]*"'])
def test_the_linearity_check_rejects_backtracking_patterns(bad):
  with pytest.raises(AssertionError):
    check_linear(sre_p.parse(bad).data)


@pytest.mark.parametrize("kind", KINDS)
def test_every_scanner_pattern_is_linear_and_consumes(kind):
  rx, _ = highlight.LANGS[kind]
  check_linear(sre_p.parse(rx.pattern).data)
  for branch in sre_p.parse(rx.pattern).data[0][1][1]:  # each named alternative takes >= 1 character
    assert branch.getwidth()[0] >= 1


def _plain(h: str) -> str:
  """The text of the HTML, checking on the way that its only markup is classed spans."""
  assert set(re.findall(r"<[^>]*>", h)) <= {"</span>"} | set(re.findall(r'<span class="[a-z0-9]+">', h))
  return html.unescape(re.sub(r"<[^>]*>", "", h))


# the inputs (Pygments: 0.5 / 1.8 / 7.2 / 29 s at 4 / 8 / 16 / 32 KiB), and more that end a token late or never
HOSTILE = [("llvm_ir", "-x"), ("asm", "$/*"), ("python", " \n"), ("llvm_ir", '"'), ("llvm_ir", "c\"%\"!"),
           ("llvm_ir", "0x"), ("asm", '"\\'), ("asm", "%.#"), ("python", '"""x'), ("python", "'\\"), ("python", "@"),
           ("python", "1e"), ("python", "r'''\\"), ("opt_ir", ";<"), ("asm", "x:\n"), ("opencl", "/*"),
           ("opencl", "/**"), ("opencl", '"\\'), ("opencl", "'"), ("opencl", "0x1.p"), ("opencl", "1e"),
           ("opencl", "#"), ("opencl", "-="), ("opencl", "(a")]


@pytest.mark.parametrize("kind,unit", HOSTILE)
def test_hostile_text_costs_linear_work(kind, unit):
  steps = []
  for kib in (4, 8, 16, 32, 64):
    text = unit * (kib * 1024 // len(unit))
    out, n = highlight.render(text, kind)
    assert _plain(out) == text
    assert n <= len(text)
    steps.append(n)
  for small, big in zip(steps, steps[1:]):
    assert big <= 2.2 * small + 16


@pytest.mark.parametrize("kind", [*KINDS, "opt_ir", "uops", "unknown"])
def test_markup_in_a_source_is_text(kind):
  src = '<script>alert("x")</script> & <img src=x onerror=alert(1)> \'q\' %a <b>\n'
  out, _ = highlight.render(src, kind)
  assert "<script" not in out and "<img" not in out and "<b>" not in out
  assert _plain(out) == src


def _tokens(text: str, kind: str) -> set[tuple[str, str]]:
  return {(c, html.unescape(t)) for c, t in re.findall(r'<span class="(\w+)">([^<]*)</span>', highlight.render(
    text, kind)[0])}


LLVM = """; kernel r_4
define void @r_4(ptr noalias %data0, i32 %n) #0 {
entry:
  %x = load <4 x float>, ptr %data0, align 16, !tbaa !3
  %y = fadd contract float %a, 0x3FF0000000000000
  %z = fcmp olt double -1.5e+00, 2.0
  br label %exit
}
attributes #0 = { "frame-pointer"="none" nounwind }
"""
ASM = """\t.text
\t.globl\tr_4
r_4:                                    # @r_4
\tvaddps\t%xmm1, %xmm0, %xmm0
\tmovabsq\t$.LCPI0_1, %rax
\tmovl\t-120(%rsp,%r8,4), %ecx
\tjne\t.LBB0_3
.LBB0_3:
\t.section\t".note.GNU-stack","",@progbits
"""
PYTHON = '''@deco
def fold(ctx: Ctx, x: UOp) -> UOp | None:
  """Fold."""
  # a comment
  if x.arg is None and len(x.src) > 3:
    return x.replace(arg=1.5, n=0x1F)
  return None
class A(B): pass
'''
OPENCL = """#pragma OPENCL FP_CONTRACT OFF
float maximum_float(float a, float b) { return a > b ? a : b; }
__kernel void r_4(__global float* data0, __global half* data1, int var_n) {
  int ridx0 = (int)get_global_id(0);  /* LOOP */
  float4 v0 = vload4(0, data0 + ridx0 * 4);
  float v1 = (1.5f + 0x1.8p+1f) / 2.0; // done
  if (isnan(v1)) v1 = NAN;
  vstore_half_rte(v1, 0, data1);
}
"""


@pytest.mark.parametrize("text,kind,want", [
  (LLVM, "llvm_ir", {("c", "; kernel r_4"), ("k", "define"), ("kt", "void"), ("vg", "@r_4"), ("kt", "ptr"),
                     ("nv", "%data0"), ("kt", "i32"), ("vg", "#0"), ("nl", "entry:"), ("k", "load"), ("p", "<"),
                     ("m", "4"), ("k", "x"), ("kt", "float"), ("nv", "!tbaa"), ("nv", "!3"), ("k", "fadd"),
                     ("m", "0x3FF0000000000000"), ("m", "-1.5e+00"), ("m", "2.0"), ("s", '"frame-pointer"'),
                     ("k", "nounwind"), ("kt", "label")}),
  (ASM, "asm", {("na", ".text"), ("na", ".globl"), ("no", "r_4"), ("nl", "r_4:"), ("c1", "# @r_4"),
                ("nf", "vaddps"), ("nv", "%xmm1"), ("p", ","), ("nf", "movabsq"), ("no", "$.LCPI0_1"),
                ("mi", "-120"), ("p", "("), ("nv", "%rsp"), ("mi", "4"), ("nf", "jne"), ("no", ".LBB0_3"),
                ("nl", ".LBB0_3:"), ("na", ".section"), ("s", '".note.GNU-stack"'), ("na", "@progbits")}),
  (PYTHON, "python", {("nd", "@"), ("nd", "deco"), ("k", "def"), ("nf", "fold"), ("n", "ctx"), ("p", ":"),
                      ("o", "->"), ("sd", '"""Fold."""'), ("c1", "# a comment"), ("k", "if"), ("ow", "is"),
                      ("kc", "None"), ("ow", "and"), ("nb", "len"), ("o", ">"), ("mi", "3"), ("k", "return"),
                      ("mf", "1.5"), ("mh", "0x1F"), ("k", "class"), ("nc", "A"), ("o", "|")}),
  (OPENCL, "opencl", {("cp", "#pragma OPENCL FP_CONTRACT OFF"), ("kt", "float"), ("nf", "maximum_float"),
                      ("n", "a"), ("k", "return"), ("o", ">"), ("o", "?"), ("k", "__kernel"), ("kt", "void"),
                      ("nf", "r_4"), ("k", "__global"), ("kt", "half"), ("kt", "int"), ("n", "var_n"),
                      ("nb", "get_global_id"), ("mi", "0"), ("cm", "/* LOOP */"), ("kt", "float4"),
                      ("nb", "vload4"), ("mf", "1.5f"), ("mh", "0x1.8p+1f"), ("mf", "2.0"), ("c1", "// done"),
                      ("k", "if"), ("nb", "isnan"), ("kc", "NAN"), ("nb", "vstore_half_rte"), ("p", "{")}),
])
def test_normal_sources_get_the_expected_classes(text, kind, want):
  assert want <= _tokens(text, kind)
  assert _plain(highlight.render(text, kind)[0]) == text


def test_python_strings_and_names():
  got = _tokens("x = f'{a}' + rb\"\\\"\" + '''a\n'b''' + 'open", "python")
  assert {("n", "x"), ("s1", "f'{a}'"), ("s2", 'rb"\\""'), ("s2", "'''a\n'b'''"), ("s1", "'open")} <= got


def test_the_scan_stops_when_the_client_goes(monkeypatch):
  calls = []

  def check() -> None:
    calls.append(1)
    if len(calls) == 3:
      raise gone.ClientGone()

  monkeypatch.setattr(gone, "check", check)
  text = "-x" * (20 * highlight.CHECK_EVERY)
  with pytest.raises(gone.ClientGone):
    highlight.render(text, "llvm_ir")
  assert len(calls) == 3  # every CHECK_EVERY steps, and nothing after the client went
  monkeypatch.setattr(gone, "check", lambda: calls.append(1))
  calls.clear()
  _, steps = highlight.render(text, "llvm_ir")
  assert len(calls) == steps // highlight.CHECK_EVERY


def test_the_cache_is_bounded(monkeypatch):
  budget = 64 << 10
  monkeypatch.setattr(highlight, "_cache", LRU(budget, budget // 8))
  cache = highlight._cache
  for i in range(200):
    text = f"%x{i} = add i32 %a, %b\n" * 10
    assert _plain(highlight.highlight(text, "llvm_ir")) == text
    assert cache.used <= budget
    assert cache.used == sum(len(t) + len(h) for (t, _), (h, _) in cache.items.items())
  assert 10 < len(cache) < 200  # the latest texts, as many as fit
  again = "%x199 = add i32 %a, %b\n" * 10
  assert highlight.highlight(again, "llvm_ir") is cache.get((again, "llvm_ir"))
  huge = "%y = add i32 %a, %b\n" * 1000  # over an eighth of the budget: shown, not kept
  assert _plain(highlight.highlight(huge, "llvm_ir")) == huge and cache.get((huge, "llvm_ir")) is None


def test_api_answers_hostile_sources_highlighted(tmp_path):
  """/kernel and /patterns highlight the issue's hostile texts (256 KiB each, as the API allows) as escaped HTML."""
  size = 256 << 10
  texts = {"llvm_ir": ("-x" * size)[:size], "asm": ("$/*" * size)[:size]}
  recs = [ht.meta(), {"t": "ctx_begin", "id": 0, "parent": None, "name": "r_4", "kind": "kernel", "ts": 1.7e9},
          *({"t": "source", "ctx": 0, "kind": k, "text": t, "compile_s": 0.1} for k, t in texts.items()),
          {**ht.PATTERN, "src": (" \n" * size)[:size]}, ht.END]
  c = create_app([ht.write(tmp_path / "h.vztrace", [recs])], follow=False).test_client()
  body = c.get("/api/traces/0/contexts/0/kernel").get_json()
  assert {s["kind"]: _plain(s["html"]) for s in body["sources"]} == texts
  pat = c.get("/api/traces/0/patterns/0").get_json()
  assert _plain(pat["html"]) == pat["src"] and len(pat["src"]) == size


def test_stylesheet_is_scoped():
  css = highlight.stylesheet()
  rules = re.findall(r"([^{}]+)\{[^}]*\}", css)
  assert rules and all(sel.strip().startswith(".hl .") for r in rules for sel in r.split(","))
