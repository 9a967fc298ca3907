"""The graph view fetches the step it is told to show (static/graph.js's StepGraphView.show): updates run one at a
time so each delta applies to what is on screen, and emptying the graph stops an update still in flight."""
from __future__ import annotations

from support.browser import graph_ids, open_rewrite, wait_graph

# a page-side gate on /delta requests: window.__gate.open() lets the held ones (and later ones) through
GATE_DELTAS = """async () => {
  const api = (await import("/static/api.js")).api;
  api.forget();  // the neighbours' deltas the first view prefetched: asked again, through the gate
  const f = window.fetch;
  let open;
  const gate = new Promise((r) => { open = r; });
  window.__gate = {asked: 0, open: () => { window.fetch = f; open(); }};
  window.fetch = (u, o) => {
    if (!String(u).includes("/delta?")) return f(u, o);
    window.__gate.asked++;
    return gate.then(() => f(u, o));
  };
}"""


def test_steps_asked_in_a_burst_end_on_the_last_one(page, server):
  t, rw = open_rewrite(page, server, "demo.vztrace", "E_32", "simplify")
  n = rw["matches"]
  assert n >= 4
  page.evaluate(GATE_DELTAS)
  # every step asked while the first delta is held (a held arrow key): one update runs, the rest wait for it
  page.evaluate("(n) => { window.__stepping = []; for (let k = 1; k <= n; k++) "
                "window.__stepping.push(window.__viz.setStep(k)); }", n)
  assert page.evaluate("() => window.__gate.asked") == 1
  page.evaluate("() => { window.__gate.open(); return Promise.all(window.__stepping); }")
  wait_graph(page, t, rw["id"], n)
  want = server.api(f"/api/traces/{t}/rewrites/{rw['id']}/graph?step={n}")
  assert graph_ids(page) == {x["id"] for x in want["nodes"]}
  assert page.evaluate("() => window.__viz.perf.lastKind") == "delta"


def test_emptying_the_graph_stops_the_update_in_flight(page, server):
  t, rw = open_rewrite(page, server, "demo.vztrace", "E_32", "simplify")
  page.evaluate(GATE_DELTAS)
  page.evaluate("() => { window.__stepping = window.__viz.setStep(1); }")
  assert page.evaluate("() => window.__gate.asked") == 1
  # as the page does when a request of the view it goes to fails: the held delta must not draw over the message
  got = page.evaluate("""async () => {
    const g = window.__viz.graph, empty = document.querySelector("#graph-empty");
    g.clear("gone");
    window.__gate.open();
    await window.__stepping;
    return {graph: document.body.dataset.graph ?? null, shown: g.shown, nodes: g.ids().length,
            empty: empty.hidden ? null : empty.textContent};
  }""")
  assert got == {"graph": None, "shown": None, "nodes": 0, "empty": "gone"}
