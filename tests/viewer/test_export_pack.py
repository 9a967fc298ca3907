"""The export page's ports of server code against the Python they mirror, on real and generated inputs (node stands in
for the page: the scripts are plain script): the packed data (viz_server/export/pack.py) decodes to what collect() made
in the page's decoder (viz_server/export/unpack.js) and in the tests' (support/export_unpack.py); the page's structural
hash (hash.js) is diff.py's; its unified diff (diff.js) is diff.py's _unified (difflib's)."""
from __future__ import annotations

import base64
import copy
import hashlib
import json
import random
import subprocess
from pathlib import Path

import pytest
from support.export_unpack import unpack
from support.trace_tools_helpers import record_small

from viz_server.diff import _unified, structural_hashes, toposort
from viz_server.export.collect import collect
from viz_server.export.pack import FRESH_BASE, pack
from viz_server.export.page import BOOT, b85, payload, ui_module
from viz_server.offline import OfflineApi

ROOT = Path(__file__).resolve().parents[2]

FRESH = FRESH_BASE
JS = BOOT.parent  # (the page's scripts)


def as_json(data: dict) -> dict:
  """collect()'s data as JSON has it, with a step's `added` and `changed` as sets (the packing keeps node order)."""
  out = json.loads(json.dumps(data))
  for g in out["graphs"].values():
    for d in g["deltas"]:
      for k in ("added", "changed"):
        if isinstance(d.get(k), list):
          d[k] = sorted(d[k])
  return out


UNPACK = (JS / "unpack.js").read_text() + """
  let text = ""; process.stdin.on("data", (c) => { text += c; });
  process.stdin.on("end", () => process.stdout.write(JSON.stringify(tinyvizUnpack.unpack(JSON.parse(text)))));"""


def node_run(script: str, stdin: str) -> str:
  p = subprocess.run(["node", "-e", script], input=stdin, capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stderr
  return p.stdout


@pytest.fixture
def real_data(trace):
  path = record_small(trace)
  with OfflineApi(path) as api:
    return collect(api), path


def test_a_real_exports_data_decodes_to_what_collect_made(real_data):
  data, _ = real_data
  packed = json.loads(json.dumps(pack(data)))
  assert packed["format"] == 2 and "graphs" in packed and "deltas" in packed
  assert sum(len(g["deltas"]) for g in data["graphs"].values()) > 5
  assert as_json(unpack(packed)) == as_json(data)
  # the page's decoder gives the same (node stands in for the page: the decoder is plain script)
  assert as_json(json.loads(node_run(UNPACK, json.dumps(packed)))) == as_json(data)


def _one_rewrite(fresh_fields: list, nodes_added: list, step: dict) -> dict:
  statics = {"1": ["ADD", "int", "None", "ADD\nint", "alu", 40.0, 30.0, [], [], None],
             "2": ["MUL", "int", "None", "MUL\nint", "alu", 40.0, 30.0, [1], [], "m.py:3 f"]}  # (its user's line)
  g0 = {"step": 0, "nodes": [[1, 0.0, 0.0, 0], [2, 50.25, 10.0, 0]], "width": 90.0, "height": 40.0,
        "bent": [[0, 0], [3, 0, 1]]}  # (a route between two centers, and one with all its points)
  delta = {"from": 0, "to": 1, "nodes_added": nodes_added, "nodes_removed": [2], "nodes_moved": {},
           "edges_removed": [], "width": 90.0, "height": 40.0, "removed": None, "match": {"k": 1, "pattern": 0},
           **step}
  return {"format": 1, "trace": 0, "answers": {}, "nodes": {}, "redacted": [], "contexts_only": None,
          "statics": statics, "g0": [g0], "routes": [[[0.0, 0.0], [1e-7, 3.0]]],
          "graphs": {"7": {"g0": 0, "deltas": [delta], "fresh": {str(k): v for k, v in fresh_fields}}}}


@pytest.mark.parametrize("case", ["derived", "other fields", "odd lists"])
def test_what_a_step_does_not_repeat_is_rebuilt_and_anything_else_kept(case):
  # a replay-made node at node 2's place with its fields is derived from it, but for the call site: it has none
  same = ["MUL", "int", "None", "MUL\nint", "alu", 40.0, 30.0, [1], [], None]
  other = ["SUB", "int", "None", "SUB\nint", "alu", 41.5, 30.0, [1, 1], ["c"], None]
  fields = same if case == "derived" else other
  step = ({"added": [], "changed": [FRESH]} if case != "odd lists" else
          {"added": [FRESH, FRESH], "changed": [2]})  # (a repeat, and a node the step did not add: kept as they are)
  data = _one_rewrite([(FRESH, fields)], [[FRESH, 50.25, 10.0, 1], [3, 0.123456, 7.0, 4]], step)
  data["statics"]["3"] = same
  packed = json.loads(json.dumps(pack(data)))
  d = packed["deltas"]
  assert d["ref"] == [1, 0] and d["fd"] == [1 if case == "derived" else 0]
  assert d["cr"] == [[1, 4]] and d["ax"] == {"r": [0.123456]}  # created != step; x not in tenths
  assert packed["routes"]["x"] == {"r": [0.0, 1e-7]}
  assert ("added" in d["rest"][0]) == (case == "odd lists")
  assert as_json(unpack(packed)) == as_json(data)
  assert as_json(json.loads(node_run(UNPACK, json.dumps(packed)))) == as_json(data)  # and the page's decoder


def test_the_pages_structural_hash_is_diff_pys(real_data):
  _, path = real_data
  with OfflineApi(path) as api:
    tr = api.trace
    rw = max(tr.rewrites.values(), key=lambda r: len(toposort(r.root, tr.nodes.get)))
    order = toposort(rw.root, tr.nodes.get)
    want = structural_hashes(order, tr.nodes.get)
    nodes = {x: list(tr.nodes.get(x)) for x in order}
  odd = ["x\ud800y", "\u00e9\U0001F600" * 20, "z" * 300]  # a lone surrogate, 4-byte UTF-8, a multi-block input
  for i, arg in enumerate(odd):
    nodes[-1 - i] = ["CONST", "int", arg, [order[0]]]
  script = (JS / "hash.js").read_text() + """
    let text = ""; process.stdin.on("data", (c) => { text += c; });
    process.stdin.on("end", () => {
      const nodes = JSON.parse(text), hash = tinyvizHash.hasher((id) => nodes[id]);
      process.stdout.write(JSON.stringify(Object.keys(nodes).map((id) => [Number(id), hash(Number(id))])));
    });"""
  got = dict(json.loads(node_run(script, json.dumps(nodes))))
  assert len(got) == len(order) + len(odd)
  assert all(got[x] == want[x][:8] for x in order)
  for i, arg in enumerate(odd):
    h = hashlib.blake2b(digest_size=16)
    for part in ("CONST", "int", arg):
      b = part.encode("utf-8", "surrogatepass")
      h.update(len(b).to_bytes(8, "little") + b)
    h.update(bytes.fromhex(want[order[0]]))
    assert got[-1 - i] == h.hexdigest()[:8], arg


def test_the_embedded_block_is_the_packed_data_in_digits_a_page_need_not_escape(real_data):
  data, _ = real_data
  block = payload(copy.deepcopy(data), ui_module())
  for part in (block["data"], block["ui"]):
    assert set(part["data"]) <= set(boot_digits()) and not set(part["data"]) & set("<>&\"'\\`")
    assert len(part["data"]) == -(-part["n"] // 4) * 5


def test_the_digits_are_base64s_base85_with_the_pages_swaps():
  """page.b85 (numpy, on whole arrays) writes what base64.b85encode(pad=True) writes, with boot.js's four swaps: every
  length modulo 4, every byte value, the largest word, and zeros (which b85encode writes as 00000, not z)."""
  rng = random.Random(5)
  swaps = str.maketrans("&<>`", ",./:")
  cases = [bytes(rng.randrange(256) for _ in range(n)) for n in range(0, 41)]
  cases += [bytes(range(256)) * 3, b"\xff" * 12, bytes(13), bytes(rng.randrange(256) for _ in range(100_001))]
  for raw in cases:
    assert b85(raw) == base64.b85encode(raw, pad=True).decode().translate(swaps).encode(), len(raw)
  assert set(b85(bytes(range(256)) * 5).decode()) == set(boot_digits())


def boot_digits() -> str:
  js = BOOT.read_text()
  return js.split('const DIGITS = "', 1)[1].split('"', 1)[0]


def _line_lists(rng: random.Random) -> list[tuple[list[str], list[str]]]:
  """Pairs of line lists a diff meets: empty sides, equal ones, few distinct lines (repeats: many equal matches),
  edits far apart (several hunks), and 200+ lines with popular ones (difflib's autojunk)."""
  pairs: list[tuple[list[str], list[str]]] = [([], []), ([], ["x"]), (["x"], []), (["a", "b"], ["a", "b"])]
  for n, alphabet in ((5, "ab"), (12, "abc"), (30, "abcdef"), (60, "abcdefghij")):
    for _ in range(6):
      a = [rng.choice(alphabet) for _ in range(rng.randint(0, n))]
      b = [rng.choice(alphabet) for _ in range(rng.randint(0, n))]
      pairs.append((a, b))
  for _ in range(4):  # one long graph printed twice, edited in a few far-apart places
    a = [f"line {rng.randint(0, 40)}" for _ in range(80)]
    b = list(a)
    for _ in range(3):
      at = rng.randrange(len(b))
      b[at:at + rng.randint(0, 2)] = [f"new {rng.randint(0, 9)}"] * rng.randint(0, 2)
    pairs.append((a, b))
  for _ in range(4):  # b of 200+ lines, a few of them in more than 1% of it
    b = [rng.choice(["CONST", "ADD", f"u{rng.randint(0, 400)}"]) for _ in range(rng.randint(200, 320))]
    a = [x for x in b if rng.random() > 0.1] + ["ADD", "tail"]
    pairs.append((a, b))
  return pairs


def test_the_pages_unified_diff_is_diff_pys_on_generated_lines():
  pairs = _line_lists(random.Random(28))
  script = (JS / "diff.js").read_text() + """
    let text = ""; process.stdin.on("data", (c) => { text += c; });
    process.stdin.on("end", () => process.stdout.write(JSON.stringify(
      JSON.parse(text).map(([a, b]) => tinyvizDiff.unifiedLines(a, b)))));"""
  got = json.loads(node_run(script, json.dumps(pairs)))
  want = [_unified(a, b, "a", "b", 3)[1] for a, b in pairs]
  assert sum(1 for w in want if len([x for x in w if x["kind"] == "@"]) > 1) >= 2  # (several hunks are made)
  for (a, b), g, w in zip(pairs, got, want):
    assert g == w, (a, b)
