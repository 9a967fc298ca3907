"""An arrow step's cost on the page (issue 30: a step of a big rewrite renames ~2,000 rebuilt nodes and ~4,000 of their
in-edges in place): the view's edges are keyed by numbers made from their end and index (graphgeom.js edgeKey), no
string a key, and exactly, for ids past 2**40 (a replay's fresh ids) too; a node of many users lists each user once."""
from __future__ import annotations

from support.browser import open_rebuilt_chain, wait_graph

STEPS = 4

# every edge entry's key against the key of its data's ends, and their kinds; the fresh ids among the nodes
KEYS = """async () => {
  const {edgeKey} = await import("/static/graphgeom.js");
  const g = window.__viz.graph, es = [...g.edges];
  return {
    edges: es.length,
    numbers: es.filter(([k]) => typeof k === "number").length,
    mismatched: es.filter(([k, e]) => k !== edgeKey(e.d.src, e.d.dst, e.d.index)).length,
    distinct: new Set(es.map(([k]) => k)).size,
    fresh: [...g.nodes.keys()].filter((id) => id >= 2 ** 40).length,
  };
}"""
# edgeKey on ids past 2**40, several sources of one node, the same source twice, and an index past its span
EDGE_KEY = """async () => {
  const {edgeKey} = await import("/static/graphgeom.js");
  const big = 2 ** 40 + 12345, keys = [];
  for (const dst of [big, big + 1, 7, 8]) for (let i = 0; i < 9; i++) keys.push(edgeKey(1, dst, i));
  return {n: keys.length, distinct: new Set(keys).size, sameSrcFree: edgeKey(3, big, 2) === edgeKey(3, big, 2),
          past: typeof edgeKey(1, big, 8), huge: typeof edgeKey(1, 2 ** 52, 1)};
}"""
# each node's users as the view lists them against a plain count: each user once (a node may take a source twice),
# in node order
USERS = """() => {
  const g = window.__viz.graph, want = new Map();
  for (const [id, n] of g.nodes) for (const s of n.d.src || []) {
    if (!want.has(s)) want.set(s, []);
    if (!want.get(s).includes(id)) want.get(s).push(id);
  }
  g.usersCache = null;
  const got = g.users;
  let same = got.size === want.size;
  for (const [s, us] of want) same = same && JSON.stringify(got.get(s)) === JSON.stringify(us);
  return {same, users: got.size};
}"""


def test_steps_rekey_edges_by_number_exactly(page, rebuild_server):
  t = open_rebuilt_chain(page, rebuild_server)
  for k in range(1, STEPS + 1):
    page.keyboard.press("ArrowRight")
    wait_graph(page, t, 0, k)
    got = page.evaluate(KEYS)
    assert got["fresh"] >= 30, got  # the rebuilt chain: ids past 2**40, where dst * 2**20 was no longer exact
    assert got["edges"] >= 30 and got["numbers"] == got["edges"], got
    assert got["mismatched"] == 0 and got["distinct"] == got["edges"], got


def test_edge_keys_are_distinct_per_end_and_index(page, rebuild_server):
  open_rebuilt_chain(page, rebuild_server)
  got = page.evaluate(EDGE_KEY)
  assert got == {"n": 36, "distinct": 36, "sameSrcFree": True, "past": "string", "huge": "string"}


def test_users_list_each_user_once(page, rebuild_server):
  t = open_rebuilt_chain(page, rebuild_server)
  page.keyboard.press("ArrowRight")
  wait_graph(page, t, 0, 1)
  got = page.evaluate(USERS)
  assert got["same"] and got["users"] >= 30, got
