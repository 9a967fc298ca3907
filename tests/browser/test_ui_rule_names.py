"""The step panel names each rule by what it does (a gradient's steps "d/dx OP", never `<lambda>`) and counts the
matches per rule by those names, as the API has them."""
from __future__ import annotations

from collections import Counter

import numpy as np
from support.browser import open_page, wait_graph

from compiler.tensor import Tensor
from compiler.trace import recorder

RULE_NAME_IS = "(want) => (document.querySelector('#panel-step .rule-name') || {}).textContent === want"


def write_gradient(path) -> None:
  a = Tensor(np.array([0.5, 1.0, 2.0], dtype=np.float32), requires_grad=True)
  b = Tensor(np.array([1.5, -1.0, 0.25], dtype=np.float32), requires_grad=True)
  recorder.enable(path, announce=False)
  try:
    ((a * b).exp2() + a * a).sum().backward()  # MUL twice: one rule with 2 matches
  finally:
    recorder.disable()


def test_gradient_steps_and_counts_are_named(page, server):
  write_gradient(server.dir / "grad_names.vztrace")
  t = server.trace_id("grad_names.vztrace", ended=True)
  rw, ctx = next((rw, c) for c in server.api(f"/api/traces/{t}/contexts") for rw in c["rewrites"]
                 if rw["name"] == "gradient")
  steps = server.api(f"/api/traces/{t}/rewrites/{rw['id']}")["steps"]
  names = [server.api(f"/api/traces/{t}/patterns/{st['pattern']}")["name"] for st in steps]
  assert all(n.startswith("d/dx ") for n in names) and names.count("d/dx MUL") == 2, names
  open_page(page, server, f"#t={t}&c={ctx['id']}&r={rw['id']}&s=1")
  wait_graph(page, t, rw["id"], 1)
  panel = page.locator("#panel-step")
  page.wait_for_function(RULE_NAME_IS, arg=names[0])
  # the counts per rule: most first, every row named (the names arrive from the API after the rows are drawn)
  page.wait_for_function("() => [...document.querySelectorAll('#panel-step .rule-count .pat-ref')]"
                         ".every(e => !e.textContent.startsWith('rule '))")
  rows = panel.locator(".rule-count").evaluate_all(
    "els => els.map(e => [e.querySelector('.pat-ref').textContent, e.querySelector('.n').textContent,"
    " +e.dataset.step])")
  want = Counter(names)
  assert sorted((name, n) for name, n, _ in rows) == sorted((name, f"{c}×") for name, c in want.items())
  assert rows[0][:2] == ["d/dx MUL", "2×"]
  assert all(first == names.index(name) + 1 for name, _, first in rows)
  assert "<lambda>" not in panel.inner_text()
  # a row is a way to its rule's first step
  exp2 = next(first for name, _, first in rows if name == "d/dx EXP2")
  panel.locator(f".rule-count[data-step='{exp2}']").click()
  wait_graph(page, t, rw["id"], exp2)
  page.wait_for_function(RULE_NAME_IS, arg="d/dx EXP2")  # (the panel fills in from its own requests)
  assert page.evaluate("() => window.__viz.state.step") == exp2
