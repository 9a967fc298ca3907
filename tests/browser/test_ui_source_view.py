"""Issue 30, the source panel at 1280x800: every line numbered in a gutter that a selection leaves out (a copy is the
source), long lines wrapped under their text or scrolled sideways as the user chooses, the choice kept."""
from __future__ import annotations

import pytest
from support import tracegen
from support.browser import open_page, shot

from compiler.trace import recorder

SMALL = {"width": 1280, "height": 800}
# an LLVM IR line far wider than the panel (a real kernel's `define` with its arguments and attributes is ~200 chars)
LONG = ("define void @k_long(" + ", ".join(f"ptr noalias align 32 %data{i}" for i in range(8))
        + ", i32 %core_start, i32 %core_end) #0 !dbg !2 {")
IR = f"; ModuleID = 'k_long'\n\n{LONG}\nentry:\n  ret void\n}}\n" + "".join(f"; filler {i}\n" for i in range(120))


@pytest.fixture
def page_1280(new_page):
  return new_page(**SMALL)


def open_source(page, server, trace_dir) -> str:
  """A kernel whose LLVM IR has a long line and 127 lines, its source panel open; -> the IR as the API gives it."""
  path = trace_dir / "srcview.vztrace"
  if not path.exists():
    recorder.enable(path, announce=False)
    try:
      tracegen.record_kernel("k_long", 16, beam=False, sources={"llvm_ir": IR, "asm": "k_long:\n  retq"})
    finally:
      recorder.disable()
  t = server.trace_id("srcview.vztrace", ended=True)
  ctx = next(c for c in server.api(f"/api/traces/{t}/contexts") if c["name"] == "k_long")
  text = next(s for s in server.api(f"/api/traces/{t}/contexts/{ctx['id']}/kernel")["sources"]
              if s["kind"] == "llvm_ir")["text"]
  open_page(page, server, f"#t={t}&c={ctx['id']}&p=source")
  page.locator("#panel-source pre.source[data-kind='llvm_ir'] .src-line").first.wait_for()
  return text


def geometry(page) -> dict:
  return page.evaluate("""() => {
    const pre = document.querySelector('#panel-source pre.source');
    const lines = [...pre.querySelectorAll('.src-line')];
    const long = lines.reduce((a, b) => (b.textContent.length > a.textContent.length ? b : a));
    const before = getComputedStyle(lines[0], '::before');
    return {n: lines.length, scroll: pre.scrollWidth, client: pre.clientWidth, wrapped: pre.classList.contains('wrap'),
            longRows: long.getClientRects().length, gutter: before.content, gutterW: parseFloat(before.width),
            numbersSelectable: before.userSelect, panelW: document.querySelector('#panels').clientWidth};
  }""")


def test_lines_are_numbered_and_a_copy_is_the_source(page_1280, server, trace_dir):
  page = page_1280
  text = open_source(page, server, trace_dir)
  g = geometry(page)
  assert g["n"] == len(text.split("\n")) and g["gutter"] == "counter(src-line)" and g["gutterW"] > 0, g
  assert g["numbersSelectable"] == "none", g
  # the wide panel: the source gets more than the default 430 px (at 1280 px, what leaves the graph its 480)
  assert g["panelW"] > 500, g
  # select the whole source as a user would (drag from its start to its end): what a copy takes is the text alone
  copied = page.evaluate("""() => {
    const pre = document.querySelector('#panel-source pre.source');
    const r = document.createRange();
    r.selectNodeContents(pre);
    const sel = getSelection();
    sel.removeAllRanges();
    sel.addRange(r);
    return sel.toString();
  }""")
  # (a pre's last line break is never part of a selection's text, numbers or not)
  assert copied == text.removesuffix("\n") and "\n1" not in copied
  shot(page, "issue30-source-1280")


def test_wrap_toggle_folds_long_lines_and_is_remembered(page_1280, server, trace_dir):
  page = page_1280
  open_source(page, server, trace_dir)
  on = geometry(page)
  # wrapped by default: the long line folds into rows, nothing reaches past the box
  assert on["wrapped"] and on["longRows"] > 1 and on["scroll"] <= on["client"], on
  page.uncheck("#panel-source .source-wrap")
  off = geometry(page)
  assert not off["wrapped"] and off["longRows"] == 1 and off["scroll"] > off["client"], off
  shot(page, "issue30-source-nowrap-1280")
  # the choice outlives the page: another kernel's source, or a reload, shows it unwrapped
  page.reload()
  page.wait_for_function("() => window.__viz !== undefined")
  page.evaluate("() => window.__viz.ready")
  page.locator("#panel-source pre.source .src-line").first.wait_for()
  assert not geometry(page)["wrapped"] and not page.is_checked("#panel-source .source-wrap")
