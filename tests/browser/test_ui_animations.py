"""The page's CSS animations move only what the compositor can animate on its own (transform, opacity): one of a
layout property (`left`, `width`, ...) costs the main thread a style, layout and paint every frame it runs, which on
a 2-core machine is taken from the server computing what the page waits for (issue 18)."""
from __future__ import annotations

from support.browser import open_page

COMPOSITED = {"transform", "opacity"}

# every animation running on the page: its name and the properties its keyframes set
RUNNING = """() => document.getAnimations().map((a) => [a.animationName || a.id,
  [...new Set(a.effect.getKeyframes().flatMap((k) => Object.keys(k)))]
    .filter((p) => !["offset", "easing", "composite", "computedOffset"].includes(p))])"""


def test_loading_and_live_animations_are_composited(page, server):
  open_page(page, server)
  page.wait_for_function("() => document.body.dataset.graph")
  # the graph's loading bar and the live badge, as while a graph loads from a live trace
  page.evaluate("() => { document.querySelector('#graph-wrap').classList.add('loading');"
                " const b = document.querySelector('#trace-status'); b.hidden = false;"
                " b.className = 'badge status-live'; }")
  page.wait_for_function("() => document.getAnimations().length >= 2")
  running = page.evaluate(RUNNING)
  assert {name for name, _ in running} >= {"load", "pulse"}
  for name, props in running:
    assert props and set(props) <= COMPOSITED, (name, props)
