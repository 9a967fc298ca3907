"""The first view in one round trip: the page asks /api/boot and draws the graph from its answer (issue 18)."""
from __future__ import annotations

from support.browser import open_page, state, wait_graph

# every API fetch of the page, with whether a graph was on screen when it was asked (socket.io starts after the
# first view and does not use fetch)
LOG_FETCHES = """(() => {
  const f = window.fetch.bind(window);
  window.__fetches = [];
  window.fetch = (u, o) => {
    const path = new URL(String(u), location.href).pathname + new URL(String(u), location.href).search;
    if (path.startsWith("/api/")) window.__fetches.push([path, Boolean(document.body && document.body.dataset.graph)]);
    return f(u, o);
  };
})();"""


def _first_view(page, server, hash_: str) -> tuple[list[str], list[str]]:
  """Open the page at hash_: (API paths asked before the first graph was drawn, API requests the network saw)."""
  seen: list[str] = []
  page.on("request", lambda r: seen.append(r.url) if "/api/" in r.url else None)
  page.add_init_script(LOG_FETCHES)
  open_page(page, server, hash_)
  page.wait_for_function("() => document.body.dataset.graph")
  before = [p for p, drawn in page.evaluate("() => window.__fetches") if not drawn]
  return before, seen


def test_default_view_is_one_request(new_page, server):
  page = new_page()
  before, seen = _first_view(page, server, "")
  boot = server.api("/api/boot")
  wait_graph(page, boot["trace"], boot["rw"], 0)
  assert before == ["/api/boot?compact=1&pack=1"]
  assert sum("/api/boot" in u for u in seen) == 1  # boot.js asked it early; app.js took that answer
  page.wait_for_selector("#panel-summary .summary-phases")  # the landing view, drawn from the boot answer's summary
  assert boot["summary"] is not None and not any("/summary" in u for u in seen), seen
  s = state(page)
  assert (s["trace"], s["ctx"], s["rw"], s["step"]) == (boot["trace"], boot["ctx"], boot["rw"], 0)
  n = page.evaluate("() => window.__viz.graph.ids().length")
  assert n == len(boot["graph"]["nodes"]) > 0
  # the label metrics are the server's (it sizes the boxes), not a copy in the page
  want = {k: boot["metrics"][k] for k in ("line_h", "char_w", "pad_w", "max_arg_chars", "node_gap")}
  assert page.evaluate("() => window.__viz.labelMetrics()") == want


def test_deep_link_is_one_request(new_page, server):
  t = server.trace_id("demo.vztrace")
  kernel = next(c for c in server.api(f"/api/traces/{t}/contexts") if c["name"] == "E_32")
  rw = next(r for r in kernel["rewrites"] if r["name"] == "simplify")
  page = new_page()
  before, _ = _first_view(page, server, f"#t={t}&c={kernel['id']}&r={rw['id']}&s=2")
  wait_graph(page, t, rw["id"], 2)
  assert before == [f"/api/boot?t={t}&ctx={kernel['id']}&rw={rw['id']}&step=2&compact=1&pack=1"]
  # the steps came with it: the slider knows them without asking
  assert page.locator("#step-slider").get_attribute("max") == str(rw["matches"])


def test_neighbours_are_asked_after_the_first_graph_is_painted(new_page, server):
  """The prefetch of the first graph's neighbouring steps waits for the frame that shows it (their requests, and the
  layouts the server computes after them, took the CPU from drawing it on a 2-core machine)."""
  t = server.trace_id("demo.vztrace")
  kernel = next(c for c in server.api(f"/api/traces/{t}/contexts") if c["name"] == "E_32")
  rw = next(r for r in kernel["rewrites"] if r["name"] == "simplify")
  page = new_page()
  open_page(page, server, f"#t={t}&c={kernel['id']}&r={rw['id']}&s=2")
  wait_graph(page, t, rw["id"], 2)
  # a resource entry is added when its response has ended, so wait for both neighbours' entries, not the first one
  page.wait_for_function("() => window.__viz.perf.firstGraphMs !== null && ['to=1&', 'to=3&'].every((q) =>"
                         " performance.getEntriesByType('resource').some((e) => e.name.includes('/delta?')"
                         " && e.name.includes(q)))")
  asked = page.evaluate("() => performance.getEntriesByType('resource').filter((e) => e.name.includes('/delta?'))"
                        ".map((e) => [new URL(e.name).search, e.startTime])")
  painted = page.evaluate("() => window.__viz.perf.firstGraphMs")
  # (the step back says the page holds the routes it would bring back: the graph answer's removed_edges, StepMemo)
  assert {q for q, _ in asked} >= {"?from=2&to=1&compact=2&held=2", "?from=2&to=3&compact=2"}
  assert all(start >= painted for _, start in asked), (asked, painted)


def test_the_boot_request_is_sent_while_the_head_is_parsed(new_page, server):
  """boot.js asks /api/boot as the parser reaches it in <head> (a classic script that blocks the parser), not when
  the main thread is next free (as an async module it waited 60-200 ms for that on a loaded 2-core machine)."""
  page = new_page()
  page.add_init_script("""(() => {
    const f = window.fetch.bind(window);
    window.__bootAsked = [];
    window.fetch = (u, o) => {
      if (String(u).startsWith("/api/boot")) window.__bootAsked.push([document.readyState, document.body === null]);
      return f(u, o);
    };
  })();""")
  open_page(page, server, "")
  page.wait_for_function("() => document.body.dataset.graph")
  assert page.evaluate("() => window.__bootAsked") == [["loading", True]]
  assert page.evaluate("() => globalThis.tinyvizBoot") is None  # app.js took its answer
