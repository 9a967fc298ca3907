"""The sidebar as a tree (issue 30): kernels under the schedule that made them (the recorder files them beside it),
alike consecutive contexts (schedule cache hits, jit replays) folded into one "name ×count" row, rows collapsible by
click and keyboard (remembered per trace), big parents collapsed, the selection always shown, live kernels put under
their schedule without rebuilding the list."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.browser import ROOT, open_page
from support.proc_helpers import open_gate, stop_writer

from compiler.schedule.cache import SCHEDULES
from compiler.trace import recorder

TRACEGEN = Path(__file__).resolve().parents[1] / "support" / "tracegen.py"
ROWS = "#contexts li[data-row]"


def _rows(page) -> list[dict]:
  """The tree's rows on screen, in order: key, context id (None for a folded run), level, expanded, text."""
  return page.eval_on_selector_all(ROWS, """els => els.map(e => ({key: e.dataset.row,
    ctx: e.dataset.ctx === undefined ? null : +e.dataset.ctx, level: +e.getAttribute('aria-level'),
    open: e.getAttribute('aria-expanded'), text: e.textContent}))""")


def _record(path: Path, program) -> Path:
  SCHEDULES.clear()  # as in a fresh program: a schedule an earlier test of this worker made is no cache hit here
  recorder.enable(path, announce=False)
  try:
    program()
  finally:
    recorder.disable()
  return path


def _repeated() -> None:
  """One computation, then another run 20 times: the 20 schedules after the first are cache hits of it."""
  from compiler.tensor import Tensor
  (Tensor(np.ones(32, np.float32)) - 1).numpy()
  for _ in range(20):
    (Tensor(np.arange(64, dtype=np.float32)) * 2 + 1).numpy()


def _transformer() -> None:
  """A 4-block GPT training step under TinyJit, run 4 times: the parameters' inits, the steps, the jit replays."""
  from bench import real_models
  size = dataclasses.replace(real_models.TINY, gpt_layers=4)
  step = real_models.build("gpt_step", real_models.tinyviz(), size, jit=True)
  for _ in range(4):
    step()


@pytest.fixture(scope="module")
def traces(server) -> dict[str, int]:
  paths = {"repeated": _record(server.dir / "tree-repeated.vztrace", _repeated),
           "gpt": _record(server.dir / "tree-gpt.vztrace", _transformer)}
  return {k: server.trace_id(p.name, ended=True) for k, p in paths.items()}


def _made_by(ctxs: list[dict]) -> dict[int, int]:
  """Kernel id -> the schedule before it among the top contexts (what the sidebar puts it under)."""
  owner, out = None, {}
  for c in ctxs:
    if c["kind"] == "schedule":
      owner = c["id"]
    elif c["kind"] == "kernel" and not c["name"].startswith("jit replay") and owner is not None:
      out[c["id"]] = owner
    elif c["kind"] != "memory":
      owner = None
  return out


def test_kernels_sit_under_their_schedule(page, server):
  t = server.trace_id("demo.vztrace")
  ctxs = {c["name"]: c for c in server.api(f"/api/traces/{t}/contexts")}
  assert ctxs["r_16_4"]["parent"] == ctxs["schedule 1"]["parent"]  # beside it in the trace
  open_page(page, server, f"#t={t}")
  page.wait_for_selector(f"{ROWS}[data-ctx='{ctxs['E_32']['id']}']")
  got = [(r["ctx"], r["level"], r["open"]) for r in _rows(page)]
  assert got == [(ctxs["schedule 1"]["id"], 1, "true"), (ctxs["r_16_4"]["id"], 2, None), (ctxs["E_32"]["id"], 2, None)]


def test_twenty_repeated_schedules_fold_into_one_row(page, server, traces):
  t = traces["repeated"]
  ctxs = server.api(f"/api/traces/{t}/contexts")
  # a kernel's name is unique in its process (E_32n1 where a pytest worker named another E_32 before): its base
  names = {c["id"]: re.sub(r"n\d+$", "", c["name"]) if c["kind"] == "kernel" else c["name"] for c in ctxs}
  # schedules are numbered by the recording process (a pytest worker has made others before): by order, not number
  scheds = [c["name"] for c in sorted(ctxs, key=lambda c: c["id"]) if c["name"].startswith("schedule ")]
  open_page(page, server, f"#t={t}")
  page.wait_for_selector("#contexts li[data-fold]")
  rows = _rows(page)
  assert [(names.get(r["ctx"]), r["level"], r["open"]) for r in rows] == [(scheds[0], 1, "true"),
                                                                         ("E_32", 2, None), (None, 1, "false")]
  assert rows[2]["text"] == "▸Sschedule×20"  # the other 20 schedules, each with its E_64: one row
  fold = rows[2]["key"]
  page.click(f"#contexts li[data-row='{fold}']")
  page.wait_for_selector(f"#contexts li[data-row='{fold}'][aria-expanded='true']")
  inside = _rows(page)[3:]
  assert [(names[r["ctx"]], r["level"]) for r in inside] == [(scheds[i], 2) if j == 0 else ("E_64", 3)
                                                             for i in range(1, 21) for j in range(2)]
  # a schedule closes by its toggle, and the choice outlives a visit to another trace
  first = inside[0]["key"]
  page.click(f"#contexts li[data-row='{first}'] .twisty")
  page.wait_for_selector(f"#contexts li[data-row='{first}'][aria-expanded='false']")
  assert len(_rows(page)) == 3 + 2 * 20 - 1
  demo = server.trace_id("demo.vztrace")
  page.select_option("#trace-select", str(demo))
  page.wait_for_function("(t) => window.__viz.state.trace === t && !document.querySelector('#contexts li[data-fold]')",
                         arg=demo)
  page.select_option("#trace-select", str(t))
  page.wait_for_selector(f"#contexts li[data-row='{first}'][aria-expanded='false']")
  assert page.get_attribute(f"#contexts li[data-row='{fold}']", "aria-expanded") == "true"


def test_rows_open_and_close_by_keyboard(page, server, traces):
  open_page(page, server, f"#t={traces['repeated']}")
  page.wait_for_selector("#contexts li[data-fold]")
  fold = page.get_attribute("#contexts li[data-fold]", "data-row")
  sel = f"#contexts li[data-row='{fold}']"
  step = page.evaluate("() => window.__viz.state.step")
  page.focus(f"{sel} .twisty")
  for key, want in [("Enter", "true"), ("ArrowLeft", "false"), ("ArrowRight", "true"), (" ", "false")]:
    page.keyboard.press(key)
    page.wait_for_selector(f"{sel}[aria-expanded='{want}']")
    # the focus stays on the toggle (its row was redrawn), and the arrows did not step through the graph
    assert page.evaluate("() => document.activeElement.closest('li').dataset.row") == fold
  assert page.evaluate("() => window.__viz.state.step") == step


def test_a_deep_link_into_a_collapsed_schedule_shows_its_kernel(new_page, server, traces):
  t = traces["gpt"]
  ctxs = server.api(f"/api/traces/{t}/contexts")
  made_by = _made_by(ctxs)
  sizes = {s: list(made_by.values()).count(s) for s in set(made_by.values())}
  big = [s for s, n in sizes.items() if n > 8]  # a schedule of more than 8 kernels starts collapsed
  kernel = next(k for k, s in made_by.items() if s == big[0])
  sched = f"#contexts li[data-row='{big[0]}']"
  page = new_page()
  open_page(page, server, f"#t={t}")
  page.wait_for_selector(f"{sched}[aria-expanded='false']")
  assert not page.query_selector(f"#contexts li[data-ctx='{kernel}']")
  linked = new_page()
  open_page(linked, server, f"#t={t}&c={kernel}")
  row = linked.wait_for_selector(f"#contexts li[data-ctx='{kernel}'].selected")
  linked.wait_for_function("(k) => window.__viz.state.ctx === k", arg=kernel)
  assert row.is_visible() and linked.get_attribute(sched, "aria-expanded") == "true"
  assert row.get_attribute("aria-level") == str(int(linked.get_attribute(sched, "aria-level")) + 1)


def test_the_transformer_sidebar_is_a_fraction_of_the_flat_list(page, server, traces):
  t = traces["gpt"]
  ctxs = server.api(f"/api/traces/{t}/contexts")
  flat = len([c for c in ctxs if not (c["kind"] == "default" and not c["rewrites"])])  # the rows the list had
  assert flat > 500
  open_page(page, server, f"#t={t}")
  page.wait_for_selector("#contexts li[data-fold]")
  rows = page.eval_on_selector_all(ROWS, "els => els.length")
  height, row = page.evaluate("""() => { const el = document.querySelector('#contexts');
    return [el.scrollHeight, el.querySelector('li[data-row]').getBoundingClientRect().height]; }""")
  # 538 contexts: 35 parameter inits (a schedule and its kernel each, open), the step's schedules of 230 kernels
  # (closed) and its jit replays (one row): 75 rows
  assert rows * 5 < flat and height < flat * row / 5, (rows, flat, height, row)
  texts = [r["text"] for r in _rows(page)]
  assert any("jit replay" in x and "×" in x for x in texts)  # the replays of the step: one row


def test_the_live_feed_puts_new_kernels_under_their_schedule(page, server):
  path = server.dir / "tree-live.vztrace"
  proc = subprocess.Popen([sys.executable, str(TRACEGEN), "live", str(path), "4", "-"], cwd=ROOT,
                          stdin=subprocess.PIPE)
  try:
    t = server.trace_id(path.name)
    open_page(page, server, f"#t={t}")
    page.wait_for_selector("#contexts li[title$=': live_kernel_0']")
    page.evaluate("() => { for (const li of document.querySelectorAll('#contexts li')) li.dataset.seen = 'yes'; }")
    open_gate(proc)
    assert proc.wait(60) == 0
    page.wait_for_selector("#contexts li[title$=': live_kernel_3']", timeout=60_000)
    got = page.eval_on_selector_all(ROWS, """els => els.map(e => [e.title.split(': ')[1], e.getAttribute('aria-level'),
      e.dataset.seen || ''])""")
    assert [(n, lvl) for n, lvl, _ in got] == [("schedule live", "1")] + [(f"live_kernel_{i}", "2") for i in range(4)]
    # the rows there before stay the same elements; only the new kernels were made
    assert [seen for n, _, seen in got if n in ("schedule live", "live_kernel_0")] == ["yes", "yes"]
    assert not any(seen for n, _, seen in got if n in ("live_kernel_2", "live_kernel_3"))
  finally:
    stop_writer(proc)


def _run_later() -> None:
  """Two schedules made, then the second's kernels run before the first's: by order all four sit under the second."""
  from compiler.realize import run_schedule
  from compiler.tensor import Tensor
  x = Tensor(np.arange(32, dtype=np.float32).reshape(4, 8))
  first, second = (x * 2).softmax().schedule(), (x + 1).exp().sum(0).schedule()
  run_schedule(second)
  run_schedule(first)


def test_kernels_sit_under_the_schedule_they_name(page, server):
  t = server.trace_id(_record(server.dir / "tree-later.vztrace", _run_later).name, ended=True)
  ctxs = server.api(f"/api/traces/{t}/contexts")
  scheds = [c["id"] for c in ctxs if c["kind"] == "schedule"]
  kernels = [c for c in ctxs if c["kind"] == "kernel"]
  assert len(scheds) == 2 and all(k["parent"] == ctxs[0]["id"] for k in kernels)
  by_link = {s: [k["id"] for k in kernels if k["schedule"] == s] for s in scheds}
  assert by_link[scheds[0]] and by_link[scheds[1]] and kernels[0]["id"] in by_link[scheds[1]]  # run in that order
  open_page(page, server, f"#t={t}")
  page.wait_for_selector(f"{ROWS}[data-ctx='{kernels[-1]['id']}']")
  want = [(s, 1) if i == 0 else (k, 2) for s in scheds for i, k in enumerate([None, *by_link[s]])]
  assert [(r["ctx"], r["level"]) for r in _rows(page)] == want
